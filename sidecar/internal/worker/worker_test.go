package worker

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
)

// waitLimit bounds every wait for something that must eventually happen. It is only a
// safety net against hanging; nothing is asserted about how long things take.
const waitLimit = 30 * time.Second

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// settleTime is how long negative checks ("nothing more was claimed") give the pool to
// do the wrong thing: many poll intervals of the test pools.
const settleTime = 200 * time.Millisecond

func newQueue(t *testing.T, opts queue.Options) (*queue.Queue, *store.DB) {
	t.Helper()
	db, err := testDBs.OpenPath(context.Background(), filepath.Join(t.TempDir(), "istota.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return queue.New(db, opts), db
}

func enqueue(t *testing.T, q *queue.Queue, user string, interactive bool) queue.Task {
	t.Helper()
	src := queue.SourceTalk
	if !interactive {
		src = queue.SourceCron
	}
	tk, _, err := q.Enqueue(context.Background(), queue.NewTask{
		UserID: user, Source: src, Interactive: interactive, Prompt: "work for " + user,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func get(t *testing.T, q *queue.Queue, id int64) queue.Task {
	t.Helper()
	tk, err := q.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func stats(t *testing.T, q *queue.Queue) queue.Stats {
	t.Helper()
	s, err := q.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// syncBuffer is a log destination safe for concurrent handlers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tracker is a handler that behaves like the executor (Start, work, Complete) and
// records what ran concurrently. Work lasts until gate is closed or ctx is cancelled.
type tracker struct {
	t     *testing.T
	q     *queue.Queue
	owner string
	gate  chan struct{}

	mu            sync.Mutex
	active        map[int64]queue.Task
	perUser       map[string]int
	maxActive     int
	maxBackground int
	maxPerUser    map[string]int
	causes        map[int64]error
	failures      []string
}

func newTracker(t *testing.T, q *queue.Queue, owner string) *tracker {
	return &tracker{
		t: t, q: q, owner: owner, gate: make(chan struct{}),
		active: map[int64]queue.Task{}, perUser: map[string]int{}, maxPerUser: map[string]int{},
		causes: map[int64]error{},
	}
}

func (tr *tracker) handle(ctx context.Context, t queue.Task) {
	if err := tr.q.Start(ctx, t.ID, tr.owner); err != nil {
		tr.fail("start %d: %v", t.ID, err)
		return
	}
	tr.mu.Lock()
	tr.active[t.ID] = t
	tr.perUser[t.UserID]++
	tr.maxActive = max(tr.maxActive, len(tr.active))
	tr.maxPerUser[t.UserID] = max(tr.maxPerUser[t.UserID], tr.perUser[t.UserID])
	bg := 0
	for _, a := range tr.active {
		if !a.Interactive {
			bg++
		}
	}
	tr.maxBackground = max(tr.maxBackground, bg)
	tr.mu.Unlock()

	select {
	case <-tr.gate:
	case <-ctx.Done():
	}

	// Leave before completing: the user's next task can only be claimed after the
	// completion commits, so an overlap seen here is a real one.
	tr.mu.Lock()
	delete(tr.active, t.ID)
	tr.perUser[t.UserID]--
	if ctx.Err() != nil {
		tr.causes[t.ID] = context.Cause(ctx)
	}
	tr.mu.Unlock()
	if ctx.Err() != nil {
		return // stopped: like the executor, leave the row to the pool and the queue
	}
	if err := tr.q.Complete(ctx, t.ID, tr.owner, queue.Outcome{Result: "done"}, nil); err != nil {
		tr.fail("complete %d: %v", t.ID, err)
	}
}

func (tr *tracker) fail(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.failures = append(tr.failures, fmt.Sprintf(format, args...))
}

func (tr *tracker) activeCount() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.active)
}

func (tr *tracker) isActive(id int64) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	_, ok := tr.active[id]
	return ok
}

func (tr *tracker) cause(id int64) (error, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	err, ok := tr.causes[id]
	return err, ok
}

func (tr *tracker) check() {
	tr.t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, f := range tr.failures {
		tr.t.Error(f)
	}
}

// startPool starts a pool with fast polling and lease renewal, closed at test end.
func startPool(t *testing.T, q *queue.Queue, h Handler, opts Options) *Pool {
	t.Helper()
	if opts.Owner == "" {
		opts.Owner = "test-owner"
	}
	opts.PollInterval = 10 * time.Millisecond
	if opts.RenewEvery == 0 {
		opts.RenewEvery = 20 * time.Millisecond
	}
	p := New(q, h, opts)
	p.Start(context.Background())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		p.Close(ctx)
	})
	return p
}

func TestNewDefaults(t *testing.T) {
	q, _ := newQueue(t, queue.Options{Lease: 90 * time.Second})
	tests := []struct {
		name         string
		in           Options
		max, reserve int
	}{
		{"zero", Options{}, 4, 1},
		{"no reservation", Options{Max: 3, ReservedInteractive: -1}, 3, 0},
		{"reservation capped", Options{Max: 2, ReservedInteractive: 5}, 2, 1},
		{"single slot", Options{Max: 1}, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New(q, func(context.Context, queue.Task) {}, tt.in)
			if p.opts.Max != tt.max || p.opts.ReservedInteractive != tt.reserve {
				t.Errorf("max/reserved = %d/%d, want %d/%d", p.opts.Max, p.opts.ReservedInteractive, tt.max, tt.reserve)
			}
			if p.opts.Owner == "" || p.opts.PollInterval != DefaultPollInterval || p.opts.RenewEvery != 30*time.Second {
				t.Errorf("defaults = %+v", p.opts)
			}
		})
	}
}

func TestGlobalCap(t *testing.T) {
	q, _ := newQueue(t, queue.Options{})
	tr := newTracker(t, q, "test-owner")
	const n = 8
	for i := range n {
		enqueue(t, q, fmt.Sprintf("user%d", i), true)
	}
	p := startPool(t, q, tr.handle, Options{Max: 3, ReservedInteractive: -1})

	waitFor(t, "three tasks running", func() bool { return tr.activeCount() >= 3 })
	p.Wake()
	time.Sleep(settleTime)
	if got := tr.activeCount(); got != 3 {
		t.Fatalf("%d handlers running, want the cap of 3", got)
	}
	if busy, max := p.Stats(); busy != 3 || max != 3 {
		t.Errorf("Stats = %d/%d, want 3/3", busy, max)
	}
	if got := len(p.Running()); got != 3 {
		t.Errorf("Running lists %d tasks", got)
	}
	close(tr.gate)
	waitFor(t, "all tasks completed", func() bool { return stats(t, q).Completed == n })
	tr.check()
	if tr.maxActive != 3 {
		t.Errorf("at most %d handlers ran at once, want 3", tr.maxActive)
	}
}

func TestReservedInteractiveSlot(t *testing.T) {
	q, _ := newQueue(t, queue.Options{})
	tr := newTracker(t, q, "test-owner")
	for i := range 3 {
		enqueue(t, q, fmt.Sprintf("cron%d", i), false)
	}
	p := startPool(t, q, tr.handle, Options{Max: 2, ReservedInteractive: 1})

	waitFor(t, "a background task running", func() bool { return tr.activeCount() >= 1 })
	p.Wake()
	time.Sleep(settleTime)
	if got := tr.activeCount(); got != 1 {
		t.Fatalf("%d background tasks running; the last slot is reserved for interactive work", got)
	}

	inter := enqueue(t, q, "alice", true)
	p.Wake()
	waitFor(t, "the interactive task in the reserved slot", func() bool { return tr.isActive(inter.ID) })

	close(tr.gate)
	waitFor(t, "all tasks completed", func() bool { return stats(t, q).Completed == 4 })
	tr.check()
	if tr.maxBackground != 1 {
		t.Errorf("%d background tasks ran at once, want 1", tr.maxBackground)
	}
}

func TestPerUserSerial(t *testing.T) {
	q, _ := newQueue(t, queue.Options{})
	tr := newTracker(t, q, "test-owner")
	alice := []queue.Task{enqueue(t, q, "alice", true), enqueue(t, q, "alice", true), enqueue(t, q, "alice", true)}
	bob := enqueue(t, q, "bob", true)
	p := startPool(t, q, tr.handle, Options{Max: 4, ReservedInteractive: -1})

	waitFor(t, "alice's first and bob's task running", func() bool {
		return tr.isActive(alice[0].ID) && tr.isActive(bob.ID)
	})
	p.Wake()
	time.Sleep(settleTime)
	if got := tr.activeCount(); got != 2 {
		t.Fatalf("%d tasks running; alice's others must wait for her first", got)
	}
	close(tr.gate)
	waitFor(t, "all tasks completed", func() bool { return stats(t, q).Completed == 4 })
	tr.check()
	if tr.maxPerUser["alice"] != 1 {
		t.Errorf("alice had %d tasks running at once", tr.maxPerUser["alice"])
	}
}

func TestCancelStopsHandler(t *testing.T) {
	ctx := context.Background()
	q, _ := newQueue(t, queue.Options{})
	tr := newTracker(t, q, "test-owner")
	tk := enqueue(t, q, "alice", true)
	// Slow renewals: the stop must come from Cancel, not from a renewal noticing.
	p := startPool(t, q, tr.handle, Options{RenewEvery: time.Hour})

	waitFor(t, "the task running", func() bool { return tr.isActive(tk.ID) })
	if got := p.Running(); len(got) != 1 || got[0] != tk.ID {
		t.Fatalf("Running = %v", got)
	}
	if _, err := q.Cancel(ctx, tk.ID); err != nil {
		t.Fatal(err)
	}
	if !p.Cancel(tk.ID) {
		t.Fatal("Cancel did not find the running task")
	}
	waitFor(t, "the handler to return", func() bool { return len(p.Running()) == 0 })
	if cause, ok := tr.cause(tk.ID); !ok || !errors.Is(cause, queue.ErrCancelled) {
		t.Errorf("handler stopped with cause %v, want ErrCancelled", cause)
	}
	if got := get(t, q, tk.ID); got.Status != queue.Cancelled {
		t.Errorf("task is %s, want cancelled", got.Status)
	}
	if p.Cancel(tk.ID) || p.Cancel(999) {
		t.Error("Cancel of a task not running here reported true")
	}
	tr.check()
}

func TestLostLeaseStopsHandler(t *testing.T) {
	ctx := context.Background()
	q, _ := newQueue(t, queue.Options{})
	tr := newTracker(t, q, "test-owner")
	tk := enqueue(t, q, "alice", true)
	p := startPool(t, q, tr.handle, Options{})

	waitFor(t, "the task running", func() bool { return tr.isActive(tk.ID) })
	// Cancelled elsewhere (another process, the admin API): only the row changes.
	if _, err := q.Cancel(ctx, tk.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the handler to return", func() bool { return len(p.Running()) == 0 })
	if cause, ok := tr.cause(tk.ID); !ok || !errors.Is(cause, queue.ErrLeaseLost) || !errors.Is(cause, queue.ErrCancelled) {
		t.Errorf("handler stopped with cause %v, want lease lost / cancelled", cause)
	}
	tr.check()
}

func TestCloseWaitsForHandlers(t *testing.T) {
	q, _ := newQueue(t, queue.Options{})
	tr := newTracker(t, q, "test-owner")
	first := enqueue(t, q, "alice", true)
	p := startPool(t, q, tr.handle, Options{})
	waitFor(t, "the task running", func() bool { return tr.isActive(first.ID) })

	closed := make(chan error, 1)
	go func() { closed <- p.Close(context.Background()) }()
	time.Sleep(settleTime)
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a handler was running", err)
	default:
	}
	// Closing: new work is no longer claimed.
	second := enqueue(t, q, "bob", true)
	p.Wake()
	time.Sleep(settleTime)
	if tr.isActive(second.ID) {
		t.Fatal("a task was claimed after Close")
	}

	close(tr.gate)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close = %v", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Close did not return after the handler finished")
	}
	if got := get(t, q, first.ID); got.Status != queue.Completed {
		t.Errorf("running task ended %s, want completed", got.Status)
	}
	if got := get(t, q, second.ID); got.Status != queue.Pending {
		t.Errorf("unclaimed task is %s, want pending", got.Status)
	}
	tr.check()
}

func TestCloseTimeoutReleasesTasks(t *testing.T) {
	q, _ := newQueue(t, queue.Options{})
	tr := newTracker(t, q, "test-owner")
	tk := enqueue(t, q, "alice", true)
	p := startPool(t, q, tr.handle, Options{})
	waitFor(t, "the task running", func() bool { return tr.isActive(tk.ID) })

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want the deadline error", err)
	}
	if n := len(p.Running()); n != 0 {
		t.Fatalf("%d handlers still running after Close returned", n)
	}
	if cause, ok := tr.cause(tk.ID); !ok || !errors.Is(cause, ErrShutdown) {
		t.Errorf("handler stopped with cause %v, want ErrShutdown", cause)
	}
	got := get(t, q, tk.ID)
	if got.Status != queue.Pending || got.Attempts != 0 || got.LeaseOwner != "" {
		t.Errorf("interrupted task = %s, attempts %d, owner %q; want pending again without an attempt",
			got.Status, got.Attempts, got.LeaseOwner)
	}
	tr.check()
}

func TestStartContextStopsPool(t *testing.T) {
	q, _ := newQueue(t, queue.Options{})
	tr := newTracker(t, q, "test-owner")
	tk := enqueue(t, q, "alice", true)
	p := New(q, tr.handle, Options{Owner: "test-owner", PollInterval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	p.Start(ctx)
	waitFor(t, "the task running", func() bool { return tr.isActive(tk.ID) })

	cancel()
	waitFor(t, "the handler to return", func() bool { return len(p.Running()) == 0 })
	closeCtx, stop := context.WithTimeout(context.Background(), waitLimit)
	defer stop()
	if err := p.Close(closeCtx); err != nil {
		t.Fatalf("Close after the start context ended = %v", err)
	}
	if got := get(t, q, tk.ID); got.Status != queue.Pending || got.Attempts != 0 {
		t.Errorf("interrupted task = %s, attempts %d; want pending without an attempt", got.Status, got.Attempts)
	}
	tr.check()
}

func TestPanicIsRecoveredAndTaskFailed(t *testing.T) {
	ctx := context.Background()
	q, _ := newQueue(t, queue.Options{})
	var logs syncBuffer
	var (
		mu      sync.Mutex
		notices []string
	)
	const owner = "test-owner"
	handler := func(ctx context.Context, t queue.Task) {
		if err := q.Start(ctx, t.ID, owner); err != nil {
			return
		}
		if t.UserID == "alice" {
			panic("nil map in a skill")
		}
		_ = q.Complete(ctx, t.ID, owner, queue.Outcome{Result: "fine"}, nil)
	}
	bad, _, err := q.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: queue.SourceTalk, Interactive: true,
		Prompt: "crash", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	startPool(t, q, handler, Options{
		Owner:  owner,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		FailNotice: func(tx *sql.Tx, t queue.Task, final bool) error {
			mu.Lock()
			defer mu.Unlock()
			notices = append(notices, fmt.Sprintf("%d final=%v", t.ID, final))
			return nil
		},
	})

	waitFor(t, "the task to fail", func() bool { return get(t, q, bad.ID).Status == queue.Failed })
	got := get(t, q, bad.ID)
	if got.Error != reasonPanic || got.Attempts != 1 {
		t.Errorf("failed task = error %q, attempts %d", got.Error, got.Attempts)
	}
	out := logs.String()
	if !strings.Contains(out, "panicked") || !strings.Contains(out, "nil map in a skill") || !strings.Contains(out, fmt.Sprintf("task_id=%d", bad.ID)) {
		t.Errorf("panic not logged with its task:\n%s", out)
	}
	mu.Lock()
	if want := fmt.Sprintf("%d final=true", bad.ID); len(notices) != 1 || notices[0] != want {
		t.Errorf("FailNotice calls = %v, want [%s]", notices, want)
	}
	mu.Unlock()

	// The pool keeps working.
	good := enqueue(t, q, "bob", true)
	waitFor(t, "the next task to complete", func() bool { return get(t, q, good.ID).Status == queue.Completed })
}

func TestUnsettledTaskIsFailed(t *testing.T) {
	q, _ := newQueue(t, queue.Options{})
	const owner = "test-owner"
	tk := enqueue(t, q, "alice", true)
	startPool(t, q, func(ctx context.Context, t queue.Task) {
		_ = q.Start(ctx, t.ID, owner) // and then forget to complete it
	}, Options{Owner: owner})

	waitFor(t, "the task to be failed", func() bool { return get(t, q, tk.ID).Attempts == 1 })
	got := get(t, q, tk.ID)
	if got.Status != queue.Pending || got.Error != reasonUnsettle || got.LeaseOwner != "" {
		t.Errorf("task = %s, error %q, owner %q; want a retry", got.Status, got.Error, got.LeaseOwner)
	}
}

func TestReclaimsExpiredLeases(t *testing.T) {
	ctx := context.Background()
	// A short lease, so that a dead worker's claim expires during the test.
	q, _ := newQueue(t, queue.Options{Lease: 300 * time.Millisecond, Backoff: []time.Duration{10 * time.Millisecond}})
	tk := enqueue(t, q, "alice", true)
	if _, err := q.Claim(ctx, "dead-process", false); err != nil {
		t.Fatal(err)
	}
	if err := q.Start(ctx, tk.ID, "dead-process"); err != nil {
		t.Fatal(err)
	}
	tr := newTracker(t, q, "test-owner")
	close(tr.gate)
	// Renewals well inside the lease keep this pool's own runs alive meanwhile.
	startPool(t, q, tr.handle, Options{RenewEvery: 50 * time.Millisecond})

	waitFor(t, "the orphaned task to run again", func() bool { return get(t, q, tk.ID).Status == queue.Completed })
	got := get(t, q, tk.ID)
	if got.Attempts != 1 || got.LeaseOwner != "test-owner" {
		t.Errorf("task = attempts %d, owner %q; want one counted interrupted attempt, completed here",
			got.Attempts, got.LeaseOwner)
	}
	tr.check()
}

// A task waiting for the user's answer (parked) gives its slot to the next task, up to
// MaxParked of them; when it goes on the pool runs over Max and claims nothing more until
// enough tasks finished.
func TestParkedTaskFreesItsSlot(t *testing.T) {
	q, _ := newQueue(t, queue.Options{})
	tr := newTracker(t, q, "test-owner")
	var ids []int64
	for i := range 4 {
		ids = append(ids, enqueue(t, q, fmt.Sprintf("user%d", i), true).ID)
	}
	p := startPool(t, q, tr.handle, Options{Max: 1, ReservedInteractive: -1, MaxParked: 1})

	waitFor(t, "the first task running", func() bool { return tr.isActive(ids[0]) })
	p.Park(ids[0])
	waitFor(t, "the second task in the parked one's slot", func() bool { return tr.isActive(ids[1]) })
	p.Park(ids[1]) // beyond MaxParked: still holds its slot
	p.Wake()
	time.Sleep(settleTime)
	if got := tr.activeCount(); got != 2 {
		t.Fatalf("%d handlers running, want 2 (one parked, one over MaxParked)", got)
	}
	if busy, _ := p.Stats(); busy != 1 {
		t.Errorf("Stats busy = %d, want 1", busy)
	}

	// Both go on: over Max, nothing more is claimed.
	p.Unpark(ids[0])
	p.Unpark(ids[1])
	p.Wake()
	time.Sleep(settleTime)
	if got := tr.activeCount(); got != 2 || tr.isActive(ids[2]) {
		t.Fatalf("%d handlers running after the answers, want the 2 that went on", got)
	}
	close(tr.gate)
	waitFor(t, "all tasks completed", func() bool { return stats(t, q).Completed == 4 })
	tr.check()
	if tr.maxActive != 2 {
		t.Errorf("at most %d handlers ran at once, want 2", tr.maxActive)
	}
}
