package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startSession starts a session for spec and closes it when the test ends.
func startSession(t *testing.T, r *Runner, spec Spec) *Session {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := r.StartSession(ctx, spec)
	if err != nil {
		cancel()
		t.Fatalf("StartSession: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		cancel()
	})
	return s
}

// inSession runs one command in s to its end.
func inSession(t *testing.T, s *Session, stdin string, env map[string]string, argv ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, err := s.Command(ctx, argv, env, strings.NewReader(stdin))
	if err != nil {
		t.Fatalf("Command: %v", err)
	}
	return runToEnd(t, cmd)
}

// startInSession starts argv in s and waits for its first line of output, which must
// be want; it returns the started cmd and the rest of its output.
func startInSession(t *testing.T, ctx context.Context, s *Session, want string, argv ...string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd, err := s.Command(ctx, argv, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(out)
	if line, _ := br.ReadString('\n'); line != want {
		t.Fatalf("first line %q, want %q", line, want)
	}
	return cmd, br
}

func TestSessionRunsCommandsLikeSingleRuns(t *testing.T) {
	e := newTestEnv(t)
	e.cfg.Limits = Limits{OpenFiles: 1000}
	r := e.runner(t)
	if !r.Sessions() {
		t.Fatal("a runner with istota-init does not offer sessions")
	}
	spec := e.userDirs(t, "alice")
	spec.Env = map[string]string{"ISTOTA_TASK_KIND": "talk"}
	spec.LLM = &LLMUpstream{BaseURL: "http://127.0.0.1:9", APIKey: "canary-key-" + randomHex(t, 16)}
	s := startSession(t, r, spec)

	t.Run("statuses, signals and leftovers", func(t *testing.T) {
		cases := append(slices.Clone(statusCases),
			statusCase{"limits", []string{"/bin/sh", "-c", "ulimit -n"}, 0, "1000\n"},
			statusCase{"leftovers that left the group end too", []string{"/bin/sh", "-c", `setsid sleep 601 & exit 0`}, 0, ""},
			statusCase{"nothing of the last commands is left", []string{"/bin/sh", "-c", `for p in /proc/[0-9]*; do [ "${p#/proc/}" = $$ ] || [ "${p#/proc/}" = 1 ] || cat $p/cmdline; done; echo checked`}, 0, "checked\n"})
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				res := inSession(t, s, "", nil, tc.argv...)
				if res.code != tc.code || (tc.out != "" && res.stdout != tc.out) {
					t.Fatalf("exit %d stdout %q stderr %q, want exit %d stdout %q", res.code, res.stdout, res.stderr, tc.code, tc.out)
				}
			})
		}
	})

	t.Run("the environment of a single run, plus the command's", func(t *testing.T) {
		res := inSession(t, s, "", map[string]string{"EXTRA": "1"}, "/usr/bin/env")
		mustSucceed(t, res)
		keys, env := parseEnv(res.stdout)
		want := []string{"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
			"DISABLE_TELEMETRY", "EXTRA", "HOME", "ISTOTA_TASK_KIND", "LANG", "LC_ALL", "PATH", "PWD", "TERM", "TZ"}
		if !slices.Equal(keys, want) {
			t.Fatalf("keys inside = %v\nwant %v", keys, want)
		}
		if env["PWD"] != WorkspaceDir || env["HOME"] != HomeDir || !strings.HasPrefix(env["ANTHROPIC_API_KEY"], "istota-task-") {
			t.Errorf("PWD/HOME/key = %q %q %q", env["PWD"], env["HOME"], env["ANTHROPIC_API_KEY"])
		}
		again := inSession(t, s, "", nil, "/bin/sh", "-c", `echo "$ANTHROPIC_API_KEY"; pwd`)
		if again.stdout != env["ANTHROPIC_API_KEY"]+"\n"+WorkspaceDir+"\n" {
			t.Errorf("second command: %q", again.stdout)
		}
		if strings.Contains(again.stdout, spec.LLM.APIKey) {
			t.Fatal("the real key reached the sandbox")
		}
	})

	t.Run("a command larger than a pipe holds", func(t *testing.T) {
		// Over a pipe's 64 KiB, so written to a file (dataPipe); each string stays under
		// the kernel's 128 KiB for one argument or variable.
		big := strings.Repeat("x", 100_000)
		res := inSession(t, s, "", map[string]string{"BIG": big, "BIG2": big}, "/bin/sh", "-c", `echo ${#BIG} ${#BIG2} "$1"`, "sh", big[:10])
		if res.stdout != "100000 100000 xxxxxxxxxx\n" {
			t.Fatalf("exit %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
		}
	})

	t.Run("standard streams and state between commands", func(t *testing.T) {
		res := inSession(t, s, "from stdin\n", nil, "/bin/sh", "-c", `cat > /tmp/kept; echo to-err >&2; cat /tmp/kept`)
		mustSucceed(t, res)
		if res.stdout != "from stdin\n" || res.stderr != "to-err\n" {
			t.Fatalf("stdout %q stderr %q", res.stdout, res.stderr)
		}
		res = inSession(t, s, "", nil, "cat", "/tmp/kept")
		if res.stdout != "from stdin\n" {
			t.Fatalf("/tmp did not persist: %q %q", res.stdout, res.stderr)
		}
	})

	t.Run("files written on the host after the start are the agent's", func(t *testing.T) {
		p := filepath.Join(spec.Workspace, "pulled.md")
		if err := os.WriteFile(p, []byte("pulled\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		res := inSession(t, s, "", nil, "/bin/sh", "-c", `cat /workspace/pulled.md && echo more >> /workspace/pulled.md`)
		mustSucceed(t, res)
		if uid, _ := fileOwner(t, p); uid != e.uid {
			t.Errorf("pulled file owned by %d, want %d", uid, e.uid)
		}
	})

	t.Run("the attach process on the host holds no secret", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cmd, _ := startInSession(t, ctx, s, "up\n", "/bin/sh", "-c", `echo up; sleep 60`)
		pid := strconv.Itoa(cmd.Process.Pid)
		environ, _ := os.ReadFile("/proc/" + pid + "/environ")
		cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		if len(cmdline) == 0 {
			t.Fatal("cannot read the attach process's command line")
		}
		for _, b := range [][]byte{environ, cmdline} {
			if bytes.Contains(b, []byte("istota-task-")) || bytes.Contains(b, []byte("ISTOTA_TASK_KIND")) {
				t.Fatalf("the attach process shows the command's environment: %q", b)
			}
		}
		cancel()
		cmd.Wait()
	})
}

func TestSessionCancelAndSignals(t *testing.T) {
	e := newTestEnv(t)
	r := e.runner(t)
	s := startSession(t, r, e.userDirs(t, "alice"))
	marker := "7" + strconv.Itoa(int(time.Now().UnixNano()%1e8)) + ".25"
	waitFor := func(want int) int { return waitForProcesses(marker, want) }

	t.Run("cancelling a command kills its tree, not the session", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cmd, _ := startInSession(t, ctx, s, "started\n", "/bin/sh", "-c", `sleep "$1" & (sleep "$1" & sleep "$1") & echo started; wait`, "sh", marker)
		if n := waitFor(3); n != 3 {
			t.Fatalf("%d marked processes before cancel, want 3", n)
		}
		cancel()
		if err := cmd.Wait(); err == nil {
			t.Error("Wait returned nil after cancel")
		}
		if n := waitFor(0); n != 0 {
			t.Fatalf("%d processes survived the cancel", n)
		}
		mustSucceed(t, inSession(t, s, "", nil, "true"))
	})

	t.Run("a signal to the command's process reaches the command", func(t *testing.T) {
		cmd, br := startInSession(t, context.Background(), s, "ready\n", "/bin/sh", "-c", `trap 'echo got-term; exit 5' TERM; echo ready; while :; do sleep 0.1; done`)
		cmd.Process.Signal(syscall.SIGTERM)
		line, _ := br.ReadString('\n')
		err := cmd.Wait()
		var ee *exec.ExitError
		if line != "got-term\n" || !errors.As(err, &ee) || ee.ExitCode() != 5 {
			t.Fatalf("line %q, wait %v", line, err)
		}
	})
}

func TestSessionEnds(t *testing.T) {
	e := newTestEnv(t)
	r := e.runner(t)
	marker := "7" + strconv.Itoa(int(time.Now().UnixNano()%1e8)) + ".75"

	t.Run("Close ends every process of the sandbox", func(t *testing.T) {
		s, err := r.StartSession(context.Background(), e.userDirs(t, "alice"))
		if err != nil {
			t.Fatal(err)
		}
		cmd, _ := startInSession(t, context.Background(), s, "started\n", "/bin/sh", "-c", `echo started; sleep "$1"`, "sh", marker)
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		select {
		case <-s.exited:
		default:
			t.Fatal("bwrap still runs after Close")
		}
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 128+9 {
			t.Errorf("a command of a closed session: %v, want exit 137", err)
		}
		if n := countProcesses(marker); n != 0 {
			t.Fatalf("%d processes survived Close", n)
		}
		if _, err := s.Command(context.Background(), []string{"true"}, nil, nil); err == nil {
			t.Error("Command after Close did not fail")
		}
	})

	t.Run("a sandbox that ended says so", func(t *testing.T) {
		s := startSession(t, r, e.userDirs(t, "bob"))
		mustSucceed(t, inSession(t, s, "", nil, "true"))
		syscall.Kill(-s.bwrap.Process.Pid, syscall.SIGKILL)
		<-s.exited
		if _, err := s.Command(context.Background(), []string{"true"}, nil, nil); err == nil || !strings.Contains(err.Error(), "the sandbox ended") {
			t.Fatalf("Command on an ended sandbox: %v", err)
		}
	})

	t.Run("a sandbox that cannot start says why", func(t *testing.T) {
		spec := e.userDirs(t, "carol")
		spec.Env = map[string]string{"PATH": "/x"}
		if _, err := r.StartSession(context.Background(), spec); err == nil || !strings.Contains(err.Error(), "PATH") {
			t.Fatalf("a reserved variable: %v", err)
		}
	})

	t.Run("the Go fallback init has no sessions", func(t *testing.T) {
		cfg := e.cfg
		cfg.InitPath = ""
		r, err := New(cfg, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if r.Sessions() {
			t.Fatal("Sessions() without istota-init")
		}
		if _, err := r.StartSession(context.Background(), e.userDirs(t, "dave")); err == nil {
			t.Fatal("StartSession without istota-init did not fail")
		}
	})
}
