package app

import (
	"context"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/sleep"
)

// TestHistoryPruner: the nightly run's history retention with the real tables: a user's
// old finished tasks and audit entries, a conversation's old log; nothing recent, nothing
// of anyone else.
func TestHistoryPruner(t *testing.T) {
	db := openBriefingTestDB(t)
	ctx := context.Background()
	now := time.Now()
	long := now.Add(-200 * 24 * time.Hour)
	clock := long
	q := queue.New(db, queue.Options{Clock: func() time.Time { return clock }})
	var ids []int64
	for _, at := range []time.Time{long, long, now} {
		clock = at
		tk, _, err := q.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: queue.SourceTalk, Interactive: true, Prompt: "hello", ConversationToken: "room1"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Cancel(ctx, tk.ID); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tk.ID)
	}
	for i, at := range []time.Time{long, now} {
		if _, err := convlog.Record(ctx, db.Write, convlog.Message{Token: "room1", ID: int64(i + 1), ActorType: "users", ActorID: "alice", Text: "hi", At: at}); err != nil {
			t.Fatal(err)
		}
		if _, err := convlog.Record(ctx, db.Write, convlog.Message{Token: "room2", ID: int64(i + 1), ActorType: "users", ActorID: "bob", Text: "hi", At: long}); err != nil {
			t.Fatal(err)
		}
		for _, uid := range []string{"alice", "bob"} {
			if err := audit.New(db, nil, func() time.Time { return at }).Record(ctx, audit.Entry{UserID: uid, Component: "credproxy", Action: "kv", Allowed: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := &sidecar{db: db, queue: q}
	before := now.Add(-180 * 24 * time.Hour)
	n, err := historyPruner{s}.PruneHistory(ctx, sleep.Namespace{Kind: sleep.KindUser, ID: "alice"}, before)
	if err != nil || n != 3 {
		t.Fatalf("user:alice pruned %d rows, %v; want 2 tasks and 1 audit entry", n, err)
	}
	n, err = historyPruner{s}.PruneHistory(ctx, sleep.Namespace{Kind: sleep.KindChannel, ID: "room1"}, before)
	if err != nil || n != 1 {
		t.Fatalf("channel:room1 pruned %d rows, %v", n, err)
	}
	count := func(query string, args ...any) int {
		var c int
		if err := db.Read.QueryRow(query, args...).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if got := count(`SELECT count(*) FROM tasks`); got != 1 {
		t.Errorf("%d tasks left, want the recent one", got)
	}
	if got := count(`SELECT count(*) FROM audit_log WHERE user_id = 'alice'`); got != 1 {
		t.Errorf("%d audit entries of alice left", got)
	}
	if got := count(`SELECT count(*) FROM audit_log WHERE user_id = 'bob'`); got != 2 {
		t.Errorf("bob's audit entries went: %d left", got)
	}
	if got := count(`SELECT count(*) FROM conversation_messages WHERE token = 'room1'`); got != 1 {
		t.Errorf("%d messages of room1 left", got)
	}
	if got := count(`SELECT count(*) FROM conversation_messages WHERE token = 'room2'`); got != 2 {
		t.Errorf("room2's log went: %d left", got)
	}
}
