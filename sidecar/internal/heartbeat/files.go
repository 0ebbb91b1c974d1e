package heartbeat

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// LocalFiles implements Files on a local copy of each user's folder (the workspace
// mirror, or a mount of the bot's storage). A file's version is the hash of its
// content; a folder's is the hash of the names, sizes and modification times of
// everything below it.
type LocalFiles struct {
	// Root returns the local directory of the user's /Users/{uid}/ folder.
	Root func(uid string) string
	// MaxEntries bounds a folder walk; default 10000.
	MaxEntries int
}

// Stat implements Files. Paths leaving the user's folder, also through symbolic
// links, are refused.
func (l LocalFiles) Stat(ctx context.Context, uid, rel string) (FileState, error) {
	if rel == "" || filepath.IsAbs(rel) || !filepath.IsLocal(rel) {
		return FileState{}, fmt.Errorf("%q is not a path inside your folder", rel)
	}
	root, err := os.OpenRoot(l.Root(uid))
	if errors.Is(err, fs.ErrNotExist) {
		return FileState{}, nil // the user's folder is not there yet: nothing exists
	}
	if err != nil {
		return FileState{}, fmt.Errorf("open your folder: %w", err)
	}
	defer root.Close()
	fi, err := root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return FileState{}, nil
	}
	if err != nil {
		return FileState{}, fmt.Errorf("stat %s: %w", rel, err)
	}
	st := FileState{Exists: true, IsDir: fi.IsDir(), ModTime: fi.ModTime()}
	switch {
	case fi.IsDir():
		st.Version, st.ModTime, err = l.dirVersion(ctx, root, rel)
	case fi.Mode().IsRegular():
		st.Version, err = fileVersion(root, rel)
	default:
		st.Version = fi.Mode().Type().String()
	}
	if err != nil {
		return FileState{}, err
	}
	return st, nil
}

func fileVersion(root *os.Root, rel string) (string, error) {
	f, err := root.Open(rel)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", rel, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", rel, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// dirVersion hashes a folder's listing, recursively; the newest modification time
// inside is reported as the folder's.
func (l LocalFiles) dirVersion(ctx context.Context, root *os.Root, rel string) (string, time.Time, error) {
	limit := l.MaxEntries
	if limit <= 0 {
		limit = 10000
	}
	h := sha256.New()
	var newest time.Time
	n := 0
	err := fs.WalkDir(root.FS(), filepath.ToSlash(rel), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if n++; n > limit {
			return fmt.Errorf("more than %d entries", limit)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.ModTime().After(newest) {
			newest = fi.ModTime()
		}
		name := strings.TrimPrefix(p, filepath.ToSlash(rel))
		fmt.Fprintf(h, "%q %s %d %d\n", name, fi.Mode().Type(), fi.Size(), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("list %s: %w", rel, err)
	}
	return hex.EncodeToString(h.Sum(nil)), newest, nil
}
