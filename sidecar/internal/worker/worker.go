// Package worker runs queued tasks: a dispatcher claims tasks from the queue while slots
// are free, hands each to the handler in its own goroutine, keeps the leases of running
// tasks fresh and reclaims leases that other (dead) workers let expire.
//
// The queue in SQLite is the truth. Wake is only a hint that saves waiting for the next
// poll; a task enqueued by another process is found by polling.
package worker

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/queue"
)

// Handler runs one claimed (locked) task. It is responsible for calling the queue's
// Start, then Complete or Fail with the pool's Owner. ctx is cancelled when the task must
// stop: context.Cause(ctx) is queue.ErrCancelled (Pool.Cancel), an error matching
// queue.ErrLeaseLost (the lease renewal found the task cancelled or taken away), or
// ErrShutdown / the Start context's error (the pool is stopping).
type Handler func(ctx context.Context, t queue.Task)

// ErrShutdown is the cancellation cause of handlers stopped because Close ran out of time.
var ErrShutdown = errors.New("worker pool shutting down")

// Options configure a Pool. Zero values take the documented defaults.
type Options struct {
	// Max is the global number of concurrent tasks; default 4.
	Max int
	// ReservedInteractive is how many of the Max slots only interactive tasks may use, so
	// a person never waits behind background work; default 1, negative for none. It is
	// capped at Max-1 so that background work can run at all.
	ReservedInteractive int
	// Owner names this process in task leases and must be unique among processes sharing
	// the database; default hostname:pid:start-time.
	Owner string
	// PollInterval is how often the queue is checked without a Wake; default 2 s.
	PollInterval time.Duration
	// RenewEvery is how often running tasks' leases are renewed and expired leases
	// reclaimed; default a third of the queue's lease.
	RenewEvery time.Duration
	// Logger receives the pool's own events; default discards.
	Logger *slog.Logger
	// MaxParked is how many tasks waiting for the user's answer (Park) may stand aside
	// so that others use their slots; default Max, negative for none. Their agents stay
	// alive (the turn is held), so this bounds the extra processes.
	MaxParked int
	// FailNotice, if set, runs inside the transaction in which the pool itself fails a
	// task (its handler panicked or returned without completing or failing it), so that
	// the caller can queue a notice to the user as its handler would.
	FailNotice func(tx *sql.Tx, t queue.Task, final bool) error
}

// Defaults for Options.
const (
	DefaultMax                 = 4
	DefaultReservedInteractive = 1
	DefaultPollInterval        = 2 * time.Second
)

// maxClaimBackoff bounds the pause after repeated claim errors (e.g. a locked database).
const maxClaimBackoff = time.Minute

// Reasons stored in tasks.error when the pool fails a task itself.
const (
	reasonPanic    = "internal error: the task crashed"
	reasonUnsettle = "internal error: the task ended without a result"
)

// Pool is a bounded set of task runners fed from the queue.
type Pool struct {
	q      *queue.Queue
	handle Handler
	opts   Options
	log    *slog.Logger

	wake     chan struct{} // capacity 1: a pending hint is never lost, never blocks
	stop     chan struct{} // closed by Close: stop claiming
	stopOnce sync.Once
	done     chan struct{} // closed when the dispatcher has returned
	wg       sync.WaitGroup

	mu      sync.Mutex
	started bool
	runs    map[int64]*run
	// base carries the Start context's values without its cancellation: queue calls
	// that record how a run ended must still succeed while the pool stops.
	base context.Context
}

// run is one task in flight.
type run struct {
	task   queue.Task
	cancel context.CancelCauseFunc
	// parked: the task waits for the user's answer (see Park).
	parked bool
}

// New returns a Pool that runs handle for tasks of q. Call Start to begin.
func New(q *queue.Queue, handle Handler, opts Options) *Pool {
	if opts.Max <= 0 {
		opts.Max = DefaultMax
	}
	switch {
	case opts.ReservedInteractive == 0:
		opts.ReservedInteractive = DefaultReservedInteractive
	case opts.ReservedInteractive < 0:
		opts.ReservedInteractive = 0
	}
	opts.ReservedInteractive = min(opts.ReservedInteractive, opts.Max-1)
	switch {
	case opts.MaxParked == 0:
		opts.MaxParked = opts.Max
	case opts.MaxParked < 0:
		opts.MaxParked = 0
	}
	if opts.Owner == "" {
		host, _ := os.Hostname()
		opts.Owner = fmt.Sprintf("%s:%d:%d", host, os.Getpid(), time.Now().UnixNano())
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.RenewEvery <= 0 {
		opts.RenewEvery = q.Lease() / 3
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Pool{
		q:      q,
		handle: handle,
		opts:   opts,
		log:    opts.Logger,
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		runs:   map[int64]*run{},
	}
}

// Owner is the lease owner this pool claims tasks as.
func (p *Pool) Owner() string { return p.opts.Owner }

// Start starts the dispatcher. Cancelling ctx stops the pool hard: claiming stops and
// running handlers are cancelled (their tasks go back to the queue without counting an
// attempt). Close is the graceful way. Start runs the pool once; later calls do nothing.
func (p *Pool) Start(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return
	}
	p.started = true
	p.base = context.WithoutCancel(ctx)
	go p.loop(ctx)
}

// Close stops claiming and waits for running handlers to finish on their own. If ctx
// expires first it cancels them (cause ErrShutdown; their tasks go back to the queue
// without counting an attempt), still waits for every goroutine, and returns ctx's error.
func (p *Pool) Close(ctx context.Context) error {
	p.stopOnce.Do(func() { close(p.stop) })
	p.mu.Lock()
	started := p.started
	p.mu.Unlock()
	if !started {
		return nil
	}
	finished := make(chan struct{})
	go func() {
		<-p.done
		p.wg.Wait()
		close(finished)
	}()
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
	}
	p.cancelAll(ErrShutdown)
	<-finished
	return fmt.Errorf("worker: close: running tasks were stopped: %w", ctx.Err())
}

// Wake hints that new work may be due.
func (p *Pool) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Cancel cancels the handler running taskID in this process (its agent's process group
// is then killed by the launcher) and reports whether there was one. Cancel the task in
// the queue first, so that the handler's task is not retried.
func (p *Pool) Cancel(taskID int64) bool {
	p.mu.Lock()
	r, ok := p.runs[taskID]
	p.mu.Unlock()
	if ok {
		r.cancel(queue.ErrCancelled)
	}
	return ok
}

// Running lists the ids of tasks whose handlers are running, in ascending order.
func (p *Pool) Running() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]int64, 0, len(p.runs))
	for id := range p.runs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Stats reports the number of busy slots (parked tasks do not count) and the global cap.
func (p *Pool) Stats() (busy, max int) {
	return p.busy(), p.opts.Max
}

// busy counts the slots in use: every run but the parked ones (up to MaxParked).
func (p *Pool) busy() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	parked := 0
	for _, r := range p.runs {
		if r.parked {
			parked++
		}
	}
	return len(p.runs) - min(parked, p.opts.MaxParked)
}

// Park marks a running task as waiting for the user's answer (an approval question
// that may wait half an hour): its slot goes to the next task while it waits, up to
// MaxParked such tasks. Unpark when it goes on; the pool then runs over Max until
// enough tasks finish, rather than keep an answered task waiting for a slot.
func (p *Pool) Park(taskID int64) {
	if p.setParked(taskID, true) {
		p.Wake()
	}
}

// Unpark ends Park.
func (p *Pool) Unpark(taskID int64) { p.setParked(taskID, false) }

func (p *Pool) setParked(taskID int64, parked bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.runs[taskID]
	if !ok || r.parked == parked {
		return false
	}
	r.parked = parked
	return true
}

// loop is the dispatcher. It claims until ctx is cancelled or Close is called, then keeps
// renewing leases until the last handler has returned.
func (p *Pool) loop(ctx context.Context) {
	defer close(p.done)
	poll := time.NewTicker(p.opts.PollInterval)
	defer poll.Stop()
	renew := time.NewTicker(p.opts.RenewEvery)
	defer renew.Stop()

	ctxDone, stop := ctx.Done(), p.stop
	claiming := true
	var (
		errPause   time.Duration // grows while claims keep failing
		claimAfter time.Time
	)
	for {
		if claiming && !time.Now().Before(claimAfter) {
			if err := p.fill(ctx); err != nil {
				errPause = min(max(2*errPause, p.opts.PollInterval), maxClaimBackoff)
				claimAfter = time.Now().Add(errPause)
				p.log.Error("claim task", "err", err, "retry_in", errPause)
			} else {
				errPause = 0
			}
		}
		if !claiming && p.busy() == 0 {
			return
		}
		select {
		case <-ctxDone:
			// Handlers derive from ctx and are being cancelled; wait for them to return.
			claiming, ctxDone = false, nil
		case <-stop:
			claiming, stop = false, nil
		case <-p.wake:
		case <-poll.C:
		case <-renew.C:
			p.renewAll()
			if claiming {
				p.reclaim()
			}
		}
	}
}

// fill claims tasks while slots are free. When no more than ReservedInteractive slots are
// free, only interactive tasks may take them.
func (p *Pool) fill(ctx context.Context) error {
	for ctx.Err() == nil {
		free := p.opts.Max - p.busy()
		if free <= 0 {
			return nil
		}
		select {
		case <-p.stop:
			return nil
		default:
		}
		t, err := p.q.Claim(p.base, p.opts.Owner, free <= p.opts.ReservedInteractive)
		if errors.Is(err, queue.ErrNoTask) {
			return nil
		}
		if err != nil {
			return err
		}
		p.launch(ctx, t)
	}
	return nil
}

// launch runs the handler for a claimed task in a goroutine owned by the pool.
func (p *Pool) launch(ctx context.Context, t queue.Task) {
	hctx, cancel := context.WithCancelCause(ctx)
	p.mu.Lock()
	p.runs[t.ID] = &run{task: t, cancel: cancel}
	p.mu.Unlock()
	p.log.Debug("task claimed", "task_id", t.ID, "user_id", t.UserID, "interactive", t.Interactive)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.Wake() // a slot is free
		defer func() {
			p.mu.Lock()
			delete(p.runs, t.ID)
			p.mu.Unlock()
		}()
		defer cancel(nil)
		rec, stack := p.call(hctx, t)
		p.settle(hctx, t, rec, stack)
	}()
}

// call runs the handler and turns a panic into a value, so that one broken task cannot
// take the sidecar down or leave its row locked until the lease expires.
func (p *Pool) call(ctx context.Context, t queue.Task) (rec any, stack []byte) {
	defer func() {
		if r := recover(); r != nil {
			rec, stack = r, debug.Stack()
		}
	}()
	p.handle(ctx, t)
	return nil, nil
}

// settle makes sure the task does not stay claimed after its handler returned.
func (p *Pool) settle(ctx context.Context, t queue.Task, rec any, stack []byte) {
	log := p.log.With("task_id", t.ID, "user_id", t.UserID)
	if rec != nil {
		log.Error("task handler panicked", "panic", fmt.Sprint(rec), "stack", string(stack))
		p.fail(t, reasonPanic, log)
		return
	}
	cur, err := p.q.Get(p.base, t.ID)
	if err != nil {
		log.Error("check task after its handler returned", "err", err)
		return
	}
	if (cur.Status != queue.Locked && cur.Status != queue.Running) || cur.LeaseOwner != p.opts.Owner {
		return // settled by the handler, or no longer ours
	}
	if ctx.Err() != nil && !errors.Is(context.Cause(ctx), queue.ErrCancelled) &&
		!errors.Is(context.Cause(ctx), queue.ErrLeaseLost) {
		// The pool is stopping: give the task back for the next start, no attempt lost.
		if err := p.q.Release(p.base, t.ID, p.opts.Owner); err != nil && !errors.Is(err, queue.ErrLeaseLost) {
			log.Error("release interrupted task", "err", err)
			return
		}
		log.Info("interrupted task returned to the queue")
		return
	}
	log.Error("task handler returned without completing or failing the task")
	p.fail(t, reasonUnsettle, log)
}

// fail records a failure on behalf of a handler that could not.
func (p *Pool) fail(t queue.Task, reason string, log *slog.Logger) {
	var within func(tx *sql.Tx, final bool) error
	if p.opts.FailNotice != nil {
		within = func(tx *sql.Tx, final bool) error { return p.opts.FailNotice(tx, t, final) }
	}
	retryAt, final, err := p.q.Fail(p.base, t.ID, p.opts.Owner, reason, false, within)
	switch {
	case errors.Is(err, queue.ErrLeaseLost):
		// Finished, cancelled or reclaimed meanwhile: nothing left to record.
	case err != nil:
		log.Error("fail task", "err", err)
	case final:
		log.Warn("task failed for good", "reason", reason)
	default:
		log.Warn("task will be retried", "reason", reason, "retry_at", retryAt)
	}
}

// renewAll extends the leases of running tasks and stops those whose lease is gone.
func (p *Pool) renewAll() {
	p.mu.Lock()
	runs := make([]*run, 0, len(p.runs))
	for _, r := range p.runs {
		runs = append(runs, r)
	}
	p.mu.Unlock()
	for _, r := range runs {
		err := p.q.Renew(p.base, r.task.ID, p.opts.Owner)
		switch {
		case err == nil:
		case errors.Is(err, queue.ErrCancelled):
			p.log.Info("task was cancelled; stopping its run", "task_id", r.task.ID, "user_id", r.task.UserID)
			r.cancel(err)
		case errors.Is(err, queue.ErrLeaseLost):
			// A handler that has just finished its task and not yet returned lands here
			// too: no news, and it must not be cancelled — its commit may still be on its
			// way back (PostgreSQL's driver reports a commit cut off by cancellation as
			// failed even when the server made it). A task taken away from a live worker
			// is stopped.
			if cur, gerr := p.q.Get(p.base, r.task.ID); gerr == nil && cur.Status.Finished() && cur.LeaseOwner == p.opts.Owner {
				continue
			}
			r.cancel(err)
			p.log.Warn("lease lost; stopping the run", "task_id", r.task.ID, "user_id", r.task.UserID, "err", err)
		default:
			p.log.Error("renew task lease", "task_id", r.task.ID, "err", err)
		}
	}
}

// reclaim returns tasks whose workers died to the queue.
func (p *Pool) reclaim() {
	n, err := p.q.ReclaimExpired(p.base)
	if err != nil {
		p.log.Error("reclaim expired leases", "err", err)
	}
	if n > 0 {
		p.log.Warn("reclaimed tasks whose lease expired", "count", n)
		p.Wake()
	}
}

// cancelAll cancels every running handler with cause.
func (p *Pool) cancelAll(cause error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.runs {
		r.cancel(cause)
	}
}
