package claude

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain"
	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// These tests run the real Claude Code CLI against the scripted fake API, as nobody,
// with a private HOME. Each run is bounded by runTimeout; a run normally takes about a
// second.
const runTimeout = 90 * time.Second

// cliFixture is one HOME and workspace, a fake API and a launcher pointing at it.
type cliFixture struct {
	bin      string
	home, ws string
	srv      *fakeapi.Server
	launcher *testLauncher
}

func newCLIFixture(t *testing.T, script fakeapi.Script, opts ...fakeapi.Option) *cliFixture {
	t.Helper()
	bin := claudeBin(t)
	home, ws := newHome(t)
	f := &cliFixture{bin: bin, home: home, ws: ws}
	f.useServer(fakeapi.New(t, script, opts...))
	return f
}

// useServer points the fixture at srv (a "restarted" API for the same HOME).
func (f *cliFixture) useServer(srv *fakeapi.Server) {
	f.srv = srv
	f.launcher = &testLauncher{uid: nobody, home: f.home, dir: f.ws, env: map[string]string{
		"ANTHROPIC_BASE_URL": srv.URL(),
		"ANTHROPIC_API_KEY":  placeholderKey,
		"TERM":               "dumb",
		// Keep the CLI's sockets and scratch files out of the host's /tmp.
		"TMPDIR":             filepath.Join(f.home, "tmp"),
		"CLAUDE_CODE_TMPDIR": filepath.Join(f.home, "tmp"),
	}}
}

func (f *cliFixture) run(t *testing.T, cfg Config, req brain.Request, c *collector) (brain.Result, error) {
	t.Helper()
	cfg.Binary = f.bin
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 1 // each retry costs the CLI's backoff (~0.5 s and up)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	if c == nil {
		c = &collector{}
	}
	return New(cfg, testLogger(t)).Run(ctx, req, f.launcher, c.add)
}

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// checkOnlyPlaceholderKey fails unless every request carried exactly the placeholder key
// and no other credential.
func checkOnlyPlaceholderKey(t *testing.T, srv *fakeapi.Server) {
	t.Helper()
	reqs := srv.Requests()
	if len(reqs) == 0 {
		t.Fatal("the fake API saw no request")
	}
	for _, r := range reqs {
		if got := r.APIKey(); got != placeholderKey {
			t.Errorf("request %d %s %s: x-api-key = %q, want the placeholder", r.Seq, r.Method, r.Path, got)
		}
		if h := r.Header.Get("Authorization"); h != "" {
			t.Errorf("request %d carried an Authorization header", r.Seq)
		}
		if r.Answer == fakeapi.AnswerNotFound {
			t.Errorf("request %d to an endpoint the fake does not serve: %s %s", r.Seq, r.Method, r.Path)
		}
	}
}

// T35: a normal tool-using turn.
func TestRunToolTurn(t *testing.T) {
	t.Parallel()
	marker := "prompt-marker-" + rand.Text()[:8]
	sysMarker := "system-marker-" + rand.Text()[:8]
	f := newCLIFixture(t, fakeapi.ToolFlow("echo hello-from-tool", "hello-from-tool", "Done: the command printed hello-from-tool."))
	session := newUUID()
	c := &collector{}
	res, err := f.run(t, Config{Model: "claude-sonnet-4-5", MaxTurns: 4}, brain.Request{
		TaskID: 7, UserID: "alice", Prompt: "Run echo hello-from-tool and report. " + marker,
		SystemPrompt: "-- " + sysMarker, SessionID: session,
	}, c)
	if err != nil {
		t.Fatalf("Run: %v (stderr: %s)", err, res.StderrTail)
	}

	wantKinds := []brain.EventKind{brain.Init, brain.Text, brain.ToolUse, brain.ToolResult, brain.Text}
	if got := c.kinds(); !slices.Equal(got, wantKinds) {
		t.Fatalf("event kinds = %v, want %v (events %+v)", got, wantKinds, c.all())
	}
	ev := c.all()
	if ev[0].Text != session {
		t.Errorf("init event session = %q, want %q", ev[0].Text, session)
	}
	if ev[1].Text != "I'll run a command." {
		t.Errorf("first text = %q", ev[1].Text)
	}
	if ev[2].Tool != "Bash" || ev[2].ToolInput != "echo hello-from-tool" {
		t.Errorf("tool_use event = %+v, want Bash echo hello-from-tool", ev[2])
	}
	if ev[3].Tool != "Bash" || !strings.Contains(ev[3].Text, "hello-from-tool") || ev[3].IsError {
		t.Errorf("tool_result event = %+v, want Bash output hello-from-tool", ev[3])
	}
	if ev[4].Text != "Done: the command printed hello-from-tool." {
		t.Errorf("final text event = %q", ev[4].Text)
	}

	want := brain.Result{Text: "Done: the command printed hello-from-tool.", OK: true, Subtype: "success",
		TerminalReason: "completed", NumTurns: 2, SessionID: session, InputTokens: 20, OutputTokens: 10}
	if res.Text != want.Text || res.OK != want.OK || res.Subtype != want.Subtype || res.TerminalReason != want.TerminalReason ||
		res.NumTurns != want.NumTurns || res.SessionID != want.SessionID || res.InputTokens != want.InputTokens ||
		res.OutputTokens != want.OutputTokens || res.Transient || res.APIStatus != 0 || res.Retries != 0 {
		t.Errorf("result = %+v\nwant like %+v", res, want)
	}
	if res.CostUSD <= 0 || res.DurationMS <= 0 {
		t.Errorf("cost %v, duration %d ms: want both > 0", res.CostUSD, res.DurationMS)
	}

	// The tool really ran: its output went back to the model.
	trs := f.srv.ToolResults()
	if len(trs) != 1 || !strings.HasPrefix(trs[0].Content, "hello-from-tool") || trs[0].IsError {
		t.Errorf("tool results seen by the API = %+v, want one starting with hello-from-tool", trs)
	}
	if fails := f.srv.Failures(); len(fails) != 0 {
		t.Errorf("fake API expectations failed: %v", fails)
	}
	msgs := f.srv.MessageRequests()
	if len(msgs) != 2 || f.srv.DefaultReplies() != 0 {
		t.Fatalf("model calls = %d (defaults %d), want 2 scripted", len(msgs), f.srv.DefaultReplies())
	}
	for _, r := range msgs {
		if !strings.Contains(r.UserText(), marker) {
			t.Errorf("request %d: the prompt (sent on stdin) did not reach the model", r.Seq)
		}
		if !strings.Contains(r.System, "-- "+sysMarker) {
			t.Errorf("request %d: the appended system prompt is missing", r.Seq)
		}
		if r.Model != "claude-sonnet-4-5" || !r.Stream || r.Query != "beta=true" {
			t.Errorf("request %d: model %q stream %v query %q", r.Seq, r.Model, r.Stream, r.Query)
		}
		if got := r.Header.Get("X-Claude-Code-Session-Id"); got != session {
			t.Errorf("request %d: session header %q, want %q", r.Seq, got, session)
		}
	}
	checkOnlyPlaceholderKey(t, f.srv)

	// The prompt travels on stdin, never in argv.
	argv := f.launcher.lastArgv()
	if strings.Contains(strings.Join(argv, "\x00"), marker) {
		t.Errorf("the prompt appeared in argv: %q", argv)
	}
	if got := f.launcher.lastEnv()["CLAUDE_CODE_MAX_RETRIES"]; got != "1" {
		t.Errorf("CLAUDE_CODE_MAX_RETRIES = %q, want 1", got)
	}
	// The transcript is where --resume will look for it.
	if _, err := os.Stat(filepath.Join(f.home, ".claude", "projects", strings.ReplaceAll(f.ws, "/", "-"), session+".jsonl")); err != nil {
		t.Errorf("transcript not written: %v", err)
	}
}

// T36: API failures are classified from the result line, whatever the exit code (the
// CLI exits 1 on every one of these), and api_retry lines are counted.
func TestRunAPIErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		script      fakeapi.Script
		maxRetries  int
		wantOK      bool
		wantStatus  int
		transient   bool
		wantRetries int
		wantCalls   int
	}{
		{name: "overloaded 529", script: fakeapi.Script{fakeapi.Error(529).Times(50)}, wantStatus: 529, transient: true, wantRetries: 1, wantCalls: 2},
		{name: "rate limited 429", script: fakeapi.Script{fakeapi.Error(429).Times(50)}, wantStatus: 429, transient: true, wantRetries: 1, wantCalls: 2},
		{name: "server error 500", script: fakeapi.Script{fakeapi.Error(500).Times(50)}, wantStatus: 500, transient: true, wantRetries: 1, wantCalls: 2},
		{name: "invalid key 401", script: fakeapi.Script{fakeapi.Error(401).Times(50)}, wantStatus: 401, wantRetries: 1, wantCalls: 2},
		{name: "forbidden 403", script: fakeapi.Script{fakeapi.Error(403).Times(50)}, wantStatus: 403, wantRetries: 0, wantCalls: 1},
		{name: "retry cap of 2", script: fakeapi.Script{fakeapi.Error(529).Times(50)}, maxRetries: 2, wantStatus: 529, transient: true, wantRetries: 2, wantCalls: 3},
		{name: "retried then answered", script: fakeapi.Script{fakeapi.Error(529), fakeapi.Reply("recovered")}, maxRetries: 2, wantOK: true, wantRetries: 1, wantCalls: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newCLIFixture(t, tt.script)
			c := &collector{}
			res, err := f.run(t, Config{MaxRetries: tt.maxRetries}, brain.Request{Prompt: "hello"}, c)
			if err != nil {
				t.Fatalf("Run: %v (stderr: %s)", err, res.StderrTail)
			}
			if res.OK != tt.wantOK || res.APIStatus != tt.wantStatus || res.Transient != tt.transient {
				t.Errorf("OK %v status %d transient %v, want %v %d %v (result %+v)", res.OK, res.APIStatus, res.Transient,
					tt.wantOK, tt.wantStatus, tt.transient, res)
			}
			if !tt.wantOK && (res.TerminalReason != "api_error" || res.Text == "") {
				t.Errorf("terminal reason %q, text %q: want api_error and the CLI's message", res.TerminalReason, res.Text)
			}
			if res.Retries != tt.wantRetries || c.count(brain.Retry) != tt.wantRetries {
				t.Errorf("retries: result %d, events %d, want %d", res.Retries, c.count(brain.Retry), tt.wantRetries)
			}
			if got := len(f.srv.MessageRequests()); got != tt.wantCalls {
				t.Errorf("model calls = %d, want %d", got, tt.wantCalls)
			}
			// The synthetic "API Error: …" message is not model output.
			for _, e := range c.all() {
				if e.Kind == brain.Text && strings.Contains(e.Text, "API Error") {
					t.Errorf("synthetic error reported as model text: %q", e.Text)
				}
			}
			if tt.wantOK && res.Text != "recovered" {
				t.Errorf("text = %q, want recovered", res.Text)
			}
			checkOnlyPlaceholderKey(t, f.srv)
		})
	}
}

// T37: hitting the turn cap is reported as error_max_turns, not as success or an API
// failure.
func TestRunMaxTurns(t *testing.T) {
	t.Parallel()
	f := newCLIFixture(t, fakeapi.ToolFlow("echo one-turn-only", "one-turn-only", "never reached"))
	res, err := f.run(t, Config{MaxTurns: 8}, brain.Request{Prompt: "run it", MaxTurns: 1}, nil)
	if err != nil {
		t.Fatalf("Run: %v (stderr: %s)", err, res.StderrTail)
	}
	if res.OK || res.Subtype != "error_max_turns" || res.TerminalReason != "max_turns" || res.Transient || res.APIStatus != 0 {
		t.Errorf("result = %+v, want a permanent error_max_turns", res)
	}
	if !strings.Contains(res.Text, "maximum number of turns") {
		t.Errorf("text = %q, want the CLI's max-turns error", res.Text)
	}
	if argv := f.launcher.lastArgv(); !slices.Contains(argv, "--max-turns=1") {
		t.Errorf("argv %q lacks the request's --max-turns=1", argv)
	}
}

// Cancelling ctx while a tool runs stops the run promptly and leaves no tool process,
// whether the launcher asks the CLI to stop (SIGTERM: it kills its tools) or kills a
// pid namespace outright (as the sandbox does).
func TestRunCancel(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		term, pidns bool
	}{
		{name: "SIGTERM to the group", term: true},
		{name: "SIGKILL of a pid namespace", pidns: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// sleep takes fractional seconds: the unique fraction finds the tool's process.
			marker := fmt.Sprintf("300.%d%06d", os.Getpid(), time.Now().UnixNano()%1000000)
			f := newCLIFixture(t, fakeapi.Script{fakeapi.Bash("Sleeping.", "echo started; sleep "+marker)})
			f.launcher.term, f.launcher.pidns = tt.term, tt.pidns
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := &collector{}
			var watcher sync.WaitGroup
			defer watcher.Wait()
			c.notify = func(e brain.Event) {
				if e.Kind == brain.ToolUse {
					// Cancel once the tool process exists.
					watcher.Go(func() {
						waitFor(t, 30*time.Second, "the tool process to start", func() bool { return len(pidsWith("sleep\x00"+marker)) > 0 })
						cancel()
					})
				}
			}
			done := make(chan struct{})
			var res brain.Result
			var err error
			go func() {
				defer close(done)
				res, err = New(Config{Binary: f.bin, MaxRetries: 1}, testLogger(t)).Run(ctx, brain.Request{Prompt: "sleep please"}, f.launcher, c.add)
			}()
			select {
			case <-done:
			case <-time.After(runTimeout):
				t.Fatal("Run did not return after cancel")
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Run error = %v, want one wrapping context.Canceled (result %+v)", err, res)
			}
			if c.count(brain.ToolUse) != 1 {
				t.Errorf("events = %+v, want the tool call before the cancel", c.all())
			}
			waitFor(t, 30*time.Second, "the tool process to die", func() bool { return len(pidsWith("sleep\x00"+marker)) == 0 })
		})
	}
}

// T38: a run resumed with the same HOME and session id, against a restarted API, sees
// the earlier conversation.
func TestRunResume(t *testing.T) {
	t.Parallel()
	f := newCLIFixture(t, fakeapi.Script{fakeapi.Reply("first answer 4711")})
	session := newUUID()
	res, err := f.run(t, Config{}, brain.Request{Prompt: "first question", SessionID: session, SystemPrompt: "system-one"}, nil)
	if err != nil || !res.OK || res.SessionID != session {
		t.Fatalf("first run: %+v, %v", res, err)
	}

	// The daemon restarts: a new API server, the same HOME.
	f.useServer(fakeapi.New(t, fakeapi.Script{fakeapi.Reply("second answer").Expecting(func(r *fakeapi.Recorded) error {
		var all strings.Builder
		for _, m := range r.Messages {
			for _, b := range m.Content {
				all.WriteString(b.Text + "\n")
			}
		}
		for _, want := range []string{"first question", "first answer 4711", "second question"} {
			if !strings.Contains(all.String(), want) {
				return fmt.Errorf("resumed conversation lacks %q", want)
			}
		}
		// This run's system prompt, not the one recorded by the first run.
		if !strings.Contains(r.System, "system-two") || strings.Contains(r.System, "system-one") {
			return fmt.Errorf("system prompt of the resumed run is stale")
		}
		return nil
	})}))
	c := &collector{}
	res, err = f.run(t, Config{}, brain.Request{Prompt: "second question", SessionID: session, Resume: true, SystemPrompt: "system-two"}, c)
	if err != nil {
		t.Fatalf("second run: %v (stderr %s)", err, res.StderrTail)
	}
	if !res.OK || res.Text != "second answer" || res.SessionID != session {
		t.Errorf("second run = %+v, want OK, second answer, session %s", res, session)
	}
	if ev := c.all(); len(ev) == 0 || ev[0].Kind != brain.Init || ev[0].Text != session {
		t.Errorf("events = %+v, want init with session %s first", ev, session)
	}
	if argv := f.launcher.lastArgv(); !slices.Contains(argv, "--resume="+session) {
		t.Errorf("argv %q lacks --resume", argv)
	}
	if fails := f.srv.Failures(); len(fails) != 0 {
		t.Errorf("resume expectations failed: %v", fails)
	}
	// This run's usage only, not the whole session's.
	if res.InputTokens != 10 || res.OutputTokens != 5 {
		t.Errorf("tokens in %d out %d, want this run's 10/5", res.InputTokens, res.OutputTokens)
	}
	checkOnlyPlaceholderKey(t, f.srv)
}

// One fake API serves two concurrent conversations, told apart by a marker in the prompt.
func TestRunConcurrentConversations(t *testing.T) {
	t.Parallel()
	bin := claudeBin(t)
	srv := fakeapi.New(t, fakeapi.Script{fakeapi.Reply("unmatched")})
	srv.AddScript("alpha", fakeapi.Marker("conv-alpha"), fakeapi.ToolFlow("echo out-alpha", "out-alpha", "alpha done"))
	srv.AddScript("beta", fakeapi.Marker("conv-beta"), fakeapi.ToolFlow("echo out-beta", "out-beta", "beta done"))

	var wg sync.WaitGroup
	results := map[string]brain.Result{}
	var mu sync.Mutex
	for _, name := range []string{"alpha", "beta"} {
		wg.Go(func() {
			home, ws := newHome(t)
			f := &cliFixture{bin: bin, home: home, ws: ws}
			f.useServer(srv)
			res, err := f.run(t, Config{}, brain.Request{Prompt: "please do conv-" + name}, nil)
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			mu.Lock()
			results[name] = res
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, name := range []string{"alpha", "beta"} {
		if r := results[name]; !r.OK || r.Text != name+" done" {
			t.Errorf("%s: result %+v, want %s done", name, r, name)
		}
	}
	perConv := map[string]int{}
	for _, r := range srv.MessageRequests() {
		perConv[r.Conversation]++
	}
	if perConv["alpha"] != 2 || perConv["beta"] != 2 || perConv[""] != 0 {
		t.Errorf("requests per conversation = %v, want 2 each and none unmatched", perConv)
	}
	if fails := srv.Failures(); len(fails) != 0 {
		t.Errorf("expectations failed: %v", fails)
	}
}

// waitFor polls cond until it holds or timeout passes (only a bound, never a measure).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("timed out waiting for %s", what)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pidsWith lists live (not zombie) processes whose command line contains s.
func pidsWith(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), s) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The state follows the parenthesised command name.
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		out = append(out, pid)
	}
	return out
}
