// Package schedule keeps the scheduled jobs of each user's CRON.md in the database and
// says which are due. The file is the source of truth for what a job is; this package
// owns when it runs next, how often it failed, and whether it was switched off by
// !cron or by repeated failure. A broken file never stops the jobs that already run:
// the last good set is kept and the problems are recorded for the user.
//
// The package does not enqueue or run anything: the caller turns a DueJob into a
// queue task (with DueJob.DedupeKey, so a crash between Enqueue and MarkEnqueued
// never runs a job twice) and reports the outcome with RecordResult.
package schedule

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

// ErrDisabledInFile is returned by SetEnabled when CRON.md itself says enabled = false:
// only an edit of the file can switch such a job on.
var ErrDisabledInFile = errors.New("the job is disabled in CRON.md (enabled = false)")

// ErrCommandNotAllowed means a command job belongs to a user who is not an admin.
var ErrCommandNotAllowed = errors.New("only administrators may run command jobs")

// Who switched a job off at run time (column disabled_by).
const (
	DisabledByUser     = "user"     // !cron disable
	DisabledByFailures = "failures" // MaxFailures consecutive failures
)

// Options configure a Scheduler. Zero values take the documented defaults.
type Options struct {
	MaxFailures int              // consecutive failures before a job is disabled; default 3
	Clock       func() time.Time // default time.Now; used where no time is passed in
	Logger      *slog.Logger     // default slog.Default()
}

// Scheduler stores jobs in the sidecar database.
type Scheduler struct {
	db   *store.DB
	opts Options
}

// New returns a Scheduler on db.
func New(db *store.DB, opts Options) *Scheduler {
	if opts.MaxFailures <= 0 {
		opts.MaxFailures = 3
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Scheduler{db: db, opts: opts}
}

// Job is one stored job: its definition from CRON.md and its run state.
type Job struct {
	UserID string
	userconfig.Job
	DisabledBy          string // "", DisabledByUser or DisabledByFailures
	DisabledReason      string
	ConsecutiveFailures int
	LastRunAt           time.Time
	LastTaskID          int64
	LastResult          string // "", "ok" or "failed"
	NextRunAt           time.Time
	RunRequestedAt      time.Time // set by RunNow until the run is enqueued
}

// Active reports whether the job runs on its schedule.
func (j Job) Active() bool { return j.Enabled && j.DisabledBy == "" }

// SyncResult says what a Sync did.
type SyncResult struct {
	Problems     []userconfig.Problem // everything wrong with the file, by line
	Changed      bool                 // jobs were added, changed or removed
	KeptLastGood bool                 // the file was unusable and the previous jobs stay
	Hash         string               // identifies this version of the file (and user state)
}

// FileStatus is the outcome of the last Sync of a user's CRON.md.
type FileStatus struct {
	Problems     []userconfig.Problem
	KeptLastGood bool
	CheckedAt    time.Time
	LastGoodAt   time.Time
}

// fileHash covers everything the outcome of a sync depends on.
func fileHash(src []byte, isAdmin bool, userTZ string) string {
	h := sha256.New()
	fmt.Fprintf(h, "admin=%t\ntz=%s\n", isAdmin, userTZ)
	h.Write(src)
	return hex.EncodeToString(h.Sum(nil))
}

// Sync brings the stored jobs of uid in line with src, the content of CRON.md. Jobs
// whose definition is unchanged keep their run state; a changed job starts over (new
// next run, failure count and automatic disable cleared), a job gone from the file is
// deleted. Command jobs of non-admins are dropped with a Problem. When the file has
// problems and no valid job is left while jobs are stored and the file is not empty,
// the stored jobs stay (KeptLastGood). An unchanged file (same hash) does nothing and
// returns the problems recorded last time.
func (s *Scheduler) Sync(ctx context.Context, uid string, isAdmin bool, src []byte, userTZ string, now time.Time) (SyncResult, error) {
	now = now.UTC()
	hash := fileHash(src, isAdmin, userTZ)
	var prevHash, prevProblems string
	var prevKept bool
	err := s.db.Write.QueryRowContext(ctx,
		`SELECT hash, problems, kept_last_good FROM cron_files WHERE user_id = ?`, uid).Scan(&prevHash, &prevProblems, &prevKept)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return SyncResult{}, fmt.Errorf("schedule: sync %s: read file state: %w", uid, err)
	case prevHash == hash:
		var ps []userconfig.Problem
		if err := json.Unmarshal([]byte(prevProblems), &ps); err != nil {
			return SyncResult{}, fmt.Errorf("schedule: sync %s: stored problems: %w", uid, err)
		}
		return SyncResult{Problems: ps, KeptLastGood: prevKept, Hash: hash}, nil
	}

	parsed, problems := userconfig.ParseCron(src, userTZ)
	parseProblems := len(problems)
	var valid []userconfig.Job
	for _, j := range parsed.Jobs {
		if j.Command != "" && !isAdmin {
			problems = append(problems, userconfig.Problem{Line: j.Line, Field: "command",
				Message: fmt.Sprintf("job %q: only administrators may schedule commands; use a prompt instead. This job does not run", j.Name)})
			continue
		}
		valid = append(valid, j)
	}
	res := SyncResult{Problems: problems, Hash: hash}

	tx, err := s.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return SyncResult{}, fmt.Errorf("schedule: sync %s: begin: %w", uid, err)
	}
	defer tx.Rollback()

	stored, err := loadJobs(ctx, tx, uid)
	if err != nil {
		return SyncResult{}, fmt.Errorf("schedule: sync %s: %w", uid, err)
	}
	res.KeptLastGood = parseProblems > 0 && len(valid) == 0 && len(stored) > 0 && len(bytes.TrimSpace(src)) > 0
	if !res.KeptLastGood {
		res.Changed, err = s.apply(ctx, tx, uid, stored, valid, now)
		if err != nil {
			return SyncResult{}, fmt.Errorf("schedule: sync %s: %w", uid, err)
		}
	}
	pj, err := json.Marshal(problemsOrEmpty(problems))
	if err != nil {
		return SyncResult{}, fmt.Errorf("schedule: sync %s: encode problems: %w", uid, err)
	}
	lastGood := ""
	if !res.KeptLastGood {
		lastGood = store.FormatTime(now)
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO cron_files (user_id, hash, problems, kept_last_good, checked_at, last_good_at)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (user_id) DO UPDATE SET hash = excluded.hash, problems = excluded.problems,
			kept_last_good = excluded.kept_last_good, checked_at = excluded.checked_at,
			last_good_at = CASE WHEN excluded.last_good_at = '' THEN cron_files.last_good_at ELSE excluded.last_good_at END`,
		uid, hash, string(pj), res.KeptLastGood, store.FormatTime(now), lastGood); err != nil {
		return SyncResult{}, fmt.Errorf("schedule: sync %s: record file state: %w", uid, err)
	}
	if err := tx.Commit(); err != nil {
		return SyncResult{}, fmt.Errorf("schedule: sync %s: commit: %w", uid, err)
	}
	if res.Changed || len(problems) > 0 {
		s.opts.Logger.Info("cron file synced", "user_id", uid, "jobs", len(valid),
			"problems", len(problems), "changed", res.Changed, "kept_last_good", res.KeptLastGood)
	}
	return res, nil
}

func problemsOrEmpty(ps []userconfig.Problem) []userconfig.Problem {
	if ps == nil {
		return []userconfig.Problem{}
	}
	return ps
}

// sameDefinition reports whether two versions of a job would behave the same; the line
// number only moves messages.
func sameDefinition(a, b userconfig.Job) bool {
	return a.Schedule == b.Schedule && a.TZ == b.TZ && a.Prompt == b.Prompt && a.Command == b.Command &&
		a.Target == b.Target && a.SilentUnlessAction == b.SilentUnlessAction && a.Enabled == b.Enabled
}

// apply writes the valid jobs of a file over the stored ones.
func (s *Scheduler) apply(ctx context.Context, tx *sql.Tx, uid string, stored map[string]Job, valid []userconfig.Job, now time.Time) (bool, error) {
	changed := false
	ts := store.FormatTime(now)
	for _, j := range valid {
		old, exists := stored[j.Name]
		delete(stored, j.Name)
		if exists && sameDefinition(old.Job, j) {
			if old.Line != j.Line {
				if _, err := tx.ExecContext(ctx, `UPDATE scheduled_jobs SET line = ? WHERE user_id = ? AND name = ?`, j.Line, uid, j.Name); err != nil {
					return false, fmt.Errorf("update line of %q: %w", j.Name, err)
				}
			}
			continue
		}
		changed = true
		next, err := nextRun(j.Schedule, j.TZ, now)
		if err != nil {
			// ParseCron validated the schedule and zone; this only happens if the
			// zone database of this host lacks a zone the parser's host knew.
			return false, fmt.Errorf("job %q: %w", j.Name, err)
		}
		if !exists {
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO scheduled_jobs (user_id, name, line, schedule, timezone, prompt, command, conversation, email,
					silent_unless_action, enabled, next_run_at, updated_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				uid, j.Name, j.Line, j.Schedule, j.TZ, j.Prompt, j.Command, j.Target.Conversation, j.Target.Email,
				j.SilentUnlessAction, j.Enabled, store.FormatTime(next), ts); err != nil {
				return false, fmt.Errorf("insert %q: %w", j.Name, err)
			}
			continue
		}
		// A changed job starts over: a fixed job deserves a fresh failure count, and the
		// old next run belongs to the old schedule. A disable made with !cron stays.
		if _, err := tx.ExecContext(ctx, `
			UPDATE scheduled_jobs SET line = ?, schedule = ?, timezone = ?, prompt = ?, command = ?, conversation = ?,
				email = ?, silent_unless_action = ?, enabled = ?, next_run_at = ?, consecutive_failures = 0,
				disabled_reason = CASE WHEN disabled_by = 'failures' THEN '' ELSE disabled_reason END,
				disabled_by = CASE WHEN disabled_by = 'failures' THEN '' ELSE disabled_by END,
				updated_at = ?
			WHERE user_id = ? AND name = ?`,
			j.Line, j.Schedule, j.TZ, j.Prompt, j.Command, j.Target.Conversation, j.Target.Email,
			j.SilentUnlessAction, j.Enabled, store.FormatTime(next), ts, uid, j.Name); err != nil {
			return false, fmt.Errorf("update %q: %w", j.Name, err)
		}
	}
	for name := range stored {
		changed = true
		if _, err := tx.ExecContext(ctx, `DELETE FROM scheduled_jobs WHERE user_id = ? AND name = ?`, uid, name); err != nil {
			return false, fmt.Errorf("delete %q: %w", name, err)
		}
	}
	return changed, nil
}

const jobColumns = `user_id, name, line, schedule, timezone, prompt, command, conversation, email, silent_unless_action,
	enabled, disabled_by, disabled_reason, consecutive_failures, last_run_at, last_task_id, last_result, next_run_at, run_requested_at`

type scanner interface{ Scan(dest ...any) error }

func scanJob(r scanner) (Job, error) {
	var j Job
	var lastRun, nextRun, requested string
	if err := r.Scan(&j.UserID, &j.Name, &j.Line, &j.Schedule, &j.TZ, &j.Prompt, &j.Command, &j.Target.Conversation,
		&j.Target.Email, &j.SilentUnlessAction, &j.Enabled, &j.DisabledBy, &j.DisabledReason, &j.ConsecutiveFailures,
		&lastRun, &j.LastTaskID, &j.LastResult, &nextRun, &requested); err != nil {
		return Job{}, err
	}
	var err error
	if j.LastRunAt, err = store.ParseTime(lastRun); err != nil {
		return Job{}, err
	}
	if j.NextRunAt, err = store.ParseTime(nextRun); err != nil {
		return Job{}, err
	}
	if j.RunRequestedAt, err = store.ParseTime(requested); err != nil {
		return Job{}, err
	}
	return j, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func queryJobs(ctx context.Context, db querier, where string, args ...any) ([]Job, error) {
	rows, err := db.QueryContext(ctx, `SELECT `+jobColumns+` FROM scheduled_jobs WHERE `+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

func loadJobs(ctx context.Context, db querier, uid string) (map[string]Job, error) {
	jobs, err := queryJobs(ctx, db, `user_id = ?`, uid)
	if err != nil {
		return nil, fmt.Errorf("load jobs: %w", err)
	}
	m := make(map[string]Job, len(jobs))
	for _, j := range jobs {
		m[j.Name] = j
	}
	return m, nil
}

// List returns the jobs of uid in CRON.md order.
func (s *Scheduler) List(ctx context.Context, uid string) ([]Job, error) {
	jobs, err := queryJobs(ctx, s.db.Read, `user_id = ? ORDER BY line, name`, uid)
	if err != nil {
		return nil, fmt.Errorf("schedule: list %s: %w", uid, err)
	}
	return jobs, nil
}

// Get returns one job, or store.ErrNotFound.
func (s *Scheduler) Get(ctx context.Context, uid, name string) (Job, error) {
	j, err := scanJob(s.db.Write.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM scheduled_jobs WHERE user_id = ? AND name = ?`, uid, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Job{}, fmt.Errorf("schedule: job %q of %s: %w", name, uid, store.ErrNotFound)
	}
	if err != nil {
		return Job{}, fmt.Errorf("schedule: job %q of %s: %w", name, uid, err)
	}
	return j, nil
}

// FileStatus returns the outcome of the last Sync for uid, or store.ErrNotFound when
// the file was never synced.
func (s *Scheduler) FileStatus(ctx context.Context, uid string) (FileStatus, error) {
	var ps, checked, good string
	var fs FileStatus
	err := s.db.Read.QueryRowContext(ctx, `SELECT problems, kept_last_good, checked_at, last_good_at FROM cron_files WHERE user_id = ?`, uid).
		Scan(&ps, &fs.KeptLastGood, &checked, &good)
	if errors.Is(err, sql.ErrNoRows) {
		return FileStatus{}, fmt.Errorf("schedule: cron file of %s: %w", uid, store.ErrNotFound)
	}
	if err != nil {
		return FileStatus{}, fmt.Errorf("schedule: cron file of %s: %w", uid, err)
	}
	if err := json.Unmarshal([]byte(ps), &fs.Problems); err != nil {
		return FileStatus{}, fmt.Errorf("schedule: cron file of %s: problems: %w", uid, err)
	}
	if fs.CheckedAt, err = store.ParseTime(checked); err != nil {
		return FileStatus{}, err
	}
	if fs.LastGoodAt, err = store.ParseTime(good); err != nil {
		return FileStatus{}, err
	}
	return fs, nil
}

// NotifyOnce runs notify in a transaction the first time it is called for this version
// (hash) of uid's CRON.md, so the user is told about a file's problems once, and again
// only when the file changes. It reports whether notify ran.
func (s *Scheduler) NotifyOnce(ctx context.Context, uid, hash string, notify func(tx *sql.Tx) error) (bool, error) {
	tx, err := s.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("schedule: notify %s: begin: %w", uid, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE cron_files SET notified_hash = ? WHERE user_id = ? AND hash = ? AND notified_hash != ?`, hash, uid, hash, hash)
	if err != nil {
		return false, fmt.Errorf("schedule: notify %s: %w", uid, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	if err := notify(tx); err != nil {
		return false, fmt.Errorf("schedule: notify %s: %w", uid, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("schedule: notify %s: commit: %w", uid, err)
	}
	return true, nil
}

// Restored reports whether uid was already given back a missing CRON.md once.
func (s *Scheduler) Restored(ctx context.Context, uid string) (bool, error) {
	var at string
	err := s.db.Write.QueryRowContext(ctx, `SELECT restored_at FROM cron_files WHERE user_id = ?`, uid).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("schedule: restored %s: %w", uid, err)
	}
	return at != "", nil
}

// MarkRestored records that uid's missing CRON.md was written back from the database,
// which happens once: a file deleted after that means "no jobs".
func (s *Scheduler) MarkRestored(ctx context.Context, uid string, now time.Time) error {
	_, err := s.db.Write.ExecContext(ctx, `
		INSERT INTO cron_files (user_id, hash, checked_at, restored_at) VALUES (?, '', ?, ?)
		ON CONFLICT (user_id) DO UPDATE SET restored_at = excluded.restored_at`,
		uid, store.FormatTime(now), store.FormatTime(now))
	if err != nil {
		return fmt.Errorf("schedule: mark restored %s: %w", uid, err)
	}
	return nil
}
