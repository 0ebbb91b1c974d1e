package openai

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain"
	"github.com/istota/istota/sidecar/internal/brain/openai/fakeapi"
)

const testKey = "sk-test-0123456789abcdef-never-in-the-sandbox"

// hostLauncher runs tool commands on the host, in dir, in their own process group, as
// the sandbox launcher does inside bwrap. It records what each command was given.
type hostLauncher struct {
	dir string

	mu    sync.Mutex
	calls []launched
}

type launched struct {
	argv []string
	env  map[string]string
}

func (l *hostLauncher) Command(ctx context.Context, argv []string, env map[string]string, stdin io.Reader) (*exec.Cmd, error) {
	l.mu.Lock()
	l.calls = append(l.calls, launched{argv: append([]string(nil), argv...), env: env})
	l.mu.Unlock()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = l.dir
	cmd.Stdin = stdin
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	return cmd, nil
}

func (l *hostLauncher) launched() []launched {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]launched(nil), l.calls...)
}

// events collects what a run reports.
type events struct {
	mu  sync.Mutex
	all []brain.Event
}

func (e *events) add(ev brain.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) of(kind brain.EventKind) []brain.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []brain.Event
	for _, ev := range e.all {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// newBrain returns a brain against api with small limits for tests; edit adjusts the
// config first.
func newBrain(t *testing.T, api *fakeapi.Server, edit func(*Config)) *Brain {
	t.Helper()
	cfg := Config{BaseURL: api.URL(), APIKey: testKey, Model: "test-model", RetryBackoff: 10 * time.Millisecond}
	if edit != nil {
		edit(&cfg)
	}
	b, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func request(prompt string) brain.Request {
	return brain.Request{TaskID: 7, UserID: "alice", Prompt: prompt}
}
