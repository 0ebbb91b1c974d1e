// Package fakeapi is a scripted OpenAI Chat Completions server for tests: it listens on
// 127.0.0.1, answers POST /v1/chat/completions turn by turn from a Script, records every
// request (headers and decoded body) and checks each one with the turn's Expect.
package fakeapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Script is an ordered list of turns: the n-th request is answered by the n-th turn (a
// turn with Repeat answers several requests).
type Script []Turn

// Turn answers one request: a reply (Text and/or Calls), an error response (Status), or
// a raw body.
type Turn struct {
	// Text is the assistant's content; empty sends null.
	Text string
	// Calls are the tool calls of the reply.
	Calls []Call
	// FinishReason defaults to "tool_calls" when Calls is set, else "stop".
	FinishReason string
	// Usage is reported in the reply; a zero Usage reports 10 prompt and 5 completion
	// tokens.
	Usage Usage
	// NoUsage leaves "usage" out of the reply.
	NoUsage bool

	// Status, when non-zero, answers with that HTTP status and an OpenAI error body
	// carrying ErrorMessage.
	Status       int
	ErrorMessage string
	// Repeat is how many consecutive requests this turn answers (default 1).
	Repeat int
	// Header is added to the response, e.g. Retry-After.
	Header http.Header
	// RawBody, when set, is sent as is with status 200 (or Status).
	RawBody string

	// WaitFor, when set, holds the answer until it is closed or the request goes away.
	WaitFor <-chan struct{}
	// Expect checks the request before it is answered; a failure is recorded (see
	// Server.Failures) and the request is answered with a text naming it.
	Expect func(*Recorded) error
}

// Call is one tool call of a reply. Args is marshalled to the JSON string the API sends,
// unless RawArgs is set.
type Call struct {
	ID      string
	Name    string
	Args    any
	RawArgs string
}

// Usage is the token usage a reply reports.
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
	CachedTokens     int64
}

// Reply is a turn answering with text and no tool call.
func Reply(text string) Turn { return Turn{Text: text} }

// Tool is a turn calling one tool with args, after an optional text.
func Tool(text, name string, args any) Turn {
	return Turn{Text: text, Calls: []Call{{Name: name, Args: args}}}
}

// Error is a turn answering with an HTTP error status.
func Error(status int, message string) Turn { return Turn{Status: status, ErrorMessage: message} }

// Expecting returns t with an Expect check.
func (t Turn) Expecting(fn func(*Recorded) error) Turn { t.Expect = fn; return t }

// Times returns t answering n requests.
func (t Turn) Times(n int) Turn { t.Repeat = n; return t }

// Recorded is one request the server received.
type Recorded struct {
	Header http.Header
	Path   string
	Body   []byte
	// Request is the decoded body (zero when it did not decode).
	Request Request
}

// Request is a Chat Completions request body, as far as the tests look at it.
type Request struct {
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
	Tools    []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

// Message is one message of a request.
type Message struct {
	Role       string  `json:"role"`
	Content    *string `json:"content"`
	ToolCallID string  `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// Text is the message's content ("" for null).
func (m Message) Text() string {
	if m.Content == nil {
		return ""
	}
	return *m.Content
}

// Authorization is the request's Authorization header.
func (r *Recorded) Authorization() string { return r.Header.Get("Authorization") }

// ToolResults are the request's tool messages, in order.
func (r *Recorded) ToolResults() []Message {
	var out []Message
	for _, m := range r.Request.Messages {
		if m.Role == "tool" {
			out = append(out, m)
		}
	}
	return out
}

// LastToolResult is the content of the last tool message ("" when there is none).
func (r *Recorded) LastToolResult() string {
	res := r.ToolResults()
	if len(res) == 0 {
		return ""
	}
	return res[len(res)-1].Text()
}

// Message returns the first message with role, and whether there is one.
func (r *Recorded) Message(role string) (Message, bool) {
	for _, m := range r.Request.Messages {
		if m.Role == role {
			return m, true
		}
	}
	return Message{}, false
}

// ToolNames are the names of the tools the request offers.
func (r *Recorded) ToolNames() []string {
	var out []string
	for _, t := range r.Request.Tools {
		out = append(out, t.Function.Name)
	}
	return out
}

// Server is the fake API.
type Server struct {
	tb   testing.TB
	http *httptest.Server

	mu       sync.Mutex
	script   Script
	turn     int // index into script
	repeated int // requests answered by script[turn] so far
	reqs     []Recorded
	failures []string
	ids      int
}

// New starts a server answering with script; it is closed when the test ends.
func New(tb testing.TB, script Script) *Server {
	tb.Helper()
	s := &Server{tb: tb, script: script}
	s.http = httptest.NewServer(s) // httptest listens on 127.0.0.1
	tb.Cleanup(s.Close)
	return s
}

// URL is the API base URL, ending in /v1.
func (s *Server) URL() string { return s.http.URL + "/v1" }

// Close stops the server; requests still waiting are released.
func (s *Server) Close() {
	s.http.CloseClientConnections()
	s.http.Close()
}

// Requests returns every request received so far.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Recorded(nil), s.reqs...)
}

// Failures returns the Expect failures and unexpected requests so far.
func (s *Server) Failures() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.failures...)
}

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rec := Recorded{Header: r.Header.Clone(), Path: r.URL.Path, Body: body}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		s.fail(fmt.Sprintf("unexpected request %s %s", r.Method, r.URL.Path))
		writeError(w, http.StatusNotFound, "not found")
		return
	}
	if err := json.Unmarshal(body, &rec.Request); err != nil {
		s.fail(fmt.Sprintf("request body is not JSON: %v", err))
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, rec)
	var turn Turn
	ok := s.turn < len(s.script)
	if ok {
		turn = s.script[s.turn]
		s.repeated++
		if s.repeated >= max(turn.Repeat, 1) {
			s.turn, s.repeated = s.turn+1, 0
		}
	}
	s.mu.Unlock()
	if !ok {
		s.fail(fmt.Sprintf("request %d is beyond the script", len(s.Requests())))
		writeError(w, http.StatusInternalServerError, "the fake API's script is exhausted")
		return
	}
	if turn.Expect != nil {
		if err := turn.Expect(&rec); err != nil {
			msg := fmt.Sprintf("request %d: %v", len(s.Requests()), err)
			s.fail(msg)
			s.writeReply(w, Turn{Text: "expectation failed: " + msg})
			return
		}
	}
	if turn.WaitFor != nil {
		select {
		case <-turn.WaitFor:
		case <-r.Context().Done():
			return
		}
	}
	for k, vs := range turn.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	switch {
	case turn.RawBody != "":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(max(turn.Status, http.StatusOK))
		io.WriteString(w, turn.RawBody)
	case turn.Status != 0:
		writeError(w, turn.Status, turn.ErrorMessage)
	default:
		s.writeReply(w, turn)
	}
}

func (s *Server) fail(msg string) {
	s.mu.Lock()
	s.failures = append(s.failures, msg)
	s.mu.Unlock()
	s.tb.Errorf("fake OpenAI API: %s", msg)
}

func (s *Server) writeReply(w http.ResponseWriter, t Turn) {
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	var calls []call
	for _, c := range t.Calls {
		args := c.RawArgs
		if args == "" {
			b, err := json.Marshal(c.Args)
			if err != nil {
				s.fail(fmt.Sprintf("marshal tool arguments: %v", err))
			}
			args = string(b)
		}
		id := c.ID
		if id == "" {
			s.mu.Lock()
			s.ids++
			id = fmt.Sprintf("call_%04d", s.ids)
			s.mu.Unlock()
		}
		calls = append(calls, call{ID: id, Type: "function", Function: fn{Name: c.Name, Arguments: args}})
	}
	finish := t.FinishReason
	if finish == "" {
		finish = "stop"
		if len(calls) > 0 {
			finish = "tool_calls"
		}
	}
	var content any
	if t.Text != "" {
		content = t.Text
	}
	msg := map[string]any{"role": "assistant", "content": content}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	resp := map[string]any{
		"id":      "chatcmpl-fake",
		"object":  "chat.completion",
		"created": 1700000000,
		"model":   "fake-model",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
	}
	if !t.NoUsage {
		u := t.Usage
		if u == (Usage{}) {
			u = Usage{PromptTokens: 10, CompletionTokens: 5}
		}
		resp["usage"] = map[string]any{
			"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens,
			"total_tokens":          u.PromptTokens + u.CompletionTokens,
			"prompt_tokens_details": map[string]any{"cached_tokens": u.CachedTokens},
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	if msg == "" {
		msg = strings.ToLower(http.StatusText(status))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "fake_error", "code": nil}})
}
