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

// Reasons stored in tasks.error when a run is interrupted without reporting back.
const (
	reasonLeaseExpired = "the run was interrupted: its lease expired (worker crashed or hung)"
	reasonRestart      = "the run was interrupted by a sidecar restart"
)

// leaseError explains why an update guarded by (id, lease owner, status) matched no row.
func leaseError(ctx context.Context, db querier, what string, id int64) error {
	var status, owner string
	err := db.QueryRowContext(ctx, `SELECT status, lease_owner FROM tasks WHERE id = ?`, id).Scan(&status, &owner)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("queue: %s task %d: %w (%w)", what, id, store.ErrNotFound, ErrLeaseLost)
	case err != nil:
		return fmt.Errorf("queue: %s task %d: %w", what, id, err)
	case Status(status) == Cancelled:
		return fmt.Errorf("queue: %s task %d: %w (%w)", what, id, ErrCancelled, ErrLeaseLost)
	default:
		return fmt.Errorf("queue: %s task %d: %w: status %s, lease owner %q", what, id, ErrLeaseLost, status, owner)
	}
}

func requireOwner(what, owner string) error {
	if owner == "" {
		return fmt.Errorf("queue: %s: lease owner is empty", what)
	}
	return nil
}

// Claim locks the next task that may run now and returns it, or ErrNoTask. The task is
// the oldest due pending one, interactive tasks first, whose user has no locked or
// running task: each user's tasks run one at a time. With interactiveOnly only
// interactive tasks qualify. Concurrent claimers (in this process or in others sharing
// the database, on any host) never get the same task, nor two tasks of one user: on
// SQLite the choice and the lock are one UPDATE … RETURNING under the single writer; on
// PostgreSQL see claimPostgres.
func (q *Queue) Claim(ctx context.Context, owner string, interactiveOnly bool) (Task, error) {
	if err := requireOwner("claim", owner); err != nil {
		return Task{}, err
	}
	if q.db.Dialect() == store.Postgres {
		return q.claimPostgres(ctx, owner, interactiveOnly)
	}
	now := q.now()
	t, err := scanTask(q.db.Write.QueryRowContext(ctx, `
		UPDATE tasks SET status = 'locked', lease_owner = ?, lease_until = ?
		WHERE status = 'pending' AND id = (
			SELECT c.id FROM tasks c
			WHERE c.status = 'pending' AND c.next_attempt_at <= ?
			  AND (c.interactive = 1 OR ? = 0)
			  AND NOT EXISTS (
				SELECT 1 FROM tasks b
				WHERE b.user_id = c.user_id AND b.status IN ('locked', 'running', 'pending_confirmation'))
			ORDER BY c.interactive DESC, c.id
			LIMIT 1)
		RETURNING `+taskColumns,
		owner, store.FormatTime(now.Add(q.opts.Lease)), store.FormatTime(now), interactiveOnly))
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, ErrNoTask
	}
	if err != nil {
		return Task{}, fmt.Errorf("queue: claim: %w", err)
	}
	return t, nil
}

// claimAttempts bounds how many candidates one PostgreSQL claim tries whose user another
// claimer is deciding about at the same moment.
const claimAttempts = 4

// claimPostgres claims on PostgreSQL, where writers run concurrently. In one
// transaction: the first qualifying task is locked with FOR UPDATE SKIP LOCKED (a task
// another claimer holds is passed over, not waited for); then the user's claim lock (a
// transaction-scoped advisory lock on the user id) is taken without waiting, and with
// it held the user is checked again for a task in flight — this check sees every claim
// committed before, so two hosts can never both start a task of one user. A user whose
// lock is taken is skipped for the next candidate. The transaction runs on the store's
// Concurrent pool: claims do not wait for the writer lock, only for these row locks.
func (q *Queue) claimPostgres(ctx context.Context, owner string, interactiveOnly bool) (Task, error) {
	now := q.now()
	var t Task
	err := q.inTx(ctx, q.db.Concurrent, "claim", func(tx *sql.Tx) error {
		skip := []string{}
		for range claimAttempts {
			var (
				id  int64
				uid string
			)
			err := tx.QueryRowContext(ctx, `
				SELECT c.id, c.user_id FROM tasks c
				WHERE c.status = 'pending' AND c.next_attempt_at <= ?
				  AND (c.interactive = 1 OR ? = 0)
				  AND c.user_id <> ALL(?)
				  AND NOT EXISTS (
					SELECT 1 FROM tasks b
					WHERE b.user_id = c.user_id AND b.status IN ('locked', 'running', 'pending_confirmation'))
				ORDER BY c.interactive DESC, c.id
				LIMIT 1
				FOR UPDATE OF c SKIP LOCKED`,
				store.FormatTime(now), interactiveOnly, skip).Scan(&id, &uid)
			if errors.Is(err, sql.ErrNoRows) {
				return ErrNoTask
			}
			if err != nil {
				return fmt.Errorf("queue: claim: %w", err)
			}
			var locked, busy bool
			if err := tx.QueryRowContext(ctx, `SELECT pg_try_advisory_xact_lock(?, hashtext(?))`, userClaimLock, uid).Scan(&locked); err != nil {
				return fmt.Errorf("queue: claim: lock user: %w", err)
			}
			if locked {
				if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM tasks
					WHERE user_id = ? AND status IN ('locked', 'running', 'pending_confirmation'))`, uid).Scan(&busy); err != nil {
					return fmt.Errorf("queue: claim: %w", err)
				}
			}
			if !locked || busy {
				skip = append(skip, uid)
				continue
			}
			t, err = scanTask(tx.QueryRowContext(ctx, `
				UPDATE tasks SET status = 'locked', lease_owner = ?, lease_until = ?
				WHERE id = ? AND status = 'pending'
				RETURNING `+taskColumns,
				owner, store.FormatTime(now.Add(q.opts.Lease)), id))
			if err != nil {
				return fmt.Errorf("queue: claim task %d: %w", id, err)
			}
			return nil
		}
		return ErrNoTask
	})
	if err != nil {
		return Task{}, err
	}
	return t, nil
}

// userClaimLock is the first key of the per-user claim locks (PostgreSQL advisory locks
// in two int4 keys: this one and the hash of the user id).
const userClaimLock = 0x15707a

// ClaimID locks one given pending task for owner, whether or not it is due and whatever
// its user has in flight: for running a task in-process right after queuing it (the CLI,
// when no server holds the database). A task that is not pending gives an error
// matching ErrNoTask, an unknown one store.ErrNotFound.
func (q *Queue) ClaimID(ctx context.Context, id int64, owner string) (Task, error) {
	if err := requireOwner("claim", owner); err != nil {
		return Task{}, err
	}
	t, err := scanTask(q.db.Write.QueryRowContext(ctx, `
		UPDATE tasks SET status = 'locked', lease_owner = ?, lease_until = ?
		WHERE id = ? AND status = 'pending'
		RETURNING `+taskColumns,
		owner, store.FormatTime(q.now().Add(q.opts.Lease)), id))
	if errors.Is(err, sql.ErrNoRows) {
		cur, err := getTask(ctx, q.db.Write, id)
		if err != nil {
			return Task{}, err
		}
		return Task{}, fmt.Errorf("queue: claim task %d: %w (status %s)", id, ErrNoTask, cur.Status)
	}
	if err != nil {
		return Task{}, fmt.Errorf("queue: claim task %d: %w", id, err)
	}
	return t, nil
}

// Start marks a claimed task running (locked → running) and renews its lease.
func (q *Queue) Start(ctx context.Context, id int64, owner string) error {
	if err := requireOwner("start", owner); err != nil {
		return err
	}
	now := q.now()
	res, err := q.db.Write.ExecContext(ctx, `
		UPDATE tasks SET status = 'running', started_at = ?, lease_until = ?
		WHERE id = ? AND lease_owner = ? AND status = 'locked'`,
		store.FormatTime(now), store.FormatTime(now.Add(q.opts.Lease)), id, owner)
	return q.guarded(ctx, "start", id, res, err)
}

// Renew extends the lease of a locked or running task held by owner (also while it
// waits for the user's confirmation: the worker still holds it). ErrLeaseLost means
// the task is no longer the caller's (cancelled, reclaimed, finished): stop working on it.
func (q *Queue) Renew(ctx context.Context, id int64, owner string) error {
	if err := requireOwner("renew", owner); err != nil {
		return err
	}
	res, err := q.db.Write.ExecContext(ctx, `
		UPDATE tasks SET lease_until = ?
		WHERE id = ? AND lease_owner = ? AND status IN ('locked', 'running', 'pending_confirmation')`,
		store.FormatTime(q.now().Add(q.opts.Lease)), id, owner)
	return q.guarded(ctx, "renew", id, res, err)
}

// Hold marks a running task as waiting for the user's confirmation (running →
// pending_confirmation). Its worker keeps the lease; Resume sets it running again.
// A task that is not running gives ErrLeaseLost (ErrCancelled when it was cancelled).
func (q *Queue) Hold(ctx context.Context, id int64) error {
	res, err := q.db.Write.ExecContext(ctx, `
		UPDATE tasks SET status = 'pending_confirmation'
		WHERE id = ? AND status IN ('running', 'pending_confirmation')`, id)
	return q.guarded(ctx, "hold", id, res, err)
}

// Resume sets a task that waited for confirmation running again. A task that is
// neither waiting nor running (cancelled, reclaimed) gives ErrLeaseLost.
func (q *Queue) Resume(ctx context.Context, id int64) error {
	res, err := q.db.Write.ExecContext(ctx, `
		UPDATE tasks SET status = 'running'
		WHERE id = ? AND status IN ('pending_confirmation', 'running')`, id)
	return q.guarded(ctx, "resume", id, res, err)
}

// Release gives a locked or running task back to the queue without counting an attempt,
// due at once: for a worker that stops on purpose (graceful shutdown) before finishing.
func (q *Queue) Release(ctx context.Context, id int64, owner string) error {
	if err := requireOwner("release", owner); err != nil {
		return err
	}
	res, err := q.db.Write.ExecContext(ctx, `
		UPDATE tasks SET status = 'pending', lease_owner = '', lease_until = '', next_attempt_at = ?
		WHERE id = ? AND lease_owner = ? AND status IN ('locked', 'running', 'pending_confirmation')`,
		store.FormatTime(q.now()), id, owner)
	return q.guarded(ctx, "release", id, res, err)
}

// forUpdate is the row lock a read-then-write transaction takes on the task it reads:
// on PostgreSQL, where writers are concurrent, FOR UPDATE; SQLite's write transactions
// are already serialised (BEGIN IMMEDIATE, one writer).
func (q *Queue) forUpdate() string {
	if q.db.Dialect() == store.Postgres {
		return " FOR UPDATE"
	}
	return ""
}

// lockTask reads a task in a write transaction, locking its row until the end of it.
func (q *Queue) lockTask(ctx context.Context, tx *sql.Tx, id int64) (Task, error) {
	t, err := scanTask(tx.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = ?`+q.forUpdate(), id))
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, fmt.Errorf("queue: task %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return Task{}, fmt.Errorf("queue: read task %d: %w", id, err)
	}
	return t, nil
}

// guarded turns the result of an owner-guarded update into nil or the reason it missed.
func (q *Queue) guarded(ctx context.Context, what string, id int64, res sql.Result, err error) error {
	if err != nil {
		return fmt.Errorf("queue: %s task %d: %w", what, id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("queue: %s task %d: %w", what, id, err)
	}
	if n == 0 {
		return leaseError(ctx, q.db.Write, what, id)
	}
	return nil
}

// Outcome is what a successful run produced.
type Outcome struct {
	Result       string
	InputTokens  int64
	OutputTokens int64
	CostUSD      float64
}

// Complete marks a running task completed and runs within (may be nil) in the same
// transaction, so that the answer is queued if and only if the task is recorded as done.
// If the task is no longer the caller's it returns ErrLeaseLost (matching ErrCancelled too
// when it was cancelled) and within does not run; if within fails, nothing is recorded.
// within must use tx only: the store has one writer connection.
func (q *Queue) Complete(ctx context.Context, id int64, owner string, out Outcome, within func(tx *sql.Tx) error) error {
	if err := requireOwner("complete", owner); err != nil {
		return err
	}
	return q.withTx(ctx, "complete", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			UPDATE tasks SET status = 'completed', result = ?, input_tokens = ?, output_tokens = ?,
				cost_usd = ?, finished_at = ?, lease_until = ''
			WHERE id = ? AND lease_owner = ? AND status = 'running'`,
			out.Result, out.InputTokens, out.OutputTokens, out.CostUSD, store.FormatTime(q.now()), id, owner)
		if err != nil {
			return fmt.Errorf("queue: complete task %d: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("queue: complete task %d: %w", id, err)
		} else if n == 0 {
			return leaseError(ctx, tx, "complete", id)
		}
		if within != nil {
			if err := within(tx); err != nil {
				return fmt.Errorf("queue: complete task %d: %w", id, err)
			}
		}
		return nil
	})
}

// Fail records a failed run of a locked or running task held by owner. Every failed run
// counts an attempt: the task goes back to pending after the backoff (1, 4, 16 min by
// default) or, once MaxAttempts runs have failed, fails for good (final). transient marks
// a run whose model API was unavailable (429, 5xx, 529); it is counted like any other,
// so that "attempt N of M" means what it says and an API that stays down ends the task
// with a clear message, and it is also added to TransientFailures so the caller can tell
// the user once that the task is held back. (The agent's own retries of a failed API
// call inside one run are not attempts.)
//
// within (may be nil) runs in the same transaction, told whether the failure is final,
// e.g. to queue a notice; GetTx inside it reads the task as this failure left it.
// retryAt is zero when final. Like Complete, it refuses with ErrLeaseLost / ErrCancelled
// and then within does not run.
func (q *Queue) Fail(ctx context.Context, id int64, owner, reason string, transient bool,
	within func(tx *sql.Tx, final bool) error) (retryAt time.Time, final bool, err error) {
	return q.fail(ctx, id, owner, reason, transient, false, within)
}

// FailPermanent fails a task for good whatever attempts are left: the failure cannot go
// away by retrying (a scheduled command whose owner is no longer an admin). within runs
// as in Fail, always with final true.
func (q *Queue) FailPermanent(ctx context.Context, id int64, owner, reason string, within func(tx *sql.Tx, final bool) error) error {
	_, _, err := q.fail(ctx, id, owner, reason, false, true, within)
	return err
}

func (q *Queue) fail(ctx context.Context, id int64, owner, reason string, transient, permanent bool,
	within func(tx *sql.Tx, final bool) error) (retryAt time.Time, final bool, err error) {
	if err := requireOwner("fail", owner); err != nil {
		return time.Time{}, false, err
	}
	now := q.now()
	err = q.withTx(ctx, "fail", func(tx *sql.Tx) error {
		var (
			status, leaseOwner    string
			attempts, maxAttempts int
		)
		err := tx.QueryRowContext(ctx, `
			SELECT status, lease_owner, attempts, max_attempts FROM tasks WHERE id = ?`+q.forUpdate(), id,
		).Scan(&status, &leaseOwner, &attempts, &maxAttempts)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("queue: fail task %d: %w", id, err)
		}
		if err != nil || leaseOwner != owner || (Status(status) != Locked && Status(status) != Running && Status(status) != PendingConfirmation) {
			return leaseError(ctx, tx, "fail", id)
		}
		unavailable := 0
		if transient && !permanent {
			unavailable = 1
		}
		if permanent || attempts+1 >= maxAttempts {
			final = true
			_, err = tx.ExecContext(ctx, `
				UPDATE tasks SET status = 'failed', attempts = attempts + 1, transient_retries = transient_retries + ?,
					error = ?, finished_at = ?, lease_until = ''
				WHERE id = ?`, unavailable, reason, store.FormatTime(now), id)
		} else {
			retryAt = now.Add(q.backoff(attempts))
			_, err = tx.ExecContext(ctx, `
				UPDATE tasks SET status = 'pending', attempts = attempts + 1, transient_retries = transient_retries + ?,
					error = ?, next_attempt_at = ?, lease_owner = '', lease_until = ''
				WHERE id = ?`, unavailable, reason, store.FormatTime(retryAt), id)
		}
		if err != nil {
			return fmt.Errorf("queue: fail task %d: %w", id, err)
		}
		if within != nil {
			if err := within(tx, final); err != nil {
				return fmt.Errorf("queue: fail task %d: %w", id, err)
			}
		}
		return nil
	})
	if err != nil {
		return time.Time{}, false, err
	}
	return retryAt, final, nil
}

// Cancel cancels one unfinished task and returns it as it was just before, so the caller
// sees whether it was running. A task that has already finished gives ErrFinished, an
// unknown one store.ErrNotFound. Cancelling a running task only changes the row: the
// worker running it learns of it on its next lease renewal, or at once when the caller
// also cancels it in the worker pool (do that after this commits).
func (q *Queue) Cancel(ctx context.Context, id int64) (Task, error) {
	var t Task
	err := q.withTx(ctx, "cancel", func(tx *sql.Tx) error {
		var err error
		if t, err = q.lockTask(ctx, tx, id); err != nil {
			return err
		}
		if t.Status.Finished() {
			return fmt.Errorf("queue: cancel task %d: %w (%s)", id, ErrFinished, t.Status)
		}
		return q.cancelIDs(ctx, tx, []int64{id})
	})
	if err != nil {
		return Task{}, err
	}
	return t, nil
}

// CancelUser cancels every unfinished task of a user (pending, locked, running or waiting
// for confirmation) and returns them, oldest first, as they were just before: those whose
// Status was Locked or Running were claimed by LeaseOwner, and the caller should stop
// their runs in the worker pool once this has committed.
func (q *Queue) CancelUser(ctx context.Context, userID string) ([]Task, error) {
	var out []Task
	err := q.withTx(ctx, "cancel user", func(tx *sql.Tx) error {
		var err error
		out, err = q.CancelUserTx(ctx, tx, userID)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CancelUserTx is CancelUser inside the caller's write transaction (e.g. the one that
// also logs the `!stop` message and queues its answer).
func (q *Queue) CancelUserTx(ctx context.Context, tx *sql.Tx, userID string) ([]Task, error) {
	if userID == "" {
		return nil, errors.New("queue: cancel user: user id is empty")
	}
	rows, err := tx.QueryContext(ctx, `SELECT `+taskColumns+` FROM tasks
		WHERE user_id = ? AND status IN ('pending', 'locked', 'running', 'pending_confirmation')
		ORDER BY id`+q.forUpdate(), userID)
	if err != nil {
		return nil, fmt.Errorf("queue: cancel tasks of user: %w", err)
	}
	defer rows.Close()
	out := []Task{}
	var ids []int64
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, fmt.Errorf("queue: cancel tasks of user: %w", err)
		}
		out = append(out, t)
		ids = append(ids, t.ID)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue: cancel tasks of user: %w", err)
	}
	rows.Close()
	if err := q.cancelIDs(ctx, tx, ids); err != nil {
		return nil, err
	}
	return out, nil
}

// cancelIDs marks the given unfinished tasks cancelled. The lease owner is kept so that a
// cancelled row still says who was running it.
func (q *Queue) cancelIDs(ctx context.Context, tx *sql.Tx, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	marks := strings.Repeat("?, ", len(ids)-1) + "?"
	args := []any{store.FormatTime(q.now())}
	for _, id := range ids {
		args = append(args, id)
	}
	_, err := tx.ExecContext(ctx, `
		UPDATE tasks SET status = 'cancelled', finished_at = ?, lease_until = ''
		WHERE id IN (`+marks+`) AND status IN ('pending', 'locked', 'running', 'pending_confirmation')`, args...)
	if err != nil {
		return fmt.Errorf("queue: cancel tasks: %w", err)
	}
	return nil
}

// ReclaimExpired returns tasks whose lease has expired to the queue: their worker died
// or hung. A task that was only locked goes back to pending at once without counting an
// attempt; one that was running counts a failed attempt and follows the backoff, or fails
// for good after its last attempt (see Options.OnReclaimFailed). It returns how many
// tasks it reclaimed.
func (q *Queue) ReclaimExpired(ctx context.Context) (int, error) {
	return q.reclaim(ctx, false)
}

// ReclaimAll is ReclaimExpired for every locked or running task whatever its lease says,
// except that the reclaimed tasks are due at once. Call it only at start-up while holding the process lock, when every such row belongs to
// a process that is gone.
func (q *Queue) ReclaimAll(ctx context.Context) (int, error) {
	return q.reclaim(ctx, true)
}

func (q *Queue) reclaim(ctx context.Context, all bool) (int, error) {
	now := q.now()
	rows, err := q.db.Write.QueryContext(ctx, `
		SELECT id FROM tasks WHERE status IN ('locked', 'running', 'pending_confirmation') AND (? = 1 OR lease_until < ?) ORDER BY id`,
		all, store.FormatTime(now))
	if err != nil {
		return 0, fmt.Errorf("queue: reclaim: %w", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, fmt.Errorf("queue: reclaim: %w", err)
		}
		ids = append(ids, id)
	}
	// Close before the per-task transactions: the writer has a single connection.
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("queue: reclaim: %w", err)
	}
	// One transaction per task, so that one task whose OnReclaimFailed keeps failing does
	// not hold the others back.
	var (
		n    int
		errs []error
	)
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		ok, err := q.reclaimOne(ctx, id, all, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			n++
		}
	}
	return n, errors.Join(errs...)
}

func (q *Queue) reclaimOne(ctx context.Context, id int64, all bool, now time.Time) (bool, error) {
	reclaimed := false
	err := q.withTx(ctx, "reclaim", func(tx *sql.Tx) error {
		t, err := q.lockTask(ctx, tx, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		// Re-check inside the transaction: the worker may have renewed or finished it.
		if t.Status != Locked && t.Status != Running && t.Status != PendingConfirmation {
			return nil
		}
		if !all && !t.LeaseUntil.Before(now) {
			return nil
		}
		reason := reasonLeaseExpired
		if all {
			reason = reasonRestart
		}
		final := false
		// A run cut short by a restart counts as an attempt (a task that keeps killing
		// the sidecar must end), but runs again at once: the user is still waiting.
		// A hung run whose lease expired backs off like any failure.
		delay := q.backoff(t.Attempts)
		if all {
			delay = 0
		}
		switch {
		case t.Status == Locked:
			_, err = tx.ExecContext(ctx, `
				UPDATE tasks SET status = 'pending', lease_owner = '', lease_until = '', next_attempt_at = ?
				WHERE id = ?`, store.FormatTime(now), id)
		case t.Attempts+1 >= t.MaxAttempts:
			final = true
			_, err = tx.ExecContext(ctx, `
				UPDATE tasks SET status = 'failed', attempts = attempts + 1, error = ?, finished_at = ?,
					lease_until = ''
				WHERE id = ?`, reason, store.FormatTime(now), id)
		default:
			_, err = tx.ExecContext(ctx, `
				UPDATE tasks SET status = 'pending', attempts = attempts + 1, error = ?, next_attempt_at = ?,
					lease_owner = '', lease_until = ''
				WHERE id = ?`, reason, store.FormatTime(now.Add(delay)), id)
		}
		if err != nil {
			return fmt.Errorf("queue: reclaim task %d: %w", id, err)
		}
		if final && q.opts.OnReclaimFailed != nil {
			failed, err := getTask(ctx, tx, id)
			if err != nil {
				return err
			}
			if err := q.opts.OnReclaimFailed(tx, failed); err != nil {
				return fmt.Errorf("queue: reclaim task %d: on failure: %w", id, err)
			}
		}
		reclaimed = true
		return nil
	})
	return reclaimed, err
}
