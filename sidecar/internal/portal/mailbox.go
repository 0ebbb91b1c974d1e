package portal

import (
	"context"
	"errors"

	"github.com/istota/istota/sidecar/internal/mailbox"
)

// MailboxSettings is what the page sends to connect a mailbox. Password is write-only:
// no answer ever carries it, and an empty one keeps the stored password for the same
// server and user name.
type MailboxSettings struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	TLS      string `json:"tls"`
	Username string `json:"username"`
	Password string `json:"password"`
}

func (s *Service) mailboxService() (*mailbox.Service, error) {
	if s.o.Mailbox == nil {
		return nil, &Error{Kind: KindUnavailable, Message: "mailboxes are not available on this server"}
	}
	return s.o.Mailbox, nil
}

// Mailbox returns uid's mailbox as the page shows it.
func (s *Service) Mailbox(ctx context.Context, uid string) (mailbox.Status, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return mailbox.Status{}, err
	}
	mb, err := s.mailboxService()
	if err != nil {
		return mailbox.Status{}, err
	}
	return mb.Status(ctx, uid)
}

// ConnectMailbox logs in to the account given and stores it when that works; a field
// the server or the checks refused is a KindInvalidSettings naming it.
func (s *Service) ConnectMailbox(ctx context.Context, uid string, in MailboxSettings) (mailbox.Status, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return mailbox.Status{}, err
	}
	mb, err := s.mailboxService()
	if err != nil {
		return mailbox.Status{}, err
	}
	st, err := mb.Connect(ctx, uid, mailbox.Account{Host: in.Host, Port: in.Port, TLS: in.TLS, Username: in.Username}, in.Password)
	return st, mailboxErr(err)
}

// TestMailbox logs in with the stored account; the outcome is in the answer's ok and
// last_error.
func (s *Service) TestMailbox(ctx context.Context, uid string) (mailbox.Status, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return mailbox.Status{}, err
	}
	mb, err := s.mailboxService()
	if err != nil {
		return mailbox.Status{}, err
	}
	st, err := mb.Test(ctx, uid)
	return st, mailboxErr(err)
}

// DisconnectMailbox forgets uid's account and its password.
func (s *Service) DisconnectMailbox(ctx context.Context, uid string) (mailbox.Status, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return mailbox.Status{}, err
	}
	mb, err := s.mailboxService()
	if err != nil {
		return mailbox.Status{}, err
	}
	if err := mb.Disconnect(ctx, uid); err != nil {
		return mailbox.Status{}, err
	}
	return mailbox.Status{}, nil
}

// mailboxErr maps the mailbox package's refusals onto the page's error kinds; the
// messages name the server and the problem, never the password.
func mailboxErr(err error) error {
	var fe *mailbox.FieldError
	var me *mailbox.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		return &Error{Kind: KindInvalidSettings, Message: "some settings are not valid", Fields: fe.Fields}
	case errors.As(err, &me):
		return &Error{Kind: KindInvalidSettings, Message: "the mailbox could not be connected: " + me.Message,
			Fields: map[string]string{me.Kind.Field(): me.Message}}
	case errors.Is(err, mailbox.ErrNotConnected):
		return &Error{Kind: KindNotFound, Message: "no mailbox is connected"}
	}
	return err
}
