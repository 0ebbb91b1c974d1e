// Package queue is the durable task queue: every piece of agent work is a row in the
// tasks table, claimed with a lease so that a crashed or hung worker never loses a task and
// never runs one twice. The rows are the truth; in-memory channels elsewhere are only hints.
//
// A task moves pending → locked (claimed) → running (started) → completed | failed, or
// back to pending for a retry; any unfinished task may be cancelled. Each transition that
// belongs to a worker checks the lease owner, so a worker that lost its lease (the task
// was cancelled or reclaimed) cannot overwrite what happened meanwhile.
package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

// Status is the state of a task, as stored in tasks.status.
type Status string

// Task states. PendingConfirmation is part of the schema for tasks that wait for the
// user's go-ahead; the queue never claims them but can cancel them.
const (
	Pending             Status = "pending"
	Locked              Status = "locked"
	Running             Status = "running"
	Completed           Status = "completed"
	Failed              Status = "failed"
	Cancelled           Status = "cancelled"
	PendingConfirmation Status = "pending_confirmation"
)

// Finished reports whether s is a final state that no longer changes.
func (s Status) Finished() bool {
	return s == Completed || s == Failed || s == Cancelled
}

func (s Status) valid() bool {
	switch s {
	case Pending, Locked, Running, Completed, Failed, Cancelled, PendingConfirmation:
		return true
	}
	return false
}

// Task sources: where the work came from (tasks.source).
const (
	SourceTalk     = "talk"
	SourceCLI      = "cli"
	SourceEmail    = "email"
	SourceTasksMD  = "tasks_md"
	SourceCron     = "cron"
	SourceBriefing = "briefing"
	SourceSubtask  = "subtask"
)

func knownSource(s string) bool {
	switch s {
	case SourceTalk, SourceCLI, SourceEmail, SourceTasksMD, SourceCron, SourceBriefing, SourceSubtask:
		return true
	}
	return false
}

// Event kinds for AddEvent (task_events.kind). Other lowercase words are accepted too.
const (
	EventProgress = "progress"
	EventTool     = "tool"
	EventRetry    = "retry" // a transient API error the brain is retrying
	EventResult   = "result"
	EventError    = "error"
)

// Errors returned by lease-holding operations. A cancelled task's error matches both
// ErrCancelled and ErrLeaseLost, so a worker that only cares whether it may continue can
// test for ErrLeaseLost alone.
var (
	// ErrNoTask means Claim found nothing due that may run now.
	ErrNoTask = errors.New("no task ready")
	// ErrLeaseLost means the task is no longer held by the caller: it was reclaimed,
	// cancelled, finished or deleted.
	ErrLeaseLost = errors.New("lease lost")
	// ErrCancelled means the task was cancelled.
	ErrCancelled = errors.New("task cancelled")
	// ErrFinished means Cancel was asked for a task that had already finished.
	ErrFinished = errors.New("task already finished")
)

// Task mirrors one row of the tasks table.
type Task struct {
	ID                int64
	UserID            string
	Source            string
	Interactive       bool
	Status            Status
	Prompt            string
	ConversationToken string
	ReplyToMessageID  int64
	DedupeKey         string // empty when the task has none
	Attempts          int    // failed runs so far, whatever made them fail
	MaxAttempts       int
	// TransientFailures counts the failed runs whose model API was unavailable (429,
	// 5xx, 529): the user is told about the first one, and not again. (The column is
	// still called transient_retries, from when such runs were not counted as attempts.)
	TransientFailures int
	NextAttemptAt     time.Time
	// LeaseOwner is the worker holding the task while locked or running. It is cleared
	// when the task goes back to pending and kept when it finishes, so on a finished task
	// it names the worker that last held it; a cancelled task with an owner was locked or
	// running when it was cancelled.
	LeaseOwner   string
	LeaseUntil   time.Time
	Result       string
	Error        string // the last failure's reason
	InputTokens  int64
	OutputTokens int64
	CostUSD      float64
	CreatedAt    time.Time
	StartedAt    time.Time
	FinishedAt   time.Time
	Delivery
}

// Delivery says where a task's answer goes besides its conversation and what kind of
// scheduled run it is. Interactive Talk tasks leave it empty.
type Delivery struct {
	// Email, when set, sends the answer by mail (a threaded reply or a new message).
	Email *EmailReply
	// Command is an admin's scheduled shell command, run in the sandbox instead of
	// the agent.
	Command string
	// SilentUnlessAction drops the answer when the run found nothing to report.
	SilentUnlessAction bool
	// Job names what the run is for: "cron:<name>", "briefing:<name>" or "tasks_md:<id>".
	Job string
}

// EmailReply is where a mailed answer goes. InReplyTo and References thread it under
// the message it answers; both are empty for a new message.
type EmailReply struct {
	To         string   `json:"to"`
	Subject    string   `json:"subject"`
	InReplyTo  string   `json:"in_reply_to,omitempty"`
	References []string `json:"references,omitempty"`
}

// NewTask is what intake hands to Enqueue.
type NewTask struct {
	UserID            string
	Source            string // one of the Source* constants
	Interactive       bool   // a person is waiting: claimed first and may use reserved slots
	Prompt            string
	ConversationToken string
	ReplyToMessageID  int64
	// DedupeKey makes intake idempotent (Talk message id, Message-ID, line hash,
	// job+minute): a second Enqueue with the same key returns the first task.
	DedupeKey   string
	MaxAttempts int       // 0 means Options.MaxAttempts
	NotBefore   time.Time // zero means now
	// Attachments are files shared with the request, already in the user's workspace.
	Attachments []Attachment
	Delivery
}

// Attachment is a file shared with a task's request (a voice message, a photo).
type Attachment struct {
	// Path is relative to the user's workspace (inbox/…).
	Path     string
	MimeType string
	Size     int64
}

// Options configure a Queue. Zero values take the documented defaults.
type Options struct {
	// Clock is the time source; default time.Now. Every stored time comes from it.
	Clock func() time.Time
	// Lease is how long a claim stays valid without renewal; default 2 minutes.
	Lease time.Duration
	// Backoff is the delay before retry n (the last entry repeats); default 1, 4, 16 min.
	Backoff []time.Duration
	// MaxAttempts is the default number of runs (first try plus retries); default 4.
	MaxAttempts int
	// OnReclaimFailed, if set, runs inside the transaction in which ReclaimExpired or
	// ReclaimAll gives a task up for good (its last attempt was interrupted), so the caller
	// can enqueue the failure notice atomically, as Fail's within does. An error rolls that
	// task's reclaim back; it is retried on the next reclaim.
	OnReclaimFailed func(tx *sql.Tx, t Task) error
}

// Default values for Options.
const (
	DefaultLease       = 2 * time.Minute
	DefaultMaxAttempts = 4
)

// DefaultBackoff is the retry schedule: 1, 4 and 16 minutes.
func DefaultBackoff() []time.Duration {
	return []time.Duration{time.Minute, 4 * time.Minute, 16 * time.Minute}
}

// Queue is the task queue over one store.DB. It is safe for concurrent use, and several
// Queues (in one or more processes) may share a database.
type Queue struct {
	db   *store.DB
	opts Options
}

// New returns a Queue over db.
func New(db *store.DB, opts Options) *Queue {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	if len(opts.Backoff) == 0 {
		opts.Backoff = DefaultBackoff()
	} else {
		opts.Backoff = append([]time.Duration(nil), opts.Backoff...)
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	return &Queue{db: db, opts: opts}
}

// Lease is the lease duration claims get; workers renew well within it.
func (q *Queue) Lease() time.Duration { return q.opts.Lease }

func (q *Queue) now() time.Time { return q.opts.Clock().UTC() }

// backoff is the delay before the retry that follows n earlier failures (n ≥ 0).
func (q *Queue) backoff(n int) time.Duration {
	if n >= len(q.opts.Backoff) {
		n = len(q.opts.Backoff) - 1
	}
	if n < 0 {
		n = 0
	}
	return q.opts.Backoff[n]
}

// taskColumns lists the tasks columns in the order scanTask reads them.
const taskColumns = `id, user_id, source, interactive, status, prompt, conversation_token,
	reply_to_message_id, dedupe_key, attempts, max_attempts, transient_retries, next_attempt_at,
	lease_owner, lease_until, result, error, input_tokens, output_tokens, cost_usd,
	created_at, started_at, finished_at, email_reply, command, silent_unless_action, job`

type scanner interface{ Scan(dest ...any) error }

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func scanTask(s scanner) (Task, error) {
	var (
		t                                                      Task
		status                                                 string
		dedupe                                                 sql.NullString
		nextAttempt, leaseUntil, created, started, finishedStr string
		emailReply                                             string
	)
	err := s.Scan(&t.ID, &t.UserID, &t.Source, &t.Interactive, &status, &t.Prompt,
		&t.ConversationToken, &t.ReplyToMessageID, &dedupe, &t.Attempts, &t.MaxAttempts,
		&t.TransientFailures, &nextAttempt, &t.LeaseOwner, &leaseUntil, &t.Result, &t.Error,
		&t.InputTokens, &t.OutputTokens, &t.CostUSD, &created, &started, &finishedStr,
		&emailReply, &t.Command, &t.SilentUnlessAction, &t.Job)
	if err != nil {
		return Task{}, err
	}
	t.Status = Status(status)
	t.DedupeKey = dedupe.String
	if emailReply != "" {
		t.Email = new(EmailReply)
		if err := json.Unmarshal([]byte(emailReply), t.Email); err != nil {
			return Task{}, fmt.Errorf("task %d: email_reply: %w", t.ID, err)
		}
	}
	for _, f := range []struct {
		dst *time.Time
		src string
	}{
		{&t.NextAttemptAt, nextAttempt}, {&t.LeaseUntil, leaseUntil}, {&t.CreatedAt, created},
		{&t.StartedAt, started}, {&t.FinishedAt, finishedStr},
	} {
		if *f.dst, err = store.ParseTime(f.src); err != nil {
			return Task{}, fmt.Errorf("task %d: %w", t.ID, err)
		}
	}
	return t, nil
}

// Runs is how many times the task has been run: its failed attempts, plus the run under
// way or the one that succeeded (a cancelled task that still names its lease owner was
// locked or running when it was stopped). It is what "attempt N of MaxAttempts" counts.
func (t Task) Runs() int {
	n := t.Attempts
	switch {
	case t.Status == Locked, t.Status == Running, t.Status == Completed:
		n++
	case t.Status == Cancelled && t.LeaseOwner != "":
		n++
	}
	return n
}

// WaitingToRetry reports whether the task is pending after a failed run, due again at
// NextAttemptAt as attempt Attempts+1 of MaxAttempts.
func (t Task) WaitingToRetry() bool {
	return t.Status == Pending && t.Attempts > 0
}

// RetryClock names a retry time for the user whose zone is loc, as the retry notice and
// !status say it: "16:30" when it falls on today's date there, else "Tue 00:15".
func RetryClock(at, now time.Time, loc *time.Location) string {
	at, now = at.In(loc), now.In(loc)
	if y, m, d := at.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return at.Format("15:04")
	}
	return at.Format("Mon 15:04")
}

func getTask(ctx context.Context, db querier, id int64) (Task, error) {
	t, err := scanTask(db.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, fmt.Errorf("queue: task %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return Task{}, fmt.Errorf("queue: read task %d: %w", id, err)
	}
	return t, nil
}

func (q *Queue) validate(nt NewTask) error {
	switch {
	case strings.TrimSpace(nt.UserID) == "":
		return errors.New("queue: enqueue: user id is empty")
	case strings.TrimSpace(nt.Prompt) == "":
		return errors.New("queue: enqueue: prompt is empty")
	case !knownSource(nt.Source):
		return fmt.Errorf("queue: enqueue: unknown source %q (want talk, cli, email, tasks_md, cron or briefing)", nt.Source)
	case nt.MaxAttempts < 0:
		return fmt.Errorf("queue: enqueue: max attempts %d is negative", nt.MaxAttempts)
	case nt.Email != nil && strings.TrimSpace(nt.Email.To) == "":
		return errors.New("queue: enqueue: e-mail delivery without a recipient")
	}
	return nil
}

// Enqueue adds a task. When nt.DedupeKey names an existing task, that task is returned
// with created false and nothing changes, so intake may safely repeat itself.
func (q *Queue) Enqueue(ctx context.Context, nt NewTask) (Task, bool, error) {
	tx, err := q.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return Task{}, false, fmt.Errorf("queue: enqueue: begin: %w", err)
	}
	defer tx.Rollback()
	id, created, err := q.EnqueueTx(ctx, tx, nt)
	if err != nil {
		return Task{}, false, err
	}
	t, err := getTask(ctx, tx, id)
	if err != nil {
		return Task{}, false, err
	}
	if err := tx.Commit(); err != nil {
		return Task{}, false, fmt.Errorf("queue: enqueue: commit: %w", err)
	}
	return t, created, nil
}

// EnqueueTx is Enqueue inside the caller's transaction (begun on the store's writer), so
// that intake can log a message and queue its task atomically.
func (q *Queue) EnqueueTx(ctx context.Context, tx *sql.Tx, nt NewTask) (id int64, created bool, err error) {
	if err := q.validate(nt); err != nil {
		return 0, false, err
	}
	now := q.now()
	notBefore := now
	if !nt.NotBefore.IsZero() {
		notBefore = nt.NotBefore
	}
	maxAttempts := nt.MaxAttempts
	if maxAttempts == 0 {
		maxAttempts = q.opts.MaxAttempts
	}
	var dedupe any // NULL when absent: the UNIQUE constraint ignores NULLs
	if nt.DedupeKey != "" {
		dedupe = nt.DedupeKey
	}
	emailReply := ""
	if nt.Email != nil {
		b, err := json.Marshal(nt.Email)
		if err != nil {
			return 0, false, fmt.Errorf("queue: enqueue: e-mail delivery: %w", err)
		}
		emailReply = string(b)
	}
	err = tx.QueryRowContext(ctx, `
		INSERT INTO tasks (user_id, source, interactive, status, prompt, conversation_token,
			reply_to_message_id, dedupe_key, max_attempts, next_attempt_at, created_at,
			email_reply, command, silent_unless_action, job)
		VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (dedupe_key) DO NOTHING
		RETURNING id`,
		nt.UserID, nt.Source, nt.Interactive, nt.Prompt, nt.ConversationToken,
		nt.ReplyToMessageID, dedupe, maxAttempts, store.FormatTime(notBefore), store.FormatTime(now),
		emailReply, nt.Command, nt.SilentUnlessAction, nt.Job,
	).Scan(&id)
	if err == nil {
		for _, a := range nt.Attachments {
			if _, err := tx.ExecContext(ctx, `INSERT INTO task_attachments (task_id, path, mimetype, size) VALUES (?, ?, ?, ?)
				ON CONFLICT (task_id, path) DO NOTHING`, id, a.Path, a.MimeType, a.Size); err != nil {
				return 0, false, fmt.Errorf("queue: enqueue: attachment: %w", err)
			}
		}
		return id, true, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, false, fmt.Errorf("queue: enqueue: %w", err)
	}
	// The insert did nothing: the dedupe key is taken.
	err = tx.QueryRowContext(ctx, `SELECT id FROM tasks WHERE dedupe_key = ?`, nt.DedupeKey).Scan(&id)
	if err != nil {
		return 0, false, fmt.Errorf("queue: enqueue: find task with dedupe key: %w", err)
	}
	return id, false, nil
}

// withTx runs fn in a write transaction (BEGIN IMMEDIATE through the store's DSN) and
// commits when fn succeeds.
func (q *Queue) withTx(ctx context.Context, what string, fn func(tx *sql.Tx) error) error {
	return q.inTx(ctx, q.db.Write, what, fn)
}

// inTx is withTx on the given handle of the store.
func (q *Queue) inTx(ctx context.Context, db *sql.DB, what string, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("queue: %s: begin: %w", what, err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("queue: %s: commit: %w", what, err)
	}
	return nil
}
