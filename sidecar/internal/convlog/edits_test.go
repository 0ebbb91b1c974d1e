package convlog

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// A notice about a file goes where the agent last changed it, once and only while the
// change is recent; else to the private conversation.
func TestNoticeTarget(t *testing.T) {
	ctx := context.Background()
	db, err := testDBs.OpenPath(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	db.Write.Exec(`INSERT INTO conversations (token, private, updated_at) VALUES ('dm000001', 1, '')`)
	Record(ctx, db.Write, Message{Token: "dm000001", ID: 1, ActorType: "users", ActorID: "alice", Text: "hi", At: now})

	target := func(at time.Time) (string, bool) {
		t.Helper()
		token, edited, ok, err := NoticeTarget(ctx, db.Read, db.Write, "alice", "CRON.md", at)
		if err != nil || !ok {
			t.Fatalf("NoticeTarget: %v %t", err, ok)
		}
		return token, edited
	}
	if tok, edited := target(now); tok != "dm000001" || edited {
		t.Fatalf("without an edit: %s %t", tok, edited)
	}
	RecordEdit(ctx, db.Write, "alice", "CRON.md", "group001", 3, now)
	if tok, edited := target(now.Add(time.Minute)); tok != "group001" || !edited {
		t.Fatalf("after an edit: %s %t", tok, edited)
	}
	if tok, _ := target(now.Add(2 * time.Minute)); tok != "dm000001" {
		t.Fatalf("the edit was told twice: %s", tok)
	}
	RecordEdit(ctx, db.Write, "alice", "CRON.md", "group001", 4, now)
	if tok, edited := target(now.Add(EditTTL + time.Minute)); tok != "dm000001" || edited {
		t.Fatalf("an old edit: %s %t", tok, edited)
	}
	if tok, _, _, _ := NoticeTarget(ctx, db.Read, db.Write, "alice", "HEARTBEAT.md", now); tok != "dm000001" {
		t.Fatalf("another file: %s", tok)
	}
}
