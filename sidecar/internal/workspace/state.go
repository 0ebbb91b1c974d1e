package workspace

import (
	"context"
	"fmt"

	"github.com/istota/istota/sidecar/internal/store"
)

// agreed is what both sides last agreed on for one path (a row of sync_state).
// Folders are stored with a trailing slash and no ETag or hash.
type agreed struct {
	etag string // remote ETag then ("" when the server sent none: treated as changed)
	hash string // SHA-256 of the local content then
	size int64
}

func (w *Workspace) loadState(ctx context.Context, key string) (map[string]agreed, error) {
	rows, err := w.db.Read.QueryContext(ctx, `SELECT path, etag, local_hash, size FROM sync_state WHERE user_id = ?`, key)
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
	return out, nil
}

func (w *Workspace) saveState(ctx context.Context, key, p string, a agreed) error {
	_, err := w.db.Write.ExecContext(ctx, `
		INSERT INTO sync_state (user_id, path, etag, local_hash, size, synced_at) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (user_id, path) DO UPDATE SET
			etag = excluded.etag, local_hash = excluded.local_hash, size = excluded.size, synced_at = excluded.synced_at`,
		key, p, a.etag, a.hash, a.size, store.FormatTime(w.opts.Clock()))
	if err != nil {
		return fmt.Errorf("workspace: record sync state of %s: %w", p, err)
	}
	return nil
}

func (w *Workspace) dropState(ctx context.Context, key, p string) error {
	if _, err := w.db.Write.ExecContext(ctx, `DELETE FROM sync_state WHERE user_id = ? AND path = ?`, key, p); err != nil {
		return fmt.Errorf("workspace: forget sync state of %s: %w", p, err)
	}
	return nil
}
