package invoice

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"syscall"
	"time"

	"github.com/istota/istota/sidecar/internal/userconfig"
)

// folder is one user's /Users/{uid}/ folder, opened as an os.Root so that no path
// from a file the user (or the agent) wrote, and no symbolic link, can lead outside it.
type folder struct {
	root *os.Root
	bot  string
}

func (s *Service) openFolder(uid string) (*folder, error) {
	dir, err := s.opts.UserRoot(uid)
	if err != nil {
		return nil, fmt.Errorf("invoice: folder of %s: %w", uid, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("invoice: folder of %s: %w", uid, err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("invoice: folder of %s: %w", uid, err)
	}
	return &folder{root: r, bot: s.opts.BotDir}, nil
}

func (f *folder) Close() error { return f.root.Close() }

func (f *folder) configPath(name string) string { return path.Join(f.bot, "config", name) }

// readConfig reads a file of the config folder; ok is false when it does not exist.
func (f *folder) readConfig(name string) (data []byte, ok bool, err error) {
	b, err := f.root.ReadFile(f.configPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("invoice: read %s: %w", name, err)
	}
	return b, true, nil
}

// config reads and parses INVOICING.md, refusing one with problems.
func (f *folder) config() (userconfig.InvoicingFile, error) {
	src, ok, err := f.readConfig(ConfigFile)
	if err != nil {
		return userconfig.InvoicingFile{}, err
	}
	if !ok {
		return userconfig.InvoicingFile{}, ErrNoConfig
	}
	cfg, problems := userconfig.ParseInvoicing(src)
	if len(problems) > 0 {
		return userconfig.InvoicingFile{}, &FileError{File: ConfigFile, Problems: problems}
	}
	if len(cfg.Entities) == 0 {
		return userconfig.InvoicingFile{}, &FileError{File: ConfigFile, Problems: []userconfig.Problem{{Message: "has no [[entities]] table: add the company that issues the invoices"}}}
	}
	return cfg, nil
}

// writeFile replaces rel atomically (a temporary file renamed over it).
func (f *folder) writeFile(rel string, data []byte) error {
	dir := path.Dir(rel)
	if err := f.root.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("invoice: create %s: %w", dir, err)
	}
	tmp := path.Join(dir, "."+path.Base(rel)+".tmp"+strconv.FormatInt(time.Now().UnixNano(), 36))
	w, err := f.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("invoice: write %s: %w", rel, err)
	}
	_, err = w.Write(data)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = f.root.Rename(tmp, rel)
	}
	if err != nil {
		_ = f.root.Remove(tmp)
		return fmt.Errorf("invoice: write %s: %w", rel, err)
	}
	return f.own(rel)
}

// own gives rel and the folders above it to the owner of the user's folder. A sidecar
// running as root writes files in a workspace the sandbox gave to the agent's account;
// without this, the agent could no longer change the work log it just had billed.
func (f *folder) own(rel string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	fi, err := f.root.Stat(".")
	if err != nil {
		return fmt.Errorf("invoice: owner of the user's folder: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	for p := rel; p != "." && p != "/" && p != ""; p = path.Dir(p) {
		if err := f.root.Lchown(p, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("invoice: give %s to the folder's owner: %w", p, err)
		}
	}
	return nil
}

// exists reports whether rel is a regular file.
func (f *folder) exists(rel string) bool {
	fi, err := f.root.Stat(rel)
	return err == nil && fi.Mode().IsRegular()
}
