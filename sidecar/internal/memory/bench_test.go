package memory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

// benchDim is the fake embedding's dimension in benchmarks: small real models have
// 384 to 768; 256 keeps the 100k-chunk setup quick while still reading 100 MB of
// vectors per hybrid query.
const benchDim = 256

// buildCorpus fills a fresh database with n chunks of generated text in one
// namespace, in documents of ten chunks, dated over two years, each with a stored
// fake-embedding vector. It inserts in one transaction, directly, because going through
// Index would make the 100k setup take minutes.
func buildCorpus(b *testing.B, n int) *store.DB {
	b.Helper()
	db := openDB(b)
	g := newTextGen(uint64(n))
	ctx := context.Background()
	tx, err := db.Write.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT OR IGNORE INTO memory_chunks
		(namespace, source, source_ref, content, content_hash, ephemeral, created_at, indexed_at, embedding, embed_model)
		VALUES ('user:bench', ?, ?, ?, ?, 1, ?, ?, ?, 'fake-bench')`)
	if err != nil {
		b.Fatal(err)
	}
	start := testNow.AddDate(-2, 0, 0)
	step := testNow.Sub(start) / time.Duration(n)
	for i := range n {
		content := g.paragraph(8)
		v, _ := unitVector(fakeEmbedding(content, benchDim))
		source := SourceConversation
		if i%3 == 0 {
			source = SourceMemoryFile
		}
		created := store.FormatTime(start.Add(time.Duration(i) * step))
		if _, err := stmt.ExecContext(ctx, source, fmt.Sprintf("doc:%d", i/10), content, contentHash(content),
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

// benchQueries mix common and rare words, as people ask.
func benchQueries() []string {
	rare := newTextGen(0).rare
	return []string{
		"Lisbon budget",
		"when is the dentist appointment",
		"what did Alice book in Berlin",
		"quarterly report Vienna",
		"train tickets Porto next week",
		"server migration " + rare[3],
		rare[40],
		"birthday dinner with Grace",
		"insurance claim status " + rare[700],
		"garden plan tomatoes",
	}
}

// BenchmarkSearch measures one search (limit 10, episode windows on) over 10k and
// 100k chunks of one user, by keywords alone and with vectors.
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
			{"bm25", nil},
			{"hybrid", &funcEmbedder{model: "fake-bench", dim: benchDim}},
		} {
			m := New(db, Options{Embedder: mode.emb, Clock: clock})
			b.Run(fmt.Sprintf("chunks=%d/%s", n, mode.name), func(b *testing.B) {
				i := 0
				for b.Loop() {
					hits, err := m.Search(ctx, Query{Namespaces: []string{"user:bench"}, Text: queries[i%len(queries)], Limit: 10})
					if err != nil {
						b.Fatal(err)
					}
					if len(hits) == 0 {
						b.Fatalf("no hits for %q", queries[i%len(queries)])
					}
					i++
				}
			})
		}
	}
}

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
