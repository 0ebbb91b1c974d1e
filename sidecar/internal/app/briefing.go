package app

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/briefing"
	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/kv"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/portal"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

// openBriefings builds the runner of the users' BRIEFINGS.md. It reads the users and
// their config files as the job runner sees them (the local copies it refreshes from
// Nextcloud), pulls a user's files once more right before a briefing's pre-fetch, reads
// today's events through CalDAV when a bot account is configured, and fetches news
// feeds from the public internet only (network.allow_private excepted).
func (s *sidecar) openBriefings(files *userConfigFiles) (*briefing.Runner, error) {
	cfg := s.cfg
	comps := make([]userconfig.Component, len(cfg.Briefings.DefaultComponents))
	for i, c := range cfg.Briefings.DefaultComponents {
		comps[i] = userconfig.Component(c)
	}
	opts := briefing.Options{
		BotName: cfg.Talk.BotName,
		Defaults: briefing.Defaults{Components: comps, Feeds: cfg.Briefings.DefaultFeeds,
			MaxItemsPerFeed: cfg.Briefings.MaxItemsPerFeed},
		UserRoot: s.userRoot,
		KV:       kv.New(s.db, nil),
		Mail:     briefingMail{db: s.db},
		News:     briefing.NewFetcher(briefing.FetcherOptions{AllowPrivate: cfg.Network.AllowPrivate, UserAgent: "Istota/" + Version}),
		Markets: briefing.Markets{Fetcher: s.web, QuoteURL: cfg.Briefings.Markets.QuoteURL,
			Futures: cfg.Briefings.Markets.Futures, Indices: cfg.Briefings.Markets.Indices},
		ComponentTimeout: cfg.Briefings.ComponentTimeout.Duration,
		BeforeRun:        files.Refresh,
		Notify:           briefingNotifier(s.db, s.outbox),
		OnTask:           s.pool.Wake,
		OnReply:          s.outbox.Wake,
		Logger:           s.log.With("component", "briefing"),
	}
	if s.mailbox != nil {
		opts.Mailbox = briefingMailbox{s.mailbox}
	}
	if s.calendars != nil {
		opts.Calendars, opts.CalendarChoice = s.calendars, s.calendarChoice
	}
	return briefing.New(s.db, s.queue, briefingConfig{files}, opts), nil
}

// briefingConfig gives the briefing runner the users and their config files, as the
// job runner sees them.
type briefingConfig struct{ f *userConfigFiles }

func (c briefingConfig) Users(ctx context.Context) ([]briefing.User, error) {
	us, err := c.f.Users(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]briefing.User, len(us))
	for i, u := range us {
		out[i] = briefing.User{ID: u.ID, Timezone: u.Timezone, IsAdmin: u.IsAdmin, Email: u.Email}
	}
	return out, nil
}

func (c briefingConfig) ReadConfig(_ context.Context, uid, name string) ([]byte, error) {
	b, exists, err := c.f.ReadConfig(uid, name)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("%s of %s: %w", name, uid, fs.ErrNotExist)
	}
	return b, nil
}

// briefingNotifier posts a notice about a user's BRIEFINGS.md, in the caller's
// transaction: in the conversation where the agent last changed the file, else in their
// most recent private conversation with the bot. A user with neither sees the problems
// on the settings page only.
func briefingNotifier(db *store.DB, ob *outbox.Outbox) briefing.Notifier {
	return func(ctx context.Context, tx *sql.Tx, uid, key, text string) error {
		token, edited, ok, err := convlog.NoticeTarget(ctx, db.Read, tx, uid, briefing.FileName, time.Now())
		if err != nil || !ok {
			return err
		}
		if edited {
			text = convlog.EditedPrefix(briefing.FileName) + text
		}
		return ob.EnqueueTx(ctx, tx, outbox.Message{Token: token, Kind: "notice", Text: text, Key: key})
	}
}

// briefingMail lists the mail the bot took in from a user's addresses (mail_inbound of
// the mail channel). The subject is not kept there; it is read back from the subject of
// the answer the message's task was given ("Re: …").
type briefingMail struct{ db *store.DB }

func (m briefingMail) Received(ctx context.Context, uid string, since time.Time) ([]briefing.Mail, error) {
	rows, err := m.db.Read.QueryContext(ctx, `
		SELECT i.from_addr, i.received_at, COALESCE(t.email_reply, '')
		FROM mail_inbound i LEFT JOIN tasks t ON t.id = i.task_id AND i.task_id != 0
		WHERE i.user_id = ? AND i.disposition != 'ignored' AND i.received_at >= ?
		ORDER BY i.received_at DESC LIMIT 200`, uid, store.FormatTime(since))
	if err != nil {
		return nil, fmt.Errorf("received mail of %s: %w", uid, err)
	}
	defer rows.Close()
	var out []briefing.Mail
	for rows.Next() {
		var from, at, reply string
		if err := rows.Scan(&from, &at, &reply); err != nil {
			return nil, fmt.Errorf("received mail of %s: %w", uid, err)
		}
		m := briefing.Mail{From: from, Subject: "(subject not recorded)"}
		if m.At, err = store.ParseTime(at); err != nil {
			return nil, fmt.Errorf("received mail of %s: %w", uid, err)
		}
		var r struct {
			Subject string `json:"subject"`
		}
		if reply != "" && json.Unmarshal([]byte(reply), &r) == nil && r.Subject != "" {
			m.Subject = strings.TrimSpace(strings.TrimPrefix(r.Subject, "Re:"))
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// briefingStatus shows the briefings on the settings pages.
type briefingStatus struct{ r *briefing.Runner }

func (b briefingStatus) Status(ctx context.Context, uid string) (portal.Briefings, error) {
	list, problems, err := b.r.Status(ctx, uid)
	if err != nil {
		return portal.Briefings{}, err
	}
	out := portal.Briefings{Briefings: make([]portal.Briefing, 0, len(list)), Problems: portal.Problems(problems)}
	for _, s := range list {
		comps := make([]string, len(s.Components))
		for i, c := range s.Components {
			comps[i] = string(c)
		}
		out.Briefings = append(out.Briefings, portal.Briefing{Name: s.Name, Schedule: s.Schedule, Output: string(s.Output),
			Components: comps, Enabled: s.Enabled, NextRunAt: rfc3339UTC(s.NextRunAt), LastRunAt: rfc3339UTC(s.LastRunAt),
			LastResult: s.LastResult})
	}
	return out, nil
}

func rfc3339UTC(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
