package sandboxinit

// One suite for both implementations of the sandbox init: istota-init, the C program
// every sandbox runs (cmd/istota-init), and this package, the Go fallback the istota
// binary runs without it. Every check runs against both, and where a check compares
// output, the two must print the same bytes: a change to one that the other lacks fails
// here. The one intended difference (--prlimit) is a field of impl.
//
// The checks that need the init to be pid 1 (reaping orphans, a signal to pid 1) run in
// real sandboxes, for both, in package sandbox (initCases).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/sandbox/sandboxtest"
)

// testSelf is the Go init as this test binary runs it: TestMain hands "sandboxinit-test
// …" to Run, so a second start (--exec) comes back here. Its name is the C init's, so
// that their messages compare equal.
var testSelf = Self{Name: "istota-init", Args: []string{"sandboxinit-test"}}

// helperCommand makes the test binary a client of the init's bridge (runHelper).
const helperCommand = "sandboxinit-helper"

// ignoreChildCommand makes the test binary set SIGCHLD to ignored and execute the rest of
// its arguments, which start with ignored SIGCHLD: no shell can set that up.
const ignoreChildCommand = "sandboxinit-ignore-sigchld"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case testSelf.Args[0]:
			os.Exit(Run(testSelf, os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
		case helperCommand:
			os.Exit(runHelper(os.Args[2:]))
		case ignoreChildCommand:
			signal.Ignore(syscall.SIGCHLD)
			err := syscall.Exec(os.Args[2], os.Args[2:], os.Environ())
			fmt.Fprintln(os.Stderr, err)
			os.Exit(125)
		}
	}
	code := m.Run()
	sandboxtest.Cleanup()
	os.Exit(code)
}

const prlimitPath = "/usr/bin/prlimit"

// impl is one implementation of the init.
type impl struct {
	name string
	path string   // the program to run
	args []string // before the init's own arguments
	// setsLimitsItself: it ignores --prlimit and sets the limits with setrlimit
	// (istota-init); else it runs the --prlimit program to set them (the Go init).
	setsLimitsItself bool
	// poolsPipes: descriptors may stay open after a bridged connection ended (Go's
	// splice keeps its pipe pairs in a pool); else every one must be closed.
	poolsPipes bool
}

// impls returns both implementations: the C istota-init built as it ships, and the Go
// init in this test binary.
func impls(t *testing.T) []impl {
	t.Helper()
	c, err := sandboxtest.BuildInit()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []impl{
		{name: "C", path: c, setsLimitsItself: true},
		{name: "Go", path: exe, args: testSelf.Args, poolsPipes: true},
	}
}

// command returns the init started with args; stdin is /dev/null.
func (im impl) command(args ...string) *exec.Cmd {
	return exec.Command(im.path, append(append([]string{}, im.args...), args...)...)
}

type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
}

func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("the init itself was killed by %v (%s)", ws.Signal(), res)
		}
	default:
		t.Fatalf("run %s: %v", cmd.Args, err)
	}
	return res
}

// same runs check on every implementation and fails unless they all gave the same
// result; it returns that result.
func same(t *testing.T, run func(t *testing.T, im impl) result) result {
	t.Helper()
	var first result
	var firstName string
	for i, im := range impls(t) {
		res := run(t, im)
		if i == 0 {
			first, firstName = res, im.name
			continue
		}
		if res != first {
			t.Fatalf("the implementations differ:\n%s: %s\n%s: %s", firstName, first, im.name, res)
		}
	}
	return first
}

func TestArguments(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", []string{"--"}, "istota-init: no command given after --\n"},
		{"no arguments", nil, "istota-init: no command given after --\n"},
		{"bad forward", []string{"--forward", "x=/s", "--", "true"}, `invalid value "x=/s" for flag -forward: want PORT=/path/to/socket, got "x=/s"`},
		{"relative socket", []string{"--forward", "80=s", "--", "true"}, "PORT=/path"},
		{"port out of range", []string{"--forward=65536=/s", "--", "true"}, "PORT=/path"},
		{"forward without a value", []string{"--forward"}, "flag needs an argument: -forward\nUsage of istota-init:\n"},
		{"quoted value", []string{"--forward", "a\"b\\c\td\x01é\xff=/s", "--", "true"}, `got "a\"b\\c\td\x01é\xff=/s"`},
		{"unknown limit", []string{"--rlimit", "stack=1", "--", "true"}, `unknown limit "stack" (as, nproc, nofile, cpu)`},
		{"zero limit", []string{"--rlimit", "cpu=0", "--", "true"}, "positive"},
		{"negative limit", []string{"--rlimit=cpu=-1", "--", "true"}, "positive"},
		{"unknown flag", []string{"--protocol=1", "--sideways", "--", "true"}, "flag provided but not defined: -sideways\nUsage of istota-init:\n  -attach\n"},
		{"bad flag syntax", []string{"---x", "--", "true"}, "bad flag syntax: ---x\n"},
		{"bad boolean", []string{"--exec=maybe", "--", "true"}, `invalid boolean value "maybe" for -exec: parse error`},
		{"bad attach boolean", []string{"--attach=maybe"}, `invalid boolean value "maybe" for -attach: parse error`},
		{"session not a number", []string{"--session", "three"}, `invalid value "three" for flag -session: parse error`},
		{"help", []string{"--help"}, "Usage of istota-init:\n"},
		{"h", []string{"-h", "--", "true"}, "Usage of istota-init:\n"},
		{"protocol again, not a number", []string{"--protocol=1", "--protocol", "one", "--", "true"}, `invalid value "one" for flag -protocol: parse error`},
		{"newer protocol", []string{"--protocol", "2", "--", "true"}, "istota-init: " + MismatchMessage + `: the sidecar speaks version "2", this init speaks 1`},
		// A newer sidecar's flag that this init does not know: the version is the cause
		// to name, not the flag.
		{"newer protocol and flag", []string{"--protocol=2", "--sideways", "--", "true"}, "install the istota-init that was built with this istota binary (they ship together in bin/<arch>/)\n"},
		{"older protocol", []string{"-protocol=0", "--", "true"}, MismatchMessage},
		{"protocol after a command word", []string{"true", "--protocol=3"}, MismatchMessage},
		{"protocol without value", []string{"--protocol"}, "istota-init: flag needs an argument: -protocol\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := same(t, func(t *testing.T, im impl) result { return runCmd(t, im.command(tc.args...)) })
			if res.code != 2 || !strings.Contains(res.stderr, tc.want) || res.stdout != "" {
				t.Fatalf("%s, want exit 2 and stderr with %q", res, tc.want)
			}
		})
	}
}

// TestSessionFlags: sessions are istota-init's alone. The Go init refuses them by name;
// istota-init checks its session descriptor and needs nothing after --.
func TestSessionFlags(t *testing.T) {
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			for _, tc := range []struct {
				args          []string
				code          int
				goWant, cWant string
			}{
				{[]string{"--session=2"}, 2, "sessions need istota-init", `invalid value "2" for flag -session: want a descriptor above 2`},
				// The C init's answers to these are checked below.
				{[]string{"--session=97"}, 2, "sessions need istota-init", ""},
				{[]string{"--attach"}, 2, "sessions need istota-init", ""},
			} {
				res := runCmd(t, im.command(tc.args...))
				want := tc.goWant
				if im.name == "C" {
					want = tc.cWant
					if want == "" {
						continue // covered by the sandbox package's session tests
					}
				}
				if res.code != tc.code || !strings.Contains(res.stderr, want) {
					t.Errorf("%v: %s, want exit %d and stderr with %q", tc.args, res, tc.code, want)
				}
			}
			if im.name != "C" {
				return
			}
			res := runCmd(t, im.command("--session=97"))
			if res.code != 126 || !strings.Contains(res.stderr, "session 97: bad file descriptor") {
				t.Errorf("a session descriptor that is not open: %s", res)
			}
			res = runCmd(t, im.command("--attach"))
			if res.code != 126 || !strings.Contains(res.stderr, "descriptor 3 (the session) and 4 (the command) must be open") {
				t.Errorf("attach without its descriptors: %s", res)
			}
		})
	}
}

// TestCommands runs commands through both inits as a plain process (not pid 1): the
// same exit status, output and messages.
func TestCommands(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("\x00\x01\x02\x03"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Found and executable, but its interpreter is missing: execve fails with ENOENT.
	orphan := filepath.Join(dir, "orphan")
	if err := os.WriteFile(orphan, []byte("#!/no/such/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dot := filepath.Join(dir, "dotcmd")
	if err := os.WriteFile(dot, []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  []string // added to the init's environment
		code int
		out  string
		err  string // stderr, exactly
	}{
		{"status and output", []string{"--", "/bin/sh", "-c", "echo out; echo err >&2; exit 5"}, nil, 5, "out\n", "err\n"},
		{"killed by a signal", []string{"--", "/bin/sh", "-c", "kill -KILL $$"}, nil, 128 + 9, "", ""},
		{"without --", []string{"/bin/echo", "a", "b"}, nil, 0, "a b\n", ""},
		{"protocol after -- is the command's", []string{"--protocol=1", "--", "/bin/echo", "--protocol", "9"}, nil, 0, "--protocol 9\n", ""},
		{"PATH lookup keeps argv[0]", []string{"--", "sh", "-c", `echo "$0"`}, nil, 0, "sh\n", ""},
		{"environment", []string{"--", "sh", "-c", `echo "$ISTOTA_INIT_TEST"`}, []string{"ISTOTA_INIT_TEST=kept"}, 0, "kept\n", ""},
		{"not on PATH", []string{"--", "no-such-command-xyz"}, nil, 127, "", "istota-init: no-such-command-xyz: not found on PATH\n"},
		{"not on PATH, with limits", []string{"--rlimit", "nofile=50", "--", "no-such-command-xyz"}, nil, 127, "", "istota-init: no-such-command-xyz: not found on PATH\n"},
		{"found only relative to the working directory", []string{"--", "dotcmd"}, []string{"PATH=.:/usr/bin"}, 127, "", "istota-init: dotcmd: not found on PATH\n"},
		{"found on PATH", []string{"--", "dotcmd"}, []string{"PATH=/usr/bin:" + dir}, 0, "ran\n", ""},
		{"empty PATH", []string{"--", "sh"}, []string{"PATH="}, 127, "", "istota-init: sh: not found on PATH\n"},
		{"missing path", []string{"--", "/no/such/command"}, nil, 127, "", "istota-init: /no/such/command: not found\n"},
		{"not executable", []string{"--", script}, nil, 126, "", "istota-init: start " + script + ": permission denied\n"},
		{"not executable, with limits", []string{"--rlimit", "nofile=50", "--", script}, nil, 126, "", "istota-init: " + script + " is not executable\n"},
		{"a directory", []string{"--", dir}, nil, 126, "", "istota-init: start " + dir + ": permission denied\n"},
		{"a directory, with limits", []string{"--rlimit", "cpu=50", "--", dir}, nil, 126, "", "istota-init: " + dir + " is not a regular file\n"},
		{"not a program", []string{"--", garbage}, nil, 126, "", "istota-init: start " + garbage + ": exec format error\n"},
		{"not a program, with limits", []string{"--rlimit", "nofile=50", "--", garbage}, nil, 126, "", "istota-init: set a resource limit or exec the command: exec format error\n"},
		{"missing interpreter", []string{"--", orphan}, nil, 127, "", "istota-init: start " + orphan + ": no such file or directory\n"},
		{"missing interpreter, with limits", []string{"--rlimit", "cpu=50", "--", orphan}, nil, 127, "", "istota-init: set a resource limit or exec the command: no such file or directory\n"},
		{"--exec: missing interpreter", []string{"--exec", "--", orphan}, nil, 127, "", "istota-init: set a resource limit or exec the command: no such file or directory\n"},
		{"limits on the command, not on the init",
			[]string{"--rlimit", "nofile=77", "--rlimit", "cpu=99", "--rlimit", "nproc=4000", "--rlimit", "as=4294967296", "--",
				"sh", "-c", `ulimit -n; ulimit -t; ulimit -v; grep '^Max processes' /proc/self/limits | tr -s ' '; grep -cE '^Max (open files|cpu time|processes) +(77|99|4000) ' /proc/$PPID/limits`},
			nil, 1, "77\n99\n4194304\nMax processes 4000 4000 processes \n0\n", ""},
		{"--exec: limits, then the command in place",
			[]string{"--exec", "--rlimit", "nofile=33", "--", "sh", "-c", `ulimit -n; [ "$PPID" = "$INIT_PARENT" ] && echo replaced`},
			nil, 0, "33\nreplaced\n", ""},
		{"--exec: not found", []string{"--exec", "--", "no-such-command-xyz"}, nil, 127, "", "istota-init: no-such-command-xyz: not found on PATH\n"},
		{"--exec: not executable", []string{"--exec=true", "--", script}, nil, 126, "", "istota-init: " + script + " is not executable\n"},
		{"--exec=false runs as usual", []string{"--exec=false", "--", "/bin/sh", "-c", "exit 4"}, nil, 4, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := same(t, func(t *testing.T, im impl) result {
				cmd := im.command(tc.args...)
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), tc.env...)
				cmd.Env = append(cmd.Env, "INIT_PARENT="+strconv.Itoa(os.Getpid()))
				return runCmd(t, cmd)
			})
			if res.code != tc.code || res.stdout != tc.out || res.stderr != tc.err {
				t.Fatalf("%s, want exit %d stdout %q stderr %q", res, tc.code, tc.out, tc.err)
			}
		})
	}
}

// TestPrlimit is the one intended difference: the Go init runs the --prlimit program
// with prlimit's options and the command after "--", istota-init sets the limits itself
// and never runs it. A stand-in records its arguments, then hands them to the real one.
func TestPrlimit(t *testing.T) {
	if out, err := exec.Command(prlimitPath, "--version").Output(); err != nil || !strings.Contains(string(out), "util-linux") {
		t.Fatalf("these tests need util-linux prlimit at %s: %v %q", prlimitPath, err, out)
	}
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			dir := t.TempDir()
			record := filepath.Join(dir, "args")
			fake := filepath.Join(dir, "prlimit")
			script := "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > " + record + "\nexec " + prlimitPath + " \"$@\"\n"
			if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			res := runCmd(t, im.command("--prlimit", fake, "--rlimit", "nofile=77", "--rlimit", "cpu=99", "--", "sh", "-c", "ulimit -n; ulimit -t"))
			if res.code != 0 || res.stdout != "77\n99\n" {
				t.Fatalf("%s", res)
			}
			got, err := os.ReadFile(record)
			if im.setsLimitsItself {
				if err == nil {
					t.Fatalf("istota-init ran --prlimit with\n%s", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := fake + "\n--nofile=77\n--cpu=99\n--\nsh\n-c\nulimit -n; ulimit -t\n"; string(got) != want {
				t.Fatalf("prlimit was run with\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// TestSignalsAreForwarded sends each forwarded signal to the init and wants the
// command's trap to run, also when the init's parent left the signals ignored (as nohup
// does): an ignored signal stays ignored across execve and a shell cannot trap it.
func TestSignalsAreForwarded(t *testing.T) {
	signals := []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}
	for _, ignored := range []bool{false, true} {
		for _, sig := range signals {
			name := strings.ToUpper(strings.TrimPrefix(sigName(sig), "SIG"))
			if ignored {
				name += " ignored by the parent"
			}
			t.Run(name, func(t *testing.T) { testSignalForwarded(t, sig, ignored) })
		}
	}
}

func testSignalForwarded(t *testing.T, sig syscall.Signal, ignored bool) {
	name := sigName(sig)
	same(t, func(t *testing.T, im impl) result {
		cmd := im.command("--", "/bin/sh", "-c", `trap 'echo got; exit 7' `+name+`; echo ready; i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo no-signal`)
		if ignored {
			// The shell ignores every forwarded signal, then becomes the init.
			cmd.Args = append([]string{"/bin/sh", "-c", `trap '' TERM INT HUP QUIT USR1 USR2; exec "$0" "$@"`}, cmd.Args...)
			cmd.Path = "/bin/sh"
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(out)
		if line, _ := r.ReadString('\n'); line != "ready\n" {
			t.Fatalf("got %q", line)
		}
		cmd.Process.Signal(sig)
		rest, _ := io.ReadAll(r)
		err = cmd.Wait()
		res := result{stdout: string(rest), stderr: errb.String()}
		if ee, ok := err.(*exec.ExitError); ok {
			res.code = ee.ExitCode()
		}
		if res.code != 7 || res.stdout != "got\n" {
			t.Fatalf("%v to the init: %s, want exit 7 and got", sig, res)
		}
		return res
	})
}

// TestIgnoredSIGCHLD starts the init with SIGCHLD ignored, which makes the kernel reap
// children by itself: the init must still see its command end and pass on its status,
// so it puts SIGCHLD back to its default before starting the command.
func TestIgnoredSIGCHLD(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	res := same(t, func(t *testing.T, im impl) result {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		args := append([]string{ignoreChildCommand, im.path}, im.args...)
		cmd := exec.CommandContext(ctx, exe, append(args, "--", "/bin/sh", "-c", `echo started; exit 7`)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		res := result{stdout: out.String(), stderr: errb.String()}
		if ctx.Err() != nil {
			t.Fatalf("the %s init, started with SIGCHLD ignored, did not end after its command (stdout %q)", im.name, res.stdout)
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			res.code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return res
	})
	if res.code != 7 || res.stdout != "started\n" {
		t.Fatalf("%s, want exit 7 after started", res)
	}
}

func sigName(s syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGINT: "INT", syscall.SIGHUP: "HUP",
		syscall.SIGQUIT: "QUIT", syscall.SIGUSR1: "USR1", syscall.SIGUSR2: "USR2"}[s]
}

func TestDescriptorsDoNotReachTheCommand(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res := same(t, func(t *testing.T, im impl) result {
		cmd := im.command("--", "/bin/sh", "-c", `ls /proc/$$/fd`)
		// Inherited without close-on-exec, as bwrap may leave descriptors.
		cmd.ExtraFiles = []*os.File{f, f, f}
		return runCmd(t, cmd)
	})
	if res.code != 0 || res.stdout != "0\n1\n2\n" {
		t.Fatalf("%s, want only 0, 1 and 2 open in the command", res)
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// serveDigest is the Unix socket side of a forward: it reads each connection to its end
// (the client's half-close), then answers with the digest of what it read and n bytes of
// a pattern, and closes.
func serveDigest(t *testing.T, path string, n int) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				h := sha256.New()
				if _, err := io.Copy(h, c); err != nil {
					return
				}
				fmt.Fprintf(c, "%s\n", hex.EncodeToString(h.Sum(nil)))
				c.Write(pattern(n))
			}()
		}
	}()
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>9)
	}
	return b
}

// runHelper is the command in the bridge tests: "dial PORT CONNS SIZE ANSWER SETTLE"
// opens CONNS connections at once to 127.0.0.1:PORT, sends SIZE bytes on each,
// half-closes, and checks the answer (serveDigest's, ANSWER bytes); it prints one line
// per outcome and, last, how many more descriptors the init (its parent) holds than
// before, waiting up to SETTLE for that to be none.
func runHelper(args []string) int {
	if len(args) != 6 || args[0] != "dial" {
		fmt.Fprintln(os.Stderr, "usage: dial PORT CONNS SIZE ANSWER SETTLE")
		return 2
	}
	settle, err := time.ParseDuration(args[5])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	port, conns, size, answer := args[1], atoi(args[2]), atoi(args[3]), atoi(args[4])
	fds := func() int {
		entries, _ := os.ReadDir("/proc/" + strconv.Itoa(os.Getppid()) + "/fd")
		return len(entries)
	}
	before := fds()
	data := pattern(size)
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:]) + "\n" + string(pattern(answer))
	outcomes := make([]string, conns)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp4", "127.0.0.1:"+port)
			if err != nil {
				outcomes[i] = "dial: " + err.Error()
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Minute))
			var got []byte
			var rerr error
			done := make(chan struct{})
			go func() { got, rerr = io.ReadAll(c); close(done) }()
			_, werr := c.Write(data)
			c.(*net.TCPConn).CloseWrite()
			<-done
			switch {
			case len(got) == 0:
				// Closed at once, seen as an end or a reset depending on timing.
				outcomes[i] = "closed"
			case werr != nil || rerr != nil:
				outcomes[i] = fmt.Sprintf("error: %v %v", werr, rerr)
			case string(got) == want:
				outcomes[i] = "ok"
			default:
				outcomes[i] = fmt.Sprintf("wrong answer (%d bytes)", len(got))
			}
		}()
	}
	wg.Wait()
	// The init closes both sockets of a connection once both directions are over; give
	// it a moment to get there.
	after := fds()
	for deadline := time.Now().Add(settle); after > before && time.Now().Before(deadline); after = fds() {
		time.Sleep(10 * time.Millisecond)
	}
	counts := map[string]int{}
	for _, o := range outcomes {
		counts[o]++
	}
	for o, n := range counts {
		fmt.Printf("%d %s\n", n, o)
	}
	fmt.Printf("init descriptors: %+d\n", after-before)
	return 0
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// settle is how long the helper waits for the init to close every descriptor of the
// ended connections: not at all when it may keep some.
func settle(im impl) string {
	if im.poolsPipes {
		return "0s"
	}
	return "5s"
}

func TestForward(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name              string
		conns, size, back int
		noServer          bool
		out, err          string
	}{
		{"one small exchange", 1, 5, 3, false, "1 ok\n", ""},
		// More than a direction's buffer, both ways, and the answer only after the
		// request's end: the half-close must pass through.
		{"large, both ways", 2, 3 << 20, 5 << 20, false, "2 ok\n", ""},
		{"many at once", 40, 100 << 10, 10 << 10, false, "40 ok\n", ""},
		{"no server", 2, 10, 0, true, "2 closed\n", "istota-init: forward to SOCK: dial unix SOCK: connect: no such file or directory\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(dir, strconv.Itoa(freePort(t))+".sock")
			if !tc.noServer {
				serveDigest(t, sock, tc.back)
			}
			res := same(t, func(t *testing.T, im impl) result {
				port := strconv.Itoa(freePort(t))
				res := runCmd(t, im.command("--forward", port+"="+sock, "--", exe, helperCommand, "dial", port,
					strconv.Itoa(tc.conns), strconv.Itoa(tc.size), strconv.Itoa(tc.back), settle(im)))
				res.stderr = strings.ReplaceAll(res.stderr, sock, "SOCK")
				// The last line is how many descriptors the init gained; compared on
				// its own, since Go keeps some pooled.
				body, fds, _ := strings.Cut(res.stdout, "init descriptors: ")
				if fds != "+0\n" && !im.poolsPipes {
					t.Errorf("%s: the init holds %s more descriptors after every connection ended", im.name, strings.TrimSpace(fds))
				}
				res.stdout = body
				return res
			})
			wantErr := strings.Repeat(tc.err, tc.conns)
			if res.code != 0 || res.stdout != tc.out || res.stderr != wantErr {
				t.Fatalf("%s, want stdout %q stderr %q", res, tc.out, wantErr)
			}
		})
	}

	t.Run("port taken", func(t *testing.T) {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		res := same(t, func(t *testing.T, im impl) result {
			return runCmd(t, im.command("--forward", port+"=/s", "--", "/bin/echo", "ran"))
		})
		want := "istota-init: forward " + port + ": listen tcp4 127.0.0.1:" + port + ": bind: address already in use\n"
		if res.code != 126 || res.stdout != "" || res.stderr != want {
			t.Fatalf("%s, want 126 and %q", res, want)
		}
	})
}

// TestGoWithWriters covers what only the Go init has: output to writers that are not
// files, copied through pipes (the C init is a program; its output is always a file).
func TestGoWithWriters(t *testing.T) {
	var out, errb strings.Builder
	code := Run(testSelf, []string{"--", "/bin/sh", "-c", "echo out; echo err >&2; exit 5"}, nil, &out, &errb)
	if code != 5 || out.String() != "out\n" || errb.String() != "err\n" {
		t.Fatalf("exit %d stdout %q stderr %q", code, out.String(), errb.String())
	}
	// Without --prlimit the limits are set by a second start of this binary (--exec).
	out.Reset()
	errb.Reset()
	code = Run(testSelf, []string{"--rlimit", "nofile=77", "--", "/bin/sh", "-c", "ulimit -n"}, nil, &out, &errb)
	if code != 0 || out.String() != "77\n" {
		t.Fatalf("with a limit: exit %d stdout %q stderr %q", code, out.String(), errb.String())
	}
}

// TestInitIsStaticAndLibcOnly keeps istota-init what makes it fast to start: one static
// executable (no loader, no shared libraries) that includes nothing but libc and Linux
// headers, so nobody slows every task by linking a library.
func TestInitIsStaticAndLibcOnly(t *testing.T) {
	path, err := sandboxtest.BuildInit()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("istota-init has a %v program header: it is not static", p.Type)
		}
	}
	dir, err := sandboxtest.SourceDir()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(dir, "istota-init.c"))
	if err != nil {
		t.Fatal(err)
	}
	allowed := func(h string) bool {
		return strings.HasPrefix(h, "sys/") || strings.HasPrefix(h, "netinet/") || strings.HasPrefix(h, "linux/") ||
			strings.Count(h, "/") == 0
	}
	for _, line := range strings.Split(string(src), "\n") {
		if !strings.HasPrefix(line, "#include") {
			continue
		}
		h := strings.TrimSpace(strings.TrimPrefix(line, "#include"))
		if !strings.HasPrefix(h, "<") || !allowed(strings.Trim(h, "<>")) {
			t.Errorf("istota-init.c includes %s: only libc and Linux headers belong there", h)
		}
	}
}
