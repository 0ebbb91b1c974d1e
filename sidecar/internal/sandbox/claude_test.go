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
	"sync"
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

// TestClaudeCodeWithSubscriptionToken runs the real CLI with a subscription token
// upstream: inside it holds only a per-task token (as CLAUDE_CODE_OAUTH_TOKEN, so it
// speaks as it does with a subscription), the gateway sends the real token as a Bearer
// credential with the OAuth beta flag, and nothing of the real token is in the sandbox's
// environment, processes or files.
func TestClaudeCodeWithSubscriptionToken(t *testing.T) {
	bin := claudeBinary(t)
	e := newTestEnv(t)
	r := e.runner(t)
	spec := e.userDirs(t, "alice")
	var turns atomic.Int32
	var headers []http.Header
	var mu sync.Mutex
	api := newFakeAPI(t, func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		headers = append(headers, req.Header.Clone())
		mu.Unlock()
		io.Copy(io.Discard, req.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		ev := func(name, data string) { fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data) }
		ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":21,"output_tokens":1}}}`)
		if turns.Add(1) == 1 {
			// Everything a process inside could read about itself and the others.
			cmd := `{ env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'; } > /workspace/dump.txt; echo dumped`
			input, _ := json.Marshal(map[string]string{"command": cmd, "description": "dump"})
			partial, _ := json.Marshal(string(input))
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01","name":"Bash","input":{}}}`)
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`+string(partial)+`}}`)
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
	token := "sk-ant-oat01-" + randomHex(t, 24)
	spec.LLM = &LLMUpstream{BaseURL: api.srv.URL, APIKey: token, Header: HeaderOAuth}
	spec.AgentBinary = bin
	spec.Env = map[string]string{"CLAUDE_CODE_MAX_RETRIES": "1"}
	spec.Argv = []string{bin, "-p", "dump", "--output-format", "stream-json", "--verbose",
		"--model", "claude-sonnet-4-5", "--max-turns", "3", "--permission-mode", "bypassPermissions"}
	res := run(t, r, spec)
	mustSucceed(t, res)

	if !strings.Contains(res.stdout, `"apiKeySource":"none"`) || !strings.Contains(res.stdout, `"result":"done"`) {
		t.Errorf("the CLI did not run as with a subscription:\n%s", res.stdout)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(headers) != 2 {
		t.Fatalf("upstream saw %d requests, want 2", len(headers))
	}
	for i, h := range headers {
		if got := h.Get("Authorization"); got != "Bearer "+token {
			t.Errorf("request %d: Authorization %q, want the subscription token", i, got)
		}
		if h.Get("X-Api-Key") != "" {
			t.Errorf("request %d also carries x-api-key", i)
		}
		if beta := strings.Join(h.Values("Anthropic-Beta"), ","); strings.Count(beta, OAuthBeta) != 1 || !strings.Contains(beta, "claude-code-") {
			t.Errorf("request %d: anthropic-beta %q, want the CLI's flags with %s once", i, beta, OAuthBeta)
		}
	}
	dump, err := os.ReadFile(filepath.Join(spec.Workspace, "dump.txt"))
	if err != nil || !strings.Contains(string(dump), "CLAUDE_CODE_OAUTH_TOKEN=") {
		t.Fatalf("the sandbox's dump is missing or holds no per-task token (%v):\n%s", err, dump)
	}
	secret := token[len("sk-ant-oat01-"):]
	if strings.Contains(string(dump), secret) || strings.Contains(res.stdout+res.stderr, secret) {
		t.Fatal("the subscription token is visible inside the sandbox")
	}
	// Nothing the agent could read or leave behind holds it either.
	for _, dir := range []string{spec.Workspace, spec.Home, spec.Tmp} {
		if dir == "" {
			continue
		}
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if b, _ := os.ReadFile(p); strings.Contains(string(b), secret) {
					t.Errorf("%s holds the subscription token", p)
				}
			}
			return nil
		})
	}
}
