package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

func TestSquaredDistancesMatchTheirDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, dim := range []int{8, 24, 256, 1000, 8192} {
		n := 37
		codes := make([]int8, n*dim)
		q := make([]int8, dim)
		for i := range codes {
			codes[i] = int8(r.IntN(255) - 127)
		}
		for i := range q {
			q[i] = int8(r.IntN(255) - 127)
		}
		// The extremes: a code at -127 everywhere against a query at 127 everywhere
		// is the largest distance there is, and must not overflow.
		for i := range dim {
			codes[i] = -127
			q[i] = 127
		}
		out := make([]int32, n)
		squaredDistances(codes, q, out)
		for j := range n {
			var want int64
			for i := range dim {
				d := int64(codes[j*dim+i]) - int64(q[i])
				want += d * d
			}
			if int64(out[j]) != want {
				t.Fatalf("dim %d, code %d: %d, want %d", dim, j, out[j], want)
			}
		}
	}
}

func TestQuantizeRoundsAndClamps(t *testing.T) {
	in := []float32{0, 1, -1, 0.5, -0.5, 0.004, -0.004, 2, -3, float32(nanValue())}
	want := []int8{0, 127, -127, 64, -64, 1, -1, 127, -127, 0}
	got := make([]int8, len(in))
	quantize(in, got)
	if !slices.Equal(got, want) {
		t.Fatalf("quantize(%v) = %v, want %v", in, got, want)
	}
	enc := make([]int8, len(in))
	quantizeEncoded(encodeVector(in), enc)
	if !slices.Equal(enc, want) {
		t.Fatalf("quantizeEncoded = %v, want %v", enc, want)
	}
}

func nanValue() float64 { var z float64; return z / z }

// cacheFixture is a searching Memory and a writing one on the same database: the
// searcher's vector cache learns of the writer's changes only through the database.
type cacheFixture struct {
	t        *testing.T
	ctx      context.Context
	db       *store.DB
	searcher *Memory
	writer   *Memory
	table    string
	gen      *textGen
}

func newCacheFixture(t *testing.T, budget int64) *cacheFixture {
	t.Helper()
	vecs := newDenseVectors(64)
	searcher, db, _ := newMemory(t, Options{Embedder: &denseEmbedder{model: "dense-a", vecs: vecs}, HalfLife: -1, VectorCacheBytes: budget})
	if db.Dialect() == store.Postgres {
		t.Skip("the vector cache serves the sqlite-vec index: on PostgreSQL every vector is compared")
	}
	writer := New(db, Options{Embedder: &denseEmbedder{model: "dense-a", vecs: vecs}, HalfLife: -1})
	f := &cacheFixture{t: t, ctx: context.Background(), db: db, searcher: searcher, writer: writer, gen: newTextGen(7)}
	// The index is made with the first vectors stored.
	f.table = vecTable("dense-a", 64)
	return f
}

func (f *cacheFixture) index(ns, ref string) {
	f.t.Helper()
	mustIndex(f.t, f.writer, Doc{Namespace: ns, Source: SourceMemoryFile, SourceRef: ref, Text: f.gen.paragraph(3)})
}

func (f *cacheFixture) exec(query string, args ...any) {
	f.t.Helper()
	if _, err := f.db.Write.ExecContext(f.ctx, query, args...); err != nil {
		f.t.Fatalf("%s: %v", query, err)
	}
}

// agrees insists that the vector ranking of text in ns is the one comparing every
// stored vector gives, and not empty.
func (f *cacheFixture) agrees(ns, text, when string) {
	f.t.Helper()
	qv, _ := f.searcher.queryVector(f.ctx, text)
	q := Query{Namespaces: []string{ns}}
	filter, args := q.filter("c.")
	full, err := f.searcher.rankVectors(f.ctx, qv, filter, args, 10, nil, nil)
	if err != nil {
		f.f(when, err)
	}
	ranked, err := f.searcher.semantic(f.ctx, qv, q, filter, args, 10, nil)
	if err != nil {
		f.f(when, err)
	}
	if len(full) == 0 || len(ranked) != len(full) {
		f.t.Fatalf("%s, %q: %d hits ranked, %d comparing every vector", when, text, len(ranked), len(full))
	}
	for i := range full {
		if ranked[i].id != full[i].id {
			f.t.Fatalf("%s, %q: rank %d is %d, %d comparing every vector", when, text, i, ranked[i].id, full[i].id)
		}
	}
}

// check searches ns through the cache and insists that it served and agrees with
// comparing every stored vector, and that it holds exactly the namespace's vectors.
func (f *cacheFixture) check(ns, when string) {
	f.t.Helper()
	for _, text := range []string{"budget Lisbon", "dentist appointment Grace", "train tickets Porto"} {
		qv, _ := f.searcher.queryVector(f.ctx, text)
		_, cached, err := f.searcher.nearestCached(f.ctx, f.table, ns, qv, 10)
		if err != nil || !cached {
			f.t.Fatalf("%s: the cache did not serve %s: %v %v", when, ns, cached, err)
		}
		f.agrees(ns, text, when)
	}
	var want []int64
	rows, err := f.db.Read.QueryContext(f.ctx, `SELECT id FROM memory_chunks WHERE namespace = ? AND embedding IS NOT NULL AND embed_model = 'dense-a' ORDER BY id`, ns)
	if err != nil {
		f.f(when, err)
	}
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		want = append(want, id)
	}
	rows.Close()
	sp := f.searcher.vecs.space(f.table, ns, 64)
	sp.mu.Lock()
	have := slices.Clone(sp.ids)
	for i, id := range sp.ids {
		if sp.pos[id] != i {
			f.t.Errorf("%s: chunk %d is at %d, its index entry says %d", when, id, i, sp.pos[id])
		}
	}
	if len(sp.pos) != len(sp.ids) || len(sp.codes) != len(sp.ids)*sp.dim {
		f.t.Errorf("%s: %d ids, %d index entries, %d code bytes", when, len(sp.ids), len(sp.pos), len(sp.codes))
	}
	sp.mu.Unlock()
	slices.Sort(have)
	if len(want) == 0 {
		f.t.Fatalf("%s: %s has no vectors stored: the check would prove nothing", when, ns)
	}
	if !slices.Equal(have, want) {
		f.t.Fatalf("%s: the cache of %s holds %v, the database %v", when, ns, have, want)
	}
}

func (f *cacheFixture) f(when string, err error) {
	f.t.Helper()
	f.t.Fatalf("%s: %v", when, err)
}

func TestVectorCacheFollowsEveryChange(t *testing.T) {
	f := newCacheFixture(t, 0)
	for i := range 60 {
		f.index("user:alice", fmt.Sprintf("a%d", i))
		if i%3 == 0 {
			f.index("user:bob", fmt.Sprintf("b%d", i))
		}
	}
	f.check("user:alice", "first search")
	f.check("user:bob", "first search")

	for i := range 5 {
		f.index("user:alice", fmt.Sprintf("new%d", i))
	}
	f.check("user:alice", "after new documents")

	if _, err := f.writer.Delete(f.ctx, "user:alice", SourceMemoryFile, "a3"); err != nil {
		t.Fatal(err)
	}
	f.exec(`DELETE FROM memory_chunks WHERE namespace = 'user:alice' AND source_ref IN ('a4', 'a5')`)
	f.check("user:alice", "after deletions")

	// Another process re-embeds a chunk, strips another of its vector, moves a third to
	// bob, and gives one a vector of another model.
	var ids []int64
	rows, _ := f.db.Read.Query(`SELECT id FROM memory_chunks WHERE namespace = 'user:alice' ORDER BY id LIMIT 4`)
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	if len(ids) != 4 {
		t.Fatalf("chunks: %v", ids)
	}
	v, _ := unitVector(newDenseVectors(64).embed("something else entirely, train tickets Porto"))
	f.exec(`UPDATE memory_chunks SET embedding = ? WHERE id = ?`, encodeVector(v), ids[0])
	f.exec(`UPDATE memory_chunks SET embedding = NULL WHERE id = ?`, ids[1])
	f.exec(`UPDATE memory_chunks SET namespace = 'user:bob' WHERE id = ?`, ids[2])
	f.exec(`UPDATE memory_chunks SET embed_model = 'other' WHERE id = ?`, ids[3])
	f.check("user:alice", "after another writer's updates")
	f.check("user:bob", "after a chunk moved in")

	if _, err := f.writer.ApplyRetention(f.ctx, "user:bob", 1); err != nil {
		t.Fatal(err)
	}
	f.check("user:bob", "after retention")
}

func TestVectorCacheLoadsAgainWhenTheLogHasMovedOn(t *testing.T) {
	f := newCacheFixture(t, 0)
	for i := range 30 {
		f.index("user:alice", fmt.Sprintf("a%d", i))
	}
	f.check("user:alice", "first search")
	log := vecLog(f.table)

	// The changes the cache has not seen are trimmed from the log: it must notice the
	// gap rather than miss the deletion.
	f.exec(`DELETE FROM memory_chunks WHERE source_ref = 'a1'`)
	f.index("user:alice", "late")
	var last int64
	f.db.Read.QueryRow(`SELECT max(seq) FROM ` + log).Scan(&last)
	f.exec(`DELETE FROM `+log+` WHERE seq < ?`, last)
	f.check("user:alice", "after the log was trimmed past the cache")

	// The log is made anew (its index dropped and made again by another process).
	f.exec(`DELETE FROM memory_chunks WHERE source_ref = 'a2'`)
	f.exec(`DELETE FROM ` + log)
	f.exec(`DELETE FROM sqlite_sequence WHERE name = ?`, log)
	f.index("user:alice", "after-reset")
	f.check("user:alice", "after the log started over")
}

func TestVectorCacheLogTrimsItself(t *testing.T) {
	f := newCacheFixture(t, 0)
	log := vecLog(f.table)
	for i := range 3 {
		f.index("user:alice", fmt.Sprintf("a%d", i))
	}
	// Jump the sequence to just below a trim point, past vecLogKeep.
	f.exec(`INSERT INTO `+log+` (seq, ns, chunk) VALUES (?, 'user:alice', 1)`, 3*vecLogKeep-1)
	var n int
	f.db.Read.QueryRow(`SELECT count(*) FROM `+log+` WHERE seq <= ?`, 2*vecLogKeep).Scan(&n)
	if n == 0 {
		t.Fatal("the log holds no early entries to trim")
	}
	f.index("user:alice", "trims")
	f.db.Read.QueryRow(`SELECT count(*) FROM `+log+` WHERE seq <= ?`, 2*vecLogKeep).Scan(&n)
	if n != 0 {
		t.Fatalf("%d entries older than the last %d left in the log", n, vecLogKeep)
	}
	f.check("user:alice", "after the trim")
}

func TestVectorCacheStaysWithinItsBudget(t *testing.T) {
	// About 20 vectors of 64 dimensions fit: alice's (≈ 15) fit alone, not with bob's.
	budget := int64(20 * (64 + vecOverhead))
	f := newCacheFixture(t, budget)
	for i := range 14 {
		f.index("user:alice", fmt.Sprintf("a%d", i))
		f.index("user:bob", fmt.Sprintf("b%d", i))
	}
	for i := range 40 {
		f.index("user:carol", fmt.Sprintf("c%d", i))
	}
	size := func(ns string) int {
		return countRows(t, f.db, "namespace = ? AND embedding IS NOT NULL", ns)
	}
	if a, b := size("user:alice"), size("user:bob"); a > 20 || a+b <= 20 {
		t.Fatalf("fixture: alice %d, bob %d vectors", a, b)
	}
	f.check("user:alice", "alice")
	f.check("user:bob", "bob")
	f.searcher.vecs.mu.Lock()
	_, aliceKept := f.searcher.vecs.spaces["user:alice"]
	used := f.searcher.vecs.used
	f.searcher.vecs.mu.Unlock()
	if aliceKept || used > budget {
		t.Fatalf("alice's vectors kept: %v, %d bytes used of %d", aliceKept, used, budget)
	}

	// Carol's namespace alone is larger than the budget: the index answers, exactly.
	qv, _ := f.searcher.queryVector(f.ctx, "budget Lisbon")
	if _, cached, err := f.searcher.nearestCached(f.ctx, f.table, "user:carol", qv, 10); cached || err != nil {
		t.Fatalf("carol's namespace was cached: %v %v", cached, err)
	}
	f.agrees("user:carol", "budget Lisbon", "carol, through sqlite-vec")
	f.searcher.vecs.mu.Lock()
	used = f.searcher.vecs.used
	f.searcher.vecs.mu.Unlock()
	if used > budget {
		t.Fatalf("%d bytes used of %d after a namespace too large for the cache", used, budget)
	}
}

func TestVectorCacheUnderConcurrentSearchesAndWrites(t *testing.T) {
	f := newCacheFixture(t, 0)
	for i := range 20 {
		f.index("user:alice", fmt.Sprintf("a%d", i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 3 {
		wg.Go(func() {
			for i := range 15 {
				if _, err := f.searcher.Search(f.ctx, Query{Namespaces: []string{"user:alice"}, Text: fmt.Sprintf("budget Lisbon %d %d", w, i)}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		g := newTextGen(11)
		for i := range 15 {
			if _, err := f.writer.Index(f.ctx, Doc{Namespace: "user:alice", Source: SourceMemoryFile, SourceRef: fmt.Sprintf("w%d", i), Text: g.paragraph(2)}); err != nil {
				errs <- err
				return
			}
			if i%4 == 0 {
				if _, err := f.writer.Delete(f.ctx, "user:alice", SourceMemoryFile, fmt.Sprintf("a%d", i)); err != nil {
					errs <- err
					return
				}
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	f.check("user:alice", "after concurrent searches and writes")
}

// Chunks indexed once the vector index exists get their vectors: storing a vector is an
// UPDATE, and the index's update trigger once refused the code it made (the value lost
// its int8 subtype through INSERT … SELECT), failing every such UPDATE.
func TestChunksEmbeddedAfterTheIndexExistsKeepTheirVectors(t *testing.T) {
	f := newCacheFixture(t, 0)
	for i := range 5 {
		f.index("user:alice", fmt.Sprintf("a%d", i))
	}
	all := countRows(t, f.db, "namespace = 'user:alice'")
	withVector := countRows(t, f.db, "namespace = 'user:alice' AND embedding IS NOT NULL")
	var inIndex int
	if err := f.db.Read.QueryRow(`SELECT count(*) FROM ` + f.table + ` WHERE ns = 'user:alice'`).Scan(&inIndex); err != nil {
		t.Fatal(err)
	}
	if all == 0 || withVector != all || inIndex != all {
		t.Fatalf("%d chunks, %d with a vector, %d in the index", all, withVector, inIndex)
	}
}

// A chat command is answered inside the transaction that records its message, which
// holds the one write connection: a search must never need it. The first hybrid search
// once made the vector index there and waited for itself forever, and with it every
// write of the sidecar.
func TestSearchInsideAWriteTransaction(t *testing.T) {
	vecs := newDenseVectors(64)
	m, db, _ := newMemory(t, Options{Embedder: &denseEmbedder{model: "dense-a", vecs: vecs}, HalfLife: -1})
	if db.Dialect() == store.Postgres {
		t.Skip("the vector index is sqlite-vec's")
	}
	ctx := context.Background()
	// Vectors stored before any index (as an upgrade leaves them: the index was renamed).
	v, _ := unitVector(vecs.embed("green tea every morning"))
	if _, err := db.Write.Exec(`INSERT INTO memory_chunks (namespace, source, source_ref, content, content_hash, ephemeral, created_at, indexed_at, embedding, embed_model)
		VALUES ('user:alice', 'note', 'tea', 'green tea every morning', 'h1', 1, ?, ?, ?, 'dense-a')`,
		store.FormatTime(testNow), store.FormatTime(testNow), encodeVector(v)); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Write.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	hits, err := m.Search(sctx, Query{Namespaces: []string{"user:alice"}, Text: "tea"})
	if err != nil || len(hits) != 1 {
		t.Fatalf("search inside a write transaction: %v %v", refs(hits), err)
	}
	tx.Rollback()
	// At start the index is made for the vectors stored without one.
	if err := m.PrepareVectorIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if table, ok, err := m.vecIndex(ctx, 64); err != nil || !ok || table != vecTable("dense-a", 64) {
		t.Fatalf("index after PrepareVectorIndex: %s %v %v", table, ok, err)
	}
	if n := countRows(t, db, "1"); n != 1 {
		t.Fatalf("%d chunks", n)
	}
	var inIndex int
	db.Read.QueryRow(`SELECT count(*) FROM ` + vecTable("dense-a", 64)).Scan(&inIndex)
	if inIndex != 1 {
		t.Fatalf("%d vectors in the index made at start, want 1", inIndex)
	}
}
