// Package jobs runs the work users give Istota in files rather than in Talk: the jobs of
// CRON.md and the lines of TASKS.md. Each minute it refreshes the users' config files,
// syncs CRON.md into the schedule, queues the runs that are due and the new TASKS.md
// lines as ordinary queue tasks, and writes the outcomes back (failure counts and
// automatic disables, TASKS.md markers). Every step is keyed so that a crash or a
// repeated tick never runs or reports anything twice.
package jobs

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/schedule"
	"github.com/istota/istota/sidecar/internal/store"
)

// User is what the runner needs to know about a user.
type User struct {
	ID       string
	Timezone string
	IsAdmin  bool
	Email    string
}

// Files gives the users and their config files (CRON.md, TASKS.md in the bot folder).
type Files interface {
	Users(ctx context.Context) ([]User, error)
	// Refresh brings the user's files up to date from Nextcloud; an error means the
	// local copies are used as they are.
	Refresh(ctx context.Context, uid string) error
	// ReadConfig reads a config file; exists is false when there is none.
	ReadConfig(uid, name string) (data []byte, exists bool, err error)
	// WriteConfig replaces a config file and sends it to Nextcloud (retried later when
	// Nextcloud is down).
	WriteConfig(ctx context.Context, uid, name string, data []byte) error
}

// Options configure a Runner.
type Options struct {
	BotName string
	// RefreshEvery is how often a user's files are pulled from Nextcloud; default 5 min.
	RefreshEvery time.Duration
	// MaxAttempts of a scheduled run; default 2 (one retry).
	MaxAttempts int
	Clock       func() time.Time
	Logger      *slog.Logger
	OnTask      func() // wake-up hint for the worker pool
	OnReply     func() // wake-up hint for the outbox
}

// Runner is the loop; Run owns it.
type Runner struct {
	db    *store.DB
	sched *schedule.Scheduler
	q     *queue.Queue
	ob    *outbox.Outbox
	files Files
	opts  Options
	wake  chan struct{}

	mu        sync.Mutex
	refreshed map[string]time.Time
}

// New returns a Runner.
func New(db *store.DB, sched *schedule.Scheduler, q *queue.Queue, ob *outbox.Outbox, files Files, opts Options) *Runner {
	if opts.RefreshEvery <= 0 {
		opts.RefreshEvery = 5 * time.Minute
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 2
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.OnTask == nil {
		opts.OnTask = func() {}
	}
	if opts.OnReply == nil {
		opts.OnReply = func() {}
	}
	if opts.BotName == "" {
		opts.BotName = "Istota"
	}
	return &Runner{db: db, sched: sched, q: q, ob: ob, files: files, opts: opts,
		wake: make(chan struct{}, 1), refreshed: map[string]time.Time{}}
}

// Wake asks for a tick now (after !cron run), without waiting for the next minute.
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run ticks at the start of every minute, and when woken, until ctx ends.
func (r *Runner) Run(ctx context.Context) {
	schedule.EveryMinute(ctx, r.opts.Clock, r.wake, func(ctx context.Context) {
		if err := r.Tick(ctx); err != nil && ctx.Err() == nil {
			r.opts.Logger.Warn("scheduled work tick failed", "err", err)
		}
	})
}

// Tick does one round: refresh and sync every user's files, queue what is due, and
// record what finished. Problems with one user never stop the others.
func (r *Runner) Tick(ctx context.Context) error {
	now := r.opts.Clock()
	users, err := r.files.Users(ctx)
	if err != nil {
		return fmt.Errorf("jobs: users: %w", err)
	}
	byID := make(map[string]User, len(users))
	for _, u := range users {
		byID[u.ID] = u
		r.refresh(ctx, u.ID, now)
		if err := r.syncCron(ctx, u, now); err != nil {
			r.opts.Logger.Warn("syncing CRON.md failed", "user_id", u.ID, "err", err)
		}
		if err := r.pollTasks(ctx, u, now); err != nil {
			r.opts.Logger.Warn("reading TASKS.md failed", "user_id", u.ID, "err", err)
		}
	}
	if err := r.enqueueDue(ctx, byID, now); err != nil {
		return err
	}
	if err := r.recordResults(ctx, now); err != nil {
		return err
	}
	return nil
}

func (r *Runner) refresh(ctx context.Context, uid string, now time.Time) {
	r.mu.Lock()
	last, seen := r.refreshed[uid]
	due := !seen || now.Sub(last) >= r.opts.RefreshEvery
	if due {
		r.refreshed[uid] = now
	}
	r.mu.Unlock()
	if !due {
		return
	}
	if err := r.files.Refresh(ctx, uid); err != nil && ctx.Err() == nil {
		r.opts.Logger.Warn("could not refresh the user's files from Nextcloud; using the local copies", "user_id", uid, "err", err)
	}
}

// forceRefresh makes the next tick pull uid's files again, e.g. after !cron run.
func (r *Runner) forceRefresh(uid string) {
	r.mu.Lock()
	delete(r.refreshed, uid)
	r.mu.Unlock()
}

// notice queues a message to the user's private conversation, if they have one, in tx.
func (r *Runner) notice(ctx context.Context, tx *sql.Tx, uid, key, text string) (bool, error) {
	token, ok, err := convlog.PrivateConversation(ctx, r.db.Read, uid)
	if err != nil || !ok {
		return false, err
	}
	if err := r.ob.EnqueueTx(ctx, tx, outbox.Message{Token: token, Kind: "notice", Text: text, Key: key}); err != nil {
		return false, err
	}
	return true, nil
}

// noticeAbout queues a notice about one of the user's files, in tx: in the conversation
// where the agent last changed the file (the user asked for the change there), else in
// their private conversation.
func (r *Runner) noticeAbout(ctx context.Context, tx *sql.Tx, uid, file, key, text string) (bool, error) {
	token, edited, ok, err := convlog.NoticeTarget(ctx, r.db.Read, tx, uid, file, r.opts.Clock())
	if err != nil || !ok {
		return false, err
	}
	if edited {
		text = convlog.EditedPrefix(file) + text
	}
	if err := r.ob.EnqueueTx(ctx, tx, outbox.Message{Token: token, Kind: "notice", Text: text, Key: key}); err != nil {
		return false, err
	}
	return true, nil
}

func excerpt(s string, n int) string {
	r := []rune(strings.TrimSpace(s))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n-1]) + "…"
}
