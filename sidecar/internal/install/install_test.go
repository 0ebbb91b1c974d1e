package install

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// fakeFile is one file or folder of the fake machine.
type fakeFile struct {
	data     []byte
	mode     fs.FileMode
	uid, gid int
	dir      bool
	owner    string // for Owner; "" is root
}

// machine is a System in memory: files, accounts, commands and the service's state.
type machine struct {
	files    map[string]*fakeFile
	users    map[string][2]int
	onPath   map[string]string
	commands []string // "user|dir|name args"
	writes   []string
	booted   bool
	enabled  bool
	active   bool
	setupOut string
	setupErr error
	nextUID  int
}

// appInit is the sandbox init the app ships beside its binary.
const appInit = "/var/www/nextcloud/apps/istota/bin/amd64/istota-init"

func newMachine() *machine {
	m := &machine{
		files:    map[string]*fakeFile{},
		users:    map[string][2]int{"root": {0, 0}, "www-data": {33, 33}},
		onPath:   map[string]string{"npm": "/usr/bin/npm", "php": "/usr/bin/php", "systemctl": "/usr/bin/systemctl"},
		booted:   true,
		setupOut: "[nextcloud]\nurl = \"https://cloud.example\"\nshared_secret = \"s3cr3t-0123456789-0123456789-0123\"\n\n[talk]\nbot_name = \"Istota\"\n",
		nextUID:  998,
	}
	m.files["/var/www/nextcloud/occ"] = &fakeFile{data: []byte("<?php"), owner: "www-data"}
	m.files["/var/www/nextcloud/config/config.php"] = &fakeFile{data: []byte("<?php"), owner: "www-data"}
	m.files["/var/www/nextcloud/apps/istota/bin/amd64/istota"] = &fakeFile{data: []byte("istota v1"), mode: 0o755, owner: "www-data"}
	m.files[appInit] = &fakeFile{data: []byte("istota-init v1"), mode: 0o755, owner: "www-data"}
	m.files[systemdRunning] = &fakeFile{dir: true}
	return m
}

func (m *machine) Run(ctx context.Context, user, dir, name string, args ...string) ([]byte, error) {
	m.commands = append(m.commands, user+"|"+dir+"|"+name+" "+strings.Join(args, " "))
	switch name {
	case "useradd":
		m.users[args[len(args)-1]] = [2]int{m.nextUID, m.nextUID}
		m.nextUID++
	case "userdel":
		delete(m.users, args[len(args)-1])
	case "npm":
		m.onPath["claude"] = "/usr/local/bin/claude"
		m.files["/usr/local/bin/claude"] = &fakeFile{mode: 0o755}
	case "php":
		return []byte(m.setupOut), m.setupErr
	case "systemctl":
		switch args[0] {
		case "is-active":
			if !m.active {
				return nil, errors.New("inactive")
			}
		case "is-enabled":
			if !m.enabled {
				return nil, errors.New("disabled")
			}
		case "enable":
			m.enabled, m.active = true, true
		case "disable":
			m.enabled, m.active = false, false
		}
	}
	return nil, nil
}

func (m *machine) LookPath(name string) (string, error) {
	if p, ok := m.onPath[name]; ok {
		return p, nil
	}
	return "", fmt.Errorf("%s is not installed", name)
}

func (m *machine) LookupUser(name string) (int, int, bool, error) {
	ids, ok := m.users[name]
	return ids[0], ids[1], ok, nil
}

func (m *machine) Owner(path string) (string, error) {
	f, ok := m.files[path]
	if !ok {
		return "", fs.ErrNotExist
	}
	if f.owner != "" {
		return f.owner, nil
	}
	for name, ids := range m.users {
		if ids[0] == f.uid {
			return name, nil
		}
	}
	return fmt.Sprint(f.uid), nil
}

func (m *machine) ReadFile(path string) ([]byte, error) {
	if f, ok := m.files[path]; ok && !f.dir {
		return f.data, nil
	}
	return nil, fs.ErrNotExist
}

func (m *machine) WriteFile(path string, data []byte, mode fs.FileMode, uid, gid int) error {
	m.writes = append(m.writes, path)
	m.files[path] = &fakeFile{data: append([]byte(nil), data...), mode: mode, uid: uid, gid: gid}
	return nil
}

func (m *machine) MkdirAll(dir string, mode fs.FileMode, uid, gid int) error {
	m.files[dir] = &fakeFile{dir: true, mode: mode, uid: uid, gid: gid}
	return nil
}

func (m *machine) RemoveAll(path string) error {
	for p := range m.files {
		if p == path || strings.HasPrefix(p, path+"/") {
			delete(m.files, p)
		}
	}
	return nil
}

func (m *machine) Exists(path string) bool {
	_, ok := m.files[path]
	return ok
}

// run installs (or uninstalls) with o and returns the report's lines.
func run(t *testing.T, m *machine, o Options, uninstall bool) ([]string, error) {
	t.Helper()
	if o.Source == "" {
		o.Source = "/var/www/nextcloud/apps/istota/bin/amd64/istota"
	}
	var lines []string
	in := New(o, m, func(mark, step, detail string) { lines = append(lines, mark+" "+step+": "+detail) })
	var err error
	if uninstall {
		err = in.Uninstall(context.Background())
	} else {
		err = in.Install(context.Background())
	}
	return lines, err
}

func has(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

func TestFreshInstall(t *testing.T) {
	m := newMachine()
	lines, err := run(t, m, Options{Systemd: true}, false)
	if err != nil {
		t.Fatalf("install: %v\n%s", err, strings.Join(lines, "\n"))
	}
	for _, want := range []string{
		"· Nextcloud: /var/www/nextcloud, occ runs as www-data",
		"✓ service account: create the system user istota",
		"✓ binary: copy",
		"✓ sandbox init: copy " + appInit + " to /usr/local/bin/istota-init",
		"✓ data folder: create /var/lib/istota",
		"✓ agent: install the claude CLI",
		"· Nextcloud setup:",
		"· model API key: not given",
		"✓ configuration: write /etc/istota/istota.toml",
		"✓ systemd unit: write /etc/systemd/system/istota.service",
		"✓ service: enable and start istota.service",
	} {
		if !has(lines, want) {
			t.Errorf("no line %q in:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	uid := m.users["istota"][0]
	check := func(path string, mode fs.FileMode, wantUID, wantGID int) *fakeFile {
		t.Helper()
		f, ok := m.files[path]
		if !ok {
			t.Fatalf("%s was not made", path)
		}
		if f.mode != mode || f.uid != wantUID || f.gid != wantGID {
			t.Errorf("%s: mode %o owner %d:%d, want %o %d:%d", path, f.mode, f.uid, f.gid, mode, wantUID, wantGID)
		}
		return f
	}
	// The binary is root's (the service account cannot replace what it runs), the
	// configuration holds secrets: readable by the service's group, writable by root only.
	check("/usr/local/bin/istota", 0o755, 0, 0)
	if f := check("/usr/local/bin/istota-init", 0o755, 0, 0); string(f.data) != "istota-init v1" {
		t.Errorf("the sandbox init holds %q", f.data)
	}
	check("/var/lib/istota", 0o700, uid, uid)
	check("/etc/istota", 0o750, 0, uid)
	cfg := check("/etc/istota/istota.toml", 0o640, 0, uid)
	for _, want := range []string{`data_dir = "/var/lib/istota"`, `shared_secret = "s3cr3t`, "[brain]", `kind = "claude"`, `claude_path = "/usr/local/bin/claude"`} {
		if !strings.Contains(string(cfg.data), want) {
			t.Errorf("configuration lacks %q:\n%s", want, cfg.data)
		}
	}
	unit, _ := Unit(Options{})
	if f := check("/etc/systemd/system/istota.service", 0o644, 0, 0); string(f.data) != string(unit) {
		t.Errorf("unit file differs from Unit()")
	}
	// occ ran as the web server's user, in Nextcloud's folder, with the sidecar's address.
	var occ string
	for _, c := range m.commands {
		if strings.Contains(c, "istota:setup") {
			occ = c
		}
	}
	if occ != "www-data|/var/www/nextcloud|php occ istota:setup --sidecar-url=http://127.0.0.1:8765" {
		t.Errorf("occ ran as %q", occ)
	}
	if !m.enabled || !m.active {
		t.Errorf("the service is not enabled and started")
	}
}

func TestSecondRunChangesNothing(t *testing.T) {
	m := newMachine()
	if lines, err := run(t, m, Options{Systemd: true}, false); err != nil {
		t.Fatalf("first run: %v\n%s", err, strings.Join(lines, "\n"))
	}
	m.writes, m.commands = nil, nil
	lines, err := run(t, m, Options{Systemd: true}, false)
	if err != nil {
		t.Fatalf("second run: %v\n%s", err, strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "·") {
			t.Errorf("the second run did something: %s", l)
		}
	}
	if len(m.writes) != 0 {
		t.Errorf("the second run wrote %v", m.writes)
	}
	for _, c := range m.commands {
		if !strings.Contains(c, "istota:setup") && !strings.Contains(c, "systemctl is-") {
			t.Errorf("the second run ran %q", c)
		}
	}
}

func TestNewBinaryRestartsTheService(t *testing.T) {
	m := newMachine()
	run(t, m, Options{Systemd: true}, false)
	m.files["/var/www/nextcloud/apps/istota/bin/amd64/istota"].data = []byte("istota v2")
	m.files[appInit].data = []byte("istota-init v2")
	m.commands = nil
	lines, err := run(t, m, Options{Systemd: true}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !has(lines, "✓ binary: copy") || !has(lines, "✓ sandbox init: copy") || !has(lines, "✓ service: restart istota.service") {
		t.Errorf("an updated app did not replace and restart the service:\n%s", strings.Join(lines, "\n"))
	}
	if string(m.files["/usr/local/bin/istota"].data) != "istota v2" || string(m.files["/usr/local/bin/istota-init"].data) != "istota-init v2" {
		t.Errorf("the binary or its init was not replaced")
	}
}

// An app without istota-init (a release from before it) installs without one, and takes
// away one a newer release left: an init of another version refuses to serve.
func TestAppWithoutSandboxInit(t *testing.T) {
	m := newMachine()
	delete(m.files, appInit)
	lines, err := run(t, m, Options{Systemd: true}, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(lines, "\n"))
	}
	if !has(lines, "· sandbox init: none beside") || m.Exists("/usr/local/bin/istota-init") {
		t.Errorf("an app without istota-init:\n%s", strings.Join(lines, "\n"))
	}

	m = newMachine()
	run(t, m, Options{Systemd: true}, false)
	delete(m.files, appInit)
	m.commands = nil
	lines, err = run(t, m, Options{Systemd: true}, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(lines, "\n"))
	}
	if !has(lines, "✓ sandbox init: remove /usr/local/bin/istota-init") || m.Exists("/usr/local/bin/istota-init") || !has(lines, "✓ service: restart") {
		t.Errorf("a stale istota-init was not removed (and the service restarted):\n%s", strings.Join(lines, "\n"))
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	m := newMachine()
	lines, err := run(t, m, Options{Systemd: true, DryRun: true}, false)
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, strings.Join(lines, "\n"))
	}
	if len(m.writes) != 0 {
		t.Errorf("a dry run wrote %v", m.writes)
	}
	for _, c := range m.commands {
		// Asking systemd about the service changes nothing.
		if !strings.Contains(c, "systemctl is-") {
			t.Errorf("a dry run ran %q", c)
		}
	}
	for _, want := range []string{"→ service account: would create", "→ binary: would copy", "→ sandbox init: would copy", "→ agent: would install", "→ Nextcloud setup: would run php occ istota:setup",
		"→ configuration: would write", "→ systemd unit: would write", "→ service: would enable and start"} {
		if !has(lines, want) {
			t.Errorf("no line %q in:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "✓") {
			t.Errorf("a dry run reports a change: %s", l)
		}
	}
}

func TestWithoutNodeTheOpenAIBrainIsConfigured(t *testing.T) {
	m := newMachine()
	delete(m.onPath, "npm")
	lines, err := run(t, m, Options{Systemd: true, APIBaseURL: "https://llm.example/v1"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !has(lines, "· agent: no Node.js here: the OpenAI-compatible brain is configured") {
		t.Errorf("no word about the brain:\n%s", strings.Join(lines, "\n"))
	}
	cfg := string(m.files["/etc/istota/istota.toml"].data)
	if !strings.Contains(cfg, `kind = "openai"`) || !strings.Contains(cfg, `api_base_url = "https://llm.example/v1"`) {
		t.Errorf("configuration:\n%s", cfg)
	}
}

func TestAPIKeyFile(t *testing.T) {
	m := newMachine()
	m.files["/root/key"] = &fakeFile{data: []byte("sk-test\n")}
	if _, err := run(t, m, Options{Systemd: true, APIKeyFile: "/root/key"}, false); err != nil {
		t.Fatal(err)
	}
	uid := m.users["istota"][0]
	key := m.files["/etc/istota/api_key"]
	if key == nil || string(key.data) != "sk-test\n" || key.mode != 0o640 || key.uid != 0 || key.gid != uid {
		t.Fatalf("api_key: %+v", key)
	}
	if cfg := string(m.files["/etc/istota/istota.toml"].data); !strings.Contains(cfg, `api_key_file = "/etc/istota/api_key"`) || strings.Contains(cfg, "sk-test") {
		t.Errorf("configuration must name the key file, never hold the key:\n%s", cfg)
	}
}

func TestNoSystemdChecksTheUnitOnly(t *testing.T) {
	m := newMachine()
	m.onPath["systemd-analyze"] = "/usr/bin/systemd-analyze"
	lines, err := run(t, m, Options{}, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(lines, "\n"))
	}
	if m.Exists(DefaultUnit) || m.enabled {
		t.Errorf("--no-systemd installed the unit")
	}
	if !has(lines, "· systemd unit: not installed (--no-systemd); systemd-analyze verify finds it valid") {
		t.Errorf("no unit check:\n%s", strings.Join(lines, "\n"))
	}
}

func TestWithoutSystemdTheServiceStepSaysWhatToDo(t *testing.T) {
	m := newMachine()
	delete(m.files, systemdRunning)
	lines, err := run(t, m, Options{Systemd: true}, false)
	if err == nil || !has(lines, "✗ service: systemd is not running on this machine: run again with --no-systemd") {
		t.Fatalf("%v\n%s", err, strings.Join(lines, "\n"))
	}
}

func TestNextcloudNotFound(t *testing.T) {
	m := newMachine()
	m.files["/opt/istota/istota"] = &fakeFile{data: []byte("istota v1"), mode: 0o755}
	lines, err := run(t, m, Options{Source: "/opt/istota/istota"}, false)
	if err == nil || !has(lines, "✗ Nextcloud: not found above /opt/istota/istota; pass --nextcloud DIR") {
		t.Fatalf("%v\n%s", err, strings.Join(lines, "\n"))
	}
	if len(m.commands) != 0 || len(m.writes) != 0 {
		t.Errorf("it went on: %v %v", m.commands, m.writes)
	}
	if lines, err := run(t, m, Options{Source: "/opt/istota/istota", Nextcloud: "/var/www/nextcloud", Systemd: true}, false); err != nil {
		t.Fatalf("--nextcloud: %v\n%s", err, strings.Join(lines, "\n"))
	}
}

func TestFailedSetupWritesNoConfiguration(t *testing.T) {
	m := newMachine()
	m.setupErr = errors.New("php occ istota:setup: exit status 1: Could not set up the bot account")
	lines, err := run(t, m, Options{Systemd: true}, false)
	if err == nil || !has(lines, "✗ Nextcloud setup: php occ istota:setup: exit status 1") {
		t.Fatalf("%v\n%s", err, strings.Join(lines, "\n"))
	}
	if m.Exists("/etc/istota/istota.toml") || m.Exists(DefaultUnit) {
		t.Errorf("it went on after a failed setup")
	}
}

func TestHandEditedConfigurationIsKept(t *testing.T) {
	m := newMachine()
	run(t, m, Options{Systemd: true}, false)
	m.files["/etc/istota/istota.toml"].data = []byte("# mine\n")
	lines, err := run(t, m, Options{Systemd: true}, false)
	if err != nil || !has(lines, "✓ configuration: write /etc/istota/istota.toml (the previous one is kept as istota.toml.bak)") {
		t.Fatalf("%v\n%s", err, strings.Join(lines, "\n"))
	}
	if string(m.files["/etc/istota/istota.toml.bak"].data) != "# mine\n" {
		t.Errorf("backup: %q", m.files["/etc/istota/istota.toml.bak"].data)
	}
}

func TestDataFolderOfAnotherOwner(t *testing.T) {
	m := newMachine()
	m.files["/var/lib/istota"] = &fakeFile{dir: true, owner: "root"}
	lines, _ := run(t, m, Options{Systemd: true}, false)
	if !has(lines, "✓ data folder: give /var/lib/istota (owned by root) to istota") {
		t.Fatalf("%s", strings.Join(lines, "\n"))
	}
	found := false
	for _, c := range m.commands {
		found = found || c == "||chown -R --no-dereference istota:istota /var/lib/istota"
	}
	if !found {
		t.Errorf("no chown: %v", m.commands)
	}
}

func TestUninstall(t *testing.T) {
	m := newMachine()
	run(t, m, Options{Systemd: true}, false)
	m.files["/var/lib/istota/istota.db"] = &fakeFile{}
	lines, err := run(t, m, Options{Systemd: true}, true)
	if err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(lines, "\n"))
	}
	if !has(lines, "✓ sandbox init: remove /usr/local/bin/istota-init") {
		t.Errorf("uninstall did not report removing the sandbox init:\n%s", strings.Join(lines, "\n"))
	}
	for _, gone := range []string{DefaultUnit, DefaultBinary, "/usr/local/bin/istota-init", "/etc/istota", "/etc/istota/istota.toml"} {
		if m.Exists(gone) {
			t.Errorf("%s is still there", gone)
		}
	}
	if _, ok := m.users["istota"]; ok {
		t.Errorf("the account is still there")
	}
	if m.enabled || m.active {
		t.Errorf("the service still runs")
	}
	if !m.Exists("/var/lib/istota/istota.db") || !has(lines, "· data folder: /var/lib/istota is kept") {
		t.Errorf("the data went without --purge:\n%s", strings.Join(lines, "\n"))
	}
	// Again: nothing left to do. With --purge: the data goes.
	lines, _ = run(t, m, Options{Systemd: true}, true)
	for _, l := range lines {
		if strings.HasPrefix(l, "✓") {
			t.Errorf("a second uninstall did something: %s", l)
		}
	}
	if _, err := run(t, m, Options{Purge: true}, true); err != nil || m.Exists("/var/lib/istota") {
		t.Errorf("--purge kept the data: %v", err)
	}
}

func TestDeployUnitIsTheDefaultUnit(t *testing.T) {
	unit, err := Unit(Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "..", "deploy", "istota.service")
	if os.Getenv("ISTOTA_UPDATE_UNIT") != "" {
		if err := os.WriteFile(path, unit, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shipped, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(shipped) != string(unit) {
		t.Errorf("deploy/istota.service is not what `istota install` writes; regenerate it from istota.service.tmpl with ISTOTA_UPDATE_UNIT=1 go test -run TestDeployUnit ./sidecar/internal/install")
	}
	for _, want := range []string{"User=istota\n", "ExecStart=/usr/local/bin/istota serve -c /etc/istota/istota.toml\n", "ReadWritePaths=/var/lib/istota\n"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %q", want)
		}
	}
}

// TestOSWriteFile: the real System writes atomically with the mode and owner asked.
func TestOSWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secret.toml")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (OS{}).WriteFile(path, []byte("new"), 0o640, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode: %v %v", fi.Mode(), err)
	}
	if data, _ := os.ReadFile(path); string(data) != "new" {
		t.Errorf("content %q", data)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "secret.toml" {
		t.Errorf("left behind: %v", names)
	}
}
