package claude

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/istota/istota/sidecar/internal/brain"
)

// maxLine caps one stdout line. A line carries one content block or one tool result
// (file contents, command output), which can be large; anything beyond this is skipped
// rather than buffered without bound.
const maxLine = 16 << 20

// resultTextMax caps the text of ToolResult events.
const resultTextMax = 200

// parser turns Claude Code's stream-json lines into events and, from the final result
// line, a verdict. It ignores unknown line types and fields: the format grows.
type parser struct {
	log     *slog.Logger
	onEvent func(brain.Event)
	maxLine int

	tools map[string]string // tool_use id → tool name, to name ToolResult events

	sessionID   string // from the init line, in case no result line comes
	retries     int
	retryStatus int    // HTTP status of the last api_retry, 0 when none or unknown
	apiStatus   int    // api_error_status of the last synthetic API-error message
	apiError    string // its error kind (overloaded, rate_limit, authentication_failed, …)

	gotResult bool
	res       brain.Result
	skipped   int // lines that were not JSON or too long
}

func newParser(log *slog.Logger, onEvent func(brain.Event)) *parser {
	if onEvent == nil {
		onEvent = func(brain.Event) {}
	}
	return &parser{log: log, onEvent: onEvent, maxLine: maxLine, tools: map[string]string{}}
}

// read parses r line by line until EOF or a read error, which it returns (nil at EOF).
func (p *parser) read(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > p.maxLine {
				tooLong, line = true, line[:0]
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			p.skipped++
			p.log.Warn("claude stream line too long, skipped", "max_bytes", p.maxLine)
		} else if len(bytes.TrimSpace(line)) > 0 {
			p.line(line)
		}
		line, tooLong = line[:0], false
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// line handles one stream-json line.
func (p *parser) line(b []byte) {
	var env struct {
		Type    string `json:"type"`
		Subtype string `json:"subtype"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		p.skipped++
		p.log.Debug("claude stream: not a JSON line, ignored", "bytes", len(b))
		return
	}
	var err error
	switch {
	case env.Type == "system" && env.Subtype == "init":
		err = p.init(b)
	case env.Type == "system" && env.Subtype == "api_retry":
		err = p.apiRetry(b)
	case env.Type == "assistant":
		err = p.assistant(b)
	case env.Type == "user":
		err = p.user(b)
	case env.Type == "result":
		err = p.result(b)
	default:
		p.log.Debug("claude stream: line ignored", "type", env.Type, "subtype", env.Subtype)
	}
	if err != nil {
		p.skipped++
		p.log.Warn("claude stream: malformed line ignored", "type", env.Type, "subtype", env.Subtype, "err", err)
	}
}

func (p *parser) init(b []byte) error {
	var l struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return err
	}
	p.sessionID = l.SessionID
	p.onEvent(brain.Event{Kind: brain.Init, Text: l.SessionID})
	return nil
}

func (p *parser) apiRetry(b []byte) error {
	var l struct {
		Attempt      int             `json:"attempt"`
		MaxRetries   int             `json:"max_retries"`
		RetryDelayMS float64         `json:"retry_delay_ms"`
		ErrorStatus  *int            `json:"error_status"`
		Error        json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return err
	}
	p.retries++
	p.retryStatus = 0
	if l.ErrorStatus != nil {
		p.retryStatus = *l.ErrorStatus
	}
	var sb strings.Builder
	sb.WriteString("API error")
	if p.retryStatus != 0 {
		sb.WriteString(" ")
		sb.WriteString(strconv.Itoa(p.retryStatus))
	}
	if kind := stringOf(l.Error); kind != "" {
		sb.WriteString(" (" + kind + ")")
	}
	sb.WriteString(", retry " + strconv.Itoa(l.Attempt))
	if l.MaxRetries > 0 {
		sb.WriteString(" of " + strconv.Itoa(l.MaxRetries))
	}
	p.onEvent(brain.Event{Kind: brain.Retry, Text: sb.String()})
	return nil
}

// contentBlock is a content block of an assistant or user message.
type contentBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

func (p *parser) assistant(b []byte) error {
	var l struct {
		Message struct {
			Model   string         `json:"model"`
			Content []contentBlock `json:"content"`
		} `json:"message"`
		Error             json.RawMessage `json:"error"`
		IsAPIErrorMessage bool            `json:"is_api_error_message"`
		APIErrorStatus    *int            `json:"api_error_status"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return err
	}
	if kind := stringOf(l.Error); kind != "" {
		p.apiError = kind
	}
	if l.APIErrorStatus != nil {
		p.apiStatus = *l.APIErrorStatus
	}
	if l.IsAPIErrorMessage || l.Message.Model == "<synthetic>" {
		// Written by the CLI, not the model (e.g. "API Error: 529 Overloaded…"): a
		// notice for a terminal, which reaches the caller through Result.Text.
		return nil
	}
	for _, c := range l.Message.Content {
		switch c.Type {
		case "text":
			if strings.TrimSpace(c.Text) != "" {
				p.onEvent(brain.Event{Kind: brain.Text, Text: c.Text})
			}
		case "tool_use", "server_tool_use":
			p.tools[c.ID] = c.Name
			p.onEvent(brain.Event{Kind: brain.ToolUse, Tool: c.Name, ToolInput: SummarizeToolUse(c.Name, c.Input)})
		}
	}
	return nil
}

func (p *parser) user(b []byte) error {
	var l struct {
		Message struct {
			Content json.RawMessage `json:"content"`
		} `json:"message"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return err
	}
	c := bytes.TrimSpace(l.Message.Content)
	if len(c) == 0 || c[0] != '[' {
		// Plain user text (a replayed prompt): not progress.
		return nil
	}
	var blocks []contentBlock
	if err := json.Unmarshal(c, &blocks); err != nil {
		return err
	}
	for _, blk := range blocks {
		if blk.Type != "tool_result" {
			continue
		}
		p.onEvent(brain.Event{Kind: brain.ToolResult, Tool: p.tools[blk.ToolUseID],
			Text: clip(textOf(blk.Content), resultTextMax), IsError: blk.IsError})
	}
	return nil
}

// modelUsage is one model's entry of the result's usage maps.
type modelUsage struct {
	InputTokens     float64 `json:"inputTokens"`
	OutputTokens    float64 `json:"outputTokens"`
	CacheReadTokens float64 `json:"cacheReadInputTokens"`
	CostUSD         float64 `json:"costUSD"`
}

func (p *parser) result(b []byte) error {
	var l struct {
		Subtype        string          `json:"subtype"`
		IsError        bool            `json:"is_error"`
		Result         json.RawMessage `json:"result"`
		Errors         json.RawMessage `json:"errors"`
		NumTurns       int             `json:"num_turns"`
		DurationMS     float64         `json:"duration_ms"`
		SessionID      string          `json:"session_id"`
		TotalCostUSD   float64         `json:"total_cost_usd"`
		TerminalReason string          `json:"terminal_reason"`
		APIErrorStatus *int            `json:"api_error_status"`
		APIErrorType   string          `json:"api_error_type"`
		Usage          struct {
			InputTokens     float64 `json:"input_tokens"`
			OutputTokens    float64 `json:"output_tokens"`
			CacheReadTokens float64 `json:"cache_read_input_tokens"`
		} `json:"usage"`
		ModelUsage map[string]modelUsage `json:"modelUsage"`
		// This run's share when a session is resumed: modelUsage and total_cost_usd
		// then cover the whole session [observed, 2.1.330].
		SinceLastResult map[string]modelUsage `json:"model_usage_since_last_result"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return err
	}
	r := brain.Result{
		Subtype:        l.Subtype,
		TerminalReason: l.TerminalReason,
		NumTurns:       l.NumTurns,
		DurationMS:     int64(l.DurationMS),
		SessionID:      l.SessionID,
		Retries:        p.retries,
	}
	if r.SessionID == "" {
		r.SessionID = p.sessionID
	}
	r.OK = !l.IsError && (l.Subtype == "" || l.Subtype == "success")
	r.Text = stringOf(l.Result)
	if r.Text == "" && !r.OK {
		r.Text = strings.Join(stringsOf(l.Errors), "; ")
	}

	switch {
	case l.SinceLastResult != nil:
		r.InputTokens, r.OutputTokens, r.CacheReadTokens, r.CostUSD = sumUsage(l.SinceLastResult)
	case len(l.ModelUsage) > 0:
		r.InputTokens, r.OutputTokens, r.CacheReadTokens, r.CostUSD = sumUsage(l.ModelUsage)
	default:
		r.InputTokens, r.OutputTokens, r.CacheReadTokens = int64(l.Usage.InputTokens), int64(l.Usage.OutputTokens), int64(l.Usage.CacheReadTokens)
		r.CostUSD = l.TotalCostUSD
	}

	if !r.OK {
		switch {
		case l.APIErrorStatus != nil:
			r.APIStatus = *l.APIErrorStatus
		case p.apiStatus != 0:
			r.APIStatus = p.apiStatus
		case l.TerminalReason == "api_error":
			r.APIStatus = p.retryStatus
		}
		kind := l.APIErrorType
		if kind == "" {
			kind = p.apiError
		}
		r.Transient = transient(r.APIStatus, kind)
	}
	p.res, p.gotResult = r, true
	return nil
}

// transient reports whether an API failure is the model service's rather than the
// task's, so worth retrying later (and telling the user it waits): rate limits, overload
// and server errors. Authentication, permission and request errors are permanent. With
// no status (a connection error) only an explicit transient error kind counts: the CLI
// reaches the model only through the task's own gateway, which answers 502 when the
// model API is down, so failing to connect at all is ours, not the model service's.
func transient(status int, kind string) bool {
	switch {
	case status == 429 || status == 408 || status >= 500 && status <= 599:
		return true
	case status != 0:
		return false
	}
	switch kind {
	case "rate_limit", "overloaded", "server_error", "rate_limit_error", "overloaded_error", "api_error":
		return true
	}
	return false
}

func sumUsage(m map[string]modelUsage) (in, out, cacheRead int64, cost float64) {
	for _, u := range m {
		in += int64(u.InputTokens)
		out += int64(u.OutputTokens)
		cacheRead += int64(u.CacheReadTokens)
		cost += u.CostUSD
	}
	return in, out, cacheRead, cost
}

// stringOf is raw as a string: a JSON string's value, empty for null or other types.
func stringOf(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return ""
	}
	return s
}

// stringsOf is the string elements of a JSON array (empty for anything else).
func stringsOf(raw json.RawMessage) []string {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil
	}
	var out []string
	for _, it := range items {
		if s := stringOf(it); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// textOf flattens tool-result content, a string or an array of blocks, to its text.
func textOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	if raw[0] != '[' {
		return stringOf(raw)
	}
	var blocks []contentBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return ""
	}
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}
