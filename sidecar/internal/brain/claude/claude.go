// Package claude is the brain that runs the Claude Code CLI headless: one `claude -p`
// process per turn, prompt on stdin, `--output-format stream-json` on stdout parsed line
// by line into progress events and a verdict. The process is started by a
// brain.Launcher (the user's sandbox); this package never decides where it runs and never
// passes a secret: the launcher supplies ANTHROPIC_BASE_URL and the per-task key.
//
// The verdict comes from the final `result` line, never from the exit code: Claude Code
// exits 1 on API errors it has already reported, and may exit 0 on some.
// See /work/shared/reference/sandbox-and-claude.md §4.
package claude

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/brain"
)

// DefaultMaxRetries caps Claude Code's own API retries (its default is 10, with backoff
// up to about 36 s each): the task queue retries transient failures itself.
const DefaultMaxRetries = 2

// maxSystemPrompt keeps --append-system-prompt below Linux's 128 KiB limit for a single
// argv string (MAX_ARG_STRLEN), with room to spare.
const maxSystemPrompt = 120 << 10

// stderrTailMax is how much of the end of stderr a Result keeps.
const stderrTailMax = 4 << 10

// exitGrace is how long stdout and stderr may stay open after the CLI exited (a
// grandchild holding them) before reading stops.
const exitGrace = 2 * time.Second

// ErrNoResult means the CLI ended without writing its result line: it crashed, was
// killed, or failed before it started the turn. Result.StderrTail says more.
var ErrNoResult = errors.New("claude ended without a result")

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// Config configures the Claude Code brain.
type Config struct {
	// Binary is the path of the claude executable as the launched process sees it
	// (inside the sandbox).
	Binary string
	// Model is the default model (a name or an alias); empty leaves it to the CLI.
	Model string
	// MaxTurns is the default cap on agent turns; 0 means no cap.
	MaxTurns int
	// MaxRetries becomes CLAUDE_CODE_MAX_RETRIES: 0 means DefaultMaxRetries, a
	// negative value means no retries.
	MaxRetries int
	// ExtraArgs are appended to the command line (e.g. --max-budget-usd 1). They must
	// not carry secrets: argv is visible in /proc.
	ExtraArgs []string
	// Hook is the command line of the PreToolUse hook Claude Code runs before every tool
	// call ("istota hook pre-tool-use" inside the sandbox), which asks the approvals
	// check outside the sandbox. Empty runs no hook.
	Hook string
	// ApprovalWait is how long a tool call may wait for the user's answer now: the
	// hook's timeout, and the Bash tool's (a skill called from Bash may wait as long).
	// It is read at every run, so an admin's change applies to the next task. Nil or
	// zero keeps Claude Code's own timeouts.
	ApprovalWait func() time.Duration
}

// approvalWait is ApprovalWait's value now.
func (cfg Config) approvalWait() time.Duration {
	if cfg.ApprovalWait == nil {
		return 0
	}
	return max(cfg.ApprovalWait(), 0)
}

// hookSettings is the --settings JSON that registers cfg's PreToolUse hook for every
// tool. --settings applies whatever --setting-sources says, and nothing in the
// workspace can remove it.
func hookSettings(cfg Config) string {
	timeout := 60
	if w := cfg.approvalWait(); w > 0 {
		timeout = int((w + time.Minute) / time.Second)
	}
	b, _ := json.Marshal(map[string]any{"hooks": map[string]any{"PreToolUse": []any{map[string]any{
		"matcher": "*",
		"hooks":   []any{map[string]any{"type": "command", "command": cfg.Hook, "timeout": timeout}},
	}}}})
	return string(b)
}

// Claude runs the Claude Code CLI. It is safe for concurrent use.
type Claude struct {
	cfg Config
	log *slog.Logger
}

var _ brain.Brain = (*Claude)(nil)

// New returns a Claude Code brain.
func New(cfg Config, log *slog.Logger) *Claude {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Claude{cfg: cfg, log: log}
}

// Args is the command line for req, binary first. Options take their values in the
// --flag=value form so that a value starting with "-" is never read as a flag.
func (c *Claude) Args(req brain.Request) ([]string, error) {
	if c.cfg.Binary == "" {
		return nil, errors.New("claude: no binary configured")
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return nil, errors.New("claude: empty prompt")
	}
	if len(req.SystemPrompt) > maxSystemPrompt {
		return nil, fmt.Errorf("claude: system prompt is %d bytes, more than the %d a command-line argument can carry", len(req.SystemPrompt), maxSystemPrompt)
	}
	if strings.ContainsRune(req.SystemPrompt, 0) {
		return nil, errors.New("claude: system prompt contains a NUL byte")
	}
	if req.SessionID != "" && !uuidRE.MatchString(req.SessionID) {
		return nil, fmt.Errorf("claude: session id %q is not a UUID", req.SessionID)
	}
	if req.Resume && req.SessionID == "" {
		return nil, errors.New("claude: resume needs a session id")
	}
	argv := []string{
		c.cfg.Binary,
		// With -p and no prompt argument the CLI reads the prompt from stdin.
		"-p",
		"--output-format=stream-json",
		"--verbose", // stream-json requires it with -p
		// The sandbox is the boundary; there is nobody to answer a prompt.
		"--permission-mode=bypassPermissions",
		// Ignore .claude/ settings and .mcp.json from the workspace: with -p there is
		// no trust dialog, so they would otherwise apply (hooks, env, apiKeyHelper).
		"--setting-sources=user",
		"--strict-mcp-config",
		`--mcp-config={"mcpServers":{}}`,
		// By default a resumed session reuses the system prompt recorded on its first
		// request and ignores --append-system-prompt [observed, 2.1.330]; each run's
		// prompt carries fresh context (date, memories), so render it every time.
		"--system-prompt-snapshot=off",
	}
	if m := firstNonEmpty(req.Model, c.cfg.Model); m != "" {
		argv = append(argv, "--model="+m)
	}
	turns := req.MaxTurns
	if turns <= 0 {
		turns = c.cfg.MaxTurns
	}
	if turns > 0 {
		argv = append(argv, "--max-turns="+strconv.Itoa(turns))
	}
	if req.SystemPrompt != "" {
		argv = append(argv, "--append-system-prompt="+req.SystemPrompt)
	}
	if c.cfg.Hook != "" {
		argv = append(argv, "--settings="+hookSettings(c.cfg))
	}
	switch {
	case req.Resume:
		argv = append(argv, "--resume="+req.SessionID)
	case req.SessionID != "":
		argv = append(argv, "--session-id="+req.SessionID)
	}
	return append(argv, c.cfg.ExtraArgs...), nil
}

// Env is the environment the CLI needs from this package: side traffic off and the
// retry cap. The launcher adds the rest (HOME, PATH, ANTHROPIC_BASE_URL, the per-task
// key). Nothing here is secret.
func (c *Claude) Env() map[string]string {
	retries := c.cfg.MaxRetries
	switch {
	case retries == 0:
		retries = DefaultMaxRetries
	case retries < 0:
		retries = 0
	}
	env := map[string]string{
		"DISABLE_TELEMETRY":                        "1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
		"CLAUDE_CODE_MAX_RETRIES":                  strconv.Itoa(retries),
	}
	if w := c.cfg.approvalWait(); w > 0 {
		// A skill called from Bash may wait for the user's answer; Bash's own default
		// of two minutes would cut it off. The task's timeout still bounds every run.
		ms := strconv.FormatInt(int64((w+2*time.Minute)/time.Millisecond), 10)
		env["BASH_DEFAULT_TIMEOUT_MS"], env["BASH_MAX_TIMEOUT_MS"] = ms, ms
	}
	return env
}

// Run runs one turn. It calls onEvent sequentially from a goroutine it owns, never after
// it returns. See brain.Brain for how errors and Result.OK divide the outcomes.
func (c *Claude) Run(ctx context.Context, req brain.Request, l brain.Launcher, onEvent func(brain.Event)) (brain.Result, error) {
	argv, err := c.Args(req)
	if err != nil {
		return brain.Result{}, err
	}
	env := c.Env()
	log := c.log.With("task_id", req.TaskID, "user_id", req.UserID)

	cmd, err := l.Command(ctx, argv, env, strings.NewReader(req.Prompt))
	if err != nil {
		return brain.Result{}, fmt.Errorf("claude: prepare command: %w", err)
	}
	// Pipes of our own rather than exec's: an *os.File is handed to the child as is, so
	// no copying goroutine inside exec can hold up Wait, and reads can be given a
	// deadline once the CLI has exited (a grandchild may keep the write end open).
	outR, outW, err := os.Pipe()
	if err != nil {
		return brain.Result{}, fmt.Errorf("claude: stdout pipe: %w", err)
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return brain.Result{}, fmt.Errorf("claude: stderr pipe: %w", err)
	}
	defer errR.Close()
	cmd.Stdout, cmd.Stderr = outW, errW

	start := time.Now()
	log.Info("claude run starting", "model", firstNonEmpty(req.Model, c.cfg.Model), "session_id", req.SessionID, "resume", req.Resume)
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		return brain.Result{}, fmt.Errorf("claude: start %s: %w", c.cfg.Binary, err)
	}
	if cmd.Cancel == nil {
		// The launcher did not tie the command to ctx; at least stop the CLI itself.
		stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
		defer stop()
	}

	p := newParser(log, onEvent)
	parsed := make(chan error, 1)
	go func() { parsed <- p.read(outR) }()
	stderr := &tailBuffer{max: stderrTailMax}
	drained := make(chan error, 1)
	go func() {
		_, err := io.Copy(stderr, errR)
		drained <- err
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var readErr, waitErr error
	stdoutDone := false
	select {
	case readErr = <-parsed:
		stdoutDone = true
		waitErr = <-exited
	case waitErr = <-exited:
	}
	// Whatever the CLI wrote is in the pipes by now; only a grandchild holding them
	// open can keep them from reaching EOF.
	deadline := time.Now().Add(exitGrace)
	for _, f := range []*os.File{outR, errR} {
		if err := f.SetReadDeadline(deadline); err != nil {
			log.Warn("claude: cannot bound the pipe drain", "err", err)
		}
	}
	if !stdoutDone {
		readErr = <-parsed
	}
	if err := <-drained; err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		log.Warn("claude: reading stderr failed", "err", err)
	}
	if readErr != nil && !errors.Is(readErr, os.ErrDeadlineExceeded) {
		log.Warn("claude: reading stdout failed", "err", readErr)
	}

	res := p.res
	res.StderrTail = redact(stderr.String(), secretValues(env, cmd))
	if !p.gotResult {
		res.SessionID, res.Retries = p.sessionID, p.retries
		res.DurationMS = time.Since(start).Milliseconds()
	}
	// A run stopped on purpose is reported as stopped, even if the CLI managed to write
	// a failing verdict on its way out: it must not count as a failed attempt.
	if ctx.Err() != nil && !res.OK {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, ctx.Err()) {
			return res, fmt.Errorf("claude run stopped (%v): %w", cause, ctx.Err())
		}
		return res, fmt.Errorf("claude run stopped: %w", ctx.Err())
	}
	if !p.gotResult {
		return res, fmt.Errorf("%w (%s)%s", ErrNoResult, exitString(waitErr), lastLine(res.StderrTail))
	}
	log.Info("claude run finished", "ok", res.OK, "subtype", res.Subtype, "terminal_reason", res.TerminalReason,
		"api_status", res.APIStatus, "transient", res.Transient, "retries", res.Retries, "num_turns", res.NumTurns,
		"duration_ms", res.DurationMS, "exit", exitString(waitErr))
	return res, nil
}

func exitString(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit status 0"
	case errors.As(err, &ee):
		return ee.String()
	default:
		return err.Error()
	}
}

// lastLine is ": " plus the last non-empty line of s (capped), or "" when s is blank.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" {
		return ""
	}
	return ": " + clip(last, 300)
}

// secretish matches environment variable names whose values must never be repeated.
var secretish = regexp.MustCompile(`(?i)(KEY|TOKEN|SECRET|PASS|AUTH|CREDENTIAL|COOKIE)`)

// secretValues is what redact removes from the stderr tail: our own environment values
// of some length, and the values of secret-looking variables the launcher set, whether
// in cmd.Env or as `--setenv NAME VALUE` arguments of a sandbox wrapper.
func secretValues(env map[string]string, cmd *exec.Cmd) []string {
	var out []string
	for _, v := range env {
		if len(v) >= 8 {
			out = append(out, v)
		}
	}
	add := func(name, value string) {
		if len(value) >= 4 && secretish.MatchString(name) {
			out = append(out, value)
		}
	}
	for _, kv := range cmd.Env {
		if name, value, ok := strings.Cut(kv, "="); ok {
			add(name, value)
		}
	}
	for i := 0; i+2 < len(cmd.Args); i++ {
		if cmd.Args[i] == "--setenv" {
			add(cmd.Args[i+1], cmd.Args[i+2])
		}
	}
	return out
}

// redact replaces each of secrets in s with a marker, so that a CLI echoing its
// environment cannot carry it into logs or errors.
func redact(s string, secrets []string) string {
	for _, v := range secrets {
		if v != "" {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int

	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

// String is the tail, starting at a character boundary.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	for len(b) > 0 && b[0]&0xC0 == 0x80 {
		b = b[1:]
	}
	return string(b)
}
