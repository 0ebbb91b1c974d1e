package claude

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/istota/istota/sidecar/internal/brain"
)

func parse(t *testing.T, stream string) (*parser, *collector) {
	t.Helper()
	c := &collector{}
	p := newParser(testLogger(t), c.add)
	if err := p.read(strings.NewReader(stream)); err != nil {
		t.Fatalf("read: %v", err)
	}
	return p, c
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Streams captured from Claude Code 2.1.330 against the fake API (testdata/*.jsonl).
func TestParseCapturedStreams(t *testing.T) {
	tests := []struct {
		file      string
		kinds     []brain.EventKind
		want      brain.Result
		textStart string
	}{
		{
			file:  "tool_turn.jsonl",
			kinds: []brain.EventKind{brain.Init, brain.Text, brain.ToolUse, brain.ToolResult, brain.Text},
			want: brain.Result{OK: true, Subtype: "success", TerminalReason: "completed", NumTurns: 2,
				InputTokens: 20, OutputTokens: 10},
			textStart: "Done.",
		},
		{
			file:  "overloaded_529.jsonl",
			kinds: []brain.EventKind{brain.Init, brain.Retry},
			want: brain.Result{Transient: true, APIStatus: 529, Subtype: "success", TerminalReason: "api_error",
				NumTurns: 1, Retries: 1},
			textStart: "API Error: 529 Overloaded.",
		},
		{
			file:      "invalid_key_401.jsonl",
			kinds:     []brain.EventKind{brain.Init, brain.Retry},
			want:      brain.Result{APIStatus: 401, Subtype: "success", TerminalReason: "api_error", NumTurns: 1, Retries: 1},
			textStart: "Invalid API key",
		},
		{
			file:      "max_turns.jsonl",
			kinds:     []brain.EventKind{brain.Init, brain.Text, brain.ToolUse, brain.ToolResult},
			want:      brain.Result{Subtype: "error_max_turns", TerminalReason: "max_turns", NumTurns: 2, InputTokens: 10, OutputTokens: 5},
			textStart: "Reached maximum number of turns (1)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			p, c := parse(t, readTestdata(t, tt.file))
			if !p.gotResult {
				t.Fatal("no result parsed")
			}
			if got := c.kinds(); !slices.Equal(got, tt.kinds) {
				t.Errorf("events %v, want %v", got, tt.kinds)
			}
			got := p.res
			if !strings.HasPrefix(got.Text, tt.textStart) {
				t.Errorf("text %q, want it to start with %q", got.Text, tt.textStart)
			}
			if got.SessionID == "" || got.SessionID != c.all()[0].Text {
				t.Errorf("session %q, init event %q", got.SessionID, c.all()[0].Text)
			}
			got.Text, got.SessionID, got.DurationMS, got.CostUSD = "", "", 0, 0
			if got != tt.want {
				t.Errorf("result\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// The trimmed stream of the reference (§4.3), whose lists and ids are shortened.
func TestParseReferenceStream(t *testing.T) {
	stream := `{"type":"system","subtype":"init","cwd":"/workspace","session_id":"9fef0d77-d1e0-47e9-9348-e2db2e7fc0df","tools":["Task","Bash","CronCreate","CronDelete","…"],"mcp_servers":[],"model":"claude-sonnet-4-5","permissionMode":"bypassPermissions","apiKeySource":"ANTHROPIC_API_KEY","claude_code_version":"2.1.330","output_style":"default","analytics_disabled":true,"served_by_anthropic":false,"memory_paths":{"auto":"/home/agent/.claude/projects/-workspace/memory/"},"uuid":"c63825ad-…"}
{"type":"assistant","message":{"id":"msg_fake0001","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"I'll run a command."}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"9fef0d77-…","uuid":"a95682d0-…","timestamp":"2026-11-22T02:02:00.202Z","request_id":"req_fake"}
{"type":"assistant","message":{"id":"msg_fake0001","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"toolu_fake01","name":"Bash","input":{"command":"echo hello-from-sandbox","description":"Print a greeting"}}],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"9fef0d77-…","uuid":"98830067-…"}
{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_fake01","type":"tool_result","content":"hello-from-sandbox","is_error":false}]},"parent_tool_use_id":null,"session_id":"9fef0d77-…","uuid":"9e92221b-…","tool_use_result":{"stdout":"hello-from-sandbox","stderr":"","interrupted":false,"isImage":false,"noOutputExpected":false},"tool_result_meta":[{"id":"toolu_fake01","permission_decision":{"decision":"accept","source":"config","reason_type":"mode"}}]}
{"type":"assistant","message":{"id":"msg_fake0002","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Done: the command printed hello-from-sandbox."}],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"9fef0d77-…","uuid":"aaa183e1-…"}
{"type":"result","subtype":"success","is_error":false,"api_error_status":null,"duration_ms":155,"duration_api_ms":51,"num_turns":2,"result":"Done: the command printed hello-from-sandbox.","stop_reason":"end_turn","terminal_reason":"completed","session_id":"9fef0d77-…","total_cost_usd":0.000615,"usage":{"input_tokens":20,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":37,"service_tier":"standard"},"modelUsage":{"claude-sonnet-4-5":{"inputTokens":20,"outputTokens":37,"cacheReadInputTokens":0,"cacheCreationInputTokens":0,"costUSD":0.000615,"contextWindow":200000}},"permission_denials":[],"uuid":"6361f3ce-…"}
`
	p, c := parse(t, stream)
	want := []brain.Event{
		{Kind: brain.Init, Text: "9fef0d77-d1e0-47e9-9348-e2db2e7fc0df"},
		{Kind: brain.Text, Text: "I'll run a command."},
		{Kind: brain.ToolUse, Tool: "Bash", ToolInput: "echo hello-from-sandbox"},
		{Kind: brain.ToolResult, Tool: "Bash", Text: "hello-from-sandbox"},
		{Kind: brain.Text, Text: "Done: the command printed hello-from-sandbox."},
	}
	if got := c.all(); !slices.Equal(got, want) {
		t.Errorf("events\n got %+v\nwant %+v", got, want)
	}
	wantRes := brain.Result{Text: "Done: the command printed hello-from-sandbox.", OK: true, Subtype: "success",
		TerminalReason: "completed", InputTokens: 20, OutputTokens: 37, CostUSD: 0.000615, NumTurns: 2,
		SessionID: "9fef0d77-…", DurationMS: 155}
	if p.res != wantRes {
		t.Errorf("result\n got %+v\nwant %+v", p.res, wantRes)
	}
}

// Unknown types, subtypes, fields and blocks are ignored, and so are lines that are not
// JSON; only the result line decides.
func TestParseIgnoresUnknown(t *testing.T) {
	stream := strings.Join([]string{
		`not json at all`,
		``,
		`{"type":"system","subtype":"init","session_id":"s-1","brand_new_field":{"x":[1,2]}}`,
		`{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1795315043,"rateLimitType":"five_hour","utilization":0.9}}`,
		`{"type":"system","subtype":"task_started","task_id":"t1"}`,
		`{"type":"system","subtype":"hook_response","output":"…"}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"partial"}}}`,
		`{"type":"hologram","payload":"from the future"}`,
		`{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"hmm","signature":"sig"},{"type":"mystery_block","data":1},{"type":"text","text":"visible","citations":[{"x":1}]}]},"new_top_level":true}`,
		`{"type":"assistant","message":{"content":"not an array"}}`,
		`{"type":"user","message":{"role":"user","content":"a replayed prompt"}}`,
		`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"unknown-id","content":[{"type":"text","text":"part one"},{"type":"image","source":{}},{"type":"text","text":"part two"}],"is_error":true}]}}`,
		`{"type":"prompt_suggestion","suggestion":"next?"}`,
		`{"type":"result","subtype":"success","is_error":false,"result":"final","num_turns":1,"session_id":"s-1","terminal_reason":"completed","api_error_status":null,"future":{"nested":[true]},"modelUsage":{"m1":{"inputTokens":3,"outputTokens":4,"cacheReadInputTokens":5,"costUSD":0.25},"m2":{"inputTokens":1,"outputTokens":1,"costUSD":0.5}}}`,
		`{"type":"system","subtype":"after_result","note":"ignored too"}`,
	}, "\n")
	p, c := parse(t, stream)
	want := []brain.Event{
		{Kind: brain.Init, Text: "s-1"},
		{Kind: brain.Text, Text: "visible"},
		{Kind: brain.ToolResult, Text: "part one part two", IsError: true},
	}
	if got := c.all(); !slices.Equal(got, want) {
		t.Errorf("events\n got %+v\nwant %+v", got, want)
	}
	if !p.gotResult || !p.res.OK || p.res.Text != "final" {
		t.Fatalf("result %+v (got %v)", p.res, p.gotResult)
	}
	if p.res.InputTokens != 4 || p.res.OutputTokens != 5 || p.res.CacheReadTokens != 5 || p.res.CostUSD != 0.75 {
		t.Errorf("usage summed over models = in %d out %d cache %d cost %v, want 4 5 5 0.75",
			p.res.InputTokens, p.res.OutputTokens, p.res.CacheReadTokens, p.res.CostUSD)
	}
	// "not json at all" and the assistant line whose content is not an array.
	if p.skipped != 2 {
		t.Errorf("skipped = %d, want 2", p.skipped)
	}
}

func TestParseClassification(t *testing.T) {
	tests := []struct {
		name      string
		lines     []string
		ok        bool
		transient bool
		status    int
	}{
		{name: "success", lines: []string{`{"type":"result","subtype":"success","is_error":false,"result":"hi"}`}, ok: true},
		{name: "is_error despite subtype success", lines: []string{`{"type":"result","subtype":"success","is_error":true,"api_error_status":529,"terminal_reason":"api_error","result":"API Error: 529"}`}, transient: true, status: 529},
		{name: "rate limit 429", lines: []string{`{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"API Error: Rate limit reached"}`}, transient: true, status: 429},
		{name: "502 bad gateway", lines: []string{`{"type":"result","subtype":"success","is_error":true,"api_error_status":502}`}, transient: true, status: 502},
		{name: "401 permanent", lines: []string{`{"type":"result","subtype":"success","is_error":true,"api_error_status":401}`}, status: 401},
		{name: "403 permanent", lines: []string{`{"type":"result","subtype":"success","is_error":true,"api_error_status":403}`}, status: 403},
		{name: "400 permanent", lines: []string{`{"type":"result","subtype":"success","is_error":true,"api_error_status":400}`}, status: 400},
		{name: "status from the synthetic message", lines: []string{
			`{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"API Error: 529 Overloaded."}]},"error":"server_error","is_api_error_message":true,"api_error_status":529}`,
			`{"type":"result","subtype":"success","is_error":true,"api_error_status":null,"terminal_reason":"api_error"}`,
		}, transient: true, status: 529},
		{name: "status from the last retry", lines: []string{
			`{"type":"system","subtype":"api_retry","attempt":1,"max_retries":1,"retry_delay_ms":500,"error_status":503,"error":"server_error"}`,
			`{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error"}`,
		}, transient: true, status: 503},
		{name: "overloaded without status", lines: []string{
			`{"type":"assistant","message":{"content":[]},"error":"overloaded","is_api_error_message":true}`,
			`{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error"}`,
		}, transient: true},
		{name: "connection error is not transient", lines: []string{
			`{"type":"system","subtype":"api_retry","attempt":1,"max_retries":1,"error_status":null,"error":"unknown"}`,
			`{"type":"assistant","message":{"content":[{"type":"text","text":"API Error: Unable to connect to API (ECONNREFUSED)"}]},"error":"unknown","is_api_error_message":true}`,
			`{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","result":"API Error: Unable to connect to API (ECONNREFUSED)"}`,
		}},
		{name: "max budget", lines: []string{`{"type":"result","subtype":"error_max_budget_usd","is_error":true,"result":null,"errors":["Reached maximum budget ($0.01)"],"terminal_reason":"budget_exhausted"}`}},
		{name: "error during execution", lines: []string{`{"type":"result","subtype":"error_during_execution","is_error":true,"errors":[]}`}},
		{name: "error subtype without is_error", lines: []string{`{"type":"result","subtype":"error_max_turns","is_error":false}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := parse(t, strings.Join(tt.lines, "\n")+"\n")
			if !p.gotResult {
				t.Fatal("no result")
			}
			if p.res.OK != tt.ok || p.res.Transient != tt.transient || p.res.APIStatus != tt.status {
				t.Errorf("OK %v transient %v status %d, want %v %v %d", p.res.OK, p.res.Transient, p.res.APIStatus, tt.ok, tt.transient, tt.status)
			}
		})
	}
}

func TestParseMaxBudgetText(t *testing.T) {
	p, _ := parse(t, `{"type":"result","subtype":"error_max_budget_usd","is_error":true,"result":null,"errors":["Reached maximum budget ($0.01)"],"terminal_reason":"budget_exhausted"}`)
	if p.res.Subtype != "error_max_budget_usd" || p.res.TerminalReason != "budget_exhausted" || p.res.Text != "Reached maximum budget ($0.01)" {
		t.Errorf("result %+v", p.res)
	}
}

// A resumed session's result reports the whole session in modelUsage and
// total_cost_usd; this run's share is in model_usage_since_last_result.
func TestParseUsageOfResumedRun(t *testing.T) {
	p, _ := parse(t, `{"type":"result","subtype":"success","is_error":false,"total_cost_usd":0.84,"usage":{"input_tokens":20,"output_tokens":10},"modelUsage":{"m":{"inputTokens":80,"outputTokens":40,"costUSD":0.84}},"model_usage_since_last_result":{"m":{"inputTokens":20,"outputTokens":10,"cacheReadInputTokens":7,"costUSD":0.21}}}`)
	if p.res.InputTokens != 20 || p.res.OutputTokens != 10 || p.res.CacheReadTokens != 7 || p.res.CostUSD != 0.21 {
		t.Errorf("usage = %+v, want this run's 20/10/7/0.21", p.res)
	}
	// Without either map, the main-loop usage and the total cost.
	p, _ = parse(t, `{"type":"result","subtype":"success","is_error":false,"total_cost_usd":0.5,"usage":{"input_tokens":3,"output_tokens":2,"cache_read_input_tokens":1}}`)
	if p.res.InputTokens != 3 || p.res.OutputTokens != 2 || p.res.CacheReadTokens != 1 || p.res.CostUSD != 0.5 {
		t.Errorf("usage = %+v, want 3/2/1/0.5", p.res)
	}
}

func TestParseRetryEventText(t *testing.T) {
	_, c := parse(t, `{"type":"system","subtype":"api_retry","attempt":2,"max_retries":3,"retry_delay_ms":604,"error_status":529,"error":"overloaded"}`)
	want := []brain.Event{{Kind: brain.Retry, Text: "API error 529 (overloaded), retry 2 of 3"}}
	if got := c.all(); !slices.Equal(got, want) {
		t.Errorf("events %+v, want %+v", got, want)
	}
}

// A line over the cap is skipped whole and parsing continues with the next line.
func TestParseSkipsOverlongLine(t *testing.T) {
	c := &collector{}
	p := newParser(testLogger(t), c.add)
	p.maxLine = 1024
	long := `{"type":"assistant","message":{"content":[{"type":"text","text":"` + strings.Repeat("x", 200<<10) + `"}]}}`
	stream := long + "\n" + `{"type":"assistant","message":{"content":[{"type":"text","text":"short"}]}}` + "\n" +
		`{"type":"result","subtype":"success","is_error":false,"result":"ok"}`
	if err := p.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	if got := c.all(); !slices.Equal(got, []brain.Event{{Kind: brain.Text, Text: "short"}}) {
		t.Errorf("events %+v", got)
	}
	if !p.gotResult || !p.res.OK || p.skipped != 1 {
		t.Errorf("result %+v got %v skipped %d", p.res, p.gotResult, p.skipped)
	}
}

func TestParseNoResult(t *testing.T) {
	p, c := parse(t, `{"type":"system","subtype":"init","session_id":"s-2"}`+"\n"+`{"type":"assistant","message":{"content":[{"type":"text","text":"partial"}]}}`)
	if p.gotResult {
		t.Errorf("a result was parsed from a stream without one: %+v", p.res)
	}
	if p.sessionID != "s-2" || len(c.all()) != 2 {
		t.Errorf("session %q events %+v", p.sessionID, c.all())
	}
}

// Messages the CLI writes itself are not model output; a real message that carries an
// error kind still is.
func TestParseSyntheticMessages(t *testing.T) {
	_, c := parse(t, strings.Join([]string{
		`{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"No response requested."}]}}`,
		`{"type":"assistant","message":{"model":"claude-x","content":[{"type":"text","text":"API Error: 500"}]},"error":"server_error","is_api_error_message":true,"api_error_status":500}`,
		`{"type":"assistant","message":{"model":"claude-x","content":[{"type":"text","text":"a truncated answ"}]},"error":"max_output_tokens"}`,
	}, "\n"))
	if got, want := c.all(), []brain.Event{{Kind: brain.Text, Text: "a truncated answ"}}; !slices.Equal(got, want) {
		t.Errorf("events %+v, want %+v", got, want)
	}
}
