// Package command is the "brain" of an administrator's scheduled command job: it runs
// the job's shell command with /bin/sh inside the task's sandbox, exactly where the
// agent would run, and reports its output as the answer. No model is involved.
package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/brain"
)

// MaxOutput is how much of a command's output becomes its answer; the rest is cut from
// the front, so the end (where errors usually are) is kept.
const MaxOutput = 16 << 10

// Shell runs scheduled commands.
type Shell struct{}

// Run runs req.Prompt as a /bin/sh command line through l. Exit status 0 is success;
// anything else is a failed run whose answer says how it ended. A cancelled ctx kills the
// command's process group (the launcher arranges it) and returns ctx's error.
func (Shell) Run(ctx context.Context, req brain.Request, l brain.Launcher, _ func(brain.Event)) (brain.Result, error) {
	start := time.Now()
	out, state, err := Exec(ctx, l, req.Prompt, MaxOutput)
	res := brain.Result{DurationMS: time.Since(start).Milliseconds(), Text: text(out)}
	if err != nil {
		return res, err
	}
	if state.Success() {
		res.OK, res.Subtype = true, "success"
		if strings.TrimSpace(res.Text) == "" {
			res.Text = "(The command finished without output.)"
		}
		return res, nil
	}
	res.Subtype = "error_exit"
	res.Text = strings.TrimSpace(fmt.Sprintf("The command failed (%s).\n%s", state, res.Text))
	return res, nil
}

// Exec runs cmdline with /bin/sh through l and returns the last maxOutput bytes of its
// combined output and how it ended. An error means it did not run to an end of its
// own: it could not start, or ctx stopped it (the launcher kills its process group).
// Scheduled command jobs and the heartbeat shell-command check both run through it.
func Exec(ctx context.Context, l brain.Launcher, cmdline string, maxOutput int64) ([]byte, *os.ProcessState, error) {
	if strings.TrimSpace(cmdline) == "" {
		return nil, nil, errors.New("command: empty command")
	}
	cmd, err := l.Command(ctx, []string{"/bin/sh", "-c", cmdline}, map[string]string{"LANG": "C.UTF-8"}, strings.NewReader(""))
	if err != nil {
		return nil, nil, fmt.Errorf("command: prepare: %w", err)
	}
	// Output goes to an unlinked temporary file rather than a pipe: a background
	// grandchild holding the pipe open could otherwise keep Wait from returning.
	f, err := os.CreateTemp("", "istota-command-*")
	if err != nil {
		return nil, nil, fmt.Errorf("command: output file: %w", err)
	}
	os.Remove(f.Name())
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	runErr := cmd.Run()
	out := tail(f, maxOutput)
	if ctx.Err() != nil {
		return out, cmd.ProcessState, ctx.Err()
	}
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		return out, cmd.ProcessState, fmt.Errorf("command: run: %w", runErr)
	}
	return out, cmd.ProcessState, nil
}

// tail reads the last n bytes written to f; a cut start is marked with "…".
func tail(f *os.File, n int64) []byte {
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil
	}
	from := max(size-n, 0)
	b := make([]byte, size-from)
	k, _ := f.ReadAt(b, from)
	if from > 0 {
		return append([]byte("…"), b[:k]...)
	}
	return b[:k]
}

// text is output as an answer: valid UTF-8 without the final newline.
func text(out []byte) string {
	return strings.TrimRight(strings.ToValidUTF8(string(out), "�"), "\n")
}
