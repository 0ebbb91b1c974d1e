package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sync"
	"syscall"
	"time"
)

// Bounds of what ownedTrees remembers, so memory stays bounded whatever the number and
// size of workspaces: about 100 bytes per directory, a few MiB at most.
const (
	maxOwnedTrees = 256
	maxOwnedDirs  = 100_000
	// ctimeSlack covers timestamps that lag the clock: the kernel stamps changes with a
	// clock that is up to a tick behind, and some filesystems keep whole seconds only.
	ctimeSlack = time.Second
)

// ownedTrees gives directory trees (workspace, home, task tmp, writable mounts) to the
// agent uid before every task, without reading every file every time. Giving a
// 10,000-file workspace took 14–18 ms per task, all of it spent learning that nothing
// had changed.
//
// For each tree it remembers the directories it saw (by path below the tree, with
// their device and inode) and when that walk began. A directory whose entries
// were all given is listed again only when it is a different directory than the one
// remembered, or when its ctime is newer than the previous walk less ctimeSlack:
// adding, removing or renaming an entry changes the directory's ctime. Directories are
// still opened every time, to reach the subdirectories and check their own owner.
//
// Not seen: the owner of an existing file changed back by root without touching its
// directory. The sidecar writes files in place or by rename, and never chowns to
// itself, so nothing does that.
type ownedTrees struct {
	uid, gid uint32
	now      func() time.Time // the wall clock; tests move it
	slack    time.Duration
	maxTrees int
	maxDirs  int

	mu    sync.Mutex
	trees map[string]*ownedTree // by the tree's host path
	dirs  int                   // directories remembered over all trees
	uses  uint64                // counts gives, to find the least recently used tree
}

// ownedTree is what one walk of a tree learnt. It is never changed once stored, so
// concurrent walks of the same tree can read it without a lock.
type ownedTree struct {
	walked time.Time // wall clock when the walk began
	dirs   map[string]ownedDir
	used   uint64
}

// ownedDir is a directory all of whose entries were given, as it was then.
type ownedDir struct {
	dev, ino uint64
	subdirs  []string // names of its subdirectories
}

// walkStats says what one give did.
type walkStats struct {
	dirs, listed, given int
}

func newOwnedTrees(uid, gid uint32) *ownedTrees {
	return &ownedTrees{
		uid: uid, gid: gid,
		now:      time.Now,
		slack:    ctimeSlack,
		maxTrees: maxOwnedTrees,
		maxDirs:  maxOwnedDirs,
		trees:    map[string]*ownedTree{},
	}
}

// give makes dir and everything in it owned by the agent uid. It works through
// os.Root, so a symlink planted in the tree can neither redirect the walk nor the chown
// outside it, and it changes links themselves, never their targets. Regular files with
// more than one hard link are left alone: one may be a second name for a file elsewhere
// (planted by an agent running unsandboxed), and giving it away would give away the
// original.
func (o *ownedTrees) give(dir string) (walkStats, error) {
	// Round(0) drops the monotonic reading: walks are compared with ctimes, which
	// follow the wall clock, and a wall clock set back must be noticed.
	start := o.now().Round(0)
	prev := o.previous(dir, start)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return walkStats{}, err
	}
	defer root.Close()
	w := &treeWalk{
		trees: o,
		prev:  map[string]ownedDir{},
		next:  map[string]ownedDir{},
		seen:  map[[2]uint64]bool{},
	}
	if prev != nil {
		w.prev, w.since = prev.dirs, prev.walked.Add(-o.slack)
	}
	if err := w.visit(root, "."); err != nil {
		o.forget(dir)
		return w.stats, err
	}
	o.store(dir, &ownedTree{walked: start, dirs: w.next})
	return w.stats, nil
}

// previous returns the last walk of dir, or nil. A clock now earlier than any walk
// makes every remembered ctime comparison meaningless: all is forgotten.
func (o *ownedTrees) previous(dir string, now time.Time) *ownedTree {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, t := range o.trees {
		if now.Before(t.walked) {
			clear(o.trees)
			o.dirs = 0
			return nil
		}
	}
	return o.trees[dir]
}

func (o *ownedTrees) forget(dir string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t, ok := o.trees[dir]; ok {
		o.dirs -= len(t.dirs)
		delete(o.trees, dir)
	}
}

// store keeps t as dir's last walk, dropping the least recently used trees until both
// bounds hold. A tree larger than maxDirs on its own is not remembered.
func (o *ownedTrees) store(dir string, t *ownedTree) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if old, ok := o.trees[dir]; ok {
		o.dirs -= len(old.dirs)
		delete(o.trees, dir)
	}
	if len(t.dirs) > o.maxDirs {
		return
	}
	for len(o.trees) >= o.maxTrees || o.dirs+len(t.dirs) > o.maxDirs {
		lru := ""
		for name, c := range o.trees {
			if lru == "" || c.used < o.trees[lru].used {
				lru = name
			}
		}
		o.dirs -= len(o.trees[lru].dirs)
		delete(o.trees, lru)
	}
	o.uses++
	t.used = o.uses
	o.trees[dir] = t
	o.dirs += len(t.dirs)
}

// treeWalk is one give of one tree.
type treeWalk struct {
	trees *ownedTrees
	prev  map[string]ownedDir // the previous walk's directories; read only
	since time.Time           // directories changed after this are listed again
	next  map[string]ownedDir
	seen  map[[2]uint64]bool // directories visited, against loops through swapped-in symlinks
	stats walkStats
}

// visit gives the directory d (rel below the tree) and everything below it.
func (w *treeWalk) visit(d *os.Root, rel string) error {
	fi, err := d.Stat(".")
	if err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	id := [2]uint64{uint64(st.Dev), st.Ino}
	if w.seen[id] {
		return nil
	}
	w.seen[id] = true
	w.stats.dirs++
	uid, gid := w.trees.uid, w.trees.gid
	if st.Uid != uid || st.Gid != gid {
		// This changes the directory's ctime, so the next walk lists it once more.
		if err := d.Lchown(".", int(uid), int(gid)); err != nil {
			return err
		}
		w.stats.given++
	}

	known, ok := w.prev[rel]
	ctime := time.Unix(st.Ctim.Unix())
	if !ok || known.dev != id[0] || known.ino != id[1] || ctime.After(w.since) {
		subdirs, complete, err := w.list(d)
		if err != nil {
			return err
		}
		known = ownedDir{dev: id[0], ino: id[1], subdirs: subdirs}
		ok = complete
	}
	if ok {
		w.next[rel] = known
	}

	for _, name := range known.subdirs {
		sub, err := d.OpenRoot(name)
		if err != nil {
			// Removed, or replaced by a file or symlink (perhaps one leading out, which
			// the Root refuses), since it was listed: nothing to give there.
			if fi, lerr := d.Lstat(name); lerr != nil || !fi.IsDir() {
				continue
			}
			return err
		}
		err = w.visit(sub, path.Join(rel, name))
		sub.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// list gives every entry of d other than subdirectories (they give themselves when
// visited) and returns the subdirectories' names. complete is false when an entry
// was left alone, so d is listed again next time.
func (w *treeWalk) list(d *os.Root) (subdirs []string, complete bool, err error) {
	w.stats.listed++
	f, err := d.Open(".")
	if err != nil {
		return nil, false, err
	}
	// In a Root, ReadDir stats every entry relative to the directory, not by path.
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return nil, false, fmt.Errorf("read directory: %w", err)
	}
	complete = true
	uid, gid := w.trees.uid, w.trees.gid
	for _, e := range entries {
		if e.IsDir() {
			subdirs = append(subdirs, e.Name())
			continue
		}
		info, err := e.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, false, err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok || st.Uid == uid && st.Gid == gid {
			continue
		}
		if info.Mode().IsRegular() && st.Nlink > 1 {
			complete = false
			continue
		}
		if err := d.Lchown(e.Name(), int(uid), int(gid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, false, err
		}
		w.stats.given++
	}
	return subdirs, complete, nil
}
