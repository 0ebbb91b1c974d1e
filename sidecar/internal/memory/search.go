package memory

import (
	"container/heap"
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/store"
)

// Search tuning.
const (
	DefaultLimit = 10
	MaxLimit     = 100
	// rrfK is the reciprocal-rank-fusion constant: a document's score is the sum over
	// the rankings of 1/(rrfK + rank). 60 is the value from the original RRF paper; it
	// keeps one ranking's first place from drowning the other ranking.
	rrfK = 60
	// recencyFloor is the weight an arbitrarily old hit keeps: old memories fade but
	// stay findable when nothing newer matches.
	recencyFloor = 0.25
	// maxTerms and maxTermRunes bound the match expression a query can produce.
	maxTerms     = 24
	maxTermRunes = 64
	// prefixMinRunes is the shortest term that also matches as a prefix ("deploy"
	// finds "deployment"); shorter prefixes match too much to be worth their cost.
	prefixMinRunes = 4
	// SnippetRunes is the length of a hit's snippet.
	SnippetRunes = 280
	// maxQueryEmbedRunes bounds the text sent to the embeddings endpoint for a query.
	maxQueryEmbedRunes = 2000
)

// Query is one search. Namespaces is required: a search never spans namespaces the
// caller did not name.
type Query struct {
	Namespaces []string
	Text       string
	Limit      int       // 0 means DefaultLimit; at most MaxLimit
	Since      time.Time // created at or after, when not zero
	Until      time.Time // created before, when not zero
	// Sources keeps only these sources when not empty; ExcludeSources drops these.
	Sources        []string
	ExcludeSources []string
}

// Hit is one search result: the best matching chunk with its neighbouring chunks of the
// same document (an episode). Several matching chunks of one document that are
// neighbours come back as one hit.
type Hit struct {
	Namespace string
	Source    string
	SourceRef string
	// Snippet is a short excerpt of the best matching chunk around the first query
	// term it contains.
	Snippet string
	// Text is the episode: the matching chunks and their neighbours in text order,
	// with the overlap between neighbours removed.
	Text      string
	Score     float64
	CreatedAt time.Time // of the best matching chunk
	ChunkIDs  []int64   // the episode's chunks in text order
	Matched   []int64   // the episode's chunks that matched, best first
}

// isStopword reports single characters and common English function words. They are
// dropped from a query that has other terms: with OR semantics they would match nearly
// every chunk and slow the ranking without changing it much.
func isStopword(t string) bool {
	if utf8.RuneCountInString(t) == 1 {
		return true
	}
	switch t {
	case "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "could", "did", "do", "does",
		"for", "from", "had", "has", "have", "he", "her", "his", "how", "i", "if", "in", "into", "is", "it",
		"its", "me", "my", "no", "not", "of", "on", "or", "our", "she", "so", "that", "the", "their",
		"them", "there", "they", "this", "to", "was", "we", "were", "what", "when", "where", "which",
		"who", "why", "will", "with", "would", "you", "your":
		return true
	}
	return false
}

// queryTerms extracts the words of a query: runs of letters, digits and combining
// marks, lower-cased, deduplicated, each at most maxTermRunes, at most maxTerms of
// them. Everything else — quotes, operators' punctuation, colons of column filters,
// asterisks, parentheses — only separates words.
func queryTerms(text string) []string {
	fields := strings.FieldsFunc(text, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !unicode.IsMark(r)
	})
	var all, content []string
	seen := map[string]bool{}
	for _, f := range fields {
		t := strings.ToLower(f)
		if utf8.RuneCountInString(t) > maxTermRunes {
			t = string([]rune(t)[:maxTermRunes])
		}
		if seen[t] {
			continue
		}
		seen[t] = true
		all = append(all, t)
		if !isStopword(t) {
			content = append(content, t)
		}
	}
	terms := all
	if len(content) > 0 {
		terms = content
	}
	if len(terms) > maxTerms {
		terms = terms[:maxTerms]
	}
	return terms
}

// termsExpression joins terms with op ("AND" or "OR") into an FTS5 expression that
// can only ever hold quoted strings: every term is a "string" (the terms hold no quote
// characters), so FTS5 never sees an operator, a column filter or a bare asterisk from
// the user. A term of prefixMinRunes or more also matches as a prefix; an exact match
// then scores for both clauses and ranks above a partial one. When expands is not nil,
// only its terms get the prefix clause: for a word no other indexed word begins with,
// it would match the same chunks again and cost a third of the search.
func termsExpression(terms []string, op string, expands map[string]bool) string {
	parts := make([]string, 0, len(terms))
	for _, t := range terms {
		q := `"` + strings.ReplaceAll(t, `"`, `""`) + `"`
		if utf8.RuneCountInString(t) >= prefixMinRunes && (expands == nil || expands[t]) {
			q = "(" + q + " OR " + q + "*)"
		}
		parts = append(parts, q)
	}
	return strings.Join(parts, op)
}

// candidate is a chunk some ranking returned.
type candidate struct {
	id        int64
	namespace string
	source    string
	ref       string
	content   string
	created   time.Time
	score     float64
}

// Search finds the chunks of q.Namespaces that match q.Text best: BM25 over the full
// text index, character pairs for CJK words (which the index cannot split), and cosine
// similarity of vectors when an embedder is configured and working, fused by
// reciprocal rank, weighted by recency, grouped into episodes. A
// query without any word (empty, punctuation only) returns no hits and no error.
func (m *Memory) Search(ctx context.Context, q Query) ([]Hit, error) {
	if len(q.Namespaces) == 0 {
		return nil, fmt.Errorf("%w query: no namespace given", ErrInvalid)
	}
	for _, ns := range q.Namespaces {
		if err := ValidateNamespace(ns); err != nil {
			return nil, err
		}
	}
	for _, s := range slices.Concat(q.Sources, q.ExcludeSources) {
		if err := validateSource(s); err != nil {
			return nil, err
		}
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	terms := queryTerms(q.Text)
	if len(terms) == 0 {
		return nil, nil
	}
	pool := 3*limit + 20 // merging into episodes consumes candidates

	filter, args := q.filter("c.")
	// The vector ranking (embedding the query, then the index) runs beside the keyword
	// ranking: together they would take as long as both.
	var (
		semantic []candidate
		semErr   error
		wg       sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if qv, ok := m.queryVector(ctx, q.Text); ok {
			semantic, semErr = m.semantic(ctx, qv, q, filter, args, pool, nil)
		} else {
			semErr = ctx.Err()
		}
	}()
	var substring []candidate
	lexical, err := m.lexical(ctx, q, terms, pool)
	if err == nil {
		substring, err = m.substring(ctx, cjkGrams(terms), filter, args, pool)
	}
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if semErr != nil {
		return nil, semErr
	}
	fused := m.fuse(lexical, substring, semantic)
	return m.episodes(ctx, fused, terms, limit)
}

// filter renders the namespace, time and source conditions shared by both rankings.
func (q Query) filter(col string) (string, []any) {
	var b strings.Builder
	var args []any
	b.WriteString(col + "namespace IN (" + placeholders(len(q.Namespaces)) + ")")
	for _, ns := range q.Namespaces {
		args = append(args, ns)
	}
	if !q.Since.IsZero() {
		b.WriteString(" AND " + col + "created_at >= ?")
		args = append(args, store.FormatTime(q.Since))
	}
	if !q.Until.IsZero() {
		b.WriteString(" AND " + col + "created_at < ?")
		args = append(args, store.FormatTime(q.Until))
	}
	if len(q.Sources) > 0 {
		b.WriteString(" AND " + col + "source IN (" + placeholders(len(q.Sources)) + ")")
		for _, s := range q.Sources {
			args = append(args, s)
		}
	}
	if len(q.ExcludeSources) > 0 {
		b.WriteString(" AND " + col + "source NOT IN (" + placeholders(len(q.ExcludeSources)) + ")")
		for _, s := range q.ExcludeSources {
			args = append(args, s)
		}
	}
	return b.String(), args
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// lexical is the BM25 ranking, best first. Ranking every chunk that has any of the
// words is what costs (a common word is in thousands), so it goes in two steps:
// first the chunks that have all the words (few, and the best anyway); only when
// they are too few, the chunks with any of the selective words (those in at most one
// chunk in fifty: rare words say what the question is about, and their chunks are
// few). Words in no chunk at all are left out. The namespace is a token in the index
// itself, so both steps intersect posting lists instead of collecting the user's ids.
func (m *Memory) lexical(ctx context.Context, q Query, terms []string, n int) ([]candidate, error) {
	df, expands, total, err := m.docFreq(ctx, terms)
	if err != nil {
		return nil, fmt.Errorf("memory: keyword search: %w", err)
	}
	var present []string
	for _, t := range terms {
		if df[t] > 0 {
			present = append(present, t)
		}
	}
	if len(present) == 0 {
		return nil, nil
	}
	var ids []int64
	if len(present) == len(terms) {
		if ids, err = m.rankFTS(ctx, q, present, expands, " AND ", n); err != nil {
			return nil, err
		}
	}
	if len(ids) < n && !(len(present) == 1 && len(present) == len(terms)) {
		common := max(200, total/50)
		var selective []string
		rarest := present[0]
		for _, t := range present {
			if df[t] <= common {
				selective = append(selective, t)
			}
			if df[t] < df[rarest] {
				rarest = t
			}
		}
		if len(selective) == 0 {
			selective = []string{rarest}
		}
		more, err := m.rankFTS(ctx, q, selective, expands, " OR ", n)
		if err != nil {
			return nil, err
		}
		seen := make(map[int64]bool, len(ids))
		for _, id := range ids {
			seen[id] = true
		}
		for _, id := range more {
			if len(ids) >= n {
				break
			}
			if !seen[id] {
				ids = append(ids, id)
			}
		}
	}
	out, err := m.load(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("memory: keyword search: %w", err)
	}
	return out, nil
}

// rankFTS returns the ids of the best n chunks of q's namespaces matching terms (an
// expression over the content column; expands as termsExpression takes it), best first.
func (m *Memory) rankFTS(ctx context.Context, q Query, terms []string, expands map[string]bool, op string, n int) ([]int64, error) {
	if m.db.Dialect() == store.Postgres {
		return m.rankTSV(ctx, q, terms, op, n)
	}
	ns := make([]string, len(q.Namespaces))
	for i, name := range q.Namespaces {
		ns[i] = `"` + NamespaceToken(name) + `"`
	}
	expr := "ns: (" + strings.Join(ns, " OR ") + ") AND {content}: (" + termsExpression(terms, op, expands) + ")"
	query := `SELECT rowid FROM memory_fts WHERE memory_fts MATCH ?`
	args := []any{expr}
	if q.hasExtraFilters() {
		filter, filterArgs := q.filter("c.")
		query += ` AND +rowid IN (SELECT c.id FROM memory_chunks c WHERE ` + filter + `)`
		args = append(args, filterArgs...)
	}
	args = append(args, n)
	rows, err := m.db.Read.QueryContext(ctx, query+` ORDER BY bm25(memory_fts, 1.0, 0.0), rowid DESC LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("memory: keyword search: %w", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("memory: keyword search: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("memory: keyword search: %w", err)
	}
	return ids, nil
}

// NamespaceToken is how a namespace stands in the full-text index (the generated
// column memory_chunks.ns): one token that no word of the content can equal by chance.
func NamespaceToken(ns string) string { return "n" + hex.EncodeToString([]byte(ns)) }

// hasExtraFilters reports whether q limits more than the namespaces.
func (q Query) hasExtraFilters() bool {
	return !q.Since.IsZero() || !q.Until.IsZero() || len(q.Sources) > 0 || len(q.ExcludeSources) > 0
}

// docFreq returns how many chunks hold each term (for a term long enough to match as a
// prefix, every word it begins counts), whether other indexed words begin with each such
// term (nil on PostgreSQL, whose ranking does not ask), and about how many chunks there
// are.
func (m *Memory) docFreq(ctx context.Context, terms []string) (map[string]int, map[string]bool, int, error) {
	if m.db.Dialect() == store.Postgres {
		df, total, err := m.docFreqTSV(ctx, terms)
		return df, nil, total, err
	}
	df := make(map[string]int, len(terms))
	expands := make(map[string]bool, len(terms))
	for _, t := range terms {
		var n, others sql.NullInt64
		var err error
		if utf8.RuneCountInString(t) >= prefixMinRunes {
			err = m.db.Read.QueryRowContext(ctx, `SELECT sum(doc), sum(term <> ?) FROM memory_fts_vocab WHERE term >= ? AND term < ?`,
				t, t, t+"\U0010FFFF").Scan(&n, &others)
		} else {
			err = m.db.Read.QueryRowContext(ctx, `SELECT sum(doc) FROM memory_fts_vocab WHERE term = ?`, t).Scan(&n)
		}
		if err != nil {
			return nil, nil, 0, err
		}
		df[t] = int(n.Int64)
		expands[t] = others.Int64 > 0
	}
	var total sql.NullInt64
	if err := m.db.Read.QueryRowContext(ctx, `SELECT max(id) FROM memory_chunks`).Scan(&total); err != nil {
		return nil, nil, 0, err
	}
	return df, expands, int(total.Int64), nil
}

// load reads the chunks ids, in the order given; ids that no longer exist are skipped.
func (m *Memory) load(ctx context.Context, ids []int64) ([]candidate, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := m.db.Read.QueryContext(ctx, `SELECT id, namespace, source, source_ref, content, created_at
		FROM memory_chunks WHERE id IN (`+placeholders(len(ids))+`)`, args...)
	if err != nil {
		return nil, err
	}
	loaded, err := scanCandidates(rows)
	if err != nil {
		return nil, err
	}
	byID := make(map[int64]candidate, len(loaded))
	for _, c := range loaded {
		byID[c.id] = c
	}
	out := make([]candidate, 0, len(ids))
	for _, id := range ids {
		if c, ok := byID[id]; ok {
			out = append(out, c)
		}
	}
	return out, nil
}

func scanCandidates(rows *sql.Rows) ([]candidate, error) {
	defer rows.Close()
	var out []candidate
	for rows.Next() {
		var c candidate
		var created string
		if err := rows.Scan(&c.id, &c.namespace, &c.source, &c.ref, &c.content, &created); err != nil {
			return nil, err
		}
		t, err := store.ParseTime(created)
		if err != nil {
			return nil, err
		}
		c.created = t
		out = append(out, c)
	}
	return out, rows.Err()
}

// maxGrams bounds the character pairs a CJK query is searched by.
const maxGrams = 8

func isCJK(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

// cjkGrams returns the character pairs of the query terms that hold Chinese, Japanese
// or Korean characters (a single such character stands for itself). The full-text
// tokenizer of the schema (unicode61) does not segment these scripts: a whole run of
// them is one token, so 東京 would never match 私は東京に住んでいます by keyword. Pairs
// of characters, the usual unit of CJK retrieval, are matched as substrings instead.
func cjkGrams(terms []string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(g string) {
		if !seen[g] && len(out) < maxGrams {
			seen[g] = true
			out = append(out, g)
		}
	}
	for _, t := range terms {
		if strings.IndexFunc(t, isCJK) < 0 {
			continue
		}
		rs := []rune(t)
		if len(rs) == 1 {
			add(t)
		}
		for i := 0; i+1 < len(rs); i++ {
			add(string(rs[i : i+2]))
		}
	}
	return out
}

// substring ranks the chunks that contain the most of grams, newest first among
// equals. It reads every chunk the filter allows, so it only runs for CJK queries.
func (m *Memory) substring(ctx context.Context, grams []string, filter string, filterArgs []any, n int) ([]candidate, error) {
	if len(grams) == 0 {
		return nil, nil
	}
	// instr on SQLite, strpos on PostgreSQL: the same function by two names.
	pos := "instr"
	if m.db.Dialect() == store.Postgres {
		pos = "strpos"
	}
	found := strings.TrimSuffix(strings.Repeat("(CASE WHEN "+pos+"(c.content, ?) > 0 THEN 1 ELSE 0 END) + ", len(grams)), " + ")
	anyOf := strings.TrimSuffix(strings.Repeat(pos+"(c.content, ?) > 0 OR ", len(grams)), " OR ")
	var args []any
	for _, g := range grams {
		args = append(args, g)
	}
	args = append(args, filterArgs...)
	for _, g := range grams {
		args = append(args, g)
	}
	args = append(args, n)
	rows, err := m.db.Read.QueryContext(ctx, `SELECT c.id, `+found+` AS found FROM memory_chunks c
		WHERE `+filter+` AND (`+anyOf+`)
		ORDER BY found DESC, c.created_at DESC, c.id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("memory: substring search: %w", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		var found int
		if err := rows.Scan(&id, &found); err != nil {
			rows.Close()
			return nil, fmt.Errorf("memory: substring search: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("memory: substring search: %w", err)
	}
	out, err := m.load(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("memory: substring search: %w", err)
	}
	return out, nil
}

// queryVector embeds the query text, within QueryTimeout; ok is false when there is no
// embedder, it is resting after a failure, or it fails now.
func (m *Memory) queryVector(ctx context.Context, text string) ([]float32, bool) {
	if m.emb == nil || !m.embedAvailable() {
		return nil, false
	}
	text = normalize(text)
	if utf8.RuneCountInString(text) > maxQueryEmbedRunes {
		text = string([]rune(text)[:maxQueryEmbedRunes])
	}
	qctx, cancel := context.WithTimeout(ctx, m.opts.QueryTimeout)
	defer cancel()
	vecs, err := m.emb.Embed(qctx, []string{text})
	if err == nil && len(vecs) != 1 {
		err = fmt.Errorf("embeddings: asked for 1 vector, got %d", len(vecs))
	}
	if err != nil {
		if ctx.Err() == nil { // the caller giving up is not the endpoint's failure
			m.embedFailed(err)
		}
		return nil, false
	}
	m.embedWorked()
	v, ok := unitVector(vecs[0])
	return v, ok
}

type scored struct {
	id  int64
	sim float64
}

// topK is a min-heap of the best similarities seen so far.
type topK []scored

func (h topK) Len() int { return len(h) }
func (h topK) Less(i, j int) bool {
	if h[i].sim != h[j].sim {
		return h[i].sim < h[j].sim
	}
	return h[i].id < h[j].id
}
func (h topK) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *topK) Push(x any)   { *h = append(*h, x.(scored)) }
func (h *topK) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// semantic is the vector ranking, best first: every stored vector of the current
// model in the query's namespaces is compared with qv. Chunks whose similarity is not
// above MinSimilarity are left out. lexical holds candidates already loaded, to avoid reading
// them twice.
//
// With the vector index (vecindex.go) only each namespace's nearest chunks by the
// quantised vectors, found in the vector cache (veccache.go) or else by sqlite-vec, are
// compared exactly; without it, every vector is.
func (m *Memory) semantic(ctx context.Context, qv []float32, q Query, filter string, filterArgs []any, n int, lexical []candidate) ([]candidate, error) {
	table, indexed, err := m.vecIndex(ctx, len(qv))
	if err != nil {
		m.log.Warn("the vector index is not available; comparing every vector", "err", err)
		indexed = false
	}
	var ids []int64
	if indexed {
		for _, ns := range q.Namespaces {
			got, cached, err := m.nearestCached(ctx, table, ns, qv, n*cacheCandidates)
			if err != nil && ctx.Err() == nil {
				// The index answers on its own, only slower.
				m.log.Warn("searching the vector index instead of the vector cache", "err", err)
			}
			if !cached {
				if got, err = m.nearest(ctx, table, ns, qv, n*vecCandidates); err != nil {
					return nil, fmt.Errorf("memory: vector search: %w", err)
				}
			}
			ids = append(ids, got...)
		}
		if len(ids) == 0 {
			return nil, nil
		}
	}
	return m.rankVectors(ctx, qv, filter, filterArgs, n, ids, lexical)
}

// rankVectors compares qv exactly with the stored vectors of the chunks ids (every
// chunk the filter allows when ids is nil) and returns the best n, best first.
func (m *Memory) rankVectors(ctx context.Context, qv []float32, filter string, filterArgs []any, n int, ids []int64, lexical []candidate) ([]candidate, error) {
	args := append([]any{m.emb.Model()}, filterArgs...)
	from := "memory_chunks c"
	if ids != nil && m.db.Dialect() == store.SQLite {
		// Found by id: left to itself, SQLite's planner reads the namespace's every row
		// through the namespace index to pick out the few ids (9 ms of a search at
		// 75,000 chunks); NOT INDEXED leaves it the primary key.
		from = "memory_chunks c NOT INDEXED"
	}
	query := `SELECT c.id, c.embedding FROM ` + from + `
		WHERE c.embed_model = ? AND c.embedding IS NOT NULL AND ` + filter
	if ids != nil {
		query += ` AND c.id IN (` + placeholders(len(ids)) + `)`
		for _, id := range ids {
			args = append(args, id)
		}
	}
	rows, err := m.db.Read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("memory: vector search: %w", err)
	}
	defer rows.Close()
	h := make(topK, 0, n+1)
	for rows.Next() {
		var id int64
		var blob sql.RawBytes
		if err := rows.Scan(&id, &blob); err != nil {
			return nil, fmt.Errorf("memory: vector search: %w", err)
		}
		sim, ok := dotEncoded(qv, blob)
		if !ok || sim <= m.opts.MinSimilarity || math.IsNaN(sim) {
			continue
		}
		if len(h) < n {
			heap.Push(&h, scored{id, sim})
		} else if sim > h[0].sim || (sim == h[0].sim && id > h[0].id) {
			h[0] = scored{id, sim}
			heap.Fix(&h, 0)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("memory: vector search: %w", err)
	}
	rows.Close()
	best := make([]scored, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		best[i] = heap.Pop(&h).(scored)
	}
	known := make(map[int64]candidate, len(lexical))
	for _, c := range lexical {
		known[c.id] = c
	}
	var missing []int64
	for _, s := range best {
		if _, ok := known[s.id]; !ok {
			missing = append(missing, s.id)
		}
	}
	loaded, err := m.load(ctx, missing)
	if err != nil {
		return nil, fmt.Errorf("memory: vector search: %w", err)
	}
	for _, c := range loaded {
		known[c.id] = c
	}
	out := make([]candidate, 0, len(best))
	for _, s := range best {
		if c, ok := known[s.id]; ok { // a chunk deleted meanwhile is simply gone
			out = append(out, c)
		}
	}
	return out, nil
}

// fuse combines the rankings by reciprocal rank and weights each candidate by its age.
// The result is ordered best first; ties go to the newer chunk.
func (m *Memory) fuse(rankings ...[]candidate) []candidate {
	byID := map[int64]*candidate{}
	var order []int64
	for _, ranking := range rankings {
		for i, c := range ranking {
			got, ok := byID[c.id]
			if !ok {
				c.score = 0
				got = &c
				byID[c.id] = got
				order = append(order, c.id)
			}
			got.score += 1 / float64(rrfK+i+1)
		}
	}
	now := m.clock()
	out := make([]candidate, 0, len(order))
	for _, id := range order {
		c := *byID[id]
		c.score *= m.recencyWeight(now.Sub(c.created))
		out = append(out, c)
	}
	slices.SortStableFunc(out, func(a, b candidate) int {
		switch {
		case a.score != b.score:
			if a.score > b.score {
				return -1
			}
			return 1
		case !a.created.Equal(b.created):
			return b.created.Compare(a.created)
		}
		return compareInt64(b.id, a.id)
	})
	return out
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// recencyWeight falls from 1 (now) towards recencyFloor, halfway at HalfLife.
func (m *Memory) recencyWeight(age time.Duration) float64 {
	if m.opts.HalfLife < 0 {
		return 1
	}
	if age < 0 {
		age = 0
	}
	decay := math.Exp2(-float64(age) / float64(m.opts.HalfLife))
	return recencyFloor + (1-recencyFloor)*decay
}

// episodeChunk is a chunk of an episode.
type episodeChunk struct {
	id      int64
	content string
}

type episode struct {
	hit    Hit
	key    string
	chunks []episodeChunk // sorted by id
	best   candidate
}

func (e *episode) has(id int64) bool {
	return slices.ContainsFunc(e.chunks, func(c episodeChunk) bool { return c.id == id })
}

// episodes turns ranked candidates into at most limit hits, each with its neighbours;
// a candidate inside or next to an earlier hit's episode joins that hit.
func (m *Memory) episodes(ctx context.Context, ranked []candidate, terms []string, limit int) ([]Hit, error) {
	var eps []*episode
	for _, c := range ranked {
		key := c.namespace + "\x00" + c.source + "\x00" + c.ref
		var joined bool
		for _, e := range eps {
			if e.key == key && e.has(c.id) {
				e.hit.Matched = append(e.hit.Matched, c.id)
				joined = true
				break
			}
		}
		if joined || len(eps) == limit {
			continue // once the hits are full, later candidates only join episodes they are in
		}
		window, err := m.window(ctx, c)
		if err != nil {
			return nil, err
		}
		for _, e := range eps {
			if e.key != key || !slices.ContainsFunc(window, func(w episodeChunk) bool { return e.has(w.id) }) {
				continue
			}
			var extra []episodeChunk
			for _, w := range window {
				if !e.has(w.id) {
					extra = append(extra, w)
				}
			}
			// A run of matches in one long document grows its episode only up to a
			// bound; past it the match counts for the hit without adding more text.
			if len(e.chunks)+len(extra) <= maxEpisodeChunks(m.opts.EpisodeWindow) {
				e.chunks = append(e.chunks, extra...)
				slices.SortFunc(e.chunks, func(a, b episodeChunk) int { return compareInt64(a.id, b.id) })
			}
			e.hit.Matched = append(e.hit.Matched, c.id)
			joined = true
			break
		}
		if joined {
			continue
		}
		eps = append(eps, &episode{
			key:    key,
			chunks: window,
			best:   c,
			hit: Hit{
				Namespace: c.namespace, Source: c.source, SourceRef: c.ref,
				Score: c.score, CreatedAt: c.created, Matched: []int64{c.id},
			},
		})
	}
	re := termPattern(terms)
	hits := make([]Hit, 0, len(eps))
	for _, e := range eps {
		h := e.hit
		texts := make([]string, len(e.chunks))
		for i, ch := range e.chunks {
			h.ChunkIDs = append(h.ChunkIDs, ch.id)
			texts[i] = ch.content
		}
		h.Text = joinEpisode(texts)
		h.Snippet = snippet(e.best.content, re, SnippetRunes)
		hits = append(hits, h)
	}
	return hits, nil
}

// maxEpisodeChunks bounds an episode: two overlapping windows' worth.
func maxEpisodeChunks(window int) int { return 2*max(window, 0) + 3 }

// window returns c with up to EpisodeWindow chunks of the same document on each side,
// in text order (chunks of a document are stored in text order, so by id).
func (m *Memory) window(ctx context.Context, c candidate) ([]episodeChunk, error) {
	self := episodeChunk{id: c.id, content: c.content}
	w := m.opts.EpisodeWindow
	if w < 0 {
		return []episodeChunk{self}, nil
	}
	load := func(query string) ([]episodeChunk, error) {
		rows, err := m.db.Read.QueryContext(ctx, query, c.namespace, c.source, c.ref, c.id, w)
		if err != nil {
			return nil, fmt.Errorf("memory: episode: %w", err)
		}
		defer rows.Close()
		var out []episodeChunk
		for rows.Next() {
			var e episodeChunk
			if err := rows.Scan(&e.id, &e.content); err != nil {
				return nil, fmt.Errorf("memory: episode: %w", err)
			}
			out = append(out, e)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("memory: episode: %w", err)
		}
		return out, nil
	}
	before, err := load(`SELECT id, content FROM memory_chunks
		WHERE namespace = ? AND source = ? AND source_ref = ? AND id < ? ORDER BY id DESC LIMIT ?`)
	if err != nil {
		return nil, err
	}
	after, err := load(`SELECT id, content FROM memory_chunks
		WHERE namespace = ? AND source = ? AND source_ref = ? AND id > ? ORDER BY id LIMIT ?`)
	if err != nil {
		return nil, err
	}
	slices.Reverse(before)
	out := append(before, self)
	return append(out, after...), nil
}

// minOverlapBytes is the shortest repeated text joinEpisode treats as chunk overlap
// rather than coincidence.
const minOverlapBytes = 16

// joinEpisode joins neighbouring chunks, dropping the text a chunk repeats from the end
// of the one before it.
func joinEpisode(chunks []string) string {
	var b strings.Builder
	for i, c := range chunks {
		if i == 0 {
			b.WriteString(c)
			continue
		}
		prev := chunks[i-1]
		// The overlap is at most ChunkOverlap characters; looking no further keeps
		// repetitive text from being mistaken for a longer overlap.
		cut := 0
		for k := min(len(prev), runePrefixLen(c, ChunkOverlap)); k >= minOverlapBytes; k-- {
			if (k == len(c) || utf8.RuneStart(c[k])) && strings.HasSuffix(prev, c[:k]) {
				cut = k
				break
			}
		}
		rest := c[cut:]
		if cut == 0 {
			b.WriteString("\n")
		}
		b.WriteString(rest)
	}
	return b.String()
}

// runePrefixLen is the length in bytes of the first n characters of s.
func runePrefixLen(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}

// termPattern matches any of the terms, case-insensitively.
func termPattern(terms []string) *regexp.Regexp {
	if len(terms) == 0 {
		return nil
	}
	quoted := make([]string, len(terms))
	for i, t := range terms {
		quoted[i] = regexp.QuoteMeta(t)
	}
	re, err := regexp.Compile(`(?i)(` + strings.Join(quoted, "|") + `)`)
	if err != nil {
		return nil
	}
	return re
}

// snippet is up to n characters of content on one line, starting a little before the
// first match of re, cut at spaces where it can, with … marking cuts.
func snippet(content string, re *regexp.Regexp, n int) string {
	text := normalize(content)
	rs := []rune(text)
	if len(rs) <= n {
		return text
	}
	start := 0
	if re != nil {
		if loc := re.FindStringIndex(text); loc != nil {
			start = max(0, utf8.RuneCountInString(text[:loc[0]])-n/4)
		}
	}
	start = min(start, len(rs)-n)
	if start > 0 {
		for k := start; k < start+20 && k < len(rs); k++ {
			if rs[k] == ' ' {
				start = k + 1
				break
			}
		}
	}
	end := min(len(rs), start+n)
	if end < len(rs) {
		for k := end; k > end-20 && k > start; k-- {
			if rs[k] == ' ' {
				end = k
				break
			}
		}
	}
	out := string(rs[start:end])
	if start > 0 {
		out = "…" + out
	}
	if end < len(rs) {
		out += "…"
	}
	return out
}

// Recall finds memories for a prompt: up to limit snippets from namespaces, formatted
// "YYYY-MM-DD: snippet", leaving out USER.md and CHANNEL.md, which the prompt carries
// whole anyway.
func (m *Memory) Recall(ctx context.Context, namespaces []string, text string, limit int) ([]string, error) {
	hits, err := m.Search(ctx, Query{
		Namespaces: namespaces, Text: text, Limit: limit,
		ExcludeSources: []string{SourceUserMD, SourceChannelMD},
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(hits))
	for _, h := range hits {
		out = append(out, h.CreatedAt.UTC().Format("2006-01-02")+": "+h.Snippet)
	}
	return out, nil
}

// FormatHits renders hits for a chat reply or the agent: a header line per hit (rank,
// date, source, reference) and its episode text, cut to maxRunes characters (0: the
// snippet instead of the episode).
func FormatHits(hits []Hit, maxRunes int) string {
	if len(hits) == 0 {
		return "No memories found.\n"
	}
	var b strings.Builder
	for i, h := range hits {
		fmt.Fprintf(&b, "[%d] %s %s", i+1, h.CreatedAt.UTC().Format("2006-01-02"), h.Source)
		if h.SourceRef != "" {
			b.WriteString(" " + h.SourceRef)
		}
		if strings.HasPrefix(h.Namespace, "channel:") {
			b.WriteString(" (" + h.Namespace + ")")
		}
		b.WriteString("\n")
		text := h.Snippet
		if maxRunes > 0 {
			text = strings.TrimSpace(h.Text)
			if rs := []rune(text); len(rs) > maxRunes {
				text = string(rs[:maxRunes]) + "…"
			}
		}
		for _, line := range strings.Split(text, "\n") {
			b.WriteString("    " + line + "\n")
		}
	}
	return b.String()
}
