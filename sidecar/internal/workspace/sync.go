package workspace

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/webdav"
)

// Report says what one sync did. Paths are relative to the synced folder (/Users/{uid}
// or /Channels/{token}); folders end in "/".
type Report struct {
	Downloaded    []string
	Uploaded      []string
	DeletedLocal  []string
	DeletedRemote []string
	// Conflicts are paths both sides changed. Nothing was lost: the Nextcloud version
	// is at Path and the local version at Copy, on both sides.
	Conflicts []Conflict
	// Skipped are paths left alone: refused names, files over the size limit, symbolic
	// links, a file on one side where the other has a folder. They are never deleted
	// on either side because of being skipped.
	Skipped []Skipped
}

// Conflict is one path edited on both sides.
type Conflict struct {
	Path string // holds the version from Nextcloud
	Copy string // holds the local version
}

// Skipped is one path a sync did not touch, and why.
type Skipped struct {
	Path   string
	Reason string
}

// Changed reports whether the sync changed anything on either side.
func (r Report) Changed() bool {
	return len(r.Downloaded)+len(r.Uploaded)+len(r.DeletedLocal)+len(r.DeletedRemote)+len(r.Conflicts) > 0
}

// SyncError lists the paths a sync could not bring into agreement. Their recorded
// state was not advanced, so the next sync tries them again; everything else in the
// Report did happen.
type SyncError struct {
	Tree   string // "Users/alice" or "Channels/abc123"
	Failed []PathError
}

// PathError is one path that could not be synced.
type PathError struct {
	Path string
	Op   string // upload | download | delete | mkdir | local
	Err  error
}

func (e *SyncError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "workspace: sync %s: %d path(s) not synced: ", e.Tree, len(e.Failed))
	for i, f := range e.Failed {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", len(e.Failed)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s (%s: %v)", f.Path, f.Op, f.Err)
	}
	return b.String()
}

// Unwrap lets errors.Is see the causes, e.g. webdav.ErrUnavailable.
func (e *SyncError) Unwrap() []error {
	out := make([]error, 0, len(e.Failed))
	for _, f := range e.Failed {
		out = append(out, f.Err)
	}
	return out
}

// Paths lists the paths that failed.
func (e *SyncError) Paths() []string {
	out := make([]string, len(e.Failed))
	for i, f := range e.Failed {
		out[i] = f.Path
	}
	return out
}

// Pull brings a user's mirror up to date before a task, and Push sends the task's
// changes after it. Both run the same two-way reconciliation — a push that failed
// earlier is retried by the next pull — and differ only in what the caller does with
// an error: after a failed Pull a task may still run on the mirror as it is; a failed
// Push leaves the edits in the mirror for the next sync. In mount mode both do nothing.
//
// A Nextcloud that cannot be reached fails the listing: then nothing is changed on
// either side and the error wraps webdav.ErrUnavailable.
func (w *Workspace) Pull(ctx context.Context, uid string) (Report, error) {
	t, err := w.userTree(uid)
	if err != nil {
		return Report{}, err
	}
	return w.sync(ctx, t, "pull")
}

// Push: see Pull.
func (w *Workspace) Push(ctx context.Context, uid string) (Report, error) {
	t, err := w.userTree(uid)
	if err != nil {
		return Report{}, err
	}
	return w.sync(ctx, t, "push")
}

// opAfterTask is the sync after a task (Finish): like a push, but it asks Nextcloud
// nothing when the mirror is as last agreed.
const opAfterTask = "after-task"

// PullChannel syncs a conversation's /Channels/{token} mirror before a task.
func (w *Workspace) PullChannel(ctx context.Context, token string) (Report, error) {
	t, err := w.channelTree(token)
	if err != nil {
		return Report{}, err
	}
	return w.sync(ctx, t, "pull")
}

// PushChannel syncs a conversation's mirror after a task.
func (w *Workspace) PushChannel(ctx context.Context, token string) (Report, error) {
	t, err := w.channelTree(token)
	if err != nil {
		return Report{}, err
	}
	return w.sync(ctx, t, "push")
}

// RetryFailed syncs again every user and channel whose last sync failed in this
// process, so edits left in a mirror by a failed Push reach Nextcloud even when no
// new task comes along. The caller runs it from a loop it owns (e.g. every few
// minutes); it returns the errors of the syncs that failed again.
func (w *Workspace) RetryFailed(ctx context.Context) error {
	w.mu.Lock()
	keys := make([]string, 0, len(w.unsynced))
	for k := range w.unsynced {
		keys = append(keys, k)
	}
	w.mu.Unlock()
	sort.Strings(keys)
	var errs []error
	for _, k := range keys {
		// Provisioned first: a new user whose provisioning failed is retried too.
		var t tree
		var err error
		if token, ok := strings.CutPrefix(k, channelKeyPrefix); ok {
			if err = w.ProvisionChannel(ctx, token); err == nil {
				t, err = w.channelTree(token)
			}
		} else {
			if err = w.Provision(ctx, k); err == nil {
				t, err = w.userTree(k)
			}
		}
		if err == nil {
			_, err = w.sync(ctx, t, "retry")
		} else {
			w.markSynced(k, err)
		}
		if err != nil {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// Unsynced lists the users (and "channel:<token>" keys) whose last sync failed and
// whose local edits may not be in Nextcloud yet.
func (w *Workspace) Unsynced() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.unsynced))
	for k := range w.unsynced {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (w *Workspace) markSynced(key string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.unsynced[key] = true
	} else {
		delete(w.unsynced, key)
	}
}

// tmpPrefix names the sync's own temporary files inside a mirror. They are never
// synced, and left-overs from a crash are removed by the next scan.
const tmpPrefix = ".istota-sync-"

// localFile is a file found in the mirror: its SHA-256.
type localFile struct {
	hash string
}

// remoteFile is a file found in Nextcloud's listing.
type remoteFile struct {
	etag  string
	mtime time.Time
}

// fetched is a downloaded file waiting in a temporary file.
type fetched struct {
	tmp  string
	etag string
	hash string
	size int64
}

// run is one sync of one tree.
type run struct {
	w     *Workspace
	t     tree
	ctx   context.Context
	root  *os.Root
	log   *slog.Logger
	state map[string]agreed

	lfiles map[string]localFile
	ldirs  map[string]bool
	rfiles map[string]remoteFile
	rdirs  map[string]bool
	// live is every remote path known to exist, valid or not, updated as the sync
	// creates and deletes; a remote folder is deleted only when nothing is below it.
	live          map[string]bool
	remoteMissing bool
	skip          map[string]string // path → reason; the path and all below it are left alone
	taken         map[string]bool   // names reserved for conflict copies

	rep    Report
	failed []PathError
	// hashes are the mirror's file hashes by size and time as of the last scan, and
	// seenHashes what this scan found still valid or read anew (sync_local).
	hashes, seenHashes map[string]localStat
	// remoteChanged is set when the sync created folders in Nextcloud.
	remoteChanged bool
	// abort is set by the first failure that means Nextcloud cannot be used now
	// (unreachable, credentials refused, the caller gave up); later remote operations
	// are not attempted and are reported failed with it.
	abort error
}

func (w *Workspace) sync(ctx context.Context, t tree, op string) (Report, error) {
	return w.syncSince(ctx, t, op, time.Time{})
}

// syncSince syncs t unless a sync that asked Nextcloud began at or after since (one
// that ran, or waited for the lock, meanwhile); a zero since always syncs.
func (w *Workspace) syncSince(ctx context.Context, t tree, op string, since time.Time) (Report, error) {
	if w.opts.Mode == ModeMount {
		return Report{}, nil
	}
	unlock, err := w.lock(ctx, t.key)
	if err != nil {
		return Report{}, err
	}
	defer unlock()
	w.mu.Lock()
	checked := w.checked[t.key]
	w.mu.Unlock()
	if !since.IsZero() && !checked.Before(since) {
		return Report{}, nil
	}
	start := w.opts.Clock()
	rep, asked, err := w.syncLocked(ctx, t, op)
	w.markSynced(t.key, err)
	if err == nil && asked {
		w.mu.Lock()
		if start.After(w.checked[t.key]) {
			w.checked[t.key] = start
		}
		w.mu.Unlock()
	}
	return rep, err
}

// syncLocked runs one sync; asked says whether it listed Nextcloud.
func (w *Workspace) syncLocked(ctx context.Context, t tree, op string) (rep Report, asked bool, err error) {
	start := time.Now()
	log := w.opts.Logger.With("tree", t.remote, "op", op)

	if err := os.MkdirAll(t.local, 0o700); err != nil {
		return Report{}, false, fmt.Errorf("workspace: create mirror %s: %w", t.local, err)
	}
	root, err := os.OpenRoot(t.local)
	if err != nil {
		return Report{}, false, fmt.Errorf("workspace: open mirror %s: %w", t.local, err)
	}
	defer root.Close()

	r := &run{
		w: w, t: t, ctx: ctx, root: root, log: log,
		lfiles: map[string]localFile{}, ldirs: map[string]bool{},
		rfiles: map[string]remoteFile{}, rdirs: map[string]bool{},
		live: map[string]bool{}, skip: map[string]string{}, taken: map[string]bool{},
	}
	if op == opAfterTask {
		// After a task: when the mirror is exactly as last agreed, there is nothing to
		// send, and what changed in Nextcloud meanwhile comes with the next pull; so
		// Nextcloud is not asked at all.
		if err := r.scanMirror(op); err != nil {
			return Report{}, false, err
		}
		if r.localMatchesState() {
			return Report{}, false, nil
		}
	}
	// The listing comes before any change: if Nextcloud cannot be reached nothing is
	// touched.
	list, err := w.listRemote(ctx, t)
	switch {
	case errors.Is(err, webdav.ErrNotFound):
		r.remoteMissing = true
		if err := w.forgetIndex(ctx, t.key); err != nil {
			return Report{}, false, err
		}
	case err != nil:
		return Report{}, false, fmt.Errorf("workspace: %s %s: list Nextcloud: %w", op, t.remote, err)
	}
	if r.state == nil {
		if err := r.scanMirror(op); err != nil {
			return Report{}, false, err
		}
	}
	r.scanRemote(list)
	r.findClashes()
	staleState := r.guardMassDeletion()

	pendRemote, pendLocal := r.syncDirs()
	r.syncFiles()
	r.removeDirs(pendRemote, pendLocal)
	r.forget(staleState)

	if r.remoteChanged || len(r.rep.Uploaded) > 0 || len(r.rep.DeletedRemote) > 0 || len(r.rep.Conflicts) > 0 {
		// Remember the remote side as this sync left it, so the next sync (often the
		// next task's pull, on the answer's path) finds the ETags it expects. Only the
		// folders this sync changed are listed.
		if _, err := w.listRemote(ctx, t); err != nil {
			log.Debug("could not list the remote side again after the sync; the next sync will", "err", err)
		}
	}
	sort.Slice(r.rep.Skipped, func(i, j int) bool { return r.rep.Skipped[i].Path < r.rep.Skipped[j].Path })
	for _, s := range r.rep.Skipped {
		// Skips repeat on every sync until someone fixes the file; they are in the
		// Report for the caller, and only the server's refused names are loud.
		level := slog.LevelDebug
		if strings.HasPrefix(s.Reason, "refused name") {
			level = slog.LevelWarn
		}
		log.Log(ctx, level, "workspace path skipped", "path", s.Path, "reason", s.Reason)
	}
	if r.rep.Changed() || len(r.failed) > 0 {
		log.Info("workspace synced", "downloaded", len(r.rep.Downloaded), "uploaded", len(r.rep.Uploaded),
			"deleted_local", len(r.rep.DeletedLocal), "deleted_remote", len(r.rep.DeletedRemote),
			"conflicts", len(r.rep.Conflicts), "skipped", len(r.rep.Skipped), "failed", len(r.failed),
			"duration", time.Since(start).Round(time.Millisecond))
	}
	if len(r.failed) > 0 {
		return r.rep, true, &SyncError{Tree: t.remote, Failed: r.failed}
	}
	return r.rep, true, nil
}

// --- scanning -------------------------------------------------------------------

func (r *run) skipPath(p, reason string) {
	if _, ok := r.skip[p]; !ok {
		r.skip[p] = reason
		r.rep.Skipped = append(r.rep.Skipped, Skipped{Path: p, Reason: reason})
	}
}

// skipped reports whether p or a folder above it is left alone.
func (r *run) skipped(p string) bool {
	for {
		if _, ok := r.skip[p]; ok {
			return true
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return false
		}
		p = p[:i]
	}
}

// scanMirror reads what this mirror last agreed with Nextcloud and scans the mirror.
func (r *run) scanMirror(op string) error {
	var err error
	if r.state, err = r.w.loadState(r.ctx, r.w.opts.Mirror, r.t.key); err != nil {
		return err
	}
	if err := r.scanLocal(); err != nil {
		return fmt.Errorf("workspace: %s %s: scan mirror: %w", op, r.t.remote, err)
	}
	if len(r.state) == 0 && r.w.opts.Mirror != "" {
		return r.adoptSharedState()
	}
	return nil
}

// adoptSharedState gives a mirror with no record of its own the records written before
// records were kept per mirror (mirror ""), but only those that hold for this mirror: a
// folder it has, a file it holds with the recorded content. Such a record says that
// content is the recorded remote version, whichever host wrote it. Any other record (a
// file missing here, or different) would make the sync take this mirror's older copy
// for an edit or a deletion of the newer one, so it is left out: the sync then compares
// both sides as for a file it meets for the first time, which never loses either.
func (r *run) adoptSharedState() error {
	shared, err := r.w.loadState(r.ctx, "", r.t.key)
	if err != nil || len(shared) == 0 {
		return err
	}
	adopted := map[string]agreed{}
	for p, a := range shared {
		if d, ok := strings.CutSuffix(p, "/"); ok {
			if r.ldirs[d] {
				adopted[p] = a
			}
			continue
		}
		if lf, ok := r.lfiles[p]; ok && a.hash != "" && lf.hash == a.hash {
			adopted[p] = a
		}
	}
	if err := r.w.saveStates(r.ctx, r.t.key, adopted); err != nil {
		return err
	}
	r.state = adopted
	r.log.Info("took over the sync records kept before each mirror had its own, where they hold for this mirror",
		"taken", len(adopted), "left", len(shared)-len(adopted))
	return nil
}

func (r *run) scanLocal() error {
	max := r.w.opts.MaxFileBytes
	var err error
	if r.hashes, err = r.w.loadHashes(r.ctx, r.t.key); err != nil {
		return err
	}
	r.seenHashes = map[string]localStat{}
	if err := r.walkLocal(max); err != nil {
		return err
	}
	return r.w.saveHashes(r.ctx, r.t.key, r.hashes, r.seenHashes)
}

// localHash is p's SHA-256, read again only when its size or modification time
// changed since it was last read. A file modified within the last seconds is always
// read: another write in the same clock tick would not change its time. keep is what
// the next scan may trust without reading the file (ok false: nothing).
func (r *run) localHash(p string, info fs.FileInfo) (hash string, keep localStat, ok bool, err error) {
	st := localStat{size: info.Size(), mtimeNS: info.ModTime().UnixNano()}
	if c, known := r.hashes[p]; known && c.size == st.size && c.mtimeNS == st.mtimeNS && c.hash != "" {
		return c.hash, c, true, nil
	}
	if hash, err = hashLocal(r.root, p); err != nil {
		return "", localStat{}, false, err
	}
	if time.Since(info.ModTime()) > racyWindow {
		st.hash = hash
		return hash, st, true, nil
	}
	return hash, localStat{}, false, nil
}

// localWalkers is how many folders of a mirror are read at once. A scan that finds
// nothing changed is one lstat per file, and for a 10,000-file mirror those system
// calls were most of the sync before and after every task; several at once take a
// fraction of the time on more than one core, and overlap the disk's waits when the
// mirror is not in memory.
const localWalkers = 4

// walkLocal scans the mirror into lfiles and ldirs, hashing what changed. Folders are
// read in parallel (localWalkers); what they find is recorded under a lock.
func (r *run) walkLocal(max int64) error {
	fsys := r.root.FS()
	top, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return err
	}
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		slots = make(chan struct{}, localWalkers)
	)
	locked := func(f func()) {
		mu.Lock()
		defer mu.Unlock()
		f()
	}
	var entries func(dir string, list []fs.DirEntry)
	folder := func(p string) {
		defer wg.Done()
		slots <- struct{}{}
		defer func() { <-slots }()
		list, err := fs.ReadDir(fsys, p)
		if err != nil {
			// An unreadable folder must not look empty: its files would be taken for
			// deleted and deleted in Nextcloud too.
			locked(func() { r.skipPath(p, "cannot be read: "+errText(err)) })
			return
		}
		entries(p, list)
	}
	entries = func(dir string, list []fs.DirEntry) {
		for _, d := range list {
			p := d.Name()
			if dir != "." {
				p = dir + "/" + p
			}
			if strings.HasPrefix(d.Name(), tmpPrefix) {
				if d.Type().IsRegular() {
					_ = r.root.Remove(p)
				}
				continue
			}
			if err := webdav.ValidatePath(p); err != nil {
				locked(func() { r.skipPath(p, "name cannot be synced: "+errText(err)) })
				continue
			}
			switch {
			case d.IsDir():
				locked(func() { r.ldirs[p] = true })
				wg.Add(1)
				go folder(p)
			case d.Type().IsRegular():
				r.localFile(p, d, max, locked)
			default:
				// Symbolic links are never followed: one made by the agent could point
				// at anything the sidecar may read.
				locked(func() { r.skipPath(p, "not a regular file (symbolic link or special file)") })
			}
		}
	}
	entries(".", top)
	wg.Wait()
	return nil
}

// localFile records the regular file p of the mirror.
func (r *run) localFile(p string, d fs.DirEntry, max int64, locked func(func())) {
	info, err := d.Info()
	if err != nil {
		locked(func() { r.skipPath(p, "cannot be read: "+errText(err)) })
		return
	}
	if info.Size() > max {
		locked(func() { r.skipPath(p, fmt.Sprintf("larger than the %d MiB limit", max>>20)) })
		return
	}
	hash, keep, ok, err := r.localHash(p, info)
	if err != nil {
		locked(func() { r.skipPath(p, "cannot be read: "+errText(err)) })
		return
	}
	locked(func() {
		r.lfiles[p] = localFile{hash: hash}
		if ok {
			r.seenHashes[p] = keep
		}
	})
}

// localMatchesState reports whether the scanned mirror holds exactly the files and
// folders last agreed with Nextcloud, with the same contents.
func (r *run) localMatchesState() bool {
	if len(r.skip) > 0 {
		return false // let a full sync report what it leaves alone
	}
	for p, a := range r.state {
		if d, ok := strings.CutSuffix(p, "/"); ok {
			if !r.ldirs[d] {
				return false
			}
			continue
		}
		if lf, ok := r.lfiles[p]; !ok || lf.hash != a.hash {
			return false
		}
	}
	for p := range r.lfiles {
		if _, ok := r.state[p]; !ok {
			return false
		}
	}
	for d := range r.ldirs {
		if _, ok := r.state[d+"/"]; !ok {
			return false
		}
	}
	return true
}

func hashLocal(root *os.Root, p string) (string, error) {
	f, err := root.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (r *run) scanRemote(list []webdav.FileInfo) {
	prefix := r.t.remote + "/"
	max := r.w.opts.MaxFileBytes
	for _, fi := range list {
		rel, under := strings.CutPrefix(fi.Path, prefix)
		if under {
			r.live[rel] = true
		}
		if !under || webdav.ValidatePath(fi.Path) != nil {
			reason := "refused name from Nextcloud"
			if err := webdav.ValidatePath(fi.Path); err != nil {
				reason += ": " + errText(err)
			} else {
				reason += ": outside " + r.t.remote
			}
			r.rep.Skipped = append(r.rep.Skipped, Skipped{Path: fi.Path, Reason: reason})
			continue
		}
		if strings.HasPrefix(path.Base(rel), tmpPrefix) {
			r.skipPath(rel, "reserved name")
			continue
		}
		if fi.IsDir {
			r.rdirs[rel] = true
			continue
		}
		if fi.Size > max {
			r.skipPath(rel, fmt.Sprintf("larger than the %d MiB limit", max>>20))
			continue
		}
		r.rfiles[rel] = remoteFile{etag: fi.ETag, mtime: fi.ModTime}
	}
}

// findClashes leaves alone a path that is a file on one side and a folder on the other.
func (r *run) findClashes() {
	for p := range r.lfiles {
		if r.rdirs[p] {
			r.skipPath(p, "a file here and a folder in Nextcloud")
		}
	}
	for p := range r.rfiles {
		if r.ldirs[p] {
			r.skipPath(p, "a folder here and a file in Nextcloud")
		}
	}
}

// guardMassDeletion ignores the recorded state when one side is entirely empty
// although files were synced before: a wiped mirror or a removed remote folder is far
// more likely than a user deleting every file and folder, and with the state ignored
// the sync copies everything back instead of deleting the other side too. It returns
// the state that was set aside, to be cleaned up afterwards.
func (r *run) guardMassDeletion() map[string]agreed {
	if len(r.state) == 0 {
		return nil
	}
	localEmpty := len(r.lfiles)+len(r.ldirs) == 0
	remoteEmpty := len(r.rfiles)+len(r.rdirs) == 0
	if !localEmpty && !remoteEmpty {
		return nil
	}
	side := "the local mirror"
	if remoteEmpty {
		side = "the Nextcloud folder"
	}
	r.log.Warn("one side of the workspace is empty although it was synced before; restoring it instead of deleting the other side",
		"empty_side", side, "recorded_paths", len(r.state))
	stale := r.state
	r.state = map[string]agreed{}
	return stale
}

// --- folders --------------------------------------------------------------------

func (r *run) kept(d string) bool {
	for _, k := range r.t.keep {
		if k == d {
			return true
		}
	}
	return false
}

// syncDirs creates folders that are new on one side, records folders both sides
// have, and returns the folders deleted on one side, to be removed from the other
// once the files are done.
func (r *run) syncDirs() (pendRemote, pendLocal []string) {
	all := map[string]bool{}
	for d := range r.ldirs {
		all[d] = true
	}
	for d := range r.rdirs {
		all[d] = true
	}
	for p := range r.state {
		if d, ok := strings.CutSuffix(p, "/"); ok {
			all[d] = true
		}
	}
	for _, d := range sortedKeys(all) {
		if r.skipped(d) {
			continue
		}
		inL, inR := r.ldirs[d], r.rdirs[d]
		_, inS := r.state[d+"/"]
		switch {
		case inL && inR:
			if !inS {
				r.save(d+"/", agreed{})
			}
		case inR:
			if inS && !r.kept(d) {
				pendRemote = append(pendRemote, d)
				continue
			}
			if r.mkdirLocal(d) {
				r.save(d+"/", agreed{})
			}
		case inL:
			if inS && !r.kept(d) {
				pendLocal = append(pendLocal, d)
				continue
			}
			if r.blocked(d+"/", "mkdir") {
				continue
			}
			if err := r.ensureRemoteDir(d); err != nil {
				r.fail(d+"/", "mkdir", err)
				continue
			}
			r.save(d+"/", agreed{})
		default:
			r.drop(d + "/")
		}
	}
	return pendRemote, pendLocal
}

// removeDirs deletes, deepest first, the folders deleted on the other side — but only
// when nothing is left in them; a folder that still holds something (a new file, a
// skipped one) is created again where it was deleted.
func (r *run) removeDirs(pendRemote, pendLocal []string) {
	sort.Sort(sort.Reverse(sort.StringSlice(pendRemote)))
	for _, d := range pendRemote {
		if r.liveUnder(d) {
			// Something is still in it in Nextcloud: bring the folder back here.
			if r.mkdirLocal(d) {
				r.save(d+"/", agreed{})
			}
			continue
		}
		if r.blocked(d+"/", "delete") {
			continue
		}
		err := r.w.remote.Delete(r.ctx, r.t.remote+"/"+d, "")
		if err != nil && !errors.Is(err, webdav.ErrNotFound) {
			r.fail(d+"/", "delete", err)
			continue
		}
		delete(r.live, d)
		r.drop(d + "/")
		r.rep.DeletedRemote = append(r.rep.DeletedRemote, d+"/")
	}
	sort.Sort(sort.Reverse(sort.StringSlice(pendLocal)))
	for _, d := range pendLocal {
		if err := r.root.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// Not empty: something new or skipped is inside. Keep it on both sides.
			if r.blocked(d+"/", "mkdir") {
				continue
			}
			if err := r.ensureRemoteDir(d); err != nil {
				r.fail(d+"/", "mkdir", err)
				continue
			}
			r.save(d+"/", agreed{})
			continue
		}
		r.drop(d + "/")
		r.rep.DeletedLocal = append(r.rep.DeletedLocal, d+"/")
	}
}

func (r *run) liveUnder(d string) bool {
	prefix := d + "/"
	for p := range r.live {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	return false
}

func (r *run) mkdirLocal(d string) bool {
	if err := r.root.MkdirAll(d, 0o700); err != nil {
		r.fail(d+"/", "local", err)
		return false
	}
	return true
}

// ensureRemoteDir creates folder d in Nextcloud unless it is known to exist; "."
// is the tree's own folder, which exists unless the listing found it missing.
func (r *run) ensureRemoteDir(d string) error {
	if d == "." {
		if !r.remoteMissing {
			return nil
		}
		if err := r.w.remote.MkdirAll(r.ctx, r.t.remote); err != nil {
			return err
		}
		r.remoteChanged = true
		r.remoteMissing = false
		return nil
	}
	if r.rdirs[d] {
		return nil
	}
	if err := r.w.remote.MkdirAll(r.ctx, r.t.remote+"/"+d); err != nil {
		return err
	}
	r.remoteChanged = true
	for p := d; p != "."; p = path.Dir(p) {
		r.rdirs[p] = true
		r.live[p] = true
	}
	r.remoteMissing = false
	return nil
}

// --- files ----------------------------------------------------------------------

func (r *run) syncFiles() {
	all := map[string]bool{}
	for p := range r.lfiles {
		all[p] = true
	}
	for p := range r.rfiles {
		all[p] = true
	}
	for p := range r.state {
		if !strings.HasSuffix(p, "/") {
			all[p] = true
		}
	}
	var downloads []pendingDownload
	defer func() { r.downloadAll(downloads) }()
	for _, p := range sortedKeys(all) {
		if r.skipped(p) {
			continue
		}
		l, inL := r.lfiles[p]
		rf, inR := r.rfiles[p]
		s, inS := r.state[p]
		localChanged := !inS || l.hash != s.hash
		// An ETag the server did not give counts as changed: a download settles it.
		remoteChanged := !inS || rf.etag != s.etag || s.etag == ""
		switch {
		case inL && inR:
			switch {
			case !localChanged && !remoteChanged:
			case !localChanged:
				downloads = append(downloads, pendingDownload{p, rf})
			case !remoteChanged:
				r.upload(p, l, webdav.PutOptions{IfMatch: s.etag}, true)
			default:
				r.reconcile(p, l, rf)
			}
		case inL:
			if inS && !localChanged {
				r.deleteLocal(p)
			} else {
				// New here, or edited here while deleted in Nextcloud: the edit wins.
				r.upload(p, l, webdav.PutOptions{IfNoneMatch: true}, true)
			}
		case inR:
			if inS && !remoteChanged {
				r.deleteRemote(p, s.etag, rf)
			} else {
				// New in Nextcloud, or edited there while deleted here: the edit wins.
				downloads = append(downloads, pendingDownload{p, rf})
			}
		default:
			r.drop(p)
		}
	}
}

// blocked reports (and records) that a remote operation is not attempted because an
// earlier one showed Nextcloud cannot be used now.
func (r *run) blocked(p, op string) bool {
	if r.abort == nil {
		return false
	}
	r.failed = append(r.failed, PathError{Path: p, Op: op, Err: r.abort})
	return true
}

func (r *run) fail(p, op string, err error) {
	r.failed = append(r.failed, PathError{Path: p, Op: op, Err: err})
	if errors.Is(err, webdav.ErrUnavailable) || errors.Is(err, webdav.ErrUnauthorized) || r.ctx.Err() != nil {
		if r.abort == nil {
			r.abort = err
		}
	}
}

func (r *run) save(p string, a agreed) {
	if err := r.w.saveState(r.ctx, r.t.key, p, a); err != nil {
		r.fail(p, "local", err)
	}
}

func (r *run) drop(p string) {
	if err := r.w.dropState(r.ctx, r.t.key, p); err != nil {
		r.fail(p, "local", err)
	}
}

// fetch downloads p into a temporary file in the mirror, hashing it on the way.
func (r *run) fetch(p string) (fetched, error) {
	obj, err := r.w.remote.Open(r.ctx, r.t.remote+"/"+p)
	if err != nil {
		return fetched{}, err
	}
	defer obj.Close()
	tmp := tmpPrefix + randomHex() + ".tmp"
	f, err := r.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fetched{}, fmt.Errorf("create temporary file: %w", err)
	}
	max := r.w.opts.MaxFileBytes
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(obj, max+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > max {
		err = errTooLarge
	}
	if err != nil {
		_ = r.root.Remove(tmp)
		return fetched{}, err
	}
	return fetched{tmp: tmp, etag: obj.ETag, hash: hex.EncodeToString(h.Sum(nil)), size: n}, nil
}

var errTooLarge = errors.New("larger than the size limit")

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// place moves a fetched file to p.
func (r *run) place(got fetched, p string, mtime time.Time) error {
	if dir := path.Dir(p); dir != "." {
		if err := r.root.MkdirAll(dir, 0o700); err != nil {
			_ = r.root.Remove(got.tmp)
			return err
		}
	}
	if err := r.root.Rename(got.tmp, p); err != nil {
		_ = r.root.Remove(got.tmp)
		return err
	}
	if !mtime.IsZero() {
		_ = r.root.Chtimes(p, mtime, mtime)
	}
	return nil
}

// pendingDownload is a file only Nextcloud changed: it is fetched, nothing else.
type pendingDownload struct {
	p  string
	rf remoteFile
}

// parallelDownloads is how many files a sync fetches at once. A first sync of a large
// tree is mostly downloads, each a round trip; four keep a Nextcloud busy without
// crowding out everyone else's requests.
const parallelDownloads = 4

// downloadAll fetches the pending downloads, several at once; placing them and the
// bookkeeping stay in this goroutine, in path order of arrival.
func (r *run) downloadAll(list []pendingDownload) {
	if len(list) < 2 || r.abort != nil {
		for _, d := range list {
			r.download(d.p, d.rf)
		}
		return
	}
	type result struct {
		pendingDownload
		got fetched
		err error
	}
	jobs := make(chan pendingDownload)
	results := make(chan result)
	var wg sync.WaitGroup
	for range min(parallelDownloads, len(list)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				got, err := r.fetch(j.p)
				results <- result{j, got, err}
			}
		}()
	}
	go func() {
		defer close(jobs)
		for _, d := range list {
			jobs <- d
		}
	}()
	go func() { wg.Wait(); close(results) }()
	for res := range results {
		if r.abort != nil && res.err == nil {
			_ = r.root.Remove(res.got.tmp)
			r.blocked(res.p, "download")
			continue
		}
		r.finishDownload(res.p, res.rf, res.got, res.err)
	}
	sort.Strings(r.rep.Downloaded)
}

func (r *run) download(p string, rf remoteFile) {
	if r.blocked(p, "download") {
		return
	}
	got, err := r.fetch(p)
	r.finishDownload(p, rf, got, err)
}

// finishDownload places a fetched file and records it.
func (r *run) finishDownload(p string, rf remoteFile, got fetched, err error) {
	if errors.Is(err, errTooLarge) {
		r.skipPath(p, "grew beyond the size limit while downloading")
		return
	}
	if err != nil {
		r.fail(p, "download", err)
		return
	}
	if err := r.place(got, p, rf.mtime); err != nil {
		r.fail(p, "local", err)
		return
	}
	r.save(p, agreed{etag: firstNonEmpty(got.etag, rf.etag), hash: got.hash, size: got.size})
	r.rep.Downloaded = append(r.rep.Downloaded, p)
	r.log.Debug("downloaded", "path", p, "bytes", got.size)
}

// upload sends the local p. When the condition fails — Nextcloud's copy changed or
// appeared since the listing — and mayReconcile, it is handled as an edit on both sides.
func (r *run) upload(p string, l localFile, opts webdav.PutOptions, mayReconcile bool) {
	if r.blocked(p, "upload") {
		return
	}
	if err := r.ensureRemoteDir(path.Dir(p)); err != nil {
		r.fail(p, "upload", err)
		return
	}
	f, err := r.root.Open(p)
	if err != nil {
		r.fail(p, "local", err)
		return
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		r.skipPath(p, "not a regular file (symbolic link or special file)")
		return
	}
	if info.Size() > r.w.opts.MaxFileBytes {
		r.skipPath(p, fmt.Sprintf("larger than the %d MiB limit", r.w.opts.MaxFileBytes>>20))
		return
	}
	h := sha256.New()
	opts.ModTime = info.ModTime()
	etag, err := r.w.remote.Put(r.ctx, r.t.remote+"/"+p, io.TeeReader(f, h), info.Size(), opts)
	switch {
	case err == nil:
		r.live[p] = true
		r.save(p, agreed{etag: etag, hash: hex.EncodeToString(h.Sum(nil)), size: info.Size()})
		r.rep.Uploaded = append(r.rep.Uploaded, p)
		r.log.Debug("uploaded", "path", p, "bytes", info.Size())
	case errors.Is(err, webdav.ErrPreconditionFailed) && mayReconcile:
		r.log.Debug("changed in Nextcloud meanwhile", "path", p)
		r.reconcile(p, l, r.rfiles[p])
	default:
		r.fail(p, "upload", err)
	}
}

// reconcile settles a path both sides changed: it downloads Nextcloud's version and
// compares contents. Equal contents need nothing; if Nextcloud's content is still what
// was last agreed (only its ETag moved) the local edit is uploaded; otherwise both are
// kept — Nextcloud's at the path, the local one as a conflict copy on both sides.
func (r *run) reconcile(p string, l localFile, rf remoteFile) {
	if r.blocked(p, "download") {
		return
	}
	got, err := r.fetch(p)
	if errors.Is(err, errTooLarge) {
		r.skipPath(p, "grew beyond the size limit while downloading")
		return
	}
	if err != nil {
		r.fail(p, "download", err)
		return
	}
	etag := firstNonEmpty(got.etag, rf.etag)
	if got.hash == l.hash {
		_ = r.root.Remove(got.tmp)
		r.save(p, agreed{etag: etag, hash: got.hash, size: got.size})
		return
	}
	if s, ok := r.state[p]; ok && s.hash != "" && got.hash == s.hash {
		_ = r.root.Remove(got.tmp)
		r.upload(p, l, webdav.PutOptions{IfMatch: etag}, false)
		return
	}
	cp := r.conflictName(p)
	if err := r.root.Rename(p, cp); err != nil {
		_ = r.root.Remove(got.tmp)
		r.fail(p, "local", err)
		return
	}
	if err := r.place(got, p, rf.mtime); err != nil {
		// Put the local version back where it was; nothing is lost either way.
		_ = r.root.Rename(cp, p)
		r.fail(p, "local", err)
		return
	}
	r.save(p, agreed{etag: etag, hash: got.hash, size: got.size})
	r.rep.Downloaded = append(r.rep.Downloaded, p)
	r.rep.Conflicts = append(r.rep.Conflicts, Conflict{Path: p, Copy: cp})
	r.log.Info("edited on both sides; kept both", "path", p, "conflict_copy", cp)
	// If this upload fails the copy has no recorded state, so the next sync uploads
	// it as a new local file.
	r.upload(cp, l, webdav.PutOptions{IfNoneMatch: true}, false)
}

func (r *run) deleteLocal(p string) {
	if err := r.root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.fail(p, "local", err)
		return
	}
	r.drop(p)
	r.rep.DeletedLocal = append(r.rep.DeletedLocal, p)
}

// deleteRemote deletes Nextcloud's p only if it is still the version last agreed on;
// if it changed meanwhile the edit wins and is downloaded instead.
func (r *run) deleteRemote(p, etag string, rf remoteFile) {
	if r.blocked(p, "delete") {
		return
	}
	err := r.w.remote.Delete(r.ctx, r.t.remote+"/"+p, etag)
	switch {
	case err == nil || errors.Is(err, webdav.ErrNotFound):
		delete(r.live, p)
		r.drop(p)
		r.rep.DeletedRemote = append(r.rep.DeletedRemote, p)
	case errors.Is(err, webdav.ErrPreconditionFailed):
		r.download(p, rf)
	default:
		r.fail(p, "delete", err)
	}
}

// conflictName picks "<name> (conflict <host> <date>).<ext>" beside p, unused on
// either side.
func (r *run) conflictName(p string) string {
	dir, base := path.Split(p)
	ext := path.Ext(base)
	if ext == base || len(ext) > 16 || strings.ContainsRune(ext, ' ') {
		ext = "" // ".bashrc", or not really an extension
	}
	stem := strings.TrimSuffix(base, ext)
	stamp := r.w.opts.Clock().UTC().Format("2006-01-02 1504")
	for i := 1; ; i++ {
		tag := " (conflict " + r.w.opts.Host + " " + stamp
		if i > 1 {
			tag += " " + strconv.Itoa(i)
		}
		tag += ")" + ext
		cand := dir + truncateBytes(stem, webdav.MaxNameBytes-len(tag)) + tag
		if r.taken[cand] || r.live[cand] || r.lfiles[cand].hash != "" || r.ldirs[cand] {
			continue
		}
		if _, err := r.root.Lstat(cand); err == nil {
			continue
		}
		r.taken[cand] = true
		return cand
	}
}

// truncateBytes cuts s to at most n bytes without splitting a character.
func truncateBytes(s string, n int) string {
	if n < 0 {
		n = 0
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// forget drops recorded state set aside by guardMassDeletion for paths that exist on
// neither side now.
func (r *run) forget(stale map[string]agreed) {
	for p := range stale {
		key := strings.TrimSuffix(p, "/")
		if r.live[key] || r.lfiles[key].hash != "" || r.ldirs[key] || r.skipped(key) {
			continue
		}
		if _, err := r.root.Lstat(key); err == nil {
			continue
		}
		r.drop(p)
	}
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
