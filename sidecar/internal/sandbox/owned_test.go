package sandbox

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// ownedTestSlack is ctimeSlack for these tests; it must stay far above a clock tick.
const ownedTestSlack = 300 * time.Millisecond

// newTestOwned returns ownedTrees giving to uid 65534, whose clock is the real one moved
// by *offset.
func newTestOwned(offset *atomic.Int64) *ownedTrees {
	o := newOwnedTrees(65534, 65534)
	o.slack = ownedTestSlack
	o.now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	return o
}

// settle waits until every change so far is older than the slack, as a workspace is
// between two tasks. Waiting longer never changes an outcome.
func settle() { time.Sleep(ownedTestSlack + 100*time.Millisecond) }

// makeOwnedTree creates dir with a.txt, sub/b.txt and sub/deeper/c.txt, all the test's
// (root's).
func makeOwnedTree(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a.txt", "sub/b.txt", "sub/deeper/c.txt"} {
		writeRootFile(t, filepath.Join(dir, f))
	}
}

func writeRootFile(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func give(t *testing.T, o *ownedTrees, dir string) walkStats {
	t.Helper()
	st, err := o.give(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// wantOwner checks who owns p (65534 for the agent, 0 for root).
func wantOwner(t *testing.T, p string, uid uint32) {
	t.Helper()
	if got, _ := fileOwner(t, p); got != uid {
		t.Errorf("%s owned by %d, want %d", p, got, uid)
	}
}

// givenTwice gives dir, waits, and gives it again: the first walk changed every
// directory's owner (and so its ctime), the second lists them once more; from then on
// an unchanged tree is not listed.
func givenTwice(t *testing.T, o *ownedTrees, dir string) {
	t.Helper()
	give(t, o, dir)
	settle()
	give(t, o, dir)
}

// TestOwnedTrees checks each rule of ownedTrees: unchanged directories are not listed
// again; a directory is listed again when its ctime is newer than the last walk (less
// the slack), when it is a different directory at the same path, when it held an
// entry left alone, and after the clock went back; memory is bounded. Each rule was
// checked by taking it out: a subtest here then fails.
func TestOwnedTrees(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving files to another uid needs root")
	}

	t.Run("unchanged directories are not listed again", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		makeOwnedTree(t, dir)
		o := newTestOwned(new(atomic.Int64))
		if st := give(t, o, dir); st.dirs != 3 || st.listed != 3 || st.given != 6 {
			t.Errorf("first walk: %+v, want 3 directories listed and 6 owners changed", st)
		}
		settle()
		give(t, o, dir)
		settle()
		if st := give(t, o, dir); st.dirs != 3 || st.listed != 0 || st.given != 0 {
			t.Errorf("walk of an unchanged tree: %+v, want 3 directories and none listed", st)
		}
	})

	t.Run("a directory changed since the last walk is listed", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		makeOwnedTree(t, dir)
		o := newTestOwned(new(atomic.Int64))
		givenTwice(t, o, dir)
		settle()
		give(t, o, dir)
		synced := filepath.Join(dir, "sub", "deeper", "synced.md")
		writeRootFile(t, synced)
		if st := give(t, o, dir); st.listed != 1 || st.given != 1 {
			t.Errorf("walk after one new file: %+v, want its directory alone listed", st)
		}
		wantOwner(t, synced, 65534)
	})

	t.Run("timestamps behind the clock are within the slack", func(t *testing.T) {
		t.Parallel()
		// The kernel stamps ctimes with a clock up to a tick behind the one walks
		// read; here the walks' clock runs ahead by most of the slack instead.
		dir := t.TempDir()
		makeOwnedTree(t, dir)
		offset := new(atomic.Int64)
		offset.Store(int64(ownedTestSlack * 2 / 3))
		o := newTestOwned(offset)
		givenTwice(t, o, dir)
		settle()
		give(t, o, dir)
		synced := filepath.Join(dir, "sub", "synced.md")
		writeRootFile(t, synced)
		give(t, o, dir)
		wantOwner(t, synced, 65534)
	})

	t.Run("a different directory at a remembered path is listed", func(t *testing.T) {
		t.Parallel()
		base := t.TempDir()
		dir, other := filepath.Join(base, "workspace"), filepath.Join(base, "restored")
		makeOwnedTree(t, dir)
		makeOwnedTree(t, other) // as old as dir's: its ctimes say nothing changed
		settle()
		o := newTestOwned(new(atomic.Int64))
		givenTwice(t, o, dir)
		settle()
		give(t, o, dir)
		if err := os.Rename(dir, dir+".old"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(other, dir); err != nil {
			t.Fatal(err)
		}
		give(t, o, dir)
		for _, f := range []string{"a.txt", "sub/b.txt", "sub/deeper/c.txt"} {
			wantOwner(t, filepath.Join(dir, f), 65534)
		}
	})

	t.Run("a directory with an entry left alone is listed every time", func(t *testing.T) {
		t.Parallel()
		base := t.TempDir()
		dir, outside := filepath.Join(base, "workspace"), filepath.Join(base, "outside")
		makeOwnedTree(t, dir)
		writeRootFile(t, outside)
		link := filepath.Join(dir, "sub", "hardlink")
		if err := os.Link(outside, link); err != nil {
			t.Fatal(err)
		}
		o := newTestOwned(new(atomic.Int64))
		givenTwice(t, o, dir)
		settle()
		if st := give(t, o, dir); st.listed != 1 {
			t.Errorf("walk with a hard link in sub: %+v, want sub alone listed", st)
		}
		wantOwner(t, outside, 0)
		// Once it is the only name, the file is the tree's own and is given.
		if err := os.Remove(outside); err != nil {
			t.Fatal(err)
		}
		give(t, o, dir)
		wantOwner(t, link, 65534)
	})

	t.Run("a clock set back starts over", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		makeOwnedTree(t, dir)
		offset := new(atomic.Int64)
		o := newTestOwned(offset)
		give(t, o, dir)
		settle()
		offset.Store(int64(time.Hour)) // the clock was an hour fast…
		give(t, o, dir)
		give(t, o, dir)
		offset.Store(0) // …and is set right
		synced := filepath.Join(dir, "sub", "synced.md")
		writeRootFile(t, synced)
		if st := give(t, o, dir); st.listed != 3 {
			t.Errorf("walk after the clock went back: %+v, want every directory listed", st)
		}
		wantOwner(t, synced, 65534)
	})

	t.Run("symlinks are not followed", func(t *testing.T) {
		t.Parallel()
		base := t.TempDir()
		dir, outside := filepath.Join(base, "workspace"), filepath.Join(base, "outside")
		makeOwnedTree(t, dir)
		makeOwnedTree(t, outside)
		o := newTestOwned(new(atomic.Int64))
		givenTwice(t, o, dir)
		// A remembered directory becomes a symlink out of the tree.
		if err := os.Rename(filepath.Join(dir, "sub"), filepath.Join(dir, "sub.old")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
			t.Fatal(err)
		}
		give(t, o, dir)
		for _, f := range []string{"", "a.txt", "sub/b.txt"} {
			wantOwner(t, filepath.Join(outside, f), 0)
		}
		wantOwner(t, filepath.Join(dir, "sub"), 65534) // the link itself
	})

	t.Run("memory is bounded", func(t *testing.T) {
		t.Parallel()
		base := t.TempDir()
		trees := make([]string, 5)
		for i := range trees {
			trees[i] = filepath.Join(base, string(rune('a'+i)))
			makeOwnedTree(t, trees[i]) // 3 directories each
		}
		o := newTestOwned(new(atomic.Int64))
		o.maxTrees, o.maxDirs = 3, 8
		remembered := func() []string {
			var got []string
			for _, d := range trees {
				if _, ok := o.trees[d]; ok {
					got = append(got, filepath.Base(d))
				}
			}
			return got
		}
		check := func(want ...string) {
			t.Helper()
			got := remembered()
			if len(got) != len(want) {
				t.Fatalf("remembered %v (%d directories), want %v", got, o.dirs, want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("remembered %v, want %v", got, want)
				}
			}
			if o.dirs != 3*len(want) {
				t.Fatalf("%d directories counted for %v", o.dirs, got)
			}
		}
		give(t, o, trees[0])
		give(t, o, trees[1])
		check("a", "b")
		give(t, o, trees[2]) // 9 directories > 8: the least recently given goes
		check("b", "c")
		give(t, o, trees[1])
		give(t, o, trees[3])
		check("b", "d")
		o.maxDirs = 100
		give(t, o, trees[4])
		give(t, o, trees[0]) // 4 trees > 3
		check("a", "d", "e")
		o.maxDirs = 2 // a tree larger than the bound on its own is not remembered
		give(t, o, trees[2])
		check("a", "d", "e")
	})
}
