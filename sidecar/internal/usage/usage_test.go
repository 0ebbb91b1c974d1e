package usage

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

func TestRecordAndSum(t *testing.T) {
	ctx := context.Background()
	db, err := testDBs.OpenPath(ctx, filepath.Join(t.TempDir(), "u.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := New(db)
	day := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	entries := []Entry{
		{At: day.Add(-time.Hour), UserID: "alice", TaskID: 1, InputTokens: 1000, OutputTokens: 10, Requests: 1},
		{At: day.Add(time.Hour), UserID: "alice", TaskID: 2, InputTokens: 20, OutputTokens: 5, CacheRead: 7, Requests: 1},
		{At: day.Add(2 * time.Hour), UserID: "alice", TaskID: 2, InputTokens: 30, OutputTokens: 6, Requests: 1},
		{At: day.Add(time.Hour), UserID: "bob", TaskID: 3, InputTokens: 99, Requests: 1},
	}
	for _, e := range entries {
		if err := s.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Since(ctx, "alice", day)
	if err != nil {
		t.Fatal(err)
	}
	if got.InputTokens != 50 || got.OutputTokens != 11 || got.CacheRead != 7 || got.Requests != 2 {
		t.Fatalf("alice today = %+v", got)
	}
	task, _ := s.Task(ctx, 2)
	if task.InputTokens != 50 {
		t.Fatalf("task 2 = %+v", task)
	}
	none, _ := s.Since(ctx, "carol", day)
	if none != (Totals{}) {
		t.Fatalf("carol = %+v", none)
	}
}
