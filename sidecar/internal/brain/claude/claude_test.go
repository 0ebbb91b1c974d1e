package claude

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain"
)

func TestArgs(t *testing.T) {
	base := []string{"/opt/claude/bin/claude", "-p", "--output-format=stream-json", "--verbose",
		"--permission-mode=bypassPermissions", "--setting-sources=user", "--strict-mcp-config", `--mcp-config={"mcpServers":{}}`,
		"--system-prompt-snapshot=off"}
	const session = "0b5c1c1e-9d2a-4c1e-8f3e-2a6b7c8d9e0f"
	tests := []struct {
		name string
		cfg  Config
		req  brain.Request
		want []string // after base
	}{
		{name: "defaults", req: brain.Request{Prompt: "hi"}},
		{name: "config model and turns", cfg: Config{Model: "sonnet", MaxTurns: 12},
			req: brain.Request{Prompt: "hi"}, want: []string{"--model=sonnet", "--max-turns=12"}},
		{name: "request overrides", cfg: Config{Model: "sonnet", MaxTurns: 12},
			req: brain.Request{Prompt: "hi", Model: "opus", MaxTurns: 3}, want: []string{"--model=opus", "--max-turns=3"}},
		{name: "system prompt starting with a dash stays a value",
			req: brain.Request{Prompt: "hi", SystemPrompt: "--dangerously-skip-permissions"}, want: []string{"--append-system-prompt=--dangerously-skip-permissions"}},
		{name: "new session", req: brain.Request{Prompt: "hi", SessionID: session}, want: []string{"--session-id=" + session}},
		{name: "resume", req: brain.Request{Prompt: "hi", SessionID: session, Resume: true}, want: []string{"--resume=" + session}},
		{name: "extra args last", cfg: Config{ExtraArgs: []string{"--settings", "/etc/istota/claude.json"}},
			req: brain.Request{Prompt: "hi"}, want: []string{"--settings", "/etc/istota/claude.json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Binary = "/opt/claude/bin/claude"
			got, err := New(tt.cfg, nil).Args(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if want := append(slices.Clone(base), tt.want...); !slices.Equal(got, want) {
				t.Errorf("argv\n got %q\nwant %q", got, want)
			}
			if slices.Contains(got, tt.req.Prompt) {
				t.Errorf("the prompt is in argv: %q", got)
			}
		})
	}
}

func TestArgsRejects(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		req  brain.Request
	}{
		{name: "no binary", req: brain.Request{Prompt: "hi"}},
		{name: "empty prompt", cfg: Config{Binary: "claude"}, req: brain.Request{Prompt: " \n"}},
		{name: "session id not a UUID", cfg: Config{Binary: "claude"}, req: brain.Request{Prompt: "hi", SessionID: "--help"}},
		{name: "resume without id", cfg: Config{Binary: "claude"}, req: brain.Request{Prompt: "hi", Resume: true}},
		{name: "system prompt too long for argv", cfg: Config{Binary: "claude"}, req: brain.Request{Prompt: "hi", SystemPrompt: strings.Repeat("x", 121<<10)}},
		{name: "NUL in system prompt", cfg: Config{Binary: "claude"}, req: brain.Request{Prompt: "hi", SystemPrompt: "a\x00b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if argv, err := New(tt.cfg, nil).Args(tt.req); err == nil {
				t.Errorf("Args accepted it: %q", argv)
			}
			// Run refuses before launching anything.
			l := &failLauncher{}
			if _, err := New(tt.cfg, nil).Run(context.Background(), tt.req, l, nil); err == nil || l.called {
				t.Errorf("Run: err %v, launcher called %v", err, l.called)
			}
		})
	}
}

type failLauncher struct{ called bool }

func (l *failLauncher) Command(context.Context, []string, map[string]string, io.Reader) (*exec.Cmd, error) {
	l.called = true
	return nil, errors.New("sandbox unavailable")
}

func TestEnv(t *testing.T) {
	for _, tt := range []struct {
		retries int
		want    string
	}{{0, "2"}, {5, "5"}, {-1, "0"}} {
		env := New(Config{MaxRetries: tt.retries}, nil).Env()
		want := map[string]string{"DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_MAX_RETRIES": tt.want}
		if fmt.Sprint(env) != fmt.Sprint(want) {
			t.Errorf("MaxRetries %d: env %v, want %v", tt.retries, env, want)
		}
	}
}

func TestRunLauncherError(t *testing.T) {
	_, err := New(Config{Binary: "claude"}, nil).Run(context.Background(), brain.Request{Prompt: "hi"}, &failLauncher{}, nil)
	if err == nil || !strings.Contains(err.Error(), "sandbox unavailable") {
		t.Errorf("err = %v, want the launcher's error", err)
	}
}

func TestRunStartError(t *testing.T) {
	l := &testLauncher{dir: t.TempDir(), home: t.TempDir()}
	_, err := New(Config{Binary: "/nonexistent/claude"}, nil).Run(context.Background(), brain.Request{Prompt: "hi"}, l, nil)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v, want a start error for the missing binary", err)
	}
}

// standIn runs script with sh instead of the CLI (a real process, real pipes), with the
// stream in $STREAM_FILE and the CLI's argv as "$@".
func standIn(t *testing.T, stream, script string) *testLauncher {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "stream.jsonl")
	if err := os.WriteFile(file, []byte(stream), 0o644); err != nil {
		t.Fatal(err)
	}
	return &testLauncher{dir: dir, home: dir, env: map[string]string{"STREAM_FILE": file, "ANTHROPIC_API_KEY": "sk-test-placeholder-value"},
		rewrite: func(argv []string) []string { return append([]string{"/bin/sh", "-c", script, "sh"}, argv[1:]...) }}
}

// The verdict comes from the result line, not the exit code.
func TestRunVerdictIgnoresExitCode(t *testing.T) {
	ok := `{"type":"system","subtype":"init","session_id":"s"}` + "\n" + `{"type":"result","subtype":"success","is_error":false,"result":"fine"}` + "\n"
	failed := `{"type":"result","subtype":"success","is_error":true,"api_error_status":529,"terminal_reason":"api_error","result":"API Error: 529"}` + "\n"
	tests := []struct {
		name, stream string
		exit         int
		wantOK       bool
	}{
		{"success exit 1", ok, 1, true},
		{"success exit 0", ok, 0, true},
		{"error exit 0", failed, 0, false},
		{"error exit 1", failed, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := standIn(t, tt.stream, fmt.Sprintf(`cat "$STREAM_FILE"; exit %d`, tt.exit))
			res, err := New(Config{Binary: "claude"}, testLogger(t)).Run(context.Background(), brain.Request{Prompt: "hi"}, l, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.OK != tt.wantOK {
				t.Errorf("OK = %v, want %v (%+v)", res.OK, tt.wantOK, res)
			}
		})
	}
}

// The prompt reaches the process on stdin.
func TestRunPromptOnStdin(t *testing.T) {
	l := standIn(t, "", `printf '{"type":"result","subtype":"success","is_error":false,"result":"%s"}\n' "$(cat)"`)
	prompt := "a prompt with 'quotes' and no newline"
	res, err := New(Config{Binary: "claude"}, testLogger(t)).Run(context.Background(), brain.Request{Prompt: prompt}, l, nil)
	if err != nil || res.Text != prompt {
		t.Errorf("result %+v, err %v: want the prompt echoed from stdin", res, err)
	}
}

// Without a result line the run is a failure carrying the stderr tail, with secrets the
// launcher set redacted.
func TestRunNoResult(t *testing.T) {
	l := standIn(t, `{"type":"system","subtype":"init","session_id":"s-3"}`+"\n",
		`cat "$STREAM_FILE"; i=0; while [ $i -lt 300 ]; do echo "noise line $i"; i=$((i+1)); done >&2; echo "fatal: key $ANTHROPIC_API_KEY rejected" >&2; exit 3`)
	res, err := New(Config{Binary: "claude"}, testLogger(t)).Run(context.Background(), brain.Request{Prompt: "hi"}, l, nil)
	if !errors.Is(err, ErrNoResult) {
		t.Fatalf("err = %v, want ErrNoResult", err)
	}
	if !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "fatal: key [redacted] rejected") {
		t.Errorf("error %q lacks the exit status or the last stderr line", err)
	}
	if strings.Contains(res.StderrTail, "sk-test-placeholder-value") || strings.Contains(err.Error(), "sk-test-placeholder-value") {
		t.Errorf("the key leaked: %q / %q", res.StderrTail, err)
	}
	if len(res.StderrTail) > stderrTailMax || strings.Contains(res.StderrTail, "noise line 0\n") || !strings.HasSuffix(res.StderrTail, "[redacted] rejected\n") {
		t.Errorf("stderr tail (%d bytes) is not the last %d bytes: %q", len(res.StderrTail), stderrTailMax, res.StderrTail)
	}
	if res.SessionID != "s-3" || res.OK {
		t.Errorf("result %+v", res)
	}
}

// A grandchild that keeps stdout open after the CLI exited does not hang the run.
func TestRunStdoutHeldByGrandchild(t *testing.T) {
	marker := fmt.Sprintf("200.%d%06d", os.Getpid(), time.Now().UnixNano()%1000000)
	l := standIn(t, `{"type":"result","subtype":"success","is_error":false,"result":"done"}`+"\n",
		`cat "$STREAM_FILE"; sleep `+marker+` & exit 0`)
	t.Cleanup(func() {
		for _, pid := range pidsWith("sleep\x00" + marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	done := make(chan struct{})
	var res brain.Result
	var err error
	go func() {
		defer close(done)
		res, err = New(Config{Binary: "claude"}, testLogger(t)).Run(context.Background(), brain.Request{Prompt: "hi"}, l, nil)
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Run hung on stdout held open by a grandchild")
	}
	if err != nil || !res.OK || res.Text != "done" {
		t.Errorf("result %+v, err %v", res, err)
	}
	if len(pidsWith("sleep\x00"+marker)) == 0 {
		t.Error("the grandchild is gone: the test did not test anything")
	}
}

// Without a ctx-aware command from the launcher, cancelling still stops the CLI.
func TestRunCancelPlainCommand(t *testing.T) {
	l := &plainLauncher{}
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{notify: func(e brain.Event) {
		if e.Kind == brain.Init {
			cancel()
		}
	}}
	done := make(chan error, 1)
	go func() {
		_, err := New(Config{Binary: "claude"}, testLogger(t)).Run(ctx, brain.Request{Prompt: "hi"}, l, c.add)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("Run did not stop")
	}
}

// plainLauncher builds a command not tied to ctx, running a stand-in that reports init
// and then waits (exec replaces sh, so killing the process ends it).
type plainLauncher struct{}

func (plainLauncher) Command(_ context.Context, _ []string, _ map[string]string, stdin io.Reader) (*exec.Cmd, error) {
	cmd := exec.Command("/bin/sh", "-c", `echo '{"type":"system","subtype":"init","session_id":"s"}'; exec sleep 120`)
	cmd.Stdin = stdin
	return cmd, nil
}

func TestSummarizeToolUse(t *testing.T) {
	long := strings.Repeat("abcdefghij", 30)
	tests := []struct {
		name, tool, input, want string
	}{
		{"bash", "Bash", `{"command":"ls -la /workspace","description":"List files"}`, "ls -la /workspace"},
		{"bash multiline folded", "Bash", `{"command":"cd /x &&\n  make\ttest"}`, "cd /x && make test"},
		{"bash capped", "Bash", `{"command":"` + long + `"}`, long[:199] + "…"},
		{"read", "Read", `{"file_path":"/workspace/notes.md","offset":10}`, "/workspace/notes.md"},
		{"write", "Write", `{"file_path":"/workspace/a.txt","content":"secret stuff"}`, "/workspace/a.txt"},
		{"edit", "Edit", `{"file_path":"/workspace/b.go","old_string":"x","new_string":"y"}`, "/workspace/b.go"},
		{"notebook", "NotebookEdit", `{"notebook_path":"/w/n.ipynb","new_source":"print(1)"}`, "/w/n.ipynb"},
		{"grep with path", "Grep", `{"pattern":"TODO","path":"/workspace/src"}`, "TODO in /workspace/src"},
		{"glob", "Glob", `{"pattern":"**/*.md"}`, "**/*.md"},
		{"web fetch", "WebFetch", `{"url":"https://example.org/a","prompt":"summarise"}`, "https://example.org/a"},
		{"web search", "WebSearch", `{"query":"nextcloud talk bots"}`, "nextcloud talk bots"},
		{"task", "Task", `{"description":"Find the config","prompt":"…","subagent_type":"Explore"}`, "Explore: Find the config"},
		{"todo", "TodoWrite", `{"todos":[{"content":"a"},{"content":"b"}]}`, "2 items"},
		{"mcp tool with a path", "mcp__files__stat", `{"path":"/workspace/x"}`, "/workspace/x"},
		{"unknown tool, no telling field", "Frobnicate", `{"level":3,"fast":true}`, `{"fast":true,"level":3}`},
		{"not an object", "Bash", `"just a string"`, `"just a string"`},
		{"multibyte cut on a rune", "Bash", `{"command":"` + strings.Repeat("é", 250) + `"}`, strings.Repeat("é", 199) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SummarizeToolUse(tt.tool, json.RawMessage(tt.input)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{max: 8}
	for _, s := range []string{"hello ", "wörld", "!"} {
		if _, err := tb.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	// "hello wörld!" is 13 bytes (ö takes 2); the last 8 are " wörld!".
	if got := tb.String(); got != " wörld!" {
		t.Errorf("tail = %q", got)
	}
	tb = &tailBuffer{max: 4}
	_, _ = tb.Write([]byte("aéé")) // a, é(2), é(2): the last 4 bytes are é é
	if got := tb.String(); got != "éé" {
		t.Errorf("tail = %q, want éé", got)
	}
	tb = &tailBuffer{max: 3}
	_, _ = tb.Write([]byte("aéé")) // the last 3 bytes start inside an é
	if got := tb.String(); got != "é" {
		t.Errorf("tail = %q, want é (cut at a character boundary)", got)
	}
}

func TestSecretValues(t *testing.T) {
	cmd := exec.Command("bwrap", "--setenv", "ANTHROPIC_API_KEY", "tok-123456", "--setenv", "HOME", "/home/alice", "--", "claude")
	cmd.Env = []string{"PATH=/usr/bin", "ISTOTA_TOKEN=abcd1234", "GITHUB_PASSWORD=pw99", "SHORT_KEY=ab"}
	got := secretValues(map[string]string{"CLAUDE_CODE_MAX_RETRIES": "2", "SOME_LONG_VALUE": "longer-than-8"}, cmd)
	slices.Sort(got)
	want := []string{"abcd1234", "longer-than-8", "pw99", "tok-123456"}
	if !slices.Equal(got, want) {
		t.Errorf("secret values %q, want %q", got, want)
	}
	if s := redact("key tok-123456 home /home/alice", got); s != "key [redacted] home /home/alice" {
		t.Errorf("redact = %q", s)
	}
}

// A run stopped on purpose is an error wrapping context.Canceled (with the cause), even
// when the CLI writes a failing verdict on its way out.
func TestRunCancelledWithVerdict(t *testing.T) {
	l := standIn(t, `{"type":"result","subtype":"error_during_execution","is_error":true,"terminal_reason":"aborted_tools"}`+"\n",
		`trap 'cat "$STREAM_FILE"; exit 1' TERM; echo '{"type":"system","subtype":"init","session_id":"s"}'; sleep 120 & wait`)
	l.term = true
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	c := &collector{notify: func(e brain.Event) {
		if e.Kind == brain.Init {
			cancel(errors.New("stopped by !stop"))
		}
	}}
	done := make(chan struct{})
	var res brain.Result
	var err error
	go func() {
		defer close(done)
		res, err = New(Config{Binary: "claude"}, testLogger(t)).Run(ctx, brain.Request{Prompt: "hi"}, l, c.add)
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not stop")
	}
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped by !stop") {
		t.Errorf("err = %v, want context.Canceled with the cause", err)
	}
	if res.Subtype != "error_during_execution" || res.TerminalReason != "aborted_tools" {
		t.Errorf("result %+v: the verdict written on the way out is kept", res)
	}
}

// The hook's and Bash's timeouts follow the approvals timeout as it is at each run: an
// admin who lengthens it while the sidecar runs does not leave Bash cutting skills off.
func TestApprovalWaitIsReadAtEachRun(t *testing.T) {
	wait := 10 * time.Minute
	c := New(Config{Binary: "/opt/istota/agent/claude", Hook: "/opt/istota/bin/istota hook pre-tool-use", ApprovalWait: func() time.Duration { return wait }}, nil)
	check := func(wantMS, wantHook string) {
		t.Helper()
		env := c.Env()
		if env["BASH_DEFAULT_TIMEOUT_MS"] != wantMS || env["BASH_MAX_TIMEOUT_MS"] != wantMS {
			t.Errorf("Bash timeouts %v, want %s ms", env, wantMS)
		}
		argv, err := c.Args(brain.Request{Prompt: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		if s := strings.Join(argv, " "); !strings.Contains(s, `"timeout":`+wantHook) {
			t.Errorf("hook settings lack a %s s timeout: %s", wantHook, s)
		}
	}
	check("720000", "660")
	wait = time.Hour
	check("3720000", "3660")
}
