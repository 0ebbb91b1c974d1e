package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

// PruneFinished deletes uid's tasks that finished before before, with their events
// (ON DELETE CASCADE), as history retention asks. A task something still depends on
// stays whatever its age: an answer or mail not yet delivered, a TASKS.md line whose
// result is not written back, a scheduled job or briefing whose result is not counted.
// The newest task of the whole queue always stays, so SQLite never hands its id out
// again: other tables (the conversation log, usage, the sleep cycle's cursor) refer to
// task ids and must never see one reused.
func (q *Queue) PruneFinished(ctx context.Context, uid string, before time.Time) (int, error) {
	res, err := q.db.Write.ExecContext(ctx, `
		DELETE FROM tasks
		WHERE user_id = ? AND status IN ('completed', 'failed', 'cancelled')
		  AND finished_at != '' AND finished_at < ?
		  AND id < (SELECT max(id) FROM tasks)
		  AND NOT EXISTS (SELECT 1 FROM talk_outbox o WHERE o.task_id = tasks.id AND o.status = 'pending')
		  AND NOT EXISTS (SELECT 1 FROM mail_outbox m WHERE m.task_id = tasks.id AND m.status = 'pending')
		  AND NOT EXISTS (SELECT 1 FROM tasks_md_items i WHERE i.task_id = tasks.id AND i.state != 'written')
		  AND NOT EXISTS (SELECT 1 FROM scheduled_jobs j WHERE j.last_task_id = tasks.id AND j.result_task_id != tasks.id)
		  AND NOT EXISTS (SELECT 1 FROM briefings b WHERE b.last_task_id = tasks.id AND b.result_task_id != tasks.id)`,
		uid, store.FormatTime(before))
	if err != nil {
		return 0, fmt.Errorf("queue: prune %s's history: %w", uid, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("queue: prune %s's history: %w", uid, err)
	}
	return int(n), nil
}
