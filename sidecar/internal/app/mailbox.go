package app

import (
	"context"
	"errors"
	"time"

	"github.com/istota/istota/sidecar/internal/briefing"
	"github.com/istota/istota/sidecar/internal/mailbox"
	"github.com/istota/istota/sidecar/internal/safedial"
	"github.com/istota/istota/sidecar/internal/skills"
)

// openMailbox sets up the users' own mailboxes: the service the settings pages and the
// briefings use and the read-only mailbox skill. Connections go through safedial with
// the admin's network.allow_private, like every other address a user names.
func (s *sidecar) openMailbox(reg *skills.Registry, creds *skills.Credentials) error {
	client := mailbox.NewClient(mailbox.ClientOptions{
		Dialer: &safedial.Dialer{AllowPrivate: s.cfg.Network.AllowPrivate},
		Logger: s.log.With("component", "mailbox"),
	})
	svc, err := mailbox.New(s.db, creds, client, nil, s.log.With("component", "mailbox"))
	if err != nil {
		return err
	}
	s.mailbox = svc
	return mailbox.RegisterSkill(reg, mailbox.SkillOptions{Service: svc, Zone: s.zoneOrUTC, Events: s.queue,
		Logger: s.log.With("component", "mailbox")})
}

// userResources says which resources a user has for the choice of skills in a prompt.
func (s *sidecar) userResources(ctx context.Context, uid string) []string {
	if s.mailbox == nil {
		return nil
	}
	ok, err := s.mailbox.Connected(ctx, uid)
	if err != nil {
		s.log.Warn("could not tell whether the user connected a mailbox", "user_id", uid, "err", err)
		return nil
	}
	if ok {
		return []string{skills.ResourceMailbox}
	}
	return nil
}

// briefingMailbox gives the briefings' e-mail component the user's own mailbox.
type briefingMailbox struct{ svc *mailbox.Service }

func (b briefingMailbox) Recent(ctx context.Context, uid string, since time.Time, limit int) (briefing.MailboxDigest, error) {
	acc, list, total, err := b.svc.Recent(ctx, uid, since, limit)
	if errors.Is(err, mailbox.ErrNotConnected) {
		return briefing.MailboxDigest{}, nil
	}
	if err != nil {
		if acc == (mailbox.Account{}) {
			// Not even the account could be read: the database failed.
			return briefing.MailboxDigest{}, err
		}
		return briefing.MailboxDigest{Connected: true, Account: acc.String()}, err
	}
	d := briefing.MailboxDigest{Connected: true, Account: acc.String(), Total: total}
	for _, m := range list {
		d.Mails = append(d.Mails, briefing.Mail{From: m.From, Subject: m.Subject, At: m.Date, Unseen: m.Unseen})
	}
	return d, nil
}
