package memory

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The keyword search on PostgreSQL. SQLite's index is FTS5 with BM25 (search.go); on
// PostgreSQL it is the tsvector column memory_chunks.tsv (the 'simple' configuration:
// lower-cased words, no stemming, as unicode61 does) under a GIN index (migration
// 0012), ranked with ts_rank_cd. The steps are the same: document frequencies to leave
// out words nobody wrote, all the words first, then the selective ones.

// tsQuery renders terms as a tsquery joined by op (" AND " or " OR "); a term long
// enough also matches as a prefix, as in termsExpression.
func tsQuery(terms []string, op string) string { return tsQueryOf(terms, op, true) }

// tsQueryOf is tsQuery, with prefixes only when prefix is set.
func tsQueryOf(terms []string, op string, prefix bool) string {
	join := " & "
	if strings.TrimSpace(op) == "OR" {
		join = " | "
	}
	parts := make([]string, 0, len(terms))
	for _, t := range terms {
		lexeme := "'" + strings.ReplaceAll(strings.ReplaceAll(t, `\`, `\\`), "'", "''") + "'"
		if prefix && utf8.RuneCountInString(t) >= prefixMinRunes {
			parts = append(parts, "("+lexeme+" | "+lexeme+":*)")
		} else {
			parts = append(parts, lexeme)
		}
	}
	return strings.Join(parts, join)
}

// rankTSV is rankFTS on PostgreSQL.
func (m *Memory) rankTSV(ctx context.Context, q Query, terms []string, op string, n int) ([]int64, error) {
	filter, args := q.filter("c.")
	tsq := tsQuery(terms, op)
	// A word found as written ranks above one it only begins (as the exact and the
	// prefix alternatives both match in FTS5): the exact words' rank is added.
	exact := tsQueryOf(terms, " OR ", false)
	args = append([]any{tsq}, args...)
	args = append(args, exact, tsq, n)
	rows, err := m.db.Read.QueryContext(ctx, `SELECT c.id FROM memory_chunks c
		WHERE c.tsv @@ to_tsquery('simple', ?) AND `+filter+`
		ORDER BY ts_rank(c.tsv, to_tsquery('simple', ?)) + ts_rank_cd(c.tsv, to_tsquery('simple', ?)) DESC, c.id DESC LIMIT ?`, args...)
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

// docFreqTSV is docFreq on PostgreSQL: the chunks matching each term, counted through
// the GIN index.
func (m *Memory) docFreqTSV(ctx context.Context, terms []string) (map[string]int, int, error) {
	df := make(map[string]int, len(terms))
	for _, t := range terms {
		var n int
		if err := m.db.Read.QueryRowContext(ctx, `SELECT count(*) FROM memory_chunks WHERE tsv @@ to_tsquery('simple', ?)`,
			tsQuery([]string{t}, " AND ")).Scan(&n); err != nil {
			return nil, 0, err
		}
		df[t] = n
	}
	var total sql.NullInt64
	if err := m.db.Read.QueryRowContext(ctx, `SELECT max(id) FROM memory_chunks`).Scan(&total); err != nil {
		return nil, 0, err
	}
	return df, int(total.Int64), nil
}
