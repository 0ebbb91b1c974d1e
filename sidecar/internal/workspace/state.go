package workspace

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

// agreed is what both sides last agreed on for one path (a row of sync_state).
// Folders are stored with a trailing slash and no ETag or hash.
type agreed struct {
	etag string // remote ETag then ("" when the server sent none: treated as changed)
	hash string // SHA-256 of the local content then
	size int64
}

// loadState reads what mirror last agreed with Nextcloud for the tree key; this
// Workspace's own mirror is read from memory when it can be (recordCache).
func (w *Workspace) loadState(ctx context.Context, mirror, key string) (map[string]agreed, error) {
	own := mirror == w.opts.Mirror
	if own {
		if m, ok := w.records.state(key); ok {
			return m, nil
		}
	}
	rows, err := w.db.Read.QueryContext(ctx, `SELECT path, etag, local_hash, size FROM sync_state WHERE mirror = ? AND user_id = ?`, mirror, key)
	if err != nil {
		return nil, fmt.Errorf("workspace: read sync state: %w", err)
	}
	defer rows.Close()
	out := map[string]agreed{}
	for rows.Next() {
		var p string
		var a agreed
		if err := rows.Scan(&p, &a.etag, &a.hash, &a.size); err != nil {
			return nil, fmt.Errorf("workspace: read sync state: %w", err)
		}
		out[p] = a
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("workspace: read sync state: %w", err)
	}
	if own {
		w.records.putState(key, out)
	}
	return out, nil
}

func (w *Workspace) saveState(ctx context.Context, key, p string, a agreed) error {
	if err := saveStateWith(ctx, w.db.Write, w.opts.Mirror, key, p, a, w.opts.Clock()); err != nil {
		w.records.forget(key, stateRecords)
		return err
	}
	w.records.setState(key, p, a)
	return nil
}

// saveStates records many paths in one transaction.
func (w *Workspace) saveStates(ctx context.Context, key string, all map[string]agreed) error {
	if len(all) == 0 {
		return nil
	}
	w.records.forget(key, stateRecords) // until the transaction's outcome is known
	now := w.opts.Clock()
	err := w.db.InTx(ctx, func(tx *sql.Tx) error {
		for p, a := range all {
			if err := saveStateWith(ctx, tx, w.opts.Mirror, key, p, a, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("workspace: record %d paths' sync state: %w", len(all), err)
	}
	return nil
}

// execer is a database handle or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func saveStateWith(ctx context.Context, db execer, mirror, key, p string, a agreed, now time.Time) error {
	_, err := db.ExecContext(ctx, `
		INSERT INTO sync_state (mirror, user_id, path, etag, local_hash, size, synced_at) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (mirror, user_id, path) DO UPDATE SET
			etag = excluded.etag, local_hash = excluded.local_hash, size = excluded.size, synced_at = excluded.synced_at`,
		mirror, key, p, a.etag, a.hash, a.size, store.FormatTime(now))
	if err != nil {
		return fmt.Errorf("workspace: record sync state of %s: %w", p, err)
	}
	return nil
}

func (w *Workspace) dropState(ctx context.Context, key, p string) error {
	if _, err := w.db.Write.ExecContext(ctx, `DELETE FROM sync_state WHERE mirror = ? AND user_id = ? AND path = ?`, w.opts.Mirror, key, p); err != nil {
		w.records.forget(key, stateRecords)
		return fmt.Errorf("workspace: forget sync state of %s: %w", p, err)
	}
	w.records.dropState(key, p)
	return nil
}
