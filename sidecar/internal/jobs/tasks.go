package jobs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

// TasksFile is the name of the task list in the user's config folder.
const TasksFile = "TASKS.md"

// Item states in tasks_md_items: queued (task made, file not yet marked [~]), running
// (marked [~]), done/failed (task finished, result not yet written), written (marked
// [x]/[!] with the result, or the line was gone).
const (
	itemQueued  = "queued"
	itemRunning = "running"
	itemDone    = "done"
	itemFailed  = "failed"
	itemWritten = "written"
)

type item struct {
	id, text, state, result string
	taskID                  int64
}

// pollTasks queues the open lines of the user's TASKS.md, moves finished tasks' items
// to done/failed, and writes every pending marker into the file in one write. Only the
// marker character (and, when finished, the result note under the line) changes, on a
// freshly read file, so whatever else the user edits meanwhile is kept.
func (r *Runner) pollTasks(ctx context.Context, u User, now time.Time) error {
	src, exists, err := r.files.ReadConfig(u.ID, TasksFile)
	if err != nil || !exists {
		return err
	}
	lines := userconfig.ParseTasks(src)
	for _, l := range lines {
		if l.State != userconfig.TaskOpen || strings.TrimSpace(l.Text) == "" {
			continue
		}
		if err := r.queueLine(ctx, u, l, now); err != nil {
			return err
		}
	}
	if err := r.finishItems(ctx, u.ID, now); err != nil {
		return err
	}
	return r.writeMarkers(ctx, u.ID, src, now)
}

// queueLine makes a task for an open line, once: the item row and the task are
// written in one transaction, keyed by the line's content hash. A line the user opened
// again after it was done ("[x]" back to "[ ]") runs again.
func (r *Runner) queueLine(ctx context.Context, u User, l userconfig.TaskLine, now time.Time) error {
	tx, err := r.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("jobs: TASKS.md: begin: %w", err)
	}
	defer tx.Rollback()
	var state string
	var prevTask int64
	err = tx.QueryRowContext(ctx, `SELECT state, task_id FROM tasks_md_items WHERE user_id = ? AND item_id = ?`, u.ID, l.ID).Scan(&state, &prevTask)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("jobs: TASKS.md item: %w", err)
	case state != itemWritten:
		return nil // already queued or running; its marker is written below
	}
	token, err := r.privateToken(ctx, u.ID)
	if err != nil {
		return err
	}
	taskID, _, err := r.q.EnqueueTx(ctx, tx, queue.NewTask{
		UserID:            u.ID,
		Source:            queue.SourceTasksMD,
		Prompt:            "A task from my TASKS.md: " + l.Text,
		ConversationToken: token,
		DedupeKey:         fmt.Sprintf("tasks_md:%s:%s:%d", u.ID, l.ID, prevTask),
		Delivery:          queue.Delivery{Job: "tasks_md:" + l.ID},
	})
	if err != nil {
		return err
	}
	ts := store.FormatTime(now)
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO tasks_md_items (user_id, item_id, text, task_id, state, result, created_at, updated_at)
		VALUES (?, ?, ?, ?, 'queued', '', ?, ?)
		ON CONFLICT (user_id, item_id) DO UPDATE SET text = excluded.text, task_id = excluded.task_id,
			state = 'queued', result = '', updated_at = excluded.updated_at`,
		u.ID, l.ID, l.Text, taskID, ts, ts); err != nil {
		return fmt.Errorf("jobs: TASKS.md item: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("jobs: TASKS.md: commit: %w", err)
	}
	r.opts.Logger.Info("TASKS.md line queued", "user_id", u.ID, "task_id", taskID)
	r.opts.OnTask()
	return nil
}

// finishItems notes the outcome of items whose task has finished.
func (r *Runner) finishItems(ctx context.Context, uid string, now time.Time) error {
	items, err := r.items(ctx, uid, itemQueued, itemRunning)
	if err != nil {
		return err
	}
	for _, it := range items {
		t, err := r.q.Get(ctx, it.taskID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		state, result := itemFailed, "The task is gone."
		switch {
		case err != nil:
		case !t.Status.Finished():
			continue
		case t.Status == queue.Completed:
			state, result = itemDone, t.Result
		case t.Status == queue.Cancelled:
			result = "Stopped."
		default:
			result = "Could not be done: " + firstLine(t.Error)
		}
		if _, err := r.db.Write.ExecContext(ctx, `UPDATE tasks_md_items SET state = ?, result = ?, updated_at = ? WHERE user_id = ? AND item_id = ? AND task_id = ?`,
			state, excerpt(result, 600), store.FormatTime(now), uid, it.id, it.taskID); err != nil {
			return fmt.Errorf("jobs: TASKS.md item: %w", err)
		}
	}
	return nil
}

// writeMarkers applies every marker owed to the file in one write, then records it.
func (r *Runner) writeMarkers(ctx context.Context, uid string, src []byte, now time.Time) error {
	items, err := r.items(ctx, uid, itemQueued, itemDone, itemFailed)
	if err != nil || len(items) == 0 {
		return err
	}
	out := src
	var written []item
	for _, it := range items {
		mark, note := userconfig.TaskRunning, ""
		switch it.state {
		case itemDone:
			mark, note = userconfig.TaskDone, it.result
		case itemFailed:
			mark, note = userconfig.TaskFailed, it.result
		}
		next, found := userconfig.MarkTask(out, it.id, mark, note)
		if found {
			out = next
		}
		// A line the user deleted or reworded meanwhile has nothing to mark.
		written = append(written, it)
	}
	if string(out) != string(src) {
		if err := r.files.WriteConfig(ctx, uid, TasksFile, out); err != nil {
			return fmt.Errorf("jobs: write %s: %w", TasksFile, err)
		}
	}
	for _, it := range written {
		next := itemWritten
		if it.state == itemQueued {
			next = itemRunning
		}
		if _, err := r.db.Write.ExecContext(ctx, `UPDATE tasks_md_items SET state = ?, updated_at = ? WHERE user_id = ? AND item_id = ? AND state = ? AND task_id = ?`,
			next, store.FormatTime(now), uid, it.id, it.state, it.taskID); err != nil {
			return fmt.Errorf("jobs: TASKS.md item: %w", err)
		}
	}
	return nil
}

func (r *Runner) items(ctx context.Context, uid string, states ...string) ([]item, error) {
	q := `SELECT item_id, text, state, result, task_id FROM tasks_md_items WHERE user_id = ? AND state IN (?` + strings.Repeat(",?", len(states)-1) + `) ORDER BY created_at, item_id`
	args := []any{uid}
	for _, s := range states {
		args = append(args, s)
	}
	rows, err := r.db.Write.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("jobs: TASKS.md items: %w", err)
	}
	defer rows.Close()
	var out []item
	for rows.Next() {
		var it item
		if err := rows.Scan(&it.id, &it.text, &it.state, &it.result, &it.taskID); err != nil {
			return nil, fmt.Errorf("jobs: TASKS.md items: %w", err)
		}
		out = append(out, it)
	}
	return out, rows.Err()
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return excerpt(s, 200)
}
