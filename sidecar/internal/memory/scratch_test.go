package memory

import (
	"context"
	"database/sql"
	"testing"
)

func BenchmarkScratch(b *testing.B) {
	db := buildCorpus(b, 100_000)
	ctx := context.Background()
	expr := matchExpression(queryTerms("Lisbon budget"))
	run := func(name, q string, args ...any) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				rows, err := db.Read.QueryContext(ctx, q, args...)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for rows.Next() {
					var id int64
					var raw sql.RawBytes
					rows.Scan(&id, &raw)
					n++
				}
				rows.Close()
			}
		})
	}
	run("join", `SELECT c.id, c.content FROM memory_fts JOIN memory_chunks c ON c.id = memory_fts.rowid WHERE memory_fts MATCH ? AND c.namespace IN ('user:bench') ORDER BY bm25(memory_fts), c.id DESC LIMIT 50`, expr)
	run("in-subquery", `SELECT rowid, '' FROM memory_fts WHERE memory_fts MATCH ? AND rowid IN (SELECT id FROM memory_chunks WHERE namespace IN ('user:bench')) ORDER BY bm25(memory_fts) LIMIT 50`, expr)
	run("in-subquery-plus", `SELECT rowid, '' FROM memory_fts WHERE memory_fts MATCH ? AND +rowid IN (SELECT id FROM memory_chunks WHERE namespace IN ('user:bench')) ORDER BY bm25(memory_fts) LIMIT 50`, expr)
	run("in-subquery-plus-rank", `SELECT rowid, '' FROM memory_fts WHERE memory_fts MATCH ? AND +rowid IN (SELECT id FROM memory_chunks WHERE namespace IN ('user:bench')) ORDER BY rank LIMIT 50`, expr)
	run("cte", `WITH m AS (SELECT rowid AS id, bm25(memory_fts) AS score FROM memory_fts WHERE memory_fts MATCH ?) SELECT c.id, c.content FROM m JOIN memory_chunks c ON c.id = m.id WHERE c.namespace IN ('user:bench') ORDER BY m.score LIMIT 50`, expr)
}
