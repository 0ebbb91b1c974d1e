package mail

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
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
)

// PollerOptions configures a Poller.
type PollerOptions struct {
	// Addr is host:port of the IMAP server.
	Addr     string
	User     string
	Password string
	// TLS is implicit (993), starttls (143) or none (loopback only).
	TLS TLSMode
	// TLSConfig optionally overrides the TLS client configuration (a private
	// CA, for instance). ServerName defaults to the host of Addr.
	TLSConfig *tls.Config
	// Mailbox is the folder polled (default "INBOX").
	Mailbox string
	// MaxMessageBytes: larger messages are not downloaded but returned with
	// Message.Skipped set (default 25 MiB).
	MaxMessageBytes int64
	// MaxPerFetch bounds the messages one Fetch returns, so a flood is
	// worked off over several polls instead of in one huge batch
	// (default 50).
	MaxPerFetch int
	// Timeout bounds one Fetch or MarkSeen including connect (default 2m).
	Timeout time.Duration
	// Limits bounds what is kept of each message.
	Limits Limits
}

// Poller reads unseen mail from one IMAP mailbox. Each call opens its own
// connection and logs out, so a Poller holds no connection between polls and
// is safe for concurrent use.
type Poller struct {
	opts PollerOptions
	log  *slog.Logger
}

// NewPoller validates opts and returns a Poller.
func NewPoller(opts PollerOptions, log *slog.Logger) (*Poller, error) {
	if err := checkTransport(opts.Addr, opts.TLS); err != nil {
		return nil, fmt.Errorf("imap: %w", err)
	}
	if opts.User == "" {
		return nil, errors.New("imap: user is required")
	}
	if opts.Mailbox == "" {
		opts.Mailbox = "INBOX"
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 25 << 20
	}
	if opts.MaxPerFetch <= 0 {
		opts.MaxPerFetch = 50
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Poller{opts: opts, log: log}, nil
}

// Fetch returns the unseen messages of the mailbox, oldest first, without
// marking them seen (BODY.PEEK on a read-only EXAMINE). The caller stores
// them and then calls MarkSeen, so a crash in between re-delivers a message
// rather than losing it; Message.Key deduplicates the re-delivery. Mark
// every returned message seen once handled, ignored and skipped ones too:
// otherwise they stay unseen and fill every later batch of MaxPerFetch.
func (p *Poller) Fetch(ctx context.Context) ([]Message, error) {
	var out []Message
	err := p.session(ctx, true, func(c *imapclient.Client, validity uint32) error {
		found, err := c.UIDSearch(&imap.SearchCriteria{NotFlag: []imap.Flag{imap.FlagSeen}}, nil).Wait()
		if err != nil {
			return fmt.Errorf("search unseen: %w", err)
		}
		uids := found.AllUIDs()
		if len(uids) == 0 {
			return nil
		}
		slices.Sort(uids)
		if len(uids) > p.opts.MaxPerFetch {
			uids = uids[:p.opts.MaxPerFetch]
		}

		// First the sizes and envelopes only, so an oversized message is
		// never downloaded.
		meta, err := c.Fetch(imap.UIDSetNum(uids...), &imap.FetchOptions{
			UID: true, RFC822Size: true, Envelope: true,
		}).Collect()
		if err != nil {
			return fmt.Errorf("fetch sizes: %w", err)
		}
		slices.SortFunc(meta, func(a, b *imapclient.FetchMessageBuffer) int { return cmp.Compare(a.UID, b.UID) })
		var small imap.UIDSet
		byUID := map[imap.UID]int{}
		for _, mb := range meta {
			if mb.UID == 0 {
				continue
			}
			m := Message{UID: UID{Validity: validity, Num: uint32(mb.UID)}, Size: mb.RFC822Size}
			if mb.RFC822Size > p.opts.MaxMessageBytes {
				fillFromEnvelope(&m, mb.Envelope)
				m.Skipped = fmt.Sprintf("too large: %d bytes > %d", mb.RFC822Size, p.opts.MaxMessageBytes)
			} else {
				small.AddNum(mb.UID)
			}
			byUID[mb.UID] = len(out)
			out = append(out, m)
		}
		if len(small) == 0 {
			return nil
		}
		return p.fetchBodies(c, small, meta, byUID, out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// fetchBodies streams the full messages, reading each literal with a hard
// limit in case the server under-reported RFC822.SIZE.
func (p *Poller) fetchBodies(c *imapclient.Client, set imap.UIDSet, meta []*imapclient.FetchMessageBuffer, byUID map[imap.UID]int, out []Message) error {
	envelopes := map[imap.UID]*imap.Envelope{}
	for _, mb := range meta {
		envelopes[mb.UID] = mb.Envelope
	}
	section := &imap.FetchItemBodySection{Peek: true}
	cmd := c.Fetch(set, &imap.FetchOptions{UID: true, BodySection: []*imap.FetchItemBodySection{section}})
	for {
		msg := cmd.Next()
		if msg == nil {
			break
		}
		var uid imap.UID
		var raw []byte
		oversized := false
		for {
			item := msg.Next()
			if item == nil {
				break
			}
			switch item := item.(type) {
			case imapclient.FetchItemDataUID:
				uid = item.UID
			case imapclient.FetchItemDataBodySection:
				data, err := io.ReadAll(io.LimitReader(item.Literal, p.opts.MaxMessageBytes+1))
				if err != nil {
					cmd.Close()
					return fmt.Errorf("read message: %w", err)
				}
				// Drain the rest so the connection stays in sync.
				if _, err := io.Copy(io.Discard, item.Literal); err != nil {
					cmd.Close()
					return fmt.Errorf("read message: %w", err)
				}
				if int64(len(data)) > p.opts.MaxMessageBytes {
					oversized = true
				} else {
					raw = data
				}
			}
		}
		i, ok := byUID[uid]
		if !ok {
			continue
		}
		if oversized {
			fillFromEnvelope(&out[i], envelopes[uid])
			out[i].Skipped = fmt.Sprintf("too large: more than %d bytes", p.opts.MaxMessageBytes)
			continue
		}
		parsed, err := Parse(raw, p.opts.Limits)
		if err != nil {
			fillFromEnvelope(&out[i], envelopes[uid])
			out[i].Skipped = "unparseable: " + truncateRunes(oneLine(err.Error()), 200)
			continue
		}
		parsed.UID, parsed.Size = out[i].UID, out[i].Size
		out[i] = parsed
	}
	if err := cmd.Close(); err != nil {
		return fmt.Errorf("fetch messages: %w", err)
	}
	// A message expunged between the two FETCHes has no body; report it as
	// skipped rather than as an empty message.
	for i := range out {
		if out[i].Key == "" && out[i].Skipped == "" {
			fillFromEnvelope(&out[i], envelopes[imap.UID(out[i].UID.Num)])
			out[i].Skipped = "vanished before download"
		}
	}
	return nil
}

// MarkSeen sets \Seen on the given messages. UIDs from an older UIDVALIDITY
// are left alone (they may name other messages now); such messages are
// offered again and deduplicated by their Key.
func (p *Poller) MarkSeen(ctx context.Context, uids []UID) error {
	if len(uids) == 0 {
		return nil
	}
	return p.session(ctx, false, func(c *imapclient.Client, validity uint32) error {
		var set imap.UIDSet
		stale := 0
		for _, u := range uids {
			if u.Validity != validity || u.Num == 0 {
				stale++
				continue
			}
			set.AddNum(imap.UID(u.Num))
		}
		if stale > 0 {
			p.log.Warn("imap uidvalidity changed; not marking stale uids", "mailbox", p.opts.Mailbox, "stale", stale)
		}
		if len(set) == 0 {
			return nil
		}
		store := &imap.StoreFlags{Op: imap.StoreFlagsAdd, Flags: []imap.Flag{imap.FlagSeen}, Silent: true}
		if err := c.Store(set, store, nil).Close(); err != nil {
			return fmt.Errorf("store \\Seen: %w", err)
		}
		return nil
	})
}

// Check logs in and selects the mailbox read-only, for `istota doctor`. It
// returns how many messages the mailbox holds.
func (p *Poller) Check(ctx context.Context) (int, error) {
	n := 0
	err := p.session(ctx, true, func(c *imapclient.Client, _ uint32) error {
		if mb := c.Mailbox(); mb != nil {
			n = int(mb.NumMessages)
		}
		return nil
	})
	return n, err
}

// session connects, logs in, selects the mailbox and runs fn. The connection
// is closed when ctx ends, which unblocks any command in flight.
func (p *Poller) session(ctx context.Context, readOnly bool, fn func(c *imapclient.Client, validity uint32) error) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	conn, err := dial(ctx, p.opts.Addr, p.opts.TLS, p.opts.TLSConfig)
	if err != nil {
		return fmt.Errorf("imap connect %s: %w", p.opts.Addr, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	var c *imapclient.Client
	if p.opts.TLS == TLSStartTLS {
		c, err = imapclient.NewStartTLS(conn, &imapclient.Options{TLSConfig: tlsConfigFor(p.opts.TLSConfig, p.opts.Addr)})
		if err != nil {
			return fmt.Errorf("imap starttls %s: %w", p.opts.Addr, ctxErr(ctx, err))
		}
	} else {
		c = imapclient.New(conn, nil)
	}
	defer c.Close()

	if err := c.Login(p.opts.User, p.opts.Password).Wait(); err != nil {
		// The server's text is safe to show; the password is never in it.
		return fmt.Errorf("imap login as %q: %w", p.opts.User, ctxErr(ctx, err))
	}
	sel, err := c.Select(p.opts.Mailbox, &imap.SelectOptions{ReadOnly: readOnly}).Wait()
	if err != nil {
		return fmt.Errorf("imap select %q: %w", p.opts.Mailbox, ctxErr(ctx, err))
	}
	if err := fn(c, sel.UIDValidity); err != nil {
		return fmt.Errorf("imap %s: %w", p.opts.Mailbox, ctxErr(ctx, err))
	}
	if err := c.Logout().Wait(); err != nil {
		p.log.Debug("imap logout failed", "err", err)
	}
	return nil
}

// ctxErr prefers the context's error: after AfterFunc closed the connection
// the client only reports "use of closed network connection".
func ctxErr(ctx context.Context, err error) error {
	var ne net.Error
	if ctx.Err() != nil && (errors.As(err, &ne) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF)) {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// fillFromEnvelope sets the header fields of a message that was not
// downloaded, from the server's ENVELOPE, so the caller can still log or
// answer it.
func fillFromEnvelope(m *Message, env *imap.Envelope) {
	if env == nil {
		if m.Key == "" {
			m.Key = fmt.Sprintf("uid:%d:%d", m.UID.Validity, m.UID.Num)
		}
		return
	}
	m.Subject = truncateRunes(oneLine(env.Subject), maxSubjectRunes)
	m.Date = env.Date
	if validMsgID(env.MessageID) {
		m.MessageID = env.MessageID
	}
	for _, id := range env.InReplyTo {
		if validMsgID(id) {
			m.InReplyTo = id
			break
		}
	}
	if len(env.From) > 0 {
		m.From = Address{Name: oneLine(env.From[0].Name), Email: oneLine(env.From[0].Addr())}
	}
	for _, a := range env.To {
		m.To = append(m.To, Address{Name: oneLine(a.Name), Email: oneLine(a.Addr())})
	}
	for _, a := range env.Cc {
		m.Cc = append(m.Cc, Address{Name: oneLine(a.Name), Email: oneLine(a.Addr())})
	}
	m.Key = m.MessageID
	if m.Key == "" {
		m.Key = fmt.Sprintf("uid:%d:%d", m.UID.Validity, m.UID.Num)
	}
}
