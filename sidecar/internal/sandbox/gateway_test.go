package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAPI is a scripted Messages API upstream that records what it was sent.
type fakeAPI struct {
	srv *httptest.Server

	mu    sync.Mutex
	auth  []string // the credential header of each request
	paths []string
}

func newFakeAPI(t testing.TB, handler http.HandlerFunc) *fakeAPI {
	f := &fakeAPI{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		cred := r.Header.Get("X-Api-Key")
		if a := r.Header.Get("Authorization"); a != "" {
			cred = a
		}
		f.auth = append(f.auth, cred)
		f.paths = append(f.paths, r.URL.RequestURI())
		f.mu.Unlock()
		handler(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) seen() ([]string, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.auth...), append([]string(nil), f.paths...)
}

func jsonMessage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":12,"output_tokens":34,"cache_read_input_tokens":5,"cache_creation_input_tokens":6}}`+"\n")
}

const sseStart = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_2\",\"usage\":{\"input_tokens\":11,\"output_tokens\":1,\"cache_read_input_tokens\":3,\"cache_creation_input_tokens\":2}}}\n\n"
const sseRest = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hello\"}}\n\n" +
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":17}}\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

type usageLog struct {
	mu    sync.Mutex
	calls []Usage
}

func (u *usageLog) add(x Usage) {
	u.mu.Lock()
	u.calls = append(u.calls, x)
	u.mu.Unlock()
}

func (u *usageLog) get() []Usage {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Usage(nil), u.calls...)
}

func TestLLMGatewayThroughSandbox(t *testing.T) {
	e := newTestEnv(t)
	r := e.runner(t)
	api := newFakeAPI(t, jsonMessage)
	key := "sk-ant-real-" + randomHex(t, 16)
	for _, tc := range []struct {
		mode, header string
		status       int
		wantAuth     string
	}{
		{"ok", "", 200, key},
		{"bearer", "", 200, key},
		{"ok", "authorization", 200, "Bearer " + key},
		{"wrong", "", 401, ""},
		{"none", "", 401, ""},
	} {
		t.Run(tc.mode+" "+tc.header, func(t *testing.T) {
			var usage usageLog
			spec := e.userDirs(t, "u-"+tc.mode+tc.header)
			spec.LLM = &LLMUpstream{BaseURL: api.srv.URL, APIKey: key, Header: tc.header}
			spec.OnUsage = usage.add
			spec.Argv = []string{SelfBinary, helperCommand, "llm", tc.mode}
			before, _ := api.seen()
			res := run(t, r, spec)
			mustSucceed(t, res)
			if !strings.HasPrefix(res.stdout, fmt.Sprintf("status=%d\n", tc.status)) {
				t.Fatalf("inside got %q", res.stdout)
			}
			if strings.Contains(res.stdout+res.stderr, key) {
				t.Fatal("the real key reached the sandbox")
			}
			auth, paths := api.seen()
			auth, paths = auth[len(before):], paths[len(before):]
			if tc.status != 200 {
				if len(auth) != 0 {
					t.Fatalf("a refused request reached the upstream: %q", auth)
				}
				if !strings.Contains(res.stdout, `"authentication_error"`) {
					t.Errorf("refusal body %q is not an API error", res.stdout)
				}
				if got := usage.get(); len(got) != 0 {
					t.Errorf("usage reported for a refused request: %+v", got)
				}
				return
			}
			if len(auth) != 1 || auth[0] != tc.wantAuth || paths[0] != "/v1/messages?beta=true" {
				t.Fatalf("upstream saw %q at %q, want the real key at /v1/messages?beta=true", auth, paths)
			}
			want := Usage{InputTokens: 12, OutputTokens: 34, CacheRead: 5, CacheCreation: 6, Requests: 1}
			if got := usage.get(); len(got) != 1 || got[0] != want {
				t.Errorf("OnUsage calls = %+v, want one %+v", got, want)
			}
		})
	}
}

func TestSSEStreamsThroughSandbox(t *testing.T) {
	e := newTestEnv(t)
	r := e.runner(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	api := newFakeAPI(t, func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, sseStart)
		w.(http.Flusher).Flush()
		// The rest only comes once the agent has shown it received the first event:
		// a buffering gateway would deadlock here and the test would time out.
		select {
		case <-release:
		case <-req.Context().Done():
			return
		}
		io.WriteString(w, sseRest)
	})
	var usage usageLog
	spec := e.userDirs(t, "alice")
	spec.LLM = &LLMUpstream{BaseURL: api.srv.URL, APIKey: "sk-" + randomHex(t, 16)}
	spec.OnUsage = usage.add
	spec.Argv = []string{SelfBinary, helperCommand, "llm", "stream"}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rn, err := r.Prepare(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer rn.Close()
	out, err := rn.Cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := rn.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sawStart := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), `"message_start"`) && !sawStart {
			sawStart = true
			releaseOnce.Do(func() { close(release) })
		}
	}
	if err := rn.Cmd.Wait(); err != nil {
		t.Fatalf("Wait: %v (lines %q)", err, lines)
	}
	if !sawStart {
		t.Fatalf("the first event never arrived before the rest: %q", lines)
	}
	if got := strings.Join(lines, "\n"); !strings.Contains(got, `"message_stop"`) || !strings.HasPrefix(got, "status=200") {
		t.Fatalf("stream inside = %q", got)
	}
	rn.Close()
	want := Usage{InputTokens: 11, OutputTokens: 17, CacheRead: 3, CacheCreation: 2, Requests: 1}
	if got := usage.get(); len(got) != 1 || got[0] != want {
		t.Errorf("OnUsage = %+v, want one %+v", got, want)
	}
	if got := rn.Usage(); got != want {
		t.Errorf("Run.Usage = %+v, want %+v", got, want)
	}
}

// gatewayClient serves g on a Unix socket and returns a client for it.
func gatewayClient(t *testing.T, g *gateway) *http.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "llm.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

func TestGateway(t *testing.T) {
	const key = "sk-real-key"
	const token = "istota-task-aaaa"
	type response struct {
		status int
		body   string
	}
	do := func(t *testing.T, c *http.Client, headers map[string]string) response {
		req, _ := http.NewRequest("POST", "http://gateway/v1/messages", strings.NewReader("{}"))
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return response{resp.StatusCode, string(b)}
	}
	for _, tc := range []struct {
		name      string
		upstream  http.HandlerFunc
		header    string
		reqHeader map[string]string
		status    int
		auth      string
		usage     []Usage
	}{
		{"json usage", jsonMessage, "", map[string]string{"X-Api-Key": token}, 200, key,
			[]Usage{{InputTokens: 12, OutputTokens: 34, CacheRead: 5, CacheCreation: 6, Requests: 1}}},
		{"sse usage", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
			io.WriteString(w, strings.ReplaceAll(sseStart+sseRest, "\n", "\r\n"))
		}, "", map[string]string{"X-Api-Key": token}, 200, key,
			[]Usage{{InputTokens: 11, OutputTokens: 17, CacheRead: 3, CacheCreation: 2, Requests: 1}}},
		{"bearer in, authorization out", jsonMessage, "Authorization", map[string]string{"Authorization": "Bearer " + token}, 200, "Bearer " + key,
			[]Usage{{InputTokens: 12, OutputTokens: 34, CacheRead: 5, CacheCreation: 6, Requests: 1}}},
		{"error response counts a request", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(529)
			io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
		}, "", map[string]string{"X-Api-Key": token}, 529, key, []Usage{{Requests: 1}}},
		{"no usage", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"input_tokens":9}`)
		}, "", map[string]string{"X-Api-Key": token}, 200, key, []Usage{{Requests: 1}}},
		{"missing token", jsonMessage, "", nil, 401, "", nil},
		{"wrong token", jsonMessage, "", map[string]string{"X-Api-Key": "istota-task-bbbb"}, 401, "", nil},
		{"token of another task", jsonMessage, "", map[string]string{"X-Api-Key": "istota-task-aaab"}, 401, "", nil},
		{"right key wrong bearer", jsonMessage, "", map[string]string{"X-Api-Key": token, "Authorization": "Bearer x"}, 401, "", nil},
		{"basic auth", jsonMessage, "", map[string]string{"Authorization": "Basic " + token}, 401, "", nil},
		{"real key is not accepted", jsonMessage, "", map[string]string{"X-Api-Key": key}, 401, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(t, tc.upstream)
			var usage usageLog
			g, err := newGateway(token, &LLMUpstream{BaseURL: api.srv.URL, APIKey: key, Header: tc.header},
				usage.add, http.DefaultTransport, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			c := gatewayClient(t, g)
			got := do(t, c, tc.reqHeader)
			if got.status != tc.status {
				t.Fatalf("status %d body %q, want %d", got.status, got.body, tc.status)
			}
			if strings.Contains(got.body, key) {
				t.Fatal("response leaks the key")
			}
			auth, _ := api.seen()
			if tc.auth == "" {
				if len(auth) != 0 {
					t.Fatalf("refused request reached upstream with %q", auth)
				}
				var e struct {
					Type  string                `json:"type"`
					Error struct{ Type string } `json:"error"`
				}
				if json.Unmarshal([]byte(got.body), &e) != nil || e.Type != "error" || e.Error.Type != "authentication_error" {
					t.Errorf("refusal body = %q", got.body)
				}
			} else if len(auth) != 1 || auth[0] != tc.auth {
				t.Fatalf("upstream saw %q, want %q", auth, tc.auth)
			}
			if u := usage.get(); fmt.Sprint(u) != fmt.Sprint(tc.usage) {
				t.Errorf("usage = %+v, want %+v", u, tc.usage)
			}
		})
	}

	t.Run("subscription token: bearer, oauth beta once, refusals reported", func(t *testing.T) {
		var betas []string
		status := http.StatusOK
		api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
			betas = append(betas, strings.Join(r.Header.Values("Anthropic-Beta"), "|"))
			if status != http.StatusOK {
				w.WriteHeader(status)
				io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"OAuth token has expired"}}`)
				return
			}
			jsonMessage(w, r)
		})
		var refused []int
		g, err := newGateway(token, &LLMUpstream{BaseURL: api.srv.URL, APIKey: key, Header: HeaderOAuth,
			OnAuthFailure: func(st int) { refused = append(refused, st) }}, nil, http.DefaultTransport, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		c := gatewayClient(t, g)
		for _, h := range []map[string]string{
			{"Authorization": "Bearer " + token, "Anthropic-Beta": "claude-code-20250219,oauth-2025-04-20"},
			{"Authorization": "Bearer " + token, "Anthropic-Beta": "claude-code-20250219"},
			{"X-Api-Key": token},
		} {
			if got := do(t, c, h); got.status != 200 {
				t.Fatalf("with %v: %d %s", h, got.status, got.body)
			}
		}
		want := []string{"claude-code-20250219,oauth-2025-04-20", "claude-code-20250219,oauth-2025-04-20", "oauth-2025-04-20"}
		if fmt.Sprint(betas) != fmt.Sprint(want) {
			t.Errorf("anthropic-beta upstream = %q, want %q", betas, want)
		}
		if auth, _ := api.seen(); len(auth) != 3 || auth[0] != "Bearer "+key || auth[2] != "Bearer "+key {
			t.Errorf("credentials upstream = %q", auth)
		}
		status = http.StatusUnauthorized
		if got := do(t, c, map[string]string{"Authorization": "Bearer " + token}); got.status != 401 || strings.Contains(got.body, key) {
			t.Fatalf("expired token: %d %s", got.status, got.body)
		}
		if fmt.Sprint(refused) != "[401]" {
			t.Errorf("refusals reported = %v, want [401]", refused)
		}
	})

	t.Run("every request on a kept-alive connection is checked", func(t *testing.T) {
		api := newFakeAPI(t, jsonMessage)
		g, err := newGateway(token, &LLMUpstream{BaseURL: api.srv.URL, APIKey: key}, nil, http.DefaultTransport, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		var dials int
		c := gatewayClient(t, g)
		tr := c.Transport.(*http.Transport)
		dial := tr.DialContext
		tr.DialContext = func(ctx context.Context, n, a string) (net.Conn, error) {
			dials++
			return dial(ctx, n, a)
		}
		if got := do(t, c, map[string]string{"X-Api-Key": token}); got.status != 200 {
			t.Fatalf("first request: %d", got.status)
		}
		if got := do(t, c, map[string]string{"X-Api-Key": "istota-task-zzzz"}); got.status != 401 {
			t.Fatalf("second request with a wrong token: %d", got.status)
		}
		if dials != 1 {
			t.Fatalf("%d connections, want both requests on one", dials)
		}
	})

	t.Run("upstream down", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := ln.Addr().String()
		ln.Close()
		g, err := newGateway(token, &LLMUpstream{BaseURL: "http://" + addr, APIKey: key}, nil, http.DefaultTransport, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		got := do(t, gatewayClient(t, g), map[string]string{"X-Api-Key": token})
		if got.status != http.StatusBadGateway || !strings.Contains(got.body, "api_error") {
			t.Fatalf("got %d %q", got.status, got.body)
		}
	})

	t.Run("base path is kept", func(t *testing.T) {
		api := newFakeAPI(t, jsonMessage)
		g, err := newGateway(token, &LLMUpstream{BaseURL: api.srv.URL + "/anthropic", APIKey: key}, nil, http.DefaultTransport, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		do(t, gatewayClient(t, g), map[string]string{"X-Api-Key": token})
		if _, paths := api.seen(); len(paths) != 1 || paths[0] != "/anthropic/v1/messages" {
			t.Fatalf("upstream paths %q", paths)
		}
	})
}

func TestUsageBodySplitReads(t *testing.T) {
	// The parser must cope with events split across reads at any byte.
	stream := sseStart + sseRest
	for _, chunk := range []int{1, 3, 7, 64, len(stream)} {
		var got Usage
		b := newUsageBody(io.NopCloser(&chunkReader{s: stream, n: chunk}), "text/event-stream", func(u Usage) { got = u })
		out, err := io.ReadAll(b)
		if err != nil || string(out) != stream {
			t.Fatalf("chunk %d: passthrough changed the body", chunk)
		}
		b.Close()
		want := Usage{InputTokens: 11, OutputTokens: 17, CacheRead: 3, CacheCreation: 2, Requests: 1}
		if got != want {
			t.Errorf("chunk %d: usage %+v, want %+v", chunk, got, want)
		}
	}
}

type chunkReader struct {
	s string
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	n := min(c.n, len(p), len(c.s))
	copy(p, c.s[:n])
	c.s = c.s[n:]
	return n, nil
}
