package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// logBuffer keeps what a logger wrote, for tests that look for a line the code under
// test must never log. net/http recovers a handler's panic and only logs it, so the log
// is the only place a panic in the gateway shows.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// resettingPort returns an address that accepts connections, reads a request's header
// and answers with a TCP reset while the body may still be on its way.
func resettingPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil || line == "\r\n" {
						break
					}
				}
				c.(*net.TCPConn).SetLinger(0) // close sends RST
				c.Close()
			})
		}
	})
	return ln.Addr().String()
}

// TestGatewayUpstreamFailures points the gateway at upstreams that fail the way a
// stopped or struggling model API does, with request bodies below and above what the
// HTTP server drains by itself (256 KiB), several clients at once on kept-alive
// connections. The gateway must answer each with an API error (or pass the upstream's
// error through) and never panic.
func TestGatewayUpstreamFailures(t *testing.T) {
	const token = "istota-task-aaaa"
	overloaded := `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
	type result struct {
		status int
		body   string
	}
	cases := []struct {
		name string
		// upstream starts the upstream and returns its base URL, and the slowUpstream
		// the requests then wait on (nil for the others).
		upstream func(t *testing.T) (string, *slowUpstream)
		// check judges each answer; nil when the client gives up instead.
		check func(t *testing.T, size int, r result)
	}{
		{"closed port", func(t *testing.T) (string, *slowUpstream) { return "http://" + closedPort(t), nil },
			func(t *testing.T, _ int, r result) {
				if r.status != http.StatusBadGateway || !strings.Contains(r.body, `"api_error"`) {
					t.Errorf("got %d %q, want 502 api_error", r.status, r.body)
				}
			}},
		{"connection reset", func(t *testing.T) (string, *slowUpstream) { return "http://" + resettingPort(t), nil },
			func(t *testing.T, _ int, r result) {
				if r.status != http.StatusBadGateway || !strings.Contains(r.body, `"api_error"`) {
					t.Errorf("got %d %q, want 502 api_error", r.status, r.body)
				}
			}},
		{"5xx after reading the request", func(t *testing.T) (string, *slowUpstream) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(529)
				io.WriteString(w, overloaded)
			}))
			t.Cleanup(srv.Close)
			return srv.URL, nil
		}, func(t *testing.T, _ int, r result) {
			if r.status != 529 || r.body != overloaded {
				t.Errorf("got %d %q, want the upstream's 529 passed through", r.status, r.body)
			}
		}},
		{"5xx before reading the request", func(t *testing.T) (string, *slowUpstream) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(503)
				io.WriteString(w, overloaded)
			}))
			t.Cleanup(srv.Close)
			return srv.URL, nil
		}, func(t *testing.T, size int, r result) {
			// Whether the upstream's answer or the failed upload reaches the
			// transport first is up to the kernel for large bodies; either is an
			// error Claude Code retries.
			if r.status != 503 && r.status != http.StatusBadGateway {
				t.Errorf("body %d: got %d %q, want 503 or 502", size, r.status, r.body)
			}
		}},
		{"slow upstream answers late", func(t *testing.T) (string, *slowUpstream) {
			s := newSlowUpstream(t, true)
			return s.srv.URL, s
		}, func(t *testing.T, _ int, r result) {
			if r.status != 200 || !strings.Contains(r.body, `"usage"`) {
				t.Errorf("got %d %q, want the late answer", r.status, r.body)
			}
		}},
		{"slow upstream, client gives up", func(t *testing.T) (string, *slowUpstream) {
			s := newSlowUpstream(t, false)
			return s.srv.URL, s
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			logger := slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug}))
			base, slow := tc.upstream(t)
			transport := http.DefaultTransport.(*http.Transport).Clone()
			t.Cleanup(transport.CloseIdleConnections)
			g, err := newGateway(token, &LLMUpstream{BaseURL: base, APIKey: "sk-real"}, nil, transport, logger)
			if err != nil {
				t.Fatal(err)
			}
			c := gatewayClient(t, g)
			var wg sync.WaitGroup
			for w := range 3 {
				wg.Go(func() {
					for i, size := range []int{2, 64 << 10, 200 << 10, 1 << 20, 2, 64 << 10} {
						body := bytes.Repeat([]byte{'x'}, size)
						ctx, cancel := context.WithCancel(context.Background())
						req, _ := http.NewRequestWithContext(ctx, "POST", "http://gateway/v1/messages", bytes.NewReader(body))
						req.Header.Set("X-Api-Key", token)
						req.Header.Set("Content-Type", "application/json")
						id := fmt.Sprintf("%d-%d", w, i)
						req.Header.Set("X-Test-Request", id)
						if slow != nil && !slow.answer {
							done := make(chan struct{})
							var doErr error
							go func() {
								defer close(done)
								resp, err := c.Do(req)
								if err == nil {
									resp.Body.Close()
								}
								doErr = err
							}()
							slow.waitArrived(t, id)
							cancel()
							<-done
							if !errors.Is(doErr, context.Canceled) {
								t.Errorf("request %s: %v, want it cancelled", id, doErr)
							}
							// The gateway must pass the client's leaving on upstream.
							slow.waitGone(t, id)
							continue
						}
						if slow != nil {
							// Answered once it has arrived; the request cannot end first.
							go func() { slow.waitArrived(t, id); slow.release(id) }()
						}
						resp, err := c.Do(req)
						if err != nil {
							t.Errorf("request %s: %v", id, err)
							cancel()
							continue
						}
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						cancel()
						tc.check(t, size, result{resp.StatusCode, string(b)})
					}
				})
			}
			wg.Wait()
			if l := logs.String(); strings.Contains(l, "panic serving") || strings.Contains(l, "invalid concurrent Body.Read") {
				t.Fatal("the gateway panicked (see the log above)")
			}
		})
	}
}

// slowUpstream answers a request only once the test releases it (answer) or never,
// leaving the client to give up; it reports each request's arrival and departure.
type slowUpstream struct {
	srv    *httptest.Server
	answer bool

	mu       sync.Mutex
	arrived  map[string]chan struct{}
	gone     map[string]chan struct{}
	released map[string]chan struct{}
}

func newSlowUpstream(t *testing.T, answer bool) *slowUpstream {
	s := &slowUpstream{answer: answer, arrived: map[string]chan struct{}{}, gone: map[string]chan struct{}{}, released: map[string]chan struct{}{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Test-Request")
		io.Copy(io.Discard, r.Body)
		close(s.ch(s.arrived, id))
		defer close(s.ch(s.gone, id))
		select {
		case <-s.ch(s.released, id):
			jsonMessage(w, r)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *slowUpstream) ch(m map[string]chan struct{}, id string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := m[id]
	if !ok {
		c = make(chan struct{})
		m[id] = c
	}
	return c
}

// waitClosed blocks until c closes; the bound only keeps a broken gateway from hanging
// the run, it is not a timing assertion.
func waitClosed(t *testing.T, c chan struct{}, what string) {
	select {
	case <-c:
	case <-time.After(time.Minute):
		t.Errorf("%s never happened", what)
	}
}

func (s *slowUpstream) waitArrived(t *testing.T, id string) {
	waitClosed(t, s.ch(s.arrived, id), "request "+id+" reaching the upstream")
}

func (s *slowUpstream) waitGone(t *testing.T, id string) {
	waitClosed(t, s.ch(s.gone, id), "the upstream seeing request "+id+" abandoned")
}

func (s *slowUpstream) release(id string) { close(s.ch(s.released, id)) }

// The gateway holds a whole request before forwarding it, so it bounds what it holds:
// more than the Messages API itself accepts is refused without reaching the upstream.
func TestGatewayRefusesOversizedRequest(t *testing.T) {
	const token = "istota-task-aaaa"
	api := newFakeAPI(t, jsonMessage)
	g, err := newGateway(token, &LLMUpstream{BaseURL: api.srv.URL, APIKey: "sk-real"}, nil, http.DefaultTransport, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	c := gatewayClient(t, g)
	for _, tc := range []struct {
		size   int
		status int
	}{{maxRequestBody, http.StatusOK}, {maxRequestBody + 1, http.StatusRequestEntityTooLarge}} {
		req, _ := http.NewRequest("POST", "http://gateway/v1/messages", bytes.NewReader(bytes.Repeat([]byte{'x'}, tc.size)))
		req.Header.Set("X-Api-Key", token)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%d bytes: %v", tc.size, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%d bytes: %d %q, want %d", tc.size, resp.StatusCode, b, tc.status)
		}
	}
	if auth, _ := api.seen(); len(auth) != 1 {
		t.Errorf("the upstream got %d requests, want only the one within the limit", len(auth))
	}
}
