package app

import (
	"context"
	"time"

	"github.com/istota/istota/sidecar/internal/briefing"
	"github.com/istota/istota/sidecar/internal/browse"
	"github.com/istota/istota/sidecar/internal/kv"
	"github.com/istota/istota/sidecar/internal/netproxy"
	"github.com/istota/istota/sidecar/internal/notes"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/users"
	"github.com/istota/istota/sidecar/internal/webfetch"
)

// openWeb builds the client that fetches for users from the sidecar itself (the
// browse skill, the markets briefing): the same allowlist and private-address rules
// as the sandboxes' network proxy.
func (s *sidecar) openWeb(allowed []netproxy.Rule) {
	s.web = webfetch.New(webfetch.Options{
		Allow:        allowed,
		AllowPrivate: s.cfg.Network.AllowPrivate,
		UserAgent:    "Istota/" + Version,
	})
}

// registerContentSkills registers the skills over the user's own content and the web:
// notes (the workspace's notes/ folder), reminders (the key-value entries the
// briefings read) and browse.
func (s *sidecar) registerContentSkills(reg *skills.Registry, kvs *kv.Store) error {
	if err := notes.Register(reg, notes.Options{
		Root: func(uid string) (string, error) { return s.userRoot(uid), nil },
		Zone: s.userZone,
	}); err != nil {
		return err
	}
	if err := briefing.RegisterRemindersSkill(reg, briefing.RemindersOptions{Store: kvs, Zone: s.userZone}); err != nil {
		return err
	}
	return browse.Register(reg, browse.Options{Fetcher: s.web, Events: s.queue, Logger: s.log.With("component", "browse")})
}

// userZone is a user's time zone as Nextcloud last reported it; nil when unknown.
func (s *sidecar) userZone(ctx context.Context, uid string) *time.Location {
	u, err := users.Get(ctx, s.db.Read, uid)
	if err != nil || u.Timezone == "" {
		return nil
	}
	loc, err := time.LoadLocation(u.Timezone)
	if err != nil {
		return nil
	}
	return loc
}
