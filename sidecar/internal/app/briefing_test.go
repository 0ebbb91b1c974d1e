package app

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/executor"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
)

func openBriefingTestDB(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "istota.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestBriefingMail(t *testing.T) {
	db := openBriefingTestDB(t)
	ctx := context.Background()
	now := time.Date(2026, 5, 4, 5, 0, 0, 0, time.UTC)
	q := queue.New(db, queue.Options{})
	task, _, err := q.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: queue.SourceEmail, Prompt: "mail",
		Delivery: queue.Delivery{Email: &queue.EmailReply{To: "alice@example.org", Subject: "Re: Invoice for May"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		key, uid, disp string
		task           int64
		at             time.Time
	}{
		{"m1", "alice", "queued", task.ID, now.Add(-time.Hour)},
		{"m2", "alice", "refused", 0, now.Add(-2 * time.Hour)},
		{"m3", "alice", "ignored", 0, now.Add(-time.Hour)},
		{"m4", "alice", "queued", 0, now.Add(-48 * time.Hour)},
		{"m5", "bob", "queued", 0, now.Add(-time.Hour)},
	} {
		if _, err := db.Write.Exec(`INSERT INTO mail_inbound (message_key, received_at, from_addr, user_id, task_id, disposition) VALUES (?, ?, ?, ?, ?, ?)`,
			r.key, store.FormatTime(r.at), r.uid+"@example.org", r.uid, r.task, r.disp); err != nil {
			t.Fatal(err)
		}
	}
	got, err := briefingMail{db: db}.Received(ctx, "alice", now.Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Subject != "Invoice for May" || got[0].From != "alice@example.org" || !got[0].At.Equal(now.Add(-time.Hour)) ||
		got[1].Subject != "(subject not recorded)" {
		t.Fatalf("received %+v", got)
	}
}

func TestBriefingConfigAndNotifier(t *testing.T) {
	db := openBriefingTestDB(t)
	ctx := context.Background()
	dataDir := t.TempDir()
	if _, err := db.Write.Exec(`INSERT INTO users (id, email, timezone, is_admin, updated_at) VALUES ('alice', 'alice@example.org', 'Europe/Berlin', 1, '')`); err != nil {
		t.Fatal(err)
	}
	src := briefingConfig{&userConfigFiles{db: db, dataDir: dataDir, botDir: "istota"}}
	users, err := src.Users(ctx)
	if err != nil || len(users) != 1 || users[0].Email != "alice@example.org" || users[0].Timezone != "Europe/Berlin" || !users[0].IsAdmin {
		t.Fatalf("users %+v %v", users, err)
	}
	if _, err := src.ReadConfig(ctx, "alice", "BRIEFINGS.md"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v, want fs.ErrNotExist", err)
	}
	p := filepath.Join(executor.UserMirror(dataDir, "alice"), "istota", "config", "BRIEFINGS.md")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := src.ReadConfig(ctx, "alice", "BRIEFINGS.md"); err != nil || string(b) != "content" {
		t.Fatalf("read %q %v", b, err)
	}

	ob := outbox.New(db, nil, outbox.Options{})
	notify := briefingNotifier(db, ob)
	send := func(key string) {
		t.Helper()
		tx, err := db.Write.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := notify(ctx, tx, "alice", key, "There is a problem with your BRIEFINGS.md"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	count := func() (n int) {
		t.Helper()
		if err := db.Read.QueryRow(`SELECT COUNT(*) FROM talk_outbox WHERE token = 'priv' AND kind = 'notice'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	send("k1") // no private conversation yet: the page shows the problems
	if n := count(); n != 0 {
		t.Fatalf("%d notices without a private conversation", n)
	}
	if _, err := db.Write.Exec(`INSERT INTO conversations (token, private, updated_at) VALUES ('priv', 1, '')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Write.Exec(`INSERT INTO conversation_messages (token, message_id, actor_type, actor_id, text, created_at) VALUES ('priv', 1, 'users', 'alice', 'hi', ?)`,
		store.FormatTime(time.Now())); err != nil {
		t.Fatal(err)
	}
	send("k2")
	send("k2")
	if n := count(); n != 1 {
		t.Fatalf("%d notices, want 1", n)
	}
}
