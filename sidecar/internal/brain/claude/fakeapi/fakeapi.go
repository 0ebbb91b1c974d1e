// Package fakeapi is a scripted fake of the Anthropic Messages API, good enough for the
// real Claude Code CLI: point ANTHROPIC_BASE_URL at it and every model call is answered
// from a script, streamed exactly as the real API streams it (SSE), or as plain JSON
// when the client did not ask for a stream. Every request is recorded so tests can check
// what the client sent (its key, prompt, system prompt, tool results).
//
// A server serves one main Script plus any number of keyed scripts (AddScript), so
// several concurrent conversations can be told apart, e.g. by a marker in the prompt.
// Each script keeps its own position; once a script is exhausted, further requests get
// the default reply, which is recorded as AnswerDefault so a test can notice.
package fakeapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
)

// maxBody caps a request body; Claude Code's requests carry the whole conversation and
// tool definitions, which reach a few hundred KiB.
const maxBody = 64 << 20

// Matcher picks the requests a keyed script answers.
type Matcher func(*Recorded) bool

// Marker matches requests whose user messages contain s (for instance a unique string
// the test put into the prompt).
func Marker(s string) Matcher {
	return func(r *Recorded) bool { return strings.Contains(r.UserText(), s) }
}

// Option configures a Server.
type Option func(*Server)

// WithDefault sets the reply given once a script is exhausted.
func WithDefault(t Turn) Option {
	return func(s *Server) { s.def = t }
}

// WithScript adds a keyed script at construction (see AddScript).
func WithScript(name string, match Matcher, script Script) Option {
	return func(s *Server) { s.convs = append(s.convs, &conversation{name: name, match: match, script: script}) }
}

// Server is a running fake Messages API on 127.0.0.1.
type Server struct {
	tb   testing.TB
	http *httptest.Server
	// done is closed by Close so that turns blocked on WaitFor let go.
	done chan struct{}

	mu        sync.Mutex
	main      *conversation
	convs     []*conversation
	def       Turn
	reqs      []Recorded
	failures  []string
	seenTools map[string]Block
	toolOrder []string
	nextID    int
	unix      []*http.Server
	closed    bool
	wg        sync.WaitGroup
}

// conversation is one script and how far it has been played.
type conversation struct {
	name   string
	match  Matcher
	script Script
	pos    int // index of the next turn
	served int // requests already answered by script[pos] (error turns repeat)
}

// New starts a fake API answering from script and stops it when the test ends. tb may
// be nil outside tests; then Close must be called and failures are only recorded.
func New(tb testing.TB, script Script, opts ...Option) *Server {
	s := &Server{
		tb:        tb,
		done:      make(chan struct{}),
		main:      &conversation{script: script},
		def:       Reply("fakeapi: the script is exhausted"),
		seenTools: map[string]Block{},
	}
	for _, o := range opts {
		o(s)
	}
	// httptest.NewServer binds 127.0.0.1 only.
	s.http = httptest.NewServer(s)
	if tb != nil {
		tb.Cleanup(s.Close)
	}
	return s
}

// URL is the base URL for ANTHROPIC_BASE_URL (http://127.0.0.1:port).
func (s *Server) URL() string { return s.http.URL }

// AddScript serves script to the requests match accepts, ahead of the main script.
// Scripts are tried in the order they were added; name is recorded in
// Recorded.Conversation.
func (s *Server) AddScript(name string, match Matcher, script Script) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.convs = append(s.convs, &conversation{name: name, match: match, script: script})
}

// ServeUnix also serves the API on a Unix socket at path (for clients inside a sandbox
// that reach it through a forwarder). The socket is removed by Close.
func (s *Server) ServeUnix(path string) error {
	if err := removeStale(path); err != nil {
		return fmt.Errorf("fakeapi: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("fakeapi: listen on %s: %w", path, err)
	}
	srv := &http.Server{Handler: s}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return errors.New("fakeapi: server is closed")
	}
	s.unix = append(s.unix, srv)
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		// Serve returns ErrServerClosed once Close shuts srv down.
		_ = srv.Serve(ln)
	}()
	return nil
}

// Close stops the server, releasing turns blocked on WaitFor, and waits for every
// request handler to return. It is safe to call more than once.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	unix := s.unix
	s.mu.Unlock()
	for _, srv := range unix {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // do not wait for idle connections: close them now
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
	}
	s.http.Close()
	s.wg.Wait()
}

// Requests is every request received so far, in order.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Recorded(nil), s.reqs...)
}

// MessageRequests is every model call (POST /v1/messages) received so far, in order.
func (s *Server) MessageRequests() []Recorded {
	var out []Recorded
	for _, r := range s.Requests() {
		if r.IsMessages() {
			out = append(out, r)
		}
	}
	return out
}

// DefaultReplies counts requests answered with the default reply.
func (s *Server) DefaultReplies() int {
	n := 0
	for _, r := range s.Requests() {
		if r.Answer == AnswerDefault {
			n++
		}
	}
	return n
}

// Failures are the Turn.Expect failures so far.
func (s *Server) Failures() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.failures...)
}

// ToolResults is every distinct tool_result the client sent back (by tool_use_id, in the
// order first seen): what the tools really returned.
func (s *Server) ToolResults() []Block {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Block, 0, len(s.toolOrder))
	for _, id := range s.toolOrder {
		out = append(out, s.seenTools[id])
	}
	return out
}

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	rec := Recorded{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body, Turn: -1}

	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		s.serveMessages(w, r, &rec)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		// A rough count is all a client can do anything with.
		n := len(body)/4 + 1
		rec.Answer, rec.Status = AnswerCountTokens, http.StatusOK
		s.record(&rec)
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": n})
	case r.Method == http.MethodHead || (r.Method == http.MethodGet && (r.URL.Path == "/" || r.URL.Path == "")):
		// Connectivity probes.
		rec.Answer, rec.Status = AnswerProbe, http.StatusOK
		s.record(&rec)
		w.WriteHeader(http.StatusOK)
	default:
		rec.Answer, rec.Status = AnswerNotFound, http.StatusNotFound
		s.record(&rec)
		writeError(w, http.StatusNotFound, "not_found_error", "fakeapi: no such endpoint: "+r.Method+" "+r.URL.Path, nil)
	}
}

// serveMessages answers a model call from the matching script.
func (s *Server) serveMessages(w http.ResponseWriter, r *http.Request, rec *Recorded) {
	if err := rec.decodeBody(); err != nil {
		rec.Answer, rec.Status = AnswerBadRequest, http.StatusBadRequest
		s.record(rec)
		writeError(w, http.StatusBadRequest, "invalid_request_error", "fakeapi: "+err.Error(), nil)
		return
	}
	turn := s.pick(rec)
	if turn.WaitFor != nil {
		select {
		case <-turn.WaitFor:
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		}
	}
	if turn.Expect != nil {
		if err := turn.Expect(rec); err != nil {
			msg := fmt.Sprintf("fakeapi: %s turn %d: expectation failed: %v", convName(rec.Conversation), rec.Turn, err)
			s.fail(msg)
			s.setAnswer(rec.Seq, AnswerExpectFail, http.StatusOK)
			turn = Reply(msg)
		}
	}
	if turn.isError() {
		typ, msg := turn.errorBody()
		writeError(w, turn.Status, typ, msg, turn.Header)
		return
	}
	s.writeReply(w, rec, turn)
}

// pick records rec and chooses the turn that answers it, advancing its script.
func (s *Server) pick(rec *Recorded) Turn {
	s.mu.Lock()
	defer s.mu.Unlock()
	conv := s.main
	for _, c := range s.convs {
		if c.match(rec) {
			conv = c
			break
		}
	}
	rec.Conversation = conv.name
	var turn Turn
	if conv.pos < len(conv.script) {
		turn = conv.script[conv.pos]
		rec.Turn = conv.pos
		conv.served++
		if conv.served >= turn.repeat() {
			conv.pos++
			conv.served = 0
		}
		rec.Answer = AnswerTurn
		if turn.isError() {
			rec.Answer = AnswerError
		}
	} else {
		turn = s.def
		rec.Answer = AnswerDefault
	}
	rec.Status = http.StatusOK
	if turn.isError() {
		rec.Status = turn.Status
	}
	for _, b := range rec.ToolResults() {
		if _, ok := s.seenTools[b.ToolUseID]; !ok {
			s.seenTools[b.ToolUseID] = b
			s.toolOrder = append(s.toolOrder, b.ToolUseID)
		}
	}
	s.recordLocked(rec)
	return turn
}

func (s *Server) record(rec *Recorded) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recordLocked(rec)
}

func (s *Server) recordLocked(rec *Recorded) {
	rec.Seq = len(s.reqs)
	s.reqs = append(s.reqs, *rec)
}

func (s *Server) setAnswer(seq int, answer string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs[seq].Answer, s.reqs[seq].Status = answer, status
}

func (s *Server) fail(msg string) {
	s.mu.Lock()
	s.failures = append(s.failures, msg)
	closed := s.closed
	s.mu.Unlock()
	if s.tb != nil && !closed {
		s.tb.Errorf("%s", msg)
	}
}

// newID returns a fresh id such as toolu_fake0003_1a2b3c4d. The random part keeps ids
// unique across servers: a resumed conversation replays the ids of earlier runs, and the
// client drops tool results whose id it has already seen.
func (s *Server) newID(prefix string) string {
	s.mu.Lock()
	s.nextID++
	n := s.nextID
	s.mu.Unlock()
	return fmt.Sprintf("%s_fake%04d_%s", prefix, n, rand.Text()[:8])
}

func convName(name string) string {
	if name == "" {
		return "main script"
	}
	return "script " + name
}

// replyBlock is a content block of a reply as the API returns it.
type replyBlock struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

// writeReply answers with turn's content, streamed when the client asked for a stream.
func (s *Server) writeReply(w http.ResponseWriter, rec *Recorded, turn Turn) {
	blocks := make([]replyBlock, 0, len(turn.Content))
	for _, c := range turn.Content {
		if c.Tool == "" {
			text := c.Text
			blocks = append(blocks, replyBlock{Type: "text", Text: &text})
			continue
		}
		in, err := c.inputJSON()
		if err != nil {
			writeError(w, http.StatusInternalServerError, "api_error", "fakeapi: "+err.Error(), nil)
			return
		}
		id := c.ID
		if id == "" {
			id = s.newID("toolu")
		}
		blocks = append(blocks, replyBlock{Type: "tool_use", ID: id, Name: c.Tool, Input: in})
	}
	model := rec.Model
	if model == "" {
		model = "claude-fake"
	}
	u := turn.usage()
	usage := map[string]any{
		"input_tokens":                u.InputTokens,
		"output_tokens":               u.OutputTokens,
		"cache_read_input_tokens":     u.CacheReadTokens,
		"cache_creation_input_tokens": u.CacheCreationTokens,
		"service_tier":                "standard",
	}
	msgID := s.newID("msg")
	h := w.Header()
	h.Set("request-id", s.newID("req"))
	for k, vs := range turn.Header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	if !rec.Stream {
		writeJSON(w, http.StatusOK, map[string]any{
			"id": msgID, "type": "message", "role": "assistant", "model": model,
			"content": blocks, "stop_reason": turn.stopReason(), "stop_sequence": nil, "usage": usage,
		})
		return
	}
	sw := newSSE(w)
	startUsage := map[string]any{}
	for k, v := range usage {
		startUsage[k] = v
	}
	// The real API reports a token or so of output at message_start and the final count
	// in message_delta.
	startUsage["output_tokens"] = 1
	sw.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": msgID, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": startUsage,
	}})
	sw.event("ping", map[string]any{"type": "ping"})
	for i, b := range blocks {
		if b.Type == "text" {
			sw.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			for _, part := range splitHalf(*b.Text) {
				sw.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "text_delta", "text": part}})
			}
		} else {
			sw.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}})
			// The input arrives as partial JSON the client must concatenate.
			for _, part := range splitHalf(string(b.Input)) {
				sw.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": part}})
			}
		}
		sw.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	sw.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": turn.stopReason(), "stop_sequence": nil}, "usage": usage})
	sw.event("message_stop", map[string]any{"type": "message_stop"})
}

// splitHalf cuts s in two at a rune boundary (one part when s is short), so clients are
// exercised on reassembling deltas.
func splitHalf(s string) []string {
	if len(s) < 2 {
		return []string{s}
	}
	mid := len(s) / 2
	for mid < len(s) && !isRuneStart(s[mid]) {
		mid++
	}
	if mid >= len(s) {
		return []string{s}
	}
	return []string{s[:mid], s[mid:]}
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// sse writes server-sent events, flushing each one.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (s *sse) event(name string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		// Only maps of plain values are passed in; this cannot happen.
		panic(fmt.Sprintf("fakeapi: marshal %s event: %v", name, err))
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "event: %s\ndata: %s\n\n", name, b)
	// A write error means the client went away; the remaining writes fail the same way.
	_, _ = s.w.Write(buf.Bytes())
	if s.f != nil {
		s.f.Flush()
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "fakeapi: marshal response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeError answers with the Anthropic error shape.
func writeError(w http.ResponseWriter, status int, typ, msg string, extra http.Header) {
	for k, vs := range extra {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	writeJSON(w, status, map[string]any{
		"type":       "error",
		"error":      map[string]any{"type": typ, "message": msg},
		"request_id": "req_fake_error",
	})
}

// removeStale removes a leftover socket at path (only a socket) so ServeUnix can bind it.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	return os.Remove(path)
}
