// Package portal is what Nextcloud's settings pages show and change (docs/user-api.md):
// a user's tasks and usage, their memory (USER.md with conflict detection, the curation
// audit, CHANNEL.md, dated memories, knowledge facts, search), their scheduled work and
// personal settings, and the admin's health view and settings. Every method takes the
// user id the app vouched for in a signed request and touches only that user's data:
// another user's task, fact or job is "not found", never "not yours".
package portal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/calendar"
	"github.com/istota/istota/sidecar/internal/knowledge"
	"github.com/istota/istota/sidecar/internal/mailbox"
	"github.com/istota/istota/sidecar/internal/memory"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/schedule"
	"github.com/istota/istota/sidecar/internal/settings"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/usage"
	"github.com/istota/istota/sidecar/internal/users"
	"github.com/istota/istota/sidecar/internal/workspace"
)

// Kind classifies an Error; the HTTP layer maps it to a status and a stable code.
type Kind int

// Error kinds (docs/user-api.md, error table).
const (
	KindInvalid         Kind = iota + 1 // 400 invalid_request
	KindNotAllowed                      // 403 not_allowed
	KindNotFound                        // 404 not_found
	KindConflict                        // 409 conflict
	KindInvalidSettings                 // 422 invalid_settings
	KindUnavailable                     // 503 unavailable
)

// Error is a refusal the caller may show: Message never holds a secret or an
// internal detail.
type Error struct {
	Kind        Kind
	Message     string
	Fields      map[string]string // KindInvalidSettings
	CurrentETag string            // KindConflict on USER.md
}

func (e *Error) Error() string { return e.Message }

func invalid(format string, args ...any) error {
	return &Error{Kind: KindInvalid, Message: fmt.Sprintf(format, args...)}
}

func notFound(what string) error { return &Error{Kind: KindNotFound, Message: what + " not found"} }

// Canceller stops a running task's process group (the worker pool).
type Canceller interface {
	Cancel(taskID int64) bool
}

// PoolStats reports the worker pool's busy slots and cap.
type PoolStats interface {
	Stats() (busy, max int)
}

// UsageSince sums a user's model usage since a time; *usage.Store implements it.
type UsageSince interface {
	Since(ctx context.Context, uid string, since time.Time) (usage.Totals, error)
}

// Files syncs a user's mirror with Nextcloud; *workspace.Workspace implements it.
type Files interface {
	Pull(ctx context.Context, uid string) (workspace.Report, error)
	Push(ctx context.Context, uid string) (workspace.Report, error)
}

// Calendars lists the calendars in the bot's calendar home; *calendar.Client
// implements it.
type Calendars interface {
	Calendars(ctx context.Context) ([]calendar.Calendar, error)
}

// Access decides who may use the bot; *settings.Store implements it.
type Access interface {
	Decide(uid string, groups []string, nextcloudAdmin bool) (allowed, admin bool)
}

// HeartbeatStatus is the state of a user's HEARTBEAT.md checks; the heartbeat package
// provides it (wired by the app). Nil shows no checks.
type HeartbeatStatus interface {
	Status(ctx context.Context, uid string) (Heartbeats, error)
}

// BriefingStatus is the state of a user's BRIEFINGS.md; nil shows no briefings.
type BriefingStatus interface {
	Status(ctx context.Context, uid string) (Briefings, error)
}

// SandboxState is the sandbox as the admin's health view shows it.
type SandboxState struct {
	OK     bool   `json:"ok"`
	Mode   string `json:"mode"` // bwrap | unsandboxed
	Detail string `json:"detail"`
}

// Options wire a Service. DB, Queue and Access are required; every other dependency
// may be nil and its part of the pages then shows as empty or unavailable.
type Options struct {
	DB         *store.DB
	Queue      *queue.Queue
	Access     Access
	Canceller  Canceller
	Pool       PoolStats
	Usage      UsageSince
	Graph      *knowledge.Graph
	Memory     *memory.Memory
	Scheduler  *schedule.Scheduler
	Heartbeats HeartbeatStatus
	Briefings  BriefingStatus
	Files      Files
	Calendars  Calendars
	Settings   *settings.Store
	// Approvals lists and answers the questions the agent asks; nil has none.
	Approvals *approval.Service
	// Mailbox keeps the users' own mailboxes; nil answers 503 for them.
	Mailbox *mailbox.Service
	// Poster queues the welcome in a user's new conversation; nil refuses it (503).
	Poster Poster
	// UserRoot and ChannelRoot are the local mirrors of /Users/{uid} and
	// /Channels/{token} (the workspace's, or the executor's when files are not synced).
	UserRoot    func(uid string) (string, error)
	ChannelRoot func(token string) (string, error)
	BotName     string
	BotDir      string // the {bot} folder, e.g. "istota"
	// Health view facts fixed at start.
	Version             string
	Schema              int
	StartedAt           time.Time
	Sandbox             SandboxState
	BotAccount          bool
	TalkSecret          bool
	ReservedInteractive int
	// OnJobRun wakes the scheduler after "run now"; OnTask wakes the worker pool.
	OnJobRun func()
	Clock    func() time.Time
	Logger   *slog.Logger
}

// Service answers the settings pages.
type Service struct {
	o Options
}

// New returns a Service.
func New(o Options) (*Service, error) {
	if o.DB == nil || o.Queue == nil || o.Access == nil || o.UserRoot == nil || o.ChannelRoot == nil {
		return nil, errors.New("portal: DB, Queue, Access, UserRoot and ChannelRoot are required")
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.OnJobRun == nil {
		o.OnJobRun = func() {}
	}
	if o.StartedAt.IsZero() {
		o.StartedAt = o.Clock()
	}
	if o.BotDir == "" {
		o.BotDir = "istota"
	}
	return &Service{o: o}, nil
}

// Session is what the app knows about the user who opened a settings page.
type Session struct {
	DisplayName string   `json:"display_name"`
	Email       string   `json:"email"`
	Timezone    string   `json:"timezone"`
	Language    string   `json:"language"`
	Groups      []string `json:"groups"`
	IsAdmin     bool     `json:"is_admin"`
}

// SessionAnswer tells the page what the user may see.
type SessionAnswer struct {
	Allowed     bool   `json:"allowed"`
	IstotaAdmin bool   `json:"istota_admin"`
	BotName     string `json:"bot_name"`
	FilesPath   string `json:"files_path"`
}

// StartSession records the user's profile and says whether they may use the bot.
func (s *Service) StartSession(ctx context.Context, uid string, in Session) (SessionAnswer, error) {
	if uid == "" || len(uid) > 255 {
		return SessionAnswer{}, invalid("bad user id")
	}
	allowed, admin := s.o.Access.Decide(uid, in.Groups, in.IsAdmin)
	now := s.o.Clock()
	err := users.Upsert(ctx, s.o.DB.Write, users.Profile{UID: uid, DisplayName: in.DisplayName, Email: in.Email,
		Timezone: in.Timezone, Language: in.Language, Groups: in.Groups, NextcloudAdmin: in.IsAdmin, IstotaAdmin: admin}, now)
	if err != nil {
		return SessionAnswer{}, err
	}
	if err := users.MarkSession(ctx, s.o.DB, uid, now); err != nil {
		return SessionAnswer{}, err
	}
	return SessionAnswer{Allowed: allowed, IstotaAdmin: admin, BotName: s.o.BotName, FilesPath: s.filesPath()}, nil
}

func (s *Service) filesPath() string { return "/" + s.o.BotDir }

// Authorize checks that uid is a user the sidecar knows and that the access settings
// in effect let them use the bot: 404 for an unknown uid, 403 for a refused one.
func (s *Service) Authorize(ctx context.Context, uid string) (users.User, error) {
	u, err := users.Get(ctx, s.o.DB.Read, uid)
	if errors.Is(err, store.ErrNotFound) {
		return users.User{}, notFound("user")
	}
	if err != nil {
		return users.User{}, err
	}
	if allowed, _ := s.o.Access.Decide(uid, u.Groups, u.NextcloudAdmin); !allowed {
		return users.User{}, &Error{Kind: KindNotAllowed, Message: "this account may not use " + s.o.BotName + "; ask your Nextcloud admin"}
	}
	return u, nil
}

// RFC 3339 UTC, or "" for the zero time (docs/user-api.md).
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
