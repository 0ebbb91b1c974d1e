package schedule

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

// DueJob is a job to enqueue now.
type DueJob struct {
	Job
	RunAt     time.Time // the scheduled (or requested) time of this run, UTC
	Manual    bool      // requested with !cron run rather than by the schedule
	DedupeKey string    // the queue task's dedupe key for this run
}

// Authorize refuses a command job for a user who is not (any longer) an admin; the
// caller checks again at run time because admin status can change after a sync.
func (d DueJob) Authorize(isAdmin bool) error {
	if d.Command != "" && !isAdmin {
		return fmt.Errorf("schedule: job %q of %s: %w", d.Name, d.UserID, ErrCommandNotAllowed)
	}
	return nil
}

// DedupeKey is the queue dedupe key of one run: the same job and minute always give the
// same key, so a repeated Enqueue after a crash finds the first task.
func DedupeKey(uid, name string, runAt time.Time) string {
	return "cron:" + uid + ":" + name + ":" + runAt.UTC().Truncate(time.Minute).Format("2006-01-02T15:04Z")
}

// Due returns the runs to enqueue at now: active jobs whose next run has come, and
// jobs asked for with RunNow (even disabled ones: the user asked explicitly).
func (s *Scheduler) Due(ctx context.Context, now time.Time) ([]DueJob, error) {
	ts := store.FormatTime(now)
	jobs, err := queryJobs(ctx, s.db.Read, `
		(enabled = 1 AND disabled_by = '' AND next_run_at != '' AND next_run_at <= ?)
		OR (run_requested_at != '' AND run_requested_at <= ?)
		ORDER BY user_id, next_run_at, name`, ts, ts)
	if err != nil {
		return nil, fmt.Errorf("schedule: due: %w", err)
	}
	out := make([]DueJob, 0, len(jobs))
	for _, j := range jobs {
		d := DueJob{Job: j, RunAt: j.NextRunAt}
		scheduled := j.Active() && !j.NextRunAt.IsZero() && !j.NextRunAt.After(now)
		// A request that coincides with a scheduled run is served by that run
		// (MarkEnqueued clears it), so the job does not run twice in a row.
		if !scheduled {
			d.RunAt, d.Manual = j.RunRequestedAt, true
		}
		d.DedupeKey = DedupeKey(j.UserID, j.Name, d.RunAt)
		out = append(out, d)
	}
	return out, nil
}

// MarkEnqueued records that the run d went into the queue as task taskID and moves
// the job on. A scheduled run's next run is computed from the later of runAt and the
// clock, so runs missed while the sidecar was down collapse into the one just made.
// Marking the same run twice is harmless.
func (s *Scheduler) MarkEnqueued(ctx context.Context, d DueJob, taskID int64, runAt time.Time) error {
	runTS := store.FormatTime(runAt)
	if d.Manual {
		_, err := s.db.Write.ExecContext(ctx, `
			UPDATE scheduled_jobs SET run_requested_at = '', last_task_id = ?, last_run_at = ?
			WHERE user_id = ? AND name = ? AND run_requested_at = ?`, taskID, runTS, d.UserID, d.Name, runTS)
		if err != nil {
			return fmt.Errorf("schedule: mark %q of %s enqueued: %w", d.Name, d.UserID, err)
		}
		return nil
	}
	now := s.opts.Clock()
	from := runAt
	if now.After(from) {
		from = now
	}
	next, err := nextRun(d.Schedule, d.TZ, from)
	if err != nil {
		return fmt.Errorf("schedule: next run of %q of %s: %w", d.Name, d.UserID, err)
	}
	// The condition on next_run_at makes a repeated or stale mark a no-op, and does not
	// touch a job whose schedule a sync changed meanwhile.
	_, err = s.db.Write.ExecContext(ctx, `
		UPDATE scheduled_jobs SET next_run_at = ?, last_task_id = ?, last_run_at = ?,
			run_requested_at = CASE WHEN run_requested_at != '' AND run_requested_at <= ? THEN '' ELSE run_requested_at END
		WHERE user_id = ? AND name = ? AND next_run_at = ? AND schedule = ? AND timezone = ?`,
		store.FormatTime(next), taskID, runTS, store.FormatTime(now), d.UserID, d.Name, runTS, d.Schedule, d.TZ)
	if err != nil {
		return fmt.Errorf("schedule: mark %q of %s enqueued: %w", d.Name, d.UserID, err)
	}
	return nil
}

// RecordResult counts the outcome of a run. A success resets the failure count; the
// MaxFailures-th failure in a row disables the job, and disabled reports that this
// call did so (the caller tells the user once). A job deleted meanwhile gives
// store.ErrNotFound.
func (s *Scheduler) RecordResult(ctx context.Context, uid, name string, ok bool, now time.Time) (disabled bool, err error) {
	return s.record(ctx, uid, name, 0, ok, now, nil)
}

// RecordRun is RecordResult for the run that went into the queue as task taskID: the
// result is counted once however often it is reported (the job remembers the last
// counted task), and onDisabled (may be nil) runs in the same transaction when this
// result disables the job, so the notice to the user is queued exactly once too.
func (s *Scheduler) RecordRun(ctx context.Context, uid, name string, taskID int64, ok bool, now time.Time,
	onDisabled func(tx *sql.Tx, reason string) error) (disabled bool, err error) {
	return s.record(ctx, uid, name, taskID, ok, now, onDisabled)
}

// PendingResults returns jobs whose last enqueued run has not been counted yet.
func (s *Scheduler) PendingResults(ctx context.Context) ([]Job, error) {
	jobs, err := queryJobs(ctx, s.db.Read, `last_task_id != 0 AND last_task_id != result_task_id ORDER BY user_id, name`)
	if err != nil {
		return nil, fmt.Errorf("schedule: pending results: %w", err)
	}
	return jobs, nil
}

func (s *Scheduler) record(ctx context.Context, uid, name string, taskID int64, ok bool, now time.Time,
	onDisabled func(tx *sql.Tx, reason string) error) (disabled bool, err error) {
	tx, err := s.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("schedule: record result of %q of %s: begin: %w", name, uid, err)
	}
	defer tx.Rollback()
	var failures int
	var by string
	var counted int64
	err = tx.QueryRowContext(ctx, `SELECT consecutive_failures, disabled_by, result_task_id FROM scheduled_jobs WHERE user_id = ? AND name = ?`, uid, name).
		Scan(&failures, &by, &counted)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			err = store.ErrNotFound
		}
		return false, fmt.Errorf("schedule: record result of %q of %s: %w", name, uid, err)
	}
	if taskID != 0 && counted == taskID {
		return false, nil
	}
	result, reason := "ok", ""
	if ok {
		failures = 0
	} else {
		failures++
		result = "failed"
		if by == "" && failures >= s.opts.MaxFailures {
			by, disabled = DisabledByFailures, true
			reason = fmt.Sprintf("failed %d times in a row (last at %s UTC); fix CRON.md or use !cron enable %s",
				failures, now.UTC().Format("2006-01-02 15:04"), name)
		}
	}
	if _, err := tx.ExecContext(ctx, `
		UPDATE scheduled_jobs SET consecutive_failures = ?, last_result = ?, disabled_by = ?,
			disabled_reason = CASE WHEN ? = 1 THEN ? ELSE disabled_reason END,
			result_task_id = CASE WHEN ? != 0 THEN ? ELSE result_task_id END
		WHERE user_id = ? AND name = ?`, failures, result, by, disabled, reason, taskID, taskID, uid, name); err != nil {
		return false, fmt.Errorf("schedule: record result of %q of %s: %w", name, uid, err)
	}
	if disabled && onDisabled != nil {
		if err := onDisabled(tx, reason); err != nil {
			return false, fmt.Errorf("schedule: record result of %q of %s: notify: %w", name, uid, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("schedule: record result of %q of %s: commit: %w", name, uid, err)
	}
	if disabled {
		s.opts.Logger.Warn("cron job disabled after failures", "user_id", uid, "job", name, "failures", failures)
	}
	return disabled, nil
}

// SetEnabled is !cron enable / !cron disable. Disabling survives syncs until enabled
// again. Enabling clears any disable and the failure count and schedules the next run
// from now; a job that CRON.md disables gives ErrDisabledInFile.
func (s *Scheduler) SetEnabled(ctx context.Context, uid, name string, enabled bool, now time.Time) error {
	return s.SetEnabledTx(ctx, s.db.Write, uid, name, enabled, now)
}

// Execer is what *sql.DB and *sql.Tx have in common: the Tx variants run in the caller's
// transaction (intake answers !cron inside the transaction that logs the message).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SetEnabledTx is SetEnabled through db (the store's writer or a transaction on it).
func (s *Scheduler) SetEnabledTx(ctx context.Context, db Execer, uid, name string, enabled bool, now time.Time) error {
	j, err := scanJob(db.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM scheduled_jobs WHERE user_id = ? AND name = ?`, uid, name))
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("schedule: job %q of %s: %w", name, uid, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("schedule: job %q of %s: %w", name, uid, err)
	}
	if !enabled {
		_, err = db.ExecContext(ctx, `
			UPDATE scheduled_jobs SET disabled_by = ?, disabled_reason = ?, updated_at = ? WHERE user_id = ? AND name = ?`,
			DisabledByUser, "disabled with !cron disable", store.FormatTime(now), uid, name)
		if err != nil {
			return fmt.Errorf("schedule: disable %q of %s: %w", name, uid, err)
		}
		return nil
	}
	if !j.Enabled {
		return fmt.Errorf("schedule: enable %q of %s: %w", name, uid, ErrDisabledInFile)
	}
	next, err := nextRun(j.Schedule, j.TZ, now)
	if err != nil {
		return fmt.Errorf("schedule: enable %q of %s: %w", name, uid, err)
	}
	_, err = db.ExecContext(ctx, `
		UPDATE scheduled_jobs SET disabled_by = '', disabled_reason = '', consecutive_failures = 0,
			next_run_at = ?, updated_at = ? WHERE user_id = ? AND name = ?`,
		store.FormatTime(next), store.FormatTime(now), uid, name)
	if err != nil {
		return fmt.Errorf("schedule: enable %q of %s: %w", name, uid, err)
	}
	return nil
}

// RunNow is !cron run: the job is due at now once, outside its schedule, whether or not
// it is enabled. Its schedule is not moved.
func (s *Scheduler) RunNow(ctx context.Context, uid, name string, now time.Time) error {
	return s.RunNowTx(ctx, s.db.Write, uid, name, now)
}

// RunNowTx is RunNow through db (the store's writer or a transaction on it).
func (s *Scheduler) RunNowTx(ctx context.Context, db Execer, uid, name string, now time.Time) error {
	res, err := db.ExecContext(ctx, `UPDATE scheduled_jobs SET run_requested_at = ? WHERE user_id = ? AND name = ?`,
		store.FormatTime(now), uid, name)
	if err != nil {
		return fmt.Errorf("schedule: run %q of %s now: %w", name, uid, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("schedule: run %q of %s now: %w", name, uid, store.ErrNotFound)
	}
	return nil
}
