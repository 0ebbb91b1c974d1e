// Package brain holds the types shared by every agent backend ("brain") the executor can
// run for a task: what it is asked (Request), what it reports while running (Event), how
// the run ended (Result), and how its process is started (Launcher). A brain never starts
// a process itself: the Launcher decides where and as whom it runs (normally inside the
// user's bubblewrap sandbox), so a brain cannot accidentally run unsandboxed.
package brain

import (
	"context"
	"encoding/json"
	"io"
	"os/exec"
)

// Request is one agent run for a task.
type Request struct {
	// TaskID and UserID identify the task for logs; they are never passed to the agent.
	TaskID int64
	UserID string
	// Prompt is the full user prompt. It is sent on stdin, never in argv.
	Prompt string
	// SystemPrompt is appended to the agent's own system prompt (empty: nothing appended).
	SystemPrompt string
	// SessionID is the conversation id (a UUID). With Resume the run continues that
	// conversation; without it a new conversation with this id is started. Empty lets
	// the agent choose one (reported in Result.SessionID).
	SessionID string
	Resume    bool
	// Model and MaxTurns override the brain's configured defaults when non-zero.
	Model    string
	MaxTurns int
	// Approve, when set, is asked before each of the agent's own tool calls runs in a
	// brain that runs its tool loop itself (the openai brain); it may wait for the
	// user's answer. ok false means the call must not run, and reason is what the model
	// is told. The claude brain asks through its PreToolUse hook instead.
	Approve func(ctx context.Context, tool string, input json.RawMessage) (ok bool, reason string, err error)
}

// EventKind says what an Event reports.
type EventKind int

// The kinds of progress a brain reports while it runs.
const (
	// Init: the agent started; Text is its session id.
	Init EventKind = iota + 1
	// Text: the model wrote text (Text).
	Text
	// ToolUse: the model called a tool (Tool) with a short summary of its input (ToolInput).
	ToolUse
	// ToolResult: a tool (Tool) finished; Text is the start of its output.
	ToolResult
	// Retry: an API call failed and is retried; Text says why.
	Retry
)

// String names the kind for logs.
func (k EventKind) String() string {
	switch k {
	case Init:
		return "init"
	case Text:
		return "text"
	case ToolUse:
		return "tool_use"
	case ToolResult:
		return "tool_result"
	case Retry:
		return "retry"
	default:
		return "unknown"
	}
}

// Event is one piece of progress reported while a brain runs.
type Event struct {
	Kind EventKind
	Text string
	Tool string
	// ToolInput is a short human summary of a tool call's input: the Bash command, the
	// file path, the URL; at most about 200 characters.
	ToolInput string
	// IsError marks a ToolResult that the tool reported as failed.
	IsError bool
}

// Result is how a run ended. A brain judges the outcome from the agent's own verdict,
// never from an exit code.
type Result struct {
	// Text is the final answer (or the agent's error text when !OK).
	Text string
	// OK is true when the agent finished the turn without error.
	OK bool
	// Transient marks failures of the model API rather than of the task: it was rate
	// limited (429), overloaded (529) or failing (5xx). The queue retries them like any
	// failed attempt, and the user of a Talk request is told once that it waits.
	Transient bool
	// APIStatus is the HTTP status of the failed API call, 0 when none failed.
	APIStatus int
	// Subtype and TerminalReason are the agent's own words for the outcome, e.g.
	// "success"/"completed", "error_max_turns"/"max_turns", "success"/"api_error".
	Subtype        string
	TerminalReason string
	InputTokens    int64
	OutputTokens   int64
	// CacheReadTokens counts input tokens served from the prompt cache.
	CacheReadTokens int64
	CostUSD         float64
	NumTurns        int
	// Retries counts API calls the agent retried during the run.
	Retries    int
	SessionID  string
	DurationMS int64
	// StderrTail is the end of the agent's stderr (a few KiB), for diagnosis.
	StderrTail string
}

// Launcher prepares the agent's process. Command returns an unstarted cmd that runs argv
// with exactly env as its environment and stdin as its standard input, wrapped however the
// launcher isolates it (a sandbox); it arranges that cancelling ctx kills the whole
// process group. The brain sets Stdout and Stderr, starts the cmd, reads it and waits.
type Launcher interface {
	Command(ctx context.Context, argv []string, env map[string]string, stdin io.Reader) (*exec.Cmd, error)
}

// Brain runs one agent turn for a request, calling onEvent (may be nil) for progress:
// one call at a time, possibly from another goroutine, never after Run returns. A nil error with !Result.OK means the agent gave
// a failing verdict; an error means there was no verdict at all (the process could not
// start, died without reporting, or ctx was cancelled); Result then still carries what
// is known, such as StderrTail.
type Brain interface {
	Run(ctx context.Context, req Request, l Launcher, onEvent func(Event)) (Result, error)
}
