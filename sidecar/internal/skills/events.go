package skills

import (
	"context"
	"log/slog"
)

// EventLog records what a task did, for its activity view and the user's history;
// *queue.Queue implements it.
type EventLog interface {
	AddEvent(ctx context.Context, taskID int64, kind, text string) error
}

// RecordEvent adds one event of kind to the task that made inv. What a skill did on the
// user's behalf belongs in the task's record even when the call ends badly, so the write
// outlives ctx's cancellation; a failed write is logged and never fails the call.
// Without a log, or for a call outside a task (TaskID 0), nothing is recorded.
func RecordEvent(ctx context.Context, events EventLog, logger *slog.Logger, inv Invocation, kind, text string) {
	if events == nil || inv.TaskID == 0 {
		return
	}
	if err := events.AddEvent(context.WithoutCancel(ctx), inv.TaskID, kind, text); err != nil {
		logger.Warn("skill: recording a task event failed", "kind", kind, "task_id", inv.TaskID, "err", err)
	}
}
