package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/istota/istota/sidecar/internal/install"
)

// healthWait is how long the installer waits for a started service to answer.
const healthWait = 90 * time.Second

// cmdInstall is `istota install`: the steps of deploy/INSTALL.md in one idempotent
// command, run as root from the binary in the app's folder. It ends with the doctor's
// lines, run as the service account against the service just started.
func cmdInstall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	var o install.Options
	fs.StringVar(&o.Nextcloud, "nextcloud", "", "Nextcloud's folder, holding occ (default: found above this binary)")
	fs.StringVar(&o.WebUser, "web-user", "", "the web server's account, which runs occ (default: the owner of config/config.php)")
	fs.StringVar(&o.User, "user", install.DefaultUser, "the service account the sidecar runs as (created when missing)")
	fs.StringVar(&o.Binary, "binary", install.DefaultBinary, "where the sidecar binary is installed")
	fs.StringVar(&o.ConfigDir, "config-dir", install.DefaultConfigDir, "the configuration folder (istota.toml, api_key)")
	fs.StringVar(&o.DataDir, "data-dir", install.DefaultDataDir, "the data folder (database, workspaces, keys)")
	fs.StringVar(&o.UnitPath, "unit", install.DefaultUnit, "the systemd unit file")
	fs.StringVar(&o.Listen, "listen", install.DefaultListen, "the address the sidecar listens on; Nextcloud reaches it there")
	fs.StringVar(&o.Claude, "claude", "", "the claude CLI to run agents with (default: on PATH, else installed with npm)")
	fs.StringVar(&o.APIKeyFile, "api-key-file", "", "a file holding the model API key (default: paste it into the admin section)")
	fs.StringVar(&o.APIBaseURL, "api-base-url", "", "the model API's base URL (default: the brain's own)")
	dryRun := fs.Bool("dry-run", false, "print each step without doing it")
	uninstall := fs.Bool("uninstall", false, "undo the installation; the data folder stays unless --purge")
	purge := fs.Bool("purge", false, "with --uninstall: delete the data folder too (memories, history, keys)")
	noSystemd := fs.Bool("no-systemd", false, "do not install the unit: check it, then run the service in the foreground as the service account")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "istota install: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	if *purge && !*uninstall {
		fmt.Fprintln(stderr, "istota install: --purge only goes with --uninstall")
		return errUsage
	}
	if os.Geteuid() != 0 && !*dryRun {
		fmt.Fprintln(stderr, "istota install: run it as root (sudo); --dry-run shows what it would do")
		return ExitCode(1)
	}
	src, err := os.Executable()
	if err == nil {
		src, err = filepath.EvalSymlinks(src)
	}
	if err != nil {
		return fmt.Errorf("find this binary: %w", err)
	}
	o.Source, o.DryRun, o.Purge, o.Systemd = src, *dryRun, *purge, !*noSystemd

	report := func(mark, step, detail string) { fmt.Fprintf(stdout, "%s %s: %s\n", mark, step, detail) }
	in := install.New(o, install.OS{}, report)
	o = in.Options()
	if *uninstall {
		if err := in.Uninstall(ctx); err != nil {
			return ExitCode(1)
		}
		return nil
	}
	if err := in.Install(ctx); err != nil {
		return ExitCode(1)
	}
	if o.DryRun {
		return nil
	}
	if o.Systemd {
		if err := waitHealthy(ctx, o.Listen, nil); err != nil {
			report("✗", "service", err.Error()+"; see `journalctl -u "+strings.TrimSuffix(filepath.Base(o.UnitPath), ".service")+"`")
			return ExitCode(1)
		}
		report("✓", "service", "answers at http://"+o.Listen)
		return runDoctor(ctx, o, stdout)
	}
	return runForeground(ctx, o, report, stdout, stderr)
}

// serviceEnv is the environment the unit gives the service.
func serviceEnv(o install.Options, home string) []string {
	return append(install.AccountEnv(o.User, home), "ISTOTA_DATA_DIR="+o.DataDir)
}

// serviceCommand runs the installed binary with args as the unit would: as the service
// account, in the data folder, with umask 0077.
func serviceCommand(ctx context.Context, o install.Options, args ...string) (*exec.Cmd, error) {
	cred, home, err := install.Credential(o.User)
	if err != nil {
		return nil, err
	}
	// sh sets the umask the unit's UMask= sets, then becomes the binary.
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", `umask 077 && exec "$0" "$@"`, o.Binary}, args...)...)
	cmd.Dir = o.DataDir
	cmd.Env = serviceEnv(o, home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd, nil
}

// runDoctor prints `istota doctor` as the service account sees it. A missing model API
// key (or subscription token) is the one expected gap (the admin pastes it into the admin section next); any
// other failed check fails the installation.
func runDoctor(ctx context.Context, o install.Options, stdout io.Writer) error {
	cmd, err := serviceCommand(ctx, o, "doctor", "-c", o.ConfigPath())
	if err != nil {
		return err
	}
	out, _ := cmd.CombinedOutput()
	fmt.Fprintf(stdout, "\nistota doctor:\n%s", out)
	var failed, keyMissing bool
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "✗") {
			if strings.HasPrefix(line, "✗ model login: no model API key") {
				keyMissing = true
				continue
			}
			failed = true
		}
	}
	switch {
	case failed:
		fmt.Fprintln(stdout, "\nSome checks failed: fix what they name and run `istota install` again.")
		return ExitCode(1)
	case keyMissing:
		fmt.Fprintln(stdout, "\nLast step: paste the model API key (or a Claude subscription token from `claude setup-token`) into Nextcloud's admin settings (Istota → Model); it is used at once. Then mention the bot in Talk.")
	default:
		fmt.Fprintln(stdout, "\nReady: mention the bot in Talk.")
	}
	return nil
}

// runForeground is --no-systemd: the service runs in this process's foreground, as the
// service account, until the installer is interrupted (SIGINT or SIGTERM stop it
// cleanly, as systemctl stop would).
func runForeground(ctx context.Context, o install.Options, report install.Report, stdout, stderr io.Writer) error {
	cmd, err := serviceCommand(context.WithoutCancel(ctx), o, "serve", "-c", o.ConfigPath())
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		report("✗", "service", "start "+o.Binary+": "+err.Error())
		return ExitCode(1)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := waitHealthy(ctx, o.Listen, exited); err != nil {
		cmd.Process.Signal(syscall.SIGTERM)
		report("✗", "service", err.Error())
		<-exited
		return ExitCode(1)
	}
	report("✓", "service", fmt.Sprintf("running in the foreground as %s (pid %d), answering at http://%s; stop it with Ctrl-C", o.User, cmd.Process.Pid, o.Listen))
	doctorErr := runDoctor(ctx, o, stdout)
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("the service stopped: %w", err)
		}
		return doctorErr
	case <-ctx.Done():
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(35 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
	return doctorErr
}

// waitHealthy polls /v1/health until it answers 200; exited (may be nil) reports a
// service that stopped first.
func waitHealthy(ctx context.Context, listen string, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, healthWait)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	url := "http://" + listen + "/v1/health"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			if err == nil {
				err = errors.New("exited")
			}
			return fmt.Errorf("the service stopped before it answered: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("the service did not answer at %s within %s", url, healthWait)
		case <-tick.C:
		}
	}
}
