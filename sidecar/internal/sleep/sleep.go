// Package sleep is the nightly sleep cycle: for one namespace (a user, in the user's
// timezone, or a group conversation, in UTC) it gathers the tasks completed since the last
// run, asks a text-only model call to extract memories, facts, topics and USER.md edits,
// and files them: memories/YYYY-MM-DD.md, the knowledge graph, USER.md (through curated
// operations), the search index. Then it advances its cursor and applies retention.
//
// A run either uses the model's answer or nothing of it: a malformed answer writes no
// file, no fact and no edit, and leaves the cursor where it was, so the same tasks are
// read again next night.
package sleep

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/curation"
	"github.com/istota/istota/sidecar/internal/knowledge"
	"github.com/istota/istota/sidecar/internal/store"
)

// Extractor is the text-only model call, made outside the task queue and without tools.
// The answer is the model's whole text.
type Extractor interface {
	Extract(ctx context.Context, prompt string) (string, error)
}

// Doc is a document handed to the Indexer. Its fields match memory.Doc one for one, so
// the wiring can convert it with memory.Doc(d).
type Doc struct {
	Namespace string // "user:<uid>" or "channel:<token>"
	Source    string // SourceMemoryFile or SourceUserMD
	SourceRef string // the path relative to the namespace's root, e.g. "memories/2026-03-28.md"
	Text      string // the whole document as it now stands
	CreatedAt time.Time
	Ephemeral bool // memory files expire with retention; USER.md does not
}

// Sources of the documents the sleep cycle indexes.
const (
	SourceMemoryFile = "memory_file"
	SourceUserMD     = "user_md"
)

// Indexer keeps the memory search index in step with the files the cycle writes. It is
// called with the whole text after every change, so it should replace what it held for
// (Namespace, Source, SourceRef) (memory.Memory.ReplaceSource does).
type Indexer interface {
	IndexDocument(ctx context.Context, d Doc) error
}

// Retainer applies retention to the search index: the namespace's ephemeral chunks older
// than days go. *memory.Memory satisfies it.
type Retainer interface {
	ApplyRetention(ctx context.Context, ns string, days int) (int, error)
}

// VectorFiller gives the namespace's chunks that were stored without a vector of the
// current model (the embeddings endpoint was down, or the model changed) theirs. It
// returns how many received one; without an embeddings endpoint it does nothing.
// *memory.Memory satisfies it.
type VectorFiller interface {
	FillVectors(ctx context.Context, ns string) (int, error)
}

// HistoryPruner applies history retention to one namespace: a user's finished tasks
// (with their events) and audit entries, or a conversation's log. It returns how many
// rows went.
type HistoryPruner interface {
	PruneHistory(ctx context.Context, ns Namespace, before time.Time) (int, error)
}

// Remover deletes a dated memory file that retention let go. rel is relative to the
// namespace's root (/Users/{uid} or /Channels/{token}), e.g. "memories/2025-09-01.md".
// The default deletes the local copy; a synced workspace may need the deletion to
// reach Nextcloud too.
type Remover interface {
	RemoveMemoryFile(ctx context.Context, namespace, rel string) error
}

// Kind is the kind of a namespace.
type Kind string

// Namespace kinds.
const (
	KindUser    Kind = "user"
	KindChannel Kind = "channel"
)

// Namespace is a parsed "user:<uid>" or "channel:<token>".
type Namespace struct {
	Kind Kind
	ID   string
}

// String is the namespace as stored ("user:alice").
func (n Namespace) String() string { return string(n.Kind) + ":" + n.ID }

// ParseNamespace parses "user:<uid>" or "channel:<token>". The id must be usable as one
// path segment: it names the namespace's folder.
func ParseNamespace(s string) (Namespace, error) {
	kind, id, ok := strings.Cut(s, ":")
	if !ok || (Kind(kind) != KindUser && Kind(kind) != KindChannel) {
		return Namespace{}, fmt.Errorf("sleep: namespace %q: want user:<uid> or channel:<token>", s)
	}
	if id == "" || id == "." || id == ".." || len(id) > 255 || strings.ContainsAny(id, `/\`) ||
		!utf8.ValidString(id) || strings.IndexFunc(id, unicode.IsControl) >= 0 {
		return Namespace{}, fmt.Errorf("sleep: namespace %q: the id is not a safe folder name", s)
	}
	return Namespace{Kind: Kind(kind), ID: id}, nil
}

// Config configures a Cycle. Zero values take the defaults noted.
type Config struct {
	// UserRoot returns the local folder that mirrors /Users/{uid}: memories/ and
	// {BotDir}/config/USER.md live below it.
	UserRoot func(uid string) string
	// ChannelRoot returns the local folder that mirrors /Channels/{token}: memories/ and
	// CHANNEL.md live below it.
	ChannelRoot func(token string) string
	// BotDir is the bot's folder name inside a user's root ({bot}).
	BotDir string
	// Cron is when the run is due, in the namespace's timezone (DefaultCron).
	Cron string
	// RetentionDays deletes dated memory files and ephemeral index chunks older than
	// this many days; 0 keeps them.
	RetentionDays int
	// HistoryDays (read at every run: an admin changes it live) deletes the namespace's
	// history older than this many days through History; 0 keeps it.
	HistoryDays func() int
	// History deletes a user's finished tasks and audit entries, or a conversation's
	// log, older than a time. nil keeps everything.
	History HistoryPruner
	// BudgetChars bounds the transcript given to the model (24000).
	BudgetChars int
	// InteractiveShare is the part of the budget reserved for interactive tasks (0.75).
	InteractiveShare float64
	// MaxTaskChars and MinTaskChars bound one task in the transcript (4000 and 600).
	MaxTaskChars int
	MinTaskChars int
	// MaxTasks is how many tasks one run reads (200); more wait for the next night.
	MaxTasks int
	// SilentSources are task sources never remembered (cron, briefing). Set to an
	// empty, non-nil slice to remember everything.
	SilentSources []string
	// SingleValued is shown to the model as the predicates that replace their value;
	// it should match the knowledge.Graph's set (knowledge.DefaultSingleValued()).
	SingleValued []string
	// MaxMemories, MaxFacts and MaxTopics cap what one answer may add (50, 100, 20).
	MaxMemories int
	MaxFacts    int
	MaxTopics   int

	Indexer  Indexer      // optional
	Retainer Retainer     // optional
	Vectors  VectorFiller // optional
	Remover  Remover      // optional: the local copy is deleted when nil
	Logger   *slog.Logger
}

func (c *Config) defaults() {
	if c.Cron == "" {
		c.Cron = DefaultCron
	}
	if c.BudgetChars <= 0 {
		c.BudgetChars = 24000
	}
	if c.InteractiveShare <= 0 || c.InteractiveShare > 1 {
		c.InteractiveShare = 0.75
	}
	if c.MaxTaskChars <= 0 {
		c.MaxTaskChars = 4000
	}
	if c.MinTaskChars <= 0 {
		c.MinTaskChars = 600
	}
	c.MinTaskChars = min(c.MinTaskChars, c.MaxTaskChars)
	if c.MaxTasks <= 0 {
		c.MaxTasks = 200
	}
	if c.SilentSources == nil {
		c.SilentSources = []string{"cron", "briefing"}
	}
	if c.SingleValued == nil {
		c.SingleValued = knowledge.DefaultSingleValued()
	}
	if c.MaxMemories <= 0 {
		c.MaxMemories = 50
	}
	if c.MaxFacts <= 0 {
		c.MaxFacts = 100
	}
	if c.MaxTopics <= 0 {
		c.MaxTopics = 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// ErrBusy is returned by Run when a run of the same namespace is already under way.
var ErrBusy = errors.New("sleep cycle already running for this namespace")

// Cycle runs sleep cycles. It is safe for concurrent use; runs of one namespace are
// serialized.
type Cycle struct {
	db       *store.DB
	graph    *knowledge.Graph
	curator  *curation.Curator
	extract  Extractor
	cfg      Config
	schedule Schedule

	mu      sync.Mutex
	running map[string]bool
}

// New returns a Cycle. graph, curator and extractor are required.
func New(db *store.DB, graph *knowledge.Graph, curator *curation.Curator, extractor Extractor, cfg Config) (*Cycle, error) {
	if db == nil || graph == nil || curator == nil || extractor == nil {
		return nil, errors.New("sleep: database, knowledge graph, curator and extractor are required")
	}
	if cfg.UserRoot == nil || cfg.ChannelRoot == nil || cfg.BotDir == "" {
		return nil, errors.New("sleep: UserRoot, ChannelRoot and BotDir are required")
	}
	if cfg.BotDir != strings.Trim(cfg.BotDir, "/") || strings.Contains(cfg.BotDir, "..") {
		return nil, fmt.Errorf("sleep: bot folder %q must be a plain relative name", cfg.BotDir)
	}
	cfg.defaults()
	sched, err := ParseSchedule(cfg.Cron)
	if err != nil {
		return nil, err
	}
	return &Cycle{db: db, graph: graph, curator: curator, extract: extractor, cfg: cfg,
		schedule: sched, running: map[string]bool{}}, nil
}

// Schedule is the parsed Config.Cron.
func (c *Cycle) Schedule() Schedule { return c.schedule }

// State is a namespace's row of sleep_state.
type State struct {
	LastRunAt  time.Time // the last attempt, successful or not
	LastTaskID int64     // the newest task already consolidated
	LastError  string    // why the last attempt failed ("" after a success)
}

// State returns the namespace's progress, or an error matching store.ErrNotFound.
func (c *Cycle) State(ctx context.Context, ns string) (State, error) {
	var s State
	var at string
	err := c.db.Read.QueryRowContext(ctx, `SELECT last_run_at, last_task_id, last_error FROM sleep_state WHERE namespace = ?`, ns).
		Scan(&at, &s.LastTaskID, &s.LastError)
	if errors.Is(err, sql.ErrNoRows) {
		return State{}, fmt.Errorf("sleep: state of %s: %w", ns, store.ErrNotFound)
	}
	if err != nil {
		return State{}, fmt.Errorf("sleep: state of %s: %w", ns, err)
	}
	if s.LastRunAt, err = store.ParseTime(at); err != nil {
		return State{}, fmt.Errorf("sleep: state of %s: %w", ns, err)
	}
	return s, nil
}

// Location is the namespace's timezone: the user's (from the users table; UTC when
// unknown or invalid), UTC for channels.
func (c *Cycle) Location(ctx context.Context, ns Namespace) *time.Location {
	if ns.Kind != KindUser {
		return time.UTC
	}
	var tz string
	if err := c.db.Read.QueryRowContext(ctx, `SELECT timezone FROM users WHERE id = ?`, ns.ID).Scan(&tz); err != nil {
		return time.UTC
	}
	loc, err := time.LoadLocation(tz)
	if err != nil || tz == "" || tz == "Local" {
		return time.UTC
	}
	return loc
}

// Due reports whether the namespace's nightly run is due at now. A namespace seen for
// the first time gets its state row with now as the starting point and is due at the
// next scheduled time, so a new user is not consolidated in the middle of the day.
func (c *Cycle) Due(ctx context.Context, ns string, now time.Time) (bool, error) {
	n, err := ParseNamespace(ns)
	if err != nil {
		return false, err
	}
	st, err := c.State(ctx, ns)
	if errors.Is(err, store.ErrNotFound) {
		_, err := c.db.Write.ExecContext(ctx, `INSERT INTO sleep_state (namespace, last_run_at, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (namespace) DO NOTHING`, ns, store.FormatTime(now), store.FormatTime(now))
		if err != nil {
			return false, fmt.Errorf("sleep: start state of %s: %w", ns, err)
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return c.schedule.Due(c.Location(ctx, n), st.LastRunAt, now), nil
}

// Namespaces lists the namespaces a scheduler should consider: every known user, and
// every group (non-private) conversation with a completed task.
func (c *Cycle) Namespaces(ctx context.Context) ([]string, error) {
	rows, err := c.db.Read.QueryContext(ctx, `SELECT 'user:' || id FROM users
		UNION ALL
		SELECT 'channel:' || token FROM conversations c WHERE private = 0
			AND EXISTS (SELECT 1 FROM tasks t WHERE t.conversation_token = c.token AND t.status = 'completed')
		ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("sleep: list namespaces: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var ns string
		if err := rows.Scan(&ns); err != nil {
			return nil, fmt.Errorf("sleep: list namespaces: %w", err)
		}
		if _, err := ParseNamespace(ns); err == nil {
			out = append(out, ns)
		}
	}
	return out, rows.Err()
}

// FactCounts counts what happened to the extracted facts.
type FactCounts struct {
	Added, Superseded, Duplicate, Historical, Rejected int
}

// Outcome is what a run did.
type Outcome struct {
	Namespace string
	Skipped   string // why nothing was extracted ("no new tasks"); "" when the model ran

	Tasks       int   // tasks read
	LastTaskID  int64 // the cursor afterwards
	Truncated   int   // tasks shortened to fit the budget
	Dropped     int   // oldest tasks left out of the transcript (still consumed)
	PromptChars int

	MemoryFile string // relative path of the dated file written ("" when nothing new)
	Memories   int    // memory lines added to it
	Topics     []string
	Facts      FactCounts
	UserMD     curation.Result // user namespaces
	IgnoredOps int             // USER.md operations a channel answer contained

	Expired      int      // ephemeral facts ended (all namespaces)
	RemovedFiles []string // dated files deleted by retention
	PrunedRows   int      // history rows deleted by history retention
	Embedded     int      // chunks that received their missing vector
	// Warnings are failures after the answer was filed (USER.md, index, retention):
	// already logged, they do not undo the run.
	Warnings []string
}

// Run runs the sleep cycle of ns at now. The error is ErrBusy, an error matching
// ErrMalformed, the extractor's error, or a storage failure; in each case the cursor has
// not moved. After the extractor or a malformed answer, the attempt is recorded
// (last_run_at, last_error) so that the schedule waits for the next night; when ctx
// ends first nothing is recorded.
func (c *Cycle) Run(ctx context.Context, ns string, now time.Time) (Outcome, error) {
	n, err := ParseNamespace(ns)
	if err != nil {
		return Outcome{}, err
	}
	if !c.begin(ns) {
		return Outcome{Namespace: ns}, fmt.Errorf("sleep: %s: %w", ns, ErrBusy)
	}
	defer c.end(ns)

	out := Outcome{Namespace: ns}
	loc := c.Location(ctx, n)
	st, err := c.State(ctx, ns)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return out, err
	}
	out.LastTaskID = st.LastTaskID
	tasks, err := c.gatherTasks(ctx, n, st.LastTaskID, c.cfg.MaxTasks)
	if err != nil {
		return out, fmt.Errorf("sleep: %s: %w", ns, err)
	}
	if len(tasks) == 0 {
		out.Skipped = "no new tasks"
		if err := c.saveState(ctx, ns, now, st.LastTaskID, ""); err != nil {
			return out, err
		}
		c.housekeeping(ctx, n, loc, now, &out)
		return out, nil
	}
	out.Tasks = len(tasks)
	lastID := tasks[len(tasks)-1].ID
	day := tasks[len(tasks)-1].At.In(loc)
	dayName := day.Format("2006-01-02")

	b := budget(tasks, loc, c.cfg.BudgetChars, c.cfg.InteractiveShare, c.cfg.MaxTaskChars, c.cfg.MinTaskChars)
	out.Truncated, out.Dropped = b.truncated, b.dropped
	doc, err := c.readDocument(n)
	if err != nil {
		return out, fmt.Errorf("sleep: %s: %w", ns, err)
	}
	facts, err := c.graph.Current(ctx, ns, "")
	if err != nil {
		return out, fmt.Errorf("sleep: %s: %w", ns, err)
	}
	prompt := buildPrompt(promptInput{ns: n, loc: loc, day: dayName, transcript: b.text,
		document: doc, facts: facts, singleValued: c.cfg.SingleValued})
	out.PromptChars = utf8.RuneCountInString(prompt)

	answer, err := c.extract.Extract(ctx, prompt)
	if err != nil {
		err = fmt.Errorf("sleep: %s: extract: %w", ns, err)
		c.recordFailure(ctx, ns, now, st.LastTaskID, err)
		return out, err
	}
	ex, err := ParseExtraction(answer)
	if err != nil {
		err = fmt.Errorf("sleep: %s: %w", ns, err)
		c.recordFailure(ctx, ns, now, st.LastTaskID, err)
		return out, err
	}
	ex = c.capExtraction(ex, &out)

	// Filing. The memory file and the facts must succeed for the run to count; a
	// repeat after a failure here does not duplicate them (lines and facts are
	// deduplicated), so the cursor stays put and the whole run is retried.
	rel := "memories/" + dayName + ".md"
	text, added, err := c.writeMemoryFile(n, rel, dayName, ex.Memories, ex.Topics)
	if err != nil {
		return out, fmt.Errorf("sleep: %s: write %s: %w", ns, rel, err)
	}
	out.Memories = added
	out.Topics = ex.Topics
	if len(ex.Memories) > 0 || len(ex.Topics) > 0 {
		// Named (and indexed) even when a repeat added nothing new: the run that wrote
		// it may have stopped before indexing.
		out.MemoryFile = rel
	}
	// Facts hold from the newest task read (the latest they can have been said), so a
	// fact the agent stored after that task is not superseded by an older statement.
	validFrom := tasks[len(tasks)-1].At
	if validFrom.After(now) {
		validFrom = now
	}
	for _, f := range ex.Facts {
		_, res, err := c.graph.Add(ctx, ns, knowledge.Fact{Subject: f.Subject, Predicate: f.Predicate,
			Object: f.Object, Ephemeral: f.Ephemeral, Source: "sleep_cycle", ValidFrom: validFrom})
		switch {
		case errors.Is(err, knowledge.ErrInvalid):
			out.Facts.Rejected++
		case err != nil:
			return out, fmt.Errorf("sleep: %s: %w", ns, err)
		case res == knowledge.Added:
			out.Facts.Added++
		case res == knowledge.Superseded:
			out.Facts.Superseded++
		case res == knowledge.Duplicate:
			out.Facts.Duplicate++
		case res == knowledge.Historical:
			out.Facts.Historical++
		}
	}

	// USER.md edits are each validated and audited by the curator; a failure to write
	// is a warning, not a reason to read the same tasks again.
	if len(ex.UserMDOps) > 0 {
		if n.Kind == KindUser {
			res, err := c.curator.Apply(ctx, c.cfg.UserRoot(n.ID), c.userMDName(), ex.UserMDOps,
				curation.AuditMeta{Source: "sleep_cycle", TaskID: lastID})
			out.UserMD = res
			if err != nil {
				c.warn(&out, "update USER.md", err)
			}
		} else {
			out.IgnoredOps = len(ex.UserMDOps)
		}
	}
	if c.cfg.Indexer != nil && out.MemoryFile != "" {
		dayStart := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, loc)
		if err := c.cfg.Indexer.IndexDocument(ctx, Doc{Namespace: ns, Source: SourceMemoryFile, SourceRef: rel,
			Text: text, CreatedAt: dayStart, Ephemeral: true}); err != nil {
			c.warn(&out, "index "+rel, err)
		}
	}
	if c.cfg.Indexer != nil && out.UserMD.Changed {
		if doc, err := c.readDocument(n); err != nil {
			c.warn(&out, "read USER.md for the index", err)
		} else if err := c.cfg.Indexer.IndexDocument(ctx, Doc{Namespace: ns, Source: SourceUserMD, SourceRef: c.userMDName(),
			Text: doc, CreatedAt: now}); err != nil {
			c.warn(&out, "index USER.md", err)
		}
	}
	if err := c.saveState(ctx, ns, now, lastID, ""); err != nil {
		return out, err
	}
	out.LastTaskID = lastID
	c.housekeeping(ctx, n, loc, now, &out)
	c.cfg.Logger.Info("sleep cycle done", "namespace", ns, "tasks", out.Tasks, "memories", out.Memories,
		"facts_added", out.Facts.Added+out.Facts.Superseded, "user_md_applied", out.UserMD.Applied(),
		"user_md_rejected", out.UserMD.Rejected(), "last_task_id", lastID)
	return out, nil
}

// userMDName is USER.md's path inside a user's root.
func (c *Cycle) userMDName() string { return c.cfg.BotDir + "/config/USER.md" }

func (c *Cycle) begin(ns string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running[ns] {
		return false
	}
	c.running[ns] = true
	return true
}

func (c *Cycle) end(ns string) {
	c.mu.Lock()
	delete(c.running, ns)
	c.mu.Unlock()
}

func (c *Cycle) warn(out *Outcome, what string, err error) {
	out.Warnings = append(out.Warnings, what+": "+err.Error())
	c.cfg.Logger.Warn("sleep cycle: "+what+" failed", "namespace", out.Namespace, "error", err)
}

// capExtraction drops empty entries and keeps at most the configured number of each.
func (c *Cycle) capExtraction(ex Extraction, out *Outcome) Extraction {
	clean := func(list []string, max int, what string) []string {
		var r []string
		for _, s := range list {
			if s = strings.Join(strings.Fields(s), " "); s != "" {
				r = append(r, s)
			}
		}
		if len(r) > max {
			out.Warnings = append(out.Warnings, fmt.Sprintf("%d %s, kept the first %d", len(r), what, max))
			r = r[:max]
		}
		return r
	}
	ex.Memories = clean(ex.Memories, c.cfg.MaxMemories, "memories")
	ex.Topics = clean(ex.Topics, c.cfg.MaxTopics, "topics")
	if len(ex.Facts) > c.cfg.MaxFacts {
		out.Warnings = append(out.Warnings, fmt.Sprintf("%d facts, kept the first %d", len(ex.Facts), c.cfg.MaxFacts))
		ex.Facts = ex.Facts[:c.cfg.MaxFacts]
	}
	return ex
}

func (c *Cycle) saveState(ctx context.Context, ns string, now time.Time, lastTaskID int64, lastError string) error {
	_, err := c.db.Write.ExecContext(ctx, `INSERT INTO sleep_state (namespace, last_run_at, last_task_id, last_error, updated_at)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (namespace) DO UPDATE SET last_run_at = excluded.last_run_at, last_task_id = excluded.last_task_id,
			last_error = excluded.last_error, updated_at = excluded.updated_at`,
		ns, store.FormatTime(now), lastTaskID, lastError, store.FormatTime(now))
	if err != nil {
		return fmt.Errorf("sleep: save state of %s: %w", ns, err)
	}
	return nil
}

// recordFailure notes a failed attempt without moving the cursor. When ctx has ended
// (shutdown) nothing is noted, so the run happens again soon after a restart.
func (c *Cycle) recordFailure(ctx context.Context, ns string, now time.Time, lastTaskID int64, cause error) {
	if ctx.Err() != nil {
		return
	}
	msg := cause.Error()
	if utf8.RuneCountInString(msg) > 500 {
		msg = string([]rune(msg)[:500]) + "…"
	}
	if err := c.saveState(ctx, ns, now, lastTaskID, msg); err != nil {
		c.cfg.Logger.Warn("sleep cycle: record failure", "namespace", ns, "error", err)
	}
}

// housekeeping expires ephemeral facts, applies retention and then gives the chunks
// left without a vector theirs; failures are warnings.
func (c *Cycle) housekeeping(ctx context.Context, ns Namespace, loc *time.Location, now time.Time, out *Outcome) {
	c.retain(ctx, ns, loc, now, out)
	if c.cfg.Vectors != nil {
		n, err := c.cfg.Vectors.FillVectors(ctx, ns.String())
		out.Embedded = n
		if err != nil {
			c.warn(out, "fill missing vectors", err)
		}
	}
}

// retain expires ephemeral facts and applies retention.
func (c *Cycle) retain(ctx context.Context, ns Namespace, loc *time.Location, now time.Time, out *Outcome) {
	n, err := c.graph.ExpireEphemeral(ctx, now)
	if err != nil {
		c.warn(out, "expire ephemeral facts", err)
	}
	out.Expired = n
	local := now.In(loc)
	// Whole days in the namespace's timezone: what went today, went at midnight.
	daysAgo := func(days int) time.Time {
		return time.Date(local.Year(), local.Month(), local.Day()-days, 0, 0, 0, 0, loc)
	}
	if c.cfg.History != nil && c.cfg.HistoryDays != nil {
		if days := c.cfg.HistoryDays(); days > 0 {
			pruned, err := c.cfg.History.PruneHistory(ctx, ns, daysAgo(days))
			out.PrunedRows = pruned
			if err != nil {
				c.warn(out, "history retention", err)
			}
		}
	}
	if c.cfg.RetentionDays <= 0 {
		return
	}
	cutoff := daysAgo(c.cfg.RetentionDays)
	removed, err := c.removeOldMemoryFiles(ctx, ns, cutoff.Format("2006-01-02"))
	out.RemovedFiles = removed
	if err != nil {
		c.warn(out, "delete old memory files", err)
	}
	if c.cfg.Retainer != nil {
		if _, err := c.cfg.Retainer.ApplyRetention(ctx, ns.String(), c.cfg.RetentionDays); err != nil {
			c.warn(out, "index retention", err)
		}
	}
}
