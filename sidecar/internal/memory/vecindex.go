package memory

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/istota/istota/sidecar/internal/store"
)

// The vector index. Comparing the query with every stored vector in Go reads all of
// them through the driver row by row (100 MB for 100,000 chunks of 256 dimensions) and
// took a quarter of a second, so the vectors are also kept in a sqlite-vec index
// (github.com/asg017/sqlite-vec, compiled into the binary): one byte per dimension
// (int8 quantisation of the unit vectors), partitioned by namespace, searched in C inside
// one query. Its nearest candidates are then ranked exactly by the cosine similarity of
// the stored float vectors. One bit per dimension was tried first: four times faster,
// but it found only half of the true ten nearest even among 20× candidates, while int8
// finds all of them among as many candidates as the search wants. sqlite-vec
// was chosen over an in-memory graph (HNSW) because the index lives in the same
// database and transaction as the chunks — kept current by triggers, nothing to rebuild
// or persist at start, deletions by retention included — and the namespace partition
// means a search only ever looks at the vectors of the namespaces it names.
//
// The namespaces searched lately are also held in memory (veccache.go), where the same
// search takes an eighth of the time; sqlite-vec answers for the others.
//
// A table holds one model's vectors (their dimension is fixed); it is made in the
// transaction that stores the model's first vectors, or at start for vectors stored
// without one (never by a search: see vecIndex), filled from the stored vectors, and
// dropped with its triggers when another model's index is made.

// vecCandidates is how many nearest neighbours by the quantised vectors are ranked
// exactly, per wanted result; int8 keeps the true order so closely that one is enough
// (measured: all of the true ten nearest among the first 50, at 100,000 chunks).
const vecCandidates = 1

// vecTable is the index table's name for model at dim dimensions.
func vecTable(model string, dim int) string {
	// v2: the index got its change log (veccache.go), and its update trigger no longer
	// fails; an index made before is made again under the new name.
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00v2", model, dim)))
	return "memory_vec_" + hex.EncodeToString(sum[:6])
}

// vecIndexable reports whether vectors of dim dimensions of the configured model can
// have an index, and its table's name.
func (m *Memory) vecIndexable(dim int) (string, bool) {
	if m.emb == nil || dim <= 0 || dim%8 != 0 || dim > 8192 {
		return "", false
	}
	if m.db.Dialect() == store.Postgres {
		// sqlite-vec is an SQLite extension and pgvector is not in Debian's PostgreSQL:
		// on PostgreSQL every stored vector of the namespaces is compared (rankVectors).
		return "", false
	}
	return vecTable(m.emb.Model(), dim), true
}

// vecIndex returns the index table for the configured model at dim dimensions. ok is
// false when there is none (yet): the search then compares every vector. A search
// never makes the index: it may run inside a caller's write transaction (a chat
// command is answered in the transaction that records the message), and the one
// write connection would then wait for itself. The index is made where vectors are
// stored (ensureVecIndex) and at start (PrepareVectorIndex).
func (m *Memory) vecIndex(ctx context.Context, dim int) (string, bool, error) {
	table, ok := m.vecIndexable(dim)
	if !ok {
		return "", false, nil
	}
	m.vecMu.Lock()
	defer m.vecMu.Unlock()
	if m.vecReady == table {
		return table, true, nil
	}
	var exists int
	if err := m.db.Read.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&exists); err != nil {
		return "", false, fmt.Errorf("memory: vector index: %w", err)
	}
	if exists == 0 {
		return "", false, nil
	}
	m.vecReady = table
	return table, true, nil
}

// ensureVecIndex makes the index for vectors of dim dimensions in tx, the transaction
// about to store such vectors, unless it exists. Made there, it holds every vector
// stored before and its triggers take the ones being stored.
func (m *Memory) ensureVecIndex(ctx context.Context, tx *sql.Tx, dim int) error {
	table, ok := m.vecIndexable(dim)
	if !ok {
		return nil
	}
	m.vecMu.Lock()
	ready := m.vecReady == table
	m.vecMu.Unlock()
	if ready {
		return nil
	}
	var exists int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&exists); err != nil {
		return fmt.Errorf("vector index: %w", err)
	}
	if exists > 0 {
		return nil
	}
	// In a savepoint: an index that fails to be made is not half made, and the vectors
	// are stored all the same (searches then compare every vector).
	if _, err := tx.ExecContext(ctx, `SAVEPOINT vec_index`); err != nil {
		return fmt.Errorf("vector index: %w", err)
	}
	model := m.emb.Model()
	if err := makeVecIndex(ctx, tx, table, model, dim); err != nil {
		m.log.Warn("could not make the vector index of the memory search; searches compare every vector", "model", model, "dimensions", dim, "err", err)
		if _, rerr := tx.ExecContext(ctx, `ROLLBACK TO vec_index`); rerr != nil {
			return fmt.Errorf("vector index: %w (undoing it: %w)", err, rerr)
		}
	} else {
		m.log.Info("made the vector index of the memory search", "model", model, "dimensions", dim)
	}
	if _, err := tx.ExecContext(ctx, `RELEASE vec_index`); err != nil {
		return fmt.Errorf("vector index: %w", err)
	}
	return nil
}

// PrepareVectorIndex makes the index for the vectors already stored by the configured
// model, if they have none (an upgrade renamed it, or the model changed back): call it
// at start, outside any transaction. It takes a few seconds per 100,000 vectors, once.
func (m *Memory) PrepareVectorIndex(ctx context.Context) error {
	if m.emb == nil || m.db.Dialect() == store.Postgres {
		return nil
	}
	var width sql.NullInt64
	err := m.db.Read.QueryRowContext(ctx, `SELECT length(embedding) FROM memory_chunks
		WHERE embed_model = ? AND embedding IS NOT NULL LIMIT 1`, m.emb.Model()).Scan(&width)
	if errors.Is(err, sql.ErrNoRows) || !width.Valid {
		return nil // made with the first vectors stored
	}
	if err != nil {
		return fmt.Errorf("memory: vector index: %w", err)
	}
	dim := int(width.Int64 / 4)
	if _, ok, err := m.vecIndex(ctx, dim); err != nil || ok {
		return err // there already: no write transaction at every start
	}
	return m.withTx(ctx, "make the vector index", func(tx *sql.Tx) error {
		return m.ensureVecIndex(ctx, tx, dim)
	})
}

// makeVecIndex drops the indexes of other models, creates table with its triggers and
// fills it with the vectors already stored.
func makeVecIndex(ctx context.Context, tx *sql.Tx, table, model string, dim int) error {
	rows, err := tx.QueryContext(ctx, `SELECT type, name FROM sqlite_master WHERE name LIKE 'memory\_vec\_%' ESCAPE '\' AND type IN ('table', 'trigger')`)
	if err != nil {
		return err
	}
	var drops []string
	for rows.Next() {
		var typ, name string
		if err := rows.Scan(&typ, &name); err != nil {
			rows.Close()
			return err
		}
		if typ == "trigger" {
			drops = append([]string{"DROP TRIGGER " + name}, drops...)
		} else if strings.Count(name, "_") == 2 || strings.HasSuffix(name, "_log") {
			// The index itself, whose drop drops its shadow tables (memory_vec_…_*), and
			// its change log.
			drops = append(drops, "DROP TABLE "+name)
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, d := range drops {
		if _, err := tx.ExecContext(ctx, d); err != nil {
			return fmt.Errorf("%s: %w", d, err)
		}
	}
	// The model name is a value in the triggers' bodies (DDL takes no parameters).
	lit := "'" + strings.ReplaceAll(model, "'", "''") + "'"
	width := fmt.Sprint(4 * dim)
	when := `new.embedding IS NOT NULL AND new.embed_model = ` + lit + ` AND length(new.embedding) = ` + width
	// The change log (veccache.go) names every chunk whose vector may have changed; it
	// trims itself to its last vecLogKeep entries every vecLogTrimEvery.
	log := vecLog(table)
	for _, stmt := range []string{
		fmt.Sprintf(`CREATE VIRTUAL TABLE %s USING vec0(ns text partition key, embedding int8[%d])`, table, dim),
		`CREATE TABLE ` + log + ` (seq INTEGER PRIMARY KEY AUTOINCREMENT, ns TEXT NOT NULL, chunk INTEGER NOT NULL)`,
		`CREATE INDEX ` + log + `_ns ON ` + log + ` (ns, seq)`,
		fmt.Sprintf(`CREATE TRIGGER %[1]s_trim AFTER INSERT ON %[1]s WHEN new.seq %% %[2]d = 0 BEGIN
			DELETE FROM %[1]s WHERE seq <= new.seq - %[3]d;
		END`, log, vecLogTrimEvery, vecLogKeep),
		`CREATE TRIGGER ` + table + `_ai AFTER INSERT ON memory_chunks WHEN ` + when + ` BEGIN
			INSERT INTO ` + table + ` (rowid, ns, embedding) VALUES (new.id, new.namespace, vec_quantize_int8(new.embedding, 'unit'));
			INSERT INTO ` + log + ` (ns, chunk) VALUES (new.namespace, new.id);
		END`,
		// An update is two triggers whose conditions exclude each other, not one with an
		// INSERT … SELECT … WHERE: a value passed through SELECT loses its SQL subtype,
		// and sqlite-vec then takes the int8 code for a float vector and refuses it,
		// failing the UPDATE that stores a chunk's vector. The condition is never
		// NULL (embed_model is NOT NULL), so exactly one of the two fires.
		`CREATE TRIGGER ` + table + `_au AFTER UPDATE OF embedding, embed_model, namespace ON memory_chunks WHEN ` + when + ` BEGIN
			DELETE FROM ` + table + ` WHERE rowid = old.id;
			INSERT INTO ` + table + ` (rowid, ns, embedding) VALUES (new.id, new.namespace, vec_quantize_int8(new.embedding, 'unit'));
			INSERT INTO ` + log + ` (ns, chunk) VALUES (old.namespace, old.id);
			INSERT INTO ` + log + ` (ns, chunk) SELECT new.namespace, new.id WHERE new.namespace <> old.namespace;
		END`,
		`CREATE TRIGGER ` + table + `_au_none AFTER UPDATE OF embedding, embed_model, namespace ON memory_chunks WHEN NOT (` + when + `) BEGIN
			DELETE FROM ` + table + ` WHERE rowid = old.id;
			INSERT INTO ` + log + ` (ns, chunk) VALUES (old.namespace, old.id);
			INSERT INTO ` + log + ` (ns, chunk) SELECT new.namespace, new.id WHERE new.namespace <> old.namespace;
		END`,
		`CREATE TRIGGER ` + table + `_ad AFTER DELETE ON memory_chunks BEGIN
			DELETE FROM ` + table + ` WHERE rowid = old.id;
			INSERT INTO ` + log + ` (ns, chunk) VALUES (old.namespace, old.id);
		END`,
		`INSERT INTO ` + table + ` (rowid, ns, embedding)
			SELECT id, namespace, vec_quantize_int8(embedding, 'unit') FROM memory_chunks
			WHERE embedding IS NOT NULL AND embed_model = ` + lit + ` AND length(embedding) = ` + width,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// nearest returns the ids of the k chunks of namespace ns nearest to qv in table, by
// the quantised vectors.
func (m *Memory) nearest(ctx context.Context, table, ns string, qv []float32, k int) ([]int64, error) {
	rows, err := m.db.Read.QueryContext(ctx, `SELECT rowid FROM `+table+`
		WHERE embedding MATCH vec_quantize_int8(?, 'unit') AND k = ? AND ns = ?`, encodeVector(qv), k, ns)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
