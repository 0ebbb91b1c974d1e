package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/benchfig"

	"github.com/istota/istota/sidecar/internal/store"
)

// benchVectors are the benchmark's word directions, shared by the corpus and the
// queries' embedder so both live in one space.
var benchVectors = newDenseVectors(benchDim)

// benchDim is the fake embedding's dimension in benchmarks: small real models have
// 384 to 768; 256 keeps the 100k-chunk setup quick while still reading 100 MB of
// vectors per hybrid query.
const benchDim = 256

// buildCorpus fills a fresh database with n chunks of generated text, in documents of
// ten chunks, dated over two years, each with a stored fake-embedding vector. Most
// chunks belong to the user searched ("user:bench"); one chunk in four belongs to one
// of 200 other namespaces, as many users share one database. It inserts in one
// transaction, directly, because going through Index would make the 100k setup take
// minutes.
func buildCorpus(b *testing.B, n int) *store.DB {
	b.Helper()
	dense := benchVectors
	db := openDB(b)
	g := newTextGen(uint64(n))
	ctx := context.Background()
	tx, err := db.Write.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT OR IGNORE INTO memory_chunks
		(namespace, source, source_ref, content, content_hash, ephemeral, created_at, indexed_at, embedding, embed_model)
		VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, 'fake-bench')`)
	if err != nil {
		b.Fatal(err)
	}
	start := testNow.AddDate(-2, 0, 0)
	step := testNow.Sub(start) / time.Duration(n)
	for i := range n {
		content := g.paragraph(8)
		v, _ := unitVector(dense.embed(content))
		source := SourceConversation
		if i%3 == 0 {
			source = SourceMemoryFile
		}
		ns := "user:bench"
		if i%4 == 3 {
			ns = fmt.Sprintf("user:other%03d", (i/4)%200)
		}
		created := store.FormatTime(start.Add(time.Duration(i) * step))
		if _, err := stmt.ExecContext(ctx, ns, source, fmt.Sprintf("doc:%d", i/10), content, contentHash(content),
			created, created, encodeVector(v)); err != nil {
			b.Fatal(err)
		}
	}
	stmt.Close()
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	return db
}

// benchQueries are 240 different questions, as people ask them: common and rare words,
// one to four of them, names, places and things, some with words nobody wrote.
func benchQueries() []string {
	g := newTextGen(99)
	var out []string
	objects := make([]string, 0, len(genObjects))
	for _, o := range genObjects {
		objects = append(objects, strings.TrimPrefix(o, "the "))
	}
	for i := 0; len(out) < 240; i++ {
		switch i % 8 {
		case 0:
			out = append(out, g.pick(objects)+" "+g.pick(genPlaces))
		case 1:
			out = append(out, "what did "+g.pick(genNames)+" "+g.pick(genVerbs)+" in "+g.pick(genPlaces))
		case 2:
			out = append(out, g.rare[g.r.IntN(len(g.rare))])
		case 3:
			out = append(out, g.pick(objects)+" "+g.rare[g.zipf.Uint64()])
		case 4:
			out = append(out, "when is "+g.pick(objects))
		case 5:
			out = append(out, g.pick(genNames)+" "+g.pick(genTimes))
		case 6:
			out = append(out, fmt.Sprintf("zorblax%d quintessa%d", i, i)) // nobody wrote these
		case 7:
			out = append(out, g.pick(genNames)+" "+g.pick(objects)+" "+g.pick(genPlaces)+" "+g.pick(genTimes))
		}
	}
	return out
}

// BenchmarkSearch is the latency of one search (limit 10, episodes on) over 100,000
// chunks, by keywords alone and with vectors: p50, p95 and p99 over 240 different
// queries, the goal (p95 ≤ 30 ms) beside them. 10,000 chunks are measured too.
func BenchmarkSearch(b *testing.B) {
	ctx := context.Background()
	clock := func() time.Time { return testNow }
	queries := benchQueries()
	for _, n := range []int{10_000, 100_000} {
		db := buildCorpus(b, n)
		for _, mode := range []struct {
			name string
			emb  Embedder
		}{
			{"keyword", nil},
			{"hybrid", &denseEmbedder{model: "fake-bench", vecs: benchVectors}},
		} {
			m := New(db, Options{Embedder: mode.emb, Clock: clock})
			// Timed apart from the searches, and reported inside the sub-benchmark (a
			// parent benchmark's log is not printed): the vector index, made once at
			// start for vectors stored without it, and the first search of the namespace, which
			// loads its vectors into the vector cache (later ones only apply what changed).
			var once []string
			if mode.emb != nil {
				start := time.Now()
				if err := m.PrepareVectorIndex(ctx); err != nil {
					b.Fatal(err)
				}
				once = append(once, fmt.Sprintf("memory search: vector index made from %d stored vectors (once)", n), time.Since(start).Round(time.Millisecond).String())
				start = time.Now()
				if _, err := m.Search(ctx, Query{Namespaces: []string{"user:bench"}, Text: queries[0], Limit: 10}); err != nil {
					b.Fatal(err)
				}
				once = append(once, fmt.Sprintf("memory search: first search of a namespace of %d vectors, loading them into the vector cache (once per namespace and start)", 3*n/4), time.Since(start).Round(time.Millisecond).String())
			}
			b.Run(fmt.Sprintf("chunks=%d/%s", n, mode.name), func(b *testing.B) {
				var took []time.Duration
				for b.Loop() {
					took = took[:0]
					for _, q := range queries {
						start := time.Now()
						if _, err := m.Search(ctx, Query{Namespaces: []string{"user:bench"}, Text: q, Limit: 10}); err != nil {
							b.Fatal(err)
						}
						took = append(took, time.Since(start))
					}
				}
				for i := 0; i+1 < len(once); i += 2 {
					benchfig.Report(b, once[i], once[i+1], "", nil)
				}
				slices.Sort(took)
				pct := func(p int) time.Duration { return took[(len(took)-1)*p/100] }
				b.ReportMetric(float64(pct(50).Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(pct(95).Microseconds())/1000, "p95-ms")
				b.ReportMetric(float64(pct(99).Microseconds())/1000, "p99-ms")
				name := fmt.Sprintf("memory search, %s, %d chunks: p50 / p95 / p99 over %d queries", mode.name, n, len(queries))
				value := fmt.Sprintf("%.1f / %.1f / %.1f ms", ms(pct(50)), ms(pct(95)), ms(pct(99)))
				if n == 100_000 {
					benchfig.Report(b, name, value, "p95 ≤ 30 ms", benchfig.Met(pct(95) <= 30*time.Millisecond))
				} else {
					benchfig.Report(b, name, value, "", nil)
				}
			})
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkIndex measures Index on documents of about five chunks, reporting chunks
// per second, without vectors and with an in-process fake embedder (the endpoint's own
// latency is not the sidecar's).
func BenchmarkIndex(b *testing.B) {
	ctx := context.Background()
	for _, mode := range []struct {
		name string
		emb  Embedder
	}{
		{"bm25", nil},
		{"with-vectors", &funcEmbedder{model: "fake-bench", dim: benchDim}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			m := New(openDB(b), Options{Embedder: mode.emb})
			g := newTextGen(42)
			docs := make([]string, b.N)
			for i := range docs {
				docs[i] = g.document(6)
			}
			chunks := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				n, err := m.Index(ctx, Doc{Namespace: "user:bench", Source: SourceConversation,
					SourceRef: fmt.Sprintf("task:%d", i), Text: docs[i], Ephemeral: true})
				if err != nil {
					b.Fatal(err)
				}
				chunks += n
			}
			b.ReportMetric(float64(chunks)/b.Elapsed().Seconds(), "chunks/s")
			b.ReportMetric(float64(chunks)/float64(b.N), "chunks/doc")
		})
	}
}
