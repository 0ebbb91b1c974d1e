package heartbeat

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

// CheckState is one check as the settings page and !check show it.
type CheckState struct {
	Name              string               `json:"name"`
	Kind              userconfig.CheckKind `json:"kind"`
	Line              int                  `json:"line"`
	Interval          time.Duration        `json:"-"`
	IntervalSeconds   int64                `json:"interval_seconds"`
	Cooldown          time.Duration        `json:"-"`
	CooldownSeconds   int64                `json:"cooldown_seconds"`
	QuietHours        string               `json:"quiet_hours"` // "22:00-07:00" or ""
	Enabled           bool                 `json:"enabled"`
	LastRunAt         time.Time            `json:"last_run_at,omitzero"`
	Status            string               `json:"last_status"` // ok | alert | error | "" (never ran)
	Message           string               `json:"last_message"`
	NextRunAt         time.Time            `json:"next_run_at,omitzero"` // zero when disabled
	InQuietHours      bool                 `json:"in_quiet_hours"`
	LastAlertAt       time.Time            `json:"last_alert_at,omitzero"`
	ConsecutiveAlerts int                  `json:"consecutive_alerts"`
	RunRequested      bool                 `json:"run_requested"`
}

// FileStatus is the outcome of the last reading of a user's HEARTBEAT.md.
type FileStatus struct {
	Problems     []userconfig.Problem
	KeptLastGood bool // nothing in the file was usable: the previous checks still run
	CheckedAt    time.Time
}

// Status returns the checks of uid in HEARTBEAT.md order and the problems found in the
// file when it was last read. It never writes, so it may be called while a write
// transaction is open (intake's !check).
func (r *Runner) Status(ctx context.Context, uid string) ([]CheckState, []userconfig.Problem, error) {
	fs, err := r.FileStatus(ctx, uid)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, nil, err
	}
	rows, err := queryRows(ctx, r.db.Read, `user_id = ? ORDER BY line, name`, uid)
	if err != nil {
		return nil, nil, fmt.Errorf("heartbeat: status of %s: %w", uid, err)
	}
	users, err := r.src.Users(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("heartbeat: status of %s: list users: %w", uid, err)
	}
	tz := ""
	for _, u := range users {
		if u.ID == uid {
			tz = u.Timezone
		}
	}
	now := r.opts.Clock().In(userLocation(tz))
	out := make([]CheckState, 0, len(rows))
	for _, row := range rows {
		c := row.Check
		st := CheckState{
			Name: c.Name, Kind: c.Kind, Line: c.Line, Interval: c.Interval, IntervalSeconds: int64(c.Interval / time.Second),
			Cooldown: c.Cooldown, CooldownSeconds: int64(c.Cooldown / time.Second), QuietHours: c.Quiet.String(),
			Enabled: c.Enabled, LastRunAt: row.LastRunAt, Status: row.Status, Message: row.Message,
			InQuietHours: c.Quiet.Contains(now), LastAlertAt: row.LastAlertAt,
			ConsecutiveAlerts: row.ConsecutiveAlerts, RunRequested: !row.RunRequestedAt.IsZero(),
		}
		if c.Enabled {
			st.NextRunAt = row.NextRunAt
		}
		out = append(out, st)
	}
	return out, fs.Problems, nil
}

// FileStatus returns the outcome of the last reading of uid's HEARTBEAT.md, or
// store.ErrNotFound when it was never read.
func (r *Runner) FileStatus(ctx context.Context, uid string) (FileStatus, error) {
	var pj, checked string
	var fs FileStatus
	err := r.db.Read.QueryRowContext(ctx, `SELECT problems, kept_last_good, checked_at FROM heartbeat_files WHERE user_id = ?`, uid).
		Scan(&pj, &fs.KeptLastGood, &checked)
	if errors.Is(err, sql.ErrNoRows) {
		return FileStatus{}, fmt.Errorf("heartbeat: file of %s: %w", uid, store.ErrNotFound)
	}
	if err != nil {
		return FileStatus{}, fmt.Errorf("heartbeat: file of %s: %w", uid, err)
	}
	if err := json.Unmarshal([]byte(pj), &fs.Problems); err != nil {
		return FileStatus{}, fmt.Errorf("heartbeat: file of %s: problems: %w", uid, err)
	}
	if fs.CheckedAt, err = store.ParseTime(checked); err != nil {
		return FileStatus{}, fmt.Errorf("heartbeat: file of %s: %w", uid, err)
	}
	return fs, nil
}

// RequestRunTx asks for one run of the check name of uid now, inside the caller's
// transaction (!check run): the loop is woken and runs it on its next pass, whatever
// its schedule, enabled state, cooldown or quiet hours, and posts the outcome as a
// reply to message replyTo in conversation token (or, without a token, in the user's
// private conversation). name matches exactly or, failing that, ignoring case. It
// returns the check's name as stored, or an error wrapping store.ErrNotFound.
func (r *Runner) RequestRunTx(ctx context.Context, tx *sql.Tx, uid, name, token string, replyTo int64) (string, error) {
	name = strings.TrimSpace(name)
	var found string
	err := tx.QueryRowContext(ctx, `SELECT name FROM heartbeat_checks WHERE user_id = ? AND name = ?`, uid, name).Scan(&found)
	if errors.Is(err, sql.ErrNoRows) {
		rows, qerr := tx.QueryContext(ctx, `SELECT name FROM heartbeat_checks WHERE user_id = ? AND lower(name) = lower(?)`, uid, name)
		if qerr != nil {
			return "", fmt.Errorf("heartbeat: run %q of %s: %w", name, uid, qerr)
		}
		var names []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				rows.Close()
				return "", fmt.Errorf("heartbeat: run %q of %s: %w", name, uid, err)
			}
			names = append(names, n)
		}
		rows.Close()
		if len(names) != 1 {
			return "", fmt.Errorf("heartbeat: run %q of %s: %w", name, uid, store.ErrNotFound)
		}
		found, err = names[0], nil
	}
	if err != nil {
		return "", fmt.Errorf("heartbeat: run %q of %s: %w", name, uid, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE heartbeat_checks SET run_requested_at = ?, reply_token = ?, reply_to = ? WHERE user_id = ? AND name = ?`,
		store.FormatTime(r.opts.Clock()), token, replyTo, uid, found); err != nil {
		return "", fmt.Errorf("heartbeat: run %q of %s: %w", found, uid, err)
	}
	r.Wake()
	return found, nil
}

// RequestRun is RequestRunTx in its own transaction, for the settings page's "run
// now": the outcome goes to the user's private conversation.
func (r *Runner) RequestRun(ctx context.Context, uid, name string) (string, error) {
	tx, err := r.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("heartbeat: run %q of %s: begin: %w", name, uid, err)
	}
	defer tx.Rollback()
	found, err := r.RequestRunTx(ctx, tx, uid, name, "", 0)
	if err != nil {
		return "", err
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("heartbeat: run %q of %s: commit: %w", name, uid, err)
	}
	return found, nil
}
