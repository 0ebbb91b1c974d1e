package realnc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// env is one installation: Nextcloud with the app, the sidecar and the scripted model API.
type env struct {
	nc      *nextcloud
	root    string // everything of this run lives below it
	appDir  string // custom_apps/istota, unpacked from the tarball
	setup   string // the file occ istota:setup wrote
	cfgPath string // setup's file plus the test's brain settings
	listen  string // where the sidecar listens
	api     *fakeapi.Server
	sc      *sidecar
	// bench collects the figures `make bench` prints (see bench_test.go).
	bench *figures
}

// repoRoot is the repository checkout.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// TestNextcloud runs every check against one real Nextcloud, in the order an admin and
// the users meet them: install, Talk, files, calendars, the settings API, access and the
// pages in a browser. Later steps need the earlier ones, so a failed install stops it.
func TestNextcloud(t *testing.T) {
	bundle, tarball := os.Getenv("ISTOTA_NEXTCLOUD_BUNDLE"), os.Getenv("ISTOTA_APPSTORE_TARBALL")
	if bundle == "" || tarball == "" {
		t.Skip("needs a real Nextcloud: `make test-nextcloud` sets ISTOTA_NEXTCLOUD_BUNDLE and ISTOTA_APPSTORE_TARBALL")
	}
	root, err := os.MkdirTemp("", "istota-realnc-")
	if err != nil {
		t.Fatal(err)
	}
	// The agent account passes through to the sandbox binary and sockets below it.
	os.Chmod(root, 0o755)
	e := &env{root: root, bench: newFigures()}
	t.Cleanup(func() {
		if e.sc != nil {
			e.sc.stop(t)
			if path := os.Getenv("ISTOTA_SIDECAR_LOG"); path != "" {
				os.WriteFile(path, []byte(e.sc.logs()), 0o644)
			}
		}
		if e.nc != nil {
			e.nc.stop()
		}
		if t.Failed() && os.Getenv("ISTOTA_KEEP") != "" {
			if e.sc != nil {
				os.WriteFile(filepath.Join(root, "sidecar.log"), []byte(e.sc.logs()), 0o644)
			}
			t.Logf("kept %s for inspection (sidecar.log, nc/data/nextcloud.log)", root)
			return
		}
		os.RemoveAll(root)
	})
	e.nc = startNextcloud(t, bundle, filepath.Join(root, "nc"))
	e.api = fakeapi.New(t, nil, fakeapi.WithDefault(fakeapi.Reply("(no script for this request)")))

	steps := []struct {
		name string
		run  func(*testing.T, *env)
	}{
		{"install", testInstall},
		{"talk", testTalk},
		{"conversation", testConversation},
		{"installer", testInstaller},
		{"pages", testPages},
		{"files", testFiles},
		{"voice", testVoice},
		{"calendars", testCalendars},
		{"tasks and contacts", testTasksContacts},
		{"approvals", testApprovals},
		{"ncskill", testNextcloudSkill},
		{"settings api", testSettingsAPI},
		{"mailbox", testMailbox},
		{"access", testAccess},
		{"figures", testFigures},
		{"load", testLoad},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, e) }) && s.name == "install" {
			t.Fatal("the installation failed; the other checks need it")
		}
	}
	if out := e.bench.report(); out != "" {
		t.Log("\n" + out)
		if path := os.Getenv("ISTOTA_BENCH_OUT"); path != "" {
			if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
				t.Errorf("write figures: %v", err)
			}
		}
	}
}

// unpackApp puts the tarball's istota/ into custom_apps, as an admin (or the app store)
// does.
func unpackApp(t *testing.T, nc *nextcloud, tarball string) string {
	t.Helper()
	if out, err := exec.Command("tar", "-xzf", tarball, "-C", filepath.Join(nc.Dir, "custom_apps")).CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v\n%s", tarball, err, out)
	}
	return filepath.Join(nc.Dir, "custom_apps", "istota")
}

// copyTree copies a folder (the fault-injection app) into place.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-r", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp %s %s: %v\n%s", from, to, err, out)
	}
}

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Fatalf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, " ")
}
