package heartbeat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/store"
)

// fakeClock is the time source of a test; it moves only when told.
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
	defer c.mu.Unlock()
	c.t = t
}

// dirSource is a ConfigSource over a directory: <root>/<uid>/<name>.
type dirSource struct {
	root  string
	mu    sync.Mutex
	users []User
}

func (s *dirSource) Users(context.Context) ([]User, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]User(nil), s.users...), nil
}

func (s *dirSource) setUsers(us ...User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users = us
}

func (s *dirSource) ReadConfig(_ context.Context, uid, name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(s.root, uid, name))
}

func (s *dirSource) write(t *testing.T, uid, name, content string) {
	t.Helper()
	dir := filepath.Join(s.root, uid)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// execShell runs commands as real processes with /bin/sh in a per-user directory.
type execShell struct {
	dir   string
	calls atomic.Int32
}

func (s *execShell) Run(ctx context.Context, uid, command string) (ShellResult, error) {
	s.calls.Add(1)
	dir := filepath.Join(s.dir, uid)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ShellResult{}, err
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Dir = dir
	cmd.WaitDelay = time.Second // a killed shell's children must not hold the output open
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ctx.Err() == nil {
		return ShellResult{ExitCode: ee.ExitCode(), Output: out.Bytes()}, nil
	}
	if err != nil {
		return ShellResult{}, err
	}
	return ShellResult{Output: out.Bytes()}, nil
}

type harness struct {
	t     *testing.T
	db    *store.DB
	clock *fakeClock
	src   *dirSource
	shell *execShell
	r     *Runner
}

func newHarness(t *testing.T, start time.Time, opts Options) *harness {
	t.Helper()
	dir := t.TempDir()
	db, err := testDBs.OpenPath(context.Background(), filepath.Join(dir, "istota.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	h := &harness{t: t, db: db, clock: &fakeClock{t: start}, src: &dirSource{root: filepath.Join(dir, "config")},
		shell: &execShell{dir: filepath.Join(dir, "shell")}}
	ob := outbox.New(db, nil, outbox.Options{Clock: h.clock.Now})
	opts.Clock = h.clock.Now
	if opts.Shell == nil {
		opts.Shell = h.shell
	}
	h.r = New(db, h.src, ob, opts)
	return h
}

// privateConversation makes token uid's private conversation with the bot.
func (h *harness) privateConversation(uid, token string) {
	h.t.Helper()
	now := store.FormatTime(h.clock.Now())
	h.exec(`INSERT INTO conversations (token, private, updated_at) VALUES (?, 1, ?)`, token, now)
	h.exec(`INSERT INTO conversation_messages (token, message_id, actor_type, actor_id, text, created_at)
		VALUES (?, 1, 'users', ?, 'hello', ?)`, token, uid, now)
}

func (h *harness) exec(q string, args ...any) {
	h.t.Helper()
	if _, err := h.db.Write.Exec(q, args...); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) runOnce() {
	h.t.Helper()
	if err := h.r.RunOnce(context.Background()); err != nil {
		h.t.Fatalf("RunOnce at %s: %v", h.clock.Now().UTC().Format(time.RFC3339), err)
	}
}

// stepTo moves the clock minute by minute to end, running a cycle at each minute as
// the loop does.
func (h *harness) stepTo(end time.Time) {
	h.t.Helper()
	for t := h.clock.Now().Add(time.Minute); !t.After(end); t = t.Add(time.Minute) {
		h.clock.Set(t)
		h.runOnce()
	}
}

type sentMessage struct {
	Token   string
	Text    string
	ReplyTo int64
	At      time.Time
}

// messages returns the outbox rows in order.
func (h *harness) messages() []sentMessage {
	h.t.Helper()
	rows, err := h.db.Read.Query(`SELECT token, message, reply_to, created_at FROM talk_outbox ORDER BY id`)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []sentMessage
	for rows.Next() {
		var m sentMessage
		var at string
		if err := rows.Scan(&m.Token, &m.Text, &m.ReplyTo, &at); err != nil {
			h.t.Fatal(err)
		}
		m.At, _ = store.ParseTime(at)
		out = append(out, m)
	}
	return out
}

func (h *harness) state(uid, name string) CheckState {
	h.t.Helper()
	states, _, err := h.r.Status(context.Background(), uid)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, s := range states {
		if s.Name == name {
			return s
		}
	}
	h.t.Fatalf("no check %q of %s in %+v", name, uid, states)
	return CheckState{}
}

// heartbeatFile renders checks as a HEARTBEAT.md with one toml block.
func heartbeatFile(checks ...string) string {
	return "# My checks\n\n```toml\n" + strings.Join(checks, "\n") + "\n```\n"
}

func check(fields ...string) string {
	var b strings.Builder
	b.WriteString("[[checks]]\n")
	for i := 0; i+1 < len(fields); i += 2 {
		fmt.Fprintf(&b, "%s = %s\n", fields[i], fields[i+1])
	}
	return b.String()
}

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
