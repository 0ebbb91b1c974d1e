package mail

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	gomail "github.com/emersion/go-message/mail"
	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// SenderOptions configures a Sender.
type SenderOptions struct {
	// Addr is host:port of the submission server.
	Addr string
	// User and Password authenticate with AUTH PLAIN; an empty User skips
	// AUTH (a local relay).
	User     string
	Password string
	// From is the bot's address, optionally with a display name
	// ("Istota <bot@example.org>"). Its domain names new Message-IDs.
	From string
	// TLS is implicit (465), starttls (587) or none (loopback only).
	TLS       TLSMode
	TLSConfig *tls.Config
	// Timeout bounds one send including connect (default 2m).
	Timeout time.Duration
	// Now returns the time for the Date header (default time.Now).
	Now func() time.Time
}

// Outgoing is a message the agent sends through the email skill.
type Outgoing struct {
	// To holds one or more addresses ("a@b" or "Name <a@b>").
	To      []string
	Subject string
	Body    string
	// InReplyTo, when set, threads the message under that msg-id (with or
	// without angle brackets).
	InReplyTo string
	// References are the ancestors for threading, oldest first; InReplyTo
	// is appended when missing.
	References []string
	// MessageID, when set, is used instead of a new one (see NewMessageID):
	// a durable outbox chooses the id when it stores the message, so that a
	// resend after a crash carries the same id and receivers can recognise
	// the duplicate.
	MessageID string
}

// Validate checks what Send would refuse before any connection is made: a
// missing or unparseable recipient, a control character in a header value
// (ErrHeaderInjection) or a malformed message id (ErrInvalid). A durable
// outbox calls it before storing a message, so a message that can never be
// sent is refused at once rather than retried.
func (out Outgoing) Validate() error {
	if len(out.To) == 0 {
		return fmt.Errorf("%w: no recipient", ErrInvalid)
	}
	if err := checkHeaderValue("subject", out.Subject); err != nil {
		return err
	}
	for _, t := range out.To {
		if err := checkHeaderValue("to", t); err != nil {
			return err
		}
		list, err := gomail.ParseAddressList(t)
		if err != nil || len(list) == 0 {
			return fmt.Errorf("%w: recipient %q", ErrInvalid, oneLine(t))
		}
		for _, a := range list {
			if err := checkHeaderValue("to", a.Address); err != nil {
				return err
			}
		}
	}
	if _, err := cleanMsgID("in-reply-to", out.InReplyTo); err != nil {
		return err
	}
	for _, r := range out.References {
		if _, err := cleanMsgID("references", r); err != nil {
			return err
		}
	}
	if out.MessageID != "" {
		if id, err := cleanMsgID("message-id", out.MessageID); err != nil || id == "" {
			return fmt.Errorf("%w: message id %q", ErrInvalid, oneLine(out.MessageID))
		}
	}
	return nil
}

// Sender submits mail over SMTP. Each send uses its own connection, so a
// Sender is safe for concurrent use.
type Sender struct {
	opts   SenderOptions
	from   *gomail.Address
	domain string
	log    *slog.Logger
}

// NewSender validates opts and returns a Sender.
func NewSender(opts SenderOptions, log *slog.Logger) (*Sender, error) {
	if err := checkTransport(opts.Addr, opts.TLS); err != nil {
		return nil, fmt.Errorf("smtp: %w", err)
	}
	if err := checkHeaderValue("from", opts.From); err != nil {
		return nil, fmt.Errorf("smtp: %w", err)
	}
	from, err := gomail.ParseAddress(opts.From)
	if err != nil {
		return nil, fmt.Errorf("smtp: from address %q: %w", opts.From, err)
	}
	at := strings.LastIndexByte(from.Address, '@')
	if at < 1 || at == len(from.Address)-1 {
		return nil, fmt.Errorf("smtp: from address %q has no domain", opts.From)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sender{opts: opts, from: from, domain: from.Address[at+1:], log: log}, nil
}

// Reply answers orig in its thread: to the original sender (never to a
// Reply-To, so a forged header cannot redirect a user's answer elsewhere),
// with "Re: " prefixed once, In-Reply-To set to the original Message-ID and
// References extended with it. It returns the new Message-ID (without angle
// brackets).
func (s *Sender) Reply(ctx context.Context, orig Message, body string) (string, error) {
	if orig.From.Email == "" {
		return "", errors.New("smtp reply: original message has no sender address")
	}
	to := (&gomail.Address{Name: orig.From.Name, Address: orig.From.Email}).String()
	refs := orig.References
	// RFC 5322 3.6.4: without References, the parent's single In-Reply-To
	// stands in for them.
	if len(refs) == 0 && orig.InReplyTo != "" {
		refs = []string{orig.InReplyTo}
	}
	return s.Send(ctx, Outgoing{
		To:         []string{to},
		Subject:    ReplySubject(orig.Subject),
		Body:       body,
		InReplyTo:  orig.MessageID,
		References: refs,
	})
}

// ReplySubject prefixes "Re: " once, removing any stack of existing reply
// prefixes ("Re: RE: Aw: x" becomes "Re: x").
func ReplySubject(subject string) string {
	s := strings.TrimSpace(oneLine(subject))
	for {
		trimmed := s
		for _, p := range []string{"re:", "aw:", "sv:", "antw:"} {
			if len(trimmed) >= len(p) && strings.EqualFold(trimmed[:len(p)], p) {
				trimmed = strings.TrimSpace(trimmed[len(p):])
				break
			}
		}
		if trimmed == s {
			break
		}
		s = trimmed
	}
	if s == "" {
		s = "(no subject)"
	}
	return "Re: " + s
}

// NewMessageID returns a fresh random Message-ID (without angle brackets) in
// the domain of the bot's address.
func (s *Sender) NewMessageID() string {
	var rnd [16]byte
	// crypto/rand.Read never returns an error on supported platforms.
	_, _ = rand.Read(rnd[:])
	return hex.EncodeToString(rnd[:]) + "@" + s.domain
}

// Address is the bot's own address (without display name).
func (s *Sender) Address() string { return s.from.Address }

// Send submits a plain-text UTF-8 message and returns its Message-ID
// (without angle brackets). Any header value containing CR, LF or another
// control character is refused with ErrHeaderInjection; any other message
// that cannot be built is refused with an error matching ErrInvalid.
func (s *Sender) Send(ctx context.Context, out Outgoing) (string, error) {
	raw, rcpts, id, err := s.build(out)
	if err != nil {
		return "", err
	}
	if err := s.submit(ctx, rcpts, raw); err != nil {
		return "", err
	}
	s.log.Info("mail sent", "message_id", id, "recipients", len(rcpts))
	return id, nil
}

// build renders the message; it is separate from submit so header checks
// are testable without a server.
func (s *Sender) build(out Outgoing) (raw []byte, rcpts []string, id string, err error) {
	if len(out.To) == 0 {
		return nil, nil, "", fmt.Errorf("smtp send: %w: no recipient", ErrInvalid)
	}
	if err := checkHeaderValue("subject", out.Subject); err != nil {
		return nil, nil, "", fmt.Errorf("smtp send: %w", err)
	}
	var to []*gomail.Address
	for _, t := range out.To {
		if err := checkHeaderValue("to", t); err != nil {
			return nil, nil, "", fmt.Errorf("smtp send: %w", err)
		}
		list, err := gomail.ParseAddressList(t)
		if err != nil || len(list) == 0 {
			return nil, nil, "", fmt.Errorf("smtp send: %w: recipient %q", ErrInvalid, t)
		}
		for _, a := range list {
			if err := checkHeaderValue("to", a.Address); err != nil {
				return nil, nil, "", fmt.Errorf("smtp send: %w", err)
			}
			to = append(to, a)
			rcpts = append(rcpts, a.Address)
		}
	}
	inReplyTo, err := cleanMsgID("in-reply-to", out.InReplyTo)
	if err != nil {
		return nil, nil, "", fmt.Errorf("smtp send: %w", err)
	}
	var refs []string
	for _, r := range out.References {
		id, err := cleanMsgID("references", r)
		if err != nil {
			return nil, nil, "", fmt.Errorf("smtp send: %w", err)
		}
		if id != "" {
			refs = append(refs, id)
		}
	}
	if inReplyTo != "" && (len(refs) == 0 || refs[len(refs)-1] != inReplyTo) {
		refs = append(refs, inReplyTo)
	}

	id = s.NewMessageID()
	if out.MessageID != "" {
		if id, err = cleanMsgID("message-id", out.MessageID); err != nil || id == "" {
			return nil, nil, "", fmt.Errorf("smtp send: %w: message id %q", ErrInvalid, out.MessageID)
		}
	}

	var h gomail.Header
	h.SetDate(s.opts.Now())
	h.SetAddressList("From", []*gomail.Address{s.from})
	h.SetAddressList("To", to)
	h.SetSubject(out.Subject)
	h.SetMessageID(id)
	if inReplyTo != "" {
		h.SetMsgIDList("In-Reply-To", []string{inReplyTo})
	}
	if len(refs) > 0 {
		h.SetMsgIDList("References", refs)
	}
	h.Set("MIME-Version", "1.0")
	// RFC 3834: marks the mail as machine-sent so vacation responders do
	// not answer it and start a loop with the bot.
	if inReplyTo != "" {
		h.Set("Auto-Submitted", "auto-replied")
	} else {
		h.Set("Auto-Submitted", "auto-generated")
	}
	h.SetContentType("text/plain", map[string]string{"charset": "utf-8"})
	h.Set("Content-Transfer-Encoding", "quoted-printable")

	var buf bytes.Buffer
	w, err := gomail.CreateSingleInlineWriter(&buf, h)
	if err != nil {
		return nil, nil, "", fmt.Errorf("smtp send: write header: %w", err)
	}
	body := strings.ReplaceAll(strings.ToValidUTF8(out.Body, "\uFFFD"), "\r\n", "\n")
	if _, err := w.Write([]byte(body)); err != nil {
		return nil, nil, "", fmt.Errorf("smtp send: write body: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, nil, "", fmt.Errorf("smtp send: write body: %w", err)
	}
	return buf.Bytes(), rcpts, id, nil
}

// cleanMsgID accepts "<id@host>" or "id@host" and returns the bare id.
func cleanMsgID(field, v string) (string, error) {
	if err := checkHeaderValue(field, v); err != nil {
		return "", err
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	v = strings.TrimSuffix(strings.TrimPrefix(v, "<"), ">")
	if !validMsgID(v) {
		return "", fmt.Errorf("%s: %w: message id %q", field, ErrInvalid, v)
	}
	return v, nil
}

// submit delivers raw to rcpts over one SMTP connection.
func (s *Sender) submit(ctx context.Context, rcpts []string, raw []byte) error {
	return s.session(ctx, func(ctx context.Context, c *smtp.Client) error {
		if err := c.Mail(s.from.Address, nil); err != nil {
			return fmt.Errorf("smtp mail from: %w", ctxErr(ctx, err))
		}
		for _, r := range rcpts {
			if err := c.Rcpt(r, nil); err != nil {
				return fmt.Errorf("smtp rcpt to %q: %w", r, ctxErr(ctx, err))
			}
		}
		wc, err := c.Data()
		if err != nil {
			return fmt.Errorf("smtp data: %w", ctxErr(ctx, err))
		}
		if _, err := wc.Write(raw); err != nil {
			wc.Close()
			return fmt.Errorf("smtp data: %w", ctxErr(ctx, err))
		}
		if err := wc.Close(); err != nil {
			return fmt.Errorf("smtp data: %w", ctxErr(ctx, err))
		}
		return nil
	})
}

// Check connects, greets and authenticates without sending anything, for
// `istota doctor`.
func (s *Sender) Check(ctx context.Context) error {
	return s.session(ctx, func(context.Context, *smtp.Client) error { return nil })
}

// session connects, greets, authenticates, runs fn and quits.
func (s *Sender) session(ctx context.Context, fn func(ctx context.Context, c *smtp.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	conn, err := dial(ctx, s.opts.Addr, s.opts.TLS, s.opts.TLSConfig)
	if err != nil {
		return fmt.Errorf("smtp connect %s: %w", s.opts.Addr, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if deadline, ok := ctx.Deadline(); ok {
		// Belt and braces next to AfterFunc: a stuck write also ends.
		_ = conn.SetDeadline(deadline)
	}

	var c *smtp.Client
	if s.opts.TLS == TLSStartTLS {
		// go-smtp greets as "localhost" here: its STARTTLS path does not
		// take a host name, which submission servers accept.
		c, err = smtp.NewClientStartTLS(conn, tlsConfigFor(s.opts.TLSConfig, s.opts.Addr))
		if err != nil {
			return fmt.Errorf("smtp starttls %s: %w", s.opts.Addr, ctxErr(ctx, err))
		}
	} else {
		c = smtp.NewClient(conn)
		if err := c.Hello(s.domain); err != nil {
			c.Close()
			return fmt.Errorf("smtp ehlo: %w", ctxErr(ctx, err))
		}
	}
	defer c.Close()
	if s.opts.User != "" {
		if err := c.Auth(sasl.NewPlainClient("", s.opts.User, s.opts.Password)); err != nil {
			return fmt.Errorf("smtp auth as %q: %w", s.opts.User, ctxErr(ctx, err))
		}
	}
	if err := fn(ctx, c); err != nil {
		return err
	}
	if err := c.Quit(); err != nil {
		// A message was accepted at the end of DATA; a failed QUIT does
		// not un-send it.
		s.log.Debug("smtp quit failed", "err", err)
	}
	return nil
}

// IsPermanent reports whether a Send error cannot go away by retrying: the
// message itself is invalid (ErrInvalid, ErrHeaderInjection) or the server
// refused it for good (a 5xx reply). Authentication failures (530, 534, 535)
// are not permanent: they are the admin's configuration to fix, after which
// the message should still go out.
func IsPermanent(err error) bool {
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrHeaderInjection) {
		return true
	}
	var se *smtp.SMTPError
	if errors.As(err, &se) {
		switch se.Code {
		case 530, 534, 535, 538:
			return false
		}
		return se.Code >= 500 && se.Code < 600
	}
	return false
}
