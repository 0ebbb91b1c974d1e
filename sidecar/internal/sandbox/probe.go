package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/sandbox/sandboxinit"
)

// Probe checks that sandboxes can start with cfg: it runs "true" through a complete
// sandbox (every bwrap flag, the agent uid, the seccomp filter, the init that tasks get:
// istota-init, or the istota binary without it) and, when that fails, returns a one-line
// error that says what to fix, among others an istota-init of another version. It ignores
// cfg.Unsandboxed: the sidecar calls it at start and refuses multi-user service when it
// fails, unless the admin explicitly chose the unsandboxed mode.
func Probe(ctx context.Context, cfg Config) error {
	cfg.Unsandboxed = false
	r, err := New(cfg, nil)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.probe(ctx)
}

// probe runs "true" in a complete sandbox of r.
func (r *Runner) probe(ctx context.Context) error {
	dir, err := os.MkdirTemp(r.cfg.SocketDir, "probe-")
	if err != nil {
		return fmt.Errorf("sandbox probe: %w", err)
	}
	defer os.RemoveAll(dir)
	ws := filepath.Join(dir, "workspace")
	if err := os.Mkdir(ws, 0o700); err != nil {
		return fmt.Errorf("sandbox probe: %w", err)
	}
	if r.switchTo {
		if err := os.Lchown(dir, int(r.uid), int(r.gid)); err != nil {
			return fmt.Errorf("sandbox probe: %w", err)
		}
	}

	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	run, err := r.Prepare(ctx, Spec{TaskID: 0, UserID: "probe", Workspace: ws, Argv: []string{"true"}})
	if err != nil {
		return fmt.Errorf("sandbox probe: %w", err)
	}
	defer run.Close()
	stderr := &tailBuffer{max: 4096}
	run.Cmd.Stderr = stderr
	if err := run.Cmd.Run(); err != nil {
		return fmt.Errorf("sandbox unavailable: %s: %s (%v)", classifyProbe(stderr.String(), readSysctl), lastLine(stderr.String()), err)
	}
	if r.Sessions() {
		return r.probeSession(ctx, ws)
	}
	return nil
}

// probeSession runs "true" as a command of a session, the way tasks run theirs.
func (r *Runner) probeSession(ctx context.Context, ws string) error {
	s, err := r.StartSession(ctx, Spec{TaskID: 0, UserID: "probe", Workspace: ws})
	if err != nil {
		return fmt.Errorf("sandbox probe: %w", err)
	}
	cmd, err := s.Command(ctx, []string{"true"}, nil, nil)
	if err != nil {
		s.Close()
		return fmt.Errorf("sandbox probe: %w", err)
	}
	stderr := &tailBuffer{max: 4096}
	cmd.Stderr = stderr
	runErr := cmd.Run()
	closeErr := s.Close()
	if runErr != nil {
		out := strings.TrimSpace(stderr.String() + "\n" + s.output.String())
		return fmt.Errorf("sandbox sessions unavailable: %s: %s (%v)", classifyProbe(out, readSysctl), lastLine(out), runErr)
	}
	if closeErr != nil {
		return fmt.Errorf("sandbox probe: %w", closeErr)
	}
	return nil
}

// classifyProbe says what a failed probe's stderr means and what fixes it
// (reference §7.4).
func classifyProbe(stderr string, sysctl func(name string) string) string {
	has := func(s string) bool { return strings.Contains(stderr, s) }
	switch {
	case has(sandboxinit.MismatchMessage):
		return "the sandbox init " + InitFile + " beside the istota binary is from another istota version: replace it with the one shipped with this istota (bin/<arch>/" + InitFile + ")"
	case has("flag provided but not defined: -session"), has("flag provided but not defined: -attach"):
		return "the sandbox init " + InitFile + " beside the istota binary is from an older istota, without sessions: replace it with the one shipped with this istota (bin/<arch>/" + InitFile + ")"
	case has("RTM_NEWADDR"), has("setting up uid map") && has("Permission denied"):
		return "AppArmor blocks unprivileged user namespaces (Ubuntu 23.10+, kernel.apparmor_restrict_unprivileged_userns=1): install an AppArmor profile for bwrap with \"userns,\" or set that sysctl to 0"
	case has("No permission to create new namespace"), has("Creating new namespace failed"), has("setting up uid map"):
		switch {
		case sysctl("kernel/unprivileged_userns_clone") == "0":
			return "unprivileged user namespaces are disabled: set kernel.unprivileged_userns_clone=1"
		case sysctl("user/max_user_namespaces") == "0":
			return "user namespaces are disabled: set user.max_user_namespaces to a positive number"
		}
		return "user namespaces are not available to the agent uid (inside a container, its seccomp profile may block them)"
	case has("Unknown option"), has("Unknown action"):
		return "this bwrap is too old: it needs --bind-fd (bubblewrap 0.10 or later, or Debian 12's 0.8.0-2+deb12u1)"
	case has("Can't find source path"), has("Permission denied"):
		return "bwrap could not reach a bind source as the agent uid: every parent directory must allow o+x"
	case has("bwrap:"):
		return "bwrap failed"
	}
	return "the sandbox init did not run: " + InitFile + " must be the one built with this istota, and the istota binary without it must handle \"" + InitCommand + "\""
}

func readSysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if s == "" {
		return "no error output"
	}
	return s
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if over := t.buf.Len() - t.max; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}
