package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/brain"
	"github.com/istota/istota/sidecar/internal/config"
	"github.com/istota/istota/sidecar/internal/credproxy"
	"github.com/istota/istota/sidecar/internal/executor"
	"github.com/istota/istota/sidecar/internal/netproxy"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/render"
	"github.com/istota/istota/sidecar/internal/sandbox"
	"github.com/istota/istota/sidecar/internal/settings"
	"github.com/istota/istota/sidecar/internal/usage"
)

// sandboxLaunchers adapts the sandbox runner to the executor: one sandboxed launcher per
// task, with the model API key added by the task's gateway outside the sandbox.
type sandboxLaunchers struct {
	runner *sandbox.Runner
	cfg    config.Config
	agent  string // host path of the agent binary, symlinks resolved
	log    *slog.Logger
	// Set by the wiring after construction; each task gets its own socket to them.
	network *netproxy.Proxy
	skills  *credproxy.Server
	usage   *usage.Store
	login   func() settings.Login // the model credential in effect now
	// onRefused is told when the model API refuses that credential (401/403).
	onRefused func(status int)
}

// newSandboxLaunchers builds the launchers. willRun is false for commands that only
// build prompts: they need neither the agent binary nor a sandbox that works.
func newSandboxLaunchers(ctx context.Context, cfg config.Config, willRun bool, log *slog.Logger) (*sandboxLaunchers, error) {
	// Only the claude brain runs an agent binary inside the sandbox; the openai brain
	// runs its loop in the sidecar and starts a sandbox per tool call.
	var agent string
	if cfg.Brain.Kind == "claude" && willRun {
		var err error
		if agent, err = findAgent(cfg.Brain.ClaudePath); err != nil {
			return nil, err
		}
	}
	scfg, err := sandboxConfig(cfg)
	if err != nil {
		return nil, err
	}
	if !scfg.Unsandboxed && scfg.InitPath == "" {
		// An install from before istota-init shipped, or one that lost the file: tasks
		// still run, with the whole istota binary as their init and a sandbox per command.
		log.Warn("sandbox: "+sandbox.InitFile+" is missing beside the istota binary, so every command starts a sandbox of its own with the whole istota binary as its init, tens of milliseconds slower per command; install "+sandbox.InitFile+" from the same release beside it",
			"looked_for", initBeside(scfg.SelfPath))
	}
	if scfg.Unsandboxed {
		log.Warn("SANDBOX DISABLED: agents run directly on the host and can read everything the agent account can; use this for single-user development only")
	} else if willRun {
		if err := sandbox.Probe(ctx, scfg); err != nil {
			return nil, fmt.Errorf("%w\nagents cannot be isolated on this host, so istota refuses to serve; fix the cause above, or set sandbox.unsandboxed = true for single-user development only", err)
		}
	}
	runner, err := sandbox.New(scfg, log)
	if err != nil {
		return nil, err
	}
	// A shared PostgreSQL database is no file of this host: there is nothing to share.
	if scfg.AgentUID != 0 && !cfg.Database.Postgres() {
		if err := shareDatabaseWithAgents(cfg, int(scfg.AgentGID)); err != nil {
			return nil, err
		}
	}
	if n, err := runner.RemoveStale(); err != nil {
		log.Warn("removing stale sandbox sockets failed", "err", err)
	} else if n > 0 {
		log.Info("removed stale sandbox sockets of the previous run", "count", n)
	}
	return &sandboxLaunchers{runner: runner, cfg: cfg, agent: agent, log: log}, nil
}

// sandboxConfig derives the sandbox runner's configuration: istota-init beside this
// binary as the in-sandbox init (this binary itself when there is none), per-task
// sockets in the runtime directory (socketDir), the configured limits, and — when
// istota runs as root — the unprivileged account agents run as.
func sandboxConfig(cfg config.Config) (sandbox.Config, error) {
	exe, err := os.Executable()
	if err != nil {
		return sandbox.Config{}, fmt.Errorf("locate the istota binary: %w", err)
	}
	// Resolved first: /usr/local/bin/istota may be a link into the app folder, and the
	// init ships beside the real file.
	self, err := filepath.EvalSymlinks(exe)
	if err != nil {
		return sandbox.Config{}, fmt.Errorf("locate the istota binary: %w", err)
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return sandbox.Config{}, fmt.Errorf("data_dir: %w", err)
	}
	scfg := sandbox.Config{
		BwrapPath:   cfg.Sandbox.BwrapPath,
		SelfPath:    self,
		InitPath:    findInit(self),
		SocketDir:   socketDir(dataDir, os.Getenv("RUNTIME_DIRECTORY")),
		Unsandboxed: cfg.Sandbox.Unsandboxed,
		Limits: sandbox.Limits{
			AddressSpace: uint64(cfg.Sandbox.MemoryMB) << 20,
			Processes:    uint64(cfg.Sandbox.MaxProcesses),
			OpenFiles:    uint64(cfg.Sandbox.MaxOpenFiles),
			CPUSeconds:   uint64(cfg.Sandbox.CPUSeconds),
		},
	}
	if scfg.BwrapPath != "" && !filepath.IsAbs(scfg.BwrapPath) {
		if p, err := exec.LookPath(scfg.BwrapPath); err == nil {
			scfg.BwrapPath = p
		}
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup(cfg.Sandbox.AgentUser)
		if err != nil {
			return sandbox.Config{}, fmt.Errorf("sandbox.agent_user: istota runs as root, so agents need an unprivileged account, but %q does not exist (create it: useradd --system --no-create-home istota-agent)", cfg.Sandbox.AgentUser)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		scfg.AgentUID, scfg.AgentGID = uint32(uid), uint32(gid)
	}
	return scfg, nil
}

// renderLimits are the resource limits of Chromium's sandboxes. Its address space is
// left unbounded (V8 and PartitionAlloc reserve terabytes of it up front; the page's
// JavaScript heap is bounded by a flag instead), it runs well over a hundred threads,
// and its wall time is browse.render_timeout.
var renderLimits = sandbox.Limits{Processes: 1024, OpenFiles: 4096, CPUSeconds: 300}

// newRenderer builds the browse skill's headless browser: Chromium in sandboxes of its
// own (renderLimits) whose only way out is a proxy with this network policy.
func newRenderer(cfg config.Config, policy netproxy.Options, gate netproxy.HostGate, log *slog.Logger) (*render.Renderer, error) {
	scfg, err := sandboxConfig(cfg)
	if err != nil {
		return nil, err
	}
	scfg.Limits = renderLimits
	runner, err := sandbox.New(scfg, log.With("component", "render-sandbox"))
	if err != nil {
		return nil, fmt.Errorf("browse.render: %w", err)
	}
	r, err := render.New(render.Options{Runner: runner, Chromium: cfg.Browse.ChromiumPath, Proxy: policy, Gate: gate,
		Timeout: cfg.Browse.RenderTimeout.Duration, Logger: log})
	if err != nil {
		runner.Close()
		return nil, fmt.Errorf("browse.render: %w; install it or set render = false", err)
	}
	return r, nil
}

// initBeside is where the sandbox init that ships with the istota binary self belongs.
func initBeside(self string) string {
	return filepath.Join(filepath.Dir(self), sandbox.InitFile)
}

// findInit returns istota-init beside self when it is an executable file, else "" (the
// sandbox then runs self's own sandbox-init).
func findInit(self string) string {
	p := initBeside(self)
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return ""
	}
	return p
}

// agentPath is the agent binary as the brain must name it inside the sandbox.
func (l *sandboxLaunchers) agentPath() string {
	if l.cfg.Sandbox.Unsandboxed {
		return l.agent
	}
	return sandbox.AgentPath(l.agent)
}

// hookCommand is the command line of Claude Code's PreToolUse hook as the agent sees
// it: this binary's "hook pre-tool-use", which asks the approvals check through the
// task's skills socket.
func (l *sandboxLaunchers) hookCommand() (string, error) {
	self := sandbox.SelfBinary
	if l.cfg.Sandbox.Unsandboxed {
		p, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("locate the istota binary for the tool hook: %w", err)
		}
		self = p
	}
	return self + " " + credproxy.HookCommand, nil
}

func (l *sandboxLaunchers) describe() string {
	if l.cfg.Sandbox.Unsandboxed {
		return "DISABLED"
	}
	return "bwrap"
}

func (l *sandboxLaunchers) close() {
	if err := l.runner.Close(); err != nil {
		l.log.Warn("closing the sandbox runner", "err", err)
	}
}

// ForTask implements executor.Launchers. With istota-init the task's sandbox starts here,
// in the background, and serves every command of the task (sandbox.Session); the
// executor calls this before it pulls the task's files, so that the sandbox's start
// costs the answer nothing. Without it (the Go fallback init, or no sandbox) each
// command gets a sandbox of its own.
func (l *sandboxLaunchers) ForTask(ctx context.Context, t queue.Task, ws executor.Workspace) (brain.Launcher, func() error, error) {
	tl := &taskLauncher{l: l, task: t, ws: ws}
	if l.runner.Sessions() {
		s, err := l.runner.StartSession(ctx, tl.spec())
		if err != nil {
			return nil, nil, err
		}
		tl.session = s
	}
	return tl, tl.close, nil
}

// taskLauncher starts the agent of one task in that task's sandbox.
type taskLauncher struct {
	l       *sandboxLaunchers
	task    queue.Task
	ws      executor.Workspace
	session *sandbox.Session // nil: a sandbox per command
	mu      sync.Mutex
	runs    []*sandbox.Run
}

// spec is the task's sandbox: its folders, its services and the task's variables.
func (tl *taskLauncher) spec() sandbox.Spec {
	l := tl.l
	var services []sandbox.Service
	env := map[string]string{
		"ISTOTA_TASK_ID":   strconv.FormatInt(tl.task.ID, 10),
		"ISTOTA_USER_ID":   tl.task.UserID,
		"ISTOTA_WORKSPACE": sandbox.WorkspaceDir,
		"TMPDIR":           "/tmp",
	}
	if !l.cfg.Sandbox.Unsandboxed {
		// All egress goes through the allowlist proxy; there is no other way out.
		services = append(services, l.network.Service(netproxy.Identity{UserID: tl.task.UserID, TaskID: tl.task.ID}))
		for k, v := range netproxy.ProxyEnv(netproxy.Port) {
			env[k] = v
		}
	}
	services = append(services, l.skills.Service(credproxy.Identity{UserID: tl.task.UserID, TaskID: tl.task.ID, IsAdmin: tl.ws.Admin}))
	if tl.task.ConversationToken != "" {
		env["ISTOTA_CONVERSATION"] = tl.task.ConversationToken
	}
	var mounts []sandbox.Mount
	if tl.ws.Channel != "" {
		mounts = append(mounts, sandbox.Mount{Source: tl.ws.Channel, Dest: executor.ChannelDir, Writable: true})
	}
	if tl.ws.Admin {
		mounts = append(mounts,
			sandbox.Mount{Source: filepath.Join(l.cfg.DataDir, "users"), Dest: executor.AdminUsersDir, Writable: true})
		// Admins' agents see the SQLite file; a shared PostgreSQL database is not mounted.
		if !l.cfg.Database.Postgres() {
			mounts = append(mounts, sandbox.Mount{Source: filepath.Dir(l.cfg.Database.Path), Dest: executor.AdminDBDir, Writable: l.cfg.Sandbox.AdminDBWrite})
		}
	}
	return sandbox.Spec{
		ExtraMounts: mounts,
		TaskID:      tl.task.ID,
		UserID:      tl.task.UserID,
		Workspace:   tl.ws.Root,
		Home:        tl.ws.Home,
		Tmp:         tl.ws.Tmp,
		AgentBinary: l.agent,
		Env:         env,
		LLM:         l.gateway(),
		Services:    services,
		OnUsage:     tl.recordUsage,
	}
}

func (tl *taskLauncher) Command(ctx context.Context, argv []string, env map[string]string, stdin io.Reader) (*exec.Cmd, error) {
	if tl.session != nil {
		return tl.session.Command(ctx, argv, env, stdin)
	}
	spec := tl.spec()
	for k, v := range env {
		spec.Env[k] = v
	}
	spec.Argv, spec.Stdin = argv, stdin
	run, err := tl.l.runner.Prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	if tl.l.cfg.Sandbox.Unsandboxed {
		// No bind mount at the default path: tell `istota skill` where its socket is.
		run.Cmd.Env = append(run.Cmd.Env, credproxy.SocketEnv+"="+run.SocketPath(credproxy.ServiceName))
	}
	tl.mu.Lock()
	tl.runs = append(tl.runs, run)
	tl.mu.Unlock()
	return run.Cmd, nil
}

// recordUsage stores what the task's gateway saw of one model response.
func (tl *taskLauncher) recordUsage(u sandbox.Usage) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := tl.l.usage.Record(ctx, usage.Entry{
		At: time.Now(), UserID: tl.task.UserID, TaskID: tl.task.ID, Model: tl.l.cfg.Brain.Model,
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheRead: u.CacheRead,
		CacheCreation: u.CacheCreation, Requests: u.Requests,
	})
	if err != nil {
		tl.l.log.Warn("recording model usage failed", "task_id", tl.task.ID, "err", err)
	}
}

func (tl *taskLauncher) close() error {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var first error
	if tl.session != nil {
		first = tl.session.Close()
	}
	for _, r := range tl.runs {
		if err := r.Close(); err != nil && first == nil {
			first = err
		}
	}
	tl.runs = nil
	return first
}

// shareDatabaseWithAgents lets the agent account's group reach the database directory
// when istota runs as root, so that admins' sandboxes (the only ones it is mounted in)
// can read it: read-only unless sandbox.admin_db_write is set. Run as its own user, as
// the systemd unit does, the sidecar and its sandboxes share the uid and need nothing.
func shareDatabaseWithAgents(cfg config.Config, gid int) error {
	dir := filepath.Dir(cfg.Database.Path)
	dirMode, fileMode := os.FileMode(0o750), os.FileMode(0o640)
	if cfg.Sandbox.AdminDBWrite {
		dirMode, fileMode = 0o770, 0o660
	}
	if err := os.Lchown(dir, 0, gid); err != nil {
		return fmt.Errorf("share the database directory: %w", err)
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		return fmt.Errorf("share the database directory: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("share the database directory: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := os.Lchown(p, 0, gid); err != nil {
			return fmt.Errorf("share %s: %w", p, err)
		}
		if err := os.Chmod(p, fileMode); err != nil {
			return fmt.Errorf("share %s: %w", p, err)
		}
	}
	return nil
}

// gateway is the model gateway a task's sandbox gets: the claude CLI inside talks to the
// Anthropic API through it. The openai brain calls its API from the sidecar, so its
// sandboxes get none and code inside cannot spend the key.
func (l *sandboxLaunchers) gateway() *sandbox.LLMUpstream {
	if l.cfg.Brain.Kind != "claude" {
		return nil
	}
	login := settings.LoginOf(l.cfg)
	if l.login != nil {
		login = l.login() // live: a key or token the admin pasted in the panel applies to the next task
	}
	up := &sandbox.LLMUpstream{BaseURL: l.cfg.Brain.APIBaseURL, APIKey: login.Secret, Header: "x-api-key", OnAuthFailure: l.onRefused}
	if login.Kind == settings.LoginSubscription {
		up.Header = sandbox.HeaderOAuth
	}
	return up
}

// socketDir is where the sandbox runner keeps each task's sockets: in the runtime
// directory systemd gives the unit (RuntimeDirectory=, a tmpfs emptied at boot, passed as
// $RUNTIME_DIRECTORY, colon-separated when there are several), else in the data
// directory. A task creates and removes its folder and sockets there, which on a tmpfs
// costs a fraction of what it costs on disk (BenchmarkSandboxOverhead).
func socketDir(dataDir, runtimeDirs string) string {
	first, _, _ := strings.Cut(runtimeDirs, ":")
	if filepath.IsAbs(first) {
		return filepath.Join(first, "sandbox")
	}
	return filepath.Join(dataDir, "run")
}
