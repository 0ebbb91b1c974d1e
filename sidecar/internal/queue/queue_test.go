package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/store/storetest"
)

// fakeClock is a settable time source shared by the queue under test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// dbs opens the tests' databases: SQLite files, or PostgreSQL in the run TestOnPostgres starts.
var dbs storetest.DBs

func TestMain(m *testing.M) { os.Exit(storetest.Main(m, &dbs)) }

// TestOnPostgres runs every test of this package again on a real PostgreSQL.
func TestOnPostgres(t *testing.T) { storetest.RunOnPostgres(t) }

func openDB(t *testing.T, path string) *store.DB {
	t.Helper()
	return dbs.Open(t, path)
}

func newQueue(t *testing.T, opts Options) (*Queue, *fakeClock, *store.DB) {
	t.Helper()
	db := openDB(t, filepath.Join(t.TempDir(), "istota.db"))
	clock := &fakeClock{t: time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)}
	opts.Clock = clock.Now
	return New(db, opts), clock, db
}

func task(user string, interactive bool) NewTask {
	return NewTask{UserID: user, Source: SourceTalk, Interactive: interactive, Prompt: "hello from " + user}
}

func mustEnqueue(t *testing.T, q *Queue, nt NewTask) Task {
	t.Helper()
	tk, created, err := q.Enqueue(context.Background(), nt)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if !created {
		t.Fatalf("Enqueue: created = false for a new task")
	}
	return tk
}

func mustClaim(t *testing.T, q *Queue, owner string, interactiveOnly bool) Task {
	t.Helper()
	tk, err := q.Claim(context.Background(), owner, interactiveOnly)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return tk
}

func mustGet(t *testing.T, q *Queue, id int64) Task {
	t.Helper()
	tk, err := q.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%d): %v", id, err)
	}
	return tk
}

func wantNoTask(t *testing.T, q *Queue, interactiveOnly bool) {
	t.Helper()
	tk, err := q.Claim(context.Background(), "w", interactiveOnly)
	if !errors.Is(err, ErrNoTask) {
		t.Fatalf("Claim = task %d, %v; want ErrNoTask", tk.ID, err)
	}
}

func TestEnqueueValidation(t *testing.T) {
	q, _, _ := newQueue(t, Options{})
	tests := []struct {
		name string
		nt   NewTask
	}{
		{"no user", NewTask{Source: SourceTalk, Prompt: "hi"}},
		{"blank prompt", NewTask{UserID: "alice", Source: SourceTalk, Prompt: "  \n"}},
		{"unknown source", NewTask{UserID: "alice", Source: "pigeon", Prompt: "hi"}},
		{"negative attempts", NewTask{UserID: "alice", Source: SourceCLI, Prompt: "hi", MaxAttempts: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := q.Enqueue(context.Background(), tt.nt); err == nil {
				t.Fatal("Enqueue accepted an invalid task")
			}
		})
	}
	st, err := q.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st != (Stats{}) {
		t.Errorf("invalid tasks were stored: %+v", st)
	}
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	q, clock, _ := newQueue(t, Options{})
	start := clock.Now()
	nt := NewTask{
		UserID: "alice", Source: SourceTalk, Interactive: true, Prompt: "what is on today?",
		ConversationToken: "abc123", ReplyToMessageID: 42, DedupeKey: "talk:abc123:42",
	}
	tk := mustEnqueue(t, q, nt)
	if tk.Status != Pending || tk.UserID != "alice" || tk.Prompt != nt.Prompt || !tk.Interactive ||
		tk.ConversationToken != "abc123" || tk.ReplyToMessageID != 42 || tk.DedupeKey != nt.DedupeKey ||
		tk.MaxAttempts != DefaultMaxAttempts || !tk.CreatedAt.Equal(start) || !tk.NextAttemptAt.Equal(start) {
		t.Fatalf("enqueued task = %+v", tk)
	}

	claimed := mustClaim(t, q, "w1", false)
	if claimed.ID != tk.ID || claimed.Status != Locked || claimed.LeaseOwner != "w1" ||
		!claimed.LeaseUntil.Equal(start.Add(DefaultLease)) {
		t.Fatalf("claimed = %+v", claimed)
	}
	wantNoTask(t, q, false)

	clock.Advance(time.Second)
	if err := q.Start(ctx, tk.ID, "w1"); err != nil {
		t.Fatalf("Start: %v", err)
	}
	got := mustGet(t, q, tk.ID)
	if got.Status != Running || !got.StartedAt.Equal(start.Add(time.Second)) {
		t.Fatalf("after Start: %+v", got)
	}
	clock.Advance(time.Minute)
	if err := q.Renew(ctx, tk.ID, "w1"); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if got := mustGet(t, q, tk.ID); !got.LeaseUntil.Equal(clock.Now().Add(DefaultLease)) {
		t.Errorf("lease after Renew = %v, want %v", got.LeaseUntil, clock.Now().Add(DefaultLease))
	}

	for _, ev := range []struct{ kind, text string }{{EventProgress, "looking"}, {EventTool, "calendar"}} {
		if err := q.AddEvent(ctx, tk.ID, ev.kind, ev.text); err != nil {
			t.Fatalf("AddEvent: %v", err)
		}
	}
	for _, bad := range []string{"", "Tool", "tool use", "x\ny"} {
		if err := q.AddEvent(ctx, tk.ID, bad, "x"); err == nil {
			t.Errorf("AddEvent accepted kind %q", bad)
		}
	}
	if err := q.AddEvent(ctx, 999, EventProgress, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AddEvent on unknown task = %v, want ErrNotFound", err)
	}
	evs, err := q.Events(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Seq != 1 || evs[0].Kind != EventProgress || evs[1].Seq != 2 || evs[1].Text != "calendar" {
		t.Fatalf("Events = %+v", evs)
	}
	if after, err := q.EventsAfter(ctx, tk.ID, 1); err != nil || len(after) != 1 || after[0].Seq != 2 {
		t.Fatalf("EventsAfter(1) = %+v, %v", after, err)
	}

	out := Outcome{Result: "Nothing today.", InputTokens: 1200, OutputTokens: 80, CostUSD: 0.0123}
	if err := q.Complete(ctx, tk.ID, "w1", out, nil); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got = mustGet(t, q, tk.ID)
	if got.Status != Completed || got.Result != out.Result || got.InputTokens != 1200 || got.OutputTokens != 80 ||
		got.CostUSD != 0.0123 || !got.FinishedAt.Equal(clock.Now()) || got.Attempts != 0 {
		t.Fatalf("after Complete: %+v", got)
	}
	if err := q.Complete(ctx, tk.ID, "w1", out, nil); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("second Complete = %v, want ErrLeaseLost", err)
	}
	if _, err := q.Get(ctx, 999); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(999) = %v, want ErrNotFound", err)
	}
	if _, err := q.Events(ctx, 999); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Events(999) = %v, want ErrNotFound", err)
	}
}

func TestEnqueueDedupe(t *testing.T) {
	ctx := context.Background()
	q, _, db := newQueue(t, Options{})
	nt := task("alice", true)
	nt.DedupeKey = "talk:tok:7"
	first := mustEnqueue(t, q, nt)

	again := nt
	again.Prompt = "a different prompt must not overwrite the first"
	second, created, err := q.Enqueue(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	if created || second.ID != first.ID || second.Prompt != first.Prompt {
		t.Fatalf("duplicate Enqueue = %+v, created %v; want task %d unchanged", second, created, first.ID)
	}

	// Tasks without a key never collide.
	a := mustEnqueue(t, q, task("bob", false))
	b := mustEnqueue(t, q, task("bob", false))
	if a.ID == b.ID {
		t.Fatal("two tasks without dedupe keys share an id")
	}

	// EnqueueTx follows the caller's transaction: a rollback leaves nothing behind.
	tx, err := db.Write.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rolled := task("carol", true)
	rolled.DedupeKey = "talk:tok:8"
	id, created, err := q.EnqueueTx(ctx, tx, rolled)
	if err != nil || !created {
		t.Fatalf("EnqueueTx = %d, %v, %v", id, created, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Get(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rolled back task exists: %v", err)
	}
	tk, created, err := q.Enqueue(ctx, rolled)
	if err != nil || !created {
		t.Fatalf("Enqueue after rollback = %+v, %v, %v; want a new task", tk, created, err)
	}
}

func TestClaimPerUserSerial(t *testing.T) {
	ctx := context.Background()
	q, _, _ := newQueue(t, Options{})
	alice1 := mustEnqueue(t, q, task("alice", true))
	alice2 := mustEnqueue(t, q, task("alice", true))
	bob := mustEnqueue(t, q, task("bob", true))

	if got := mustClaim(t, q, "w1", false); got.ID != alice1.ID {
		t.Fatalf("first claim = %d, want alice's first task %d", got.ID, alice1.ID)
	}
	// alice is busy: her second task waits, bob's may run meanwhile.
	if got := mustClaim(t, q, "w2", false); got.ID != bob.ID {
		t.Fatalf("second claim = %d, want bob's task %d", got.ID, bob.ID)
	}
	wantNoTask(t, q, false)

	// Still serial while alice's task runs, not only while it is locked.
	if err := q.Start(ctx, alice1.ID, "w1"); err != nil {
		t.Fatal(err)
	}
	wantNoTask(t, q, false)
	if err := q.Complete(ctx, alice1.ID, "w1", Outcome{Result: "ok"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := mustClaim(t, q, "w1", false); got.ID != alice2.ID {
		t.Fatalf("claim after alice's first finished = %d, want %d", got.ID, alice2.ID)
	}
}

func TestClaimOrder(t *testing.T) {
	ctx := context.Background()
	q, clock, _ := newQueue(t, Options{})
	bg := mustEnqueue(t, q, NewTask{UserID: "alice", Source: SourceCron, Prompt: "report"})
	later := mustEnqueue(t, q, NewTask{UserID: "dave", Source: SourceTalk, Interactive: true, Prompt: "later",
		NotBefore: clock.Now().Add(time.Hour)})
	inter1 := mustEnqueue(t, q, task("bob", true))
	inter2 := mustEnqueue(t, q, task("carol", true))

	if got := mustClaim(t, q, "w", false); got.ID != inter1.ID {
		t.Fatalf("claim 1 = %d, want the oldest interactive task %d", got.ID, inter1.ID)
	}
	if got := mustClaim(t, q, "w", true); got.ID != inter2.ID {
		t.Fatalf("claim 2 = %d, want interactive task %d", got.ID, inter2.ID)
	}
	// Only background work is due now.
	wantNoTask(t, q, true)
	if got := mustClaim(t, q, "w", false); got.ID != bg.ID {
		t.Fatalf("claim 3 = %d, want background task %d", got.ID, bg.ID)
	}
	wantNoTask(t, q, false)
	next, ok, err := q.NextDue(ctx)
	if err != nil || !ok || !next.Equal(later.NextAttemptAt) {
		t.Fatalf("NextDue = %v, %v, %v; want %v", next, ok, err, later.NextAttemptAt)
	}
	clock.Advance(time.Hour)
	if got := mustClaim(t, q, "w", true); got.ID != later.ID {
		t.Fatalf("claim 4 = %d, want the deferred task %d", got.ID, later.ID)
	}
	if _, ok, err := q.NextDue(ctx); err != nil || ok {
		t.Fatalf("NextDue with nothing pending = %v, %v", ok, err)
	}
}

func TestFailBackoffSchedule(t *testing.T) {
	ctx := context.Background()
	q, clock, _ := newQueue(t, Options{})
	tk := mustEnqueue(t, q, task("alice", true))

	wantDelays := []time.Duration{time.Minute, 4 * time.Minute, 16 * time.Minute}
	for i := 0; i <= len(wantDelays); i++ {
		got := mustClaim(t, q, "w", false)
		if got.ID != tk.ID {
			t.Fatalf("run %d: claimed %d", i+1, got.ID)
		}
		if err := q.Start(ctx, tk.ID, "w"); err != nil {
			t.Fatal(err)
		}
		var sawFinal []bool
		reason := fmt.Sprintf("boom %d", i+1)
		retryAt, final, err := q.Fail(ctx, tk.ID, "w", reason, false, func(tx *sql.Tx, final bool) error {
			sawFinal = append(sawFinal, final)
			return nil
		})
		if err != nil {
			t.Fatalf("run %d: Fail: %v", i+1, err)
		}
		if len(sawFinal) != 1 || sawFinal[0] != final {
			t.Fatalf("run %d: within saw %v, Fail said final=%v", i+1, sawFinal, final)
		}
		row := mustGet(t, q, tk.ID)
		if row.Attempts != i+1 || row.Error != reason || row.TransientFailures != 0 {
			t.Fatalf("run %d: row = %+v", i+1, row)
		}
		if i == len(wantDelays) {
			if !final || !retryAt.IsZero() || row.Status != Failed || !row.FinishedAt.Equal(clock.Now()) {
				t.Fatalf("run %d: final=%v retryAt=%v row=%+v; want a final failure", i+1, final, retryAt, row)
			}
			break
		}
		want := clock.Now().Add(wantDelays[i])
		if final || !retryAt.Equal(want) || row.Status != Pending || !row.NextAttemptAt.Equal(want) || row.LeaseOwner != "" {
			t.Fatalf("run %d: final=%v retryAt=%v row=%+v; want a retry at %v", i+1, final, retryAt, row, want)
		}
		// Not claimable a moment before the backoff ends, claimable when it does.
		clock.Advance(wantDelays[i] - time.Second)
		wantNoTask(t, q, false)
		clock.Advance(time.Second)
	}
	wantNoTask(t, q, false)
}

// A run whose model API was unavailable counts an attempt like any other failure, on
// the same schedule, and is tallied in TransientFailures; GetTx inside Fail's callback
// sees the task as the failure left it (what the retry notice tells the user).
func TestFailTransient(t *testing.T) {
	ctx := context.Background()
	q, clock, _ := newQueue(t, Options{MaxAttempts: 3})
	tk := mustEnqueue(t, q, task("alice", true))

	steps := []struct {
		transient                   bool
		wantAttempts, wantTransient int
		wantFinal                   bool
		wantDelay                   time.Duration
	}{
		{true, 1, 1, false, time.Minute},
		{false, 2, 1, false, 4 * time.Minute},
		{true, 3, 2, true, 0},
	}
	for i, s := range steps {
		mustClaim(t, q, "w", false)
		if err := q.Start(ctx, tk.ID, "w"); err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, q, tk.ID).Runs(); got != i+1 {
			t.Fatalf("step %d: Runs() of the running task = %d, want %d", i, got, i+1)
		}
		var seen Task
		retryAt, final, err := q.Fail(ctx, tk.ID, "w", "overloaded (529)", s.transient, func(tx *sql.Tx, final bool) error {
			var err error
			seen, err = q.GetTx(ctx, tx, tk.ID)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		row := mustGet(t, q, tk.ID)
		if row.Attempts != s.wantAttempts || row.TransientFailures != s.wantTransient || final != s.wantFinal {
			t.Fatalf("step %d: attempts=%d transient=%d final=%v; want %d %d %v",
				i, row.Attempts, row.TransientFailures, final, s.wantAttempts, s.wantTransient, s.wantFinal)
		}
		if seen.Attempts != row.Attempts || seen.TransientFailures != row.TransientFailures || !seen.NextAttemptAt.Equal(row.NextAttemptAt) || seen.Status != row.Status {
			t.Fatalf("step %d: within saw %+v, the committed row is %+v", i, seen, row)
		}
		if row.Runs() != i+1 {
			t.Fatalf("step %d: Runs() = %d after %d failed runs", i, row.Runs(), i+1)
		}
		if final {
			if row.Status != Failed || row.WaitingToRetry() {
				t.Fatalf("step %d: status %s, want failed", i, row.Status)
			}
			break
		}
		want := clock.Now().Add(s.wantDelay)
		if !retryAt.Equal(want) || !row.NextAttemptAt.Equal(want) || !row.WaitingToRetry() {
			t.Fatalf("step %d: retryAt %v next %v waiting=%v, want a retry at %v", i, retryAt, row.NextAttemptAt, row.WaitingToRetry(), want)
		}
		clock.Advance(s.wantDelay)
	}
}

func TestRuns(t *testing.T) {
	for _, tc := range []struct {
		t    Task
		want int
	}{
		{Task{Status: Pending}, 0},
		{Task{Status: Pending, Attempts: 2}, 2},
		{Task{Status: Locked, Attempts: 1}, 2},
		{Task{Status: Running}, 1},
		{Task{Status: Completed, Attempts: 1}, 2},
		{Task{Status: Failed, Attempts: 4}, 4},
		{Task{Status: Cancelled, Attempts: 1}, 1},
		{Task{Status: Cancelled, Attempts: 1, LeaseOwner: "w"}, 2},
	} {
		if got := tc.t.Runs(); got != tc.want {
			t.Errorf("Runs() of %s with %d failed, owner %q = %d, want %d", tc.t.Status, tc.t.Attempts, tc.t.LeaseOwner, got, tc.want)
		}
	}
}

func TestFailBeforeStart(t *testing.T) {
	ctx := context.Background()
	q, _, _ := newQueue(t, Options{})
	tk := mustEnqueue(t, q, task("alice", true))
	mustClaim(t, q, "w", false)
	// A worker may give up on a task it claimed but never started (e.g. a panic).
	if _, final, err := q.Fail(ctx, tk.ID, "w", "setup failed", false, nil); err != nil || final {
		t.Fatalf("Fail on a locked task = %v, %v", final, err)
	}
	if row := mustGet(t, q, tk.ID); row.Status != Pending || row.Attempts != 1 {
		t.Fatalf("row = %+v", row)
	}
}

func TestLeaseOwnership(t *testing.T) {
	ctx := context.Background()
	q, _, _ := newQueue(t, Options{})
	tk := mustEnqueue(t, q, task("alice", true))
	mustClaim(t, q, "w1", false)

	if err := q.Start(ctx, tk.ID, "w2"); !errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrCancelled) {
		t.Errorf("Start by another owner = %v, want ErrLeaseLost only", err)
	}
	if err := q.Renew(ctx, tk.ID, "w2"); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Renew by another owner = %v", err)
	}
	if _, _, err := q.Fail(ctx, tk.ID, "w2", "x", false, nil); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Fail by another owner = %v", err)
	}
	if err := q.Renew(ctx, 999, "w1"); !errors.Is(err, ErrLeaseLost) || !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Renew of unknown task = %v, want ErrLeaseLost and ErrNotFound", err)
	}
	if err := q.Complete(ctx, tk.ID, "w1", Outcome{}, nil); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Complete before Start = %v, want ErrLeaseLost", err)
	}
	if _, err := q.Claim(ctx, "", false); err == nil {
		t.Error("Claim with an empty owner succeeded")
	}

	if err := q.Start(ctx, tk.ID, "w1"); err != nil {
		t.Fatal(err)
	}
	if err := q.Release(ctx, tk.ID, "w1"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	row := mustGet(t, q, tk.ID)
	if row.Status != Pending || row.Attempts != 0 || row.LeaseOwner != "" {
		t.Fatalf("after Release: %+v", row)
	}
	if got := mustClaim(t, q, "w2", false); got.ID != tk.ID {
		t.Fatalf("released task not claimable at once: got %d", got.ID)
	}
}

func TestReclaimExpired(t *testing.T) {
	ctx := context.Background()
	var hooked []Task
	q, clock, _ := newQueue(t, Options{OnReclaimFailed: func(tx *sql.Tx, t Task) error {
		hooked = append(hooked, t)
		return nil
	}})
	locked := mustEnqueue(t, q, task("alice", true))
	running := mustEnqueue(t, q, task("bob", true))
	renewed := mustEnqueue(t, q, task("carol", true))
	lastTry := mustEnqueue(t, q, NewTask{UserID: "dave", Source: SourceCLI, Prompt: "x", MaxAttempts: 1, Interactive: true})
	for _, id := range []int64{locked.ID, running.ID, renewed.ID, lastTry.ID} {
		if got := mustClaim(t, q, "dead", false); got.ID != id {
			t.Fatalf("claimed %d, want %d", got.ID, id)
		}
	}
	for _, id := range []int64{running.ID, renewed.ID, lastTry.ID} {
		if err := q.Start(ctx, id, "dead"); err != nil {
			t.Fatal(err)
		}
	}

	// Nothing has expired yet.
	if n, err := q.ReclaimExpired(ctx); err != nil || n != 0 {
		t.Fatalf("early ReclaimExpired = %d, %v", n, err)
	}
	clock.Advance(DefaultLease / 2)
	if err := q.Renew(ctx, renewed.ID, "dead"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(DefaultLease/2 + time.Millisecond)
	n, err := q.ReclaimExpired(ctx)
	if err != nil || n != 3 {
		t.Fatalf("ReclaimExpired = %d, %v; want 3", n, err)
	}

	if row := mustGet(t, q, locked.ID); row.Status != Pending || row.Attempts != 0 || row.LeaseOwner != "" ||
		!row.NextAttemptAt.Equal(clock.Now()) {
		t.Errorf("reclaimed locked task = %+v; want pending now without an attempt", row)
	}
	if row := mustGet(t, q, running.ID); row.Status != Pending || row.Attempts != 1 ||
		!row.NextAttemptAt.Equal(clock.Now().Add(time.Minute)) || row.Error == "" {
		t.Errorf("reclaimed running task = %+v; want pending in 1 min with one attempt", row)
	}
	if row := mustGet(t, q, renewed.ID); row.Status != Running || row.LeaseOwner != "dead" {
		t.Errorf("renewed task = %+v; want still running", row)
	}
	if row := mustGet(t, q, lastTry.ID); row.Status != Failed || row.Attempts != 1 {
		t.Errorf("task on its last attempt = %+v; want failed", row)
	}
	if len(hooked) != 1 || hooked[0].ID != lastTry.ID || hooked[0].Status != Failed {
		t.Errorf("OnReclaimFailed saw %+v; want task %d failed", hooked, lastTry.ID)
	}

	// The old worker wakes up: it may not finish what was taken away from it.
	if err := q.Complete(ctx, running.ID, "dead", Outcome{Result: "late"}, nil); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("late Complete = %v, want ErrLeaseLost", err)
	}
	if got := mustClaim(t, q, "w2", false); got.ID != locked.ID {
		t.Errorf("claim after reclaim = %d, want %d", got.ID, locked.ID)
	}
}

func TestReclaimAll(t *testing.T) {
	ctx := context.Background()
	q, _, _ := newQueue(t, Options{})
	a := mustEnqueue(t, q, task("alice", true))
	b := mustEnqueue(t, q, task("bob", true))
	c := mustEnqueue(t, q, task("carol", true))
	mustClaim(t, q, "old", false)
	mustClaim(t, q, "old", false)
	if err := q.Start(ctx, b.ID, "old"); err != nil {
		t.Fatal(err)
	}
	// Leases are fresh, but the process that held them is gone.
	n, err := q.ReclaimAll(ctx)
	if err != nil || n != 2 {
		t.Fatalf("ReclaimAll = %d, %v; want 2", n, err)
	}
	want := map[int64]struct {
		status   Status
		attempts int
	}{a.ID: {Pending, 0}, b.ID: {Pending, 1}, c.ID: {Pending, 0}}
	for id, w := range want {
		if row := mustGet(t, q, id); row.Status != w.status || row.Attempts != w.attempts {
			t.Errorf("task %d = %s/%d, want %s/%d", id, row.Status, row.Attempts, w.status, w.attempts)
		}
	}
	// The interrupted run counts, but the task is due again at once: its user waits.
	if row := mustGet(t, q, b.ID); row.NextAttemptAt.After(q.now()) {
		t.Fatalf("the reclaimed task is due only at %s, not at once (%s)", row.NextAttemptAt, q.now())
	}
}

func TestCancelWhileRunning(t *testing.T) {
	ctx := context.Background()
	q, _, _ := newQueue(t, Options{})
	tk := mustEnqueue(t, q, task("alice", true))
	mustClaim(t, q, "w", false)
	if err := q.Start(ctx, tk.ID, "w"); err != nil {
		t.Fatal(err)
	}
	cancelled, err := q.Cancel(ctx, tk.ID)
	if err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	// Cancel reports the task as it was, so the caller knows a run must be stopped.
	if cancelled.ID != tk.ID || cancelled.Status != Running || cancelled.LeaseOwner != "w" {
		t.Fatalf("Cancel returned %+v; want the running task", cancelled)
	}
	if row := mustGet(t, q, tk.ID); row.Status != Cancelled || row.LeaseOwner != "w" || row.FinishedAt.IsZero() {
		t.Fatalf("cancelled row = %+v", row)
	}

	ran := false
	err = q.Complete(ctx, tk.ID, "w", Outcome{Result: "too late"}, func(tx *sql.Tx) error {
		ran = true
		return nil
	})
	if !errors.Is(err, ErrCancelled) || !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Complete after Cancel = %v, want ErrCancelled and ErrLeaseLost", err)
	}
	if ran {
		t.Error("Complete ran within for a cancelled task")
	}
	if err := q.Renew(ctx, tk.ID, "w"); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Renew after Cancel = %v, want ErrLeaseLost", err)
	}
	if _, _, err := q.Fail(ctx, tk.ID, "w", "x", false, func(*sql.Tx, bool) error {
		ran = true
		return nil
	}); !errors.Is(err, ErrCancelled) || ran {
		t.Errorf("Fail after Cancel = %v (within ran: %v), want ErrCancelled", err, ran)
	}
	if row := mustGet(t, q, tk.ID); row.Status != Cancelled || row.Result != "" {
		t.Errorf("row = %+v", row)
	}
	if _, err := q.Cancel(ctx, tk.ID); !errors.Is(err, ErrFinished) {
		t.Errorf("second Cancel = %v, want ErrFinished", err)
	}
	if _, err := q.Cancel(ctx, 999); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Cancel(999) = %v, want ErrNotFound", err)
	}
}

func TestWithinIsAtomic(t *testing.T) {
	ctx := context.Background()
	q, _, db := newQueue(t, Options{})
	tk := mustEnqueue(t, q, task("alice", true))
	mustClaim(t, q, "w", false)
	if err := q.Start(ctx, tk.ID, "w"); err != nil {
		t.Fatal(err)
	}
	// within stands for "queue the reply": the settings table is a convenient real table.
	reply := func(key string, fail error) func(tx *sql.Tx) error {
		return func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO settings (key, value) VALUES (?, 'x')`, key); err != nil {
				return err
			}
			return fail
		}
	}
	countKey := func(key string) int {
		var n int
		if err := db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM settings WHERE key = ?`, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	errOutbox := errors.New("outbox full")
	if err := q.Complete(ctx, tk.ID, "w", Outcome{Result: "r"}, reply("reply-1", errOutbox)); !errors.Is(err, errOutbox) {
		t.Fatalf("Complete with failing within = %v", err)
	}
	if row := mustGet(t, q, tk.ID); row.Status != Running || row.Result != "" {
		t.Fatalf("completion was not rolled back: %+v", row)
	}
	if countKey("reply-1") != 0 {
		t.Fatal("within's write survived the rollback")
	}

	_, _, err := q.Fail(ctx, tk.ID, "w", "x", false, func(tx *sql.Tx, final bool) error {
		return reply("notice", errOutbox)(tx)
	})
	if !errors.Is(err, errOutbox) {
		t.Fatalf("Fail with failing within = %v", err)
	}
	if row := mustGet(t, q, tk.ID); row.Status != Running || row.Attempts != 0 {
		t.Fatalf("failure was not rolled back: %+v", row)
	}

	if err := q.Complete(ctx, tk.ID, "w", Outcome{Result: "r"}, reply("reply-2", nil)); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if row := mustGet(t, q, tk.ID); row.Status != Completed || countKey("reply-2") != 1 {
		t.Fatalf("completion and reply not both stored: %+v", row)
	}
}

func TestCancelUser(t *testing.T) {
	ctx := context.Background()
	q, _, db := newQueue(t, Options{})
	done := mustEnqueue(t, q, task("alice", true))
	mustClaim(t, q, "w", false)
	if err := q.Start(ctx, done.ID, "w"); err != nil {
		t.Fatal(err)
	}
	if err := q.Complete(ctx, done.ID, "w", Outcome{}, nil); err != nil {
		t.Fatal(err)
	}
	running := mustEnqueue(t, q, task("alice", true))
	waiting := mustEnqueue(t, q, task("alice", false))
	bob := mustEnqueue(t, q, task("bob", true))
	if got := mustClaim(t, q, "w", false); got.ID != running.ID {
		t.Fatalf("claimed %d", got.ID)
	}
	if err := q.Start(ctx, running.ID, "w"); err != nil {
		t.Fatal(err)
	}

	got, err := q.CancelUser(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != running.ID || got[1].ID != waiting.ID {
		t.Fatalf("CancelUser = %+v; want tasks %d and %d", got, running.ID, waiting.ID)
	}
	if got[0].Status != Running || got[0].LeaseOwner != "w" || got[1].Status != Pending {
		t.Errorf("CancelUser = %+v; want the tasks as they were before", got)
	}
	for _, c := range got {
		if row := mustGet(t, q, c.ID); row.Status != Cancelled {
			t.Errorf("task %d is %s after CancelUser", c.ID, row.Status)
		}
	}
	if row := mustGet(t, q, done.ID); row.Status != Completed {
		t.Errorf("finished task changed: %s", row.Status)
	}
	if row := mustGet(t, q, bob.ID); row.Status != Pending {
		t.Errorf("bob's task changed: %s", row.Status)
	}
	if again, err := q.CancelUser(ctx, "alice"); err != nil || len(again) != 0 {
		t.Errorf("second CancelUser = %+v, %v", again, err)
	}
	if _, err := q.CancelUser(ctx, ""); err == nil {
		t.Error("CancelUser with empty user succeeded")
	}

	// CancelUserTx follows the caller's transaction.
	carol := mustEnqueue(t, q, task("carol", true))
	tx, err := db.Write.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := q.CancelUserTx(ctx, tx, "carol"); err != nil || len(got) != 1 || got[0].ID != carol.ID {
		t.Fatalf("CancelUserTx = %+v, %v", got, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if row := mustGet(t, q, carol.ID); row.Status != Pending {
		t.Errorf("rolled back cancel left carol's task %s", row.Status)
	}
}

func TestClaimID(t *testing.T) {
	ctx := context.Background()
	q, clock, _ := newQueue(t, Options{})
	busy := mustEnqueue(t, q, task("alice", true))
	mustClaim(t, q, "server", false)
	later := mustEnqueue(t, q, NewTask{UserID: "alice", Source: SourceCLI, Prompt: "now", Interactive: true,
		NotBefore: clock.Now().Add(time.Hour)})

	// An explicit claim ignores due time and the user's other work.
	got, err := q.ClaimID(ctx, later.ID, "cli")
	if err != nil {
		t.Fatalf("ClaimID: %v", err)
	}
	if got.ID != later.ID || got.Status != Locked || got.LeaseOwner != "cli" {
		t.Fatalf("ClaimID = %+v", got)
	}
	if _, err := q.ClaimID(ctx, busy.ID, "cli"); !errors.Is(err, ErrNoTask) {
		t.Errorf("ClaimID of a locked task = %v, want ErrNoTask", err)
	}
	if _, err := q.ClaimID(ctx, 999, "cli"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ClaimID(999) = %v, want ErrNotFound", err)
	}
}

func TestListAndStats(t *testing.T) {
	ctx := context.Background()
	q, _, _ := newQueue(t, Options{})
	a1 := mustEnqueue(t, q, task("alice", true))
	a2 := mustEnqueue(t, q, task("alice", true))
	b1 := mustEnqueue(t, q, task("bob", true))
	mustClaim(t, q, "w", false) // a1
	if _, err := q.Cancel(ctx, b1.ID); err != nil {
		t.Fatal(err)
	}

	ids := func(ts []Task) []int64 {
		out := []int64{}
		for _, t := range ts {
			out = append(out, t.ID)
		}
		return out
	}
	tests := []struct {
		name string
		f    Filter
		want []int64
	}{
		{"all newest first", Filter{}, []int64{b1.ID, a2.ID, a1.ID}},
		{"by user", Filter{UserID: "alice"}, []int64{a2.ID, a1.ID}},
		{"by status", Filter{Statuses: []Status{Locked, Cancelled}}, []int64{b1.ID, a1.ID}},
		{"user and status", Filter{UserID: "alice", Statuses: []Status{Pending}}, []int64{a2.ID}},
		{"limit", Filter{Limit: 1}, []int64{b1.ID}},
		{"nothing", Filter{UserID: "nobody"}, []int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := q.List(ctx, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(ids(got)) != fmt.Sprint(tt.want) {
				t.Errorf("List(%+v) = %v, want %v", tt.f, ids(got), tt.want)
			}
		})
	}
	if _, err := q.List(ctx, Filter{Statuses: []Status{"lost"}}); err == nil {
		t.Error("List accepted an unknown status")
	}

	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stats{Pending: 1, Locked: 1, Cancelled: 1}); st != want {
		t.Errorf("Stats = %+v, want %+v", st, want)
	}
}

// TestConcurrentClaims claims from several goroutines over two independent store handles
// (two writer connections, as two processes would have) and checks that no task is
// claimed twice and no user ever has two tasks in flight. Run it with -race.
func TestConcurrentClaims(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "istota.db")
	dbs := []*store.DB{openDB(t, path), openDB(t, path)}
	queues := []*Queue{New(dbs[0], Options{}), New(dbs[1], Options{})}

	const users, perUser = 5, 8
	for i := range users * perUser {
		mustEnqueue(t, queues[i%2], NewTask{
			UserID: fmt.Sprintf("user%d", i%users), Source: SourceTalk, Interactive: i%3 == 0,
			Prompt: fmt.Sprintf("task %d", i),
		})
	}

	var (
		mu       sync.Mutex
		claimed  = map[int64]string{}
		inFlight = map[string]int64{}
		problems []string
		wg       sync.WaitGroup
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := queues[w%2]
			owner := fmt.Sprintf("worker%d", w)
			idle := 0
			for idle < 50 {
				tk, err := q.Claim(ctx, owner, false)
				if errors.Is(err, ErrNoTask) {
					// Others may still hold tasks whose users have more work: try again.
					idle++
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					mu.Lock()
					problems = append(problems, "claim: "+err.Error())
					mu.Unlock()
					return
				}
				idle = 0
				mu.Lock()
				if prev, dup := claimed[tk.ID]; dup {
					problems = append(problems, fmt.Sprintf("task %d claimed by %s and %s", tk.ID, prev, owner))
				}
				claimed[tk.ID] = owner
				if other, busy := inFlight[tk.UserID]; busy {
					problems = append(problems, fmt.Sprintf("%s has tasks %d and %d in flight", tk.UserID, other, tk.ID))
				}
				inFlight[tk.UserID] = tk.ID
				mu.Unlock()

				if err := q.Start(ctx, tk.ID, owner); err != nil {
					mu.Lock()
					problems = append(problems, "start: "+err.Error())
					mu.Unlock()
				}
				// Leave the in-flight set before the completion commits: the next task of
				// this user can only be claimed after that commit.
				mu.Lock()
				delete(inFlight, tk.UserID)
				mu.Unlock()
				if err := q.Complete(ctx, tk.ID, owner, Outcome{Result: owner}, nil); err != nil {
					mu.Lock()
					problems = append(problems, "complete: "+err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, p := range problems {
		t.Error(p)
	}
	if len(claimed) != users*perUser {
		t.Errorf("%d tasks claimed, want %d", len(claimed), users*perUser)
	}
	st, err := queues[0].Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Completed != users*perUser {
		t.Errorf("Stats = %+v, want all %d completed", st, users*perUser)
	}
}

func TestRetryClock(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 24, 15, 20, 0, 0, time.UTC) // 16:20 in Berlin
	for _, tc := range []struct {
		at   time.Time
		loc  *time.Location
		want string
	}{
		{now.Add(10 * time.Minute), berlin, "16:30"},
		{now.Add(10 * time.Minute), time.UTC, "15:30"},
		// Past midnight where the user lives, though not in UTC: the day is named.
		{time.Date(2026, 11, 24, 23, 10, 0, 0, time.UTC), berlin, "Wed 00:10"},
		{time.Date(2026, 11, 24, 23, 10, 0, 0, time.UTC), time.UTC, "23:10"},
	} {
		if got := RetryClock(tc.at, now, tc.loc); got != tc.want {
			t.Errorf("RetryClock(%v in %s) = %q, want %q", tc.at, tc.loc, got, tc.want)
		}
	}
}
