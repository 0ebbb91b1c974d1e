package memory

import (
	"container/heap"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"time"
)

// The vector cache. sqlite-vec's int8 search (vecindex.go) spends nearly all of its time
// in its distance function, which adds in float one dimension after another: 16 ms for
// 75,000 vectors of 256 dimensions here, more than half of a 30 ms search. So the
// quantised vectors of the namespaces searched lately are also kept in memory, one int8
// code per dimension in one array per namespace, and compared by a vectorised C loop
// (veckernel.go): about 2 ms for the same 75,000. The nearest by code are then ranked
// exactly by the stored float vectors, as with the index.
//
// The database stays the truth. Triggers on memory_chunks append every chunk whose
// vector may have changed (inserted, deleted, re-embedded, moved to another namespace)
// to a change log beside the index table, whoever writes: this sidecar, another Memory
// or another process. Before each search a namespace's cache applies the log entries
// after the last one it applied, reading those chunks again, in one read transaction
// with the log so that both are one snapshot. The log keeps the last vecLogKeep changes;
// a cache further behind than that, or one that sees a log made anew, loads its
// namespace whole again.
//
// The cache is bounded by Options.VectorCacheBytes; the namespaces searched longest ago
// leave first. A namespace larger than the whole budget is not cached: its searches go
// to sqlite-vec as before.

const (
	// DefaultVectorCacheBytes bounds the vector cache: 256 MiB holds a million vectors
	// of 256 dimensions, or 170,000 of 1,536.
	DefaultVectorCacheBytes = 256 << 20
	// vecLogKeep is how many changes the log keeps; vecLogTrimEvery is how often the
	// log is trimmed back to that, in changes.
	vecLogKeep      = 100_000
	vecLogTrimEvery = 1000
	// vecOverhead is what a cached vector costs besides its code: its id, its place in
	// the id map and its distance during a search.
	vecOverhead = 48
	// vecTooBigRecheck is how long a namespace found larger than the budget is left to
	// sqlite-vec before its size is looked at again.
	vecTooBigRecheck = 10 * time.Minute
	// vecChangeBatch bounds the ids read back in one query when applying changes.
	vecChangeBatch = 500
	// cacheCandidates is how many nearest by code are ranked exactly per wanted
	// result: at few dimensions the rounding of the codes can swap the last wanted
	// result with the next ones. Selecting them costs next to nothing here (unlike in
	// sqlite-vec, whose selection is k passes over each chunk of vectors); each is read
	// back from the database to be ranked, so not more than needed.
	cacheCandidates = 2
)

// vecCache holds the vector spaces of one index table.
type vecCache struct {
	budget int64

	mu     sync.Mutex
	table  string
	spaces map[string]*vecSpace
	used   int64
	tick   uint64
}

// vecSpace is one namespace's codes. Its fields other than those marked are guarded by
// mu, which is held while the space is brought up to date and searched.
type vecSpace struct {
	mu       sync.Mutex
	ns       string
	dim      int
	loaded   bool
	seq      int64 // the last change applied
	ids      []int64
	codes    []int8 // len(ids) × dim
	pos      map[int64]int
	dist     []int32 // scratch for a search
	tooBigAt time.Time

	// Guarded by vecCache.mu.
	lastUse uint64
	bytes   int64
}

func newVecCache(budget int64) *vecCache {
	return &vecCache{budget: budget, spaces: map[string]*vecSpace{}}
}

// space returns the space of ns in table, made empty the first time; the spaces of
// another table (a model that was replaced) are dropped.
func (c *vecCache) space(table, ns string, dim int) *vecSpace {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.table != table {
		c.table, c.spaces, c.used = table, map[string]*vecSpace{}, 0
	}
	c.tick++
	sp := c.spaces[ns]
	if sp == nil || sp.dim != dim {
		sp = &vecSpace{ns: ns, dim: dim, pos: map[int64]int{}}
		c.spaces[ns] = sp
	}
	sp.lastUse = c.tick
	return sp
}

// fit records sp's size and evicts the spaces used longest ago until the cache is
// within its budget again. It reports false, dropping sp, when sp alone is larger than
// the budget.
func (c *vecCache) fit(sp *vecSpace, bytes int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.spaces[sp.ns] != sp {
		return bytes <= c.budget // evicted meanwhile: this search may still use it
	}
	if bytes > c.budget {
		c.used -= sp.bytes
		delete(c.spaces, sp.ns)
		return false
	}
	c.used += bytes - sp.bytes
	sp.bytes = bytes
	for c.used > c.budget {
		var oldest *vecSpace
		for _, o := range c.spaces {
			if o != sp && (oldest == nil || o.lastUse < oldest.lastUse) {
				oldest = o
			}
		}
		if oldest == nil {
			break
		}
		c.used -= oldest.bytes
		delete(c.spaces, oldest.ns)
	}
	return true
}

// vecLog is the change log table of index table.
func vecLog(table string) string { return table + "_log" }

// nearestCached returns the ids of the k chunks of ns nearest to qv by their codes,
// bringing the namespace's cache up to date first. ok is false when the cache does not
// serve ns (it is off, or ns is larger than its budget).
func (m *Memory) nearestCached(ctx context.Context, table, ns string, qv []float32, k int) ([]int64, bool, error) {
	c := m.vecs
	if c.budget <= 0 {
		return nil, false, nil
	}
	sp := c.space(table, ns, len(qv))
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if !sp.tooBigAt.IsZero() && m.clock().Sub(sp.tooBigAt) < vecTooBigRecheck {
		return nil, false, nil
	}
	fits, err := m.refreshSpace(ctx, table, sp)
	if err != nil {
		return nil, false, fmt.Errorf("memory: vector cache of %s: %w", ns, err)
	}
	if !fits || !c.fit(sp, int64(len(sp.ids))*int64(sp.dim+vecOverhead)) {
		sp.tooBigAt = m.clock()
		sp.loaded, sp.ids, sp.codes, sp.pos, sp.dist = false, nil, nil, map[int64]int{}, nil
		return nil, false, nil
	}
	sp.tooBigAt = time.Time{}
	return sp.nearest(qv, k), true, nil
}

// refreshSpace applies the changes logged since sp was last brought up to date, or
// loads ns whole when sp is new or too far behind. fits is false when a whole load
// would exceed the cache's budget; nothing is loaded then.
func (m *Memory) refreshSpace(ctx context.Context, table string, sp *vecSpace) (fits bool, err error) {
	defer func() {
		if err != nil {
			sp.loaded = false // what was applied before the failure is not a known state
		}
	}()
	tx, err := m.db.Read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var first, last sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT min(seq), max(seq) FROM `+vecLog(table)).Scan(&first, &last); err != nil {
		return false, fmt.Errorf("read the change log: %w", err)
	}
	full := !sp.loaded || last.Int64 < sp.seq || (first.Valid && first.Int64 > sp.seq+1)
	var changed []int64
	if !full && last.Int64 > sp.seq {
		if changed, err = changedChunks(ctx, tx, table, sp.ns, sp.seq); err != nil {
			return false, err
		}
		// Reading back a large part of the namespace one id list at a time costs more
		// than reading it whole.
		full = len(changed) > max(2*vecChangeBatch, len(sp.ids)/4)
	}
	model, width := m.emb.Model(), 4*sp.dim
	if full {
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM memory_chunks WHERE namespace = ?`, sp.ns).Scan(&n); err != nil {
			return false, fmt.Errorf("count the chunks: %w", err)
		}
		if n*int64(sp.dim+vecOverhead) > m.vecs.budget {
			return false, nil
		}
		rows, err := tx.QueryContext(ctx, `SELECT id, embedding FROM memory_chunks
			WHERE namespace = ? AND embed_model = ? AND embedding IS NOT NULL AND length(embedding) = ?`, sp.ns, model, width)
		if err != nil {
			return false, fmt.Errorf("load the vectors: %w", err)
		}
		// Sized once: growing 20 MB by appends copies it over and over, and fresh
		// memory costs a page fault per 4 KiB (1.3 s instead of 0.2 s for 75,000 here).
		sp.ids, sp.codes, sp.pos = make([]int64, 0, n), make([]int8, 0, n*int64(sp.dim)), make(map[int64]int, n)
		if err := sp.addRows(rows); err != nil {
			return false, fmt.Errorf("load the vectors: %w", err)
		}
	} else {
		for len(changed) > 0 {
			batch := changed[:min(len(changed), vecChangeBatch)]
			changed = changed[len(batch):]
			args := []any{sp.ns, model, width}
			for _, id := range batch {
				sp.remove(id)
				args = append(args, id)
			}
			rows, err := tx.QueryContext(ctx, `SELECT id, embedding FROM memory_chunks
				WHERE namespace = ? AND embed_model = ? AND embedding IS NOT NULL AND length(embedding) = ?
				AND id IN (`+placeholders(len(batch))+`)`, args...)
			if err != nil {
				return false, fmt.Errorf("read the changed vectors: %w", err)
			}
			if err := sp.addRows(rows); err != nil {
				return false, fmt.Errorf("read the changed vectors: %w", err)
			}
		}
	}
	sp.seq, sp.loaded = last.Int64, true
	return true, nil
}

// changedChunks returns the chunks of ns logged as changed after seq, each once.
func changedChunks(ctx context.Context, tx *sql.Tx, table, ns string, seq int64) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, `SELECT DISTINCT chunk FROM `+vecLog(table)+` WHERE ns = ? AND seq > ?`, ns, seq)
	if err != nil {
		return nil, fmt.Errorf("read the change log: %w", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("read the change log: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the change log: %w", err)
	}
	return ids, nil
}

// addRows adds the (id, embedding) rows to sp and closes them.
func (sp *vecSpace) addRows(rows *sql.Rows) error {
	defer rows.Close()
	for rows.Next() {
		var id int64
		var blob sql.RawBytes
		if err := rows.Scan(&id, &blob); err != nil {
			return err
		}
		if len(blob) != 4*sp.dim {
			continue
		}
		sp.remove(id)
		sp.pos[id] = len(sp.ids)
		sp.ids = append(sp.ids, id)
		n := len(sp.codes)
		sp.codes = slices.Grow(sp.codes, sp.dim)[:n+sp.dim] // every byte is written next
		quantizeEncoded(blob, sp.codes[n:])
	}
	return rows.Err()
}

// remove drops id from sp, if it is there, moving the last vector into its place.
func (sp *vecSpace) remove(id int64) {
	i, ok := sp.pos[id]
	if !ok {
		return
	}
	last := len(sp.ids) - 1
	if i != last {
		sp.ids[i] = sp.ids[last]
		copy(sp.codes[i*sp.dim:(i+1)*sp.dim], sp.codes[last*sp.dim:])
		sp.pos[sp.ids[i]] = i
	}
	sp.ids = sp.ids[:last]
	sp.codes = sp.codes[:last*sp.dim]
	delete(sp.pos, id)
}

// nearest returns the ids of the k vectors of sp nearest to qv, nearest first; equally
// near ones, the newer (larger id) first.
func (sp *vecSpace) nearest(qv []float32, k int) []int64 {
	if len(sp.ids) == 0 || k <= 0 {
		return nil
	}
	q := make([]int8, sp.dim)
	quantize(qv, q)
	if cap(sp.dist) < len(sp.ids) {
		sp.dist = make([]int32, len(sp.ids), len(sp.ids)+len(sp.ids)/8)
	}
	dist := sp.dist[:len(sp.ids)]
	squaredDistances(sp.codes, q, dist)
	h := &farthest{dist: dist, ids: sp.ids}
	for i := range dist {
		if len(h.at) < k {
			heap.Push(h, i)
		} else if h.nearer(i, h.at[0]) {
			h.at[0] = i
			heap.Fix(h, 0)
		}
	}
	out := make([]int64, len(h.at))
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = sp.ids[heap.Pop(h).(int)]
	}
	return out
}

// farthest is a heap of vector positions with the farthest from the query on top.
type farthest struct {
	dist []int32
	ids  []int64
	at   []int
}

func (h *farthest) nearer(i, j int) bool {
	if h.dist[i] != h.dist[j] {
		return h.dist[i] < h.dist[j]
	}
	return h.ids[i] > h.ids[j]
}
func (h *farthest) Len() int           { return len(h.at) }
func (h *farthest) Less(a, b int) bool { return h.nearer(h.at[b], h.at[a]) }
func (h *farthest) Swap(a, b int)      { h.at[a], h.at[b] = h.at[b], h.at[a] }
func (h *farthest) Push(x any)         { h.at = append(h.at, x.(int)) }
func (h *farthest) Pop() any {
	x := h.at[len(h.at)-1]
	h.at = h.at[:len(h.at)-1]
	return x
}
