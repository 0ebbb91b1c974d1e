package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

// Get returns one task, or an error matching store.ErrNotFound.
func (q *Queue) Get(ctx context.Context, id int64) (Task, error) {
	return getTask(ctx, q.db.Read, id)
}

// GetTx is Get inside the caller's write transaction: it sees what the transaction
// changed, e.g. the retry time a Fail just set, from within Fail's callback.
func (q *Queue) GetTx(ctx context.Context, tx *sql.Tx, id int64) (Task, error) {
	return getTask(ctx, tx, id)
}

// Filter selects tasks for List. Zero fields select everything.
type Filter struct {
	UserID   string
	Statuses []Status
	Limit    int // default 100, at most 1000
}

// List limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// List returns tasks matching f, newest first.
func (q *Queue) List(ctx context.Context, f Filter) ([]Task, error) {
	var (
		where []string
		args  []any
	)
	if f.UserID != "" {
		where = append(where, "user_id = ?")
		args = append(args, f.UserID)
	}
	if len(f.Statuses) > 0 {
		marks := make([]string, len(f.Statuses))
		for i, s := range f.Statuses {
			if !s.valid() {
				return nil, fmt.Errorf("queue: list: unknown status %q", s)
			}
			marks[i] = "?"
			args = append(args, string(s))
		}
		where = append(where, "status IN ("+strings.Join(marks, ", ")+")")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	query := `SELECT ` + taskColumns + ` FROM tasks`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY id DESC LIMIT ?"
	args = append(args, limit)

	rows, err := q.db.Read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("queue: list: %w", err)
	}
	defer rows.Close()
	out := []Task{}
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, fmt.Errorf("queue: list: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue: list: %w", err)
	}
	return out, nil
}

// Stats counts tasks by status.
type Stats struct {
	Pending             int
	Locked              int
	Running             int
	Completed           int
	Failed              int
	Cancelled           int
	PendingConfirmation int
}

// Stats counts all tasks by status.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	rows, err := q.db.Read.QueryContext(ctx, `SELECT status, COUNT(*) FROM tasks GROUP BY status`)
	if err != nil {
		return Stats{}, fmt.Errorf("queue: stats: %w", err)
	}
	defer rows.Close()
	var s Stats
	for rows.Next() {
		var (
			status string
			n      int
		)
		if err := rows.Scan(&status, &n); err != nil {
			return Stats{}, fmt.Errorf("queue: stats: %w", err)
		}
		switch Status(status) {
		case Pending:
			s.Pending = n
		case Locked:
			s.Locked = n
		case Running:
			s.Running = n
		case Completed:
			s.Completed = n
		case Failed:
			s.Failed = n
		case Cancelled:
			s.Cancelled = n
		case PendingConfirmation:
			s.PendingConfirmation = n
		}
	}
	if err := rows.Err(); err != nil {
		return Stats{}, fmt.Errorf("queue: stats: %w", err)
	}
	return s, nil
}

// NextDue is when the earliest pending task becomes due (possibly in the past); false
// when nothing is pending. A due task may still wait for its user's running task.
func (q *Queue) NextDue(ctx context.Context) (time.Time, bool, error) {
	var next sql.NullString
	err := q.db.Read.QueryRowContext(ctx,
		`SELECT MIN(next_attempt_at) FROM tasks WHERE status = 'pending'`).Scan(&next)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("queue: next due: %w", err)
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	t, err := store.ParseTime(next.String)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("queue: next due: %w", err)
	}
	return t, true, nil
}

// Event is one line of what happened during a run.
type Event struct {
	TaskID int64
	Seq    int64 // 1, 2, … per task, in the order the events were added
	At     time.Time
	Kind   string // an Event* constant or another lowercase word
	Text   string
}

// validEventKind accepts a short lowercase word: the Event* constants, or a new kind a
// brain needs, without letting free text into the column meant for filtering.
func validEventKind(k string) bool {
	if k == "" || len(k) > 32 {
		return false
	}
	for _, r := range k {
		if (r < 'a' || r > 'z') && r != '_' {
			return false
		}
	}
	return true
}

// AddEvent appends an event to a task's log. An unknown task gives store.ErrNotFound.
func (q *Queue) AddEvent(ctx context.Context, id int64, kind, text string) error {
	if !validEventKind(kind) {
		return fmt.Errorf("queue: add event: bad kind %q (want a lowercase word such as progress, tool, retry, result or error)", kind)
	}
	// The next sequence number is taken under the write lock: a write transaction (on
	// PostgreSQL the writer lock, so events are also numbered in the order they commit,
	// which the live-progress hub follows).
	var n int64
	err := q.withTx(ctx, "add event", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			INSERT INTO task_events (task_id, seq, at, kind, text)
			SELECT t.id, COALESCE((SELECT MAX(e.seq) FROM task_events e WHERE e.task_id = t.id), 0) + 1, ?, ?, ?
			FROM tasks t WHERE t.id = ?`,
			store.FormatTime(q.now()), kind, text, id)
		if err != nil {
			return fmt.Errorf("queue: add event to task %d: %w", id, err)
		}
		if n, err = res.RowsAffected(); err != nil {
			return fmt.Errorf("queue: add event to task %d: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("queue: add event: task %d: %w", id, store.ErrNotFound)
	}
	return nil
}

// Events returns a task's events in order. An unknown task gives store.ErrNotFound.
func (q *Queue) Events(ctx context.Context, id int64) ([]Event, error) {
	return q.EventsAfter(ctx, id, 0)
}

// EventsAfter returns the task's events with a sequence number above afterSeq, in order,
// for callers that follow a run by polling.
func (q *Queue) EventsAfter(ctx context.Context, id int64, afterSeq int64) ([]Event, error) {
	var exists bool
	err := q.db.Read.QueryRowContext(ctx, `SELECT 1 FROM tasks WHERE id = ?`, id).Scan(&exists)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("queue: events: task %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: events of task %d: %w", id, err)
	}
	rows, err := q.db.Read.QueryContext(ctx, `
		SELECT task_id, seq, at, kind, text FROM task_events
		WHERE task_id = ? AND seq > ? ORDER BY seq`, id, afterSeq)
	if err != nil {
		return nil, fmt.Errorf("queue: events of task %d: %w", id, err)
	}
	defer rows.Close()
	out := []Event{}
	for rows.Next() {
		var (
			e  Event
			at string
		)
		if err := rows.Scan(&e.TaskID, &e.Seq, &at, &e.Kind, &e.Text); err != nil {
			return nil, fmt.Errorf("queue: events of task %d: %w", id, err)
		}
		if e.At, err = store.ParseTime(at); err != nil {
			return nil, fmt.Errorf("queue: events of task %d: %w", id, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue: events of task %d: %w", id, err)
	}
	return out, nil
}

// Attachments lists the files shared with task id's request, in path order.
func (q *Queue) Attachments(ctx context.Context, id int64) ([]Attachment, error) {
	rows, err := q.db.Read.QueryContext(ctx, `SELECT path, mimetype, size FROM task_attachments WHERE task_id = ? ORDER BY path`, id)
	if err != nil {
		return nil, fmt.Errorf("queue: attachments of task %d: %w", id, err)
	}
	defer rows.Close()
	var out []Attachment
	for rows.Next() {
		var a Attachment
		if err := rows.Scan(&a.Path, &a.MimeType, &a.Size); err != nil {
			return nil, fmt.Errorf("queue: attachments of task %d: %w", id, err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}
