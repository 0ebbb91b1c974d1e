package fakeapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// post sends a Messages API request built from body to base+path.
func post(t *testing.T, client *http.Client, base string, body map[string]any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, base+"/v1/messages?beta=true", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", "placeholder")
	req.Header.Set("content-type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func userMsg(text string) map[string]any {
	return map[string]any{"model": "claude-test", "stream": true, "max_tokens": 100,
		"messages": []any{map[string]any{"role": "user", "content": text}}}
}

type sseEvent struct {
	name string
	data map[string]any
}

func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	sc := bufio.NewScanner(r)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("bad data line %q: %v", line, err)
			}
			if d["type"] != name {
				t.Errorf("event %q carries data of type %v", name, d["type"])
			}
			out = append(out, sseEvent{name: name, data: d})
		case line == "":
		default:
			t.Errorf("unexpected SSE line %q", line)
		}
	}
	return out
}

// The stream has exactly the Messages API's event sequence, and deltas reassemble into
// the scripted text and tool input.
func TestStreamWireFormat(t *testing.T) {
	srv := New(t, Script{{Content: []Content{{Text: "Let me look — ünïcode."}, {Tool: "Bash", Input: map[string]any{"command": "ls -la"}}},
		Usage: Usage{InputTokens: 42, OutputTokens: 7, CacheReadTokens: 3}}})
	resp := post(t, http.DefaultClient, srv.URL(), userMsg("hi"))
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("status %d content-type %q", resp.StatusCode, ct)
	}
	events := readSSE(t, resp.Body)
	var names []string
	for _, e := range events {
		names = append(names, e.name)
	}
	want := []string{"message_start", "ping",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop"}
	if !slices.Equal(names, want) {
		t.Fatalf("events %v\nwant %v", names, want)
	}
	msg := events[0].data["message"].(map[string]any)
	if msg["role"] != "assistant" || msg["model"] != "claude-test" || !strings.HasPrefix(msg["id"].(string), "msg_") {
		t.Errorf("message_start %v", msg)
	}
	if u := msg["usage"].(map[string]any); u["input_tokens"] != 42.0 || u["cache_read_input_tokens"] != 3.0 {
		t.Errorf("start usage %v", u)
	}
	var text, input string
	for _, e := range events {
		if e.name != "content_block_delta" {
			continue
		}
		d := e.data["delta"].(map[string]any)
		switch d["type"] {
		case "text_delta":
			text += d["text"].(string)
		case "input_json_delta":
			input += d["partial_json"].(string)
		}
	}
	if text != "Let me look — ünïcode." {
		t.Errorf("text reassembled to %q", text)
	}
	if input != `{"command":"ls -la"}` {
		t.Errorf("tool input reassembled to %q", input)
	}
	tool := events[6].data["content_block"].(map[string]any)
	if tool["type"] != "tool_use" || tool["name"] != "Bash" || !strings.HasPrefix(tool["id"].(string), "toolu_") || events[6].data["index"] != 1.0 {
		t.Errorf("tool block start %v", events[6].data)
	}
	md := events[10].data
	if md["delta"].(map[string]any)["stop_reason"] != "tool_use" || md["usage"].(map[string]any)["output_tokens"] != 7.0 {
		t.Errorf("message_delta %v", md)
	}
}

func TestJSONReply(t *testing.T) {
	srv := New(t, Script{Reply("plain answer")})
	body := userMsg("hi")
	body["stream"] = false
	resp := post(t, http.DefaultClient, srv.URL(), body)
	defer resp.Body.Close()
	var m struct {
		Type       string `json:"type"`
		Role       string `json:"role"`
		StopReason string `json:"stop_reason"`
		Content    []struct {
			Type, Text string
		} `json:"content"`
		Usage struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m.Type != "message" || m.Role != "assistant" || m.StopReason != "end_turn" || len(m.Content) != 1 ||
		m.Content[0].Text != "plain answer" || m.Usage.InputTokens != 10 || m.Usage.OutputTokens != 5 {
		t.Errorf("reply %+v", m)
	}
}

// Error turns answer with the Anthropic error body, repeat, and then the script goes on;
// once it is exhausted the default reply is given and recorded.
func TestErrorTurnsAndDefault(t *testing.T) {
	retry := http.Header{"Retry-After": {"0"}}
	srv := New(t, Script{Error(529).Times(2), {Status: 429, Header: retry}, Reply("ok")}, WithDefault(Reply("nothing left")))
	type answer struct {
		status int
		etype  string
	}
	var got []answer
	for range 5 {
		resp := post(t, http.DefaultClient, srv.URL(), userMsg("x"))
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		a := answer{status: resp.StatusCode}
		if resp.StatusCode != 200 {
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &e); err != nil || e.Type != "error" || e.Error.Message == "" {
				t.Errorf("error body %s (%v)", b, err)
			}
			a.etype = e.Error.Type
			if resp.StatusCode == 429 && resp.Header.Get("Retry-After") != "0" {
				t.Error("the turn's header was not sent")
			}
		}
		got = append(got, a)
	}
	want := []answer{{529, "overloaded_error"}, {529, "overloaded_error"}, {429, "rate_limit_error"}, {200, ""}, {200, ""}}
	if !slices.Equal(got, want) {
		t.Errorf("answers %v, want %v", got, want)
	}
	var kinds []string
	for _, r := range srv.Requests() {
		kinds = append(kinds, fmt.Sprintf("%s/%d/%d", r.Answer, r.Turn, r.Status))
	}
	wantKinds := []string{"error/0/529", "error/0/529", "error/1/429", "turn/2/200", "default/-1/200"}
	if !slices.Equal(kinds, wantKinds) {
		t.Errorf("recorded %v, want %v", kinds, wantKinds)
	}
	if srv.DefaultReplies() != 1 {
		t.Errorf("default replies %d, want 1", srv.DefaultReplies())
	}
}

func TestErrorBodies(t *testing.T) {
	for _, tt := range []struct {
		status int
		etype  string
	}{{400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"}, {404, "not_found_error"},
		{413, "request_too_large"}, {429, "rate_limit_error"}, {500, "api_error"}, {503, "api_error"}, {529, "overloaded_error"}} {
		typ, msg := Error(tt.status).errorBody()
		if typ != tt.etype || msg == "" {
			t.Errorf("%d: %q %q, want type %q", tt.status, typ, msg, tt.etype)
		}
	}
	if typ, msg := (Turn{Status: 500, ErrorType: "custom_error", ErrorMessage: "boom"}).errorBody(); typ != "custom_error" || msg != "boom" {
		t.Errorf("override ignored: %q %q", typ, msg)
	}
}

// Requests are decoded: system as blocks, content as string or blocks, tool results.
func TestRecordedDecoding(t *testing.T) {
	srv := New(t, Script{Reply("a"), Reply("b")})
	body := map[string]any{
		"model": "m", "stream": false, "max_tokens": 9,
		"system": []any{map[string]any{"type": "text", "text": "sys one"}, map[string]any{"type": "text", "text": "sys two", "cache_control": map[string]any{"type": "ephemeral"}}},
		"tools":  []any{map[string]any{"name": "Bash"}, map[string]any{"name": "Read"}},
		"messages": []any{
			map[string]any{"role": "user", "content": "first"},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "t1", "name": "Bash", "input": map[string]any{"command": "echo"}}}},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": "t1", "content": []any{map[string]any{"type": "text", "text": "out1"}, map[string]any{"type": "text", "text": "out2"}}, "is_error": true},
				map[string]any{"type": "text", "text": "more"},
			}},
		},
	}
	for range 2 {
		resp := post(t, http.DefaultClient, srv.URL(), body)
		resp.Body.Close()
	}
	r := srv.Requests()[0]
	if r.Model != "m" || r.System != "sys one\nsys two" || r.MaxTokens != 9 || r.Stream || !slices.Equal(r.Tools, []string{"Bash", "Read"}) || r.APIKey() != "placeholder" {
		t.Errorf("recorded %+v", r)
	}
	if len(r.Messages) != 3 || r.Messages[0].Content[0].Text != "first" || r.Messages[1].Content[0].Name != "Bash" {
		t.Errorf("messages %+v", r.Messages)
	}
	trs := r.ToolResults()
	if len(trs) != 1 || trs[0].ToolUseID != "t1" || trs[0].Content != "out1\nout2" || !trs[0].IsError {
		t.Errorf("tool results %+v", trs)
	}
	if r.UserText() != "first\nmore\n" {
		t.Errorf("user text %q", r.UserText())
	}
	// The same tool result sent twice is listed once.
	if all := srv.ToolResults(); len(all) != 1 {
		t.Errorf("server tool results %+v, want one", all)
	}
}

// Keyed scripts serve concurrent conversations, each from its own position.
func TestKeyedScriptsConcurrent(t *testing.T) {
	srv := New(t, Script{Reply("main")})
	const n = 6
	for i := range n {
		key := fmt.Sprintf("conv-%d", i)
		srv.AddScript(key, Marker("<"+key+">"), Script{Reply(key + " turn 0"), Reply(key + " turn 1")})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("conv-%d", i)
			for turn := range 2 {
				body := userMsg("hello <" + key + ">")
				body["stream"] = false
				resp := post(t, http.DefaultClient, srv.URL(), body)
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want := fmt.Sprintf("%s turn %d", key, turn); !strings.Contains(string(b), want) {
					errs <- fmt.Errorf("%s: got %s, want %q", key, b, want)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	body := userMsg("no marker")
	body["stream"] = false
	resp := post(t, http.DefaultClient, srv.URL(), body)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"main"`) {
		t.Errorf("unmarked request got %s, want the main script", b)
	}
}

// A WaitFor turn holds its answer until the channel is closed.
func TestWaitFor(t *testing.T) {
	release := make(chan struct{})
	srv := New(t, Script{Reply("late").Waiting(release)})
	got := make(chan string, 1)
	go func() {
		body := userMsg("x")
		body["stream"] = false
		resp, err := http.Post(srv.URL()+"/v1/messages", "application/json", strings.NewReader(mustMarshal(body)))
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	// The request is recorded as soon as it arrives, before the answer.
	waitUntil(t, func() bool { return len(srv.Requests()) == 1 })
	select {
	case b := <-got:
		t.Fatalf("answered before release: %s", b)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	select {
	case b := <-got:
		if !strings.Contains(b, "late") {
			t.Errorf("answer %s", b)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no answer after release")
	}
}

// Close releases a blocked turn instead of hanging.
func TestCloseReleasesWaitFor(t *testing.T) {
	srv := New(nil, Script{Reply("never").Waiting(make(chan struct{}))})
	done := make(chan error, 1)
	go func() {
		resp, err := http.Post(srv.URL()+"/v1/messages", "application/json", strings.NewReader(mustMarshal(userMsg("x"))))
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	waitUntil(t, func() bool { return len(srv.Requests()) == 1 })
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close hung on a blocked turn")
	}
	<-done
	srv.Close() // twice is fine
}

// A failed expectation is recorded and answered with a text naming it.
func TestExpectFailure(t *testing.T) {
	srv := New(nil, Script{Reply("fine").Expecting(ExpectToolResult("hello-from-tool"))})
	defer srv.Close()
	body := userMsg("no tool result here")
	body["stream"] = false
	resp := post(t, http.DefaultClient, srv.URL(), body)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "expectation failed") || strings.Contains(string(b), "fine") {
		t.Errorf("answer %s", b)
	}
	if f := srv.Failures(); len(f) != 1 || !strings.Contains(f[0], "no tool_result") {
		t.Errorf("failures %q", f)
	}
	if r := srv.Requests()[0]; r.Answer != AnswerExpectFail {
		t.Errorf("answer kind %q", r.Answer)
	}

	// And a passing one answers the turn.
	ok := ExpectToolResult("hello")
	rec := &Recorded{Messages: []Message{{Role: "user", Content: []Block{{Type: "tool_result", ToolUseID: "x", Content: "hello-from-tool"}}}}}
	if err := ok(rec); err != nil {
		t.Errorf("passing expectation failed: %v", err)
	}
}

func TestProbesAndUnknownEndpoints(t *testing.T) {
	srv := New(t, nil)
	resp, err := http.Post(srv.URL()+"/v1/messages/count_tokens", "application/json", strings.NewReader(mustMarshal(userMsg("count me"))))
	if err != nil {
		t.Fatal(err)
	}
	var ct struct {
		InputTokens int `json:"input_tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ct); err != nil || ct.InputTokens <= 0 {
		t.Errorf("count_tokens: %+v %v", ct, err)
	}
	resp.Body.Close()
	resp, err = http.Head(srv.URL() + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("HEAD /: %v %v", resp, err)
	}
	resp, err = http.Get(srv.URL() + "/v1/unknown")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("unknown endpoint: %d", resp.StatusCode)
	}
	var kinds []string
	for _, r := range srv.Requests() {
		kinds = append(kinds, r.Answer)
	}
	if !slices.Equal(kinds, []string{AnswerCountTokens, AnswerProbe, AnswerNotFound}) {
		t.Errorf("recorded %v", kinds)
	}
	if len(srv.MessageRequests()) != 0 {
		t.Error("probes counted as model calls")
	}
}

func TestServeUnix(t *testing.T) {
	srv := New(t, Script{Reply("over a socket")})
	sock := filepath.Join(t.TempDir(), "api.sock")
	if err := srv.ServeUnix(sock); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	body := userMsg("x")
	body["stream"] = false
	resp := post(t, client, "http://fake", body)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "over a socket") {
		t.Errorf("answer %s", b)
	}
}

func mustMarshal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
