package workspace

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/webdav"
)

// A sync asks Nextcloud as little as it can. Nextcloud changes a folder's ETag whenever
// anything below it changes, so the last listing of a tree is kept (sync_remote) and
// each sync starts with one depth-0 PROPFIND of the tree's folder: an unchanged ETag
// means the whole remote side is as listed last time; otherwise only the folders whose
// ETag changed are listed again. A user with 10,000 files who edited nothing costs one
// small request instead of a listing of everything.
//
// The kept listing can only err on the safe side: a folder's ETag is recorded from its
// parent's listing before its own members are listed, so members are never older than
// the ETag they are filed under, and a server that gives folders no ETag is listed in
// full every time.

// indexEntry is one remembered remote path of a tree.
type indexEntry struct {
	isDir bool
	etag  string
	size  int64
	mtime int64 // unix seconds
}

// listRemote lists t's remote side recursively (every path below t.remote, the folder
// itself excluded), as webdav's ReadDir does, and remembers the listing.
func (w *Workspace) listRemote(ctx context.Context, t tree) ([]webdav.FileInfo, error) {
	self, err := w.remote.ListLevel(ctx, t.remote, webdav.DepthSelf)
	if err != nil {
		return nil, err
	}
	var rootETag string
	for _, fi := range self {
		if fi.Path == t.remote && fi.IsDir {
			rootETag = fi.ETag
		}
	}
	if rootETag == "" {
		// No folder ETags (not Nextcloud, or a proxy in between dropped them): nothing
		// can be skipped safely.
		return w.remote.ReadDir(ctx, t.remote, true)
	}
	old, err := w.loadIndex(ctx, t.key)
	if err != nil {
		return nil, err
	}
	if o, ok := old[""]; ok && o.isDir && o.etag == rootETag {
		return indexListing(t.remote, old), nil
	}

	oldPaths := sortedPaths(old)
	next := map[string]indexEntry{"": {isDir: true, etag: rootETag}}
	var list []webdav.FileInfo
	queue := []string{""}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		remoteDir := joinRel(t.remote, dir)
		members, err := w.remote.ListLevel(ctx, remoteDir, webdav.DepthMembers)
		if err != nil {
			return nil, err
		}
		for _, m := range members {
			if m.Path == remoteDir {
				continue
			}
			list = append(list, m)
			rel, ok := strings.CutPrefix(m.Path, t.remote+"/")
			// Only valid paths directly in dir are remembered and walked into; anything
			// else is left to the sync's own checks, which report it.
			if !ok || webdav.ValidatePath(m.Path) != nil || parentOf(rel) != dir {
				continue
			}
			e := indexEntry{isDir: m.IsDir, etag: m.ETag, size: m.Size, mtime: m.ModTime.Unix()}
			next[rel] = e
			if !m.IsDir {
				continue
			}
			if o, ok := old[rel]; ok && o.isDir && m.ETag != "" && o.etag == m.ETag {
				// Unchanged below: take the folder's contents from the last listing.
				for _, p := range subtree(oldPaths, rel) {
					next[p] = old[p]
					list = append(list, toFileInfo(t.remote, p, old[p]))
				}
				continue
			}
			queue = append(queue, rel)
		}
	}
	if err := w.saveIndex(ctx, t.key, old, next); err != nil {
		return nil, err
	}
	return list, nil
}

// forgetIndex drops a tree's remembered listing (its remote folder is gone).
func (w *Workspace) forgetIndex(ctx context.Context, key string) error {
	if _, err := w.db.Write.ExecContext(ctx, `DELETE FROM sync_remote WHERE mirror = ? AND tree = ?`, w.opts.Mirror, key); err != nil {
		w.records.forget(key, indexRecords)
		return fmt.Errorf("workspace: forget remote listing: %w", err)
	}
	w.records.putIndex(key, nil)
	return nil
}

// loadIndex reads the tree's remembered listing; the map must not be changed.
func (w *Workspace) loadIndex(ctx context.Context, key string) (map[string]indexEntry, error) {
	if m, ok := w.records.index(key); ok {
		return m, nil
	}
	rows, err := w.db.Read.QueryContext(ctx, `SELECT path, is_dir, etag, size, mtime FROM sync_remote WHERE mirror = ? AND tree = ?`, w.opts.Mirror, key)
	if err != nil {
		return nil, fmt.Errorf("workspace: read remote listing: %w", err)
	}
	defer rows.Close()
	out := map[string]indexEntry{}
	for rows.Next() {
		var p string
		var e indexEntry
		if err := rows.Scan(&p, &e.isDir, &e.etag, &e.size, &e.mtime); err != nil {
			return nil, fmt.Errorf("workspace: read remote listing: %w", err)
		}
		out[p] = e
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("workspace: read remote listing: %w", err)
	}
	w.records.putIndex(key, out)
	return out, nil
}

// saveIndex writes the difference between the old and the new listing in one
// transaction.
func (w *Workspace) saveIndex(ctx context.Context, key string, old, next map[string]indexEntry) error {
	w.records.forget(key, indexRecords) // until the transaction's outcome is known
	if err := w.db.InTx(ctx, func(tx *sql.Tx) error { return writeIndexDiff(ctx, tx, w.opts.Mirror, key, old, next) }); err != nil {
		return fmt.Errorf("workspace: save remote listing: %w", err)
	}
	w.records.putIndex(key, next)
	return nil
}

func writeIndexDiff(ctx context.Context, tx *sql.Tx, mirror, key string, old, next map[string]indexEntry) error {
	for p := range old {
		if _, ok := next[p]; !ok {
			if _, err := tx.ExecContext(ctx, `DELETE FROM sync_remote WHERE mirror = ? AND tree = ? AND path = ?`, mirror, key, p); err != nil {
				return err
			}
		}
	}
	for p, e := range next {
		if o, ok := old[p]; ok && o == e {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO sync_remote (mirror, tree, path, is_dir, etag, size, mtime) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (mirror, tree, path) DO UPDATE SET is_dir = excluded.is_dir, etag = excluded.etag, size = excluded.size, mtime = excluded.mtime`,
			mirror, key, p, e.isDir, e.etag, e.size, e.mtime); err != nil {
			return err
		}
	}
	return nil
}

func indexListing(remote string, idx map[string]indexEntry) []webdav.FileInfo {
	out := make([]webdav.FileInfo, 0, len(idx))
	for p, e := range idx {
		if p != "" {
			out = append(out, toFileInfo(remote, p, e))
		}
	}
	return out
}

func toFileInfo(remote, p string, e indexEntry) webdav.FileInfo {
	return webdav.FileInfo{Path: remote + "/" + p, IsDir: e.isDir, Size: e.size, ETag: e.etag, ModTime: time.Unix(e.mtime, 0)}
}

func sortedPaths(idx map[string]indexEntry) []string {
	out := make([]string, 0, len(idx))
	for p := range idx {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// subtree returns the paths strictly below dir from sorted paths.
func subtree(sorted []string, dir string) []string {
	prefix := dir + "/"
	i := sort.SearchStrings(sorted, prefix)
	j := i
	for j < len(sorted) && strings.HasPrefix(sorted[j], prefix) {
		j++
	}
	return sorted[i:j]
}

func parentOf(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return ""
}

func joinRel(remote, rel string) string {
	if rel == "" {
		return remote
	}
	return remote + "/" + rel
}

// racyWindow is how recent a file's modification may be for its hash not to be kept:
// a second write within the file system's time granularity would go unnoticed.
const racyWindow = 2 * time.Second

// localStat is a mirror file's size and time and the hash of its content then.
type localStat struct {
	size    int64
	mtimeNS int64
	hash    string
}

// loadHashes reads the mirror's file hashes; the map must not be changed.
func (w *Workspace) loadHashes(ctx context.Context, key string) (map[string]localStat, error) {
	if m, ok := w.records.hashes(key); ok {
		return m, nil
	}
	rows, err := w.db.Read.QueryContext(ctx, `SELECT path, size, mtime_ns, hash FROM sync_local WHERE mirror = ? AND tree = ?`, w.opts.Mirror, key)
	if err != nil {
		return nil, fmt.Errorf("workspace: read file hashes: %w", err)
	}
	defer rows.Close()
	out := map[string]localStat{}
	for rows.Next() {
		var p string
		var st localStat
		if err := rows.Scan(&p, &st.size, &st.mtimeNS, &st.hash); err != nil {
			return nil, fmt.Errorf("workspace: read file hashes: %w", err)
		}
		out[p] = st
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("workspace: read file hashes: %w", err)
	}
	w.records.putHashes(key, out)
	return out, nil
}

// saveHashes stores what changed between the hashes read and the ones found.
func (w *Workspace) saveHashes(ctx context.Context, key string, old, found map[string]localStat) error {
	changed := false
	for p, st := range found {
		if o, ok := old[p]; !ok || o != st {
			changed = true
			break
		}
	}
	if !changed && len(old) == len(found) {
		return nil
	}
	w.records.forget(key, hashRecords) // until the transaction's outcome is known
	err := w.db.InTx(ctx, func(tx *sql.Tx) error {
		for p := range old {
			if _, ok := found[p]; !ok {
				if _, err := tx.ExecContext(ctx, `DELETE FROM sync_local WHERE mirror = ? AND tree = ? AND path = ?`, w.opts.Mirror, key, p); err != nil {
					return err
				}
			}
		}
		for p, st := range found {
			if o, ok := old[p]; ok && o == st {
				continue
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO sync_local (mirror, tree, path, size, mtime_ns, hash) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (mirror, tree, path) DO UPDATE SET size = excluded.size, mtime_ns = excluded.mtime_ns, hash = excluded.hash`,
				w.opts.Mirror, key, p, st.size, st.mtimeNS, st.hash); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("workspace: save file hashes: %w", err)
	}
	w.records.putHashes(key, found)
	return nil
}
