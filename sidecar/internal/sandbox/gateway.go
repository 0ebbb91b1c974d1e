package sandbox

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// gateway is a task's LLM endpoint. The agent holds only a per-task token; the gateway
// accepts requests carrying that token, replaces it with the real key and forwards them
// upstream, so the real key never enters the sandbox (reference §2, decision 2). It
// listens on the task's own Unix socket, and every request is checked, not only the
// first of a kept-alive connection.
type gateway struct {
	token   []byte
	key     string
	header  string // "x-api-key", "authorization" or HeaderOAuth
	onUsage func(Usage)
	onAuth  func(status int)
	logger  *slog.Logger
	proxy   *httputil.ReverseProxy

	mu  sync.Mutex
	sum Usage
}

// parseUpstream checks an LLM base URL.
func parseUpstream(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("LLM base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("LLM base URL %q must be http(s)://host[/path]", raw)
	}
	return u, nil
}

func newGateway(token string, up *LLMUpstream, onUsage func(Usage), transport http.RoundTripper, logger *slog.Logger) (*gateway, error) {
	target, err := parseUpstream(up.BaseURL)
	if err != nil {
		return nil, err
	}
	g := &gateway{
		token:   []byte(token),
		key:     up.APIKey,
		header:  strings.ToLower(up.Header),
		onUsage: onUsage,
		onAuth:  up.OnAuthFailure,
		logger:  logger,
	}
	if g.header == "" {
		g.header = "x-api-key"
	}
	g.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Del("X-Api-Key")
			pr.Out.Header.Del("Authorization")
			// Without the client's Accept-Encoding the transport asks for gzip itself
			// and decompresses, so the usage parser always sees plain text.
			pr.Out.Header.Del("Accept-Encoding")
			switch g.header {
			case "authorization":
				pr.Out.Header.Set("Authorization", "Bearer "+g.key)
			case HeaderOAuth:
				pr.Out.Header.Set("Authorization", "Bearer "+g.key)
				pr.Out.Header.Set("Anthropic-Beta", withBeta(pr.Out.Header.Values("Anthropic-Beta"), OAuthBeta))
			default:
				pr.Out.Header.Set("X-Api-Key", g.key)
			}
		},
		Transport: transport,
		// Stream server-sent events as they arrive.
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && g.onAuth != nil {
				g.onAuth(resp.StatusCode)
			}
			resp.Body = newUsageBody(resp.Body, resp.Header.Get("Content-Type"), g.report)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if req.Context().Err() != nil {
				g.logger.Debug("llm gateway request ended by the client", "path", req.URL.Path)
				return
			}
			g.logger.Warn("llm gateway upstream error", "path", req.URL.Path, "error", err)
			writeAPIError(w, http.StatusBadGateway, "api_error", "the model API is unreachable from the gateway")
		},
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return g, nil
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if reason := g.authorize(req); reason != "" {
		g.logger.Warn("llm gateway refused request", "reason", reason, "method", req.Method, "path", req.URL.Path)
		writeAPIError(w, http.StatusUnauthorized, "authentication_error", "invalid or missing task token")
		return
	}
	if req.Method == http.MethodConnect {
		writeAPIError(w, http.StatusMethodNotAllowed, "invalid_request_error", "CONNECT is not supported")
		return
	}
	// The request body is read whole before anything goes upstream, so that nothing
	// reads the client connection once this handler has returned. Streamed through, the
	// body could outlive the handler whenever the upstream fails before taking all of
	// it (closed port, reset, early 5xx): the server then drained the rest itself and
	// its end-of-body hook started a background read that collided with the read of
	// the next kept-alive request, "http: panic serving …: invalid concurrent Body.Read
	// call" (golang/go#68560, reached through full duplex mode). A buffered body also
	// lets the transport resend a request whose pooled upstream connection had died.
	if req.Body != nil && req.Body != http.NoBody {
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxRequestBody))
		if err != nil {
			if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
				writeAPIError(w, http.StatusRequestEntityTooLarge, "request_too_large", "the request is larger than the gateway accepts")
				return
			}
			g.logger.Debug("llm gateway: request body not received", "path", req.URL.Path, "error", err)
			writeAPIError(w, http.StatusBadRequest, "invalid_request_error", "the request body could not be read")
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	g.proxy.ServeHTTP(w, req)
}

// withBeta joins the anthropic-beta values the client sent with flag, once.
func withBeta(values []string, flag string) string {
	var flags []string
	for _, v := range values {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" && !slices.Contains(flags, f) {
				flags = append(flags, f)
			}
		}
	}
	if !slices.Contains(flags, flag) {
		flags = append(flags, flag)
	}
	return strings.Join(flags, ",")
}

// authorize returns why req is refused, or "" when every credential it carries is the
// task token.
func (g *gateway) authorize(req *http.Request) string {
	var presented []string
	presented = append(presented, req.Header.Values("X-Api-Key")...)
	for _, v := range req.Header.Values("Authorization") {
		scheme, tok, ok := strings.Cut(v, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "malformed_authorization"
		}
		presented = append(presented, strings.TrimSpace(tok))
	}
	if len(presented) == 0 {
		return "missing_token"
	}
	for _, p := range presented {
		if subtle.ConstantTimeCompare([]byte(p), g.token) != 1 {
			return "wrong_token"
		}
	}
	return ""
}

// report adds one response's usage; callbacks are serialised by the mutex.
func (g *gateway) report(u Usage) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sum = g.sum.Add(u)
	if g.onUsage != nil {
		g.onUsage(u)
	}
}

func (g *gateway) total() Usage {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sum
}

// serve answers on ln until ctx ends. Request contexts derive from ctx, so cancelling
// it also aborts requests still streaming.
func (g *gateway) serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           g,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(g.logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}

// writeAPIError answers in the Anthropic error shape, which Claude Code understands.
func writeAPIError(w http.ResponseWriter, status int, typ, msg string) {
	body, _ := json.Marshal(map[string]any{
		"type":  "error",
		"error": map[string]string{"type": typ, "message": msg},
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// apiUsage is the usage object of the Messages API; pointers tell absent from zero.
type apiUsage struct {
	InputTokens   *int64 `json:"input_tokens"`
	OutputTokens  *int64 `json:"output_tokens"`
	CacheRead     *int64 `json:"cache_read_input_tokens"`
	CacheCreation *int64 `json:"cache_creation_input_tokens"`
}

// apply overwrites the fields present in a. The Messages API reports cumulative counts,
// in message_start and again in message_delta, so the latest value wins.
func (a *apiUsage) apply(u *Usage) {
	if a == nil {
		return
	}
	set := func(dst *int64, src *int64) {
		if src != nil {
			*dst = *src
		}
	}
	set(&u.InputTokens, a.InputTokens)
	set(&u.OutputTokens, a.OutputTokens)
	set(&u.CacheRead, a.CacheRead)
	set(&u.CacheCreation, a.CacheCreation)
}

const (
	maxRequestBody = 32 << 20 // the Messages API's own request limit
	maxJSONCapture = 8 << 20  // larger JSON bodies are passed on without usage parsing
	maxSSELine     = 1 << 20  // longer SSE lines (big deltas) are skipped by the parser
)

// usageBody passes a response body through unchanged and reads the token usage from it
// on the way: the top-level "usage" of a JSON response, or the usage in the
// message_start and message_delta events of a stream. It reports once, at EOF or Close.
type usageBody struct {
	rc       io.ReadCloser
	sse      bool
	json     bool
	buf      []byte
	skipLine bool
	u        Usage
	once     sync.Once
	done     func(Usage)
}

func newUsageBody(rc io.ReadCloser, contentType string, done func(Usage)) *usageBody {
	ct := strings.ToLower(contentType)
	return &usageBody{
		rc:   rc,
		sse:  strings.HasPrefix(ct, "text/event-stream"),
		json: strings.HasPrefix(ct, "application/json"),
		done: done,
	}
}

func (b *usageBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.observe(p[:n])
	}
	if err == io.EOF {
		b.finish()
	}
	return n, err
}

func (b *usageBody) Close() error {
	b.finish()
	return b.rc.Close()
}

func (b *usageBody) observe(p []byte) {
	switch {
	case b.json:
		if len(b.buf)+len(p) > maxJSONCapture {
			b.json = false
			b.buf = nil
			return
		}
		b.buf = append(b.buf, p...)
	case b.sse:
		for len(p) > 0 {
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				if !b.skipLine {
					b.buf = append(b.buf, p...)
					if len(b.buf) > maxSSELine {
						b.buf, b.skipLine = nil, true
					}
				}
				return
			}
			if !b.skipLine {
				b.buf = append(b.buf, p[:i]...)
				b.sseLine(b.buf)
			}
			b.buf, b.skipLine = b.buf[:0], false
			p = p[i+1:]
		}
	}
}

func (b *usageBody) sseLine(line []byte) {
	line = bytes.TrimRight(line, "\r")
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	var ev struct {
		Type    string `json:"type"`
		Message struct {
			Usage *apiUsage `json:"usage"`
		} `json:"message"`
		Usage *apiUsage `json:"usage"`
	}
	if json.Unmarshal(bytes.TrimSpace(data), &ev) != nil {
		return
	}
	switch ev.Type {
	case "message_start":
		ev.Message.Usage.apply(&b.u)
	case "message_delta":
		ev.Usage.apply(&b.u)
	}
}

func (b *usageBody) finish() {
	b.once.Do(func() {
		if b.json && len(b.buf) > 0 {
			var resp struct {
				Usage *apiUsage `json:"usage"`
			}
			if json.Unmarshal(b.buf, &resp) == nil {
				resp.Usage.apply(&b.u)
			}
		}
		b.buf = nil
		u := b.u
		u.Requests = 1
		b.done(u)
	})
}
