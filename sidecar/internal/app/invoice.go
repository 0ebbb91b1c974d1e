package app

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/invoice"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/store"
)

// openInvoicing builds the invoicing service on the users' folders (the mirror, or the
// mount), registers the invoice skill and returns the runner of the scheduled runs.
func (s *sidecar) openInvoicing(registry *skills.Registry, config *userConfigFiles) (*invoice.Runner, error) {
	svc, err := invoice.New(s.db, invoice.Options{
		UserRoot: func(uid string) (string, error) { return s.userRoot(uid), nil },
		BotDir:   strings.ToLower(s.cfg.Talk.BotName),
		Timezone: s.userZone,
		Logger:   s.log.With("component", "invoice"),
	})
	if err != nil {
		return nil, err
	}
	if err := invoice.RegisterSkill(registry, svc); err != nil {
		return nil, err
	}
	return invoice.NewRunner(svc, invoiceFolders{f: config}, invoiceNotices{db: s.db, ob: s.outbox}, invoice.RunnerOptions{
		Logger:   s.log.With("component", "invoice"),
		OnNotice: s.outbox.Wake,
	}), nil
}

// userZone is the user's time zone as Nextcloud last told it; UTC when unknown.
func (s *sidecar) userZone(ctx context.Context, uid string) (*time.Location, error) {
	var tz string
	err := s.db.Read.QueryRowContext(ctx, `SELECT timezone FROM users WHERE id = ?`, uid).Scan(&tz)
	if errors.Is(err, sql.ErrNoRows) {
		return time.UTC, nil
	}
	if err != nil {
		return nil, fmt.Errorf("time zone of %s: %w", uid, err)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil || tz == "" || strings.EqualFold(tz, "local") {
		return time.UTC, nil
	}
	return loc, nil
}

// invoiceFolders gives the invoice runner the users and the sync of their files, as
// the job runner has them.
type invoiceFolders struct{ f *userConfigFiles }

func (i invoiceFolders) Users(ctx context.Context) ([]invoice.User, error) {
	us, err := i.f.Users(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]invoice.User, len(us))
	for j, u := range us {
		out[j] = invoice.User{ID: u.ID, Timezone: u.Timezone}
	}
	return out, nil
}

func (i invoiceFolders) Refresh(ctx context.Context, uid string) error { return i.f.Refresh(ctx, uid) }

func (i invoiceFolders) Publish(ctx context.Context, uid string) error {
	if i.f.ws == nil {
		return nil
	}
	_, err := i.f.ws.Push(ctx, uid)
	return err
}

// invoiceNotices posts the invoice runner's notices to the user's private conversation.
type invoiceNotices struct {
	db *store.DB
	ob *outbox.Outbox
}

func (n invoiceNotices) Notice(ctx context.Context, tx *sql.Tx, uid, key, text string) (bool, error) {
	token, ok, err := convlog.PrivateConversation(ctx, n.db.Read, uid)
	if err != nil || !ok {
		return false, err
	}
	if err := n.ob.EnqueueTx(ctx, tx, outbox.Message{Token: token, Kind: outbox.KindNotice, Text: text, Key: key}); err != nil {
		return false, err
	}
	return true, nil
}
