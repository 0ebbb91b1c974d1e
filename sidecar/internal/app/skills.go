package app

import (
	"context"
	"path"
	"time"

	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/briefing"
	"github.com/istota/istota/sidecar/internal/browse"
	"github.com/istota/istota/sidecar/internal/kv"
	"github.com/istota/istota/sidecar/internal/netproxy"
	"github.com/istota/istota/sidecar/internal/nextcloud"
	"github.com/istota/istota/sidecar/internal/notes"
	"github.com/istota/istota/sidecar/internal/ocr"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/transcribe"
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
// briefings read), browse, and nextcloud (the user's files, shares and conversations,
// through the app) when the app can be called.
func (s *sidecar) registerContentSkills(reg *skills.Registry, kvs *kv.Store, auditLog *audit.Log) error {
	if err := notes.Register(reg, notes.Options{
		Root: func(uid string) (string, error) { return s.userRoot(uid), nil },
		Zone: s.zoneOrUTC,
	}); err != nil {
		return err
	}
	if err := transcribe.RegisterSkill(reg, transcribe.SkillOptions{Client: s.transcriber,
		Root: func(uid string) (string, error) { return s.userRoot(uid), nil }}); err != nil {
		return err
	}
	if err := briefing.RegisterRemindersSkill(reg, briefing.RemindersOptions{Store: kvs, Zone: s.zoneOrUTC}); err != nil {
		return err
	}
	bopts := browse.Options{Fetcher: s.web, Events: s.queue, Logger: s.log.With("component", "browse")}
	if s.renderer != nil {
		bopts.Renderer = s.renderer
	}
	if err := browse.Register(reg, bopts); err != nil {
		return err
	}
	if s.app == nil {
		return nil
	}
	return nextcloud.Register(reg, nextcloud.Options{App: s.app, Poster: s.outbox, Events: s.queue, Audit: auditLog,
		Logger: s.log.With("component", "nextcloud")})
}

// registerOCR registers the ocr skill: Nextcloud's own OCR provider first (through the
// bot account, once openFiles made its client), else Debian's tesseract in a sandbox
// of its own, when it is installed and there is a sandbox.
func (s *sidecar) registerOCR(reg *skills.Registry) error {
	opts := ocr.SkillOptions{
		Root:   func(uid string) (string, error) { return s.userRoot(uid), nil },
		Logger: s.log.With("component", "ocr"),
	}
	if s.botDAV != nil {
		opts.Nextcloud = &ocr.Nextcloud{API: s.botDAV, Remote: func(uid, rel string) string { return path.Join("Users", uid, rel) }}
	}
	if ocrInstalled() && !s.cfg.Sandbox.Unsandboxed {
		opts.Local = &ocr.Tesseract{Runner: s.launcher.runner}
	}
	return ocr.RegisterSkill(reg, opts)
}

// zoneOrUTC is userZone for the skills that print times: UTC when it cannot be read.
func (s *sidecar) zoneOrUTC(ctx context.Context, uid string) *time.Location {
	loc, err := s.userZone(ctx, uid)
	if err != nil {
		s.log.Warn("time zone unknown; using UTC", "user_id", uid, "err", err)
		return time.UTC
	}
	return loc
}
