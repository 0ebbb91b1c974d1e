package app

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/config"
	"github.com/istota/istota/sidecar/internal/executor"
	"github.com/istota/istota/sidecar/internal/live"
	"github.com/istota/istota/sidecar/internal/portal"
	"github.com/istota/istota/sidecar/internal/settings"
	"github.com/istota/istota/sidecar/internal/signing"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/users"
)

// pages is the settings pages' side of the sidecar: the admin settings layered over
// the config file, the pages' service, and the live-progress hub.
type pages struct {
	settings *settings.Store
	portal   *portal.Service
	hub      *live.Hub
}

// openSettings layers the admin panel's stored settings (and the API key set there)
// over the config file and returns the result, which everything is then built from.
func (s *sidecar) openSettings(ctx context.Context, cfg config.Config) (config.Config, error) {
	st, err := settings.Open(ctx, s.db, cfg, settings.Options{
		DataDir: cfg.DataDir,
		Brains:  brainKinds(),
		Logger:  s.log.With("component", "settings"),
	})
	if err != nil {
		return config.Config{}, err
	}
	s.pages.settings = st
	return st.Effective(), nil
}

// budget is the daily token budget intake applies, live from the settings.
func (s *sidecar) budget() *settings.Budget {
	return settings.NewBudget(s.pages.settings, s.launcher.usage, nil)
}

// openPages builds the pages' service and the WebSocket hub. Heartbeat and briefing
// status are added by their owners through portal.Options (nil shows none).
func (s *sidecar) openPages(heartbeats portal.HeartbeatStatus, briefings portal.BriefingStatus) error {
	cfg := s.cfg
	botDir := strings.ToLower(cfg.Talk.BotName)
	dataDir := cfg.DataDir
	userRoot := func(uid string) (string, error) { return executor.UserMirror(dataDir, uid), nil }
	channelRoot := func(token string) (string, error) { return executor.ChannelMirror(dataDir, token), nil }
	var files portal.Files
	if s.files != nil {
		files = s.files
		userRoot, channelRoot = s.files.UserRoot, s.files.ChannelRoot
	}
	var cals portal.Calendars
	if s.calendars != nil {
		cals = s.calendars
	}
	sb := portal.SandboxState{OK: true, Mode: "bwrap", Detail: "every task runs in its own bubblewrap sandbox"}
	if cfg.Sandbox.Unsandboxed {
		sb = portal.SandboxState{OK: false, Mode: "unsandboxed",
			Detail: "the sandbox is disabled (sandbox.unsandboxed): agents run directly on the host and can read everything the sidecar's account can"}
	}
	var onJobRun func()
	if s.jobs != nil {
		onJobRun = s.jobs.Wake
	}
	p, err := portal.New(portal.Options{
		DB: s.db, Queue: s.queue, Access: s.pages.settings, Canceller: s.pool, Pool: s.pool,
		Usage: s.launcher.usage, Graph: s.graph, Memory: s.mem, Scheduler: s.sched,
		Heartbeats: heartbeats, Briefings: briefings, Files: files, Calendars: cals, Settings: s.pages.settings,
		Poster: s.outbox, UserRoot: userRoot, ChannelRoot: channelRoot, BotName: cfg.Talk.BotName, BotDir: botDir,
		Version: Version, Schema: store.SchemaVersion(), StartedAt: time.Now(), Sandbox: sb,
		BotAccount: cfg.Nextcloud.BotUser != "" && cfg.Nextcloud.BotPassword != "", TalkSecret: cfg.Talk.BotSecret != "",
		ReservedInteractive: cfg.Workers.ReservedInteractive, OnJobRun: onJobRun, Approvals: s.approvals,
		Mailbox: s.mailbox,
		Logger:  s.log.With("component", "pages"),
	})
	if err != nil {
		return err
	}
	s.pages.portal = p
	s.pages.hub = live.New(s.db, s.queue, live.Options{
		Secret:  []byte(cfg.Nextcloud.SharedSecret),
		Origins: liveOrigins(cfg),
		Nonces:  signing.NewNonces(s.db),
		Authorize: func(ctx context.Context, uid string) error {
			_, err := p.Authorize(ctx, uid)
			return err
		},
		Logger: s.log.With("component", "live"),
	})
	return nil
}

// mayUse applies the admin's access settings to a user the sidecar knows, for channels
// that carry no Nextcloud session (mail): what the user's last session or Talk event
// said about their groups decides.
func (s *sidecar) mayUse(ctx context.Context, uid string) (bool, error) {
	u, err := users.Get(ctx, s.db.Read, uid)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	allowed, _ := s.pages.settings.Decide(u.UID, u.Groups, u.NextcloudAdmin)
	return allowed, nil
}

// calendarChoice is the calendars a user allowed on the settings page, for the calendar
// skill, heartbeats and briefings.
func (s *sidecar) calendarChoice(ctx context.Context, uid string) ([]string, bool, error) {
	return users.EnabledCalendars(ctx, s.db.Read, uid)
}

// liveOrigins are the browser origins whose pages may open the WebSocket: Nextcloud's
// own URL and any public origins the admin listed.
func liveOrigins(cfg config.Config) []string {
	out := []string{live.Origin(cfg.Nextcloud.URL)}
	for _, o := range cfg.Server.PublicOrigins {
		out = append(out, live.Origin(o))
	}
	return out
}
