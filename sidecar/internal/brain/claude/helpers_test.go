package claude

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain"
)

// nobody is the uid the real CLI runs as in tests: Claude Code refuses
// bypassPermissions as root, and tests run as root.
const nobody = 65534

// placeholderKey is the only API key the CLI is ever given in tests.
const placeholderKey = "sk-ant-placeholder-not-a-secret"

// claudeBin finds the real Claude Code CLI: $ISTOTA_CLAUDE_BIN, else the copy in the
// repository's nextcloud-app/node_modules, else /tmp/cc. Tests fail without one: the
// adapter is only proven against the real thing.
func claudeBin(t *testing.T) string {
	t.Helper()
	var candidates []string
	if p := os.Getenv("ISTOTA_CLAUDE_BIN"); p != "" {
		// An explicit choice is used or fails; it never falls back silently.
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("ISTOTA_CLAUDE_BIN: %v", err)
		}
		candidates = append(candidates, p)
	}
	if root, err := repoRoot(); err == nil {
		candidates = append(candidates, filepath.Join(root, "nextcloud-app", "node_modules", ".bin", "claude"))
	}
	candidates = append(candidates, "/tmp/cc/node_modules/.bin/claude")
	for _, p := range candidates {
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if err := executableByOthers(p); err != nil {
			t.Fatalf("Claude Code CLI %s cannot be run by uid %d: %v", p, nobody, err)
		}
		return p
	}
	t.Fatalf("Claude Code CLI not found (tried %v): set ISTOTA_CLAUDE_BIN or run npm install in nextcloud-app/", candidates)
	return ""
}

// executableByOthers checks that an unprivileged user can reach and run path: the
// resolved file is world-executable and every directory above it, and above path
// itself when it is a symlink, world-searchable.
func executableByOthers(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return err
	}
	if fi.Mode()&0o001 == 0 {
		return fmt.Errorf("%s is not executable by others", real)
	}
	for _, p := range []string{abs, real} {
		for dir := filepath.Dir(p); ; dir = filepath.Dir(dir) {
			fi, err := os.Stat(dir)
			if err != nil {
				return err
			}
			if fi.Mode()&0o001 == 0 {
				return fmt.Errorf("directory %s is not searchable by others", dir)
			}
			if dir == "/" {
				break
			}
		}
	}
	return nil
}

// repoRoot walks up from the test's directory to the go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

// newHome makes a HOME owned by nobody with a workspace and a temp dir (for TMPDIR)
// inside. t.TempDir's parent is private to root, so nobody could not enter it.
func newHome(t *testing.T) (home, ws string) {
	t.Helper()
	home, err := os.MkdirTemp("", "istota-claude-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	ws = filepath.Join(home, "workspace")
	tmp := filepath.Join(home, "tmp")
	for _, p := range []string{ws, tmp} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{home, ws, tmp} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	return home, ws
}

// testLauncher starts the command directly (no sandbox) in its own process group, as
// uid (unless 0), with the environment a sandbox would give it, and signals the group
// when ctx is cancelled: SIGKILL, or SIGTERM with term (SIGKILL after WaitDelay).
//
// Claude Code runs each Bash tool command in a session of its own (setsid), so a group
// SIGKILL does not reach tool processes: only SIGTERM, on which the CLI kills them
// itself, or a pid namespace (pidns, as the bwrap sandbox has) does.
type testLauncher struct {
	uid   int
	term  bool
	pidns bool
	home  string
	dir   string
	env   map[string]string // what the sandbox adds: HOME, base URL, key
	// rewrite, when set, replaces argv (to run a stand-in process instead of the CLI).
	rewrite func(argv []string) []string

	mu   sync.Mutex
	argv []string
	got  map[string]string
}

func (l *testLauncher) Command(ctx context.Context, argv []string, env map[string]string, stdin io.Reader) (*exec.Cmd, error) {
	l.mu.Lock()
	l.argv, l.got = slices.Clone(argv), env
	l.mu.Unlock()
	if l.rewrite != nil {
		argv = l.rewrite(argv)
	}
	all := map[string]string{"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": l.home}
	for k, v := range l.env {
		all[k] = v
	}
	for k, v := range env {
		all[k] = v
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	for k, v := range all {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	slices.Sort(cmd.Env)
	cmd.Dir = l.dir
	cmd.Stdin = stdin
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if l.uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(l.uid), Gid: uint32(l.uid)}
	}
	if l.pidns {
		// Everything in the namespace dies with its first process.
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID
	}
	sig := syscall.SIGKILL
	if l.term {
		sig = syscall.SIGTERM
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, sig) }
	cmd.WaitDelay = 5 * time.Second
	return cmd, nil
}

func (l *testLauncher) lastArgv() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.argv
}

func (l *testLauncher) lastEnv() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.got
}

// collector records events; Run calls it from one goroutine at a time.
type collector struct {
	mu     sync.Mutex
	events []brain.Event
	notify func(brain.Event)
}

func (c *collector) add(e brain.Event) {
	c.mu.Lock()
	c.events = append(c.events, e)
	n := c.notify
	c.mu.Unlock()
	if n != nil {
		n(e)
	}
}

func (c *collector) all() []brain.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}

func (c *collector) kinds() []brain.EventKind {
	var out []brain.EventKind
	for _, e := range c.all() {
		out = append(out, e.Kind)
	}
	return out
}

func (c *collector) count(k brain.EventKind) int {
	n := 0
	for _, e := range c.all() {
		if e.Kind == k {
			n++
		}
	}
	return n
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}
