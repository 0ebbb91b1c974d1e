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
	if strings.TrimSpace(req.Prompt) == "" {
		return brain.Result{}, errors.New("command: empty command")
	}
	cmd, err := l.Command(ctx, []string{"/bin/sh", "-c", req.Prompt}, map[string]string{"LANG": "C.UTF-8"}, strings.NewReader(""))
	if err != nil {
		return brain.Result{}, fmt.Errorf("command: prepare: %w", err)
	}
	// Output goes to an unlinked temporary file rather than a pipe: a background
	// grandchild holding the pipe open could otherwise keep Wait from returning.
	out, err := os.CreateTemp("", "istota-command-*")
	if err != nil {
		return brain.Result{}, fmt.Errorf("command: output file: %w", err)
	}
	os.Remove(out.Name())
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	runErr := cmd.Run()
	res := brain.Result{DurationMS: time.Since(start).Milliseconds(), Text: tail(out)}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	var exit *exec.ExitError
	switch {
	case runErr == nil:
		res.OK, res.Subtype = true, "success"
		if strings.TrimSpace(res.Text) == "" {
			res.Text = "(The command finished without output.)"
		}
	case errors.As(runErr, &exit):
		res.Subtype = "error_exit"
		res.Text = strings.TrimSpace(fmt.Sprintf("The command failed (%s).\n%s", exit.ProcessState, res.Text))
	default:
		return res, fmt.Errorf("command: run: %w", runErr)
	}
	return res, nil
}

// tail reads the last MaxOutput bytes written to f.
func tail(f *os.File) string {
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return ""
	}
	from := max(size-MaxOutput, 0)
	b := make([]byte, size-from)
	n, _ := f.ReadAt(b, from)
	text := strings.ToValidUTF8(string(b[:n]), "�")
	if from > 0 {
		text = "…" + text
	}
	return strings.TrimRight(text, "\n")
}
