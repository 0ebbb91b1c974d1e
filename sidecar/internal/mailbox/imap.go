package mailbox

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"

	"github.com/istota/istota/sidecar/internal/mail"
	"github.com/istota/istota/sidecar/internal/safedial"
)

// Defaults of ClientOptions.
const (
	DefaultTimeout         = 45 * time.Second
	DefaultMaxMessageBytes = 2 << 20
	maxFolders             = 200
	maxSearchResults       = 100
)

// Dialer opens TCP connections; *safedial.Dialer is the one the sidecar uses.
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// ClientOptions configure a Client.
type ClientOptions struct {
	// Dialer connects to the user's server; default a safedial.Dialer that allows
	// nothing private. Pass one with network.allow_private.
	Dialer Dialer
	// TLSConfig is the base TLS configuration (tests trust their own CA with it); the
	// server name is always the account's host.
	TLSConfig *tls.Config
	// Timeout bounds one session, from connect to logout; default DefaultTimeout.
	Timeout time.Duration
	// MaxMessageBytes bounds what Read downloads of one message; a larger message is
	// read up to this size and marked truncated. Default DefaultMaxMessageBytes.
	MaxMessageBytes int64
	Logger          *slog.Logger
}

// Client talks IMAP to users' own servers. Each call opens its own connection, logs
// in, works read-only (EXAMINE, BODY.PEEK: nothing is marked read) and logs out, so a
// Client holds no connection and is safe for concurrent use.
type Client struct {
	opts ClientOptions
}

// NewClient returns a Client.
func NewClient(opts ClientOptions) *Client {
	if opts.Dialer == nil {
		opts.Dialer = &safedial.Dialer{}
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Client{opts: opts}
}

// Folder is one mailbox folder.
type Folder struct {
	Name     string `json:"name"`
	Messages int    `json:"messages"`
	Unseen   int    `json:"unseen"`
	// Use is the special use the server announces (sent, drafts, trash, junk,
	// archive, all, flagged), or "".
	Use string `json:"use,omitempty"`
}

// Summary is one message as a search lists it.
type Summary struct {
	Folder  string    `json:"folder"`
	UID     uint32    `json:"uid"`
	From    string    `json:"from"`
	Subject string    `json:"subject"`
	Date    time.Time `json:"date"` // when the server received it (INTERNALDATE)
	Unseen  bool      `json:"unseen"`
	Size    int64     `json:"size"`
}

// Query is what Search looks for; zero fields do not restrict.
type Query struct {
	Folder  string // default INBOX
	From    string
	Subject string
	Text    string // anywhere in the header or body
	Since   time.Time
	Before  time.Time
	Unseen  bool
	Limit   int // newest first; default 20, at most maxSearchResults
}

// Message is one message as Read returns it.
type Message struct {
	Folder      string       `json:"folder"`
	UID         uint32       `json:"uid"`
	From        string       `json:"from"`
	To          []string     `json:"to,omitempty"`
	Cc          []string     `json:"cc,omitempty"`
	Subject     string       `json:"subject"`
	Date        time.Time    `json:"date"`
	MessageID   string       `json:"message_id,omitempty"`
	Unseen      bool         `json:"unseen"`
	Size        int64        `json:"size"`
	Text        string       `json:"text"`
	FromHTML    bool         `json:"from_html,omitempty"`
	Attachments []Attachment `json:"attachments,omitempty"`
	// Truncated is set when the message was larger than the client reads; only its
	// first Read bytes were parsed.
	Truncated bool  `json:"truncated,omitempty"`
	Read      int64 `json:"read_bytes"`
}

// Attachment names one attachment; its content is never returned.
type Attachment struct {
	Name        string `json:"name"`
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
}

// Inbox is what Check reports.
type Inbox struct {
	Messages int
	Unseen   int
}

// Check logs in and reads the inbox's counts: the "Test connection" of the page.
func (c *Client) Check(ctx context.Context, a Account, password string) (Inbox, error) {
	var in Inbox
	err := c.session(ctx, a, password, func(ic *imapclient.Client) error {
		st, err := ic.Status("INBOX", &imap.StatusOptions{NumMessages: true, NumUnseen: true}).Wait()
		if err != nil {
			return folderErr("INBOX", err)
		}
		in.Messages, in.Unseen = count(st.NumMessages), count(st.NumUnseen)
		return nil
	})
	return in, err
}

// Folders lists the account's folders with their message counts.
func (c *Client) Folders(ctx context.Context, a Account, password string) ([]Folder, error) {
	var out []Folder
	err := c.session(ctx, a, password, func(ic *imapclient.Client) error {
		list, err := ic.List("", "*", nil).Collect()
		if err != nil {
			return fmt.Errorf("list folders: %w", err)
		}
		for _, l := range list {
			if len(out) == maxFolders {
				break
			}
			if slices.Contains(l.Attrs, imap.MailboxAttrNoSelect) || slices.Contains(l.Attrs, imap.MailboxAttrNonExistent) {
				continue
			}
			f := Folder{Name: clean(l.Mailbox, 200), Use: specialUse(l.Attrs)}
			if st, err := ic.Status(l.Mailbox, &imap.StatusOptions{NumMessages: true, NumUnseen: true}).Wait(); err == nil {
				f.Messages, f.Unseen = count(st.NumMessages), count(st.NumUnseen)
			}
			out = append(out, f)
		}
		return nil
	})
	slices.SortStableFunc(out, func(x, y Folder) int {
		// The inbox first, then by name.
		if (x.Name == "INBOX") != (y.Name == "INBOX") {
			if x.Name == "INBOX" {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Name, y.Name)
	})
	return out, err
}

// Search returns the newest messages of a folder that match q, and how many matched.
func (c *Client) Search(ctx context.Context, a Account, password string, q Query) ([]Summary, int, error) {
	if q.Folder == "" {
		q.Folder = "INBOX"
	}
	if q.Limit <= 0 {
		q.Limit = 20
	}
	q.Limit = min(q.Limit, maxSearchResults)
	crit := &imap.SearchCriteria{Since: q.Since, Before: q.Before}
	if q.From != "" {
		crit.Header = append(crit.Header, imap.SearchCriteriaHeaderField{Key: "From", Value: q.From})
	}
	if q.Subject != "" {
		crit.Header = append(crit.Header, imap.SearchCriteriaHeaderField{Key: "Subject", Value: q.Subject})
	}
	if q.Text != "" {
		crit.Text = []string{q.Text}
	}
	if q.Unseen {
		crit.NotFlag = []imap.Flag{imap.FlagSeen}
	}
	var out []Summary
	total := 0
	err := c.session(ctx, a, password, func(ic *imapclient.Client) error {
		if _, err := ic.Select(q.Folder, &imap.SelectOptions{ReadOnly: true}).Wait(); err != nil {
			return folderErr(q.Folder, err)
		}
		found, err := ic.UIDSearch(crit, nil).Wait()
		if err != nil {
			return fmt.Errorf("search %q: %w", q.Folder, err)
		}
		uids := found.AllUIDs()
		total = len(uids)
		// UIDs grow with arrival: the highest are the newest.
		slices.Sort(uids)
		if len(uids) > q.Limit {
			uids = uids[len(uids)-q.Limit:]
		}
		out, err = summaries(ic, q.Folder, uids)
		return err
	})
	return out, total, err
}

// Since returns the inbox's messages that arrived at or after since, newest first, at
// most limit of them, and how many there were: the briefing's view of new mail.
func (c *Client) Since(ctx context.Context, a Account, password string, since time.Time, limit int) ([]Summary, int, error) {
	var out []Summary
	total := 0
	err := c.session(ctx, a, password, func(ic *imapclient.Client) error {
		if _, err := ic.Select("INBOX", &imap.SelectOptions{ReadOnly: true}).Wait(); err != nil {
			return folderErr("INBOX", err)
		}
		// SINCE compares dates only (in the server's zone): a day earlier catches
		// everything, the INTERNALDATE below decides.
		found, err := ic.UIDSearch(&imap.SearchCriteria{Since: since.Add(-24 * time.Hour)}, nil).Wait()
		if err != nil {
			return fmt.Errorf("search INBOX: %w", err)
		}
		uids := found.AllUIDs()
		slices.Sort(uids)
		// Look at a bounded number of the newest: a mailbox of 50000 messages after a
		// long holiday still answers quickly.
		if len(uids) > 500 {
			uids = uids[len(uids)-500:]
		}
		all, err := summaries(ic, "INBOX", uids)
		if err != nil {
			return err
		}
		for _, s := range all {
			if s.Date.Before(since) {
				continue
			}
			total++
			if len(out) < limit {
				out = append(out, s)
			}
		}
		return nil
	})
	return out, total, err
}

// summaries fetches the envelopes of uids, newest first.
func summaries(ic *imapclient.Client, folder string, uids []imap.UID) ([]Summary, error) {
	if len(uids) == 0 {
		return nil, nil
	}
	msgs, err := ic.Fetch(imap.UIDSetNum(uids...), &imap.FetchOptions{
		UID: true, Envelope: true, Flags: true, InternalDate: true, RFC822Size: true,
	}).Collect()
	if err != nil {
		return nil, fmt.Errorf("fetch %q: %w", folder, err)
	}
	out := make([]Summary, 0, len(msgs))
	for _, m := range msgs {
		if m.UID == 0 {
			continue
		}
		s := Summary{Folder: folder, UID: uint32(m.UID), Date: m.InternalDate, Size: m.RFC822Size,
			Unseen: !slices.Contains(m.Flags, imap.FlagSeen)}
		if env := m.Envelope; env != nil {
			s.Subject = clean(env.Subject, 300)
			if len(env.From) > 0 {
				s.From = addr(env.From[0])
			}
			if s.Date.IsZero() {
				s.Date = env.Date
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(x, y Summary) int { return cmp.Compare(y.UID, x.UID) })
	return out, nil
}

// Read returns one message of a folder: its headers, its text and the names of its
// attachments. A message larger than MaxMessageBytes is read up to that size.
func (c *Client) Read(ctx context.Context, a Account, password, folder string, uid uint32) (Message, error) {
	if folder == "" {
		folder = "INBOX"
	}
	var out Message
	err := c.session(ctx, a, password, func(ic *imapclient.Client) error {
		if _, err := ic.Select(folder, &imap.SelectOptions{ReadOnly: true}).Wait(); err != nil {
			return folderErr(folder, err)
		}
		set := imap.UIDSetNum(imap.UID(uid))
		meta, err := ic.Fetch(set, &imap.FetchOptions{UID: true, Flags: true, InternalDate: true, RFC822Size: true}).Collect()
		if err != nil {
			return fmt.Errorf("fetch %q: %w", folder, err)
		}
		if len(meta) == 0 || meta[0].UID != imap.UID(uid) {
			return &Error{Kind: KindNotFound, Message: fmt.Sprintf("there is no message %d in %q (search lists the numbers)", uid, folder)}
		}
		m := meta[0]
		out = Message{Folder: folder, UID: uid, Size: m.RFC822Size, Date: m.InternalDate,
			Unseen: !slices.Contains(m.Flags, imap.FlagSeen)}
		// BODY.PEEK never sets \Seen; a partial fetch never downloads more than we keep.
		section := &imap.FetchItemBodySection{Peek: true}
		if m.RFC822Size > c.opts.MaxMessageBytes {
			section.Partial = &imap.SectionPartial{Offset: 0, Size: c.opts.MaxMessageBytes}
			out.Truncated = true
		}
		raw, err := c.body(ic, set, section)
		if err != nil {
			return fmt.Errorf("fetch %q message %d: %w", folder, uid, err)
		}
		if int64(len(raw)) > c.opts.MaxMessageBytes {
			raw, out.Truncated = raw[:c.opts.MaxMessageBytes], true // the server ignored the partial
		}
		out.Read = int64(len(raw))
		p, err := mail.Parse(raw, mail.Limits{MaxTextBytes: int(c.opts.MaxMessageBytes), MaxAttachmentBytes: c.opts.MaxMessageBytes})
		if err != nil {
			return &Error{Kind: KindProtocol, Message: fmt.Sprintf("message %d in %q could not be read: its header is malformed", uid, folder), Err: err}
		}
		out.From = p.From.String()
		out.Subject, out.MessageID, out.Text, out.FromHTML = p.Subject, p.MessageID, p.Text, p.FromHTML
		for _, a := range p.To {
			out.To = append(out.To, a.String())
		}
		for _, a := range p.Cc {
			out.Cc = append(out.Cc, a.String())
		}
		if out.Date.IsZero() {
			out.Date = p.Date
		}
		for _, at := range p.Attachments {
			out.Attachments = append(out.Attachments, Attachment{Name: at.Filename, ContentType: at.ContentType, Size: at.Size})
		}
		return nil
	})
	return out, err
}

// body reads one body section, bounded even when the server ignores the partial.
func (c *Client) body(ic *imapclient.Client, set imap.UIDSet, section *imap.FetchItemBodySection) ([]byte, error) {
	cmd := ic.Fetch(set, &imap.FetchOptions{UID: true, BodySection: []*imap.FetchItemBodySection{section}})
	var raw []byte
	for msg := cmd.Next(); msg != nil; msg = cmd.Next() {
		for item := msg.Next(); item != nil; item = msg.Next() {
			bs, ok := item.(imapclient.FetchItemDataBodySection)
			if !ok || bs.Literal == nil {
				continue
			}
			data, err := io.ReadAll(io.LimitReader(bs.Literal, c.opts.MaxMessageBytes+1))
			if err != nil {
				cmd.Close()
				return nil, err
			}
			// Drain the rest so the connection stays in step with the server.
			if _, err := io.Copy(io.Discard, bs.Literal); err != nil {
				cmd.Close()
				return nil, err
			}
			raw = data
		}
	}
	if err := cmd.Close(); err != nil {
		return nil, err
	}
	return raw, nil
}

// session connects through the Dialer, secures the connection, logs in and runs fn.
// The connection is closed when ctx ends or the timeout passes, which unblocks any
// command in flight. Every error it returns is an *Error.
func (c *Client) session(ctx context.Context, a Account, password string, fn func(ic *imapclient.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	addr := a.Addr()
	conn, err := c.opts.Dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		var refused *safedial.RefusedError
		if errors.As(err, &refused) {
			return &Error{Kind: KindRefused, Message: "the mail server cannot be used: " + refused.Error(), Err: err}
		}
		return &Error{Kind: KindUnreachable, Message: fmt.Sprintf("could not connect to %s: %s", addr, netReason(ctx, err)), Err: err}
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.opts.TLSConfig != nil {
		tlsCfg = c.opts.TLSConfig.Clone()
	}
	tlsCfg.ServerName = a.Host
	var ic *imapclient.Client
	if a.TLS == TLSStartTLS {
		ic, err = imapclient.NewStartTLS(conn, &imapclient.Options{TLSConfig: tlsCfg})
		if err != nil {
			conn.Close()
			return &Error{Kind: KindTLS, Message: fmt.Sprintf("STARTTLS with %s failed: %s", addr, tlsReason(ctx, err)), Err: err}
		}
	} else {
		tc := tls.Client(conn, tlsCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return &Error{Kind: KindTLS, Message: fmt.Sprintf("TLS with %s failed: %s", addr, tlsReason(ctx, err)), Err: err}
		}
		ic = imapclient.New(tc, nil)
	}
	defer ic.Close()

	if err := ic.Login(a.Username, password).Wait(); err != nil {
		var ie *imap.Error
		if errors.As(err, &ie) {
			// The server's own words (often "invalid credentials") help; they never
			// hold the password, which only travels to the server.
			return &Error{Kind: KindAuth, Message: fmt.Sprintf("%s refused the user name %q or the password (%s)", a.Host, a.Username, clean(ie.Text, 200)), Err: err}
		}
		return &Error{Kind: KindProtocol, Message: fmt.Sprintf("logging in to %s failed: %s", addr, netReason(ctx, err)), Err: err}
	}
	if err := fn(ic); err != nil {
		var me *Error
		if errors.As(err, &me) {
			return me
		}
		return &Error{Kind: KindProtocol, Message: fmt.Sprintf("%s: %s", a.Host, netReason(ctx, err)), Err: err}
	}
	if err := ic.Logout().Wait(); err != nil {
		c.opts.Logger.Debug("imap logout failed", "host", a.Host, "err", err)
	}
	return nil
}

// folderErr turns a server's refusal to open a folder into KindNotFound.
func folderErr(folder string, err error) error {
	var ie *imap.Error
	if errors.As(err, &ie) && ie.Type == imap.StatusResponseTypeNo {
		return &Error{Kind: KindNotFound, Message: fmt.Sprintf("there is no folder %q (folders lists them)", clean(folder, 200)), Err: err}
	}
	return fmt.Errorf("open %q: %w", folder, err)
}

// netReason is a short, user-facing reason for a network error.
func netReason(ctx context.Context, err error) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "the server did not answer in time"
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		if dnsErr.IsNotFound {
			return "the host name does not exist"
		}
		return "the host name could not be resolved"
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Err != nil {
		return clean(opErr.Err.Error(), 200)
	}
	return clean(err.Error(), 200)
}

// tlsReason is a short, user-facing reason for a TLS failure.
func tlsReason(ctx context.Context, err error) string {
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return "the server's certificate is not trusted (" + clean(certErr.Err.Error(), 200) + ")"
	}
	var rec tls.RecordHeaderError
	if errors.As(err, &rec) {
		return "the server does not speak TLS on this port (try STARTTLS, or the port for TLS)"
	}
	return netReason(ctx, err)
}

func specialUse(attrs []imap.MailboxAttr) string {
	for _, a := range attrs {
		switch a {
		case imap.MailboxAttrSent, imap.MailboxAttrDrafts, imap.MailboxAttrTrash, imap.MailboxAttrJunk,
			imap.MailboxAttrArchive, imap.MailboxAttrAll, imap.MailboxAttrFlagged:
			return strings.ToLower(strings.TrimPrefix(string(a), "\\"))
		}
	}
	return ""
}

func count(n *uint32) int {
	if n == nil {
		return 0
	}
	return int(*n)
}

func addr(a imap.Address) string {
	email := clean(a.Addr(), 200)
	if name := clean(a.Name, 120); name != "" {
		return name + " <" + email + ">"
	}
	return email
}

// clean makes a server-supplied value safe to show on one line and bounds it.
func clean(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\r' || r == '\n' || r == '\u2028' || r == '\u2029':
			return ' '
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			return -1
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
