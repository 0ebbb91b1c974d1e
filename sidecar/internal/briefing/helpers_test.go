package briefing

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
)

// fakeClock is a settable clock shared by the runner and the queue.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// dirSource is the ConfigSource the app builds: users from a list, files from the
// local mirror <root>/<uid>/istota/config/ — real files on disk.
type dirSource struct {
	mu    sync.Mutex
	root  string
	users []User
}

func (s *dirSource) Users(context.Context) ([]User, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]User(nil), s.users...), nil
}

func (s *dirSource) ReadConfig(_ context.Context, uid, name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(s.userRoot(uid), "istota", "config", name))
}

func (s *dirSource) userRoot(uid string) string { return filepath.Join(s.root, uid) }

func (s *dirSource) write(t *testing.T, uid, rel, content string) string {
	t.Helper()
	p := filepath.Join(s.userRoot(uid), filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (s *dirSource) writeBriefings(t *testing.T, uid, toml string) {
	t.Helper()
	s.write(t, uid, "istota/config/BRIEFINGS.md", briefingsMD(toml))
}

func briefingsMD(toml string) string {
	return "# Briefings\n\nSome prose.\n\n```toml\n" + toml + "```\n"
}

// env is a runner over a real database and queue.
type env struct {
	db    *store.DB
	q     *queue.Queue
	clock *fakeClock
	src   *dirSource
	r     *Runner
}

func newEnv(t *testing.T, start time.Time, mod func(*Options)) *env {
	t.Helper()
	db, err := testDBs.OpenPath(context.Background(), filepath.Join(t.TempDir(), "istota.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clock := &fakeClock{t: start}
	src := &dirSource{root: t.TempDir(), users: []User{{ID: "alice", Timezone: "Europe/Berlin", Email: "alice@example.org"}}}
	q := queue.New(db, queue.Options{Clock: clock.Now})
	opts := Options{Clock: clock.Now, UserRoot: src.userRoot, ComponentTimeout: 10 * time.Second}
	if mod != nil {
		mod(&opts)
	}
	return &env{db: db, q: q, clock: clock, src: src, r: New(db, q, src, opts)}
}

func (e *env) tick(t *testing.T) {
	t.Helper()
	if err := e.r.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// tasks returns the briefing tasks in the order they were queued.
func (e *env) tasks(t *testing.T) []queue.Task {
	t.Helper()
	list, err := e.q.List(context.Background(), queue.Filter{Limit: queue.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	var out []queue.Task
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].Source == queue.SourceBriefing {
			out = append(out, list[i])
		}
	}
	return out
}

func (e *env) state(t *testing.T, uid, name string) BriefingState {
	t.Helper()
	list, _, err := e.r.Status(context.Background(), uid)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("briefing %q of %s not found in %+v", name, uid, list)
	return BriefingState{}
}

// talkedIn records that uid wrote in a conversation with the bot.
func (e *env) talkedIn(t *testing.T, uid, token string, private bool, at time.Time) {
	t.Helper()
	if _, err := e.db.Write.Exec(`INSERT INTO conversations (token, private, updated_at) VALUES (?, ?, '') ON CONFLICT DO NOTHING`, token, private); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := e.db.Write.QueryRow(`SELECT COUNT(*) FROM conversation_messages`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Write.Exec(`INSERT INTO conversation_messages (token, message_id, actor_type, actor_id, text, created_at) VALUES (?, ?, 'users', ?, 'hi', ?)`,
		token, n+1, uid, store.FormatTime(at)); err != nil {
		t.Fatal(err)
	}
}

// finish runs a queued task to the given end state through the real queue.
func (e *env) finish(t *testing.T, id int64, ok bool) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.q.ClaimID(ctx, id, "test"); err != nil {
		t.Fatal(err)
	}
	if err := e.q.Start(ctx, id, "test"); err != nil {
		t.Fatal(err)
	}
	if ok {
		if err := e.q.Complete(ctx, id, "test", queue.Outcome{Result: "done"}, nil); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := e.q.FailPermanent(ctx, id, "test", "broken", func(*sql.Tx, bool) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

func mustContain(t *testing.T, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Errorf("missing %q in:\n%s", p, s)
		}
	}
}

func mustNotContain(t *testing.T, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if strings.Contains(s, p) {
			t.Errorf("unexpected %q in:\n%s", p, s)
		}
	}
}

func removeFile(s *dirSource, uid string) error {
	return os.Remove(filepath.Join(s.userRoot(uid), "istota", "config", "BRIEFINGS.md"))
}
