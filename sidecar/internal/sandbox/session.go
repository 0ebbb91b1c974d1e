package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A Session is one task's sandbox, started once and serving each of the task's commands
// (issue 12: a sandboxed run ≤ a bare run + 10 ms). Starting bwrap costs more than the
// whole budget on a small VM, so the sidecar starts it while it still pulls the task's
// files, and a command then costs one process start on each side: istota-init --attach
// on the host, which the brain starts, waits for and signals like the command itself,
// and the command, which istota-init (pid 1 of the sandbox, --session) starts inside.
// An OpenAI-compatible brain's tool calls share the one sandbox the same way.
//
// Between two commands of the session the workspace and /tmp persist, as they do
// anyway; processes a command leaves behind end with it (see cmd/istota-init).
type Session struct {
	r     *Runner
	spec  Spec
	run   *Run
	bwrap *exec.Cmd
	// control is the host's end of the session socket; every attach gets a copy.
	control *os.File
	exited  chan struct{}
	waitErr error // bwrap's end, once exited is closed
	output  *tailBuffer

	mu sync.Mutex
	// requests are the commands' request descriptors. The host's copies are closed with
	// the session: exec.Cmd says nothing when it has started, and one descriptor per
	// command of a task is cheap.
	requests []*os.File
	closing  bool
	once     sync.Once
	err      error
}

// Sessions reports whether StartSession can share one sandbox among a task's commands:
// it needs istota-init (the Go fallback init runs one command per sandbox) and the
// sandbox itself.
func (r *Runner) Sessions() bool {
	return !r.cfg.Unsandboxed && r.cfg.InitPath != ""
}

// sessionCloseWait bounds how long Close waits for the sandbox to end by itself once
// its session socket is closed, before killing it.
const sessionCloseWait = 5 * time.Second

// StartSession starts the sandbox of spec, whose Argv, Stdin and Dir are ignored: each
// Command brings its own. The sandbox starts in the background; a command given before it
// is ready waits for it. Cancelling ctx kills the sandbox and every command in it.
// Always Close the Session. It fails when !r.Sessions().
func (r *Runner) StartSession(ctx context.Context, spec Spec) (*Session, error) {
	if !r.Sessions() {
		return nil, errors.New("sandbox: sessions need the sandbox and istota-init")
	}
	spec.Argv, spec.Stdin, spec.Dir = nil, nil, ""
	if err := r.validate(&spec, true); err != nil {
		return nil, fmt.Errorf("sandbox: task %d: %w", spec.TaskID, err)
	}
	run := &Run{logger: r.logger.With("task_id", spec.TaskID), socketIn: map[string]string{}}
	s := &Session{r: r, spec: spec, run: run, exited: make(chan struct{}), output: &tailBuffer{max: 8 << 10}}
	ok := false
	defer func() {
		if !ok {
			run.Close()
		}
	}()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: task %d: session socket: %w", spec.TaskID, err)
	}
	s.control = os.NewFile(uintptr(fds[0]), "session")
	inside := os.NewFile(uintptr(fds[1]), "session-init")
	// The init's end is closed here once bwrap has it, and by Run.Close otherwise.
	run.files = append(run.files, inside)
	if err := r.prepareSandbox(ctx, &spec, run, inside); err != nil {
		s.control.Close()
		return nil, fmt.Errorf("sandbox: task %d: %w", spec.TaskID, err)
	}
	s.bwrap = run.Cmd
	run.Cmd = nil
	s.bwrap.Stdout, s.bwrap.Stderr = s.output, s.output
	if err := s.bwrap.Start(); err != nil {
		s.control.Close()
		return nil, fmt.Errorf("sandbox: task %d: start bwrap: %w", spec.TaskID, err)
	}
	// Only the sandbox may hold the init's end: the session ends when the host closes
	// its own (and no attach is sending), not when the last copy on the host goes.
	inside.Close()
	go func() {
		s.waitErr = s.bwrap.Wait()
		close(s.exited)
	}()
	run.logger.Debug("sandbox session started", "user_id", spec.UserID, "uid", r.uid)
	ok = true
	return s, nil
}

// Command returns an unstarted cmd that runs argv inside the session's sandbox with the
// task's environment plus env (the same rules as Spec.Env), stdin as its standard input
// and, once started, the cmd's stdout and stderr as its own. argv[0] may be the agent
// binary as Spec.AgentBinary names it. Cancelling ctx kills the command (and what it
// started), not the session. The cmd's exit status is the command's, 128+n when
// signal n ended it; signals sent to the cmd's process reach the command.
func (s *Session) Command(ctx context.Context, argv []string, env map[string]string, stdin io.Reader) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("sandbox: empty command")
	}
	spec := s.spec
	spec.Argv = argv
	spec.Env = make(map[string]string, len(s.spec.Env)+len(env))
	for k, v := range s.spec.Env {
		spec.Env[k] = v
	}
	for k, v := range env {
		spec.Env[k] = v
	}
	if err := s.r.validate(&spec, false); err != nil {
		return nil, fmt.Errorf("sandbox: task %d: %w", spec.TaskID, err)
	}
	select {
	case <-s.exited:
		return nil, s.endedError()
	default:
	}
	// Files the sidecar wrote since the session started (the pull) become the agent's.
	for _, dir := range s.run.writable {
		if err := s.r.ownTree(dir); err != nil {
			return nil, fmt.Errorf("sandbox: task %d: %w", spec.TaskID, err)
		}
	}
	argv = s.run.agentArgv(argv, spec.AgentBinary)
	env = buildEnv(&spec, sandboxPath, HomeDir, s.run.token, s.run.LLMBaseURL)
	env["PWD"] = WorkspaceDir // as bwrap's --chdir sets it for a single command
	environ := envList(env)
	request, err := dataPipe(s.run.taskDir, "command", encodeRequest(WorkspaceDir, argv, environ))
	if err != nil {
		return nil, fmt.Errorf("sandbox: task %d: %w", spec.TaskID, err)
	}
	cmd := exec.CommandContext(ctx, s.r.cfg.InitPath, s.r.protocolFlag(), "--attach")
	cmd.Env = []string{"LANG=C.UTF-8"}
	cmd.Dir = "/"
	cmd.Stdin = stdin
	// Descriptor 3 is the session socket, 4 the request; neither is read by attach
	// beyond passing it on, and nothing secret is on its command line or environment.
	cmd.ExtraFiles = []*os.File{s.control, request}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if s.r.switchTo {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: s.r.uid, Gid: s.r.gid, Groups: []uint32{}}
	}
	setKill(cmd)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		request.Close()
		return nil, errors.New("sandbox: the session is closed")
	}
	s.requests = append(s.requests, request)
	return cmd, nil
}

// endedError says why the sandbox is gone, with what bwrap and the init said.
func (s *Session) endedError() error {
	out := strings.TrimSpace(s.output.String())
	if out != "" {
		return fmt.Errorf("sandbox: task %d: the sandbox ended (%v): %s", s.spec.TaskID, s.waitErr, out)
	}
	return fmt.Errorf("sandbox: task %d: the sandbox ended (%v)", s.spec.TaskID, s.waitErr)
}

// Close ends the session: the init ends when its session socket does, which ends every
// process in the sandbox; a sandbox that has not ended within sessionCloseWait is killed.
// Then the gateway and services stop. Commands still running are killed with it. Safe to
// call twice.
func (s *Session) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closing = true
		for _, f := range s.requests {
			f.Close()
		}
		s.requests = nil
		s.mu.Unlock()
		s.control.Close()
		timer := time.NewTimer(sessionCloseWait)
		select {
		case <-s.exited:
		case <-timer.C:
			s.run.logger.Warn("sandbox session did not end when closed; killing it")
			if err := syscall.Kill(-s.bwrap.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				s.run.logger.Warn("killing the sandbox session failed", "err", err)
			}
			<-s.exited
		}
		timer.Stop()
		var errs []error
		if s.waitErr != nil && !s.killedByContext() {
			errs = append(errs, s.endedError())
		}
		if err := s.run.Close(); err != nil {
			errs = append(errs, err)
		}
		s.err = errors.Join(errs...)
	})
	return s.err
}

// killedByContext reports whether the sandbox ended because its context was cancelled:
// the task's end, not a fault of the sandbox.
func (s *Session) killedByContext() bool {
	var ee *exec.ExitError
	if !errors.As(s.waitErr, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// sandboxPath is PATH inside every sandbox.
const sandboxPath = AgentBinDir + ":" + istotaBinDir + ":/usr/local/bin:/usr/bin:/bin"

// encodeRequest is a command as istota-init --session reads it:
// "<argc>\0<envc>\0<cwd>\0<argv>...\0<env>...\0".
func encodeRequest(cwd string, argv, environ []string) []byte {
	var b bytes.Buffer
	field := func(s string) {
		b.WriteString(s)
		b.WriteByte(0)
	}
	field(strconv.Itoa(len(argv)))
	field(strconv.Itoa(len(environ)))
	field(cwd)
	for _, a := range argv {
		field(a)
	}
	for _, e := range environ {
		field(e)
	}
	return b.Bytes()
}
