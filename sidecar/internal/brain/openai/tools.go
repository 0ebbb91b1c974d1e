package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/brain"
)

// Tool names, as the model calls them and as progress events name them.
const (
	ToolBash      = "bash"
	ToolReadFile  = "read_file"
	ToolWriteFile = "write_file"
)

// toolDef is one entry of the request's "tools".
type toolDef struct {
	Type     string      `json:"type"`
	Function functionDef `json:"function"`
}

type functionDef struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"`
}

func stringParam(desc string) map[string]any {
	return map[string]any{"type": "string", "description": desc}
}

func objectOf(props map[string]any, required ...string) map[string]any {
	return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}

// toolDefs is the same for every request: the model may run a shell command, read a file
// and write a file, all inside the user's sandbox.
func toolDefs() []toolDef {
	return []toolDef{
		{Type: "function", Function: functionDef{
			Name:        ToolBash,
			Description: "Run a shell command with /bin/sh -c in the user's sandbox (working directory /workspace). Returns standard output and error together, and the exit status when it is not 0.",
			Parameters:  objectOf(map[string]any{"command": stringParam("The command line to run.")}, "command"),
		}},
		{Type: "function", Function: functionDef{
			Name:        ToolReadFile,
			Description: "Read a text file from the user's sandbox. Relative paths are relative to /workspace.",
			Parameters:  objectOf(map[string]any{"path": stringParam("The file to read.")}, "path"),
		}},
		{Type: "function", Function: functionDef{
			Name:        ToolWriteFile,
			Description: "Create or replace a file in the user's sandbox with the given content; missing parent folders are created. Relative paths are relative to /workspace.",
			Parameters: objectOf(map[string]any{
				"path":    stringParam("The file to write."),
				"content": stringParam("The complete new content of the file."),
			}, "path", "content"),
		}},
	}
}

// Shell scripts of the file tools. The path is always "$1" (an argument, never part of
// the script) and file content travels on stdin, so nothing the model writes is ever
// parsed by the shell.
const (
	readScript  = `exec head -c "$2" -- "$1"`
	writeScript = `dir=$(dirname -- "$1") && mkdir -p -- "$dir" && cat > "$1" && wc -c < "$1"`
)

// exitGrace is how long a tool's output pipe may stay open after the process exited
// (a background child holding it) before reading stops.
const exitGrace = 2 * time.Second

// runTool executes one tool call in the sandbox and returns what the model is told. An
// error means the tool could not be run at all (the sandbox failed, or ctx ended).
func (r *run) runTool(ctx context.Context, c toolCall) (string, error) {
	name := c.Function.Name
	var args map[string]any
	argErr := json.Unmarshal([]byte(c.Function.Arguments), &args)
	summary := summarize(name, args, string(c.Function.Arguments))
	r.onEvent(brain.Event{Kind: brain.ToolUse, Tool: name, ToolInput: summary})
	str := func(key string) (string, error) {
		v, ok := args[key].(string)
		if !ok {
			return "", fmt.Errorf("the %q argument (a string) is missing", key)
		}
		if strings.ContainsRune(v, 0) {
			return "", fmt.Errorf("the %q argument contains a NUL byte", key)
		}
		return v, nil
	}
	var (
		out    string
		failed bool
		err    error
	)
	approved, reason := true, ""
	if r.req.Approve != nil && argErr == nil {
		if approved, reason, err = r.req.Approve(ctx, name, json.RawMessage(c.Function.Arguments)); err != nil {
			return "", &runError{fmt.Errorf("approvals check for %s: %w", name, err)}
		}
	}
	switch {
	case argErr != nil:
		out, failed = fmt.Sprintf("Error: the arguments are not a JSON object: %v", argErr), true
	case !approved:
		out, failed = "Error: not run: "+reason, true
	case name == ToolBash:
		var cmd string
		if cmd, err = str("command"); err == nil {
			out, failed, err = r.bash(ctx, cmd)
		}
	case name == ToolReadFile:
		var path string
		if path, err = str("path"); err == nil {
			out, failed, err = r.readFile(ctx, path)
		}
	case name == ToolWriteFile:
		var path, content string
		if path, err = str("path"); err == nil {
			if content, err = str("content"); err == nil {
				out, failed, err = r.writeFile(ctx, path, content)
			}
		}
	default:
		out, failed = fmt.Sprintf("Error: there is no tool %q; the tools are %s, %s and %s.", name, ToolBash, ToolReadFile, ToolWriteFile), true
	}
	if err != nil {
		if isRunError(err) {
			return "", err
		}
		// A problem with the model's arguments: the model is told and may try again.
		out, failed = "Error: "+err.Error(), true
	}
	r.onEvent(brain.Event{Kind: brain.ToolResult, Tool: name, Text: clip(out, 300), IsError: failed})
	return out, nil
}

// runError marks a failure to run a tool at all, which ends the run.
type runError struct{ err error }

func (e *runError) Error() string { return e.err.Error() }
func (e *runError) Unwrap() error { return e.err }

func isRunError(err error) bool {
	var re *runError
	return errors.As(err, &re)
}

func (r *run) bash(ctx context.Context, command string) (string, bool, error) {
	if strings.TrimSpace(command) == "" {
		return "", false, errors.New("the command is empty")
	}
	limit := r.b.cfg.MaxToolOutput
	out := &headTail{limit: limit}
	st, err := r.exec(ctx, ToolBash, []string{"/bin/sh", "-c", command}, nil, out, out)
	if err != nil {
		return "", false, err
	}
	text := out.String()
	switch {
	case st.timedOut:
		text = joinLines(text, fmt.Sprintf("[stopped: the command ran longer than %s]", r.b.cfg.ToolTimeout))
	case st.code != 0:
		text = joinLines(text, fmt.Sprintf("[exit status %d]", st.code))
	case text == "":
		text = "(no output)"
	}
	return text, st.timedOut || st.code != 0, nil
}

func (r *run) readFile(ctx context.Context, path string) (string, bool, error) {
	if path == "" {
		return "", false, errors.New("the path is empty")
	}
	limit := r.b.cfg.MaxToolOutput
	// One byte more than shown tells whether the file goes on.
	stdout := &headTail{limit: limit + 1, headOnly: true}
	stderr := &headTail{limit: 2 << 10}
	st, err := r.exec(ctx, ToolReadFile, []string{"/bin/sh", "-c", readScript, "read_file", path, strconv.Itoa(limit + 1)}, nil, stdout, stderr)
	if err != nil {
		return "", false, err
	}
	if st.timedOut {
		return fmt.Sprintf("Error: reading %s took longer than %s", path, r.b.cfg.ToolTimeout), true, nil
	}
	if st.code != 0 {
		return "Error: " + firstNonBlank(strings.TrimSpace(stderr.String()), fmt.Sprintf("cannot read %s (exit status %d)", path, st.code)), true, nil
	}
	b := stdout.Bytes()
	more := len(b) > limit
	if more {
		b = b[:limit]
	}
	if bytes.IndexByte(b, 0) >= 0 {
		return fmt.Sprintf("Error: %s is a binary file; inspect it with bash (e.g. file, xxd | head)", path), true, nil
	}
	text := validPrefix(b)
	if more {
		text += fmt.Sprintf("\n[the file goes on: only its first %d bytes are shown; read further with bash, e.g. tail -c +%d or sed -n]", limit, limit+1)
	}
	return text, false, nil
}

func (r *run) writeFile(ctx context.Context, path, content string) (string, bool, error) {
	if path == "" {
		return "", false, errors.New("the path is empty")
	}
	stdout := &headTail{limit: 256}
	stderr := &headTail{limit: 2 << 10}
	st, err := r.exec(ctx, ToolWriteFile, []string{"/bin/sh", "-c", writeScript, "write_file", path}, strings.NewReader(content), stdout, stderr)
	if err != nil {
		return "", false, err
	}
	if st.timedOut {
		return fmt.Sprintf("Error: writing %s took longer than %s", path, r.b.cfg.ToolTimeout), true, nil
	}
	if st.code != 0 {
		return "Error: " + firstNonBlank(strings.TrimSpace(stderr.String()), fmt.Sprintf("cannot write %s (exit status %d)", path, st.code)), true, nil
	}
	return fmt.Sprintf("Wrote %s bytes to %s.", strings.TrimSpace(stdout.String()), path), false, nil
}

// exitState is how a tool's process ended.
type exitState struct {
	code     int
	timedOut bool
}

// exec runs argv in the sandbox with its own time limit, writing its output to stdout
// and stderr (which may be the same writer). Output goes through pipes of our own so
// that reading can be bounded once the process has exited.
func (r *run) exec(ctx context.Context, tool string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (exitState, error) {
	tctx, cancel := context.WithTimeout(ctx, r.b.cfg.ToolTimeout)
	// Cancelling also ends the sandbox's per-call services once the tool is done.
	defer cancel()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	cmd, err := r.l.Command(tctx, argv, map[string]string{"LANG": "C.UTF-8"}, stdin)
	if err != nil {
		return exitState{}, &runError{fmt.Errorf("openai: tool %s: prepare the sandbox: %w", tool, err)}
	}
	pipes := []io.Writer{stdout}
	if stderr != stdout {
		pipes = append(pipes, stderr)
	}
	var readers, writers []*os.File
	defer func() {
		for _, f := range readers {
			f.Close()
		}
	}()
	for range pipes {
		pr, pw, err := os.Pipe()
		if err != nil {
			for _, w := range writers {
				w.Close()
			}
			return exitState{}, &runError{fmt.Errorf("openai: tool %s: pipe: %w", tool, err)}
		}
		readers, writers = append(readers, pr), append(writers, pw)
	}
	cmd.Stdout = writers[0]
	cmd.Stderr = writers[len(writers)-1]
	err = cmd.Start()
	for _, w := range writers {
		w.Close()
	}
	if err != nil {
		return exitState{}, &runError{fmt.Errorf("openai: tool %s: start: %w", tool, err)}
	}
	if cmd.Cancel == nil {
		// The launcher did not tie the command to the context; at least stop the process.
		stop := context.AfterFunc(tctx, func() { _ = cmd.Process.Kill() })
		defer stop()
	}
	var wg sync.WaitGroup
	for i, pr := range readers {
		wg.Add(1)
		go func(w io.Writer, pr *os.File) {
			defer wg.Done()
			_, _ = io.Copy(w, pr)
		}(pipes[i], pr)
	}
	waitErr := cmd.Wait()
	deadline := time.Now().Add(exitGrace)
	for _, pr := range readers {
		_ = pr.SetReadDeadline(deadline)
	}
	wg.Wait()
	if ctx.Err() != nil {
		return exitState{}, &runError{ctx.Err()}
	}
	st := exitState{timedOut: errors.Is(tctx.Err(), context.DeadlineExceeded)}
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &ee):
		st.code = ee.ExitCode()
		if st.code < 0 {
			st.code = 128 + 9 // killed by a signal
		}
	case st.timedOut:
	default:
		return exitState{}, &runError{fmt.Errorf("openai: tool %s: %w", tool, waitErr)}
	}
	return st, nil
}

// headTail keeps the first and last limit/2 bytes written to it (or only the first
// limit bytes with headOnly), counting what it drops, so that a tool printing
// gigabytes costs a bounded amount of memory while the model still sees both ends.
type headTail struct {
	limit    int
	headOnly bool

	mu      sync.Mutex
	head    []byte
	tail    []byte
	dropped int64
}

func (h *headTail) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(p)
	headMax := h.limit
	if !h.headOnly {
		headMax = h.limit / 2
	}
	if room := headMax - len(h.head); room > 0 {
		take := min(room, len(p))
		h.head = append(h.head, p[:take]...)
		p = p[take:]
	}
	if h.headOnly {
		h.dropped += int64(len(p))
		return n, nil
	}
	tailMax := h.limit - headMax
	h.tail = append(h.tail, p...)
	if over := len(h.tail) - tailMax; over > 0 {
		h.dropped += int64(over)
		h.tail = append(h.tail[:0], h.tail[over:]...)
	}
	return n, nil
}

// Bytes is the head (headOnly) or head and tail together.
func (h *headTail) Bytes() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append(append([]byte(nil), h.head...), h.tail...)
}

// String is the kept output as valid UTF-8, with a marker where bytes were dropped.
func (h *headTail) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dropped == 0 || h.headOnly {
		return strings.TrimRight(strings.ToValidUTF8(string(h.head)+string(h.tail), "�"), "\n")
	}
	head := validPrefix(h.head)
	tail := validSuffix(h.tail)
	return fmt.Sprintf("%s\n[… %d bytes of output left out …]\n%s", head, h.dropped, strings.TrimRight(tail, "\n"))
}

// validPrefix is b as text without a character cut at its end.
func validPrefix(b []byte) string {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				b = b[:i]
			}
			break
		}
	}
	return strings.ToValidUTF8(string(b), "�")
}

// validSuffix is b as text without a character cut at its start.
func validSuffix(b []byte) string {
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	return strings.ToValidUTF8(string(b), "�")
}

func joinLines(a, b string) string {
	if a == "" {
		return b
	}
	return a + "\n" + b
}

// summarize is the short input summary of a tool call shown in progress messages.
func summarize(name string, args map[string]any, raw string) string {
	var s string
	switch name {
	case ToolBash:
		s, _ = args["command"].(string)
	case ToolReadFile, ToolWriteFile:
		s, _ = args["path"].(string)
	}
	if s == "" {
		s = raw
	}
	return clip(s, 200)
}
