package portal

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/usage"
)

// Task is one task as the pages show it: the prompt and result cut short, and only
// the user-facing reason of a failure (the internal one is for admins).
type Task struct {
	ID                int64   `json:"id"`
	Source            string  `json:"source"`
	Status            string  `json:"status"`
	Prompt            string  `json:"prompt"`
	ConversationToken string  `json:"conversation_token"`
	CreatedAt         string  `json:"created_at"`
	StartedAt         string  `json:"started_at"`
	FinishedAt        string  `json:"finished_at"`
	DurationMS        int64   `json:"duration_ms"`
	InputTokens       int64   `json:"input_tokens"`
	OutputTokens      int64   `json:"output_tokens"`
	CostUSD           float64 `json:"cost_usd"`
	Error             string  `json:"error"`
	Result            string  `json:"result"`
	// Attempts counts the runs so far (failed ones, plus the one under way or the one
	// that succeeded), of at most MaxAttempts.
	Attempts    int `json:"attempts"`
	MaxAttempts int `json:"max_attempts"`
	// RetryAt is set while the task waits to run again after a failed attempt: it then
	// runs at that time as attempt Attempts+1.
	RetryAt string `json:"retry_at"`
}

// Lengths at which the prompt and the result are cut.
const (
	promptChars = 200
	resultChars = 500
)

// TaskView renders t for the pages (and the live stream).
func TaskView(t queue.Task) Task {
	v := Task{
		ID: t.ID, Source: t.Source, Status: string(t.Status), Prompt: cut(t.Prompt, promptChars),
		ConversationToken: t.ConversationToken, CreatedAt: rfc3339(t.CreatedAt), StartedAt: rfc3339(t.StartedAt),
		FinishedAt: rfc3339(t.FinishedAt), InputTokens: t.InputTokens, OutputTokens: t.OutputTokens, CostUSD: t.CostUSD,
		Error: UserError(t), Attempts: t.Runs(), MaxAttempts: t.MaxAttempts,
	}
	if t.WaitingToRetry() {
		v.RetryAt = rfc3339(t.NextAttemptAt)
	}
	if t.Status == queue.Completed {
		v.Result = cut(t.Result, resultChars)
	}
	if !t.StartedAt.IsZero() && !t.FinishedAt.IsZero() && t.FinishedAt.After(t.StartedAt) {
		v.DurationMS = t.FinishedAt.Sub(t.StartedAt).Milliseconds()
	}
	return v
}

var apiStatus = regexp.MustCompile(`^model API error (\d{3})\b`)

// modelUnavailable reports whether a stored failure reason is the model service's
// (rate limited, overloaded, failing: what the executor stores for a transient
// failure), rather than the task's.
func modelUnavailable(reason string) bool {
	if strings.HasPrefix(reason, "model API unavailable") {
		return true
	}
	m := apiStatus.FindStringSubmatch(reason)
	return m != nil && (m[1] == "429" || m[1] == "408" || m[1][0] == '5')
}

// UserError is the reason for a failed or cancelled task that the user may see, or why
// a waiting task runs again. The stored reason is internal (paths, stderr, API bodies):
// only its kind is told.
func UserError(t queue.Task) string {
	switch t.Status {
	case queue.Cancelled:
		return "stopped"
	case queue.Failed:
	default:
		switch {
		case !t.WaitingToRetry() || t.Error == "":
			return ""
		case modelUnavailable(t.Error):
			return "the model service is not answering; it will be retried"
		default:
			return "the last attempt failed; it will be retried"
		}
	}
	switch e := t.Error; {
	case strings.Contains(e, "deadline exceeded"):
		return "it took longer than the time limit"
	case modelUnavailable(e):
		if m := apiStatus.FindStringSubmatch(e); m != nil {
			return "the model service was not answering (error " + m[1] + ")"
		}
		return "the model service was not answering"
	case apiStatus.MatchString(e):
		return "the model API answered with error " + apiStatus.FindStringSubmatch(e)[1]
	case strings.Contains(e, "interrupted"):
		return "the run was interrupted too many times"
	default:
		return "the request could not be completed; the administrator can find details in the sidecar log"
	}
}

func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// Usage sums model usage over one period.
type Usage struct {
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
	Tasks        int     `json:"tasks"`
}

// Status is the status panel: the running task, the queue, recent results and usage.
type Status struct {
	Running  *Task            `json:"running"`
	Queued   []Task           `json:"queued"`
	Recent   []Task           `json:"recent"`
	Usage    map[string]Usage `json:"usage"` // today, week, month
	Timezone string           `json:"timezone"`
	// HistoryDays is how long finished requests, their actions and the conversation log
	// are kept (memory.history_days); 0 keeps them.
	HistoryDays int `json:"history_days"`
}

// recentTasks is how many finished tasks the status panel lists.
const recentTasks = 20

// Status returns uid's status panel.
func (s *Service) Status(ctx context.Context, uid string) (Status, error) {
	u, err := s.Authorize(ctx, uid)
	if err != nil {
		return Status{}, err
	}
	out := Status{Queued: []Task{}, Recent: []Task{}, Timezone: u.Timezone}
	if s.o.Settings != nil {
		out.HistoryDays = s.o.Settings.Effective().Memory.HistoryDays
	}
	active, err := s.o.Queue.List(ctx, queue.Filter{UserID: uid, Statuses: []queue.Status{queue.Pending, queue.Locked, queue.Running, queue.PendingConfirmation}, Limit: 200})
	if err != nil {
		return Status{}, err
	}
	// Oldest first: that is the order they run in.
	for i := len(active) - 1; i >= 0; i-- {
		t := active[i]
		v := TaskView(t)
		if (t.Status == queue.Running || t.Status == queue.Locked) && out.Running == nil {
			out.Running = &v
			continue
		}
		out.Queued = append(out.Queued, v)
	}
	done, err := s.o.Queue.List(ctx, queue.Filter{UserID: uid, Statuses: []queue.Status{queue.Completed, queue.Failed, queue.Cancelled}, Limit: recentTasks})
	if err != nil {
		return Status{}, err
	}
	for _, t := range done {
		out.Recent = append(out.Recent, TaskView(t))
	}
	if out.Usage, err = s.usage(ctx, uid, u.Timezone); err != nil {
		return Status{}, err
	}
	return out, nil
}

// usage sums today, this week (from Monday) and this month in the user's timezone, as
// !usage does; tasks counts the tasks created in the period.
func (s *Service) usage(ctx context.Context, uid, tz string) (map[string]Usage, error) {
	loc, err := time.LoadLocation(tz)
	if err != nil || tz == "" {
		loc = time.UTC
	}
	now := s.o.Clock().In(loc)
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, loc)
	periods := map[string]time.Time{
		"today": today,
		"week":  today.AddDate(0, 0, -((int(today.Weekday()) + 6) % 7)),
		"month": time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, loc),
	}
	out := map[string]Usage{}
	for name, since := range periods {
		var t usage.Totals
		if s.o.Usage != nil {
			if t, err = s.o.Usage.Since(ctx, uid, since); err != nil {
				return nil, err
			}
		}
		var n int
		if err := s.o.DB.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks WHERE user_id = ? AND created_at >= ?`,
			uid, store.FormatTime(since)).Scan(&n); err != nil {
			return nil, fmt.Errorf("portal: count tasks of %s: %w", uid, err)
		}
		out[name] = Usage{InputTokens: t.InputTokens + t.CacheRead + t.CacheCreation, OutputTokens: t.OutputTokens, CostUSD: t.CostUSD, Tasks: n}
	}
	return out, nil
}

// Event is one line of a task's progress.
type Event struct {
	Seq  int64  `json:"seq"`
	At   string `json:"at"`
	Kind string `json:"kind"`
	Text string `json:"text"`
}

// Events is one page of a task's progress for the polling fallback.
type Events struct {
	Events []Event `json:"events"`
	Status string  `json:"status"`
}

// maxEvents is how many events one poll returns.
const maxEvents = 200

// TaskEvents returns the events of uid's task id after seq.
func (s *Service) TaskEvents(ctx context.Context, uid string, id, after int64) (Events, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return Events{}, err
	}
	t, err := s.o.Queue.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && t.UserID != uid {
		return Events{}, notFound("task")
	}
	if err != nil {
		return Events{}, err
	}
	evs, err := s.o.Queue.EventsAfter(ctx, id, after)
	if err != nil {
		return Events{}, err
	}
	out := Events{Events: []Event{}, Status: string(t.Status)}
	for i, e := range evs {
		if i == maxEvents {
			break
		}
		out.Events = append(out.Events, EventView(e))
	}
	return out, nil
}

// EventView renders one task event.
func EventView(e queue.Event) Event {
	return Event{Seq: e.Seq, At: rfc3339(e.At), Kind: e.Kind, Text: e.Text}
}

// Stopped is what Stop did.
type Stopped struct {
	Stopped int `json:"stopped"`
	Dropped int `json:"dropped"`
}

// Stop is !stop from the page: the running task is killed, the queued ones dropped.
func (s *Service) Stop(ctx context.Context, uid string) (Stopped, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return Stopped{}, err
	}
	cancelled, err := s.o.Queue.CancelUser(ctx, uid)
	if err != nil {
		return Stopped{}, err
	}
	var out Stopped
	for _, t := range cancelled {
		if t.Status == queue.Running || t.Status == queue.Locked || t.Status == queue.PendingConfirmation {
			out.Stopped++
			if s.o.Canceller != nil && s.o.Canceller.Cancel(t.ID) {
				s.o.Logger.Info("stopped running task from the settings page", "task_id", t.ID, "user_id", uid)
			}
			continue
		}
		out.Dropped++
	}
	return out, nil
}
