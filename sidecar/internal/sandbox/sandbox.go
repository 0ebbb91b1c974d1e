// Package sandbox runs each agent process in its own bubblewrap (bwrap) sandbox, as an
// unprivileged user, with nothing secret inside.
//
// The chain for one task is: sidecar → bwrap (started with an environment built from
// nothing, already switched to the agent uid) → istota-init as pid 1 of the sandbox (a
// small static C program, cmd/istota-init; the istota binary's "sandbox-init", package
// sandboxinit, when an older install lacks it) → the agent command. The init listens on
// 127.0.0.1 ports inside the sandbox's private network namespace and passes each
// connection to a per-task Unix socket served by the sidecar; that is how the agent
// reaches the LLM gateway, which swaps the per-task token for the real API key outside
// the sandbox. Three observed facts shape this (reference/sandbox-and-claude.md §1):
// bwrap's own environment is readable from inside, bwrap started by root maps the
// sandbox to host root, and Claude Code can only use a TCP endpoint.
//
// With istota-init a task's sandbox is a Session: bwrap and the init start once, while
// the sidecar pulls the task's files, and each command of the task (the agent, or each
// tool call of an OpenAI-compatible brain) is handed to the waiting init by
// "istota-init --attach", a small process on the host that stands for the command. A
// single command in a sandbox of its own (Prepare) remains for the Go fallback init, the
// unsandboxed mode and the one-off sandboxes of the render and OCR skills.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/istota/istota/sidecar/internal/sandbox/sandboxinit"
)

// Paths inside the sandbox. They are fixed so that sessions, transcripts and prompts that
// name them stay valid from one task to the next (Claude Code keys its transcripts by
// HOME and cwd).
const (
	// WorkspaceDir is where Spec.Workspace appears, and the default working directory.
	WorkspaceDir = "/workspace"
	// HomeDir is where Spec.Home appears; it is also HOME.
	HomeDir = "/home/agent"
	// SelfBinary is where Config.SelfPath appears. It is on PATH so skills can call
	// "istota skill …" from inside, and runs as the sandbox's pid 1 when there is no
	// Config.InitPath.
	SelfBinary = istotaBinDir + "/istota"
	// InitBinary is where Config.InitPath appears; it runs as the sandbox's pid 1.
	InitBinary = istotaBinDir + "/" + InitFile
	// istotaBinDir holds SelfBinary and InitBinary; it is on PATH.
	istotaBinDir = "/opt/istota/bin"
	// InitFile is the name of the dedicated init binary (cmd/istota-init, in C). It
	// ships beside the istota binary, and the sidecar looks for it there.
	InitFile = "istota-init"
	// AgentBinDir holds Spec.AgentBinary; it is first on PATH.
	AgentBinDir = "/opt/istota/agent"
	// SocketMountDir holds the task's Unix sockets (the LLM gateway and Spec.Services).
	SocketMountDir = "/run/istota"
	// LLMPort is the loopback port, inside the sandbox, of the LLM gateway. Every
	// sandbox has its own network namespace, so one fixed port serves all tasks.
	LLMPort = 8080
	// InitCommand is the subcommand of the istota binary that must call RunInit with
	// the remaining arguments: without Config.InitPath the sandbox runs
	// "<SelfBinary> sandbox-init …".
	InitCommand = "sandbox-init"
)

// llmServiceName names the gateway's socket file (llm.sock).
const llmServiceName = "llm"

// Config is the host-side setup shared by every sandbox of one sidecar.
type Config struct {
	// BwrapPath is the absolute path of bwrap; empty means /usr/bin/bwrap.
	BwrapPath string
	// AgentUID and AgentGID are the unprivileged identity every sandbox runs as when the
	// sidecar runs as root (both required then, and never 0). The child is switched to
	// it before bwrap starts, because bwrap started by root maps the sandbox to host
	// root. When the sidecar is not root the sandbox runs as the sidecar's own uid, and
	// AgentUID must be 0 or equal to it.
	AgentUID uint32
	AgentGID uint32
	// SelfPath is the host path of the istota binary. It is bound read-only into every
	// sandbox, and runs there as pid 1 (InitCommand) when InitPath is empty. Symlinks
	// are resolved once.
	SelfPath string
	// InitPath is the host path of istota-init, the dedicated init binary built with
	// this sidecar (InitFile). It is bound read-only at InitBinary and runs as every
	// sandbox's pid 1; a small static C program, it starts and ends tens of milliseconds
	// faster than the whole istota binary (BenchmarkSandboxOverhead).
	// Empty: the istota binary is the init. Symlinks are resolved once.
	InitPath string
	// SocketDir holds one private directory per task for its Unix sockets. It is created
	// if missing, kept at mode 0700 and owned by the agent uid: bwrap, running as that
	// uid, must reach the sockets it binds, and nobody else may.
	SocketDir string
	// Unsandboxed runs agent commands directly on the host, for development only. The
	// agent then sees the whole filesystem the agent uid can read. New logs a loud
	// warning; the sidecar must set this only when the admin explicitly asked for it.
	Unsandboxed bool
	// Limits are resource limits applied to the agent command (not to the init).
	Limits Limits
}

// Limits are rlimits set on the agent command inside the sandbox, both soft and hard so
// the agent cannot raise them. Zero leaves a limit as inherited.
//
// AddressSpace limits virtual memory, not resident memory. Claude Code 2.1.330 (a Bun
// binary) reserves about 10 GiB of address space when unlimited but ran a turn under a
// 2 GiB limit. Processes counts tasks (threads too, the init's as well) of the agent uid
// inside this sandbox's user namespace only, so concurrent sandboxes do not share the
// budget; Claude Code needs a few dozen, so stay well above 100.
type Limits struct {
	AddressSpace uint64 // bytes (RLIMIT_AS)
	Processes    uint64 // processes and threads (RLIMIT_NPROC)
	OpenFiles    uint64 // file descriptors (RLIMIT_NOFILE)
	CPUSeconds   uint64 // CPU time (RLIMIT_CPU); the command gets SIGXCPU, then SIGKILL
}

// Mount is an extra host path made visible in the sandbox, e.g. a channel directory.
type Mount struct {
	Source   string // host path: absolute, no symbolic link anywhere on it
	Dest     string // absolute path inside the sandbox
	Writable bool
}

// LLMUpstream is where the gateway sends model API requests, and the real key it adds.
type LLMUpstream struct {
	BaseURL string // e.g. https://api.anthropic.com
	APIKey  string // the real key or subscription token; it never enters the sandbox
	// Header is how the key is sent upstream: "x-api-key" (the default),
	// "authorization" (as "Authorization: Bearer <key>") or HeaderOAuth.
	Header string
	// OnAuthFailure, when set, is called with the upstream's status each time it refuses
	// the credential (401, 403), so the sidecar can say so in its health view.
	OnAuthFailure func(status int)
}

// HeaderOAuth sends APIKey as a Claude subscription token (from `claude setup-token`):
// "Authorization: Bearer <token>" with the OAuth beta flag Claude Code sends. Inside the
// sandbox the CLI then gets its per-task token as CLAUDE_CODE_OAUTH_TOKEN, so it behaves as
// it does with a subscription; the gateway swaps the token as it does the key.
const HeaderOAuth = "oauth"

// OAuthBeta is the anthropic-beta flag of requests authenticated by a subscription token.
const OAuthBeta = "oauth-2025-04-20"

// Usage counts what the LLM gateway saw for one task.
type Usage struct {
	InputTokens   int64
	OutputTokens  int64
	CacheRead     int64
	CacheCreation int64
	Requests      int64
}

// Add returns the sum of u and o.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		InputTokens:   u.InputTokens + o.InputTokens,
		OutputTokens:  u.OutputTokens + o.OutputTokens,
		CacheRead:     u.CacheRead + o.CacheRead,
		CacheCreation: u.CacheCreation + o.CacheCreation,
		Requests:      u.Requests + o.Requests,
	}
}

// Service is an extra per-task Unix socket served by the sidecar, e.g. the network
// CONNECT proxy or the credential proxy. The Runner creates the socket (mode 0600, owned
// by the agent uid) in the task's private directory, binds it into the sandbox at
// SocketMountDir/<Name>.sock and, when Port is set, has the init serve 127.0.0.1:Port
// inside the sandbox and pass each connection to it (clients that cannot use a Unix
// socket, such as HTTPS_PROXY users, need that). Set the environment variables that
// point clients at it (HTTPS_PROXY=http://127.0.0.1:<Port>, …) in Spec.Env.
type Service struct {
	Name string // [a-z0-9-]+, not "llm"
	Port int    // 0: socket only
	// Serve handles connections from ln until ctx is cancelled, then returns. It runs
	// in its own goroutine from Prepare until Run.Close, which cancels ctx, closes ln
	// and waits for Serve to return.
	Serve func(ctx context.Context, ln net.Listener) error
}

// Spec describes one agent run.
type Spec struct {
	TaskID int64
	UserID string
	// Workspace is the user's workspace on the host, bound read-write at WorkspaceDir.
	// Like Home, Tmp and Mount sources it must be an absolute path with no symbolic
	// link on it: resolve the configured base directory once at startup. Empty gives an
	// empty tmpfs, for runs that must see no user's files (a page rendered in a headless
	// browser); the unsandboxed mode refuses that, as it has no tmpfs to give.
	Workspace string
	// Home is the user's persistent home (Claude Code keeps sessions there), bound
	// read-write at HomeDir. Empty gives an empty tmpfs.
	Home string
	// Tmp is the task's own temp directory, bound read-write at /tmp. Empty gives a tmpfs.
	Tmp string
	// ExtraMounts are bound in order after the directories above; writable directories
	// are given to the agent uid like the workspace. The unsandboxed mode ignores them.
	ExtraMounts []Mount
	// AgentBinary is the host path of the agent executable. Symlinks are resolved and
	// the file is bound read-only at AgentPath(AgentBinary), named after the path as
	// given (node_modules/.bin/claude → /opt/istota/agent/claude).
	AgentBinary string
	// Argv is the command run inside. Argv[0] may be a name looked up on PATH, an
	// in-sandbox path, or AgentBinary as given (it is translated). Empty Argv runs
	// AgentBinary without arguments.
	Argv []string
	// Env holds non-secret task variables. PATH, HOME, PWD and the ANTHROPIC_* keys
	// the gateway sets are reserved; LANG, LC_ALL, TZ and TERM may be overridden.
	Env map[string]string
	// Dir is the working directory inside the sandbox; default WorkspaceDir.
	Dir   string
	Stdin io.Reader
	// LLM, when set, starts the task's LLM gateway and points ANTHROPIC_BASE_URL and
	// ANTHROPIC_API_KEY (a per-task token; CLAUDE_CODE_OAUTH_TOKEN for a subscription
	// token upstream) at it.
	LLM *LLMUpstream
	// OnUsage is called once per upstream response with that response's counts
	// (calls are serialised). Run.Usage has the running total.
	OnUsage  func(Usage)
	Services []Service
}

// AgentPath returns where Spec.AgentBinary = binary appears inside the sandbox.
func AgentPath(binary string) string {
	return path.Join(AgentBinDir, filepath.Base(binary))
}

// Runner prepares sandboxed runs. It is safe for concurrent use.
type Runner struct {
	cfg       Config // with resolved paths
	logger    *slog.Logger
	uid, gid  uint32 // identity of every sandbox
	switchTo  bool   // the sidecar is root: switch the child to uid/gid before exec
	seccomp   []byte // assembled filter; nil when unsandboxed
	noSeccomp bool   // tests only: prove the filter is what denies the calls
	protocol  int    // tests only: the init protocol version asked for; 0 is sandboxinit.Protocol
	rootArgs  []string
	etc       []etcData // synthetic passwd, group and hosts, the same for every sandbox
	// prlimit is util-linux prlimit, through which the Go fallback init (no InitPath)
	// sets the command's limits; empty: istota-init sets them itself, or the fallback
	// sets them by a second start of the istota binary (a Go start more).
	prlimit   string
	owned     *ownedTrees // nil unless switchTo
	transport *http.Transport
}

// prlimitPath is where Debian and Ubuntu install util-linux prlimit. The sandbox binds
// /usr read-only, so the same file is there inside.
const prlimitPath = "/usr/bin/prlimit"

// New checks cfg and prepares the socket directory. It refuses to run sandboxes as root.
// logger may be nil.
func New(cfg Config, logger *slog.Logger) (*Runner, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Runner{cfg: cfg, logger: logger}
	euid := os.Geteuid()
	switch {
	case euid == 0 && cfg.AgentUID == 0:
		return nil, errors.New("sandbox: refusing to run sandboxes as root: set the agent uid to an unprivileged user")
	case euid == 0 && cfg.AgentGID == 0:
		return nil, errors.New("sandbox: refusing to run sandboxes with gid 0: set the agent gid")
	case euid == 0:
		r.uid, r.gid, r.switchTo = cfg.AgentUID, cfg.AgentGID, true
		r.owned = newOwnedTrees(r.uid, r.gid)
	case cfg.AgentUID != 0 && int(cfg.AgentUID) != euid:
		return nil, fmt.Errorf("sandbox: the sidecar runs as uid %d and cannot switch to agent uid %d: run it as root or leave the agent uid unset", euid, cfg.AgentUID)
	default:
		r.uid, r.gid = uint32(euid), uint32(os.Getegid())
	}

	if !cfg.Unsandboxed {
		if r.cfg.BwrapPath == "" {
			r.cfg.BwrapPath = "/usr/bin/bwrap"
		}
		if err := checkExecutable(r.cfg.BwrapPath); err != nil {
			return nil, fmt.Errorf("sandbox: bwrap not found at %s (%v): install bubblewrap (apt install bubblewrap) or set the bwrap path", r.cfg.BwrapPath, err)
		}
		if cfg.SelfPath == "" {
			return nil, errors.New("sandbox: the path of the istota binary (SelfPath) is required")
		}
		self, err := filepath.EvalSymlinks(cfg.SelfPath)
		if err != nil {
			return nil, fmt.Errorf("sandbox: istota binary: %w", err)
		}
		if err := checkExecutable(self); err != nil {
			return nil, fmt.Errorf("sandbox: istota binary %s: %w", self, err)
		}
		r.cfg.SelfPath = self
		if cfg.InitPath != "" {
			initBin, err := filepath.EvalSymlinks(cfg.InitPath)
			if err != nil {
				return nil, fmt.Errorf("sandbox: init binary: %w", err)
			}
			if err := checkExecutable(initBin); err != nil {
				return nil, fmt.Errorf("sandbox: init binary %s: %w", initBin, err)
			}
			r.cfg.InitPath = initBin
		}
		prog, err := seccompProgram(runtime.GOARCH)
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		r.seccomp = prog
		r.rootArgs = systemRootArgs()
		r.etc = syntheticEtc(r.uid, r.gid)
		// istota-init sets the limits itself; only the istota binary's Go fallback
		// needs a helper for them.
		if len(cfg.Limits.flags()) > 0 && r.cfg.InitPath == "" {
			if err := checkPrlimit(prlimitPath); err != nil {
				logger.Info("sandbox: resource limits are set by a second start of the istota binary in every sandbox, which is slower", "reason", err)
			} else {
				r.prlimit = prlimitPath
			}
		}
	} else {
		logger.Warn("SANDBOX DISABLED: agent commands run directly on the host and can read everything the agent uid can; use this only for development",
			"agent_uid", r.uid)
	}

	if cfg.SocketDir == "" {
		return nil, errors.New("sandbox: the socket directory is required")
	}
	dir, err := r.prepareSocketDir(cfg.SocketDir)
	if err != nil {
		return nil, fmt.Errorf("sandbox: socket directory: %w", err)
	}
	r.cfg.SocketDir = dir
	if r.switchTo && !cfg.Unsandboxed {
		if err := checkReachable(r.cfg.SelfPath, r.uid, r.gid); err != nil {
			return nil, fmt.Errorf("sandbox: istota binary: %w", err)
		}
		if r.cfg.InitPath != "" {
			if err := checkReachable(r.cfg.InitPath, r.uid, r.gid); err != nil {
				return nil, fmt.Errorf("sandbox: init binary: %w", err)
			}
		}
	}

	r.transport = http.DefaultTransport.(*http.Transport).Clone()
	return r, nil
}

// Close releases the gateway's idle upstream connections. Runs prepared earlier keep
// working until their own Close.
func (r *Runner) Close() error {
	r.transport.CloseIdleConnections()
	return nil
}

// prepareSocketDir creates dir (parents 0711 so the agent uid can pass through them)
// and makes it a 0700 directory owned by the agent uid.
func (r *Runner) prepareSocketDir(dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("%s is not an absolute path", dir)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	fi, err := os.Lstat(resolved)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", resolved)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != r.uid || st.Gid != r.gid {
		if os.Geteuid() != 0 {
			return "", fmt.Errorf("%s is owned by uid %d, not %d", resolved, st.Uid, r.uid)
		}
		if err := os.Lchown(resolved, int(r.uid), int(r.gid)); err != nil {
			return "", err
		}
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(resolved, 0o700); err != nil {
			return "", err
		}
	}
	if r.switchTo {
		if err := checkReachable(resolved, r.uid, r.gid); err != nil {
			return "", err
		}
	}
	return resolved, nil
}

// RemoveStale deletes task directories left in the socket directory by a sidecar that
// crashed. Call it once at startup, before any task runs: it removes every task's
// sockets, live or not.
func (r *Runner) RemoveStale() (int, error) {
	entries, err := os.ReadDir(r.cfg.SocketDir)
	if err != nil {
		return 0, fmt.Errorf("sandbox: read socket directory: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range entries {
		p := filepath.Join(r.cfg.SocketDir, e.Name())
		var err error
		switch {
		case !e.IsDir():
			continue
		case strings.HasPrefix(e.Name(), "task-"):
			err = removeTaskDir(p)
		case strings.HasPrefix(e.Name(), "probe-"):
			err = os.RemoveAll(p)
		default:
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("sandbox: remove stale %s: %w", p, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// Run is one prepared sandboxed command.
type Run struct {
	// Cmd is ready to Start; wire Stdout and Stderr first. Cancelling the context given
	// to Prepare kills the whole sandbox (SIGKILL to bwrap's process group; bwrap's
	// --die-with-parent and the pid namespace take everything inside with it).
	Cmd *exec.Cmd
	// LLMBaseURL is ANTHROPIC_BASE_URL as the agent sees it; empty without Spec.LLM.
	LLMBaseURL string

	logger   *slog.Logger
	token    string   // the gateway's per-task token; empty without Spec.LLM
	agent    string   // AgentPath(Spec.AgentBinary); empty without one
	resolved string   // Spec.AgentBinary with its links resolved
	writable []string // host trees bound writable, given to the agent uid
	taskDir  string
	sockets  []string // host paths of the sockets created in taskDir
	socketIn map[string]string
	files    []*os.File
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	gw       *gateway
	errMu    sync.Mutex
	errs     []error
	once     sync.Once
	closeErr error
}

// agentArgv is argv with the agent binary, named as the host knows it, replaced by its
// path inside the sandbox; an empty argv runs the agent.
func (r *Run) agentArgv(argv []string, binary string) []string {
	switch {
	case r.agent == "":
		return argv
	case len(argv) == 0:
		return []string{r.agent}
	case argv[0] == binary || argv[0] == r.resolved:
		argv = slices.Clone(argv)
		argv[0] = r.agent
	}
	return argv
}

// Usage returns the LLM usage the gateway has seen so far.
func (r *Run) Usage() Usage {
	if r.gw == nil {
		return Usage{}
	}
	return r.gw.total()
}

// SocketPath returns the path, as the agent sees it, of the Spec.Services socket name.
func (r *Run) SocketPath(name string) string {
	return r.socketIn[name]
}

// Close stops the task's gateway and services and removes its sockets. Call it after
// Cmd.Wait returns (or instead of Start, on error paths). It is safe to call twice.
func (r *Run) Close() error {
	r.once.Do(func() {
		if r.cancel != nil {
			r.cancel()
		}
		r.wg.Wait()
		var errs []error
		r.errMu.Lock()
		errs = append(errs, r.errs...)
		r.errMu.Unlock()
		for _, f := range r.files {
			if f != nil {
				f.Close()
			}
		}
		for _, s := range r.sockets {
			if err := removeSocket(s); err != nil {
				errs = append(errs, err)
			}
		}
		if r.taskDir != "" {
			if err := os.Remove(r.taskDir); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("sandbox: remove task directory: %w", err))
			}
		}
		r.closeErr = errors.Join(errs...)
	})
	return r.closeErr
}

func (r *Run) addErr(err error) {
	r.errMu.Lock()
	r.errs = append(r.errs, err)
	r.errMu.Unlock()
}

// startService runs s.Serve on ln until Close.
func (r *Run) startService(ctx context.Context, name string, ln net.Listener, serve func(context.Context, net.Listener) error) {
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		err := serve(ctx, ln)
		if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) && ctx.Err() == nil {
			r.addErr(fmt.Errorf("sandbox: service %s: %w", name, err))
		}
	}()
	// Closing the listener when the context ends unblocks a Serve that only Accepts.
	go func() {
		defer r.wg.Done()
		<-ctx.Done()
		ln.Close()
	}()
}

var (
	envKeyRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	serviceNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)
)

// reservedEnv are the keys the Runner owns.
var reservedEnv = []string{"PATH", "HOME", "PWD", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"}

// reservedDest are in-sandbox paths ExtraMounts may not cover or enter.
var reservedDest = []string{"/", "/usr", "/etc", "/proc", "/dev", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt/istota", SocketMountDir, WorkspaceDir, HomeDir, "/tmp", "/var/tmp"}

// validate checks everything in spec that does not touch the filesystem.
func (r *Runner) validate(spec *Spec, session bool) error {
	if spec.Workspace == "" && r.cfg.Unsandboxed {
		return errors.New("workspace is required without the sandbox")
	}
	if len(spec.Argv) == 0 && spec.AgentBinary == "" && !session {
		return errors.New("argv is empty and no agent binary is set")
	}
	check := func(what, s string) error {
		if strings.ContainsRune(s, 0) {
			return fmt.Errorf("%s contains a NUL byte", what)
		}
		if spec.LLM != nil && spec.LLM.APIKey != "" && strings.Contains(s, spec.LLM.APIKey) {
			return fmt.Errorf("%s contains the LLM API key, which must never enter the sandbox", what)
		}
		return nil
	}
	for i, a := range spec.Argv {
		if err := check(fmt.Sprintf("argv[%d]", i), a); err != nil {
			return err
		}
	}
	for k, v := range spec.Env {
		if !envKeyRE.MatchString(k) {
			return fmt.Errorf("environment key %q is not a valid name", k)
		}
		if slices.Contains(reservedEnv, k) {
			return fmt.Errorf("environment key %s is set by the sandbox", k)
		}
		if err := check("environment variable "+k, v); err != nil {
			return err
		}
	}
	for _, p := range []string{spec.Workspace, spec.Home, spec.Tmp, spec.AgentBinary, spec.Dir, spec.UserID} {
		if err := check("a path", p); err != nil {
			return err
		}
	}
	if spec.Dir != "" && !path.IsAbs(spec.Dir) {
		return fmt.Errorf("working directory %q is not absolute", spec.Dir)
	}
	dests := map[string]bool{}
	for _, m := range spec.ExtraMounts {
		if err := check("a mount", m.Source+m.Dest); err != nil {
			return err
		}
		if !path.IsAbs(m.Dest) || path.Clean(m.Dest) != m.Dest {
			return fmt.Errorf("mount destination %q must be absolute and clean", m.Dest)
		}
		for _, res := range reservedDest {
			if m.Dest == res || (res != "/" && strings.HasPrefix(m.Dest, res+"/")) || strings.HasPrefix(res, m.Dest+"/") {
				return fmt.Errorf("mount destination %s overlaps %s", m.Dest, res)
			}
		}
		if dests[m.Dest] {
			return fmt.Errorf("mount destination %s used twice", m.Dest)
		}
		dests[m.Dest] = true
	}
	ports := map[int]bool{}
	names := map[string]bool{}
	if spec.LLM != nil {
		if spec.LLM.APIKey == "" {
			return errors.New("LLM upstream needs an API key")
		}
		if _, err := parseUpstream(spec.LLM.BaseURL); err != nil {
			return err
		}
		switch strings.ToLower(spec.LLM.Header) {
		case "", "x-api-key", "authorization", HeaderOAuth:
		default:
			return fmt.Errorf("LLM header %q is not x-api-key, authorization or oauth", spec.LLM.Header)
		}
		ports[LLMPort] = true
		names[llmServiceName] = true
	}
	for _, s := range spec.Services {
		if !serviceNameRE.MatchString(s.Name) || names[s.Name] {
			return fmt.Errorf("service name %q is invalid or used twice", s.Name)
		}
		names[s.Name] = true
		if s.Serve == nil {
			return fmt.Errorf("service %s has no Serve function", s.Name)
		}
		if s.Port != 0 {
			if s.Port < 1 || s.Port > 65535 || ports[s.Port] {
				return fmt.Errorf("service %s: port %d is invalid or used twice", s.Name, s.Port)
			}
			if r.cfg.Unsandboxed {
				return fmt.Errorf("service %s: loopback ports need the sandbox", s.Name)
			}
			ports[s.Port] = true
		}
	}
	return nil
}

// buildEnv returns the complete environment of the agent command.
func buildEnv(spec *Spec, pathVar, home, token, baseURL string) map[string]string {
	env := map[string]string{
		"PATH":              pathVar,
		"HOME":              home,
		"LANG":              "C.UTF-8",
		"TZ":                "UTC",
		"TERM":              "dumb",
		"DISABLE_TELEMETRY": "1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	if _, ok := spec.Env["LC_ALL"]; !ok {
		env["LC_ALL"] = env["LANG"]
	}
	if token != "" {
		env["ANTHROPIC_BASE_URL"] = baseURL
		if spec.LLM != nil && strings.EqualFold(spec.LLM.Header, HeaderOAuth) {
			env["CLAUDE_CODE_OAUTH_TOKEN"] = token
		} else {
			env["ANTHROPIC_API_KEY"] = token
		}
	}
	return env
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// Prepare builds the sandboxed command for spec and starts the task's gateway and
// services. Cancelling ctx kills the command. Always Close the returned Run.
func (r *Runner) Prepare(ctx context.Context, spec Spec) (*Run, error) {
	if err := r.validate(&spec, false); err != nil {
		return nil, fmt.Errorf("sandbox: task %d: %w", spec.TaskID, err)
	}
	run := &Run{logger: r.logger.With("task_id", spec.TaskID), socketIn: map[string]string{}}
	ok := false
	defer func() {
		if !ok {
			run.Close()
		}
	}()
	var err error
	if r.cfg.Unsandboxed {
		err = r.prepareDirect(ctx, &spec, run)
	} else {
		err = r.prepareSandbox(ctx, &spec, run, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: task %d: %w", spec.TaskID, err)
	}
	ok = true
	return run, nil
}

// newTaskDir creates the task's private directory in the socket directory.
func (r *Runner) newTaskDir(spec *Spec, run *Run) error {
	dir, err := os.MkdirTemp(r.cfg.SocketDir, "task-"+strconv.FormatInt(spec.TaskID, 10)+"-")
	if err != nil {
		return fmt.Errorf("create task directory: %w", err)
	}
	run.taskDir = dir
	if r.switchTo {
		if err := os.Lchown(dir, int(r.uid), int(r.gid)); err != nil {
			return fmt.Errorf("chown task directory: %w", err)
		}
	}
	return nil
}

// listenSocket creates the Unix socket name.sock in the task directory, connectable by
// the agent uid only.
func (r *Runner) listenSocket(run *Run, name string) (net.Listener, string, error) {
	p := filepath.Join(run.taskDir, name+".sock")
	if err := removeSocket(p); err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("unix", p)
	if err != nil {
		return nil, "", fmt.Errorf("listen on %s socket: %w", name, err)
	}
	run.sockets = append(run.sockets, p)
	if err := os.Chmod(p, 0o600); err != nil {
		ln.Close()
		return nil, "", err
	}
	if r.switchTo {
		if err := os.Lchown(p, int(r.uid), int(r.gid)); err != nil {
			ln.Close()
			return nil, "", err
		}
	}
	return ln, p, nil
}

// ownTree makes dir and everything in it owned by the agent uid when the sidecar is
// root, so files the sidecar wrote (a synced workspace) are the agent's to change. Only
// what changed since the last task is looked at (ownedTrees).
func (r *Runner) ownTree(dir string) error {
	if !r.switchTo {
		return nil
	}
	start := time.Now()
	st, err := r.owned.give(dir)
	if err != nil {
		return fmt.Errorf("give %s to the agent uid: %w", dir, err)
	}
	r.logger.Debug("sandbox: tree given to the agent uid", "dir", dir, "dirs", st.dirs,
		"dirs_listed", st.listed, "owners_changed", st.given, "took", time.Since(start))
	return nil
}

// prepareSandbox builds the bwrap command. With session (the init's end of a session
// socket) the init serves the commands sent there instead of running spec.Argv.
func (r *Runner) prepareSandbox(ctx context.Context, spec *Spec, run *Run, session *os.File) error {
	if err := r.newTaskDir(spec, run); err != nil {
		return err
	}
	b := newBwrapArgs()
	keep := func(f *os.File) string {
		run.files = append(run.files, f)
		return b.fd(f)
	}
	bindDir := func(src, dest string, writable bool) error {
		f, err := openNoSymlink(src, true)
		if err != nil {
			return err
		}
		run.files = append(run.files, f)
		if r.switchTo {
			if err := checkReachable(src, r.uid, r.gid); err != nil {
				return err
			}
		}
		if writable {
			if err := r.ownTree(src); err != nil {
				return err
			}
			run.writable = append(run.writable, src)
		}
		flag := "--ro-bind-fd"
		if writable {
			flag = "--bind-fd"
		}
		b.add(flag, b.fd(f), dest)
		return nil
	}

	b.add("--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
		"--as-pid-1", "--cap-drop", "ALL", "--hostname", "istota")
	b.add(r.rootArgs...)
	for _, df := range r.etc {
		f, err := dataPipe(run.taskDir, df.name, df.data)
		if err != nil {
			return err
		}
		b.add("--perms", "0644", "--ro-bind-data", keep(f), df.dest)
	}
	b.add("--dev", "/dev", "--proc", "/proc")
	if spec.Workspace != "" {
		if err := bindDir(spec.Workspace, WorkspaceDir, true); err != nil {
			return fmt.Errorf("workspace: %w", err)
		}
	} else {
		b.add("--tmpfs", WorkspaceDir)
	}
	if spec.Home != "" {
		if err := bindDir(spec.Home, HomeDir, true); err != nil {
			return fmt.Errorf("home: %w", err)
		}
	} else {
		b.add("--tmpfs", HomeDir)
	}
	if spec.Tmp != "" {
		if err := bindDir(spec.Tmp, "/tmp", true); err != nil {
			return fmt.Errorf("tmp: %w", err)
		}
	} else {
		b.add("--tmpfs", "/tmp")
	}
	b.add("--symlink", "../tmp", "/var/tmp")
	for _, m := range spec.ExtraMounts {
		f, err := openNoSymlink(m.Source, false)
		if err != nil {
			return fmt.Errorf("mount %s: %w", m.Dest, err)
		}
		run.files = append(run.files, f)
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("mount %s: %w", m.Dest, err)
		}
		if r.switchTo {
			if err := checkReachable(m.Source, r.uid, r.gid); err != nil {
				return fmt.Errorf("mount %s: %w", m.Dest, err)
			}
		}
		if m.Writable && fi.IsDir() {
			if err := r.ownTree(m.Source); err != nil {
				return err
			}
			run.writable = append(run.writable, m.Source)
		}
		flag := "--ro-bind-fd"
		if m.Writable {
			flag = "--bind-fd"
		}
		b.add(flag, b.fd(f), m.Dest)
	}

	self, err := openNoSymlink(r.cfg.SelfPath, false)
	if err != nil {
		return fmt.Errorf("istota binary: %w", err)
	}
	b.add("--ro-bind-fd", keep(self), SelfBinary)
	if r.cfg.InitPath != "" {
		initBin, err := openNoSymlink(r.cfg.InitPath, false)
		if err != nil {
			return fmt.Errorf("init binary: %w", err)
		}
		b.add("--ro-bind-fd", keep(initBin), InitBinary)
	}

	argv := slices.Clone(spec.Argv)
	if spec.AgentBinary != "" {
		resolved, err := filepath.EvalSymlinks(spec.AgentBinary)
		if err != nil {
			return fmt.Errorf("agent binary: %w", err)
		}
		if err := checkExecutable(resolved); err != nil {
			return fmt.Errorf("agent binary %s: %w", resolved, err)
		}
		if r.switchTo {
			if err := checkReachable(resolved, r.uid, r.gid); err != nil {
				return fmt.Errorf("agent binary: %w", err)
			}
		}
		f, err := openNoSymlink(resolved, false)
		if err != nil {
			return fmt.Errorf("agent binary: %w", err)
		}
		inside := AgentPath(spec.AgentBinary)
		b.add("--ro-bind-fd", keep(f), inside)
		run.agent, run.resolved = inside, resolved
	}
	if session == nil { // a session's commands bring their own (Session.Command)
		argv = run.agentArgv(argv, spec.AgentBinary)
	}

	svcCtx, cancel := context.WithCancel(ctx)
	run.cancel = cancel
	var forwards []string
	token, baseURL := "", ""
	if spec.LLM != nil {
		tok, err := newToken()
		if err != nil {
			return err
		}
		token = tok
		run.token = tok
		baseURL = "http://127.0.0.1:" + strconv.Itoa(LLMPort)
		run.LLMBaseURL = baseURL
		gw, err := newGateway(token, spec.LLM, spec.OnUsage, r.transport, run.logger)
		if err != nil {
			return err
		}
		run.gw = gw
		if err := r.addService(svcCtx, run, llmServiceName, LLMPort, run.gw.serve, &forwards); err != nil {
			return err
		}
	}
	for _, s := range spec.Services {
		if err := r.addService(svcCtx, run, s.Name, s.Port, s.Serve, &forwards); err != nil {
			return err
		}
	}
	if len(run.sockets) > 0 {
		// The task directory holds this task's sockets and nothing else by now, so it
		// is bound once, read-only, rather than a mount per socket (every mount is part
		// of each sandbox's start; connecting needs no write access to the mount).
		f, err := openNoSymlink(run.taskDir, true)
		if err != nil {
			return fmt.Errorf("task directory: %w", err)
		}
		b.add("--ro-bind-fd", keep(f), SocketMountDir)
	}

	b.add("--remount-ro", "/")
	if !r.noSeccomp {
		f, err := dataPipe(run.taskDir, "seccomp", r.seccomp)
		if err != nil {
			return err
		}
		b.add("--seccomp", keep(f))
	}
	dir := spec.Dir
	if dir == "" {
		dir = WorkspaceDir
	}
	b.add("--chdir", dir)
	env := buildEnv(spec, sandboxPath, HomeDir, token, baseURL)
	b.add("--clearenv")
	for _, kv := range envList(env) {
		k, v, _ := strings.Cut(kv, "=")
		b.add("--setenv", k, v)
	}

	argsFile, err := dataPipe(run.taskDir, "args", b.data())
	if err != nil {
		return err
	}
	run.files = append(run.files, argsFile)
	files := append([]*os.File{argsFile}, b.files...)

	// bwrap takes its options from the --args descriptor but the command only from
	// argv; the command line is no more than what the host's process list shows for the
	// init and the agent anyway.
	cmdArgs := append([]string{"--args", "3", "--"}, r.initArgv()...)
	for _, fw := range forwards {
		cmdArgs = append(cmdArgs, "--forward", fw)
	}
	if r.prlimit != "" && len(r.cfg.Limits.flags()) > 0 {
		cmdArgs = append(cmdArgs, "--prlimit", r.prlimit)
	}
	for _, l := range r.cfg.Limits.flags() {
		cmdArgs = append(cmdArgs, "--rlimit", l)
	}
	if session != nil {
		files = append(files, session)
		cmdArgs = append(cmdArgs, "--session", strconv.Itoa(2+len(files)))
	} else {
		cmdArgs = append(cmdArgs, "--")
		cmdArgs = append(cmdArgs, argv...)
	}
	cmd := exec.CommandContext(ctx, r.cfg.BwrapPath, cmdArgs...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	cmd.Dir = "/"
	cmd.ExtraFiles = files
	if spec.Stdin != nil {
		cmd.Stdin = spec.Stdin
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if r.switchTo {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: r.uid, Gid: r.gid, Groups: []uint32{}}
	}
	setKill(cmd)
	run.Cmd = cmd
	if session == nil {
		run.logger.Debug("sandbox prepared", "user_id", spec.UserID, "argv0", argv[0], "uid", r.uid)
	}
	return nil
}

// initArgv is how bwrap starts the init, up to its flags: the protocol version comes
// first so that an init of another version says so before it reads anything else.
func (r *Runner) initArgv() []string {
	protocol := r.protocolFlag()
	if r.cfg.InitPath != "" {
		return []string{InitBinary, protocol}
	}
	return []string{SelfBinary, InitCommand, protocol}
}

// protocolFlag is the init's --protocol flag.
func (r *Runner) protocolFlag() string {
	version := sandboxinit.Protocol
	if r.protocol != 0 {
		version = r.protocol
	}
	return "--" + sandboxinit.ProtocolFlag + "=" + strconv.Itoa(version)
}

// Unsandboxed reports whether the Runner runs commands directly on the host (the
// development mode), without any isolation.
func (r *Runner) Unsandboxed() bool { return r.cfg.Unsandboxed }

// InitInUse says which init the sandboxes run, for the logs and `istota doctor`.
func (r *Runner) InitInUse() string {
	switch {
	case r.cfg.Unsandboxed:
		return "none (unsandboxed)"
	case r.cfg.InitPath != "":
		return fmt.Sprintf("%s (protocol %d)", r.cfg.InitPath, sandboxinit.Protocol)
	}
	return r.cfg.SelfPath + " " + InitCommand + " (the istota binary itself: each task starts tens of milliseconds slower than with " + InitFile + ")"
}

// addService creates the socket for one service in the task directory (which
// prepareSandbox binds at SocketMountDir), starts it and records the init's forward for
// its port.
func (r *Runner) addService(ctx context.Context, run *Run, name string, port int, serve func(context.Context, net.Listener) error, forwards *[]string) error {
	ln, _, err := r.listenSocket(run, name)
	if err != nil {
		return err
	}
	inside := path.Join(SocketMountDir, name+".sock")
	run.socketIn[name] = inside
	if port != 0 {
		*forwards = append(*forwards, strconv.Itoa(port)+"="+inside)
	}
	run.startService(ctx, name, ln, serve)
	return nil
}

// prepareDirect builds the unsandboxed development command.
func (r *Runner) prepareDirect(ctx context.Context, spec *Spec, run *Run) error {
	r.logger.Warn("running task WITHOUT sandbox (development mode)", "task_id", spec.TaskID, "user_id", spec.UserID)
	if err := r.newTaskDir(spec, run); err != nil {
		return err
	}
	for _, d := range []string{spec.Workspace, spec.Home, spec.Tmp} {
		if d == "" {
			continue
		}
		f, err := openNoSymlink(d, true)
		if err != nil {
			return err
		}
		f.Close()
		if err := r.ownTree(d); err != nil {
			return err
		}
	}
	toHost := func(p string) string {
		switch {
		case p == WorkspaceDir || strings.HasPrefix(p, WorkspaceDir+"/"):
			return spec.Workspace + strings.TrimPrefix(p, WorkspaceDir)
		case spec.Home != "" && (p == HomeDir || strings.HasPrefix(p, HomeDir+"/")):
			return spec.Home + strings.TrimPrefix(p, HomeDir)
		}
		return p
	}
	argv := slices.Clone(spec.Argv)
	pathVar := "/usr/local/bin:/usr/bin:/bin"
	if spec.AgentBinary != "" {
		pathVar = filepath.Dir(spec.AgentBinary) + ":" + pathVar
		if len(argv) == 0 {
			argv = []string{spec.AgentBinary}
		} else if argv[0] == AgentPath(spec.AgentBinary) {
			argv[0] = spec.AgentBinary
		}
	}
	svcCtx, cancel := context.WithCancel(ctx)
	run.cancel = cancel
	token, baseURL := "", ""
	if spec.LLM != nil {
		tok, err := newToken()
		if err != nil {
			return err
		}
		gw, err := newGateway(tok, spec.LLM, spec.OnUsage, r.transport, run.logger)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("listen for the LLM gateway: %w", err)
		}
		token = tok
		baseURL = "http://" + ln.Addr().String()
		run.LLMBaseURL = baseURL
		run.gw = gw
		run.startService(svcCtx, llmServiceName, ln, run.gw.serve)
	}
	for _, s := range spec.Services {
		ln, p, err := r.listenSocket(run, s.Name)
		if err != nil {
			return err
		}
		run.socketIn[s.Name] = p
		run.startService(svcCtx, s.Name, ln, s.Serve)
	}
	home := spec.Home
	if home == "" {
		home = spec.Workspace
	}
	env := buildEnv(spec, pathVar, home, token, baseURL)
	if spec.Tmp != "" {
		env["TMPDIR"] = spec.Tmp
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = envList(env)
	cmd.Dir = spec.Workspace
	if spec.Dir != "" {
		cmd.Dir = toHost(spec.Dir)
	}
	if spec.Stdin != nil {
		cmd.Stdin = spec.Stdin
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if r.switchTo {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: r.uid, Gid: r.gid, Groups: []uint32{}}
	}
	setKill(cmd)
	run.Cmd = cmd
	return nil
}

// setKill makes context cancellation kill the command's whole process group, and bounds
// how long Wait waits for output pipes held open by leftovers.
func setKill(cmd *exec.Cmd) {
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return err
	}
	cmd.WaitDelay = 10 * time.Second
}

func (l Limits) flags() []string {
	var out []string
	add := func(name string, v uint64) {
		if v != 0 {
			out = append(out, name+"="+strconv.FormatUint(v, 10))
		}
	}
	add("as", l.AddressSpace)
	add("nproc", l.Processes)
	add("nofile", l.OpenFiles)
	add("cpu", l.CPUSeconds)
	return out
}
