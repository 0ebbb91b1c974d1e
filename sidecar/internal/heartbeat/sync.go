package heartbeat

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

// checkRow is one stored check: its definition from HEARTBEAT.md and its run state.
type checkRow struct {
	UserID            string
	Check             userconfig.Check
	Definition        string
	Status            string
	Message           string
	LastRunAt         time.Time
	NextRunAt         time.Time
	LastAlertAt       time.Time
	ConsecutiveAlerts int
	ToldKeys          []string
	Memory            string
	RunRequestedAt    time.Time
	ReplyToken        string
	ReplyTo           int64
}

const rowColumns = `user_id, name, line, definition, status, message, last_run_at, next_run_at, last_alert_at,
	consecutive_alerts, told_keys, memory, run_requested_at, reply_token, reply_to`

type scanner interface{ Scan(dest ...any) error }

func scanRow(s scanner) (checkRow, error) {
	var r checkRow
	var name string
	var line int
	var lastRun, nextRun, lastAlert, requested, told string
	if err := s.Scan(&r.UserID, &name, &line, &r.Definition, &r.Status, &r.Message, &lastRun, &nextRun, &lastAlert,
		&r.ConsecutiveAlerts, &told, &r.Memory, &requested, &r.ReplyToken, &r.ReplyTo); err != nil {
		return checkRow{}, err
	}
	if err := json.Unmarshal([]byte(r.Definition), &r.Check); err != nil {
		return checkRow{}, fmt.Errorf("check %q: stored definition: %w", name, err)
	}
	r.Check.Name, r.Check.Line = name, line
	if err := json.Unmarshal([]byte(told), &r.ToldKeys); err != nil {
		return checkRow{}, fmt.Errorf("check %q: told keys: %w", name, err)
	}
	for _, p := range []struct {
		s string
		t *time.Time
	}{{lastRun, &r.LastRunAt}, {nextRun, &r.NextRunAt}, {lastAlert, &r.LastAlertAt}, {requested, &r.RunRequestedAt}} {
		t, err := store.ParseTime(p.s)
		if err != nil {
			return checkRow{}, fmt.Errorf("check %q: %w", name, err)
		}
		*p.t = t
	}
	return r, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func queryRows(ctx context.Context, db querier, where string, args ...any) ([]checkRow, error) {
	rows, err := db.QueryContext(ctx, `SELECT `+rowColumns+` FROM heartbeat_checks WHERE `+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []checkRow
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// definition is the stored form of a check. The line is left out: moving a check in
// the file does not change what it does.
func definition(c userconfig.Check) (string, error) {
	c.Line = 0
	b, err := json.Marshal(c)
	return string(b), err
}

func fileHash(src []byte, isAdmin bool) string {
	h := sha256.New()
	fmt.Fprintf(h, "admin=%t\n", isAdmin)
	h.Write(src)
	return hex.EncodeToString(h.Sum(nil))
}

// syncUser brings the stored checks of u in line with their HEARTBEAT.md. An unchanged
// file does nothing. A check whose definition changed starts over; one gone from the
// file is deleted. A file that has problems and no usable check left while checks are
// stored keeps the stored ones running (the last good set). A file that cannot be read
// for another reason than being absent changes nothing.
func (r *Runner) syncUser(ctx context.Context, u User, now time.Time) error {
	src, err := r.src.ReadConfig(ctx, u.ID, ConfigFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("heartbeat: read %s of %s: %w", ConfigFile, u.ID, err)
	}
	if err != nil {
		src = nil
	}
	hash := fileHash(src, u.IsAdmin)
	var prevHash string
	err = r.db.Read.QueryRowContext(ctx, `SELECT hash FROM heartbeat_files WHERE user_id = ?`, u.ID).Scan(&prevHash)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("heartbeat: sync %s: %w", u.ID, err)
	}
	if prevHash != hash {
		if err := r.apply(ctx, u, src, hash, now); err != nil {
			return err
		}
	}
	return r.tellProblems(ctx, u)
}

func (r *Runner) apply(ctx context.Context, u User, src []byte, hash string, now time.Time) error {
	parsed, problems := userconfig.ParseHeartbeat(src, u.IsAdmin)
	tx, err := r.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("heartbeat: sync %s: begin: %w", u.ID, err)
	}
	defer tx.Rollback()
	stored, err := queryRows(ctx, tx, `user_id = ?`, u.ID)
	if err != nil {
		return fmt.Errorf("heartbeat: sync %s: load checks: %w", u.ID, err)
	}
	kept := len(problems) > 0 && len(parsed.Checks) == 0 && len(stored) > 0 && len(bytes.TrimSpace(src)) > 0
	changed := false
	if !kept {
		if changed, err = applyChecks(ctx, tx, u.ID, stored, parsed.Checks, now); err != nil {
			return fmt.Errorf("heartbeat: sync %s: %w", u.ID, err)
		}
	}
	pj, err := json.Marshal(problemsOrEmpty(problems))
	if err != nil {
		return fmt.Errorf("heartbeat: sync %s: encode problems: %w", u.ID, err)
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO heartbeat_files (user_id, hash, problems, kept_last_good, checked_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (user_id) DO UPDATE SET hash = excluded.hash, problems = excluded.problems,
			kept_last_good = excluded.kept_last_good, checked_at = excluded.checked_at`,
		u.ID, hash, string(pj), kept, store.FormatTime(now)); err != nil {
		return fmt.Errorf("heartbeat: sync %s: record file: %w", u.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("heartbeat: sync %s: commit: %w", u.ID, err)
	}
	if changed || len(problems) > 0 {
		r.log.Info("heartbeat file synced", "user_id", u.ID, "checks", len(parsed.Checks), "problems", len(problems),
			"changed", changed, "kept_last_good", kept)
	}
	return nil
}

func applyChecks(ctx context.Context, tx *sql.Tx, uid string, stored []checkRow, checks []userconfig.Check, now time.Time) (bool, error) {
	byName := make(map[string]checkRow, len(stored))
	for _, s := range stored {
		byName[s.Check.Name] = s
	}
	ts := store.FormatTime(now)
	changed := false
	for _, c := range checks {
		def, err := definition(c)
		if err != nil {
			return false, fmt.Errorf("encode check %q: %w", c.Name, err)
		}
		old, exists := byName[c.Name]
		delete(byName, c.Name)
		switch {
		case exists && old.Definition == def:
			if old.Check.Line != c.Line {
				if _, err := tx.ExecContext(ctx, `UPDATE heartbeat_checks SET line = ? WHERE user_id = ? AND name = ?`, c.Line, uid, c.Name); err != nil {
					return false, fmt.Errorf("update line of %q: %w", c.Name, err)
				}
			}
		case exists:
			// A changed check starts over: its memory and told alerts belong to the old
			// definition. A pending !check run stays.
			changed = true
			if _, err := tx.ExecContext(ctx, `
				UPDATE heartbeat_checks SET line = ?, kind = ?, definition = ?, enabled = ?, status = '', message = '',
					last_run_at = '', next_run_at = ?, last_alert_at = '', consecutive_alerts = 0, told_keys = '[]',
					memory = '', updated_at = ?
				WHERE user_id = ? AND name = ?`,
				c.Line, string(c.Kind), def, c.Enabled, ts, ts, uid, c.Name); err != nil {
				return false, fmt.Errorf("update %q: %w", c.Name, err)
			}
		default:
			changed = true
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO heartbeat_checks (user_id, name, line, kind, definition, enabled, next_run_at, updated_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
				uid, c.Name, c.Line, string(c.Kind), def, c.Enabled, ts, ts); err != nil {
				return false, fmt.Errorf("insert %q: %w", c.Name, err)
			}
		}
	}
	for name := range byName {
		changed = true
		if _, err := tx.ExecContext(ctx, `DELETE FROM heartbeat_checks WHERE user_id = ? AND name = ?`, uid, name); err != nil {
			return false, fmt.Errorf("delete %q: %w", name, err)
		}
	}
	return changed, nil
}

func problemsOrEmpty(ps []userconfig.Problem) []userconfig.Problem {
	if ps == nil {
		return []userconfig.Problem{}
	}
	return ps
}

// tellProblems tells the user once about each new set of problems in their
// HEARTBEAT.md, in their private conversation with the bot. Without one the problems
// are only recorded, and told when the user first writes to the bot in private.
func (r *Runner) tellProblems(ctx context.Context, u User) error {
	var pj, told string
	var kept bool
	err := r.db.Read.QueryRowContext(ctx, `SELECT problems, kept_last_good, told_hash FROM heartbeat_files WHERE user_id = ?`, u.ID).
		Scan(&pj, &kept, &told)
	if err != nil {
		return fmt.Errorf("heartbeat: problems of %s: %w", u.ID, err)
	}
	var problems []userconfig.Problem
	if err := json.Unmarshal([]byte(pj), &problems); err != nil {
		return fmt.Errorf("heartbeat: problems of %s: %w", u.ID, err)
	}
	h := ""
	if len(problems) > 0 {
		sum := sha256.Sum256([]byte(pj))
		h = hex.EncodeToString(sum[:8])
	}
	if h == told {
		return nil
	}
	tx, err := r.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("heartbeat: problems of %s: begin: %w", u.ID, err)
	}
	defer tx.Rollback()
	token, edited := "", false
	if h != "" {
		var ok bool
		token, edited, ok, err = convlog.NoticeTarget(ctx, r.db.Read, tx, u.ID, ConfigFile, r.opts.Clock())
		if err != nil {
			return fmt.Errorf("heartbeat: problems of %s: %w", u.ID, err)
		}
		if !ok {
			return nil
		}
	}
	res, err := tx.ExecContext(ctx, `UPDATE heartbeat_files SET told_hash = ? WHERE user_id = ? AND problems = ?`, h, u.ID, pj)
	if err != nil {
		return fmt.Errorf("heartbeat: problems of %s: %w", u.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil // the file changed meanwhile; the next cycle tells about the new state
	}
	if h != "" {
		if err := r.ob.EnqueueTx(ctx, tx, outbox.Message{
			Token: token, Kind: outbox.KindNotice, Key: "heartbeat-file:" + u.ID + ":" + h,
			Text: noticeText(edited, problemsText(problems, kept)),
		}); err != nil {
			return fmt.Errorf("heartbeat: problems of %s: %w", u.ID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("heartbeat: problems of %s: commit: %w", u.ID, err)
	}
	if h != "" {
		r.opts.OnNotice()
	}
	return nil
}

func problemsText(ps []userconfig.Problem, kept bool) string {
	var b strings.Builder
	b.WriteString("Your " + ConfigFile + " has problems:\n")
	for _, p := range ps {
		b.WriteString("- " + p.String() + "\n")
	}
	if kept {
		b.WriteString("\nNothing in the file could be used, so your previous checks keep running until you fix it.")
	} else {
		b.WriteString("\nThe checks with problems do not run; the others do.")
	}
	return strings.TrimSpace(b.String())
}

func noticeText(edited bool, text string) string {
	if edited {
		return convlog.EditedPrefix(ConfigFile) + text
	}
	return text
}
