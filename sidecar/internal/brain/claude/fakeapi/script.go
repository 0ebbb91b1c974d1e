package fakeapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Script is an ordered list of turns: the n-th model request of a conversation is
// answered by the n-th turn (an error turn with Repeat answers several requests).
type Script []Turn

// Turn answers one model request: either a reply (Content) or, when Status is set, an
// Anthropic error response.
type Turn struct {
	// Content is the reply's content blocks, in order.
	Content []Content
	// StopReason defaults to "tool_use" when Content calls a tool, else "end_turn".
	StopReason string
	// Usage is reported in the reply; zero fields get small defaults.
	Usage Usage

	// Status, when non-zero, makes this turn an error response with that HTTP status
	// (429, 500, 529, 401, 403, …) and the Anthropic error body.
	Status int
	// ErrorType and ErrorMessage override the error body's type and message, which
	// otherwise follow Status (e.g. 529 → overloaded_error "Overloaded").
	ErrorType    string
	ErrorMessage string
	// Repeat is how many consecutive requests an error turn answers (default 1).
	Repeat int
	// Header is added to the response, e.g. retry-after.
	Header http.Header

	// WaitFor, when set, blocks the answer until it is closed (or the request or
	// server goes away): a run can be caught mid-request.
	WaitFor <-chan struct{}
	// Expect checks the request before it is answered. A failure is recorded
	// (Server.Failures), reported to the test, and answered with a text naming it
	// instead of this turn's reply.
	Expect func(*Recorded) error
}

// Content is one content block of a reply: a text block when Tool is empty, else a
// tool_use block calling Tool with Input.
type Content struct {
	Text  string
	Tool  string
	Input any
	// ID of the tool_use block; generated when empty.
	ID string
}

// Usage is the token usage a reply reports.
type Usage struct {
	InputTokens         int64
	OutputTokens        int64
	CacheReadTokens     int64
	CacheCreationTokens int64
}

// Reply is a turn answering with one text block per argument.
func Reply(texts ...string) Turn {
	t := Turn{}
	for _, s := range texts {
		t.Content = append(t.Content, Content{Text: s})
	}
	return t
}

// ToolCall is a turn calling tool with input, preceded by an optional text block.
func ToolCall(text, tool string, input any) Turn {
	t := Turn{}
	if text != "" {
		t.Content = append(t.Content, Content{Text: text})
	}
	t.Content = append(t.Content, Content{Tool: tool, Input: input})
	return t
}

// Bash is a turn calling Claude Code's Bash tool with command.
func Bash(text, command string) Turn {
	return ToolCall(text, "Bash", map[string]any{"command": command, "description": "Run a command"})
}

// Error is a turn answering with an Anthropic error of the given HTTP status.
func Error(status int) Turn {
	return Turn{Status: status}
}

// Times returns a copy of an error turn that answers n consecutive requests.
func (t Turn) Times(n int) Turn {
	t.Repeat = n
	return t
}

// Waiting returns a copy of t that blocks until ch is closed.
func (t Turn) Waiting(ch <-chan struct{}) Turn {
	t.WaitFor = ch
	return t
}

// Expecting returns a copy of t that checks the request with fn first.
func (t Turn) Expecting(fn func(*Recorded) error) Turn {
	t.Expect = fn
	return t
}

// ExpectToolResult checks that the request's last user message carries a tool_result
// whose text contains want: proof that the tool call of the previous turn really ran.
func ExpectToolResult(want string) func(*Recorded) error {
	return func(r *Recorded) error {
		results := r.ToolResults()
		if len(results) == 0 {
			return fmt.Errorf("last user message has no tool_result (want one containing %q)", want)
		}
		for _, tr := range results {
			if strings.Contains(tr.Content, want) {
				return nil
			}
		}
		return fmt.Errorf("no tool_result contains %q: got %q", want, results[0].Content)
	}
}

// ToolFlow is the two-turn script of a real tool call: turn 1 asks for Bash command,
// turn 2 checks that the tool result contains wantOutput and answers final.
func ToolFlow(command, wantOutput, final string) Script {
	return Script{
		Bash("I'll run a command.", command),
		Reply(final).Expecting(ExpectToolResult(wantOutput)),
	}
}

func (t Turn) isError() bool { return t.Status != 0 }

func (t Turn) repeat() int {
	if t.isError() && t.Repeat > 1 {
		return t.Repeat
	}
	return 1
}

func (t Turn) stopReason() string {
	if t.StopReason != "" {
		return t.StopReason
	}
	for _, c := range t.Content {
		if c.Tool != "" {
			return "tool_use"
		}
	}
	return "end_turn"
}

func (t Turn) usage() Usage {
	u := t.Usage
	if u.InputTokens == 0 {
		u.InputTokens = 10
	}
	if u.OutputTokens == 0 {
		u.OutputTokens = 5
	}
	return u
}

// errorBody is the Anthropic error type and message for an error turn.
func (t Turn) errorBody() (string, string) {
	typ, msg := t.ErrorType, t.ErrorMessage
	var defTyp, defMsg string
	switch t.Status {
	case http.StatusBadRequest:
		defTyp, defMsg = "invalid_request_error", "Invalid request"
	case http.StatusUnauthorized:
		defTyp, defMsg = "authentication_error", "invalid x-api-key"
	case http.StatusForbidden:
		defTyp, defMsg = "permission_error", "Your API key does not have permission to use the specified resource."
	case http.StatusNotFound:
		defTyp, defMsg = "not_found_error", "Not found"
	case http.StatusRequestEntityTooLarge:
		defTyp, defMsg = "request_too_large", "Request exceeds the maximum allowed number of bytes."
	case http.StatusTooManyRequests:
		defTyp, defMsg = "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"
	case 529:
		defTyp, defMsg = "overloaded_error", "Overloaded"
	default:
		defTyp, defMsg = "api_error", "Internal server error"
	}
	if typ == "" {
		typ = defTyp
	}
	if msg == "" {
		msg = defMsg
	}
	return typ, msg
}

// inputJSON is the tool input of c as JSON (an empty object when nil).
func (c Content) inputJSON() (json.RawMessage, error) {
	switch in := c.Input.(type) {
	case nil:
		return json.RawMessage(`{}`), nil
	case json.RawMessage:
		return in, nil
	case string:
		return json.RawMessage(in), nil
	default:
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("marshal input of tool %s: %w", c.Tool, err)
		}
		return b, nil
	}
}
