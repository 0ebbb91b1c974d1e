package workspace

import (
	"maps"
	"sync"
)

// recordCache keeps in memory the sync records (sync_state, sync_local, sync_remote) of
// this Workspace's mirror for the trees synced last. Every sync of a tree starts by
// reading all three; for a user with 10,000 files that was 30,000 rows, about 50 ms, on
// every task's pull and again after it.
//
// The records are this mirror's alone (Options.Mirror): only this Workspace writes them,
// and only while it holds the tree's lock, so what it read or wrote last is what the
// database holds. Each write reaches the database first and the cache after; while a
// write's outcome is unknown (it failed, or its transaction is open) that kind of the
// tree's records is dropped from the cache, so the next sync reads the database again.
//
// The cache is bounded by the number of records it holds; the trees used longest ago
// leave first.
type recordCache struct {
	mu    sync.Mutex
	trees map[string]*treeRecords
	held  int // records held, across trees
	max   int
	tick  uint64
}

// treeRecords are one tree's records; a nil map is not cached.
type treeRecords struct {
	state  map[string]agreed
	hashes map[string]localStat
	index  map[string]indexEntry
	used   uint64
}

func (t *treeRecords) size() int { return len(t.state) + len(t.hashes) + len(t.index) }

// defaultCachedRecords bounds the cache: about 50 MB at a few hundred bytes a record,
// enough for the trees of the users active at once on a busy host.
const defaultCachedRecords = 200_000

func newRecordCache(max int) *recordCache {
	return &recordCache{trees: map[string]*treeRecords{}, max: max}
}

// tree returns key's entry, made if needed, marked as just used. Callers hold c.mu.
func (c *recordCache) tree(key string) *treeRecords {
	t, ok := c.trees[key]
	if !ok {
		t = &treeRecords{}
		c.trees[key] = t
	}
	c.tick++
	t.used = c.tick
	return t
}

// resized accounts for a change of t's size from before and evicts the trees used
// longest ago (never keep, the one just written) while the cache holds too much.
// Callers hold c.mu.
func (c *recordCache) resized(keep string, before int) {
	c.held += c.trees[keep].size() - before
	for c.held > c.max && len(c.trees) > 1 {
		var oldest string
		var at uint64
		for k, t := range c.trees {
			if k != keep && (oldest == "" || t.used < at) {
				oldest, at = k, t.used
			}
		}
		c.held -= c.trees[oldest].size()
		delete(c.trees, oldest)
	}
	if c.held > c.max { // one tree larger than the whole cache: not kept
		c.held -= c.trees[keep].size()
		delete(c.trees, keep)
	}
}

// recordKind is one of a tree's three kinds of records.
type recordKind int

const (
	stateRecords recordKind = iota
	hashRecords
	indexRecords
)

// forget drops one kind of key's records, before or after a write whose outcome is
// unknown: the next read takes them from the database.
func (c *recordCache) forget(key string, kind recordKind) {
	c.change(key, false, func(t *treeRecords) {
		switch kind {
		case stateRecords:
			t.state = nil
		case hashRecords:
			t.hashes = nil
		case indexRecords:
			t.index = nil
		}
	})
}

// get finds key's tree and lets read take what it wants from it under the lock; read
// reports whether the records it wanted are cached, and the tree is marked as used if so.
func (c *recordCache) get(key string, read func(*treeRecords) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.trees[key]
	if !ok || !read(t) {
		return false
	}
	c.tick++
	t.used = c.tick
	return true
}

// change lets write change key's tree (made if missing and create is set) under the
// lock, and accounts for its new size.
func (c *recordCache) change(key string, create bool, write func(*treeRecords)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.trees[key]; !ok && !create {
		return
	}
	t := c.tree(key)
	before := t.size()
	write(t)
	c.resized(key, before)
}

// state returns a copy of key's agreed records (the caller may keep it while the
// cache's own copy changes under later writes).
func (c *recordCache) state(key string) (m map[string]agreed, ok bool) {
	ok = c.get(key, func(t *treeRecords) bool {
		if t.state != nil {
			m = maps.Clone(t.state)
		}
		return t.state != nil
	})
	return m, ok
}

func (c *recordCache) putState(key string, m map[string]agreed) {
	m = maps.Clone(m)
	if m == nil {
		m = map[string]agreed{}
	}
	c.change(key, true, func(t *treeRecords) { t.state = m })
}

// setState and dropState change one path's agreement in a tree whose records are
// cached.
func (c *recordCache) setState(key, p string, a agreed) {
	c.change(key, false, func(t *treeRecords) {
		if t.state != nil {
			t.state[p] = a
		}
	})
}

func (c *recordCache) dropState(key, p string) {
	c.change(key, false, func(t *treeRecords) { delete(t.state, p) })
}

// The hashes and the index are replaced whole and never changed in place, so the maps
// are shared with the caller, who must not change them either.
func (c *recordCache) hashes(key string) (m map[string]localStat, ok bool) {
	ok = c.get(key, func(t *treeRecords) bool { m = t.hashes; return m != nil })
	return m, ok
}

func (c *recordCache) putHashes(key string, m map[string]localStat) {
	if m == nil {
		m = map[string]localStat{}
	}
	c.change(key, true, func(t *treeRecords) { t.hashes = m })
}

func (c *recordCache) index(key string) (m map[string]indexEntry, ok bool) {
	ok = c.get(key, func(t *treeRecords) bool { m = t.index; return m != nil })
	return m, ok
}

func (c *recordCache) putIndex(key string, m map[string]indexEntry) {
	if m == nil {
		m = map[string]indexEntry{}
	}
	c.change(key, true, func(t *treeRecords) { t.index = m })
}
