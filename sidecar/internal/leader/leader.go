// Package leader elects the one process that runs the work that must happen once
// across every process sharing a database: the minute ticker of CRON.md jobs,
// heartbeats, briefings, invoicing, the mail poller, the Talk and mail outboxes, the
// nightly sleep cycle and its retention. Task workers are not elected: every process
// claims tasks from the shared queue.
//
// On PostgreSQL the leader is whoever holds a session-level advisory lock on a
// connection it keeps for that purpose. A process that dies loses its session and with
// it the lock, so another process takes over within Options.Interval. A leader checks
// its session every Interval and steps down (cancels the work) when it cannot; the
// database frees a broken session's lock once it notices the session is gone, so the
// two can overlap by about one Interval after a network split, never after a crash.
// The once-only work is idempotent on top (jobs are queued with a per-minute dedupe
// key, outbox rows are claimed), so an overlap does not do anything twice.
//
// On SQLite there is one process per database file (the data directory's lock says
// so): it always leads.
package leader

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

// DefaultKey is the advisory lock of the leader of istota serve.
const DefaultKey int64 = 0x15707a_1ead

// DefaultInterval is how often a follower tries to lead and a leader checks its hold.
const DefaultInterval = 2 * time.Second

// Options configure an Elector.
type Options struct {
	Key      int64         // the advisory lock; default DefaultKey
	Interval time.Duration // default DefaultInterval
	Logger   *slog.Logger
}

// Elector campaigns for leadership of one database.
type Elector struct {
	db      *store.DB
	opts    Options
	leading atomic.Bool
}

// New returns an Elector for db; Run campaigns.
func New(db *store.DB, opts Options) *Elector {
	if opts.Key == 0 {
		opts.Key = DefaultKey
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Elector{db: db, opts: opts}
}

// Leading reports whether this process leads now.
func (e *Elector) Leading() bool { return e.leading.Load() }

// Run campaigns until ctx ends. Each time this process wins, lead runs with a context
// that ends when leadership is lost (or ctx ends); Run waits for lead to return before
// campaigning again, so lead's work never runs twice in this process.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context)) {
	if e.db.Dialect() != store.Postgres {
		e.leading.Store(true)
		lead(ctx)
		e.leading.Store(false)
		return
	}
	for ctx.Err() == nil {
		conn, err := e.tryLock(ctx)
		if err != nil && ctx.Err() == nil {
			e.opts.Logger.Warn("leader election: could not ask the database", "err", err)
		}
		if conn != nil {
			e.hold(ctx, conn, lead)
		}
		select {
		case <-ctx.Done():
		case <-time.After(e.opts.Interval):
		}
	}
}

// tryLock returns the connection that now holds the lock, or nil when another
// process holds it.
func (e *Elector) tryLock(ctx context.Context) (*sql.Conn, error) {
	conn, err := e.db.Write.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("leader: connection: %w", err)
	}
	qctx, cancel := context.WithTimeout(ctx, e.opts.Interval*2)
	defer cancel()
	var got bool
	if err := conn.QueryRowContext(qctx, `SELECT pg_try_advisory_lock(?)`, e.opts.Key).Scan(&got); err != nil {
		discard(conn)
		return nil, fmt.Errorf("leader: try lock: %w", err)
	}
	if !got {
		conn.Close()
		return nil, nil
	}
	return conn, nil
}

// hold leads while conn's session holds the lock, then releases it.
func (e *Elector) hold(ctx context.Context, conn *sql.Conn, lead func(ctx context.Context)) {
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	e.leading.Store(true)
	e.opts.Logger.Info("this process leads: it runs the once-only loops")
	go func() { defer close(done); lead(lctx) }()
	t := time.NewTicker(e.opts.Interval)
	defer t.Stop()
	lost := error(nil)
	for lost == nil {
		select {
		case <-ctx.Done():
		case <-done:
		case <-t.C:
			lost = e.check(ctx, conn)
			continue
		}
		break
	}
	cancel()
	<-done
	e.leading.Store(false)
	if lost != nil {
		e.opts.Logger.Warn("this process lost the lead: its session with the database broke", "err", lost)
		discard(conn)
		return
	}
	// Stepping down on purpose: give the lock back before the connection goes to the pool.
	uctx, ucancel := context.WithTimeout(context.Background(), e.opts.Interval*2)
	defer ucancel()
	if _, err := conn.ExecContext(uctx, `SELECT pg_advisory_unlock(?)`, e.opts.Key); err != nil {
		discard(conn)
		return
	}
	conn.Close()
}

// check confirms that the session holding the lock is alive and still holds it.
func (e *Elector) check(ctx context.Context, conn *sql.Conn) error {
	qctx, cancel := context.WithTimeout(ctx, e.opts.Interval)
	defer cancel()
	var held bool
	err := conn.QueryRowContext(qctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND pid = pg_backend_pid() AND granted
		  AND ((classid::bigint << 32) | objid::bigint) = ?)`, e.opts.Key).Scan(&held)
	switch {
	case ctx.Err() != nil:
		return nil
	case err != nil:
		return err
	case !held:
		return errors.New("the advisory lock is no longer held")
	}
	return nil
}

// discard closes conn's session instead of returning it to the pool, so that a lock
// it may still hold is freed.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	conn.Close()
}
