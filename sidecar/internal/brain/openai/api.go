package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/brain"
)

// message is one Chat Completions message, as sent.
type message struct {
	Role string `json:"role"`
	// Content is null for an assistant message that only calls tools.
	Content    *string    `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function functionCall `json:"function"`
}

type functionCall struct {
	Name string `json:"name"`
	// Arguments is a JSON object encoded as a string (the API's form); a few servers
	// send the object itself, which UnmarshalJSON turns into the same string.
	Arguments arguments `json:"arguments"`
}

// arguments is a tool call's JSON arguments, always held as the JSON text.
type arguments string

func (a *arguments) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*a = arguments(s)
		return nil
	}
	*a = arguments(b)
	return nil
}

type chatRequest struct {
	Model    string    `json:"model"`
	Messages []message `json:"messages"`
	Tools    []toolDef `json:"tools"`
}

type chatResponse struct {
	Model   string `json:"model"`
	Choices []struct {
		Message      responseMessage `json:"message"`
		FinishReason string          `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	// Error: some servers answer 200 with an error body.
	Error *errorBody `json:"error"`
}

// responseMessage is the assistant's message as received: its content is a string, null,
// or (on some servers) an array of text parts.
type responseMessage struct {
	Content   json.RawMessage `json:"content"`
	Refusal   string          `json:"refusal"`
	ToolCalls []toolCall      `json:"tool_calls"`
}

func (m responseMessage) text() string {
	c := bytes.TrimSpace(m.Content)
	var s string
	switch {
	case len(c) == 0 || string(c) == "null":
	case c[0] == '"':
		_ = json.Unmarshal(c, &s)
	case c[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		_ = json.Unmarshal(c, &parts)
		var texts []string
		for _, p := range parts {
			if p.Text != "" {
				texts = append(texts, p.Text)
			}
		}
		s = strings.Join(texts, "\n")
	}
	if s == "" {
		s = m.Refusal
	}
	return s
}

type errorBody struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

// apiFailure is a failed API call: what the user and the log may see (never the key).
type apiFailure struct {
	status    int
	transient bool
	msg       string
}

func (f *apiFailure) Error() string { return f.msg }

// endpoint is the Chat Completions URL under base.
func endpoint(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("openai: API base URL %q must be http(s)://host[/path]", base)
	}
	if u.User != nil {
		return "", errors.New("openai: the API base URL must not carry credentials; use the API key")
	}
	return strings.TrimRight(base, "/") + "/chat/completions", nil
}

// omitted replaces an old tool result when the conversation outgrows MaxRequestBytes.
const omitted = "[output omitted to keep the conversation within the request size limit]"

// encode marshals the conversation. When it is larger than MaxRequestBytes, the oldest
// tool results are replaced by a note, one by one, until it fits; the prompt and the
// assistant's messages are never cut.
func (r *run) encode() ([]byte, error) {
	next := 0
	for {
		body, err := json.Marshal(chatRequest{Model: r.model, Messages: r.messages, Tools: toolDefs()})
		if err != nil {
			return nil, fmt.Errorf("openai: encode request: %w", err)
		}
		if len(body) <= r.b.cfg.MaxRequestBytes {
			return body, nil
		}
		for ; next < len(r.messages); next++ {
			m := &r.messages[next]
			if m.Role == "tool" && m.Content != nil && *m.Content != omitted {
				m.Content = ptr(omitted)
				break
			}
		}
		if next >= len(r.messages) {
			return nil, fmt.Errorf("the conversation is %d bytes, more than the %d a request may carry, even without earlier tool output", len(body), r.b.cfg.MaxRequestBytes)
		}
	}
}

// call sends one request, retrying transient failures up to MaxRetries times.
func (r *run) call(ctx context.Context, body []byte) (*chatResponse, *apiFailure) {
	wait := r.b.cfg.RetryBackoff
	for attempt := 0; ; attempt++ {
		resp, retryAfter, fail := r.b.post(ctx, body)
		if fail == nil || ctx.Err() != nil {
			return resp, fail
		}
		if !fail.transient || attempt >= r.b.cfg.MaxRetries {
			return nil, fail
		}
		d := wait
		if retryAfter > 0 {
			d = retryAfter
		}
		if d > maxRetryWait {
			// The provider asks for a long pause: leave it to the queue's backoff.
			return nil, fail
		}
		r.res.Retries++
		msg := fmt.Sprintf("%s; retrying in %s (%d of %d)", fail.msg, d.Round(time.Second), attempt+1, r.b.cfg.MaxRetries)
		r.log.Info("model API call failed; retrying", "api_status", fail.status, "wait", d, "attempt", attempt+1)
		r.onEvent(brain.Event{Kind: brain.Retry, Text: msg})
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fail
		case <-t.C:
		}
		wait *= 2
	}
}

// post sends one request. retryAfter is the server's Retry-After, if any.
func (b *Brain) post(ctx context.Context, body []byte) (_ *chatResponse, retryAfter time.Duration, _ *apiFailure) {
	target, err := endpoint(b.cfg.BaseURL)
	if err != nil {
		return nil, 0, &apiFailure{msg: err.Error()}
	}
	reqCtx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(reqCtx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, 0, &apiFailure{msg: "model API request: " + b.redact(err.Error())}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set("User-Agent", "istota")
	if key := b.key(); key != "" {
		hreq.Header.Set("Authorization", "Bearer "+key)
	}
	hresp, err := b.client.Do(hreq)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, 0, &apiFailure{msg: "model API call stopped"}
		case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
			return nil, 0, &apiFailure{transient: true, msg: fmt.Sprintf("the model API did not answer within %s", b.cfg.RequestTimeout)}
		default:
			// Connection refused or reset, DNS failure: the endpoint is away for now.
			return nil, 0, &apiFailure{transient: true, msg: "the model API could not be reached: " + b.redact(errText(err))}
		}
	}
	defer hresp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(hresp.Body, b.cfg.MaxResponseBytes+1))
	if err != nil {
		transient := ctx.Err() == nil
		return nil, 0, &apiFailure{status: hresp.StatusCode, transient: transient, msg: "reading the model API's answer failed: " + b.redact(errText(err))}
	}
	if int64(len(raw)) > b.cfg.MaxResponseBytes {
		return nil, 0, &apiFailure{status: statusIfError(hresp.StatusCode),
			msg: fmt.Sprintf("the model API's answer is larger than %d bytes", b.cfg.MaxResponseBytes)}
	}
	if hresp.StatusCode < 200 || hresp.StatusCode > 299 {
		status := hresp.StatusCode
		fail := &apiFailure{status: status, transient: transientStatus(status),
			msg: fmt.Sprintf("the model API answered %d %s", status, http.StatusText(status))}
		if detail := b.errorDetail(raw); detail != "" {
			fail.msg += ": " + detail
		}
		return nil, retryAfterOf(hresp.Header), fail
	}
	var resp chatResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, 0, &apiFailure{msg: "the model API's answer is not Chat Completions JSON: " + b.redact(clip(string(raw), 200))}
	}
	if resp.Error != nil && len(resp.Choices) == 0 {
		return nil, 0, &apiFailure{msg: "the model API reported an error: " + b.redact(clip(firstNonBlank(resp.Error.Message, resp.Error.Type), 500))}
	}
	return &resp, 0, nil
}

// errorDetail is the error message of an error body, or the start of a body that is
// not the usual JSON, with the key removed.
func (b *Brain) errorDetail(raw []byte) string {
	var body struct {
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(raw, &body); err == nil && len(body.Error) > 0 {
		var e errorBody
		if json.Unmarshal(body.Error, &e) == nil {
			return b.redact(clip(firstNonBlank(e.Message, e.Type), 500))
		}
		var s string
		if json.Unmarshal(body.Error, &s) == nil {
			return b.redact(clip(s, 500))
		}
	}
	return b.redact(clip(string(raw), 200))
}

// redact removes the API key from text that may have come from the server or the
// transport. A key too short to replace safely drops the text altogether.
func (b *Brain) redact(s string) string {
	k := b.key()
	switch {
	case k == "":
		return s
	case len(k) < 4:
		return "[detail withheld]"
	}
	return strings.ReplaceAll(s, k, "[redacted]")
}

// transientStatus: rate limits, timeouts and server errors are worth retrying later;
// other client errors (bad key, unknown model, bad request) are not.
func transientStatus(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500 && status <= 599
}

func statusIfError(status int) int {
	if status >= 200 && status <= 299 {
		return 0
	}
	return status
}

func retryAfterOf(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// errText is the innermost useful text of a transport error, without the URL that
// url.Error repeats.
func errText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// clip folds whitespace, makes s valid UTF-8 and cuts it to at most n bytes.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(strings.ToValidUTF8(s, "�")), " ")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// key is the API key for the next request.
func (b *Brain) key() string {
	if b.cfg.KeySource != nil {
		return b.cfg.KeySource()
	}
	return b.cfg.APIKey
}
