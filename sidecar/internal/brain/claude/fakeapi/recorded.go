package fakeapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Answer kinds recorded for each request.
const (
	AnswerTurn        = "turn"          // a scripted reply
	AnswerError       = "error"         // a scripted error
	AnswerDefault     = "default"       // the script was exhausted: the default reply
	AnswerExpectFail  = "expect_failed" // Turn.Expect failed: a text naming the failure
	AnswerCountTokens = "count_tokens"  // POST /v1/messages/count_tokens
	AnswerProbe       = "probe"         // a HEAD/GET probe answered 200
	AnswerNotFound    = "not_found"     // an endpoint the fake does not know
	AnswerBadRequest  = "bad_request"   // an undecodable body
)

// Recorded is one request the server received, with its decoded Messages API body.
type Recorded struct {
	Seq    int
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte

	Model     string
	System    string // the system prompt, text blocks joined by newlines
	Messages  []Message
	Stream    bool
	MaxTokens int
	Tools     []string // names of the tools offered to the model

	// Conversation names the script that answered ("" for the main script), Turn is the
	// index of the answering turn in it (-1 when none did), Answer what kind of answer
	// was sent (Answer* constants) and Status its HTTP status.
	Conversation string
	Turn         int
	Answer       string
	Status       int
}

// Message is one message of a request's conversation.
type Message struct {
	Role    string  `json:"role"`
	Content []Block `json:"content"`
}

// Block is one content block of a request message. For tool_result blocks Content holds
// the result's text (text parts joined by newlines).
type Block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   string          `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// APIKey is the x-api-key header the client sent.
func (r *Recorded) APIKey() string { return r.Header.Get("X-Api-Key") }

// LastUser is the last user message of the request (zero when there is none).
func (r *Recorded) LastUser() Message {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i]
		}
	}
	return Message{}
}

// ToolResults are the tool_result blocks of the last user message.
func (r *Recorded) ToolResults() []Block {
	var out []Block
	for _, b := range r.LastUser().Content {
		if b.Type == "tool_result" {
			out = append(out, b)
		}
	}
	return out
}

// UserText is all text of all user messages, joined by newlines: where a marker string
// put in the prompt is found, whatever the client wrapped around it.
func (r *Recorded) UserText() string {
	var sb strings.Builder
	for _, m := range r.Messages {
		if m.Role != "user" {
			continue
		}
		for _, b := range m.Content {
			if b.Type == "text" {
				sb.WriteString(b.Text)
				sb.WriteByte('\n')
			}
		}
	}
	return sb.String()
}

// IsMessages reports whether the request was a model call (POST /v1/messages).
func (r *Recorded) IsMessages() bool {
	return r.Method == http.MethodPost && r.Path == "/v1/messages"
}

// decodeBody fills the decoded fields of r from its JSON body.
func (r *Recorded) decodeBody() error {
	if len(bytes.TrimSpace(r.Body)) == 0 {
		return nil
	}
	var body struct {
		Model     string          `json:"model"`
		System    json.RawMessage `json:"system"`
		Messages  []Message       `json:"messages"`
		Stream    bool            `json:"stream"`
		MaxTokens int             `json:"max_tokens"`
		Tools     []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		return fmt.Errorf("decode request body: %w", err)
	}
	sys, err := textOf(body.System)
	if err != nil {
		return fmt.Errorf("decode system: %w", err)
	}
	r.Model, r.System, r.Messages, r.Stream, r.MaxTokens = body.Model, sys, body.Messages, body.Stream, body.MaxTokens
	for _, t := range body.Tools {
		r.Tools = append(r.Tools, t.Name)
	}
	return nil
}

// UnmarshalJSON accepts both content forms of the Messages API: a plain string or an
// array of blocks.
func (m *Message) UnmarshalJSON(data []byte) error {
	var raw struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	m.Role = raw.Role
	m.Content = nil
	c := bytes.TrimSpace(raw.Content)
	if len(c) == 0 || c[0] != '[' {
		s, err := textOf(c)
		if err != nil {
			return err
		}
		m.Content = []Block{{Type: "text", Text: s}}
		return nil
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(c, &blocks); err != nil {
		return err
	}
	for _, rb := range blocks {
		var b struct {
			Type      string          `json:"type"`
			Text      string          `json:"text"`
			ID        string          `json:"id"`
			Name      string          `json:"name"`
			Input     json.RawMessage `json:"input"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
			IsError   bool            `json:"is_error"`
		}
		if err := json.Unmarshal(rb, &b); err != nil {
			return err
		}
		content, err := textOf(b.Content)
		if err != nil {
			return err
		}
		m.Content = append(m.Content, Block{Type: b.Type, Text: b.Text, ID: b.ID, Name: b.Name, Input: b.Input,
			ToolUseID: b.ToolUseID, Content: content, IsError: b.IsError})
	}
	return nil
}

// textOf flattens a JSON string, or an array of blocks whose text parts are joined by
// newlines, into text. Null or absent is empty.
func textOf(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n"), nil
}
