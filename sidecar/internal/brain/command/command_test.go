package command

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain"
)

// hostLauncher runs the command on the host in its own process group, as the sandbox
// launcher does inside bwrap.
type hostLauncher struct{ env map[string]string }

func (l *hostLauncher) Command(ctx context.Context, argv []string, env map[string]string, stdin io.Reader) (*exec.Cmd, error) {
	l.env = env
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = stdin
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	return cmd, nil
}

func TestShell(t *testing.T) {
	for _, tc := range []struct {
		name, cmd string
		ok        bool
		want      string
	}{
		{"success with output", "echo hello; echo to-stderr >&2", true, "hello\nto-stderr"},
		{"success without output", "true", true, "without output"},
		{"failure keeps output", "echo broken disk; exit 3", false, "exit status 3"},
		{"long output keeps the end", "yes line | head -n 20000; echo THE-END", true, "THE-END"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Shell{}.Run(context.Background(), brain.Request{Prompt: tc.cmd}, &hostLauncher{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.OK != tc.ok || !strings.Contains(res.Text, tc.want) {
				t.Fatalf("got ok=%v text=%q, want ok=%v containing %q", res.OK, res.Text, tc.ok, tc.want)
			}
			if len(res.Text) > MaxOutput+64 {
				t.Fatalf("answer is %d bytes, want at most about %d", len(res.Text), MaxOutput)
			}
		})
	}
}

func TestShellCancelKillsBackgroundChildren(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Shell{}.Run(ctx, brain.Request{Prompt: "sleep 300 & sleep 300"}, &hostLauncher{}, nil)
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a cancelled command reported success")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestShellRefusesEmptyCommand(t *testing.T) {
	if _, err := (Shell{}).Run(context.Background(), brain.Request{Prompt: "  "}, &hostLauncher{}, nil); err == nil {
		t.Fatal("an empty command was run")
	}
}
