package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/sandbox/sandboxinit"
	"github.com/istota/istota/sidecar/internal/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the istota binary inside the sandbox: its helpers, and
	// the fallback init when a test runs without istota-init.
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case InitCommand:
			os.Exit(RunInit(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
		case helperCommand:
			os.Exit(runHelper(os.Args[2:]))
		}
	}
	code := m.Run()
	sandboxtest.Cleanup()
	os.Exit(code)
}

// testEnv is one test's host side: a directory the agent uid can pass through, a copy
// of the test binary to act as istota, the real istota-init as built for shipping, and
// a Config pointing at them.
type testEnv struct {
	base     string
	self     string
	uid, gid uint32
	cfg      Config
}

func newTestEnv(t testing.TB) *testEnv {
	t.Helper()
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		t.Fatalf("these tests need bubblewrap at /usr/bin/bwrap: %v", err)
	}
	base := t.TempDir()
	// t.TempDir's parents are 0700; bwrap, running as the agent uid, must pass through.
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(base, "istota")
	if err := os.Link(exe, self); err != nil {
		copyFile(t, exe, self)
	}
	e := &testEnv{base: base, self: self}
	e.cfg = Config{SelfPath: self, InitPath: sandboxtest.Init(t, base), SocketDir: filepath.Join(base, "sockets")}
	if os.Geteuid() == 0 {
		e.uid, e.gid = 65534, 65534
		e.cfg.AgentUID, e.cfg.AgentGID = 65534, 65534
	} else {
		e.uid, e.gid = uint32(os.Geteuid()), uint32(os.Getegid())
	}
	return e
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (e *testEnv) runner(t testing.TB) *Runner {
	t.Helper()
	r, err := New(e.cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// userDirs creates a user's workspace, home and task tmp as root-owned 0700 directories,
// the way the sidecar would; Prepare hands them to the agent uid.
func (e *testEnv) userDirs(t testing.TB, user string) Spec {
	t.Helper()
	root := filepath.Join(e.base, "users", user)
	if err := os.MkdirAll(filepath.Join(e.base, "users"), 0o711); err != nil {
		t.Fatal(err)
	}
	spec := Spec{TaskID: 1, UserID: user}
	spec.Workspace = filepath.Join(root, "workspace")
	spec.Home = filepath.Join(root, "home")
	spec.Tmp = filepath.Join(root, "tmp")
	if err := os.Mkdir(root, 0o711); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{spec.Workspace, spec.Home, spec.Tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return spec
}

type result struct {
	stdout, stderr string
	code           int
}

// run prepares spec, runs it to the end and closes the Run.
func run(t testing.TB, r *Runner, spec Spec) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rn, err := r.Prepare(ctx, spec)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	res := runToEnd(t, rn.Cmd)
	if cerr := rn.Close(); cerr != nil {
		t.Errorf("Close: %v", cerr)
	}
	return res
}

// runToEnd runs cmd and returns its output and exit status; it fails the test when cmd
// did not run at all.
func runToEnd(t testing.TB, cmd *exec.Cmd) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run: %v (stderr %q)", err, res.stderr)
	}
	return res
}

// sh runs a shell script in the sandbox.
func sh(t testing.TB, r *Runner, spec Spec, script string) result {
	t.Helper()
	spec.Argv = []string{"/bin/sh", "-c", script}
	return run(t, r, spec)
}

func mustSucceed(t testing.TB, res result) {
	t.Helper()
	if res.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func fileOwner(t testing.TB, p string) (uint32, uint32) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

func TestIdentityAndOwnership(t *testing.T) {
	e := newTestEnv(t)
	r := e.runner(t)
	spec := e.userDirs(t, "alice")
	// A file the sidecar (root) wrote into the workspace becomes the agent's.
	synced := filepath.Join(spec.Workspace, "synced.md")
	if err := os.WriteFile(synced, []byte("from nextcloud"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := sh(t, r, spec, `id -u; id -g; id -G; echo hi > /workspace/made-inside; echo more >> /workspace/synced.md; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status`)
	mustSucceed(t, res)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	want := fmt.Sprint(e.uid)
	if lines[0] != want || lines[1] != fmt.Sprint(e.gid) || lines[2] != fmt.Sprint(e.gid) {
		t.Errorf("uid/gid/groups inside = %q, want %s/%d/%d", lines[:3], want, e.gid, e.gid)
	}
	for _, l := range lines[3:] {
		name, val, _ := strings.Cut(l, ":")
		val = strings.TrimSpace(val)
		switch name {
		case "NoNewPrivs":
			if val != "1" {
				t.Errorf("NoNewPrivs = %s, want 1", val)
			}
		default:
			if strings.Trim(val, "0") != "" {
				t.Errorf("%s = %s, want no capabilities", name, val)
			}
		}
	}
	for _, p := range []string{filepath.Join(spec.Workspace, "made-inside"), synced} {
		if uid, gid := fileOwner(t, p); uid != e.uid || gid != e.gid {
			t.Errorf("%s owned by %d:%d on the host, want %d:%d", p, uid, gid, e.uid, e.gid)
		}
	}
	if b, _ := os.ReadFile(synced); string(b) != "from nextcloudmore\n" {
		t.Errorf("synced file = %q", b)
	}

	// bwrap's --new-session: the sandbox is its own session, led by its pid 1, so it has
	// no controlling terminal to inject input into (TIOCSTI, CVE-2017-5226).
	res = sh(t, r, spec, `cut -d' ' -f6 /proc/1/stat; cut -d' ' -f6 /proc/self/stat`)
	if res.stdout != "1\n1\n" {
		t.Errorf("session ids of pid 1 and the command = %q, want 1 and 1", res.stdout)
	}

	// Privileged operations fail; there is no controlling terminal to inject into.
	for _, cmd := range []string{
		"mknod /tmp/null c 1 3",
		"mount -t tmpfs none /tmp",
		"unshare -U true",
		": < /dev/tty",
		"chown 0 /workspace/made-inside",
	} {
		t.Run(cmd, func(t *testing.T) {
			res := sh(t, r, spec, cmd+" 2>/dev/null && echo succeeded")
			if strings.Contains(res.stdout, "succeeded") {
				t.Fatalf("%q succeeded inside the sandbox", cmd)
			}
		})
	}
}

func TestRefusesRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root sidecar can be asked to run sandboxes as root")
	}
	e := newTestEnv(t)
	for _, tc := range []struct {
		name     string
		uid, gid uint32
	}{
		{"uid 0", 0, 65534},
		{"gid 0", 65534, 0},
		{"unset", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.cfg
			cfg.AgentUID, cfg.AgentGID = tc.uid, tc.gid
			_, err := New(cfg, nil)
			if err == nil || !strings.Contains(err.Error(), "root") && !strings.Contains(err.Error(), "gid 0") {
				t.Fatalf("New = %v, want a refusal", err)
			}
			if err := Probe(context.Background(), cfg); err == nil {
				t.Fatal("Probe accepted running as root")
			}
		})
	}
}

func TestEnvironmentHoldsNoSecret(t *testing.T) {
	e := newTestEnv(t)
	r := e.runner(t)
	envCanary := "canary-env-" + randomHex(t, 16)
	keyCanary := "canary-key-" + randomHex(t, 16)
	t.Setenv("ISTOTA_SECRET_CANARY", envCanary)
	t.Setenv("ANTHROPIC_API_KEY", envCanary)

	spec := e.userDirs(t, "alice")
	spec.Env = map[string]string{"ISTOTA_TASK_KIND": "talk"}
	spec.LLM = &LLMUpstream{BaseURL: "http://127.0.0.1:9", APIKey: keyCanary}

	t.Run("exact keys", func(t *testing.T) {
		spec := spec
		spec.Argv = []string{"/usr/bin/env"}
		res := run(t, r, spec)
		mustSucceed(t, res)
		keys, env := parseEnv(res.stdout)
		want := []string{"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
			"DISABLE_TELEMETRY", "HOME", "ISTOTA_TASK_KIND", "LANG", "LC_ALL", "PATH", "PWD", "TERM", "TZ"}
		if !slices.Equal(keys, want) {
			t.Fatalf("keys inside = %v\nwant %v", keys, want)
		}
		if env["ANTHROPIC_BASE_URL"] != "http://127.0.0.1:8080" || !strings.HasPrefix(env["ANTHROPIC_API_KEY"], "istota-task-") {
			t.Errorf("LLM env = %q %q", env["ANTHROPIC_BASE_URL"], env["ANTHROPIC_API_KEY"])
		}
		if env["HOME"] != HomeDir || env["TERM"] != "dumb" || env["PWD"] != WorkspaceDir {
			t.Errorf("HOME/TERM/PWD = %q %q %q", env["HOME"], env["TERM"], env["PWD"])
		}
	})

	t.Run("nowhere inside", func(t *testing.T) {
		// Everything a process inside can read that could carry it: every process's
		// environment and command line (pid 1 is the init, not bwrap), and every file
		// outside /usr. The needles stay on the host side.
		script := `for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null; echo; done
find /etc /home /tmp /workspace /run /opt /dev/shm -xdev -type f -readable -exec cat {} + 2>/dev/null
ls -laR /run /home /tmp /workspace /opt 2>/dev/null
cat /proc/1/cmdline | tr '\0' ' '`
		res := sh(t, r, spec, script)
		mustSucceed(t, res)
		for _, needle := range []string{envCanary, keyCanary} {
			if strings.Contains(res.stdout, needle) || strings.Contains(res.stderr, needle) {
				t.Fatalf("secret %s found inside the sandbox", needle[:11])
			}
		}
		if !strings.Contains(res.stdout, InitBinary+" --protocol=1 --forward 8080=/run/istota/llm.sock") {
			t.Errorf("pid 1 is not the init: %q", lastLine(res.stdout))
		}
		if !strings.Contains(res.stdout, "istota-task-") {
			t.Error("the scan did not see the task token, so it did not read the environments")
		}
	})
}

func TestSpecValidation(t *testing.T) {
	e := newTestEnv(t)
	r := e.runner(t)
	base := e.userDirs(t, "alice")
	base.Argv = []string{"true"}
	key := "sk-real-" + randomHex(t, 8)
	link := filepath.Join(e.base, "users", "ws-link")
	if err := os.Symlink(base.Workspace, link); err != nil {
		t.Fatal(err)
	}
	through := filepath.Join(e.base, "users", "alice-link")
	if err := os.Symlink(filepath.Join(e.base, "users", "alice"), through); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(e.base, "users", "alice", "plain-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Spec)
		want   string
	}{
		{"symlinked workspace", func(s *Spec) { s.Workspace = link }, "symbolic link"},
		{"workspace through symlinked parent", func(s *Spec) { s.Workspace = filepath.Join(through, "workspace") }, "symbolic link"},
		{"symlinked home", func(s *Spec) { s.Home = link }, "symbolic link"},
		{"symlinked mount", func(s *Spec) { s.ExtraMounts = []Mount{{Source: link, Dest: "/channel"}} }, "symbolic link"},
		{"workspace is a file", func(s *Spec) { s.Workspace = file }, "not a directory"},
		{"missing tmp", func(s *Spec) { s.Tmp = filepath.Join(e.base, "nope") }, "no such file"},
		{"relative workspace", func(s *Spec) { s.Workspace = "users/alice" }, "not an absolute path"},
		{"reserved env", func(s *Spec) { s.Env = map[string]string{"ANTHROPIC_API_KEY": "x"} }, "set by the sandbox"},
		{"bad env key", func(s *Spec) { s.Env = map[string]string{"A=B": "x"} }, "not a valid name"},
		{"NUL in argv", func(s *Spec) { s.Argv = []string{"echo", "a\x00--bind"} }, "NUL"},
		{"real key in argv", func(s *Spec) {
			s.LLM = &LLMUpstream{BaseURL: "https://api.example", APIKey: key}
			s.Argv = []string{"echo", "key " + key}
		}, "API key"},
		{"real key in env", func(s *Spec) {
			s.LLM = &LLMUpstream{BaseURL: "https://api.example", APIKey: key}
			s.Env = map[string]string{"X": key}
		}, "API key"},
		{"bad upstream", func(s *Spec) { s.LLM = &LLMUpstream{BaseURL: "ftp://x", APIKey: key} }, "http(s)"},
		{"mount over /usr", func(s *Spec) { s.ExtraMounts = []Mount{{Source: base.Tmp, Dest: "/usr/local"}} }, "overlaps"},
		{"mount over /opt", func(s *Spec) { s.ExtraMounts = []Mount{{Source: base.Tmp, Dest: "/opt"}} }, "overlaps"},
		{"service port clash", func(s *Spec) {
			s.LLM = &LLMUpstream{BaseURL: "https://api.example", APIKey: key}
			s.Services = []Service{{Name: "proxy", Port: LLMPort, Serve: serveEcho}}
		}, "port"},
		{"service name", func(s *Spec) { s.Services = []Service{{Name: "../x", Serve: serveEcho}} }, "service name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := base
			tc.mutate(&spec)
			rn, err := r.Prepare(context.Background(), spec)
			if err == nil {
				rn.Close()
				t.Fatal("Prepare accepted the spec")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
			if strings.Contains(err.Error(), key) {
				t.Fatal("the error message contains the API key")
			}
		})
	}
	entries, err := os.ReadDir(r.cfg.SocketDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("failed Prepares left %d task directories", len(entries))
	}
}

func TestFilesystemIsolation(t *testing.T) {
	e := newTestEnv(t)
	r := e.runner(t)
	alice := e.userDirs(t, "alice")
	bob := e.userDirs(t, "bob")
	if err := os.WriteFile(filepath.Join(bob.Workspace, "bob-secret.txt"), []byte("bob"), 0o644); err != nil {
		t.Fatal(err)
	}
	marker, err := os.CreateTemp("", "istota-host-marker-")
	if err != nil {
		t.Fatal(err)
	}
	marker.Close()
	t.Cleanup(func() { os.Remove(marker.Name()) })
	channel := filepath.Join(e.base, "channel")
	if err := os.Mkdir(channel, 0o700); err != nil {
		t.Fatal(err)
	}
	alice.ExtraMounts = []Mount{{Source: channel, Dest: "/channel", Writable: true}}

	t.Run("invisible", func(t *testing.T) {
		for _, p := range []string{bob.Workspace, bob.Home, e.base, marker.Name(), "/tmp/" + filepath.Base(marker.Name()),
			"/etc/shadow", "/root", "/var/lib", "/sys/class", "/home/bob", "/work", e.cfg.SocketDir} {
			spec := alice
			spec.Argv = []string{"/bin/sh", "-c", `if test -e "$1"; then echo visible; fi`, "sh", p}
			res := run(t, r, spec)
			if strings.Contains(res.stdout, "visible") {
				t.Errorf("%s is visible inside", p)
			}
		}
		res := sh(t, r, alice, `ls -A /home; ls -A /run; ls -A /`)
		mustSucceed(t, res)
		got := strings.Fields(res.stdout)
		want := []string{"agent", "bin", "channel", "dev", "etc", "home", "lib", "lib64", "opt", "proc", "sbin", "tmp", "usr", "var", "workspace"}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("%q missing from the sandbox's /home, /run and /: %v", w, got)
			}
		}
		for _, g := range got {
			if !slices.Contains(want, g) && g != "lib32" && g != "libx32" {
				t.Errorf("unexpected entry %q in the sandbox's /home, /run or /", g)
			}
		}

		// /etc holds the generated passwd, group and hosts and the allowlisted host
		// entries that exist here, nothing else of the host's /etc.
		res = sh(t, r, alice, `ls -A /etc`)
		mustSucceed(t, res)
		wantEtc := []string{"group", "hosts", "passwd"}
		for _, f := range etcFiles {
			if _, err := os.Lstat(f); err == nil {
				wantEtc = append(wantEtc, filepath.Base(f))
			}
		}
		slices.Sort(wantEtc)
		gotEtc := strings.Fields(res.stdout)
		slices.Sort(gotEtc)
		if !slices.Equal(gotEtc, wantEtc) {
			t.Errorf("the sandbox's /etc holds %v, want %v", gotEtc, wantEtc)
		}
	})

	t.Run("writes outside the allowed paths fail", func(t *testing.T) {
		for _, p := range []string{"/x", "/usr/x", "/etc/x", "/etc/passwd", "/opt/istota/x", SelfBinary, "/home/x", "/run/istota/x", "/var/tmp/../x", "/proc/x"} {
			spec := alice
			spec.Argv = []string{"/bin/sh", "-c", `echo x > "$1" 2>/dev/null && echo written`, "sh", p}
			res := run(t, r, spec)
			if strings.Contains(res.stdout, "written") {
				t.Errorf("wrote %s inside the sandbox", p)
			}
		}
	})

	t.Run("allowed writes land on the host", func(t *testing.T) {
		res := sh(t, r, alice, `echo w > /workspace/w && echo h > /home/agent/h && echo t > /tmp/t && echo v > /var/tmp/v && echo c > /channel/c && echo n > /dev/null && ls /dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty >/dev/null`)
		mustSucceed(t, res)
		for _, p := range []string{filepath.Join(alice.Workspace, "w"), filepath.Join(alice.Home, "h"), filepath.Join(alice.Tmp, "t"), filepath.Join(alice.Tmp, "v"), filepath.Join(channel, "c")} {
			if uid, _ := fileOwner(t, p); uid != e.uid {
				t.Errorf("%s owned by %d, want %d", p, uid, e.uid)
			}
		}
	})

	t.Run("symlink escape", func(t *testing.T) {
		target := filepath.Join(e.base, "escape-target")
		spec := alice
		spec.Argv = []string{"/bin/sh", "-c", `ln -s "$1" /workspace/esc; mkdir -p /workspace/esc 2>/dev/null; echo x > /workspace/esc/file 2>/dev/null; ln -s /etc/hostname /workspace/hn; echo x > /workspace/hn 2>/dev/null; ln /etc/passwd /workspace/hard 2>/dev/null && echo hardlinked; true`, "sh", target}
		res := run(t, r, spec)
		mustSucceed(t, res)
		if _, err := os.Lstat(target); err == nil {
			t.Error("a symlink inside the workspace created a file on the host")
		}
		if strings.Contains(res.stdout, "hardlinked") {
			t.Error("hard link to /etc/passwd succeeded")
		}
		// The symlink the agent left must not redirect the next task's bind.
		if err := os.Remove(alice.Workspace + "/hn"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("two tasks at once", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		bobSpec := bob
		bobSpec.TaskID = 2
		bobSpec.Argv = []string{"/bin/sh", "-c", `echo bob-tmp > /tmp/bob-live; echo ready; exec sleep 60`}
		rn, err := r.Prepare(ctx, bobSpec)
		if err != nil {
			t.Fatal(err)
		}
		defer rn.Close()
		out, err := rn.Cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := rn.Cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			cancel()
			rn.Cmd.Wait()
		}()
		line, _ := bufio.NewReader(out).ReadString('\n')
		if line != "ready\n" {
			t.Fatalf("bob's task said %q", line)
		}
		res := sh(t, r, alice, `ls /tmp /workspace /run/istota 2>&1; ps -e 2>/dev/null || ls /proc`)
		for _, leak := range []string{"bob-live", "bob-secret", "sleep"} {
			if strings.Contains(res.stdout, leak) {
				t.Errorf("alice's task sees %q of bob's task:\n%s", leak, res.stdout)
			}
		}
	})
}

func TestNetworkIsolation(t *testing.T) {
	e := newTestEnv(t)
	r := e.runner(t)
	spec := e.userDirs(t, "alice")

	hostSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer hostSrv.Close()
	hostAddr := hostSrv.Listener.Addr().String()
	if c, err := net.Dial("tcp", hostAddr); err != nil {
		t.Fatalf("control: the host service is not reachable from the host: %v", err)
	} else {
		c.Close()
	}
	abstract := "@istota-test-" + randomHex(t, 6)
	aln, err := net.Listen("unix", abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer aln.Close()
	pathSock := filepath.Join(e.base, "host.sock")
	pln, err := net.Listen("unix", pathSock)
	if err != nil {
		t.Fatal(err)
	}
	defer pln.Close()

	res := sh(t, r, spec, `cat /proc/net/dev`)
	mustSucceed(t, res)
	var ifaces []string
	for _, l := range strings.Split(res.stdout, "\n") {
		if name, _, ok := strings.Cut(l, ":"); ok && !strings.Contains(name, "|") {
			ifaces = append(ifaces, strings.TrimSpace(name))
		}
	}
	if !slices.Equal(ifaces, []string{"lo"}) {
		t.Errorf("interfaces inside = %v, want only lo", ifaces)
	}

	for _, tc := range []struct{ network, addr string }{
		{"tcp", hostAddr},
		{"tcp", "1.1.1.1:443"},
		{"tcp", "192.0.2.1:80"},
		{"unix", abstract},
		{"unix", pathSock},
	} {
		t.Run(tc.network+" "+tc.addr, func(t *testing.T) {
			s := spec
			s.Argv = []string{SelfBinary, helperCommand, "dial", tc.network, tc.addr}
			res := run(t, r, s)
			if res.code == 0 || !strings.Contains(res.stdout, "error:") {
				t.Fatalf("reached %s %s from inside: %q %q", tc.network, tc.addr, res.stdout, res.stderr)
			}
		})
	}
	t.Run("no DNS", func(t *testing.T) {
		res := sh(t, r, spec, `getent ahosts example.com && echo resolved; getent hosts localhost`)
		if strings.Contains(res.stdout, "resolved") {
			t.Error("example.com resolved inside")
		}
		if !strings.Contains(res.stdout, "127.0.0.1") && !strings.Contains(res.stdout, "::1") {
			t.Errorf("localhost does not resolve inside: %q", res.stdout)
		}
	})
}

func TestPIDNamespace(t *testing.T) {
	e := newTestEnv(t)
	r := e.runner(t)
	spec := e.userDirs(t, "alice")
	spec.Argv = []string{"/bin/sh", "-c", `ls /proc | grep -c '^[0-9]'; for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done`, "sh", strconv.Itoa(os.Getpid())}
	res := run(t, r, spec)
	mustSucceed(t, res)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	n, err := strconv.Atoi(lines[0])
	if err != nil || n > 5 {
		t.Fatalf("%s processes visible inside, want at most 5:\n%s", lines[0], res.stdout)
	}
	for _, l := range lines[1:] {
		if strings.Contains(l, "bwrap") || strings.Contains(l, ".test") {
			t.Errorf("a host process is visible inside: %q", l)
		}
	}
}

func TestDescriptorsDoNotLeak(t *testing.T) {
	e := newTestEnv(t)
	spec := e.userDirs(t, "alice")
	spec.LLM = &LLMUpstream{BaseURL: "http://127.0.0.1:9", APIKey: "sk-" + randomHex(t, 16)}
	for _, ic := range initCases {
		t.Run(ic.name, func(t *testing.T) {
			r := initRunner(t, e, Limits{OpenFiles: 100}, ic)
			res := sh(t, r, spec, `for p in self 1; do for f in /proc/$p/fd/*; do echo "$p $f $(readlink $f)"; done; done`)
			mustSucceed(t, res)
			checkDescriptors(t, e, res)
		})
	}
}

// checkDescriptors fails for a descriptor of the command or the init (listed as "pid
// path target") that is neither standard, a socket, pipe or anonymous inode, nor a path
// of the host.
func checkDescriptors(t *testing.T, e *testEnv, res result) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		fd, target := filepath.Base(f[1]), f[2]
		n, _ := strconv.Atoi(fd)
		ok := n <= 2 || strings.HasPrefix(target, "socket:") || strings.HasPrefix(target, "anon_inode:") ||
			strings.HasPrefix(target, "pipe:") || target == "/dev/null" || strings.HasPrefix(target, "/proc/")
		if !ok || strings.Contains(target, e.base) {
			t.Errorf("descriptor leaked into the sandbox: %s", l)
		}
	}
}

func TestExitStatusAndSignals(t *testing.T) {
	e := newTestEnv(t)
	spec := e.userDirs(t, "alice")
	for _, ic := range initCases {
		t.Run(ic.name, func(t *testing.T) {
			testExitStatusAndSignals(t, initRunner(t, e, Limits{OpenFiles: 1000}, ic), spec)
		})
	}
}

// statusCase is a command and the exit status and output it must give in a sandbox.
type statusCase struct {
	name string
	argv []string
	code int
	out  string
}

// statusCases hold for a command in a sandbox of its own and in a session alike.
var statusCases = []statusCase{
	{"exit code", []string{"/bin/sh", "-c", "exit 3"}, 3, ""},
	{"killed by a signal", []string{"/bin/sh", "-c", "kill -KILL $$"}, 128 + 9, ""},
	{"not found", []string{"no-such-command-xyz"}, 127, ""},
	{"path not found", []string{"/no/such/command"}, 127, ""},
	{"PATH lookup", []string{"echo", "found"}, 0, "found\n"},
	{"signal to pid 1 is forwarded", []string{"/bin/sh", "-c", `trap 'echo got-term; exit 7' TERM; kill -TERM 1; i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo no-signal`}, 7, "got-term\n"},
	{"background processes end with the command", []string{"/bin/sh", "-c", `sleep 600 & echo $! > /tmp/bg; exit 0`}, 0, ""},
	// Orphans are the init's to reap: none may stay a zombie.
	{"orphans are reaped", []string{"/bin/sh", "-c", `for i in 1 2 3 4 5; do (sleep 0.1 &); done; sleep 1; grep -l '^State:.*zombie' /proc/[0-9]*/status; echo zombies-listed`}, 0, "zombies-listed\n"},
}

func testExitStatusAndSignals(t *testing.T, r *Runner, spec Spec) {
	for _, tc := range statusCases {
		t.Run(tc.name, func(t *testing.T) {
			s := spec
			s.Argv = tc.argv
			res := run(t, r, s)
			if res.code != tc.code || (tc.out != "" && res.stdout != tc.out) {
				t.Fatalf("exit %d stdout %q stderr %q, want exit %d stdout %q", res.code, res.stdout, res.stderr, tc.code, tc.out)
			}
		})
	}
}

func TestCancelKillsTree(t *testing.T) {
	e := newTestEnv(t)
	r := e.runner(t)
	spec := e.userDirs(t, "alice")
	marker := "7" + strconv.Itoa(int(time.Now().UnixNano()%1e8)) + ".5"
	spec.Argv = []string{"/bin/sh", "-c", `sleep "$1" & (sleep "$1" & sleep "$1") & echo started; wait`, "sh", marker}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rn, err := r.Prepare(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer rn.Close()
	out, err := rn.Cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := rn.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "started\n" {
		t.Fatalf("got %q", line)
	}
	waitFor := func(want int) int { return waitForProcesses(marker, want) }
	if n := waitFor(3); n != 3 {
		t.Fatalf("%d marked processes before cancel, want 3", n)
	}
	cancel()
	if err := rn.Cmd.Wait(); err == nil {
		t.Error("Wait returned nil after cancel")
	}
	if n := waitFor(0); n != 0 {
		t.Fatalf("%d sandboxed processes survived the cancel", n)
	}
}

// waitForProcesses waits up to 30 s for countProcesses(marker) to be want and returns
// the last count.
func waitForProcesses(marker string, want int) int {
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := countProcesses(marker)
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// countProcesses counts host processes whose command line contains marker.
func countProcesses(marker string) int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(marker)) && bytes.HasPrefix(b, []byte("sleep")) {
			n++
		}
	}
	return n
}

// serveEcho is a Service that answers every line with "echo: line".
func serveEcho(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			stop := context.AfterFunc(ctx, func() { c.Close() })
			defer stop()
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				fmt.Fprintf(c, "echo: %s\n", sc.Text())
			}
		}()
	}
}

func TestServices(t *testing.T) {
	e := newTestEnv(t)
	spec := e.userDirs(t, "alice")
	spec.Services = []Service{{Name: "proxy", Port: 3128, Serve: serveEcho}, {Name: "cred", Serve: serveEcho}}
	for _, ic := range initCases {
		t.Run(ic.name, func(t *testing.T) {
			r := initRunner(t, e, Limits{OpenFiles: 100}, ic)
			for _, tc := range []struct{ network, addr string }{
				{"tcp", "127.0.0.1:3128"},
				{"unix", "/run/istota/proxy.sock"},
				{"unix", "/run/istota/cred.sock"},
			} {
				t.Run(tc.addr, func(t *testing.T) {
					s := spec
					s.Argv = []string{SelfBinary, helperCommand, "echo", tc.network, tc.addr}
					res := run(t, r, s)
					if res.stdout != "answer=echo: ping\n" {
						t.Fatalf("got %q (stderr %q)", res.stdout, res.stderr)
					}
				})
			}
			// The task's socket directory is there read-only, with its sockets only: the
			// agent can neither remove nor replace one, nor leave a file for the host.
			s := spec
			s.Argv = []string{"/bin/sh", "-c", `ls -A /run/istota; rm -f /run/istota/proxy.sock && echo removed; ` +
				`touch /run/istota/x && echo created; mv /run/istota/cred.sock /run/istota/c && echo moved; test -S /run/istota/proxy.sock && echo intact`}
			res := run(t, r, s)
			if res.stdout != "cred.sock\nproxy.sock\nintact\n" {
				t.Errorf("inside /run/istota: %q (stderr %q)", res.stdout, res.stderr)
			}
			entries, _ := os.ReadDir(r.cfg.SocketDir)
			if len(entries) != 0 {
				t.Errorf("Close left %d entries in the socket directory", len(entries))
			}
		})
	}
}

func TestUnsandboxedMode(t *testing.T) {
	e := newTestEnv(t)
	var calls []string
	var mu sync.Mutex
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		calls = append(calls, req.Header.Get("X-Api-Key"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage":{"input_tokens":5,"output_tokens":6}}`+"\n")
	}))
	defer up.Close()
	cfg := e.cfg
	cfg.Unsandboxed = true
	cfg.BwrapPath = "/nonexistent/bwrap"
	r, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	t.Setenv("ISTOTA_SECRET_CANARY", "canary-"+randomHex(t, 8))
	spec := e.userDirs(t, "alice")
	spec.LLM = &LLMUpstream{BaseURL: up.URL, APIKey: "sk-real"}
	spec.Argv = []string{"/bin/sh", "-c", `id -u; pwd; env | grep -c CANARY; "$1" ` + helperCommand + ` llm ok`, "sh", e.self}
	res := run(t, r, spec)
	lines := strings.Split(res.stdout, "\n")
	if len(lines) < 4 || lines[0] != fmt.Sprint(e.uid) || lines[1] != spec.Workspace || lines[2] != "0" || lines[3] != "status=200" {
		t.Fatalf("unsandboxed run printed %q (stderr %q)", res.stdout, res.stderr)
	}
	if len(calls) != 1 || calls[0] != "sk-real" {
		t.Errorf("upstream saw keys %q", calls)
	}
	// Without the sandbox there is no tmpfs to stand for a missing workspace.
	spec.Workspace, spec.LLM = "", nil
	if rn, err := r.Prepare(context.Background(), spec); err == nil || !strings.Contains(err.Error(), "workspace is required") {
		if rn != nil {
			rn.Close()
		}
		t.Errorf("an unsandboxed run without a workspace: %v", err)
	}
}

// TestNoWorkspace: a run without a workspace (a page rendered for the browse skill)
// gets an empty, writable tmpfs at /workspace and no user's files.
func TestNoWorkspace(t *testing.T) {
	e := newTestEnv(t)
	r := e.runner(t)
	spec := Spec{TaskID: 3, UserID: "alice"}
	res := sh(t, r, spec, `ls -A /workspace | wc -l; echo x > /workspace/f && cat /workspace/f; pwd; stat -f -c %T /workspace`)
	mustSucceed(t, res)
	if res.stdout != "0\nx\n/workspace\ntmpfs\n" {
		t.Errorf("got %q", res.stdout)
	}
}

func TestProbe(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	if err := Probe(ctx, e.cfg); err != nil {
		t.Fatalf("Probe on a working setup: %v", err)
	}
	if entries, _ := os.ReadDir(e.cfg.SocketDir); len(entries) != 0 {
		t.Errorf("Probe left %d entries in the socket directory", len(entries))
	}
	t.Run("bogus bwrap", func(t *testing.T) {
		cfg := e.cfg
		cfg.BwrapPath = "/nonexistent/bwrap"
		err := Probe(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), "/nonexistent/bwrap") || !strings.Contains(err.Error(), "install bubblewrap") {
			t.Fatalf("Probe = %v", err)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("error is not one line: %q", err)
		}
	})
	t.Run("binary that is not istota", func(t *testing.T) {
		cfg := e.cfg
		cfg.SelfPath, cfg.InitPath = "/usr/bin/false", ""
		err := Probe(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), InitCommand) {
			t.Fatalf("Probe = %v", err)
		}
	})
	t.Run("init that is not istota-init", func(t *testing.T) {
		cfg := e.cfg
		cfg.InitPath = "/usr/bin/false"
		err := Probe(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), InitFile+" must be the one built with this istota") {
			t.Fatalf("Probe = %v", err)
		}
	})
	t.Run("init of another protocol version", func(t *testing.T) {
		// The real istota-init, asked for a version it does not speak, as it would be by
		// a newer sidecar left with an older init.
		r := e.runner(t)
		r.protocol = sandboxinit.Protocol + 1
		err := r.probe(ctx)
		if err == nil || !strings.Contains(err.Error(), "from another istota version") || !strings.Contains(err.Error(), sandboxinit.MismatchMessage) {
			t.Fatalf("probe = %v", err)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("error is not one line: %q", err)
		}
	})
	t.Run("unreachable socket directory", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs a root sidecar")
		}
		locked := filepath.Join(e.base, "locked")
		if err := os.Mkdir(locked, 0o700); err != nil {
			t.Fatal(err)
		}
		cfg := e.cfg
		cfg.SocketDir = filepath.Join(locked, "sockets")
		err := Probe(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), "o+x") {
			t.Fatalf("Probe = %v", err)
		}
	})
}

func TestClassifyProbe(t *testing.T) {
	sysctls := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		stderr string
		sysctl map[string]string
		want   string
	}{
		{"bwrap: setting up uid map: Permission denied", nil, "AppArmor"},
		{"bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted", nil, "AppArmor"},
		{"bwrap: No permission to create new namespace, likely because the kernel does not allow non-privileged user namespaces.", map[string]string{"kernel/unprivileged_userns_clone": "0"}, "unprivileged_userns_clone=1"},
		{"bwrap: Creating new namespace failed: No space left on device", map[string]string{"user/max_user_namespaces": "0"}, "max_user_namespaces"},
		{"bwrap: Creating new namespace failed: Operation not permitted", nil, "not available"},
		{"bwrap: Unknown option --bind-fd", nil, "too old"},
		{"bwrap: Can't find source path /proc/self/fd/5: Permission denied", nil, "o+x"},
		{"bwrap: execvp /opt/istota/bin/istota: No such file", nil, "bwrap failed"},
		{"usage: istota <command>", nil, InitCommand},
		{"istota-init: " + sandboxinit.MismatchMessage + `: the sidecar speaks version "2", this init speaks 1; …`, nil, "another istota version"},
		{"flag provided but not defined: -session\nUsage of istota-init:\n  -exec", nil, "older istota"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := classifyProbe(tc.stderr, sysctls(tc.sysctl)); !strings.Contains(got, tc.want) {
				t.Fatalf("classifyProbe(%q) = %q, want it to mention %q", tc.stderr, got, tc.want)
			}
		})
	}
}

func TestRemoveStale(t *testing.T) {
	e := newTestEnv(t)
	r := e.runner(t)
	dir := r.cfg.SocketDir
	mk := func(p string) {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	stale := filepath.Join(dir, "task-5-abc")
	mk(stale)
	ln, err := net.Listen("unix", filepath.Join(stale, "llm.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if err := os.WriteFile(filepath.Join(stale, "args-123"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mk(filepath.Join(dir, "probe-1", "workspace"))
	odd := filepath.Join(dir, "task-6-odd")
	mk(filepath.Join(odd, "subdir"))
	other := filepath.Join(dir, "not-ours")
	mk(other)

	n, err := r.RemoveStale()
	if n != 2 || err == nil || !strings.Contains(err.Error(), "unexpected entry") {
		t.Fatalf("RemoveStale = %d, %v; want 2 removed and an error for %s", n, err, odd)
	}
	for p, want := range map[string]bool{stale: false, filepath.Join(dir, "probe-1"): false, odd: true, other: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s exists = %v, want %v", p, err == nil, want)
		}
	}
	if err := removeSocket(filepath.Join(odd, "subdir")); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("removeSocket on a directory = %v", err)
	}
}

func TestChownTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another uid needs root")
	}
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside")
	for _, p := range []string{outside, filepath.Join(dir, "a.txt")} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "sub", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, filepath.Join(dir, "hardlink")); err != nil {
		t.Fatal(err)
	}
	if _, err := newOwnedTrees(65534, 65534).give(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "a.txt"), filepath.Join(dir, "sub"), filepath.Join(dir, "sub", "deeper"), filepath.Join(dir, "sub", "link")} {
		if uid, gid := fileOwner(t, p); uid != 65534 || gid != 65534 {
			t.Errorf("%s owned by %d:%d, want 65534", p, uid, gid)
		}
	}
	if uid, _ := fileOwner(t, outside); uid != 0 {
		t.Errorf("the target of a symlink or hard link in the tree was given away (uid %d)", uid)
	}
}

func TestDataPipe(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		size int
		pipe bool
	}{
		{"small data in a pipe", 3000, true},
		{"empty", 0, true},
		{"more than a pipe holds, through a file", 300 << 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(strings.Repeat("x", tc.size))
			f, err := dataPipe(dir, "args", data)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode()&os.ModeNamedPipe != 0; got != tc.pipe {
				t.Errorf("a pipe = %v, want %v", got, tc.pipe)
			}
			got, err := io.ReadAll(f)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Errorf("read %d bytes back, want the %d written", len(got), len(data))
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("left behind in the task directory: %v", entries)
			}
		})
	}
}

// parseEnv reads env's output: the variables' names, sorted, and their values.
func parseEnv(out string) ([]string, map[string]string) {
	var keys []string
	env := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(l, "=")
		keys = append(keys, k)
		env[k] = v
	}
	slices.Sort(keys)
	return keys, env
}
