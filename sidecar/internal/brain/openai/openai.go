// Package openai is the brain that talks to any OpenAI-compatible Chat Completions
// endpoint (OpenAI, vLLM, llama.cpp, Ollama, LiteLLM, …) and runs the agent loop itself,
// in the sidecar: it sends the conversation with a small set of tools, runs each tool
// call the model makes inside the task's sandbox, sends the results back, and repeats
// until the model answers without calling a tool or the turn cap is reached.
//
// The loop runs outside the sandbox on purpose: the API key is added to the HTTP request
// here and never enters the sandbox, while everything the model asks to do (a shell
// command, reading or writing a file) runs as a fresh sandboxed process started through
// the brain.Launcher, so it sees only the user's workspace. This package never touches a
// host path on the model's behalf.
package openai

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/brain"
)

// Defaults for the zero values of Config.
const (
	// DefaultMaxTurns caps model calls per run when neither the request nor the config
	// sets a cap: the loop is ours, and an unbounded one could burn a budget.
	DefaultMaxTurns = 50
	// DefaultRequestTimeout bounds one Chat Completions call (non-streaming: the whole
	// answer has to be generated within it).
	DefaultRequestTimeout = 5 * time.Minute
	// DefaultToolTimeout bounds one tool call.
	DefaultToolTimeout = 2 * time.Minute
	// DefaultMaxToolOutput is how many bytes of a tool's output the model sees.
	DefaultMaxToolOutput = 32 << 10
	// DefaultMaxRequestBytes caps a request body; older tool outputs are elided first.
	DefaultMaxRequestBytes = 4 << 20
	// DefaultMaxResponseBytes caps a response body.
	DefaultMaxResponseBytes = 4 << 20
	// DefaultMaxRetries is how often one failing API call is retried within a run before
	// the run is given up as transient (the task queue then retries the task later).
	DefaultMaxRetries = 2
	// DefaultRetryBackoff is the first wait before a retry; it doubles each time.
	DefaultRetryBackoff = 2 * time.Second
	// maxRetryWait is the longest Retry-After honoured within a run; a longer one
	// is left to the queue's own backoff.
	maxRetryWait = time.Minute
)

// Config configures the OpenAI-compatible brain.
type Config struct {
	// BaseURL is the API root that /chat/completions is appended to, e.g.
	// https://api.openai.com/v1 or http://127.0.0.1:11434/v1.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <key>"; empty sends no Authorization
	// (local servers often need none). It is never logged nor put in an error.
	APIKey string
	// KeySource, when set, is asked for the key on every request instead of APIKey, so
	// a key the admin replaces applies to the next call.
	KeySource func() string
	// Model is the default model; Request.Model overrides it. One of them is required.
	Model string
	// MaxTurns caps model calls per run when Request.MaxTurns is 0; 0 means
	// DefaultMaxTurns.
	MaxTurns int
	// HTTPClient sends the API requests; nil uses a client of its own. Its Timeout
	// should be zero or larger than RequestTimeout.
	HTTPClient *http.Client
	// RequestTimeout bounds one API call (0: DefaultRequestTimeout). A call that runs
	// out of time is a transient failure.
	RequestTimeout time.Duration
	// ToolTimeout bounds one tool call (0: DefaultToolTimeout). The model is told the
	// command was stopped and the run goes on.
	ToolTimeout time.Duration
	// MaxToolOutput caps the bytes of one tool result (0: DefaultMaxToolOutput).
	MaxToolOutput int
	// MaxRequestBytes and MaxResponseBytes cap the API bodies (0: the defaults).
	MaxRequestBytes  int
	MaxResponseBytes int64
	// MaxRetries is how often a transient API failure is retried within the run;
	// 0 means DefaultMaxRetries, a negative value means none.
	MaxRetries int
	// RetryBackoff is the first retry's wait (0: DefaultRetryBackoff); it doubles,
	// and a Retry-After header up to a minute takes precedence.
	RetryBackoff time.Duration
	// OnUsage, when set, is called with the token usage of every model response,
	// failed runs included (the tokens were paid for either way). It runs on Run's
	// goroutine and should be quick.
	OnUsage func(req brain.Request, u Usage)
}

// Usage is what one model response reports it used. InputTokens excludes the prompt
// tokens served from the provider's cache (CacheReadTokens), as Anthropic counts them,
// so that their sum is the prompt size.
type Usage struct {
	Model           string
	InputTokens     int64
	OutputTokens    int64
	CacheReadTokens int64
}

// Brain runs the agent loop against a Chat Completions endpoint. It is safe for
// concurrent use.
type Brain struct {
	cfg    Config
	client *http.Client
	log    *slog.Logger
}

var _ brain.Brain = (*Brain)(nil)

// New returns the brain. It checks only what would make every run fail.
func New(cfg Config, log *slog.Logger) (*Brain, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if _, err := endpoint(cfg.BaseURL); err != nil {
		return nil, err
	}
	if cfg.MaxTurns <= 0 {
		cfg.MaxTurns = DefaultMaxTurns
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.ToolTimeout <= 0 {
		cfg.ToolTimeout = DefaultToolTimeout
	}
	if cfg.MaxToolOutput <= 0 {
		cfg.MaxToolOutput = DefaultMaxToolOutput
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = DefaultMaxRetries
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{}
	}
	return &Brain{cfg: cfg, client: client, log: log}, nil
}

// Subtypes and terminal reasons a Result reports, in the words the Claude brain uses
// where there is one.
const (
	subtypeSuccess       = "success"
	subtypeMaxTurns      = "error_max_turns"
	subtypeAPIError      = "error_api"
	subtypeContentFilter = "error_content_filter"
	subtypeTooLarge      = "error_request_too_large"
)

// Run runs the agent loop for one request. Each run is a new conversation: no session
// is kept between runs (Request.SessionID and Resume are ignored), the prompt carries
// the context. Events are reported on the caller's goroutine, never after Run returns. A failing API call or a refused answer is a
// Result with !OK (Transient for rate limits, server errors and timeouts); an error
// means the run was stopped (ctx) or a tool's sandbox could not be started.
func (b *Brain) Run(ctx context.Context, req brain.Request, l brain.Launcher, onEvent func(brain.Event)) (brain.Result, error) {
	if onEvent == nil {
		onEvent = func(brain.Event) {}
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return brain.Result{}, errors.New("openai: empty prompt")
	}
	model := req.Model
	if model == "" {
		model = b.cfg.Model
	}
	if model == "" {
		return brain.Result{}, errors.New("openai: no model configured (brain.model)")
	}
	maxTurns := req.MaxTurns
	if maxTurns <= 0 {
		maxTurns = b.cfg.MaxTurns
	}
	log := b.log.With("task_id", req.TaskID, "user_id", req.UserID)
	log.Info("openai run starting", "model", model, "max_turns", maxTurns)

	start := time.Now()
	r := &run{b: b, req: req, model: model, l: l, onEvent: onEvent, log: log}
	r.messages = []message{
		{Role: "system", Content: ptr(b.systemPrompt(req.SystemPrompt))},
		{Role: "user", Content: ptr(req.Prompt)},
	}
	res, err := r.loop(ctx, maxTurns)
	res.DurationMS = time.Since(start).Milliseconds()
	if err != nil {
		if ctx.Err() != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, ctx.Err()) {
				return res, fmt.Errorf("openai run stopped (%v): %w", cause, ctx.Err())
			}
			return res, fmt.Errorf("openai run stopped: %w", ctx.Err())
		}
		return res, err
	}
	log.Info("openai run finished", "ok", res.OK, "subtype", res.Subtype, "terminal_reason", res.TerminalReason,
		"api_status", res.APIStatus, "transient", res.Transient, "retries", res.Retries, "num_turns", res.NumTurns,
		"input_tokens", res.InputTokens, "output_tokens", res.OutputTokens, "duration_ms", res.DurationMS)
	return res, nil
}

// run is the state of one Run.
type run struct {
	b        *Brain
	req      brain.Request
	model    string
	l        brain.Launcher
	onEvent  func(brain.Event)
	log      *slog.Logger
	messages []message
	res      brain.Result
}

func (r *run) loop(ctx context.Context, maxTurns int) (brain.Result, error) {
	for turn := 1; ; turn++ {
		body, err := r.encode()
		if err != nil {
			r.res.Subtype, r.res.TerminalReason = subtypeTooLarge, "request_too_large"
			r.res.Text = err.Error()
			return r.res, nil
		}
		resp, fail := r.call(ctx, body)
		if ctx.Err() != nil {
			return r.res, ctx.Err()
		}
		if fail != nil {
			r.res.Subtype, r.res.TerminalReason = subtypeAPIError, "api_error"
			r.res.APIStatus, r.res.Transient, r.res.Text = fail.status, fail.transient, fail.Error()
			return r.res, nil
		}
		r.res.NumTurns = turn
		r.count(resp)
		if len(resp.Choices) == 0 {
			r.res.Subtype, r.res.TerminalReason = subtypeAPIError, "api_error"
			r.res.Text = "the model API answered without a message (no choices)"
			return r.res, nil
		}
		choice := resp.Choices[0]
		text := choice.Message.text()
		if strings.TrimSpace(text) != "" {
			r.onEvent(brain.Event{Kind: brain.Text, Text: text})
		}
		calls := choice.Message.ToolCalls
		if len(calls) == 0 {
			if choice.FinishReason == "content_filter" {
				r.res.Subtype, r.res.TerminalReason = subtypeContentFilter, "content_filter"
				r.res.Text = firstNonBlank(text, "The model provider withheld the answer (content filter).")
				return r.res, nil
			}
			r.res.OK, r.res.Subtype, r.res.TerminalReason = true, subtypeSuccess, "completed"
			r.res.Text = text
			return r.res, nil
		}
		if turn >= maxTurns {
			r.res.Subtype, r.res.TerminalReason = subtypeMaxTurns, "max_turns"
			r.res.Text = firstNonBlank(text, fmt.Sprintf("Stopped after %d turns: the model was still calling tools and gave no final answer.", turn))
			return r.res, nil
		}
		assistant := message{Role: "assistant", ToolCalls: calls}
		if text != "" {
			assistant.Content = ptr(text)
		}
		r.messages = append(r.messages, assistant)
		for i, c := range calls {
			if c.ID == "" {
				// Some servers leave ids out; the tool message must still name one.
				c.ID = fmt.Sprintf("call_%d_%d", turn, i)
				r.messages[len(r.messages)-1].ToolCalls[i].ID = c.ID
			}
			out, err := r.runTool(ctx, c)
			if err != nil {
				return r.res, err
			}
			r.messages = append(r.messages, message{Role: "tool", ToolCallID: c.ID, Content: ptr(out)})
		}
	}
}

// count adds a response's usage to the result and reports it.
func (r *run) count(resp *chatResponse) {
	if resp.Usage == nil {
		return
	}
	u := Usage{Model: r.model, OutputTokens: resp.Usage.CompletionTokens}
	if d := resp.Usage.PromptTokensDetails; d != nil {
		u.CacheReadTokens = d.CachedTokens
	}
	u.InputTokens = max(resp.Usage.PromptTokens-u.CacheReadTokens, 0)
	r.res.InputTokens += u.InputTokens
	r.res.OutputTokens += u.OutputTokens
	r.res.CacheReadTokens += u.CacheReadTokens
	if r.b.cfg.OnUsage != nil {
		r.b.cfg.OnUsage(r.req, u)
	}
}

// systemPrompt explains the tools and the workspace, then appends the caller's own.
func (b *Brain) systemPrompt(extra string) string {
	var s strings.Builder
	fmt.Fprintf(&s, `You are an assistant that gets work done for the user with tools. You work on a server, in a sandbox that holds only this user's files.

Workspace: the user's files are in /workspace, which is also the working directory; relative paths are relative to it. Files you create there reach the user's Nextcloud.

Tools:
- bash: runs a command with /bin/sh -c in the sandbox, as a fresh process each time (the working directory and variables do not carry over from one call to the next). Standard output and error come back together, at most %d KiB (the middle of longer output is left out), and a command is stopped after %s.
- read_file: returns a text file's content (at most %d KiB).
- write_file: creates or replaces a file with the given content (parent folders are created).

Skills: run "istota skill skills" through bash to list the skills you may use and how to call them (calendar, e-mail, memory and more); they act with the user's credentials, which you never see.

The sandbox has no secrets and reaches the network only through a proxy that allows the hosts the administrator listed.

When the work is done, answer the user with your final message as plain text (Markdown is fine), without calling a tool: that message is what the user receives.`,
		b.cfg.MaxToolOutput>>10, b.cfg.ToolTimeout, b.cfg.MaxToolOutput>>10)
	if strings.TrimSpace(extra) != "" {
		s.WriteString("\n\n")
		s.WriteString(extra)
	}
	return s.String()
}

func ptr(s string) *string { return &s }

func firstNonBlank(ss ...string) string {
	for _, s := range ss {
		if strings.TrimSpace(s) != "" {
			return s
		}
	}
	return ""
}
