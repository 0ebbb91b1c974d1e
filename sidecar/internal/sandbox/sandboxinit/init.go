// Package sandboxinit is the Go fallback of the sandbox's pid 1: it bridges loopback
// ports to Unix sockets, starts the agent command under its resource limits, forwards
// signals, reaps orphans and returns the command's exit status.
//
// Every sandbox normally runs istota-init, a small static C program
// (cmd/istota-init/istota-init.c) that speaks the same protocol: the init runs once per
// task, so its start is part of every task's latency (issue 12: a sandboxed run ≤ a bare
// run + 10 ms), and a Go runtime's start and exit alone cost several milliseconds. The
// istota binary runs this package ("istota sandbox-init") when istota-init is missing
// beside it. The two must not drift: this package's tests run one suite of behaviour
// checks against both, comparing exit statuses and messages byte for byte.
package sandboxinit

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Protocol is the version of the command line between the sidecar and the init (the
// flags below and what they mean). The sidecar passes it as the first flag; an init that
// speaks another version refuses to run rather than misread its arguments. Raise it
// whenever a flag is added, removed or changes meaning.
const Protocol = 1

// ProtocolFlag is the flag that carries Protocol ("--protocol=1").
const ProtocolFlag = "protocol"

// MismatchMessage starts the init's refusal of another protocol version; the sidecar's
// probe recognises it.
const MismatchMessage = "sandbox init protocol mismatch"

// rlimitNPROC is RLIMIT_NPROC, which package syscall does not name (6 on every Linux
// architecture Go supports).
const rlimitNPROC = 6

// forwardedSignals are passed on from the init to the command.
var forwardedSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// Self says which binary the init is running in.
type Self struct {
	// Name prefixes the init's own messages on the task's stderr.
	Name string
	// Args come between the binary and the init's flags when the init starts itself
	// again (--exec): "sandbox-init" for the istota binary, "sandboxinit-test" in tests.
	Args []string
}

// Run is the sandbox's pid 1 ("istota-init [flags] -- command args…"). It serves each
// --forward PORT=SOCKET as a listener on 127.0.0.1:PORT inside the sandbox's network
// namespace that passes every connection to the Unix socket (Claude Code cannot use a
// Unix socket itself), starts the command with the resource limits given by --rlimit,
// forwards signals to it, reaps orphans, and returns the command's exit status (128+n
// when a signal ended it). When it returns, the process must exit with that status: pid
// 1 exiting ends every process left in the sandbox.
//
// The limits are set by util-linux prlimit when --prlimit names it (it sets them on
// itself and execs the command), otherwise by a second start of this binary (--exec).
// Either way the init itself is never bound by them; prlimit is a small C program and
// starts in a fraction of the time a second Go runtime does. (istota-init sets them
// with setrlimit in its forked child and ignores --prlimit; that is the one difference
// in behaviour between the two.)
//
// A --protocol other than Protocol is refused (exit 2) before anything else is read.
//
// stdin must be nil or an *os.File (the command reads it directly); stdout and stderr
// may be any writer.
func Run(self Self, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	errw := &lockedWriter{w: stderr}
	// Checked before the flags are parsed: an init of another version may not know
	// them, and "flag provided but not defined" would hide the real cause.
	if msg := checkProtocol(args); msg != "" {
		fmt.Fprintf(errw, "%s: %s\n", self.Name, msg)
		return 2
	}
	fs := flag.NewFlagSet(self.Name, flag.ContinueOnError)
	fs.SetOutput(errw)
	var forwards forwardFlags
	var limits rlimitFlags
	fs.Int(ProtocolFlag, Protocol, "version of the sidecar's command line; another than this init's is refused")
	execOnly := fs.Bool("exec", false, "internal: set the limits, then exec the command in place")
	prlimit := fs.String("prlimit", "", "`PATH` of util-linux prlimit, which an init may use to set the limits (istota-init sets them itself)")
	fs.Var(&forwards, "forward", "`PORT=SOCKET`: serve 127.0.0.1:PORT and pass each connection to the Unix socket (repeatable)")
	fs.Var(&limits, "rlimit", "`NAME=VALUE`: resource limit of the command: as, nproc, nofile or cpu (repeatable)")
	// Sessions (one sandbox serving a task's commands) are istota-init's alone; the
	// flags are declared so that both inits print the same usage.
	attach := fs.Bool("attach", false, "internal, on the host: run the command sent on descriptor 4 in the sandbox whose session socket is descriptor 3")
	session := fs.Int("session", 0, "serve the commands sent over the session socket `FD` instead of running one command (istota-init only)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *attach || *session != 0 {
		fmt.Fprintf(errw, "%s: sessions need istota-init; this init runs one command per sandbox\n", self.Name)
		return 2
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fmt.Fprintf(errw, "%s: no command given after --\n", self.Name)
		return 2
	}
	if *execOnly {
		return execWithLimits(self.Name, argv, limits, errw)
	}
	// bwrap may leave descriptors without close-on-exec; none may reach the command.
	markCloseOnExec()

	var bridges []*bridge
	stopBridges := func() {
		for _, b := range bridges {
			b.close()
		}
	}
	defer stopBridges()
	for _, fw := range forwards {
		b, err := newBridge(self.Name, fw.port, fw.socket, errw)
		if err != nil {
			fmt.Fprintf(errw, "%s: %v\n", self.Name, err)
			return 126
		}
		bridges = append(bridges, b)
	}

	// Looked up here whichever way the command starts, so a missing command is 127 with
	// our message and costs no second process.
	prog, err := lookPath(argv[0])
	if err != nil {
		fmt.Fprintf(errw, "%s: %v\n", self.Name, err)
		return 127
	}
	// Limits are set by a child that sets them on itself and execs the command, so the
	// init (its threads, its memory) is never bound by them. prlimit's execvp finds the
	// command on the same PATH and keeps argv[0] as given.
	childArgv := argv
	switch {
	case len(limits) == 0:
	case *prlimit != "":
		prog = *prlimit
		childArgv = append(append([]string{"prlimit"}, limits.prlimitArgs()...), "--")
		childArgv = append(childArgv, argv...)
	default:
		// This very binary again, whichever it is: the sandbox binds it, and
		// /proc/self/exe needs no path inside.
		prog = "/proc/self/exe"
		childArgv = append(append([]string{os.Args[0]}, self.Args...), "--exec")
		childArgv = append(childArgv, limits.args()...)
		childArgv = append(childArgv, "--")
		childArgv = append(childArgv, argv...)
	}

	stdio, err := newStdio(stdin, stdout, stderr)
	if err != nil {
		fmt.Fprintf(errw, "%s: %v\n", self.Name, err)
		return 2
	}
	defer stdio.close()

	sigc := make(chan os.Signal, 8)
	signal.Notify(sigc, forwardedSignals...)
	defer signal.Stop(sigc)

	pid, err := syscall.ForkExec(prog, childArgv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: stdio.fds(),
	})
	stdio.started()
	if err != nil {
		fmt.Fprintf(errw, "%s: start %s: %v\n", self.Name, argv[0], err)
		if errors.Is(err, syscall.ENOENT) {
			return 127
		}
		return 126
	}

	type result struct {
		ws  syscall.WaitStatus
		err error
	}
	done := make(chan result, 1)
	// As pid 1 the init inherits every orphan in the sandbox and must reap them; a
	// plain process (tests) waits only for its own child so it never steals another's.
	reapAll := os.Getpid() == 1
	go func() {
		ws, err := waitFor(pid, reapAll)
		done <- result{ws, err}
	}()
	for {
		select {
		case sig := <-sigc:
			syscall.Kill(pid, sig.(syscall.Signal))
		case res := <-done:
			stopBridges()
			stdio.wait()
			if res.err != nil {
				fmt.Fprintf(errw, "%s: wait: %v\n", self.Name, res.err)
				return 126
			}
			return exitCode(res.ws)
		}
	}
}

// checkProtocol returns why args ask for a protocol this init does not speak, or "".
// Only the flags before "--" are looked at; a missing flag means the current version
// (--exec restarts and tests).
func checkProtocol(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return ""
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != ProtocolFlag {
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				return "flag needs an argument: -" + ProtocolFlag
			}
			value = args[i+1]
		}
		if value == strconv.Itoa(Protocol) {
			return ""
		}
		return fmt.Sprintf("%s: the sidecar speaks version %q, this init speaks %d; "+
			"install the istota-init that was built with this istota binary (they ship together in bin/<arch>/)",
			MismatchMessage, value, Protocol)
	}
	return ""
}

// waitFor waits until pid exits, reaping any other child on the way when reapAll.
func waitFor(pid int, reapAll bool) (syscall.WaitStatus, error) {
	target := pid
	if reapAll {
		target = -1
	}
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(target, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if got == pid {
			return ws, nil
		}
	}
}

func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// lookPath finds the command on the sandbox's PATH; names with a slash are used as is
// once they exist.
func lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		if _, err := os.Stat(name); errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%s: not found", name)
		}
		return name, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s: not found on PATH", name)
	}
	return p, nil
}

// execWithLimits sets the limits on this process and replaces it with the command.
// Once a low address-space limit is in force the Go runtime cannot map more memory, so
// everything that allocates happens first and the limits and execve are raw system
// calls with nothing in between.
func execWithLimits(name string, argv []string, limits rlimitFlags, errw io.Writer) int {
	prog, err := lookPath(argv[0])
	if err != nil {
		fmt.Fprintf(errw, "%s: %v\n", name, err)
		return 127
	}
	if err := checkExecutable(prog); err != nil {
		fmt.Fprintf(errw, "%s: %v\n", name, err)
		return 126
	}
	progp, err := syscall.BytePtrFromString(prog)
	if err != nil {
		fmt.Fprintf(errw, "%s: %v\n", name, err)
		return 126
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		fmt.Fprintf(errw, "%s: %v\n", name, err)
		return 126
	}
	envp, err := syscall.SlicePtrFromStrings(os.Environ())
	if err != nil {
		fmt.Fprintf(errw, "%s: %v\n", name, err)
		return 126
	}
	rlims := make([]syscall.Rlimit, len(limits))
	for i, l := range limits {
		rlims[i] = syscall.Rlimit{Cur: l.value, Max: l.value}
	}
	failed := []byte(name + ": set a resource limit or exec the command: ")
	newline := []byte("\n")
	debug.SetGCPercent(-1)
	runtime.LockOSThread()

	var errno syscall.Errno
	for i, l := range limits {
		_, _, errno = syscall.RawSyscall6(syscall.SYS_PRLIMIT64, 0, uintptr(l.resource), uintptr(unsafe.Pointer(&rlims[i])), 0, 0, 0)
		if errno != 0 {
			break
		}
	}
	if errno == 0 {
		_, _, errno = syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(progp)),
			uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])))
	}
	// Still here: report without allocating (Errno.Error returns a static string).
	msg := errno.Error()
	syscall.RawSyscall(syscall.SYS_WRITE, 2, uintptr(unsafe.Pointer(&failed[0])), uintptr(len(failed)))
	syscall.RawSyscall(syscall.SYS_WRITE, 2, uintptr(unsafe.Pointer(unsafe.StringData(msg))), uintptr(len(msg)))
	syscall.RawSyscall(syscall.SYS_WRITE, 2, uintptr(unsafe.Pointer(&newline[0])), 1)
	if errno == syscall.ENOENT {
		return 127
	}
	return 126
}

// markCloseOnExec sets close-on-exec on every descriptor above 2.
func markCloseOnExec() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

type forward struct {
	port   int
	socket string
}

type forwardFlags []forward

func (f *forwardFlags) String() string { return fmt.Sprint(*f) }

func (f *forwardFlags) Set(v string) error {
	ps, sock, ok := strings.Cut(v, "=")
	port, err := strconv.Atoi(ps)
	if !ok || err != nil || port < 1 || port > 65535 || !path.IsAbs(sock) {
		return fmt.Errorf("want PORT=/path/to/socket, got %q", v)
	}
	*f = append(*f, forward{port, sock})
	return nil
}

type rlimit struct {
	name     string
	resource int
	value    uint64
}

type rlimitFlags []rlimit

func (r *rlimitFlags) String() string { return fmt.Sprint(*r) }

func (r *rlimitFlags) Set(v string) error {
	name, vs, ok := strings.Cut(v, "=")
	value, err := strconv.ParseUint(vs, 10, 64)
	if !ok || err != nil || value == 0 {
		return fmt.Errorf("want NAME=VALUE with a positive value, got %q", v)
	}
	res, ok := map[string]int{
		"as":     syscall.RLIMIT_AS,
		"nproc":  rlimitNPROC,
		"nofile": syscall.RLIMIT_NOFILE,
		"cpu":    syscall.RLIMIT_CPU,
	}[name]
	if !ok {
		return fmt.Errorf("unknown limit %q (as, nproc, nofile, cpu)", name)
	}
	*r = append(*r, rlimit{name, res, value})
	return nil
}

// prlimitArgs are the limits as util-linux prlimit options, each setting the soft and
// the hard limit; the flag names are prlimit's long option names.
func (r rlimitFlags) prlimitArgs() []string {
	out := make([]string, 0, len(r))
	for _, l := range r {
		out = append(out, "--"+l.name+"="+strconv.FormatUint(l.value, 10))
	}
	return out
}

func (r rlimitFlags) args() []string {
	var out []string
	for _, l := range r {
		out = append(out, "--rlimit", l.name+"="+strconv.FormatUint(l.value, 10))
	}
	return out
}

// bridge passes connections from a loopback TCP port to a Unix socket.
type bridge struct {
	name   string // the init's, for its messages
	ln     net.Listener
	socket string
	errw   io.Writer
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	once   sync.Once
}

func newBridge(name string, port int, socket string, errw io.Writer) (*bridge, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return nil, fmt.Errorf("forward %d: %w", port, err)
	}
	b := &bridge{name: name, ln: ln, socket: socket, errw: errw, conns: map[net.Conn]struct{}{}}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

func (b *bridge) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		if !b.track(c) {
			return
		}
		b.wg.Add(1)
		go b.handle(c)
	}
}

// track registers c so close can end it; it closes c and reports false once closed.
func (b *bridge) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		c.Close()
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *bridge) untrack(c net.Conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
	c.Close()
}

func (b *bridge) handle(c net.Conn) {
	defer b.wg.Done()
	defer b.untrack(c)
	u, err := net.DialTimeout("unix", b.socket, 10*time.Second)
	if err != nil {
		fmt.Fprintf(b.errw, "%s: forward to %s: %v\n", b.name, b.socket, err)
		return
	}
	if !b.track(u) {
		return
	}
	defer b.untrack(u)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(u, c)
		u.(*net.UnixConn).CloseWrite()
	}()
	io.Copy(c, u)
	c.(*net.TCPConn).CloseWrite()
	wg.Wait()
}

// close stops accepting, ends every open connection and waits for the goroutines.
func (b *bridge) close() {
	b.once.Do(func() {
		b.ln.Close()
		b.mu.Lock()
		b.closed = true
		for c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
}

// lockedWriter serialises writes from the init's goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// stdio gives the command descriptors for the init's stdin, stdout and stderr: files
// are passed as they are, other writers through a pipe and a copying goroutine.
type stdio struct {
	files   [3]*os.File
	parent  []*os.File // pipe ends the init reads from
	child   []*os.File // pipe ends only the command keeps
	devNull *os.File
	wg      sync.WaitGroup
}

func newStdio(stdin io.Reader, stdout, stderr io.Writer) (*stdio, error) {
	s := &stdio{}
	switch in := stdin.(type) {
	case nil:
		f, err := os.Open(os.DevNull)
		if err != nil {
			return nil, err
		}
		s.devNull, s.files[0] = f, f
	case *os.File:
		s.files[0] = in
	default:
		return nil, errors.New("stdin must be a file")
	}
	for i, w := range []io.Writer{stdout, stderr} {
		if f, ok := w.(*os.File); ok {
			s.files[i+1] = f
			continue
		}
		r, pw, err := os.Pipe()
		if err != nil {
			s.close()
			return nil, err
		}
		s.files[i+1] = pw
		s.parent = append(s.parent, r)
		s.child = append(s.child, pw)
		s.wg.Add(1)
		go func(dst io.Writer, src *os.File) {
			defer s.wg.Done()
			io.Copy(dst, src)
		}(w, r)
	}
	return s, nil
}

func (s *stdio) fds() []uintptr {
	return []uintptr{s.files[0].Fd(), s.files[1].Fd(), s.files[2].Fd()}
}

// started drops the init's copies of the command's pipe ends, so the copies see EOF
// when the command (and whatever inherited them) is gone.
func (s *stdio) started() {
	for _, f := range s.child {
		f.Close()
	}
	s.child = nil
}

// wait lets the copies drain; a background process still holding a pipe gets a short
// grace, then the read end is closed so the copy stops.
func (s *stdio) wait() {
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		for _, f := range s.parent {
			f.Close()
		}
		<-done
	}
}

func (s *stdio) close() {
	s.started()
	for _, f := range s.parent {
		f.Close()
	}
	s.wg.Wait()
	if s.devNull != nil {
		s.devNull.Close()
	}
}

// checkExecutable reports why p cannot be run: missing, not a regular file, or without
// any execute bit.
func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", p)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", p)
	}
	return nil
}
