// Package mail is the e-mail channel. Its protocol half polls the bot's IMAP
// inbox for unseen messages, parses them into bounded, sanitised Message
// values, submits threaded replies and other mail over SMTP, and renders a
// message for a prompt as fenced, untrusted content. Its channel half
// (Intake, Outbox, the email skill) turns mail from known users into tasks,
// mails their answers durably and records every message sent.
//
// Only the channel half decides who may trigger work: Intake matches the
// From address against the addresses users registered and ignores everything
// else. Mail content is attacker-controlled by default, so every value here
// is bounded in size and stripped of control characters before it leaves the
// package, and SPF/DKIM checks are left to the mail server that delivers to
// the bot's inbox.
package mail

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	// go-message decodes only UTF-8 and US-ASCII unless a charset reader is
	// registered; ISO-8859-x and Windows code pages are common in real mail.
	_ "github.com/emersion/go-message/charset"
)

// TLSMode selects how a connection to the mail server is secured.
type TLSMode string

const (
	// TLSImplicit wraps the connection in TLS from the first byte (IMAPS 993,
	// SMTPS/submissions 465).
	TLSImplicit TLSMode = "implicit"
	// TLSStartTLS upgrades a plain connection with STARTTLS (IMAP 143,
	// submission 587) and fails if the server does not offer it.
	TLSStartTLS TLSMode = "starttls"
	// TLSNone sends credentials in clear text; it is accepted only for a
	// loopback address (a local relay or a test server).
	TLSNone TLSMode = "none"
)

// ErrHeaderInjection is returned when a value meant for a single header line
// contains CR or LF (or another control character), which would let content
// forge additional headers or recipients.
var ErrHeaderInjection = errors.New("mail: control character in header value")

// ErrInvalid is returned for a message that cannot be sent as given (no or
// an unparseable recipient, a malformed message id); retrying cannot help.
var ErrInvalid = errors.New("mail: invalid message")

// Address is one mailbox: an optional display name and the addr-spec.
type Address struct {
	Name  string
	Email string
}

// String formats the address for display (not for a header).
func (a Address) String() string {
	if a.Name == "" {
		return a.Email
	}
	return a.Name + " <" + a.Email + ">"
}

// UID identifies a message in the polled mailbox. A UID is only meaningful
// together with the mailbox's UIDVALIDITY: if the server renumbers the
// mailbox, old UIDs may point at different messages.
type UID struct {
	Validity uint32
	Num      uint32
}

// Attachment is one non-text part of a message, fully read into memory (the
// whole message is bounded by Options.MaxMessageBytes).
type Attachment struct {
	// Filename is a sanitised base name, safe to join under a directory.
	Filename    string
	ContentType string
	Size        int64
	Content     []byte
}

// Message is a parsed incoming e-mail. All strings are valid UTF-8 without
// control characters (the body keeps newlines and tabs).
type Message struct {
	// UID is set by Poller.Fetch; zero for Parse.
	UID UID
	// Key is the idempotency key: the Message-ID, or a hash of the main
	// headers when the message has none.
	Key string
	// MessageID, InReplyTo and References hold msg-ids without angle
	// brackets.
	MessageID  string
	InReplyTo  string
	References []string
	From       Address
	To         []Address
	Cc         []Address
	Subject    string
	Date       time.Time
	// Text is the text/plain body, or the text/html body converted to plain
	// text when the message has no plain part (FromHTML is then true).
	Text        string
	FromHTML    bool
	Attachments []Attachment
	// AutoSubmitted is true for machine-sent mail (Auto-Submitted other
	// than "no", X-Autoreply, Precedence bulk/auto_reply): vacation
	// notices and bounces, which the caller should not answer, or the bot
	// and a responder would mail each other forever (RFC 3834).
	AutoSubmitted bool
	// Bounce is true for a delivery status notification (a multipart/report
	// body, an empty Return-Path or a MAILER-DAEMON sender). Answering one
	// would mail a machine, or bounce back and forth.
	Bounce bool
	// Notes lists what was dropped or could not be decoded (a truncated
	// body, an attachment over the limit, a malformed part), for logs.
	Notes []string
	// Skipped is non-empty when the message was not downloaded or could not
	// be parsed (for example "too large: 30000000 bytes > 10485760"). Only
	// the envelope fields are then set; the caller should still MarkSeen it,
	// or it is offered again on every poll.
	Skipped string
	// Size is the message size in bytes as reported by the server (Fetch)
	// or the raw length (Parse).
	Size int64
}

// checkTransport refuses clear-text connections to anything but loopback,
// because they would expose the mailbox password on the network.
func checkTransport(addr string, mode TLSMode) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("mail: address %q must be host:port: %w", addr, err)
	}
	switch mode {
	case TLSImplicit, TLSStartTLS:
		return nil
	case TLSNone:
		if host == "localhost" {
			return nil
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			return nil
		}
		return fmt.Errorf("mail: tls mode %q is only allowed for a loopback address, not %q", mode, host)
	default:
		return fmt.Errorf("mail: unknown tls mode %q (want implicit, starttls or none)", mode)
	}
}

// tlsConfigFor returns a copy of base with ServerName defaulted to the host
// of addr, so certificate verification is never silently disabled.
func tlsConfigFor(base *tls.Config, addr string) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		cfg = base.Clone()
	}
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg.ServerName = host
	}
	return cfg
}

// dial opens a TCP connection (wrapped in TLS for TLSImplicit) that honours
// ctx for the connect and handshake.
func dial(ctx context.Context, addr string, mode TLSMode, base *tls.Config) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if mode != TLSImplicit {
		return conn, nil
	}
	tc := tls.Client(conn, tlsConfigFor(base, addr))
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	return tc, nil
}

// checkHeaderValue refuses values that could break out of a header line.
func checkHeaderValue(field, v string) error {
	for _, r := range v {
		if r == '\r' || r == '\n' || (r < 0x20 && r != '\t') || r == 0x7f {
			return fmt.Errorf("%s: %w", field, ErrHeaderInjection)
		}
	}
	return nil
}

// oneLine makes an untrusted header value safe to show on a single line.
func oneLine(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\r' || r == '\n':
			return ' '
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			return -1
		case r == '\u2028' || r == '\u2029':
			return ' '
		}
		return r
	}, s)
}
