package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain"
	"github.com/istota/istota/sidecar/internal/brain/openai/fakeapi"
)

// checkFirstRequest checks what every run starts with: the key as a bearer token, the
// model, the three tools with their required parameters, a system message that explains
// them, and the prompt as the user message.
func checkFirstRequest(r *fakeapi.Recorded) error {
	if got := r.Authorization(); got != "Bearer "+testKey {
		return fmt.Errorf("Authorization = %q", got)
	}
	if r.Request.Model != "test-model" {
		return fmt.Errorf("model = %q", r.Request.Model)
	}
	if got, want := r.ToolNames(), []string{"bash", "read_file", "write_file"}; !slices.Equal(got, want) {
		return fmt.Errorf("tools = %v, want %v", got, want)
	}
	wantRequired := map[string][]string{"bash": {"command"}, "read_file": {"path"}, "write_file": {"path", "content"}}
	for _, tool := range r.Request.Tools {
		var params struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(tool.Function.Parameters, &params); err != nil {
			return fmt.Errorf("tool %s parameters: %v", tool.Function.Name, err)
		}
		want := wantRequired[tool.Function.Name]
		if tool.Type != "function" || params.Type != "object" || !slices.Equal(params.Required, want) || len(params.Properties) != len(want) || tool.Function.Description == "" {
			return fmt.Errorf("tool %s schema = %s %s", tool.Function.Name, tool.Type, tool.Function.Parameters)
		}
	}
	sys, ok := r.Message("system")
	if !ok || r.Request.Messages[0].Role != "system" {
		return errors.New("no leading system message")
	}
	for _, want := range []string{"/workspace", "bash", "read_file", "write_file", "istota skill skills", "EXTRA-SYSTEM-TEXT"} {
		if !strings.Contains(sys.Text(), want) {
			return fmt.Errorf("system message lacks %q:\n%s", want, sys.Text())
		}
	}
	if u, ok := r.Message("user"); !ok || u.Text() != "Please tidy my notes" {
		return fmt.Errorf("user message = %+v", u)
	}
	return nil
}

func TestRunExecutesToolsAndReturnsTheAnswer(t *testing.T) {
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("first note\nsecond note\n"), 0o600)
	api := fakeapi.New(t, fakeapi.Script{
		fakeapi.Tool("Let me look.", "bash", map[string]any{"command": "echo hello-from-bash; echo to-stderr >&2; pwd"}).
			Expecting(checkFirstRequest),
		fakeapi.Tool("", "read_file", map[string]any{"path": "notes.txt"}).Expecting(func(r *fakeapi.Recorded) error {
			res := r.ToolResults()
			if len(res) != 1 {
				return fmt.Errorf("tool results = %d", len(res))
			}
			// The assistant's tool call is sent back before its result, with the same id.
			var asst fakeapi.Message
			for _, m := range r.Request.Messages {
				if m.Role == "assistant" {
					asst = m
				}
			}
			if len(asst.ToolCalls) != 1 || asst.ToolCalls[0].ID != res[0].ToolCallID || asst.Text() != "Let me look." {
				return fmt.Errorf("assistant message %+v does not match tool result %+v", asst, res[0])
			}
			if want := "hello-from-bash\nto-stderr\n" + ws; res[0].Text() != want {
				return fmt.Errorf("bash result = %q, want %q", res[0].Text(), want)
			}
			return nil
		}),
		{Calls: []fakeapi.Call{
			{Name: "write_file", Args: map[string]any{"path": "sub/dir/tidy.md", "content": "# Notes\n- first\n- second\n"}},
			{Name: "bash", Args: map[string]any{"command": "cat sub/dir/tidy.md | wc -l"}},
		}, Usage: fakeapi.Usage{PromptTokens: 100, CompletionTokens: 20, CachedTokens: 60}, Expect: func(r *fakeapi.Recorded) error {
			if got := r.LastToolResult(); got != "first note\nsecond note\n" {
				return fmt.Errorf("read_file result = %q", got)
			}
			return nil
		}},
		fakeapi.Reply("Done: your notes are in sub/dir/tidy.md.").Expecting(func(r *fakeapi.Recorded) error {
			res := r.ToolResults()
			if len(res) != 4 {
				return fmt.Errorf("tool results = %d, want 4", len(res))
			}
			if !strings.HasPrefix(res[2].Text(), "Wrote 25 bytes to sub/dir/tidy.md") {
				return fmt.Errorf("write_file result = %q", res[2].Text())
			}
			if strings.TrimSpace(res[3].Text()) != "3" {
				return fmt.Errorf("second bash result = %q", res[3].Text())
			}
			return nil
		}),
	})
	var usage []Usage
	b := newBrain(t, api, func(c *Config) { c.OnUsage = func(req brain.Request, u Usage) { usage = append(usage, u) } })
	l := &hostLauncher{dir: ws}
	ev := &events{}
	req := request("Please tidy my notes")
	req.SystemPrompt = "EXTRA-SYSTEM-TEXT"
	res, err := b.Run(context.Background(), req, l, ev.add)
	if err != nil {
		t.Fatal(err)
	}
	if fails := api.Failures(); len(fails) > 0 {
		t.Fatalf("API expectations failed: %v", fails)
	}
	if !res.OK || res.Subtype != "success" || res.Text != "Done: your notes are in sub/dir/tidy.md." || res.NumTurns != 4 {
		t.Fatalf("result = %+v", res)
	}
	// Three replies of 10+5 and one of 100 (60 cached) + 20.
	if res.InputTokens != 3*10+40 || res.CacheReadTokens != 60 || res.OutputTokens != 3*5+20 {
		t.Fatalf("tokens in=%d cache=%d out=%d", res.InputTokens, res.CacheReadTokens, res.OutputTokens)
	}
	if len(usage) != 4 || usage[2] != (Usage{Model: "test-model", InputTokens: 40, OutputTokens: 20, CacheReadTokens: 60}) {
		t.Fatalf("usage reports = %+v", usage)
	}
	got, err := os.ReadFile(filepath.Join(ws, "sub/dir/tidy.md"))
	if err != nil || string(got) != "# Notes\n- first\n- second\n" {
		t.Fatalf("written file = %q, %v", got, err)
	}

	var uses []string
	for _, e := range ev.of(brain.ToolUse) {
		uses = append(uses, e.Tool+": "+e.ToolInput)
	}
	wantUses := []string{"bash: echo hello-from-bash; echo to-stderr >&2; pwd", "read_file: notes.txt", "write_file: sub/dir/tidy.md", "bash: cat sub/dir/tidy.md | wc -l"}
	if !slices.Equal(uses, wantUses) {
		t.Errorf("tool events = %q, want %q", uses, wantUses)
	}
	if results := ev.of(brain.ToolResult); len(results) != 4 || !strings.HasPrefix(results[0].Text, "hello-from-bash") || results[0].IsError {
		t.Errorf("tool result events = %+v", results)
	}
	if texts := ev.of(brain.Text); len(texts) != 2 || texts[0].Text != "Let me look." || texts[1].Text != res.Text {
		t.Errorf("text events = %+v", texts)
	}

	// Every tool ran through the launcher, and neither argv nor env carried the key.
	calls := l.launched()
	if len(calls) != 4 {
		t.Fatalf("launcher calls = %d", len(calls))
	}
	for _, c := range calls {
		all := strings.Join(c.argv, " ")
		for k, v := range c.env {
			all += " " + k + "=" + v
		}
		if strings.Contains(all, testKey) {
			t.Fatalf("a tool command carries the API key: %q", all)
		}
	}
	if c := calls[2]; c.argv[0] != "/bin/sh" || c.argv[len(c.argv)-1] != "sub/dir/tidy.md" {
		t.Errorf("write_file argv = %q: want the path as an argument of its own", c.argv)
	}
}

func TestRunReportsAPIFailures(t *testing.T) {
	for _, tc := range []struct {
		name      string
		script    fakeapi.Script
		retries   int
		transient bool
		status    int
		wantText  string
		requests  int
	}{
		{"rate limited after retries", fakeapi.Script{fakeapi.Error(429, "slow down").Times(3)}, 2, true, 429, "429 Too Many Requests: slow down", 3},
		{"server error", fakeapi.Script{fakeapi.Error(500, "boom")}, -1, true, 500, "500 Internal Server Error: boom", 1},
		{"bad gateway", fakeapi.Script{fakeapi.Error(502, "")}, -1, true, 502, "502 Bad Gateway", 1},
		{"unauthorized, the key echoed back is redacted", fakeapi.Script{fakeapi.Error(401, "Incorrect API key provided: "+testKey)}, 2, false, 401, "401 Unauthorized: Incorrect API key provided: [redacted]", 1},
		{"unknown model", fakeapi.Script{fakeapi.Error(404, "The model `test-model` does not exist")}, 2, false, 404, "404 Not Found: The model `test-model` does not exist", 1},
		{"bad request", fakeapi.Script{fakeapi.Error(400, "Invalid 'messages'")}, 2, false, 400, "Invalid 'messages'", 1},
		{"not JSON", fakeapi.Script{{RawBody: "<html>proxy page</html>"}}, 2, false, 0, "not Chat Completions JSON: <html>proxy page</html>", 1},
		{"no choices", fakeapi.Script{{RawBody: `{"choices":[]}`}}, 2, false, 0, "without a message", 1},
		{"error in a 200 body", fakeapi.Script{{RawBody: `{"error":{"message":"backend exploded"}}`}}, 2, false, 0, "backend exploded", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := fakeapi.New(t, tc.script)
			b := newBrain(t, api, func(c *Config) { c.MaxRetries = tc.retries })
			ev := &events{}
			res, err := b.Run(context.Background(), request("hi"), &hostLauncher{dir: t.TempDir()}, ev.add)
			if err != nil {
				t.Fatal(err)
			}
			if res.OK || res.Transient != tc.transient || res.APIStatus != tc.status || res.Subtype != "error_api" || !strings.Contains(res.Text, tc.wantText) {
				t.Fatalf("result = %+v\nwant transient=%v status=%d text containing %q", res, tc.transient, tc.status, tc.wantText)
			}
			if strings.Contains(res.Text, testKey) {
				t.Fatalf("the key appears in the result: %q", res.Text)
			}
			if n := len(api.Requests()); n != tc.requests {
				t.Fatalf("requests = %d, want %d", n, tc.requests)
			}
			if n := len(ev.of(brain.Retry)); n != tc.requests-1 || res.Retries != n {
				t.Fatalf("retry events = %d, Result.Retries = %d, want %d", n, res.Retries, tc.requests-1)
			}
		})
	}
}

func TestRunRetriesATransientFailureWithinTheRun(t *testing.T) {
	api := fakeapi.New(t, fakeapi.Script{
		{Status: 429, ErrorMessage: "rate limited", Header: http.Header{"Retry-After": {"0"}}},
		fakeapi.Error(503, "overloaded"),
		fakeapi.Reply("fine now"),
	})
	ev := &events{}
	res, err := newBrain(t, api, nil).Run(context.Background(), request("hi"), &hostLauncher{dir: t.TempDir()}, ev.add)
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK || res.Text != "fine now" || res.Retries != 2 || res.APIStatus != 0 {
		t.Fatalf("result = %+v", res)
	}
	if r := ev.of(brain.Retry); len(r) != 2 || !strings.Contains(r[0].Text, "429") || !strings.Contains(r[1].Text, "503") {
		t.Fatalf("retry events = %+v", r)
	}
}

func TestRunGivesALongRetryAfterToTheQueue(t *testing.T) {
	api := fakeapi.New(t, fakeapi.Script{{Status: 429, Header: http.Header{"Retry-After": {"3600"}}}})
	res, err := newBrain(t, api, nil).Run(context.Background(), request("hi"), &hostLauncher{dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || !res.Transient || res.APIStatus != 429 || res.Retries != 0 || len(api.Requests()) != 1 {
		t.Fatalf("result = %+v after %d requests", res, len(api.Requests()))
	}
}

func TestRunTimeoutsAndUnreachableAPIsAreTransient(t *testing.T) {
	t.Run("request timeout", func(t *testing.T) {
		hold := make(chan struct{})
		t.Cleanup(func() { close(hold) })
		api := fakeapi.New(t, fakeapi.Script{{WaitFor: hold, Text: "too late"}})
		b := newBrain(t, api, func(c *Config) { c.RequestTimeout = 100 * time.Millisecond; c.MaxRetries = -1 })
		res, err := b.Run(context.Background(), request("hi"), &hostLauncher{dir: t.TempDir()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.OK || !res.Transient || res.APIStatus != 0 || !strings.Contains(res.Text, "did not answer within 100ms") {
			t.Fatalf("result = %+v", res)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		b, err := New(Config{BaseURL: "http://" + addr + "/v1", APIKey: testKey, Model: "m", MaxRetries: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.Run(context.Background(), request("hi"), &hostLauncher{dir: t.TempDir()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.OK || !res.Transient || !strings.Contains(res.Text, "could not be reached") || strings.Contains(res.Text, testKey) {
			t.Fatalf("result = %+v", res)
		}
	})
}

func TestRunStopsAtMaxTurns(t *testing.T) {
	loop := fakeapi.Tool("Still working.", "bash", map[string]any{"command": "echo again"})
	for _, tc := range []struct {
		name                string
		cfgTurns, reqTurns  int
		wantTurns, wantRuns int
	}{
		{"from the request", 10, 2, 2, 1},
		{"from the config", 3, 0, 3, 2},
		{"one turn allows no tool", 10, 1, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := fakeapi.New(t, fakeapi.Script{loop.Times(tc.wantTurns)})
			b := newBrain(t, api, func(c *Config) { c.MaxTurns = tc.cfgTurns })
			l := &hostLauncher{dir: t.TempDir()}
			req := request("loop forever")
			req.MaxTurns = tc.reqTurns
			res, err := b.Run(context.Background(), req, l, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.OK || res.Transient || res.Subtype != "error_max_turns" || res.TerminalReason != "max_turns" || res.NumTurns != tc.wantTurns {
				t.Fatalf("result = %+v", res)
			}
			if n := len(api.Requests()); n != tc.wantTurns {
				t.Fatalf("model calls = %d, want %d", n, tc.wantTurns)
			}
			if n := len(l.launched()); n != tc.wantRuns {
				t.Fatalf("tools run = %d, want %d (none after the last turn)", n, tc.wantRuns)
			}
		})
	}
}

func TestRunCapsSizes(t *testing.T) {
	t.Run("tool output keeps both ends", func(t *testing.T) {
		api := fakeapi.New(t, fakeapi.Script{
			fakeapi.Tool("", "bash", map[string]any{"command": "echo THE-START; yes line | head -n 200000; echo THE-END"}),
			fakeapi.Reply("ok").Expecting(func(r *fakeapi.Recorded) error {
				out := r.LastToolResult()
				if len(out) > 4096+100 || !strings.HasPrefix(out, "THE-START") || !strings.HasSuffix(out, "THE-END") || !strings.Contains(out, "bytes of output left out") {
					return fmt.Errorf("capped output (%d bytes) = %q…%q", len(out), out[:min(len(out), 80)], out[max(len(out)-80, 0):])
				}
				return nil
			}),
		})
		b := newBrain(t, api, func(c *Config) { c.MaxToolOutput = 4096 })
		res, err := b.Run(context.Background(), request("spam"), &hostLauncher{dir: t.TempDir()}, nil)
		if err != nil || !res.OK || len(api.Failures()) > 0 {
			t.Fatalf("res=%+v err=%v failures=%v", res, err, api.Failures())
		}
	})
	t.Run("read_file shows the start of a large file", func(t *testing.T) {
		ws := t.TempDir()
		os.WriteFile(filepath.Join(ws, "big.txt"), []byte(strings.Repeat("é", 5000)), 0o600)
		api := fakeapi.New(t, fakeapi.Script{
			fakeapi.Tool("", "read_file", map[string]any{"path": "big.txt"}),
			fakeapi.Reply("ok").Expecting(func(r *fakeapi.Recorded) error {
				out := r.LastToolResult()
				head, note, _ := strings.Cut(out, "\n[the file goes on")
				if note == "" || len(head) > 4096 || len(head) < 4094 || strings.Trim(head, "é") != "" {
					return fmt.Errorf("read_file of a large file = %d bytes: %q", len(out), out[max(len(out)-200, 0):])
				}
				return nil
			}),
		})
		b := newBrain(t, api, func(c *Config) { c.MaxToolOutput = 4096 })
		if res, err := b.Run(context.Background(), request("read"), &hostLauncher{dir: ws}, nil); err != nil || !res.OK || len(api.Failures()) > 0 {
			t.Fatalf("res=%+v err=%v failures=%v", res, err, api.Failures())
		}
	})
	t.Run("oversize response", func(t *testing.T) {
		api := fakeapi.New(t, fakeapi.Script{{RawBody: `{"choices":[{"message":{"content":"` + strings.Repeat("x", 10000) + `"}}]}`}})
		b := newBrain(t, api, func(c *Config) { c.MaxResponseBytes = 4096 })
		res, err := b.Run(context.Background(), request("hi"), &hostLauncher{dir: t.TempDir()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.OK || res.Transient || !strings.Contains(res.Text, "larger than 4096 bytes") {
			t.Fatalf("result = %+v", res)
		}
	})
	t.Run("old tool output is elided to fit the request cap", func(t *testing.T) {
		big := map[string]any{"command": "head -c 20000 /dev/zero | tr '\\0' 'a'"}
		api := fakeapi.New(t, fakeapi.Script{
			fakeapi.Tool("", "bash", big).Times(3),
			fakeapi.Reply("ok"),
		})
		b := newBrain(t, api, func(c *Config) { c.MaxToolOutput = 24 << 10; c.MaxRequestBytes = 48 << 10 })
		res, err := b.Run(context.Background(), request("fill it"), &hostLauncher{dir: t.TempDir()}, nil)
		if err != nil || !res.OK {
			t.Fatalf("res=%+v err=%v", res, err)
		}
		reqs := api.Requests()
		last := reqs[len(reqs)-1]
		if len(last.Body) > 48<<10 {
			t.Fatalf("the last request is %d bytes, more than the cap", len(last.Body))
		}
		res3 := last.ToolResults()
		if len(res3) != 3 || res3[0].Text() != omitted || len(res3[2].Text()) != 20000 {
			t.Fatalf("tool results of the last request: %d, first %q…", len(res3), res3[0].Text()[:min(40, len(res3[0].Text()))])
		}
	})
	t.Run("a prompt too large for the cap", func(t *testing.T) {
		api := fakeapi.New(t, nil)
		b := newBrain(t, api, func(c *Config) { c.MaxRequestBytes = 4096 })
		res, err := b.Run(context.Background(), request(strings.Repeat("word ", 2000)), &hostLauncher{dir: t.TempDir()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.OK || res.Subtype != "error_request_too_large" || len(api.Requests()) != 0 {
			t.Fatalf("result = %+v", res)
		}
	})
}

func TestRunToolFailuresAreToldToTheModel(t *testing.T) {
	ws := t.TempDir()
	os.Mkdir(filepath.Join(ws, "adir"), 0o700)
	os.WriteFile(filepath.Join(ws, "blob"), []byte("a\x00b"), 0o600)
	steps := []struct {
		call fakeapi.Call
		want string
	}{
		{fakeapi.Call{Name: "bash", Args: map[string]any{"command": "echo partial; exit 3"}}, "partial\n[exit status 3]"},
		{fakeapi.Call{Name: "bash", Args: map[string]any{"command": "sleep 60"}}, "[stopped: the command ran longer than 300ms]"},
		{fakeapi.Call{Name: "bash", Args: map[string]any{"command": "true"}}, "(no output)"},
		{fakeapi.Call{Name: "bash", Args: map[string]any{}}, `Error: the "command" argument (a string) is missing`},
		{fakeapi.Call{Name: "bash", RawArgs: `{"command": `}, "Error: the arguments are not a JSON object"},
		{fakeapi.Call{Name: "read_file", Args: map[string]any{"path": "missing.txt"}}, "No such file or directory"},
		{fakeapi.Call{Name: "read_file", Args: map[string]any{"path": "adir"}}, "Is a directory"},
		{fakeapi.Call{Name: "read_file", Args: map[string]any{"path": "blob"}}, "is a binary file"},
		{fakeapi.Call{Name: "read_file", Args: map[string]any{"path": "-n"}}, "No such file or directory"},
		{fakeapi.Call{Name: "write_file", Args: map[string]any{"path": "adir", "content": "x"}}, "Is a directory"},
		{fakeapi.Call{Name: "write_file", Args: map[string]any{"path": "$(touch pwned)", "content": "literal"}}, "Wrote 7 bytes to $(touch pwned)."},
		{fakeapi.Call{Name: "rm_rf", Args: map[string]any{}}, `Error: there is no tool "rm_rf"`},
	}
	var script fakeapi.Script
	for i, s := range steps {
		turn := fakeapi.Turn{Calls: []fakeapi.Call{s.call}}
		if i > 0 {
			prev := steps[i-1]
			turn.Expect = func(r *fakeapi.Recorded) error {
				if got := r.LastToolResult(); !strings.Contains(got, prev.want) {
					return fmt.Errorf("%s %v → %q, want it to contain %q", prev.call.Name, prev.call.Args, got, prev.want)
				}
				return nil
			}
		}
		script = append(script, turn)
	}
	last := steps[len(steps)-1]
	script = append(script, fakeapi.Reply("done").Expecting(func(r *fakeapi.Recorded) error {
		if got := r.LastToolResult(); !strings.Contains(got, last.want) {
			return fmt.Errorf("%s → %q", last.call.Name, got)
		}
		return nil
	}))
	api := fakeapi.New(t, script)
	b := newBrain(t, api, func(c *Config) { c.ToolTimeout = 300 * time.Millisecond; c.MaxTurns = 100 })
	ev := &events{}
	res, err := b.Run(context.Background(), request("break things"), &hostLauncher{dir: ws}, ev.add)
	if err != nil || !res.OK || res.Text != "done" {
		t.Fatalf("res=%+v err=%v", res, err)
	}
	if f := api.Failures(); len(f) > 0 {
		t.Fatalf("failures: %v", f)
	}
	if _, err := os.Stat(filepath.Join(ws, "pwned")); err == nil {
		t.Fatal("a path was run as a shell command")
	}
	if b, err := os.ReadFile(filepath.Join(ws, "$(touch pwned)")); err != nil || string(b) != "literal" {
		t.Fatalf("the file named literally: %q %v", b, err)
	}
	errs := 0
	for _, e := range ev.of(brain.ToolResult) {
		if e.IsError {
			errs++
		}
	}
	if errs != 10 {
		t.Fatalf("failed tool results = %d, want 10", errs)
	}
}

func TestRunStopsWhenCancelled(t *testing.T) {
	t.Run("during a request", func(t *testing.T) {
		hold := make(chan struct{})
		t.Cleanup(func() { close(hold) })
		api := fakeapi.New(t, fakeapi.Script{{WaitFor: hold, Text: "never"}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := newBrain(t, api, nil).Run(ctx, request("hi"), &hostLauncher{dir: t.TempDir()}, nil)
			done <- err
		}()
		waitUntil(t, func() bool { return len(api.Requests()) == 1 })
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
	})
	t.Run("during a tool", func(t *testing.T) {
		api := fakeapi.New(t, fakeapi.Script{fakeapi.Tool("", "bash", map[string]any{"command": "touch started; sleep 300"})})
		ws := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := newBrain(t, api, nil).Run(ctx, request("hi"), &hostLauncher{dir: ws}, nil)
			done <- err
		}()
		waitUntil(t, func() bool { _, err := os.Stat(filepath.Join(ws, "started")); return err == nil })
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
	})
}

func TestRunWithoutKeySendsNoAuthorization(t *testing.T) {
	api := fakeapi.New(t, fakeapi.Script{fakeapi.Reply("local").Expecting(func(r *fakeapi.Recorded) error {
		if _, ok := r.Header["Authorization"]; ok {
			return fmt.Errorf("Authorization sent without a key: %q", r.Authorization())
		}
		return nil
	})})
	b := newBrain(t, api, func(c *Config) { c.APIKey = "" })
	if res, err := b.Run(context.Background(), request("hi"), &hostLauncher{dir: t.TempDir()}, nil); err != nil || !res.OK || res.Text != "local" {
		t.Fatalf("res=%+v err=%v", res, err)
	}
}

func TestRunModelFromRequestAndContentFilter(t *testing.T) {
	api := fakeapi.New(t, fakeapi.Script{{FinishReason: "content_filter", Expect: func(r *fakeapi.Recorded) error {
		if r.Request.Model != "other-model" {
			return fmt.Errorf("model = %q", r.Request.Model)
		}
		return nil
	}}})
	req := request("hi")
	req.Model = "other-model"
	res, err := newBrain(t, api, nil).Run(context.Background(), req, &hostLauncher{dir: t.TempDir()}, nil)
	if err != nil || res.OK || res.Subtype != "error_content_filter" || res.Transient {
		t.Fatalf("res=%+v err=%v", res, err)
	}
}

func TestNewAndRunRefuseBadInput(t *testing.T) {
	for _, base := range []string{"", "ftp://x", "http://", "https://user:pw@api.example.com/v1"} {
		if _, err := New(Config{BaseURL: base}, nil); err == nil {
			t.Errorf("New accepted base URL %q", base)
		}
	}
	b, err := New(Config{BaseURL: "http://127.0.0.1:1/v1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Run(context.Background(), request("hi"), &hostLauncher{}, nil); err == nil || !strings.Contains(err.Error(), "no model") {
		t.Errorf("run without a model: %v", err)
	}
	b.cfg.Model = "m"
	if _, err := b.Run(context.Background(), request("  "), &hostLauncher{}, nil); err == nil {
		t.Error("an empty prompt was run")
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The loop asks Request.Approve before each tool call; a refused call does not run and
// the model is told why.
func TestRunAsksBeforeEachToolCall(t *testing.T) {
	ws := t.TempDir()
	api := fakeapi.New(t, fakeapi.Script{
		{Calls: []fakeapi.Call{{Name: "write_file", Args: map[string]any{"path": "kept.txt", "content": "yes"}}}},
		{Calls: []fakeapi.Call{{Name: "bash", Args: map[string]any{"command": "touch refused.txt"}}}},
		fakeapi.Reply("done").Expecting(func(r *fakeapi.Recorded) error {
			if got := r.LastToolResult(); !strings.Contains(got, "not run: alice refused it") {
				return fmt.Errorf("refused call → %q", got)
			}
			return nil
		}),
	})
	b := newBrain(t, api, nil)
	var asked []string
	req := request("write and run")
	req.Approve = func(_ context.Context, tool string, input json.RawMessage) (bool, string, error) {
		asked = append(asked, tool+" "+string(input))
		if tool == "bash" {
			return false, "alice refused it", nil
		}
		return true, "", nil
	}
	res, err := b.Run(context.Background(), req, &hostLauncher{dir: ws}, (&events{}).add)
	if err != nil || !res.OK {
		t.Fatalf("res=%+v err=%v", res, err)
	}
	if f := api.Failures(); len(f) > 0 {
		t.Fatalf("failures: %v", f)
	}
	if len(asked) != 2 || !strings.HasPrefix(asked[1], `bash {"command":"touch refused.txt"}`) {
		t.Errorf("asked = %q", asked)
	}
	if _, err := os.Stat(filepath.Join(ws, "kept.txt")); err != nil {
		t.Errorf("the approved write did not happen: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "refused.txt")); err == nil {
		t.Error("the refused command ran")
	}
}
