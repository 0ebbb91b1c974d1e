package briefing

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/schedule"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

// Last results of a briefing, as Status reports them.
const (
	ResultQueued    = "queued"    // the last run waits in the queue
	ResultRunning   = "running"   // the last run is being written
	ResultOK        = "ok"        // the last run was delivered
	ResultFailed    = "failed"    // the last run failed for good
	ResultCancelled = "cancelled" // the last run was stopped (!stop)
)

// definition is a briefing as it runs: the file's settings merged over the admin's
// defaults, in the user's zone. Any change to it starts the briefing's schedule over.
type definition struct {
	Schedule     string                 `json:"schedule"`
	TZ           string                 `json:"tz"`
	Output       userconfig.Output      `json:"output"`
	Conversation string                 `json:"conversation"`
	Email        string                 `json:"email"`
	Components   []userconfig.Component `json:"components"`
	Feeds        []string               `json:"feeds"`
	Enabled      bool                   `json:"enabled"`
}

func (d definition) hash() string {
	b, _ := json.Marshal(d) // plain strings and slices: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// has reports whether the briefing includes component c.
func (d definition) has(c userconfig.Component) bool {
	for _, x := range d.Components {
		if x == c {
			return true
		}
	}
	return false
}

// SyncResult says what a Sync did.
type SyncResult struct {
	Problems     []userconfig.Problem // everything wrong with the file (and the user's zone), by line
	Changed      bool                 // briefings were added, changed or removed
	KeptLastGood bool                 // the file was unusable and the previous briefings stay
	Hash         string               // identifies this version of the file, zone and defaults
}

// userZone returns the zone the user's briefings run in and, when the user's own
// setting is unusable, the problem to show.
func userZone(tz string) (string, *userconfig.Problem) {
	if tz != "" && !strings.EqualFold(tz, "local") {
		if _, err := time.LoadLocation(tz); err == nil {
			return tz, nil
		}
	}
	return "UTC", &userconfig.Problem{Message: fmt.Sprintf(
		"your time zone %q is not known, so your briefings run in UTC; set a zone like Europe/Berlin in your Nextcloud settings", tz)}
}

// fileHash covers everything the outcome of a sync depends on.
func (r *Runner) fileHash(src []byte, tz string) string {
	h := sha256.New()
	d, _ := json.Marshal(r.opts.Defaults)
	fmt.Fprintf(h, "tz=%s\ndefaults=%s\n", tz, d)
	h.Write(src)
	return hex.EncodeToString(h.Sum(nil))
}

// merge turns a parsed briefing into its definition: the user's feeds come first, the
// admin's follow, each once.
func (r *Runner) merge(b userconfig.Briefing, tz string) definition {
	d := definition{Schedule: b.Schedule, TZ: tz, Output: b.Output, Conversation: b.Target.Conversation,
		Email: b.Target.Email, Components: b.Components, Enabled: b.Enabled}
	if d.has(userconfig.ComponentNews) {
		seen := map[string]bool{}
		for _, f := range append(append([]string(nil), b.Feeds...), r.opts.Defaults.Feeds...) {
			if !seen[f] {
				seen[f] = true
				d.Feeds = append(d.Feeds, f)
			}
		}
	}
	if d.Components == nil {
		d.Components = []userconfig.Component{}
	}
	if d.Feeds == nil {
		d.Feeds = []string{}
	}
	return d
}

// Sync brings the stored briefings of u in line with src, the content of BRIEFINGS.md
// (nil when the file does not exist). Unchanged briefings keep their run state; a
// changed one gets a new next run; one gone from the file is deleted. When the file
// has problems and no valid briefing is left while briefings are stored and the file
// is not empty, the stored ones stay (KeptLastGood). An unchanged file does nothing.
func (r *Runner) Sync(ctx context.Context, u User, src []byte, now time.Time) (SyncResult, error) {
	now = now.UTC()
	tz, zoneProblem := userZone(u.Timezone)
	hash := r.fileHash(src, u.Timezone)
	var prevHash, prevProblems string
	var prevKept bool
	err := r.db.Write.QueryRowContext(ctx, `SELECT hash, problems, kept_last_good FROM briefing_files WHERE user_id = ?`, u.ID).
		Scan(&prevHash, &prevProblems, &prevKept)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return SyncResult{}, fmt.Errorf("briefing: sync %s: read file state: %w", u.ID, err)
	case prevHash == hash:
		var ps []userconfig.Problem
		if err := json.Unmarshal([]byte(prevProblems), &ps); err != nil {
			return SyncResult{}, fmt.Errorf("briefing: sync %s: stored problems: %w", u.ID, err)
		}
		return SyncResult{Problems: ps, KeptLastGood: prevKept, Hash: hash}, nil
	}

	parsed, problems := userconfig.ParseBriefingsWith(src, userconfig.BriefingDefaults{
		Components: r.opts.Defaults.Components, Feeds: r.opts.Defaults.Feeds})
	fileProblems := len(problems)
	if zoneProblem != nil {
		problems = append([]userconfig.Problem{*zoneProblem}, problems...)
	}
	res := SyncResult{Problems: problems, Hash: hash}

	tx, err := r.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return SyncResult{}, fmt.Errorf("briefing: sync %s: begin: %w", u.ID, err)
	}
	defer tx.Rollback()
	stored, err := loadStates(ctx, tx, `user_id = ?`, u.ID)
	if err != nil {
		return SyncResult{}, fmt.Errorf("briefing: sync %s: %w", u.ID, err)
	}
	res.KeptLastGood = fileProblems > 0 && len(parsed.Briefings) == 0 && len(stored) > 0 && len(bytes.TrimSpace(src)) > 0
	if !res.KeptLastGood {
		if res.Changed, err = r.apply(ctx, tx, u.ID, tz, stored, parsed.Briefings, now); err != nil {
			return SyncResult{}, fmt.Errorf("briefing: sync %s: %w", u.ID, err)
		}
	}
	pj, err := json.Marshal(orEmpty(problems))
	if err != nil {
		return SyncResult{}, fmt.Errorf("briefing: sync %s: encode problems: %w", u.ID, err)
	}
	lastGood := ""
	if !res.KeptLastGood {
		lastGood = store.FormatTime(now)
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO briefing_files (user_id, hash, problems, kept_last_good, checked_at, last_good_at)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (user_id) DO UPDATE SET hash = excluded.hash, problems = excluded.problems,
			kept_last_good = excluded.kept_last_good, checked_at = excluded.checked_at,
			last_good_at = CASE WHEN excluded.last_good_at = '' THEN briefing_files.last_good_at ELSE excluded.last_good_at END`,
		u.ID, hash, string(pj), res.KeptLastGood, store.FormatTime(now), lastGood); err != nil {
		return SyncResult{}, fmt.Errorf("briefing: sync %s: record file state: %w", u.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return SyncResult{}, fmt.Errorf("briefing: sync %s: commit: %w", u.ID, err)
	}
	if res.Changed || len(problems) > 0 {
		r.opts.Logger.Info("briefings file synced", "user_id", u.ID, "briefings", len(parsed.Briefings),
			"problems", len(problems), "changed", res.Changed, "kept_last_good", res.KeptLastGood)
	}
	return res, nil
}

func orEmpty(ps []userconfig.Problem) []userconfig.Problem {
	if ps == nil {
		return []userconfig.Problem{}
	}
	return ps
}

// apply writes the valid briefings of a file over the stored ones.
func (r *Runner) apply(ctx context.Context, tx *sql.Tx, uid, tz string, stored map[string]BriefingState, valid []userconfig.Briefing, now time.Time) (bool, error) {
	changed := false
	ts := store.FormatTime(now)
	for _, b := range valid {
		def := r.merge(b, tz)
		old, exists := stored[b.Name]
		delete(stored, b.Name)
		if exists && old.def.hash() == def.hash() {
			if old.Line != b.Line {
				if _, err := tx.ExecContext(ctx, `UPDATE briefings SET line = ? WHERE user_id = ? AND name = ?`, b.Line, uid, b.Name); err != nil {
					return false, fmt.Errorf("update line of %q: %w", b.Name, err)
				}
			}
			continue
		}
		changed = true
		next := ""
		if def.Enabled {
			t, err := schedule.NextRun(def.Schedule, def.TZ, now)
			if err != nil {
				// The parser validated the schedule; only a zone this host lacks gets here.
				return false, fmt.Errorf("briefing %q: %w", b.Name, err)
			}
			next = store.FormatTime(t)
		}
		comps, _ := json.Marshal(def.Components)
		feeds, _ := json.Marshal(def.Feeds)
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO briefings (user_id, name, line, schedule, timezone, output, conversation, email, components, feeds,
				enabled, def_hash, next_run_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (user_id, name) DO UPDATE SET line = excluded.line, schedule = excluded.schedule,
				timezone = excluded.timezone, output = excluded.output, conversation = excluded.conversation,
				email = excluded.email, components = excluded.components, feeds = excluded.feeds,
				enabled = excluded.enabled, def_hash = excluded.def_hash, next_run_at = excluded.next_run_at,
				updated_at = excluded.updated_at`,
			uid, b.Name, b.Line, def.Schedule, def.TZ, string(def.Output), def.Conversation, def.Email, string(comps), string(feeds),
			def.Enabled, def.hash(), next, ts); err != nil {
			return false, fmt.Errorf("store %q: %w", b.Name, err)
		}
	}
	for name := range stored {
		changed = true
		if _, err := tx.ExecContext(ctx, `DELETE FROM briefings WHERE user_id = ? AND name = ?`, uid, name); err != nil {
			return false, fmt.Errorf("delete %q: %w", name, err)
		}
	}
	return changed, nil
}

// BriefingState is one stored briefing and how it last ran, for the settings page.
type BriefingState struct {
	UserID       string                 `json:"-"`
	Name         string                 `json:"name"`
	Line         int                    `json:"line"`
	Schedule     string                 `json:"schedule"`
	Timezone     string                 `json:"timezone"`
	Output       userconfig.Output      `json:"output"`
	Conversation string                 `json:"conversation,omitempty"`
	Email        string                 `json:"email,omitempty"`
	Components   []userconfig.Component `json:"components"`
	Feeds        []string               `json:"feeds"`
	Enabled      bool                   `json:"enabled"`
	NextRunAt    time.Time              `json:"next_run_at,omitzero"` // zero when disabled
	LastRunAt    time.Time              `json:"last_run_at,omitzero"` // scheduled time of the last run
	LastTaskID   int64                  `json:"last_task_id,omitempty"`
	// LastResult is "" (never ran), ResultQueued, ResultRunning, ResultOK, ResultFailed
	// or ResultCancelled.
	LastResult string `json:"last_result"`

	def          definition
	resultTaskID int64
}

const stateColumns = `user_id, name, line, schedule, timezone, output, conversation, email, components, feeds, enabled,
	next_run_at, last_run_at, last_task_id, last_result, result_task_id`

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func loadStates(ctx context.Context, db querier, where string, args ...any) (map[string]BriefingState, error) {
	list, err := queryStates(ctx, db, where, args...)
	if err != nil {
		return nil, err
	}
	m := make(map[string]BriefingState, len(list))
	for _, s := range list {
		m[s.Name] = s
	}
	return m, nil
}

func queryStates(ctx context.Context, db querier, where string, args ...any) ([]BriefingState, error) {
	rows, err := db.QueryContext(ctx, `SELECT `+stateColumns+` FROM briefings WHERE `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("load briefings: %w", err)
	}
	defer rows.Close()
	var out []BriefingState
	for rows.Next() {
		var s BriefingState
		var output, comps, feeds, next, last string
		if err := rows.Scan(&s.UserID, &s.Name, &s.Line, &s.Schedule, &s.Timezone, &output, &s.Conversation, &s.Email,
			&comps, &feeds, &s.Enabled, &next, &last, &s.LastTaskID, &s.LastResult, &s.resultTaskID); err != nil {
			return nil, fmt.Errorf("load briefings: %w", err)
		}
		s.Output = userconfig.Output(output)
		if err := errors.Join(json.Unmarshal([]byte(comps), &s.Components), json.Unmarshal([]byte(feeds), &s.Feeds)); err != nil {
			return nil, fmt.Errorf("load briefing %q of %s: %w", s.Name, s.UserID, err)
		}
		var err error
		if s.NextRunAt, err = store.ParseTime(next); err != nil {
			return nil, err
		}
		if s.LastRunAt, err = store.ParseTime(last); err != nil {
			return nil, err
		}
		s.def = definition{Schedule: s.Schedule, TZ: s.Timezone, Output: s.Output, Conversation: s.Conversation,
			Email: s.Email, Components: s.Components, Feeds: s.Feeds, Enabled: s.Enabled}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load briefings: %w", err)
	}
	return out, nil
}

// Status lists uid's briefings in file order with their state, and the problems of the
// last BRIEFINGS.md seen. The result of a run still in the queue is read live from
// the task; finished runs are settled into the briefing on each tick.
func (r *Runner) Status(ctx context.Context, uid string) ([]BriefingState, []userconfig.Problem, error) {
	list, err := queryStates(ctx, r.db.Read, `user_id = ? ORDER BY line, name`, uid)
	if err != nil {
		return nil, nil, fmt.Errorf("briefing: status of %s: %w", uid, err)
	}
	for i, s := range list {
		if s.LastTaskID == 0 || s.LastTaskID == s.resultTaskID {
			continue
		}
		t, err := r.q.Get(ctx, s.LastTaskID)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("briefing: status of %s: %w", uid, err)
		}
		list[i].LastResult = resultOf(t.Status)
	}
	if list == nil {
		list = []BriefingState{}
	}
	var ps string
	err = r.db.Read.QueryRowContext(ctx, `SELECT problems FROM briefing_files WHERE user_id = ?`, uid).Scan(&ps)
	if errors.Is(err, sql.ErrNoRows) {
		return list, []userconfig.Problem{}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("briefing: status of %s: file: %w", uid, err)
	}
	var problems []userconfig.Problem
	if err := json.Unmarshal([]byte(ps), &problems); err != nil {
		return nil, nil, fmt.Errorf("briefing: status of %s: problems: %w", uid, err)
	}
	return list, problems, nil
}

func resultOf(s queue.Status) string {
	switch s {
	case queue.Completed:
		return ResultOK
	case queue.Failed:
		return ResultFailed
	case queue.Cancelled:
		return ResultCancelled
	case queue.Locked, queue.Running:
		return ResultRunning
	}
	return ResultQueued
}

// dueRun is one run to queue now.
type dueRun struct {
	BriefingState
	RunAt     time.Time
	DedupeKey string
}

// DedupeKey is the queue dedupe key of one run: the same briefing and minute always
// give the same key, so a repeated Enqueue after a crash finds the first task.
func DedupeKey(uid, name string, runAt time.Time) string {
	return "briefing:" + uid + ":" + name + ":" + runAt.UTC().Truncate(time.Minute).Format("2006-01-02T15:04Z")
}

// due returns the enabled briefings whose next run has come.
func (r *Runner) due(ctx context.Context, now time.Time) ([]dueRun, error) {
	list, err := queryStates(ctx, r.db.Read, `enabled = 1 AND next_run_at != '' AND next_run_at <= ? ORDER BY user_id, next_run_at, name`,
		store.FormatTime(now))
	if err != nil {
		return nil, fmt.Errorf("briefing: due: %w", err)
	}
	out := make([]dueRun, len(list))
	for i, s := range list {
		out[i] = dueRun{BriefingState: s, RunAt: s.NextRunAt, DedupeKey: DedupeKey(s.UserID, s.Name, s.NextRunAt)}
	}
	return out, nil
}

// markEnqueued records that run d went into the queue as task taskID and moves the
// briefing on. The next run is computed from the later of the run's time and the
// clock, so runs missed while the sidecar was down collapse into this one. Marking
// the same run twice, or a run whose briefing a sync changed meanwhile, does nothing.
func (r *Runner) markEnqueued(ctx context.Context, d dueRun, taskID int64) error {
	from := d.RunAt
	if now := r.opts.Clock(); now.After(from) {
		from = now
	}
	next, err := schedule.NextRun(d.Schedule, d.Timezone, from)
	if err != nil {
		return fmt.Errorf("briefing: next run of %q of %s: %w", d.Name, d.UserID, err)
	}
	_, err = r.db.Write.ExecContext(ctx, `
		UPDATE briefings SET next_run_at = ?, last_run_at = ?, last_task_id = ?
		WHERE user_id = ? AND name = ? AND next_run_at = ? AND def_hash = ?`,
		store.FormatTime(next), store.FormatTime(d.RunAt), taskID, d.UserID, d.Name, store.FormatTime(d.RunAt), d.def.hash())
	if err != nil {
		return fmt.Errorf("briefing: mark %q of %s queued: %w", d.Name, d.UserID, err)
	}
	return nil
}

// settle copies the outcome of finished runs into their briefings, so the last result
// survives the task's deletion by retention.
func (r *Runner) settle(ctx context.Context) error {
	list, err := queryStates(ctx, r.db.Read, `last_task_id != 0 AND last_task_id != result_task_id`)
	if err != nil {
		return fmt.Errorf("briefing: settle results: %w", err)
	}
	for _, s := range list {
		t, err := r.q.Get(ctx, s.LastTaskID)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("briefing: settle results: %w", err)
		}
		if !t.Status.Finished() {
			continue
		}
		if _, err := r.db.Write.ExecContext(ctx, `
			UPDATE briefings SET last_result = ?, result_task_id = ? WHERE user_id = ? AND name = ? AND last_task_id = ?`,
			resultOf(t.Status), t.ID, s.UserID, s.Name, t.ID); err != nil {
			return fmt.Errorf("briefing: settle result of %q of %s: %w", s.Name, s.UserID, err)
		}
	}
	return nil
}

// notifyOnce runs notify in a transaction the first time it is called for this
// version (hash) of uid's BRIEFINGS.md.
func (r *Runner) notifyOnce(ctx context.Context, uid, hash string, notify func(tx *sql.Tx) error) (bool, error) {
	tx, err := r.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("briefing: notify %s: begin: %w", uid, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE briefing_files SET notified_hash = ? WHERE user_id = ? AND hash = ? AND notified_hash != ?`,
		hash, uid, hash, hash)
	if err != nil {
		return false, fmt.Errorf("briefing: notify %s: %w", uid, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	if err := notify(tx); err != nil {
		return false, fmt.Errorf("briefing: notify %s: %w", uid, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("briefing: notify %s: commit: %w", uid, err)
	}
	return true, nil
}
