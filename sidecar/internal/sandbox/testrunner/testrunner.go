// Package testrunner builds real sandbox runners for the tests of packages that run
// tools in sandboxes of their own (Chromium for render, tesseract for ocr): the test
// binary stands in for the istota binary, the init is the real istota-init
// (sandboxtest), and when the tests run as root the sandboxes run as a uid of their
// own, so that what is left of them can be counted.
package testrunner

import (
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/istota/istota/sidecar/internal/sandbox"
	"github.com/istota/istota/sidecar/internal/sandbox/sandboxtest"
)

// Limits are the tests' resource limits: room for Chromium's threads.
var Limits = sandbox.Limits{Processes: 1024, OpenFiles: 4096}

// Config is a sandbox configuration for a test, in base, a fresh folder it returns too:
// the test binary (linked, or copied where the temporary folder is on another file
// system) stands in for the istota binary, the init is the real istota-init, the
// sockets live below base, and when the test runs as root the sandboxes run as a uid
// of their own (AgentUID), so that what is left of them can be counted.
func Config(t testing.TB) (sandbox.Config, string) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		t.Fatalf("this test needs bubblewrap at /usr/bin/bwrap: %v", err)
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
		copyExecutable(t, exe, self)
	}
	cfg := sandbox.Config{SelfPath: self, InitPath: sandboxtest.Init(t, base), SocketDir: filepath.Join(base, "sockets")}
	if os.Geteuid() == 0 {
		uid := freeUID()
		cfg.AgentUID, cfg.AgentGID = uid, uid
	}
	return cfg, base
}

// Runner returns a sandbox runner with the tests' Limits (room for Chromium) and the
// uid its sandboxes run as. Call sandboxtest.Cleanup from TestMain.
func Runner(t testing.TB) (*sandbox.Runner, uint32) {
	t.Helper()
	cfg, _ := Config(t)
	cfg.Limits = Limits
	r, err := sandbox.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	uid := uint32(os.Geteuid())
	if cfg.AgentUID != 0 {
		uid = cfg.AgentUID
	}
	return r, uid
}

func copyExecutable(t testing.TB, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// freeUID is a uid no account and no other test process uses.
func freeUID() uint32 {
	for uid := 40000 + os.Getpid()%20000; ; uid++ {
		if _, err := user.LookupId(strconv.Itoa(uid)); err == nil {
			continue
		}
		if len(ProcessesOf(uint32(uid))) == 0 {
			return uint32(uid)
		}
	}
}

// ProcessesOf lists the command lines of the host's processes running as uid.
func ProcessesOf(uid uint32) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name(), &st) != nil || st.Uid != uid {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		out = append(out, strings.ReplaceAll(string(b), "\x00", " "))
	}
	return out
}
