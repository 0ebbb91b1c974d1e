package sleep

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Modes of what the sleep cycle creates in a workspace; the sandbox hands the tree to
// the agent account before each task.
const (
	fileMode = 0o600
	dirMode  = 0o700
)

// root opens the namespace's folder. Every access goes through the os.Root, so a
// symlink the agent planted in its workspace cannot lead outside.
func (c *Cycle) root(ns Namespace) (*os.Root, error) {
	dir := c.cfg.UserRoot(ns.ID)
	if ns.Kind == KindChannel {
		dir = c.cfg.ChannelRoot(ns.ID)
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, err
	}
	return os.OpenRoot(dir)
}

// readDocument returns USER.md (users) or CHANNEL.md (channels); a missing one is "".
func (c *Cycle) readDocument(ns Namespace) (string, error) {
	r, err := c.root(ns)
	if err != nil {
		return "", err
	}
	defer r.Close()
	name := "CHANNEL.md"
	if ns.Kind == KindUser {
		name = c.userMDName()
	}
	f, err := r.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 256<<10))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	return string(b), nil
}

// memoryLine is how one memory is written: a list item on one line.
func memoryLine(m string) string {
	m = strings.Join(strings.Fields(m), " ")
	for _, p := range []string{"- ", "* ", "+ "} {
		m = strings.TrimPrefix(m, p)
	}
	return "- " + m
}

const topicsPrefix = "Topics: "

// writeMemoryFile adds memories and topics to the dated file rel, creating it with a
// title when missing. Lines already in the file, and topics already listed, are not
// added again, so a repeated run does not duplicate them. It returns the file's text
// afterwards and how many memory lines it added; the file is written only when
// something was added.
func (c *Cycle) writeMemoryFile(ns Namespace, rel, day string, memories, topics []string) (string, int, error) {
	r, err := c.root(ns)
	if err != nil {
		return "", 0, err
	}
	defer r.Close()
	name := rel
	var existing string
	if f, err := r.Open(name); err == nil {
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return "", 0, err
		}
		existing = strings.ReplaceAll(string(b), "\r\n", "\n")
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", 0, err
	}

	have := map[string]bool{}
	haveTopic := map[string]bool{}
	for _, l := range strings.Split(existing, "\n") {
		l = strings.TrimSpace(l)
		have[strings.Join(strings.Fields(l), " ")] = true
		if t, ok := strings.CutPrefix(l, topicsPrefix); ok {
			for _, x := range strings.Split(t, ",") {
				haveTopic[strings.ToLower(strings.TrimSpace(x))] = true
			}
		}
	}
	var lines []string
	for _, m := range memories {
		l := memoryLine(m)
		if l != "- " && !have[l] {
			have[l] = true
			lines = append(lines, l)
		}
	}
	var newTopics []string
	for _, t := range topics {
		t = strings.ReplaceAll(t, ",", " ")
		t = strings.Join(strings.Fields(t), " ")
		if t != "" && !haveTopic[strings.ToLower(t)] {
			haveTopic[strings.ToLower(t)] = true
			newTopics = append(newTopics, t)
		}
	}
	if len(lines) == 0 && len(newTopics) == 0 {
		return existing, 0, nil
	}
	var block []string
	block = append(block, lines...)
	if len(newTopics) > 0 {
		if len(block) > 0 {
			block = append(block, "")
		}
		block = append(block, topicsPrefix+strings.Join(newTopics, ", "))
	}
	text := strings.TrimRight(existing, "\n")
	if text == "" {
		text = "# Memories " + day
	}
	text += "\n\n" + strings.Join(block, "\n") + "\n"

	if dir := path.Dir(name); dir != "." {
		if err := r.MkdirAll(dir, dirMode); err != nil {
			return "", 0, err
		}
	}
	if err := writeAtomic(r, name, []byte(text)); err != nil {
		return "", 0, err
	}
	return text, len(lines), nil
}

// writeAtomic replaces name with data through a temporary file and a rename, keeping
// the old file's mode.
func writeAtomic(r *os.Root, name string, data []byte) error {
	mode := os.FileMode(fileMode)
	if fi, err := r.Stat(name); err == nil {
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", name)
		}
		mode = fi.Mode().Perm()
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	tmp := path.Join(path.Dir(name), "."+path.Base(name)+".tmp-"+hex.EncodeToString(rnd[:]))
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(mode)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = r.Rename(tmp, name)
	}
	if werr != nil {
		_ = r.Remove(tmp)
		return werr
	}
	return nil
}

// removeOldMemoryFiles deletes memories/YYYY-MM-DD.md files dated before cutoffDay
// (YYYY-MM-DD) and returns their relative paths. Other files are left alone.
func (c *Cycle) removeOldMemoryFiles(ctx context.Context, ns Namespace, cutoffDay string) ([]string, error) {
	r, err := c.root(ns)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	d, err := r.Open("memories")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return nil, err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	var removed []string
	var errs []error
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), ".md")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if _, err := time.Parse("2006-01-02", base); err != nil || base >= cutoffDay {
			continue
		}
		rel := "memories/" + e.Name()
		if c.cfg.Remover != nil {
			err = c.cfg.Remover.RemoveMemoryFile(ctx, ns.String(), rel)
		} else {
			err = r.Remove(rel)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", rel, err))
			continue
		}
		removed = append(removed, rel)
	}
	return removed, errors.Join(errs...)
}

// MemoriesDir returns the local folder holding the namespace's dated memory files.
func (c *Cycle) MemoriesDir(ns Namespace) string {
	if ns.Kind == KindUser {
		return filepath.Join(c.cfg.UserRoot(ns.ID), "memories")
	}
	return filepath.Join(c.cfg.ChannelRoot(ns.ID), "memories")
}
