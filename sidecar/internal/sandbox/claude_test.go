package sandbox

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

// claudeBinary is the Claude Code CLI used by TestClaudeCodeInSandbox: $ISTOTA_CLAUDE_BIN,
// or the copy `make deps` installs under nextcloud-app/node_modules. The test fails
// without one: a missing CLI must not pass as a skipped test.
func claudeBinary(t *testing.T) string {
	p := os.Getenv("ISTOTA_CLAUDE_BIN")
	if p == "" {
		_, file, _, _ := runtime.Caller(0)
		p = filepath.Join(filepath.Dir(file), "../../../nextcloud-app/node_modules/.bin/claude")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("Claude Code CLI not found at %s (run `make deps` or set ISTOTA_CLAUDE_BIN)", p)
	}
	return p
}

// TestClaudeCodeInSandbox runs a real tool-using Claude Code turn in the sandbox against
// a scripted Messages API behind the gateway: the model asks for a Bash command, the
// command runs inside as the agent uid, and the answer comes back.
func TestClaudeCodeInSandbox(t *testing.T) {
	bin := claudeBinary(t)
	e := newTestEnv(t)
	r := e.runner(t)
	spec := e.userDirs(t, "alice")
	var turns atomic.Int32
	api := newFakeAPI(t, func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		ev := func(name, data string) { fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data) }
		ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":21,"output_tokens":1,"cache_read_input_tokens":4,"cache_creation_input_tokens":0}}}`)
		if turns.Add(1) == 1 {
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01","name":"Bash","input":{}}}`)
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"command\":\"id -u > /workspace/who.txt; echo hello-from-sandbox\",\"description\":\"greet\"}"}}`)
			ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
			ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":9}}`)
		} else {
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"done"}}`)
			ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
			ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`)
		}
		ev("message_stop", `{"type":"message_stop"}`)
	})
	key := "sk-ant-real-" + randomHex(t, 16)
	var usage usageLog
	spec.LLM = &LLMUpstream{BaseURL: api.srv.URL, APIKey: key}
	spec.OnUsage = usage.add
	spec.AgentBinary = bin
	spec.Env = map[string]string{"CLAUDE_CODE_MAX_RETRIES": "1"}
	spec.Argv = []string{bin, "-p", "greet", "--output-format", "stream-json", "--verbose",
		"--model", "claude-sonnet-4-5", "--max-turns", "3", "--permission-mode", "bypassPermissions"}
	res := run(t, r, spec)
	mustSucceed(t, res)
	if strings.Contains(res.stdout+res.stderr, key) {
		t.Fatal("the real key reached Claude Code")
	}
	var init, result map[string]any
	var toolResult string
	for _, l := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		switch ev["type"] {
		case "system":
			if ev["subtype"] == "init" {
				init = ev
			}
		case "user":
			toolResult = l
		case "result":
			result = ev
		}
	}
	if init == nil || init["apiKeySource"] != "ANTHROPIC_API_KEY" || init["cwd"] != WorkspaceDir {
		t.Errorf("init event = %v", init)
	}
	if !strings.Contains(toolResult, "hello-from-sandbox") {
		t.Errorf("tool result = %q", toolResult)
	}
	if result == nil || result["is_error"] != false || result["result"] != "done" {
		t.Errorf("result event = %v", result)
	}
	if b, _ := os.ReadFile(filepath.Join(spec.Workspace, "who.txt")); string(b) != fmt.Sprintln(e.uid) {
		t.Errorf("the Bash tool ran as uid %q, want %d", b, e.uid)
	}
	if auth, _ := api.seen(); len(auth) != 2 || auth[0] != key || auth[1] != key {
		t.Errorf("upstream saw %d requests with keys %q", len(auth), auth)
	}
	want := []Usage{{InputTokens: 21, OutputTokens: 9, CacheRead: 4, Requests: 1}, {InputTokens: 21, OutputTokens: 5, CacheRead: 4, Requests: 1}}
	if got := usage.get(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("usage = %+v, want %+v", got, want)
	}
}
