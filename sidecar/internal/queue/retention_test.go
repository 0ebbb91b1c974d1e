package queue

import (
	"context"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

// TestPruneFinished: only uid's finished tasks older than the cutoff go, with their
// events; anything still waiting on a task keeps it, and so does the queue's newest task.
func TestPruneFinished(t *testing.T) {
	ctx := context.Background()
	q, clock, db := newQueue(t, Options{})
	old := func(user string) Task {
		tk := mustEnqueue(t, q, task(user, true))
		if _, err := q.Cancel(ctx, tk.ID); err != nil {
			t.Fatal(err)
		}
		return tk
	}
	gone := old("alice")
	if err := q.AddEvent(ctx, gone.ID, EventProgress, "looking"); err != nil {
		t.Fatal(err)
	}
	undelivered := old("alice")
	unwritten := old("alice")
	written := old("alice")
	bobs := old("bob")
	waiting := mustEnqueue(t, q, task("alice", false))
	now := store.FormatTime(clock.Now())
	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO talk_outbox (token, message, reference_id, task_id, next_attempt_at, created_at) VALUES ('tok', 'answer', 'ref-1', ?, ?, ?)`, []any{undelivered.ID, now, now}},
		{`INSERT INTO tasks_md_items (user_id, item_id, text, task_id, state, created_at, updated_at) VALUES ('alice', 'i1', 'do it', ?, 'done', ?, ?)`, []any{unwritten.ID, now, now}},
		{`INSERT INTO tasks_md_items (user_id, item_id, text, task_id, state, created_at, updated_at) VALUES ('alice', 'i2', 'did it', ?, 'written', ?, ?)`, []any{written.ID, now, now}},
	} {
		if _, err := db.Write.Exec(stmt.sql, stmt.args...); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(100 * 24 * time.Hour)
	recent := old("alice")
	mustEnqueue(t, q, task("bob", true)) // so that recent is not the newest task
	cutoff := clock.Now().Add(-50 * 24 * time.Hour)

	n, err := q.PruneFinished(ctx, "alice", cutoff)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("pruned %d tasks, want 2 (the plain old one and the one whose TASKS.md line is written)", n)
	}
	for _, id := range []int64{gone.ID, written.ID} {
		if _, err := q.Get(ctx, id); err == nil {
			t.Errorf("task %d is still there", id)
		}
	}
	for _, tk := range []Task{undelivered, unwritten, bobs, waiting, recent} {
		if _, err := q.Get(ctx, tk.ID); err != nil {
			t.Errorf("task %d (%s) went: %v", tk.ID, tk.UserID, err)
		}
	}
	var events int
	db.Read.QueryRow(`SELECT count(*) FROM task_events WHERE task_id = ?`, gone.ID).Scan(&events)
	if events != 0 {
		t.Errorf("%d events of a deleted task stayed", events)
	}
	// Again: nothing more.
	if n, err := q.PruneFinished(ctx, "alice", cutoff); err != nil || n != 0 {
		t.Errorf("second prune: %d, %v", n, err)
	}
}

// TestPruneKeepsTheNewestTask: SQLite would give a deleted newest id to the next task,
// and the conversation log and the sleep cycle's cursor refer to task ids.
func TestPruneKeepsTheNewestTask(t *testing.T) {
	ctx := context.Background()
	q, clock, _ := newQueue(t, Options{})
	var ids []int64
	for range 2 {
		tk := mustEnqueue(t, q, task("alice", true))
		if _, err := q.Cancel(ctx, tk.ID); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tk.ID)
	}
	clock.Advance(time.Hour)
	if n, err := q.PruneFinished(ctx, "alice", clock.Now()); err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want 1", n, err)
	}
	if _, err := q.Get(ctx, ids[1]); err != nil {
		t.Fatalf("the newest task went: %v", err)
	}
	next := mustEnqueue(t, q, task("alice", true))
	if next.ID <= ids[1] {
		t.Errorf("a new task got id %d, not above %d", next.ID, ids[1])
	}
}
