// Package knowledge is the temporal knowledge graph (table knowledge_facts): triples
// (subject, predicate, object) that hold from valid_from until valid_until, per namespace
// ("user:<uid>" or "channel:<token>"). Facts are never overwritten: a new value of a
// single-valued predicate ends the old one, so the timeline stays answerable ("where did
// Alice live last year?") while the prompt sees only what is current.
package knowledge

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/store"
)

// EphemeralTTL is how long an ephemeral fact ("is travelling to Lisbon next week") stays
// current after its valid_from.
const EphemeralTTL = 90 * 24 * time.Hour

// DuplicateThreshold is the word Jaccard similarity of two objects (same subject and
// predicate) at or above which a new fact is taken as a restatement of a current one.
const DuplicateThreshold = 0.6

// Limits on one fact, so a runaway extractor cannot fill the prompt or the database.
const (
	MaxSubjectLen   = 200
	MaxPredicateLen = 100
	MaxObjectLen    = 1000
	MaxSourceLen    = 64
)

// DefaultSingleValued returns the predicates a subject has at most one current value of:
// a new value supersedes the old one instead of standing beside it.
func DefaultSingleValued() []string {
	return []string{
		"lives_in", "works_at", "job_title", "birthday", "email", "phone", "partner",
		"timezone", "preferred_language", "name",
	}
}

// ErrInvalid marks a fact, namespace or time that breaks the rules; its message is safe to
// show to the agent.
var ErrInvalid = errors.New("invalid fact")

// Fact is one triple with its validity interval. A zero ValidUntil means the fact is
// current (unless it is ephemeral and older than EphemeralTTL).
type Fact struct {
	ID         int64
	Namespace  string
	Subject    string
	Predicate  string
	Object     string
	ValidFrom  time.Time
	ValidUntil time.Time
	Ephemeral  bool
	Source     string // sleep_cycle | agent | user
	CreatedAt  time.Time
}

// String renders the fact as one prompt line: "subject predicate object".
func (f Fact) String() string {
	return f.Subject + " " + f.Predicate + " " + f.Object
}

// AddResult says what Add did with a fact.
type AddResult string

// Results of Add.
const (
	// Added: the fact was stored as a new current fact.
	Added AddResult = "added"
	// Superseded: the fact was stored and ended the current value(s) of its
	// single-valued predicate.
	Superseded AddResult = "superseded"
	// Duplicate: a current fact already says the same; nothing was stored and the
	// existing fact is returned.
	Duplicate AddResult = "duplicate"
	// Historical: the fact was stored already ended, because a newer value of its
	// single-valued predicate is current (it arrived out of order).
	Historical AddResult = "historical"
)

// Options configure a Graph.
type Options struct {
	// SingleValued overrides DefaultSingleValued() when not nil. Names are normalized like
	// predicates ("Lives in" means lives_in).
	SingleValued []string
	// Clock is the time source (time.Now when nil).
	Clock func() time.Time
}

// Graph reads and writes knowledge_facts. It is safe for concurrent use: Add runs in one
// immediate transaction on the writer connection, so two adds cannot both see "no
// current value" and both insert one.
type Graph struct {
	db           *store.DB
	singleValued map[string]bool
	clock        func() time.Time
}

// New returns a Graph over db.
func New(db *store.DB, opts Options) *Graph {
	sv := opts.SingleValued
	if sv == nil {
		sv = DefaultSingleValued()
	}
	g := &Graph{db: db, singleValued: make(map[string]bool, len(sv)), clock: opts.Clock}
	for _, p := range sv {
		g.singleValued[NormalizePredicate(p)] = true
	}
	if g.clock == nil {
		g.clock = time.Now
	}
	return g
}

// SingleValued reports whether predicate (normalized first) supersedes instead of
// accumulating.
func (g *Graph) SingleValued(predicate string) bool {
	return g.singleValued[NormalizePredicate(predicate)]
}

// NormalizeText trims s and collapses every run of white space to one space.
func NormalizeText(s string) string { return strings.Join(strings.Fields(s), " ") }

// NormalizePredicate lower-cases a predicate and joins its words with '_' ("Works At",
// "works-at" and "works_at" are one predicate).
func NormalizePredicate(s string) string {
	s = strings.ToLower(NormalizeText(s))
	s = strings.NewReplacer(" ", "_", "-", "_").Replace(s)
	for strings.Contains(s, "__") {
		s = strings.ReplaceAll(s, "__", "_")
	}
	return strings.Trim(s, "_")
}

// Normalize returns f with subject and object trimmed and space-collapsed, the predicate
// normalized and the source trimmed, or an error matching ErrInvalid.
func Normalize(f Fact) (Fact, error) {
	f.Subject = NormalizeText(f.Subject)
	f.Predicate = NormalizePredicate(f.Predicate)
	f.Object = NormalizeText(f.Object)
	f.Source = strings.TrimSpace(f.Source)
	for _, p := range []struct {
		name, v string
		max     int
	}{{"subject", f.Subject, MaxSubjectLen}, {"predicate", f.Predicate, MaxPredicateLen}, {"object", f.Object, MaxObjectLen}} {
		if p.v == "" {
			return Fact{}, fmt.Errorf("%w: %s is empty", ErrInvalid, p.name)
		}
		if utf8.RuneCountInString(p.v) > p.max {
			return Fact{}, fmt.Errorf("%w: %s longer than %d characters", ErrInvalid, p.name, p.max)
		}
		if !utf8.ValidString(p.v) || strings.IndexFunc(p.v, unicode.IsControl) >= 0 {
			return Fact{}, fmt.Errorf("%w: %s must be UTF-8 text without control characters", ErrInvalid, p.name)
		}
	}
	if len(f.Source) > MaxSourceLen || strings.IndexFunc(f.Source, unicode.IsControl) >= 0 {
		return Fact{}, fmt.Errorf("%w: source must be at most %d characters without control characters", ErrInvalid, MaxSourceLen)
	}
	if !f.ValidUntil.IsZero() && !f.ValidUntil.After(f.ValidFrom) {
		return Fact{}, fmt.Errorf("%w: valid_until must be after valid_from", ErrInvalid)
	}
	return f, nil
}

func validateNamespace(ns string) error {
	if strings.TrimSpace(ns) == "" || ns != strings.TrimSpace(ns) {
		return fmt.Errorf("%w: namespace is empty or padded", ErrInvalid)
	}
	return nil
}

// Words splits s into its lower-cased words (runs of letters and digits).
func Words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

func wordSet(s string) map[string]bool {
	set := map[string]bool{}
	for _, w := range Words(s) {
		set[w] = true
	}
	return set
}

// Jaccard is the word Jaccard similarity of a and b: shared words over all words. Two
// texts without words are identical (1).
func Jaccard(a, b string) float64 {
	sa, sb := wordSet(a), wordSet(b)
	if len(sa) == 0 && len(sb) == 0 {
		return 1
	}
	inter := 0
	for w := range sa {
		if sb[w] {
			inter++
		}
	}
	// The union is |a|+|b|-|a∩b|. Division is correctly rounded, so a ratio exactly
	// equal to a decimal threshold (3/5 and 0.6) compares equal to the literal.
	return float64(inter) / float64(len(sa)+len(sb)-inter)
}

const factColumns = `id, namespace, subject, predicate, object, valid_from, valid_until, ephemeral, source, created_at`

type scanner interface{ Scan(...any) error }

func scanFact(s scanner) (Fact, error) {
	var f Fact
	var from, until, created string
	var eph int
	if err := s.Scan(&f.ID, &f.Namespace, &f.Subject, &f.Predicate, &f.Object, &from, &until, &eph, &f.Source, &created); err != nil {
		return Fact{}, err
	}
	f.Ephemeral = eph != 0
	var err error
	if f.ValidFrom, err = store.ParseTime(from); err != nil {
		return Fact{}, err
	}
	if f.ValidUntil, err = store.ParseTime(until); err != nil {
		return Fact{}, err
	}
	if f.CreatedAt, err = store.ParseTime(created); err != nil {
		return Fact{}, err
	}
	return f, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func queryFacts(ctx context.Context, q querier, query string, args ...any) ([]Fact, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Fact
	for rows.Next() {
		f, err := scanFact(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// currentClause selects facts current at a time given three times as the bound
// parameters: started by then, not ended by then, and not an ephemeral fact whose TTL has
// run out (ExpireEphemeral may not have run yet).
const currentClause = `valid_from <= ? AND (valid_until = '' OR valid_until > ?) AND NOT (ephemeral = 1 AND valid_from <= ?)`

func currentArgs(now time.Time) []any {
	return []any{store.FormatTime(now), store.FormatTime(now), store.FormatTime(now.Add(-EphemeralTTL))}
}

// openClause selects facts without an end (the latest value of their predicate), given
// the ephemeral cutoff as the bound parameter.
const openClause = `valid_until = '' AND NOT (ephemeral = 1 AND valid_from <= ?)`

// Add stores f in namespace ns (f.Namespace is ignored). A zero ValidFrom means now; a
// non-zero ValidUntil stores an already-ended fact. When an open (not ended, not expired)
// fact with the same subject (case-insensitive) and predicate has an object with word
// Jaccard ≥ DuplicateThreshold, nothing is stored and that fact is returned as
// Duplicate. For a single-valued predicate, the open values end at f.ValidFrom
// (Superseded), or, when an open value started after f.ValidFrom, f is stored already
// ended at that start (Historical).
func (g *Graph) Add(ctx context.Context, ns string, f Fact) (Fact, AddResult, error) {
	if err := validateNamespace(ns); err != nil {
		return Fact{}, "", fmt.Errorf("knowledge: add: %w", err)
	}
	now := g.clock()
	if f.ValidFrom.IsZero() {
		f.ValidFrom = now
	}
	f.ValidFrom = f.ValidFrom.UTC().Truncate(time.Millisecond)
	if !f.ValidUntil.IsZero() {
		f.ValidUntil = f.ValidUntil.UTC().Truncate(time.Millisecond)
	}
	f, err := Normalize(f)
	if err != nil {
		return Fact{}, "", fmt.Errorf("knowledge: add: %w", err)
	}
	f.Namespace = ns
	f.ID = 0
	f.CreatedAt = now.UTC().Truncate(time.Millisecond)

	tx, err := g.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return Fact{}, "", fmt.Errorf("knowledge: add: %w", err)
	}
	defer tx.Rollback()
	candidates, err := queryFacts(ctx, tx, `SELECT `+factColumns+` FROM knowledge_facts
		WHERE namespace = ? AND predicate = ? AND `+openClause+` ORDER BY valid_from, id`,
		ns, f.Predicate, store.FormatTime(now.Add(-EphemeralTTL)))
	if err != nil {
		return Fact{}, "", fmt.Errorf("knowledge: add: read current facts: %w", err)
	}
	var same []Fact
	for _, c := range candidates {
		if strings.EqualFold(c.Subject, f.Subject) {
			same = append(same, c)
		}
	}
	for _, c := range same {
		if Jaccard(c.Object, f.Object) >= DuplicateThreshold {
			return c, Duplicate, nil
		}
	}

	result := Added
	if g.singleValued[f.Predicate] && f.ValidUntil.IsZero() {
		for _, c := range same {
			if c.ValidFrom.After(f.ValidFrom) {
				// A newer value is already current: the new fact describes the past.
				if f.ValidUntil.IsZero() || c.ValidFrom.Before(f.ValidUntil) {
					f.ValidUntil = c.ValidFrom
				}
				result = Historical
			}
		}
		if result != Historical {
			for _, c := range same {
				if _, err := tx.ExecContext(ctx, `UPDATE knowledge_facts SET valid_until = ? WHERE id = ?`,
					store.FormatTime(f.ValidFrom), c.ID); err != nil {
					return Fact{}, "", fmt.Errorf("knowledge: add: supersede fact %d: %w", c.ID, err)
				}
				result = Superseded
			}
		}
	}
	if f.ValidUntil.Equal(f.ValidFrom) {
		// A newer value started at the very same instant: the interval would be empty.
		return Fact{}, "", fmt.Errorf("%w: a value of %s for %q already starts at the same time", ErrInvalid, f.Predicate, f.Subject)
	}
	until := ""
	if !f.ValidUntil.IsZero() {
		until = store.FormatTime(f.ValidUntil)
	}
	if err := tx.QueryRowContext(ctx, `INSERT INTO knowledge_facts
		(namespace, subject, predicate, object, valid_from, valid_until, ephemeral, source, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		ns, f.Subject, f.Predicate, f.Object, store.FormatTime(f.ValidFrom), until, boolInt(f.Ephemeral), f.Source, store.FormatTime(f.CreatedAt),
	).Scan(&f.ID); err != nil {
		return Fact{}, "", fmt.Errorf("knowledge: add: insert: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Fact{}, "", fmt.Errorf("knowledge: add: commit: %w", err)
	}
	return f, result, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ExpireEphemeral ends, in every namespace, the ephemeral facts whose TTL has run out by
// now: valid_until becomes valid_from + EphemeralTTL. A fact expires at exactly that
// instant. It returns how many facts it ended.
func (g *Graph) ExpireEphemeral(ctx context.Context, now time.Time) (int, error) {
	rows, err := g.db.Write.QueryContext(ctx, `SELECT id, valid_from FROM knowledge_facts
		WHERE ephemeral = 1 AND valid_until = '' AND valid_from <= ?`, store.FormatTime(now.Add(-EphemeralTTL)))
	if err != nil {
		return 0, fmt.Errorf("knowledge: expire: %w", err)
	}
	type due struct {
		id    int64
		until string
	}
	var list []due
	for rows.Next() {
		var id int64
		var from string
		if err := rows.Scan(&id, &from); err != nil {
			rows.Close()
			return 0, fmt.Errorf("knowledge: expire: %w", err)
		}
		t, err := store.ParseTime(from)
		if err != nil {
			rows.Close()
			return 0, fmt.Errorf("knowledge: expire fact %d: %w", id, err)
		}
		list = append(list, due{id, store.FormatTime(t.Add(EphemeralTTL))})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("knowledge: expire: %w", err)
	}
	n := 0
	for _, d := range list {
		res, err := g.db.Write.ExecContext(ctx, `UPDATE knowledge_facts SET valid_until = ? WHERE id = ? AND valid_until = ''`, d.until, d.id)
		if err != nil {
			return n, fmt.Errorf("knowledge: expire fact %d: %w", d.id, err)
		}
		if k, _ := res.RowsAffected(); k > 0 {
			n++
		}
	}
	return n, nil
}

// Current returns the facts current now in ns, about subject (case-insensitive) or about
// everything when subject is "", ordered by subject, predicate and start.
func (g *Graph) Current(ctx context.Context, ns, subject string) ([]Fact, error) {
	if err := validateNamespace(ns); err != nil {
		return nil, fmt.Errorf("knowledge: current: %w", err)
	}
	facts, err := queryFacts(ctx, g.db.Read, `SELECT `+factColumns+` FROM knowledge_facts
		WHERE namespace = ? AND `+currentClause+` ORDER BY valid_from, id`, append([]any{ns}, currentArgs(g.clock())...)...)
	if err != nil {
		return nil, fmt.Errorf("knowledge: current: %w", err)
	}
	facts = filterSubject(facts, subject)
	sort.SliceStable(facts, func(i, j int) bool {
		a, b := facts[i], facts[j]
		if la, lb := strings.ToLower(a.Subject), strings.ToLower(b.Subject); la != lb {
			return la < lb
		}
		return a.Predicate < b.Predicate
	})
	return facts, nil
}

func filterSubject(facts []Fact, subject string) []Fact {
	subject = NormalizeText(subject)
	if subject == "" {
		return facts
	}
	out := facts[:0]
	for _, f := range facts {
		if strings.EqualFold(f.Subject, subject) {
			out = append(out, f)
		}
	}
	return out
}

// Timeline returns every fact in ns, current or ended, about subject (case-insensitive;
// "" for all), in the order they became valid.
func (g *Graph) Timeline(ctx context.Context, ns, subject string) ([]Fact, error) {
	if err := validateNamespace(ns); err != nil {
		return nil, fmt.Errorf("knowledge: timeline: %w", err)
	}
	facts, err := queryFacts(ctx, g.db.Read, `SELECT `+factColumns+` FROM knowledge_facts
		WHERE namespace = ? ORDER BY valid_from, id`, ns)
	if err != nil {
		return nil, fmt.Errorf("knowledge: timeline: %w", err)
	}
	return filterSubject(facts, subject), nil
}

// Get returns one fact of ns, or an error matching store.ErrNotFound.
func (g *Graph) Get(ctx context.Context, ns string, id int64) (Fact, error) {
	f, err := scanFact(g.db.Read.QueryRowContext(ctx, `SELECT `+factColumns+` FROM knowledge_facts WHERE namespace = ? AND id = ?`, ns, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Fact{}, fmt.Errorf("knowledge: fact %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return Fact{}, fmt.Errorf("knowledge: get fact %d: %w", id, err)
	}
	return f, nil
}

// Invalidate ends fact id of ns at at (now when zero): it stays in the timeline but is no
// longer current. Ending an already ended fact changes nothing. It returns an error
// matching store.ErrNotFound when ns has no such fact, and ErrInvalid when at is not
// after the fact's start.
func (g *Graph) Invalidate(ctx context.Context, ns string, id int64, at time.Time) error {
	if at.IsZero() {
		at = g.clock()
	}
	at = at.UTC().Truncate(time.Millisecond)
	f, err := g.Get(ctx, ns, id)
	if err != nil {
		return err
	}
	if !f.ValidUntil.IsZero() {
		return nil
	}
	if !at.After(f.ValidFrom) {
		return fmt.Errorf("knowledge: invalidate fact %d: %w: end %s is not after its start %s",
			id, ErrInvalid, store.FormatTime(at), store.FormatTime(f.ValidFrom))
	}
	if _, err := g.db.Write.ExecContext(ctx, `UPDATE knowledge_facts SET valid_until = ? WHERE namespace = ? AND id = ? AND valid_until = ''`,
		store.FormatTime(at), ns, id); err != nil {
		return fmt.Errorf("knowledge: invalidate fact %d: %w", id, err)
	}
	return nil
}

// Delete removes fact id of ns from the graph and its timeline (for facts that were
// wrong, not merely outdated). It returns an error matching store.ErrNotFound when ns has
// no such fact.
func (g *Graph) Delete(ctx context.Context, ns string, id int64) error {
	res, err := g.db.Write.ExecContext(ctx, `DELETE FROM knowledge_facts WHERE namespace = ? AND id = ?`, ns, id)
	if err != nil {
		return fmt.Errorf("knowledge: delete fact %d: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("knowledge: fact %d: %w", id, store.ErrNotFound)
	}
	return nil
}

// significant reports whether w can make a fact relevant on its own: three letters or
// more and not a common stop word.
func significant(w string) bool {
	if utf8.RuneCountInString(w) < 3 {
		return false
	}
	switch w {
	case "the", "and", "for", "with", "that", "this", "from", "about", "what", "when",
		"where", "who", "how", "are", "was", "were", "has", "have", "had", "not", "but",
		"you", "your", "our", "his", "her", "its", "they", "them", "there", "will",
		"would", "can", "could", "should", "into",
		"der", "die", "das", "und", "ist", "mit":
		return false
	}
	return true
}

// Relevant returns up to limit current facts of ns that text mentions: every significant
// word of the subject appears in text, or some significant word of the object does (words
// of fewer than three letters and common stop words do not count). Facts naming their
// subject rank first, then by how many object words match, then newest first.
func (g *Graph) Relevant(ctx context.Context, ns, text string, limit int) ([]Fact, error) {
	if limit <= 0 {
		return nil, nil
	}
	facts, err := g.Current(ctx, ns, "")
	if err != nil {
		return nil, err
	}
	in := wordSet(text)
	type scored struct {
		f     Fact
		score int
	}
	var hits []scored
	for _, f := range facts {
		score := 0
		subj, all := 0, true
		for _, w := range Words(f.Subject) {
			if !significant(w) {
				continue
			}
			subj++
			if !in[w] {
				all = false
			}
		}
		if subj > 0 && all {
			score += 100
		}
		seen := map[string]bool{}
		for _, w := range Words(f.Object) {
			if significant(w) && in[w] && !seen[w] {
				seen[w] = true
				score++
			}
		}
		if score > 0 {
			hits = append(hits, scored{f, score})
		}
	}
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].score != hits[j].score {
			return hits[i].score > hits[j].score
		}
		return hits[i].f.ValidFrom.After(hits[j].f.ValidFrom)
	})
	if len(hits) > limit {
		hits = hits[:limit]
	}
	out := make([]Fact, len(hits))
	for i, h := range hits {
		out[i] = h.f
	}
	return out, nil
}
