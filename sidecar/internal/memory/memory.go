// Package memory is the searchable index of what the assistant remembers: chunks of
// conversations, dated memory files, USER.md and CHANNEL.md, per namespace
// ("user:<uid>" or "channel:<token>"), in the tables memory_chunks and memory_fts.
// Search ranks by FTS5 BM25 and, when an embeddings endpoint is configured, by vector
// similarity too, fuses the two by reciprocal rank, favours recent memories and returns
// each hit with its neighbouring chunks. Every query names its namespaces: nothing in
// this package searches "everything".
package memory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/store"
)

// Sources of chunks. Source is free text in the schema; these are the ones the
// sidecar writes.
const (
	SourceConversation = "conversation" // a task's exchange, ref "task:<id>"
	SourceMemoryFile   = "memory_file"  // memories/YYYY-MM-DD.md, ref the file path
	SourceUserMD       = "user_md"      // USER.md: not ephemeral, never expires
	SourceChannelMD    = "channel_md"   // CHANNEL.md
	SourceFact         = "fact"         // knowledge facts rendered as text
	SourceNote         = "note"         // text the agent indexed through the skill
)

// Defaults for Options.
const (
	DefaultHalfLife      = 30 * 24 * time.Hour
	DefaultEmbedBatch    = 64
	DefaultQueryTimeout  = 5 * time.Second
	DefaultEpisodeWindow = 1
	// embedRetryAfter is how long a failed embeddings endpoint is left alone before
	// the next attempt, so that a dead endpoint does not slow every search and index.
	embedRetryAfter = time.Minute
	// maxDocBytes bounds one document; larger ones are refused rather than chunked
	// into tens of thousands of rows by mistake.
	maxDocBytes = 8 << 20
)

// ErrInvalid marks a namespace, source, reference or query the package refuses. Its
// message holds only the caller's input and is safe to show.
var ErrInvalid = errors.New("invalid")

// ErrNoEmbedder is returned by Reindex when no embeddings endpoint is configured.
var ErrNoEmbedder = errors.New("no embeddings endpoint is configured")

// Options configures a Memory. The zero value works: keyword search only, 30-day
// recency half-life.
type Options struct {
	Logger *slog.Logger
	Clock  func() time.Time
	// Embedder adds vector similarity; nil means keyword search only.
	Embedder Embedder
	// HalfLife is the age at which a hit's recency weight has fallen halfway to its
	// floor. 0 means DefaultHalfLife; negative disables recency decay.
	HalfLife time.Duration
	// EmbedBatch is how many chunks go into one embeddings request (default 64).
	EmbedBatch int
	// QueryTimeout bounds embedding a search query (default 5 s): past it the search
	// answers by keywords alone.
	QueryTimeout time.Duration
	// EpisodeWindow is how many neighbouring chunks on each side of a hit come with it
	// (default 1; negative for none).
	EpisodeWindow int
	// MinSimilarity is the cosine similarity a chunk must exceed to be ranked by
	// vector (default 0). Real embedding models rate unrelated texts around 0.1 to
	// 0.2; a threshold near 0.3 keeps vector search from always returning something.
	MinSimilarity float64
	// VectorCacheBytes bounds the quantised vectors kept in memory for searching
	// (veccache.go); 0 means DefaultVectorCacheBytes, negative keeps none.
	VectorCacheBytes int64
}

// Memory reads and writes the memory index. It is safe for concurrent use.
type Memory struct {
	db    *store.DB
	log   *slog.Logger
	clock func() time.Time
	emb   Embedder
	opts  Options

	// The embeddings endpoint's health: a failure is logged once, then the endpoint is
	// left alone until downUntil; the first success after a failure is logged too.
	embedMu   sync.Mutex
	failing   bool
	downUntil time.Time

	// vecReady is the vector index table known to exist (vecindex.go).
	vecMu    sync.Mutex
	vecReady string
	vecs     *vecCache
}

// New returns a Memory over db.
func New(db *store.DB, opts Options) *Memory {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.HalfLife == 0 {
		opts.HalfLife = DefaultHalfLife
	}
	if opts.EmbedBatch <= 0 {
		opts.EmbedBatch = DefaultEmbedBatch
	}
	if opts.QueryTimeout <= 0 {
		opts.QueryTimeout = DefaultQueryTimeout
	}
	if opts.EpisodeWindow == 0 {
		opts.EpisodeWindow = DefaultEpisodeWindow
	}
	if opts.VectorCacheBytes == 0 {
		opts.VectorCacheBytes = DefaultVectorCacheBytes
	}
	return &Memory{db: db, log: opts.Logger, clock: opts.Clock, emb: opts.Embedder, opts: opts,
		vecs: newVecCache(opts.VectorCacheBytes)}
}

// UserNamespace is the namespace of a user's personal memory.
func UserNamespace(uid string) string { return "user:" + uid }

// ChannelNamespace is the namespace of a Talk conversation's shared memory.
func ChannelNamespace(token string) string { return "channel:" + token }

// ValidateNamespace accepts "user:<id>" and "channel:<token>" with a non-empty id of
// at most 256 bytes without control characters.
func ValidateNamespace(ns string) error {
	kind, id, ok := strings.Cut(ns, ":")
	if !ok || (kind != "user" && kind != "channel") || id == "" || len(id) > 256 ||
		strings.IndexFunc(id, unicode.IsControl) >= 0 || !utf8.ValidString(id) {
		return fmt.Errorf("%w namespace %q: want user:<id> or channel:<token>", ErrInvalid, excerpt(ns, 80))
	}
	return nil
}

func validateSource(source string) error {
	if source == "" || len(source) > 32 {
		return fmt.Errorf("%w source: must be 1 to 32 characters", ErrInvalid)
	}
	for i, r := range source {
		if !(r >= 'a' && r <= 'z' || i > 0 && (r == '_' || r >= '0' && r <= '9')) {
			return fmt.Errorf("%w source %q: use lower-case letters, digits and '_'", ErrInvalid, source)
		}
	}
	return nil
}

func validateRef(ref string) error {
	if len(ref) > 1024 || !utf8.ValidString(ref) || strings.IndexFunc(ref, unicode.IsControl) >= 0 {
		return fmt.Errorf("%w reference: at most 1024 bytes of text without control characters", ErrInvalid)
	}
	return nil
}

// Doc is one document to index: a conversation, a memory file, USER.md, …
type Doc struct {
	Namespace string
	Source    string // one of the Source* constants, or another [a-z][a-z0-9_]* name
	SourceRef string // identifies the document within its source: a path, "task:42"
	Text      string
	// CreatedAt is when what the document describes happened; zero means now. Recency
	// ranking and retention use it.
	CreatedAt time.Time
	// Ephemeral chunks expire with retention; USER.md's are not ephemeral.
	Ephemeral bool
}

func (d Doc) validate() error {
	if err := ValidateNamespace(d.Namespace); err != nil {
		return err
	}
	if err := validateSource(d.Source); err != nil {
		return err
	}
	if err := validateRef(d.SourceRef); err != nil {
		return err
	}
	if len(d.Text) > maxDocBytes {
		return fmt.Errorf("%w document: larger than %d MiB", ErrInvalid, maxDocBytes>>20)
	}
	return nil
}

// prepared is a chunk ready to store.
type prepared struct {
	content string
	hash    string
}

// prepare chunks text and drops chunks repeated within it (the namespace keeps one row
// per content hash anyway).
func prepare(text string) []prepared {
	chunks := Chunk(text)
	out := make([]prepared, 0, len(chunks))
	seen := make(map[string]bool, len(chunks))
	for _, c := range chunks {
		if strings.TrimSpace(c) == "" {
			continue
		}
		h := contentHash(c)
		if seen[h] {
			continue
		}
		seen[h] = true
		out = append(out, prepared{content: c, hash: h})
	}
	return out
}

// pending is a stored chunk that still needs a vector.
type pending struct {
	id      int64
	hash    string
	content string
}

// carried is an embedding kept from a chunk that is re-inserted unchanged.
type carried struct {
	vec   []byte
	model string
}

// Index adds d's chunks to the index. Chunks whose content the namespace already holds
// are skipped, except that a non-ephemeral document (USER.md) takes such a chunk over so
// retention can never delete its text. added counts the chunks stored for d. New chunks
// are embedded when an embedder is configured; if that fails they are stored without
// vectors (Reindex fills them in later). To re-index a document that changed, use
// ReplaceSource, which also drops its stale chunks.
func (m *Memory) Index(ctx context.Context, d Doc) (added int, err error) {
	if err := d.validate(); err != nil {
		return 0, err
	}
	chunks := prepare(d.Text)
	if len(chunks) == 0 {
		return 0, nil
	}
	var todo []pending
	err = m.withTx(ctx, "index", func(tx *sql.Tx) error {
		todo, added, err = m.insert(ctx, tx, d, chunks, nil)
		return err
	})
	if err != nil {
		return 0, err
	}
	m.embedPending(ctx, todo)
	return added, nil
}

// ReplaceSource indexes d in place of whatever (namespace, source, ref) held before:
// chunks no longer in the text are deleted, new ones added. A text that chunks exactly
// as before changes nothing; otherwise the document's chunks are rewritten in text
// order (neighbouring chunks are found by id) and unchanged chunks keep their vectors.
func (m *Memory) ReplaceSource(ctx context.Context, d Doc) (added, removed int, err error) {
	if err := d.validate(); err != nil {
		return 0, 0, err
	}
	chunks := prepare(d.Text)
	var todo []pending
	err = m.withTx(ctx, "replace source", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT content_hash, embedding, embed_model FROM memory_chunks
			WHERE namespace = ? AND source = ? AND source_ref = ? ORDER BY id`, d.Namespace, d.Source, d.SourceRef)
		if err != nil {
			return err
		}
		var oldOrder []string
		old := map[string]carried{}
		for rows.Next() {
			var h, model string
			var vec []byte
			if err := rows.Scan(&h, &vec, &model); err != nil {
				rows.Close()
				return err
			}
			oldOrder = append(oldOrder, h)
			old[h] = carried{vec: vec, model: model}
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if sameHashes(oldOrder, chunks) {
			return nil
		}
		newSet := make(map[string]bool, len(chunks))
		for _, c := range chunks {
			newSet[c.hash] = true
		}
		for _, h := range oldOrder {
			if !newSet[h] {
				removed++
			}
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM memory_chunks WHERE namespace = ? AND source = ? AND source_ref = ?`,
			d.Namespace, d.Source, d.SourceRef); err != nil {
			return err
		}
		var stored int
		todo, stored, err = m.insert(ctx, tx, d, chunks, old)
		if err != nil {
			return err
		}
		// Chunks that were there before and are stored again are not "added".
		for _, c := range chunks {
			if _, ok := old[c.hash]; ok {
				stored--
			}
		}
		added = max(stored, 0)
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	m.embedPending(ctx, todo)
	return added, removed, nil
}

func sameHashes(old []string, chunks []prepared) bool {
	if len(old) != len(chunks) {
		return false
	}
	for i, c := range chunks {
		if old[i] != c.hash {
			return false
		}
	}
	return true
}

// insert stores chunks for d in order. keep maps content hashes to vectors to carry
// over. It returns the stored chunks that still need a vector and how many were stored.
func (m *Memory) insert(ctx context.Context, tx *sql.Tx, d Doc, chunks []prepared, keep map[string]carried) ([]pending, int, error) {
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO memory_chunks
		(namespace, source, source_ref, content, content_hash, ephemeral, created_at, indexed_at, embedding, embed_model)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (namespace, content_hash) DO UPDATE SET
			source = excluded.source, source_ref = excluded.source_ref, ephemeral = 0, created_at = excluded.created_at
		WHERE memory_chunks.ephemeral = 1 AND excluded.ephemeral = 0
		RETURNING id, embed_model`)
	if err != nil {
		return nil, 0, err
	}
	defer stmt.Close()
	now := m.clock()
	created := d.CreatedAt
	if created.IsZero() {
		created = now
	}
	model := ""
	if m.emb != nil {
		model = m.emb.Model()
	}
	var todo []pending
	stored := 0
	for _, c := range chunks {
		var vec []byte
		vecModel := ""
		if k, ok := keep[c.hash]; ok && k.vec != nil {
			vec, vecModel = k.vec, k.model
		}
		var id int64
		var gotModel string
		err := stmt.QueryRowContext(ctx, d.Namespace, d.Source, d.SourceRef, c.content, c.hash, d.Ephemeral,
			store.FormatTime(created), store.FormatTime(now), vec, vecModel).Scan(&id, &gotModel)
		if errors.Is(err, sql.ErrNoRows) {
			continue // the namespace already holds this text under another document
		}
		if err != nil {
			return nil, 0, err
		}
		stored++
		if model != "" && gotModel != model {
			todo = append(todo, pending{id: id, hash: c.hash, content: c.content})
		}
	}
	return todo, stored, nil
}

// Delete removes every chunk of one document and reports how many there were.
func (m *Memory) Delete(ctx context.Context, ns, source, ref string) (int, error) {
	if err := ValidateNamespace(ns); err != nil {
		return 0, err
	}
	res, err := m.db.Write.ExecContext(ctx, `DELETE FROM memory_chunks WHERE namespace = ? AND source = ? AND source_ref = ?`, ns, source, ref)
	if err != nil {
		return 0, fmt.Errorf("memory: delete %s %s %q: %w", ns, source, ref, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("memory: delete %s %s %q: %w", ns, source, ref, err)
	}
	return int(n), nil
}

// Turn is one message of a conversation to index.
type Turn struct {
	Speaker string // display name or user id; the assistant's own name for its replies
	Text    string
	At      time.Time
}

// ConversationRef is the source reference of a task's conversation.
func ConversationRef(taskID int64) string { return "task:" + strconv.FormatInt(taskID, 10) }

// IndexConversation indexes one task's exchange in ns (source "conversation", ref
// "task:<id>", ephemeral, dated by its first turn), replacing what an earlier run of
// the same task indexed. Each turn becomes a paragraph "Speaker: text".
func (m *Memory) IndexConversation(ctx context.Context, ns string, taskID int64, turns []Turn) (added int, err error) {
	var b strings.Builder
	var at time.Time
	for _, t := range turns {
		text := strings.TrimSpace(t.Text)
		if text == "" {
			continue
		}
		if at.IsZero() || (!t.At.IsZero() && t.At.Before(at)) {
			at = t.At
		}
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		if sp := normalize(t.Speaker); sp != "" {
			b.WriteString(sp + ": ")
		}
		b.WriteString(text)
	}
	added, _, err = m.ReplaceSource(ctx, Doc{
		Namespace: ns, Source: SourceConversation, SourceRef: ConversationRef(taskID),
		Text: b.String(), CreatedAt: at, Ephemeral: true,
	})
	return added, err
}

// ApplyRetention deletes the ephemeral chunks of ns created before now minus days and
// reports how many. Non-ephemeral chunks (USER.md) are never deleted; days <= 0 keeps
// everything. A chunk created exactly at the cutoff is kept.
func (m *Memory) ApplyRetention(ctx context.Context, ns string, days int) (int, error) {
	if err := ValidateNamespace(ns); err != nil {
		return 0, err
	}
	if days <= 0 {
		return 0, nil
	}
	// Both sides are in store.TimeFormat (SQLite's datetime layout), so text order is
	// time order.
	cutoff := store.FormatTime(m.clock().UTC().AddDate(0, 0, -days))
	res, err := m.db.Write.ExecContext(ctx, `DELETE FROM memory_chunks
		WHERE namespace = ? AND ephemeral = 1 AND created_at < ?`, ns, cutoff)
	if err != nil {
		return 0, fmt.Errorf("memory: retention for %s: %w", ns, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("memory: retention for %s: %w", ns, err)
	}
	return int(n), nil
}

// Stats describes one namespace's part of the index.
type Stats struct {
	Namespace string         `json:"namespace"`
	Chunks    int            `json:"chunks"`
	Sources   int            `json:"documents"` // distinct (source, ref) documents
	BySource  map[string]int `json:"by_source"` // chunks per source
	Ephemeral int            `json:"ephemeral"` // chunks subject to retention
	// Embedded counts chunks with a vector of the current model; NotEmbedded the rest
	// (all of them when no embedder is configured).
	Embedded    int       `json:"embedded"`
	NotEmbedded int       `json:"not_embedded"`
	EmbedModel  string    `json:"embed_model,omitempty"` // the configured model, "" without an embedder
	Oldest      time.Time `json:"oldest,omitzero"`
	Newest      time.Time `json:"newest,omitzero"`
}

// Stats counts the chunks of ns.
func (m *Memory) Stats(ctx context.Context, ns string) (Stats, error) {
	if err := ValidateNamespace(ns); err != nil {
		return Stats{}, err
	}
	st := Stats{Namespace: ns, BySource: map[string]int{}}
	if m.emb != nil {
		st.EmbedModel = m.emb.Model()
	}
	var oldest, newest sql.NullString
	err := m.db.Read.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT source || '/' || source_ref),
			count(CASE WHEN ephemeral = 1 THEN 1 END),
			count(CASE WHEN embedding IS NOT NULL AND embed_model = ? AND ? <> '' THEN 1 END),
			min(created_at), max(created_at)
		FROM memory_chunks WHERE namespace = ?`, st.EmbedModel, st.EmbedModel, ns).
		Scan(&st.Chunks, &st.Sources, &st.Ephemeral, &st.Embedded, &oldest, &newest)
	if err != nil {
		return Stats{}, fmt.Errorf("memory: stats for %s: %w", ns, err)
	}
	st.NotEmbedded = st.Chunks - st.Embedded
	if st.Oldest, err = store.ParseTime(oldest.String); err != nil {
		return Stats{}, fmt.Errorf("memory: stats for %s: %w", ns, err)
	}
	if st.Newest, err = store.ParseTime(newest.String); err != nil {
		return Stats{}, fmt.Errorf("memory: stats for %s: %w", ns, err)
	}
	rows, err := m.db.Read.QueryContext(ctx, `SELECT source, count(*) FROM memory_chunks WHERE namespace = ? GROUP BY source`, ns)
	if err != nil {
		return Stats{}, fmt.Errorf("memory: stats for %s: %w", ns, err)
	}
	defer rows.Close()
	for rows.Next() {
		var src string
		var n int
		if err := rows.Scan(&src, &n); err != nil {
			return Stats{}, fmt.Errorf("memory: stats for %s: %w", ns, err)
		}
		st.BySource[src] = n
	}
	if err := rows.Err(); err != nil {
		return Stats{}, fmt.Errorf("memory: stats for %s: %w", ns, err)
	}
	return st, nil
}

// FillVectors is Reindex for the nightly cycle: it returns how many chunks of ns
// received a vector, and nothing to do without an embeddings endpoint.
func (m *Memory) FillVectors(ctx context.Context, ns string) (int, error) {
	if m.emb == nil {
		return 0, nil
	}
	res, err := m.Reindex(ctx, ns)
	return res.Embedded, err
}

// ReindexResult is what Reindex did.
type ReindexResult struct {
	Embedded  int // chunks that received a vector
	Remaining int // chunks still without a vector of the current model
}

// Reindex gives every chunk of ns that lacks a vector of the current model one,
// batch by batch. It tries the endpoint even while searches are skipping it after a
// failure, and stops at the first failing batch, returning what it did so far.
func (m *Memory) Reindex(ctx context.Context, ns string) (ReindexResult, error) {
	var res ReindexResult
	if err := ValidateNamespace(ns); err != nil {
		return res, err
	}
	if m.emb == nil {
		return res, ErrNoEmbedder
	}
	model := m.emb.Model()
	lastID := int64(0)
	var embedErr error
	for {
		batch, err := m.missingVectors(ctx, ns, model, lastID, m.opts.EmbedBatch)
		if err != nil {
			return res, err
		}
		if len(batch) == 0 {
			break
		}
		lastID = batch[len(batch)-1].id
		n, err := m.embedBatch(ctx, batch)
		res.Embedded += n
		if err != nil {
			m.embedFailed(err)
			embedErr = err
			break
		}
		m.embedWorked()
	}
	err := m.db.Read.QueryRowContext(ctx, `SELECT count(*) FROM memory_chunks
		WHERE namespace = ? AND (embedding IS NULL OR embed_model <> ?)`, ns, model).Scan(&res.Remaining)
	if err != nil {
		return res, fmt.Errorf("memory: reindex %s: %w", ns, err)
	}
	if embedErr != nil {
		return res, fmt.Errorf("memory: reindex %s: %d chunks still lack vectors: %w", ns, res.Remaining, embedErr)
	}
	return res, nil
}

func (m *Memory) missingVectors(ctx context.Context, ns, model string, after int64, limit int) ([]pending, error) {
	rows, err := m.db.Read.QueryContext(ctx, `SELECT id, content_hash, content FROM memory_chunks
		WHERE namespace = ? AND id > ? AND (embedding IS NULL OR embed_model <> ?) ORDER BY id LIMIT ?`, ns, after, model, limit)
	if err != nil {
		return nil, fmt.Errorf("memory: reindex %s: %w", ns, err)
	}
	defer rows.Close()
	var out []pending
	for rows.Next() {
		var p pending
		if err := rows.Scan(&p.id, &p.hash, &p.content); err != nil {
			return nil, fmt.Errorf("memory: reindex %s: %w", ns, err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("memory: reindex %s: %w", ns, err)
	}
	return out, nil
}

// embedPending embeds freshly stored chunks unless the endpoint is resting after a
// failure. Failures are logged (once per outage) and leave the chunks without vectors.
func (m *Memory) embedPending(ctx context.Context, todo []pending) {
	if m.emb == nil || len(todo) == 0 || !m.embedAvailable() {
		return
	}
	for start := 0; start < len(todo); start += m.opts.EmbedBatch {
		batch := todo[start:min(start+m.opts.EmbedBatch, len(todo))]
		if _, err := m.embedBatch(ctx, batch); err != nil {
			m.embedFailed(err)
			return
		}
		m.embedWorked()
	}
}

// embedBatch embeds and stores one batch; it returns how many vectors were stored.
// A chunk deleted or replaced meanwhile is skipped by the content-hash check.
func (m *Memory) embedBatch(ctx context.Context, batch []pending) (int, error) {
	texts := make([]string, len(batch))
	for i, p := range batch {
		texts[i] = p.content
	}
	vecs, err := m.emb.Embed(ctx, texts)
	if err != nil {
		return 0, err
	}
	if len(vecs) != len(batch) {
		return 0, fmt.Errorf("embeddings: asked for %d vectors, got %d", len(batch), len(vecs))
	}
	model := m.emb.Model()
	stored := 0
	err = m.withTx(ctx, "store vectors", func(tx *sql.Tx) error {
		for _, v := range vecs {
			if len(v) > 0 {
				if err := m.ensureVecIndex(ctx, tx, len(v)); err != nil {
					return err
				}
				break
			}
		}
		stmt, err := tx.PrepareContext(ctx, `UPDATE memory_chunks SET embedding = ?, embed_model = ? WHERE id = ? AND content_hash = ?`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for i, p := range batch {
			v, ok := unitVector(vecs[i])
			if !ok {
				continue
			}
			res, err := stmt.ExecContext(ctx, encodeVector(v), model, p.id, p.hash)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 1 {
				stored++
			}
		}
		return nil
	})
	if err != nil {
		// A database failure is not the endpoint's fault: report it, do not rest it.
		return 0, fmt.Errorf("%w: %w", errStoreVectors, err)
	}
	return stored, nil
}

var errStoreVectors = errors.New("memory: store vectors")

// embedAvailable reports whether the endpoint may be tried now.
func (m *Memory) embedAvailable() bool {
	m.embedMu.Lock()
	defer m.embedMu.Unlock()
	return !m.failing || !m.clock().Before(m.downUntil)
}

// embedFailed records a failure; the first of an outage is logged, the others are
// not, so a dead endpoint does not flood the log.
func (m *Memory) embedFailed(err error) {
	if errors.Is(err, errStoreVectors) {
		m.log.Error("memory: storing vectors failed", "err", err)
		return
	}
	m.embedMu.Lock()
	first := !m.failing
	m.failing = true
	m.downUntil = m.clock().Add(embedRetryAfter)
	m.embedMu.Unlock()
	if first {
		m.log.Warn("embeddings endpoint failed; memory search uses keywords only until it recovers", "err", err)
	}
}

func (m *Memory) embedWorked() {
	m.embedMu.Lock()
	was := m.failing
	m.failing = false
	m.embedMu.Unlock()
	if was {
		m.log.Info("embeddings endpoint recovered; memory search uses vectors again")
	}
}

func (m *Memory) withTx(ctx context.Context, what string, fn func(tx *sql.Tx) error) error {
	tx, err := m.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("memory: %s: begin: %w", what, err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return fmt.Errorf("memory: %s: %w", what, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("memory: %s: commit: %w", what, err)
	}
	return nil
}
