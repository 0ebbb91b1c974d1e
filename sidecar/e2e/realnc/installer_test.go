package realnc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// installRun is one `istota install` process of the app's binary.
type installRun struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer // standard output: the steps and the doctor's lines
	logs   bytes.Buffer // standard error: the service's log
	exited chan struct{}
	err    error
}

func (r *installRun) stdout() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

func (r *installRun) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String() + "\n--- service log ---\n" + tail(r.logs.String(), 60)
}

func startInstall(t *testing.T, binary string, args ...string) *installRun {
	t.Helper()
	r := &installRun{exited: make(chan struct{})}
	r.cmd = exec.Command(binary, append([]string{"install"}, args...)...)
	r.cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + os.Getenv("HOME"), "TMPDIR=" + os.TempDir()}
	r.cmd.Stdout = &lockedWriter{mu: &r.mu, w: &r.out}
	r.cmd.Stderr = &lockedWriter{mu: &r.mu, w: &r.logs}
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err = r.cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		select {
		case <-r.exited:
		default:
			syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
			<-r.exited
		}
	})
	return r
}

// waitServing waits until the foreground service answers and the doctor has spoken.
func (r *installRun) waitServing(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for time.Now().Before(deadline) {
		out := r.stdout()
		if strings.Contains(out, "Ready: mention the bot") || strings.Contains(out, "Last step:") {
			return
		}
		select {
		case <-r.exited:
			t.Fatalf("istota install exited (%v) before the service ran:\n%s", r.err, r.all())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("istota install did not get the service running:\n%s", r.all())
}

// stop ends the foreground service as Ctrl-C would and waits for a clean exit.
func (r *installRun) stop(t *testing.T) {
	t.Helper()
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("istota install did not stop on SIGTERM:\n%s", r.all())
	}
	if r.err != nil {
		t.Fatalf("istota install stopped with %v:\n%s", r.err, r.all())
	}
}

// testInstaller is issue 13's path as an admin takes it: with the app installed and no
// sidecar running, the admin section and `occ istota:setup` name the command; `istota
// install --no-systemd` from the app's folder (the unit checked, not installed: there is
// no systemd here) creates the account, the binary, the configuration and the data
// folder, runs the service as that account, and the bot answers in Talk; a second run
// changes nothing; --uninstall leaves no account, configuration, binary or unit, and
// --purge takes the data too. The sidecar of the other steps is stopped meanwhile (the
// installed one takes its address, as it would on a real server) and started again.
func testInstaller(t *testing.T, e *env) {
	nc := e.nc
	binary := filepath.Join(e.appDir, "bin", runtime.GOARCH, "istota")
	account := fmt.Sprintf("istota-t%d", os.Getpid()%1000000)
	base := filepath.Join(e.root, "installer")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(base, "api-key")
	if err := os.WriteFile(keyFile, []byte(apiKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	paths := []string{
		"--user", account,
		"--binary", filepath.Join(base, "bin", "istota"),
		"--config-dir", filepath.Join(base, "etc"),
		"--data-dir", filepath.Join(base, "data"),
		"--unit", filepath.Join(base, "systemd", "istota.service"),
	}
	args := append([]string{"--no-systemd", "--listen", e.listen, "--claude", claudeBinary(t),
		"--api-key-file", keyFile, "--api-base-url", e.api.URL()}, paths...)
	t.Cleanup(func() {
		// Whatever happened: no test account stays on the machine.
		if _, err := user.Lookup(account); err == nil {
			exec.Command("userdel", account).Run()
		}
	})
	e.sc.stop(t)
	defer e.sc.start(t)
	wantCommand := "sudo " + binary + " install"

	t.Run("the next step is named", func(t *testing.T) {
		out, err := nc.occ("istota:setup")
		if err != nil {
			t.Fatalf("occ istota:setup: %v\n%s", err, out)
		}
		mustContain(t, "occ istota:setup with no sidecar running", out, "does not answer at http://"+e.listen+" yet", "\n  "+wantCommand+"\n")
		checkAdminNotRunning(t, e, wantCommand)
	})

	t.Run("dry run", func(t *testing.T) {
		out, err := exec.Command(binary, append([]string{"install", "--dry-run"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("istota install --dry-run: %v\n%s", err, out)
		}
		mustContain(t, "the dry run", string(out), "· Nextcloud: "+nc.Dir, "→ service account: would create the system user "+account,
			"→ binary: would copy", "→ Nextcloud setup: would run php occ istota:setup", "→ configuration: would write")
		if _, err := user.Lookup(account); err == nil {
			t.Errorf("the dry run created the account")
		}
		if _, err := os.Stat(filepath.Join(base, "etc")); err == nil {
			t.Errorf("the dry run created the configuration folder")
		}
	})

	began := time.Now()
	r := startInstall(t, binary, args...)
	r.waitServing(t)
	out := r.stdout()
	t.Logf("istota install --no-systemd …:\n%s", out)
	var missing []string
	for _, want := range []string{
		"✓ service account: create the system user " + account,
		"✓ binary: copy " + binary,
		"✓ sandbox init: copy " + filepath.Join(filepath.Dir(binary), "istota-init") + " to " + filepath.Join(base, "bin", "istota-init"),
		"✓ data folder: create",
		"· agent: the claude CLI at ",
		"· Nextcloud setup: secrets, bot account and Talk bot ready",
		"✓ model API key: copy it to",
		"✓ configuration: write",
		"✓ service: running in the foreground as " + account,
		// The doctor, as the service account, against the service just started.
		"✓ configuration: valid", "✓ database:", "✓ agent binary:", "✓ sandbox:",
		"✓ sandbox init: " + filepath.Join(base, "bin", "istota-init") + " (protocol", "✓ model login: the model API key",
		"✓ Nextcloud reachable:", "✓ Talk bot secret:", "✓ signed round trip",
		"Ready: mention the bot in Talk.",
	} {
		if !strings.Contains(out, "\n"+want) && !strings.HasPrefix(out, want) {
			missing = append(missing, want)
		}
	}
	if _, err := exec.LookPath("systemd-analyze"); err == nil && !strings.Contains(out, "systemd-analyze verify finds it valid") {
		missing = append(missing, "the unit checked with systemd-analyze")
	}
	if len(missing) > 0 {
		t.Fatalf("istota install printed no line %q:\n%s", missing, r.all())
	}
	u, err := user.Lookup(account)
	if err != nil {
		t.Fatalf("the service account: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	checkOwner := func(path string, mode os.FileMode, wantUID, wantGID int) {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != mode || int(st.Uid) != wantUID || int(st.Gid) != wantGID {
			t.Errorf("%s: %o %d:%d, want %o %d:%d", path, fi.Mode().Perm(), st.Uid, st.Gid, mode, wantUID, wantGID)
		}
	}
	checkOwner(filepath.Join(base, "etc", "istota.toml"), 0o640, 0, gid)
	checkOwner(filepath.Join(base, "etc", "api_key"), 0o640, 0, gid)
	checkOwner(filepath.Join(base, "bin", "istota"), 0o755, 0, 0)
	checkOwner(filepath.Join(base, "bin", "istota-init"), 0o755, 0, 0)
	checkOwner(filepath.Join(base, "data"), 0o700, uid, gid)
	if _, err := os.Stat(filepath.Join(base, "systemd", "istota.service")); err == nil {
		t.Errorf("--no-systemd installed the unit")
	}
	// The service runs as the account, not as root.
	if m := regexp.MustCompile(`\(pid (\d+)\)`).FindStringSubmatch(out); m == nil {
		t.Errorf("no pid in %q", out)
	} else if status, err := os.ReadFile("/proc/" + m[1] + "/status"); err != nil || !regexp.MustCompile(`(?m)^Uid:\s+`+u.Uid+`\s`).Match(status) {
		t.Errorf("the service does not run as %s (uid %s): %v\n%s", account, u.Uid, err, status)
	}

	t.Run("answers in Talk", func(t *testing.T) {
		nts := nc.noteToSelf(t, "alice")
		nc.enableBot(t, "alice", nts)
		e.script("[installer-1]", fakeapi.Reply("Installed and answering. [installer-1-answer]"))
		id, _ := nc.post(t, "alice", nts, "Are you there? [installer-1]")
		var got chatMessage
		waitUntil(t, "the installed service's answer", 3*time.Minute, func() bool {
			var ok bool
			got, ok = replyTo(nc.messages(t, "alice", nts), id)
			return ok
		}, r.all)
		if !strings.Contains(got.Message, "[installer-1-answer]") {
			t.Fatalf("answer: %+v", got)
		}
		// The claude CLI is given (no npm download here; that adds about a minute).
		took := time.Since(began)
		e.bench.add("istota install → first answer in Talk (claude CLI present)", fmtDur(took), "< 5 min", boolp(took < 5*time.Minute))
	})
	r.stop(t)

	t.Run("a second run changes nothing", func(t *testing.T) {
		config, _ := os.ReadFile(filepath.Join(base, "etc", "istota.toml"))
		r := startInstall(t, binary, args...)
		r.waitServing(t)
		steps, _, _ := strings.Cut(r.stdout(), "\nistota doctor:")
		for _, line := range strings.Split(steps, "\n") {
			if strings.HasPrefix(line, "✓") && !strings.HasPrefix(line, "✓ service: running in the foreground") {
				t.Errorf("the second run changed something: %s", line)
			}
		}
		if again, _ := os.ReadFile(filepath.Join(base, "etc", "istota.toml")); !bytes.Equal(config, again) {
			t.Errorf("the configuration changed")
		}
		r.stop(t)
	})

	t.Run("uninstall", func(t *testing.T) {
		out, err := exec.Command(binary, append([]string{"install", "--uninstall"}, paths...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("istota install --uninstall: %v\n%s", err, out)
		}
		if _, err := user.Lookup(account); err == nil {
			t.Errorf("the account %s is still there:\n%s", account, out)
		}
		for _, gone := range []string{"etc", "bin/istota", "bin/istota-init", "systemd/istota.service"} {
			if _, err := os.Stat(filepath.Join(base, gone)); err == nil {
				t.Errorf("%s is still there:\n%s", gone, out)
			}
		}
		if _, err := os.Stat(filepath.Join(base, "data", "db", "istota.db")); err != nil {
			t.Errorf("the data went without --purge: %v\n%s", err, out)
		}
		out, err = exec.Command(binary, append([]string{"install", "--uninstall", "--purge"}, paths...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("istota install --uninstall --purge: %v\n%s", err, out)
		}
		if _, err := os.Stat(filepath.Join(base, "data")); err == nil {
			t.Errorf("--purge kept the data:\n%s", out)
		}
	})
}

// checkAdminNotRunning opens the admin section in Chromium while no sidecar runs: it
// must show the install command, not an error.
func checkAdminNotRunning(t *testing.T, e *env, command string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed; run `make deps`")
	}
	script := filepath.Join(repoRoot(), "nextcloud-app", "tests", "browser", "nextcloud-pages.mjs")
	cmd := exec.Command(node, "--test-reporter=spec", script)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(),
		"ISTOTA_NC_URL="+e.nc.URL,
		"ISTOTA_NC_ADMIN=admin", "ISTOTA_NC_ADMIN_PASSWORD="+e.nc.password("admin"),
		"ISTOTA_PAGES_NOT_RUNNING="+command,
		"ISTOTA_SCREENSHOTS="+filepath.Join(repoRoot(), "build", "screenshots"),
	)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "✔ shows the install command instead of an error") {
		t.Fatalf("the admin section before the service runs: %v\n%s", err, out)
	}
}
