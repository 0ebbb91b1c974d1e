// Package install puts the sidecar in place on a Nextcloud server in one idempotent
// command (`istota install`): the service account, the binary and its sandbox init, the
// agent, the
// configuration written from `occ istota:setup`, the systemd unit. Every step first
// looks at what is there and changes only what differs, so a second run changes nothing
// and says so; --dry-run says what each step would do; --uninstall undoes them.
package install

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/istota/istota/sidecar/internal/sandbox"
)

// Defaults of a real server; the tests point every one of them elsewhere.
const (
	DefaultUser      = "istota"
	DefaultBinary    = "/usr/local/bin/istota"
	DefaultConfigDir = "/etc/istota"
	DefaultDataDir   = "/var/lib/istota"
	DefaultUnit      = "/etc/systemd/system/istota.service"
	DefaultListen    = "127.0.0.1:8765"
	// ClaudePackage is the npm package of the Claude Code CLI.
	ClaudePackage = "@anthropic-ai/claude-code"
)

// systemdRunning exists when systemd is the init (sd_booted(3)).
const systemdRunning = "/run/systemd/system"

//go:embed istota.service.tmpl
var unitTemplate string

// Options say where everything goes.
type Options struct {
	Nextcloud  string // Nextcloud's folder (holds occ); "" finds it above Source
	WebUser    string // runs occ; "" is the owner of config/config.php
	User       string // the service account
	Source     string // the binary to install (the one running)
	Binary     string // where it goes
	ConfigDir  string
	DataDir    string
	UnitPath   string
	Listen     string // the sidecar's address; Nextcloud reaches it there
	Claude     string // the claude CLI to use; "" finds or installs it
	APIKeyFile string // copied into the configuration folder
	APIBaseURL string // the model API, "" for the brain's default
	Systemd    bool   // install and start the unit (false: the caller runs the service)
	DryRun     bool
	Purge      bool // with Uninstall: delete the data folder too
}

// withDefaults fills the empty fields.
func (o Options) withDefaults() Options {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&o.User, DefaultUser)
	def(&o.Binary, DefaultBinary)
	def(&o.ConfigDir, DefaultConfigDir)
	def(&o.DataDir, DefaultDataDir)
	def(&o.UnitPath, DefaultUnit)
	def(&o.Listen, DefaultListen)
	return o
}

// ConfigPath is the configuration file the service runs with.
func (o Options) ConfigPath() string { return filepath.Join(o.ConfigDir, "istota.toml") }

// System is every effect on the machine, so the plan can be tested without root.
type System interface {
	// Run runs a command (as user when it is not ""; dir "" is the current one) and
	// returns its standard output; on failure the error carries standard error.
	Run(ctx context.Context, user, dir string, name string, args ...string) ([]byte, error)
	LookPath(name string) (string, error)
	// LookupUser returns the account's ids; ok is false when it does not exist.
	LookupUser(name string) (uid, gid int, ok bool, err error)
	// Owner is the user name owning path.
	Owner(path string) (string, error)
	ReadFile(path string) ([]byte, error)
	// WriteFile replaces path atomically with data, mode and owner.
	WriteFile(path string, data []byte, mode fs.FileMode, uid, gid int) error
	// MkdirAll makes dir (and parents) and sets dir's mode and owner.
	MkdirAll(dir string, mode fs.FileMode, uid, gid int) error
	RemoveAll(path string) error
	Exists(path string) bool
}

// Report receives one line per step: mark is "✓" (done now), "·" (already so),
// "→" (dry run: would be done), "✗" (failed).
type Report func(mark, step, detail string)

// Installer runs the steps.
type Installer struct {
	o   Options
	sys System
	out Report
	// Found by the steps, used by later ones.
	webUser  string
	claude   string
	setupTOM []byte
	changed  bool // the binary, configuration or unit changed: the service restarts
}

// New returns an installer.
func New(o Options, sys System, out Report) *Installer {
	return &Installer{o: o.withDefaults(), sys: sys, out: out}
}

// Options are the options in effect, defaults filled in.
func (in *Installer) Options() Options { return in.o }

// errStop ends the run after a failed step, already reported.
var errStop = errors.New("install: a step failed")

// step reports one step. check says whether anything must change (and what); do
// changes it.
func (in *Installer) step(name string, check func() (todo string, err error), do func() error) error {
	todo, err := check()
	if err != nil {
		in.out("✗", name, err.Error())
		return errStop
	}
	if todo == "" {
		in.out("·", name, "already so")
		return nil
	}
	if in.o.DryRun {
		in.out("→", name, "would "+todo)
		return nil
	}
	if err := do(); err != nil {
		in.out("✗", name, err.Error())
		return errStop
	}
	in.out("✓", name, todo)
	return nil
}

// info reports a finding that changes nothing.
func (in *Installer) info(name, detail string) { in.out("·", name, detail) }

// Install runs every step in order and stops at the first that fails.
func (in *Installer) Install(ctx context.Context) error {
	for _, s := range []func(context.Context) error{
		in.findNextcloud, in.account, in.binary, in.sandboxInit, in.dataDir, in.agent, in.setup, in.apiKey, in.config, in.service,
	} {
		if err := s(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (in *Installer) findNextcloud(ctx context.Context) error {
	if in.o.Nextcloud == "" {
		// The binary sits in <nextcloud>/(custom_)apps/istota/bin/<arch>/istota.
		for dir := filepath.Dir(in.o.Source); dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
			if in.sys.Exists(filepath.Join(dir, "occ")) && in.sys.Exists(filepath.Join(dir, "config", "config.php")) {
				in.o.Nextcloud = dir
				break
			}
		}
		if in.o.Nextcloud == "" {
			in.out("✗", "Nextcloud", "not found above "+in.o.Source+"; pass --nextcloud DIR")
			return errStop
		}
	}
	if !in.sys.Exists(filepath.Join(in.o.Nextcloud, "occ")) {
		in.out("✗", "Nextcloud", in.o.Nextcloud+" holds no occ")
		return errStop
	}
	in.webUser = in.o.WebUser
	if in.webUser == "" {
		owner, err := in.sys.Owner(filepath.Join(in.o.Nextcloud, "config", "config.php"))
		if err != nil {
			in.out("✗", "Nextcloud", "cannot tell its web server's user: "+err.Error()+"; pass --web-user")
			return errStop
		}
		in.webUser = owner
	}
	in.info("Nextcloud", fmt.Sprintf("%s, occ runs as %s", in.o.Nextcloud, in.webUser))
	return nil
}

func (in *Installer) account(ctx context.Context) error {
	return in.step("service account", func() (string, error) {
		_, _, ok, err := in.sys.LookupUser(in.o.User)
		if err != nil || ok {
			return "", err
		}
		return "create the system user " + in.o.User, nil
	}, func() error {
		_, err := in.sys.Run(ctx, "", "", "useradd", "--system", "--user-group", "--home-dir", in.o.DataDir,
			"--no-create-home", "--shell", "/usr/sbin/nologin", in.o.User)
		return err
	})
}

// ids is the service account's (0, 0 in a dry run that has not made it).
func (in *Installer) ids() (int, int) {
	uid, gid, ok, _ := in.sys.LookupUser(in.o.User)
	if !ok {
		return 0, 0
	}
	return uid, gid
}

func (in *Installer) binary(ctx context.Context) error {
	return in.step("binary", func() (string, error) {
		want, err := in.sys.ReadFile(in.o.Source)
		if err != nil {
			return "", err
		}
		have, err := in.sys.ReadFile(in.o.Binary)
		if err == nil && sha256.Sum256(have) == sha256.Sum256(want) {
			return "", nil
		}
		return "copy " + in.o.Source + " to " + in.o.Binary, nil
	}, func() error {
		data, err := in.sys.ReadFile(in.o.Source)
		if err != nil {
			return err
		}
		// A copy owned by root, not a link into the web server's writable app folder.
		if err := in.sys.MkdirAll(filepath.Dir(in.o.Binary), 0o755, 0, 0); err != nil {
			return err
		}
		in.changed = true
		return in.sys.WriteFile(in.o.Binary, data, 0o755, 0, 0)
	})
}

// initSource and initPath are the sandbox init (sandbox.InitFile) beside Source and
// beside Binary: the installed istota looks for it beside itself.
func (in *Installer) initSource() string {
	return filepath.Join(filepath.Dir(in.o.Source), sandbox.InitFile)
}

func (in *Installer) initPath() string {
	return filepath.Join(filepath.Dir(in.o.Binary), sandbox.InitFile)
}

// sandboxInit copies istota-init beside the installed binary like the binary itself
// (root's, 0755). An app without one (older releases) installs none, and removes one
// left from another release: the init refuses to serve an istota of another version.
func (in *Installer) sandboxInit(ctx context.Context) error {
	src, dst := in.initSource(), in.initPath()
	if !in.sys.Exists(src) {
		if !in.sys.Exists(dst) {
			in.info("sandbox init", "none beside "+in.o.Source+"; istota runs its own sandbox-init, which starts each task slower")
			return nil
		}
		return in.step("sandbox init", func() (string, error) {
			return "remove " + dst + " (none beside " + in.o.Source + ", so it is from another release)", nil
		}, func() error {
			in.changed = true
			return in.sys.RemoveAll(dst)
		})
	}
	return in.step("sandbox init", func() (string, error) {
		want, err := in.sys.ReadFile(src)
		if err != nil {
			return "", err
		}
		have, err := in.sys.ReadFile(dst)
		if err == nil && sha256.Sum256(have) == sha256.Sum256(want) {
			return "", nil
		}
		return "copy " + src + " to " + dst, nil
	}, func() error {
		data, err := in.sys.ReadFile(src)
		if err != nil {
			return err
		}
		if err := in.sys.MkdirAll(filepath.Dir(dst), 0o755, 0, 0); err != nil {
			return err
		}
		// The running sidecar chose its init when it started: restart it.
		in.changed = true
		return in.sys.WriteFile(dst, data, 0o755, 0, 0)
	})
}

func (in *Installer) dataDir(ctx context.Context) error {
	return in.step("data folder", func() (string, error) {
		if !in.sys.Exists(in.o.DataDir) {
			return "create " + in.o.DataDir + " (0700, owned by " + in.o.User + ")", nil
		}
		// A folder left by a manual setup or an earlier run as root: the service could
		// not open its own database in it.
		owner, err := in.sys.Owner(in.o.DataDir)
		if err != nil {
			return "", err
		}
		if owner != in.o.User {
			return "give " + in.o.DataDir + " (owned by " + owner + ") to " + in.o.User, nil
		}
		return "", nil
	}, func() error {
		if in.sys.Exists(in.o.DataDir) {
			_, err := in.sys.Run(ctx, "", "", "chown", "-R", "--no-dereference", in.o.User+":"+in.o.User, in.o.DataDir)
			return err
		}
		uid, gid := in.ids()
		return in.sys.MkdirAll(in.o.DataDir, 0o700, uid, gid)
	})
}

func (in *Installer) agent(ctx context.Context) error {
	if in.o.Claude != "" {
		if !in.sys.Exists(in.o.Claude) {
			in.out("✗", "agent", in.o.Claude+" does not exist")
			return errStop
		}
		in.claude = in.o.Claude
		in.info("agent", "the claude CLI at "+in.claude)
		return nil
	}
	if p, err := in.sys.LookPath("claude"); err == nil {
		in.claude = p
		in.info("agent", "the claude CLI at "+p)
		return nil
	}
	if _, err := in.sys.LookPath("npm"); err != nil {
		in.info("agent", "no Node.js here: the OpenAI-compatible brain is configured; set its model, endpoint and key in the admin section (brain.*)")
		return nil
	}
	return in.step("agent", func() (string, error) {
		return "install the claude CLI with npm install -g " + ClaudePackage, nil
	}, func() error {
		if _, err := in.sys.Run(ctx, "", "", "npm", "install", "-g", "--no-audit", "--no-fund", ClaudePackage); err != nil {
			return err
		}
		p, err := in.sys.LookPath("claude")
		if err != nil {
			return errors.New("npm installed " + ClaudePackage + " but no claude is on PATH")
		}
		in.claude = p
		return nil
	})
}

func (in *Installer) setup(ctx context.Context) error {
	args := []string{"occ", "istota:setup", "--sidecar-url=http://" + in.o.Listen}
	if in.o.DryRun {
		in.out("→", "Nextcloud setup", "would run php "+strings.Join(args, " ")+" as "+in.webUser)
		return nil
	}
	// Setup keeps every secret and the bot's password: running it again is harmless.
	out, err := in.sys.Run(ctx, in.webUser, in.o.Nextcloud, "php", args...)
	if err != nil {
		in.out("✗", "Nextcloud setup", err.Error())
		return errStop
	}
	in.setupTOM = out
	in.info("Nextcloud setup", "secrets, bot account and Talk bot ready (occ istota:setup)")
	return nil
}

func (in *Installer) keyPath() string { return filepath.Join(in.o.ConfigDir, "api_key") }

func (in *Installer) apiKey(ctx context.Context) error {
	if in.o.APIKeyFile == "" {
		in.info("model API key", "not given: paste it into the admin section (Istota → Model), it is used at once")
		return nil
	}
	return in.step("model API key", func() (string, error) {
		want, err := in.sys.ReadFile(in.o.APIKeyFile)
		if err != nil {
			return "", err
		}
		if have, err := in.sys.ReadFile(in.keyPath()); err == nil && bytes.Equal(have, want) {
			return "", nil
		}
		return "copy it to " + in.keyPath() + " (0640)", nil
	}, func() error {
		data, err := in.sys.ReadFile(in.o.APIKeyFile)
		if err != nil {
			return err
		}
		_, gid := in.ids()
		if err := in.sys.MkdirAll(in.o.ConfigDir, 0o750, 0, gid); err != nil {
			return err
		}
		in.changed = true
		return in.sys.WriteFile(in.keyPath(), data, 0o640, 0, gid)
	})
}

// configText is the configuration: where the data lives, what occ istota:setup wrote,
// and the brain.
func (in *Installer) configText() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Istota sidecar configuration, written by `istota install` (run it again after\n")
	fmt.Fprintf(&b, "# changing Nextcloud's setup). Every key is explained in istota.example.toml.\n")
	fmt.Fprintf(&b, "data_dir = %q\n\n", in.o.DataDir)
	b.Write(bytes.TrimSpace(in.setupTOM))
	b.WriteString("\n\n[brain]\n")
	if in.claude != "" {
		fmt.Fprintf(&b, "kind = \"claude\"\nclaude_path = %q\n", in.claude)
	} else {
		b.WriteString("kind = \"openai\"\nmodel = \"set-a-model-in-the-admin-section\"\n")
	}
	if in.o.APIBaseURL != "" {
		fmt.Fprintf(&b, "api_base_url = %q\n", in.o.APIBaseURL)
	}
	if in.o.APIKeyFile != "" {
		fmt.Fprintf(&b, "api_key_file = %q\n", in.keyPath())
	}
	return b.Bytes()
}

func (in *Installer) config(ctx context.Context) error {
	if in.o.DryRun {
		in.out("→", "configuration", "would write "+in.o.ConfigPath()+" (0640, root:"+in.o.User+") from what occ istota:setup prints")
		return nil
	}
	want := in.configText()
	var backup string
	return in.step("configuration", func() (string, error) {
		have, err := in.sys.ReadFile(in.o.ConfigPath())
		switch {
		case err != nil:
			return "write " + in.o.ConfigPath() + " (0640, root:" + in.o.User + ")", nil
		case bytes.Equal(have, want):
			return "", nil
		}
		// Changed by hand or by a newer setup: the old file stays beside the new one.
		backup = in.o.ConfigPath() + ".bak"
		return "write " + in.o.ConfigPath() + " (the previous one is kept as " + filepath.Base(backup) + ")", nil
	}, func() error {
		_, gid := in.ids()
		if err := in.sys.MkdirAll(in.o.ConfigDir, 0o750, 0, gid); err != nil {
			return err
		}
		if backup != "" {
			old, err := in.sys.ReadFile(in.o.ConfigPath())
			if err != nil {
				return err
			}
			if err := in.sys.WriteFile(backup, old, 0o640, 0, gid); err != nil {
				return err
			}
		}
		in.changed = true
		return in.sys.WriteFile(in.o.ConfigPath(), want, 0o640, 0, gid)
	})
}

// Unit is the systemd unit for o.
func Unit(o Options) ([]byte, error) {
	o = o.withDefaults()
	t, err := template.New("unit").Parse(unitTemplate)
	if err != nil {
		return nil, err
	}
	// A data folder directly below /var/lib is systemd's to keep (StateDirectory=).
	state := ""
	if rel, ok := strings.CutPrefix(o.DataDir, "/var/lib/"); ok && rel != "" && !strings.Contains(rel, "/") {
		state = rel
	}
	var b bytes.Buffer
	err = t.Execute(&b, struct{ User, Binary, Config, DataDir, StateDirectory string }{o.User, o.Binary, o.ConfigPath(), o.DataDir, state})
	return b.Bytes(), err
}

func (in *Installer) service(ctx context.Context) error {
	unit, err := Unit(in.o)
	if err != nil {
		in.out("✗", "service", err.Error())
		return errStop
	}
	if !in.o.Systemd {
		return in.verifyUnit(ctx, unit)
	}
	if !in.sys.Exists(systemdRunning) {
		in.out("✗", "service", "systemd is not running on this machine: run again with --no-systemd and start `"+
			in.o.Binary+" serve -c "+in.o.ConfigPath()+"` as "+in.o.User+" with your service manager")
		return errStop
	}
	if err := in.step("systemd unit", func() (string, error) {
		if have, err := in.sys.ReadFile(in.o.UnitPath); err == nil && bytes.Equal(have, unit) {
			return "", nil
		}
		return "write " + in.o.UnitPath, nil
	}, func() error {
		in.changed = true
		if err := in.sys.WriteFile(in.o.UnitPath, unit, 0o644, 0, 0); err != nil {
			return err
		}
		_, err := in.sys.Run(ctx, "", "", "systemctl", "daemon-reload")
		return err
	}); err != nil {
		return err
	}
	name := filepath.Base(in.o.UnitPath)
	return in.step("service", func() (string, error) {
		_, active := in.sys.Run(ctx, "", "", "systemctl", "is-active", "--quiet", name)
		_, enabled := in.sys.Run(ctx, "", "", "systemctl", "is-enabled", "--quiet", name)
		switch {
		case active != nil || enabled != nil:
			return "enable and start " + name, nil
		case in.changed:
			return "restart " + name + " (its binary or configuration changed)", nil
		}
		return "", nil
	}, func() error {
		if _, err := in.sys.Run(ctx, "", "", "systemctl", "enable", "--now", name); err != nil {
			return err
		}
		if in.changed {
			_, err := in.sys.Run(ctx, "", "", "systemctl", "restart", name)
			return err
		}
		return nil
	})
}

// verifyUnit checks the unit `--no-systemd` does not install with systemd-analyze, when
// this machine has it.
func (in *Installer) verifyUnit(ctx context.Context, unit []byte) error {
	if _, err := in.sys.LookPath("systemd-analyze"); err != nil {
		in.info("systemd unit", "not installed (--no-systemd); systemd-analyze is not here to check it")
		return nil
	}
	if in.o.DryRun {
		in.out("→", "systemd unit", "would check the unit with systemd-analyze verify")
		return nil
	}
	tmp, err := os.MkdirTemp("", "istota-unit-")
	if err != nil {
		in.out("✗", "systemd unit", err.Error())
		return errStop
	}
	defer os.RemoveAll(tmp)
	path := filepath.Join(tmp, filepath.Base(in.o.UnitPath))
	if err := os.WriteFile(path, unit, 0o644); err != nil {
		in.out("✗", "systemd unit", err.Error())
		return errStop
	}
	if out, err := in.sys.Run(ctx, "", "", "systemd-analyze", "verify", path); err != nil {
		in.out("✗", "systemd unit", "systemd-analyze verify: "+err.Error()+" "+string(out))
		return errStop
	}
	in.info("systemd unit", "not installed (--no-systemd); systemd-analyze verify finds it valid")
	return nil
}

// Uninstall undoes Install: the unit, the binary and its sandbox init, the configuration
// and the account.
// The data folder stays unless Purge.
func (in *Installer) Uninstall(ctx context.Context) error {
	name := filepath.Base(in.o.UnitPath)
	steps := []struct {
		name  string
		check func() (string, error)
		do    func() error
	}{
		{"service", func() (string, error) {
			if !in.sys.Exists(in.o.UnitPath) {
				return "", nil
			}
			return "stop and disable " + name + " and remove " + in.o.UnitPath, nil
		}, func() error {
			booted := in.sys.Exists(systemdRunning)
			if booted {
				// Not enabled or not running is fine: the unit goes either way.
				in.sys.Run(ctx, "", "", "systemctl", "disable", "--now", name)
			}
			if err := in.sys.RemoveAll(in.o.UnitPath); err != nil {
				return err
			}
			if booted {
				_, err := in.sys.Run(ctx, "", "", "systemctl", "daemon-reload")
				return err
			}
			return nil
		}},
		{"binary", existsThen(in.sys, in.o.Binary, "remove "+in.o.Binary), func() error { return in.sys.RemoveAll(in.o.Binary) }},
		{"sandbox init", existsThen(in.sys, in.initPath(), "remove "+in.initPath()), func() error { return in.sys.RemoveAll(in.initPath()) }},
		{"configuration", existsThen(in.sys, in.o.ConfigDir, "remove "+in.o.ConfigDir), func() error { return in.sys.RemoveAll(in.o.ConfigDir) }},
		{"service account", func() (string, error) {
			_, _, ok, err := in.sys.LookupUser(in.o.User)
			if err != nil || !ok {
				return "", err
			}
			return "delete the user " + in.o.User, nil
		}, func() error {
			_, err := in.sys.Run(ctx, "", "", "userdel", in.o.User)
			return err
		}},
	}
	for _, s := range steps {
		if err := in.step(s.name, s.check, s.do); err != nil {
			return err
		}
	}
	in.info("Nextcloud", "the app keeps its bot account and secrets; `occ app:remove istota` removes the app")
	if !in.o.Purge {
		if in.sys.Exists(in.o.DataDir) {
			in.info("data folder", in.o.DataDir+" is kept (memories, history, credentials key); --purge deletes it")
		}
		return nil
	}
	return in.step("data folder", existsThen(in.sys, in.o.DataDir, "delete "+in.o.DataDir), func() error { return in.sys.RemoveAll(in.o.DataDir) })
}

func existsThen(sys System, path, todo string) func() (string, error) {
	return func() (string, error) {
		if sys.Exists(path) {
			return todo, nil
		}
		return "", nil
	}
}
