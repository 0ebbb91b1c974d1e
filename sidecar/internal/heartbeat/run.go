package heartbeat

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

// outcome is what one run of a check found.
type outcome struct {
	status  string   // StatusOK, StatusAlert or StatusError
	message string   // for the user: what was found
	keys    []string // identities of what is wrong; nil: the check repeats once per cooldown
	memory  string   // what the check compares with next time
	// toldMemory, when set, replaces memory once the user has been told of this
	// alert (file-watch: the version told becomes the new baseline).
	toldMemory string
}

// keylessTold marks a told alert of a check without keys.
const keylessTold = "*"

// RunOnce syncs every user's HEARTBEAT.md and runs the checks that are due at the
// clock's time, as one tick of Run does. It returns after they all finished.
func (r *Runner) RunOnce(ctx context.Context) error {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	now := r.opts.Clock()
	users, err := r.src.Users(ctx)
	if err != nil {
		return fmt.Errorf("heartbeat: list users: %w", err)
	}
	byID := make(map[string]User, len(users))
	var errs []error
	for _, u := range users {
		byID[u.ID] = u
		if err := r.syncUser(ctx, u, now); err != nil {
			errs = append(errs, err)
		}
	}
	// Read in a write transaction: a !check run request is written in one, and writes
	// take turns (SQLite's single writer, PostgreSQL's writer lock), so this sees a
	// request whose transaction is still open once it committed instead of missing it.
	var due []checkRow
	err = r.db.InTx(ctx, func(tx *sql.Tx) error {
		var qerr error
		due, qerr = queryRows(ctx, tx, `(enabled = 1 AND next_run_at != '' AND next_run_at <= ?) OR run_requested_at != ''
		ORDER BY user_id, next_run_at, name`, store.FormatTime(now))
		return qerr
	})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("heartbeat: due checks: %w", err))...)
	}
	sem := make(chan struct{}, r.opts.Parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, row := range due {
		u, ok := byID[row.UserID]
		if !ok {
			continue // no longer a user of the bot
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := r.runCheck(ctx, u, row, now); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runCheck runs one due check and records its outcome.
func (r *Runner) runCheck(ctx context.Context, u User, row checkRow, now time.Time) error {
	cctx, cancel := context.WithTimeout(ctx, r.opts.CheckTimeout)
	out := r.evaluate(cctx, u, row, now)
	cancel()
	if ctx.Err() != nil {
		return nil // shutting down: the check runs again after the restart
	}
	if err := r.record(ctx, u, row, out, now); err != nil {
		return fmt.Errorf("heartbeat: record %q of %s: %w", row.Check.Name, u.ID, err)
	}
	return nil
}

// evaluate dispatches to the check's kind.
func (r *Runner) evaluate(ctx context.Context, u User, row checkRow, now time.Time) outcome {
	c := row.Check
	loc := userLocation(u.Timezone)
	switch c.Kind {
	case userconfig.CheckFileWatch:
		return r.fileWatch(ctx, u, c, row.Memory, loc)
	case userconfig.CheckURLHealth:
		return r.url.check(ctx, c.URL)
	case userconfig.CheckCalendarConflicts:
		return r.calendarConflicts(ctx, u, now, loc)
	case userconfig.CheckTaskDeadline:
		return r.taskDeadline(ctx, u, now, loc)
	case userconfig.CheckSelfCheck:
		return r.selfCheck(ctx, u)
	case userconfig.CheckShellCommand:
		return r.shellCommand(ctx, u, c)
	}
	return outcome{status: StatusError, message: fmt.Sprintf("%q is not a check kind this version knows", c.Kind)}
}

func userLocation(tz string) *time.Location {
	if tz == "" {
		return time.UTC
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return time.UTC
	}
	return loc
}

// record stores the outcome and, when the user is to be told, enqueues the message in
// the same transaction, keyed by the run, so a crash never tells twice.
func (r *Runner) record(ctx context.Context, u User, row checkRow, out outcome, now time.Time) error {
	c := row.Check
	manual := !row.RunRequestedAt.IsZero()
	loc := userLocation(u.Timezone)
	quiet := c.Quiet.Contains(now.In(loc))
	cooling := !row.LastAlertAt.IsZero() && now.Before(row.LastAlertAt.Add(c.Cooldown))

	consecutive := row.ConsecutiveAlerts
	switch out.status {
	case StatusAlert:
		consecutive++
	case StatusOK:
		consecutive = 0
	}
	told := row.ToldKeys
	if out.status == StatusOK {
		told = []string{}
	}
	memory := out.memory
	lastAlert := row.LastAlertAt

	var msg *outbox.Message
	switch {
	case manual:
		// The user asked: the outcome goes where they asked, whatever the hour.
		msg = &outbox.Message{Token: row.ReplyToken, ReplyTo: row.ReplyTo, Kind: outbox.KindNotice,
			Key:  fmt.Sprintf("heartbeat:%s:%s:run:%s", u.ID, c.Name, store.FormatTime(row.RunRequestedAt)),
			Text: runText(c, out)}
	case out.status == StatusAlert && hasNew(out.keys, told) && !quiet && !cooling:
		msg = &outbox.Message{Kind: outbox.KindNotice, Key: r.runKey(u.ID, c.Name, row), Text: alertText(c, out)}
	case out.status == StatusOK && len(row.ToldKeys) > 0 && out.keys == nil && repeats(c.Kind) && !quiet:
		msg = &outbox.Message{Kind: outbox.KindNotice, Key: r.runKey(u.ID, c.Name, row) + ":recovered", Text: recoveredText(c, out)}
	}
	if msg != nil && msg.Token == "" {
		token, ok, err := convlog.PrivateConversation(ctx, r.db.Read, u.ID)
		if err != nil {
			return err
		}
		if ok {
			msg.Token = token
		} else {
			msg = nil // nobody to tell: only recorded, and told on a later run
		}
	}
	if msg != nil && out.status == StatusAlert {
		lastAlert = now
		told = out.keys
		if told == nil {
			told = []string{keylessTold}
		}
		if out.toldMemory != "" {
			memory = out.toldMemory
		}
	}
	if msg == nil && out.status == StatusOK && len(row.ToldKeys) > 0 && repeats(c.Kind) && quiet {
		// The recovery could not be told in quiet hours; keep it pending so that it is
		// told once they are over, unless the fault comes back first.
		told = row.ToldKeys
	}
	tj, err := json.Marshal(told)
	if err != nil {
		return err
	}

	tx, err := r.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	ts := store.FormatTime(now)
	// The conditions keep a check that a sync changed meanwhile, and a newer !check run
	// request, untouched.
	res, err := tx.ExecContext(ctx, `
		UPDATE heartbeat_checks SET status = ?, message = ?, last_run_at = ?, next_run_at = ?, last_alert_at = ?,
			consecutive_alerts = ?, told_keys = ?, memory = ?, updated_at = ?,
			run_requested_at = CASE WHEN run_requested_at = ? THEN '' ELSE run_requested_at END
		WHERE user_id = ? AND name = ? AND definition = ?`,
		out.status, out.message, ts, store.FormatTime(now.Add(c.Interval)), store.FormatTime(lastAlert),
		consecutive, string(tj), memory, ts, store.FormatTime(row.RunRequestedAt),
		u.ID, c.Name, row.Definition)
	if err != nil {
		return fmt.Errorf("update: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil // changed or removed by a sync while it ran
	}
	if msg != nil {
		if err := r.ob.EnqueueTx(ctx, tx, *msg); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	level := r.log.Debug
	if out.status != StatusOK {
		level = r.log.Info
	}
	level("heartbeat check ran", "user_id", u.ID, "check", c.Name, "kind", string(c.Kind), "status", out.status,
		"told", msg != nil, "quiet", quiet, "cooling", cooling, "manual", manual)
	if msg != nil {
		r.opts.OnNotice()
	}
	return nil
}

// runKey identifies one scheduled run: a run repeated after a crash has the same
// next_run_at and therefore the same outbox key.
func (r *Runner) runKey(uid, name string, row checkRow) string {
	return fmt.Sprintf("heartbeat:%s:%s:%s", uid, name, store.FormatTime(row.NextRunAt))
}

// repeats reports whether a lasting fault of kind is told again after each cooldown
// (and its end is told), rather than each finding once.
func repeats(k userconfig.CheckKind) bool {
	switch k {
	case userconfig.CheckURLHealth, userconfig.CheckSelfCheck, userconfig.CheckShellCommand:
		return true
	}
	return false
}

// hasNew reports whether an alert has something the user was not told: keyless alerts
// always do, keyed ones when a key is not among those told last.
func hasNew(keys, told []string) bool {
	if keys == nil {
		return true
	}
	for _, k := range keys {
		if !slices.Contains(told, k) {
			return true
		}
	}
	return false
}

func alertText(c userconfig.Check, out outcome) string {
	return fmt.Sprintf("⚠️ **%s** (%s): %s", c.Name, c.Kind, out.message)
}

func recoveredText(c userconfig.Check, out outcome) string {
	return fmt.Sprintf("✅ **%s** (%s) is fine again: %s", c.Name, c.Kind, out.message)
}

func runText(c userconfig.Check, out outcome) string {
	icon := map[string]string{StatusOK: "✅", StatusAlert: "⚠️", StatusError: "❌"}[out.status]
	return fmt.Sprintf("%s **%s** (%s): %s — %s", icon, c.Name, c.Kind, out.status, out.message)
}
