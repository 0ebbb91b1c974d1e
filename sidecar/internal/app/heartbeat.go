package app

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/command"
	"github.com/istota/istota/sidecar/internal/config"
	"github.com/istota/istota/sidecar/internal/executor"
	"github.com/istota/istota/sidecar/internal/heartbeat"
	"github.com/istota/istota/sidecar/internal/portal"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/sandbox"
	"github.com/istota/istota/sidecar/internal/workspace"
)

// openHeartbeat builds the runner of the users' HEARTBEAT.md checks. It reads the
// config files and watched files from the same local copies the job runner refreshes
// from Nextcloud every few minutes, asks CalDAV for calendars when a bot account is
// configured, and runs administrators' commands in their sandbox.
func (s *sidecar) openHeartbeat(config *userConfigFiles) (*heartbeat.Runner, error) {
	opts := heartbeat.Options{
		Logger:       s.log.With("component", "heartbeat"),
		AllowPrivate: s.cfg.Network.AllowPrivate,
		Files:        heartbeat.LocalFiles{Root: s.userRoot},
		Probe:        newHostProbe(s.cfg, s.launcher),
		Shell:        sandboxShell{l: s.launcher, root: s.userRoot, mirrors: s.files == nil || s.cfg.Workspace.Mode != workspace.ModeMount},
		OnNotice:     s.outbox.Wake,
	}
	if s.calendars != nil {
		opts.Calendars, opts.CalendarChoice = s.calendars, s.calendarChoice
	}
	return heartbeat.New(s.db, heartbeatConfig{config}, s.outbox, opts), nil
}

// userRoot is the local directory of a user's /Users/{uid}/ folder: the mount in
// mount mode, the mirror otherwise.
func (s *sidecar) userRoot(uid string) string {
	if s.files != nil {
		if root, err := s.files.UserRoot(uid); err == nil {
			return root
		}
	}
	return executor.UserMirror(s.cfg.DataDir, uid)
}

// heartbeatConfig gives the heartbeat runner the users and their config files, as the
// job runner sees them.
type heartbeatConfig struct{ f *userConfigFiles }

func (c heartbeatConfig) Users(ctx context.Context) ([]heartbeat.User, error) {
	us, err := c.f.Users(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]heartbeat.User, len(us))
	for i, u := range us {
		out[i] = heartbeat.User{ID: u.ID, Timezone: u.Timezone, IsAdmin: u.IsAdmin}
	}
	return out, nil
}

func (c heartbeatConfig) ReadConfig(_ context.Context, uid, name string) ([]byte, error) {
	b, ok, err := c.f.ReadConfig(uid, name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s of %s: %w", name, uid, fs.ErrNotExist)
	}
	return b, nil
}

// hostProbeTTL is how long a probe result is reused: every user's self-check asks the
// same question of the same host.
const hostProbeTTL = 5 * time.Minute

// hostProbe answers self-check's questions about the agent binary and the sandbox
// with the probes `istota doctor` makes.
type hostProbe struct {
	cfg  hostProbeConfig
	mu   sync.Mutex
	memo map[string]probeResult
}

type hostProbeConfig struct {
	agent       string // resolved host path of the agent binary
	unsandboxed bool
	sandbox     func(ctx context.Context) error
}

type probeResult struct {
	at     time.Time
	detail string
	err    error
}

func newHostProbe(cfg config.Config, l *sandboxLaunchers) *hostProbe {
	pc := hostProbeConfig{agent: l.agent, unsandboxed: cfg.Sandbox.Unsandboxed}
	pc.sandbox = func(ctx context.Context) error {
		scfg, err := sandboxConfig(cfg)
		if err != nil {
			return err
		}
		return sandbox.Probe(ctx, scfg)
	}
	return &hostProbe{cfg: pc, memo: map[string]probeResult{}}
}

func (p *hostProbe) cached(name string, fn func() (string, error)) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.memo[name]; ok && time.Since(r.at) < hostProbeTTL {
		return r.detail, r.err
	}
	d, err := fn()
	p.memo[name] = probeResult{at: time.Now(), detail: d, err: err}
	return d, err
}

// AgentBinary runs the agent with --version, as doctor does.
func (p *hostProbe) AgentBinary(ctx context.Context) (string, error) {
	return p.cached("agent", func() (string, error) {
		if p.cfg.agent == "" {
			// The openai brain runs its loop in the sidecar: there is no binary to run.
			return "none needed: the model is called from the sidecar", nil
		}
		return agentVersion(ctx, p.cfg.agent)
	})
}

// Sandbox starts a complete sandbox running "true", as the sidecar does at start.
func (p *hostProbe) Sandbox(ctx context.Context) (string, error) {
	if p.cfg.unsandboxed {
		return "disabled by the administrator (sandbox.unsandboxed)", nil
	}
	return p.cached("sandbox", func() (string, error) {
		if err := p.cfg.sandbox(ctx); err != nil {
			return "", err
		}
		return "bwrap works", nil
	})
}

// sandboxShell runs an administrator's shell-command check in their sandbox, through
// the launcher every task uses: the user's workspace read-write, no secrets, network
// only through the allowlist proxy.
type sandboxShell struct {
	l    *sandboxLaunchers
	root func(uid string) string
	// mirrors is set when the workspace is a local mirror the sidecar lays out itself
	// (the executor's layout), rather than a mount.
	mirrors bool
}

// maxShellOutput is how much of a command's output is kept for the message.
const maxShellOutput = 8 << 10

func (sh sandboxShell) Run(ctx context.Context, uid, cmdline string) (heartbeat.ShellResult, error) {
	root := sh.root(uid)
	if sh.mirrors {
		// The executor's layout: parents passable (0711) by the agent account, the
		// workspace itself private to it.
		for _, d := range []string{filepath.Dir(filepath.Dir(root)), filepath.Dir(root)} {
			if err := os.MkdirAll(d, 0o711); err != nil {
				return heartbeat.ShellResult{}, fmt.Errorf("create %s: %w", d, err)
			}
			if err := os.Chmod(d, 0o711); err != nil {
				return heartbeat.ShellResult{}, fmt.Errorf("chmod %s: %w", d, err)
			}
		}
		if err := os.MkdirAll(root, 0o700); err != nil {
			return heartbeat.ShellResult{}, fmt.Errorf("create %s: %w", root, err)
		}
	}
	launcher, closeRun, err := sh.l.ForTask(ctx, queue.Task{UserID: uid}, executor.Workspace{Root: root, Admin: true})
	if err != nil {
		return heartbeat.ShellResult{}, err
	}
	defer func() {
		if err := closeRun(); err != nil {
			sh.l.log.Warn("closing a heartbeat command's sandbox", "user_id", uid, "err", err)
		}
	}()
	out, state, err := command.Exec(ctx, launcher, cmdline, maxShellOutput)
	if err != nil {
		return heartbeat.ShellResult{}, err
	}
	res := heartbeat.ShellResult{Output: out, ExitCode: state.ExitCode()}
	if res.ExitCode < 0 {
		res.ExitCode = 128 // killed by a signal (a resource limit)
	}
	return res, nil
}

// heartbeatStatus shows the HEARTBEAT.md checks on the settings pages.
type heartbeatStatus struct{ r *heartbeat.Runner }

func (h heartbeatStatus) Status(ctx context.Context, uid string) (portal.Heartbeats, error) {
	list, problems, err := h.r.Status(ctx, uid)
	if err != nil {
		return portal.Heartbeats{}, err
	}
	out := portal.Heartbeats{Checks: make([]portal.Check, 0, len(list)), Problems: portal.Problems(problems)}
	for _, c := range list {
		out.Checks = append(out.Checks, portal.Check{Name: c.Name, Kind: string(c.Kind), IntervalSeconds: c.IntervalSeconds,
			Enabled: c.Enabled, LastRunAt: rfc3339UTC(c.LastRunAt), LastStatus: c.Status, LastMessage: c.Message,
			NextRunAt: rfc3339UTC(c.NextRunAt), InQuietHours: c.InQuietHours})
	}
	return out, nil
}
