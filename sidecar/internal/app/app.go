// Package app is the composition root: it parses the command line, loads the
// configuration and wires every component. Only this package knows them all.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/istota/istota/sidecar/internal/config"
	"github.com/istota/istota/sidecar/internal/credproxy"
	"github.com/istota/istota/sidecar/internal/sandbox"
)

// Version is set at build time with -ldflags "-X …/app.Version=…".
var Version = "0.1.0-dev"

// Run executes one istota command. args excludes the program name.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stderr)
		return errUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return cmdServe(ctx, rest, stdout, stderr)
	case "task":
		return cmdTask(ctx, rest, stdout, stderr)
	case "list":
		return cmdList(ctx, rest, stdout, stderr)
	case "show":
		return cmdShow(ctx, rest, stdout, stderr)
	case "config":
		return cmdConfig(rest, stdout, stderr)
	case "sleep":
		return cmdSleep(ctx, rest, stdout, stderr)
	case "doctor":
		return cmdDoctor(ctx, rest, stdout, stderr)
	case "install":
		return cmdInstall(ctx, rest, stdout, stderr)
	case "skill":
		// Inside the sandbox: a client of the credential proxy, with no config, database
		// or secret of its own.
		if code := credproxy.RunClient(rest, stdin, stdout, stderr); code != 0 {
			return ExitCode(code)
		}
		return nil
	case "hook":
		// Inside the sandbox: Claude Code's PreToolUse hook, a client of the approvals
		// check behind the skills socket.
		if code := credproxy.RunHook(rest, stdin, stdout, stderr); code != 0 {
			return ExitCode(code)
		}
		return nil
	case "sandbox-init":
		// Runs inside the sandbox as its init when istota-init is not beside this binary
		// (an older install), and sets the command's limits when util-linux prlimit is
		// missing: no config, no database, no secrets.
		if code := sandbox.RunInit(rest, stdin, stdout, stderr); code != 0 {
			return ExitCode(code)
		}
		return nil
	case "version", "--version":
		fmt.Fprintln(stdout, "istota", Version)
		return nil
	case "help", "-h", "--help":
		printUsage(stdout)
		return nil
	default:
		fmt.Fprintf(stderr, "istota: unknown command %q\n\n", cmd)
		printUsage(stderr)
		return errUsage
	}
}

// ExitCode is an error that carries a process exit status without a message.
type ExitCode int

func (e ExitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

var errUsage = ExitCode(2)

func printUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: istota <command> [options]

Commands:
  serve                     run the sidecar (HTTP API, workers, Talk delivery)
  task "…" -u USER          run a task for USER and print the answer (--dry-run prints the prompt)
  list [-u USER] [-n N]     list recent tasks
  show ID                   show one task with its events
  config                    print the effective configuration, secrets redacted
  skill NAME ARGS…          (inside a sandbox) run a skill through the credential proxy
  sleep -u USER              run the nightly memory extraction now (--channel TOKEN for a conversation)
  doctor                    check configuration, database, agent, sandbox, Nextcloud and the signed round trip
  install                   (as root) set up the service on this Nextcloud server: account, binary, agent,
                            occ istota:setup, /etc/istota/istota.toml, systemd unit; --dry-run, --uninstall [--purge]
  version                   print the version

Every command takes -c FILE (or ISTOTA_CONFIG) to name the configuration file.
`)
}

// commonFlags registers -c and returns a loader for the configuration.
func commonFlags(fs *flag.FlagSet) func() (config.Config, error) {
	path := fs.String("c", os.Getenv("ISTOTA_CONFIG"), "configuration file (TOML)")
	return func() (config.Config, error) { return config.Load(*path, os.Environ()) }
}

func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(reorder(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	return nil
}

// reorder moves flags before positional arguments so `istota task "hi" -u alice` works.
func reorder(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if strings.Contains(name, "=") {
				continue
			}
			if f := fs.Lookup(name); f != nil {
				if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
					continue
				}
				if i+1 < len(args) {
					flags = append(flags, args[i+1])
					i++
				}
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func cmdConfig(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	load := commonFlags(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	cfg, err := load()
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, cfg.Redacted())
	return nil
}
