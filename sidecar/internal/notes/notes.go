// Package notes is the notes skill: the user's notes are the files under notes/ in
// their workspace (the same folder the briefings' notes component reads, synced with
// Nextcloud like the rest of the workspace). The skill lists, reads, searches, adds and
// appends to them from the sidecar. Every name goes through an os.Root opened on the
// notes folder, so no name, link or ".." reaches outside it; hidden files and folders
// (a leading dot) and anything but regular files are neither listed nor touched.
package notes

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/skills"
)

// Name is the skill's name; Dir the folder of the workspace it works in.
const (
	Name = "notes"
	Dir  = "notes"
)

// Limits.
const (
	MaxNoteBytes = 1 << 20   // a note larger than this is not read, searched or appended to
	MaxShowBytes = 256 << 10 // read prints at most this much
	maxWalk      = 5000      // directory entries looked at by list and search
	maxHits      = 100       // search lines printed
	maxDepth     = 8         // folders in a name
	maxNameBytes = 255       // one element of a name
)

const usage = `notes list [FOLDER]                 your notes, newest first, with size and time
notes read NAME                     print a note
notes search WORD…                  lines (and note names) that contain every word, ignoring case
notes add NAME [TEXT…]              write a new note; the text is the arguments or standard input
notes append NAME [TEXT…]           add the text at the end of a note, making it if it is missing
NAME is a path under notes/ such as ideas.md or work/2026-05-04.md; ".md" is added when it has no extension.
Hidden names (starting with "."), "..", absolute paths and links out of notes/ are refused. New notes are .md or .txt.`

// Options configure the skill.
type Options struct {
	// Root returns the local copy of a user's /Users/{uid}/ folder. Required.
	Root func(uid string) (string, error)
	// Zone returns the user's time zone for the times list prints; nil prints UTC.
	Zone func(ctx context.Context, uid string) *time.Location
}

// Skill returns the notes skill.
func Skill(opts Options) (skills.Skill, error) {
	if opts.Root == nil {
		return skills.Skill{}, errors.New("notes: no workspace root")
	}
	return skills.Skill{
		Manifest: skills.Manifest{
			Name:     Name,
			Summary:  "list, read, search and write the notes in your notes/ folder",
			Usage:    usage,
			Load:     skills.Load{Keywords: []string{"note", "notiz", "jot", "write down", "journal"}},
			Classify: skills.ReadVerbs("list", "read", "search"),
		},
		Run: func(ctx context.Context, inv skills.Invocation) skills.Result {
			return run(ctx, opts, inv)
		},
	}, nil
}

// Register adds the notes skill to reg.
func Register(reg *skills.Registry, opts Options) error {
	s, err := Skill(opts)
	if err != nil {
		return err
	}
	return reg.Register(s)
}

func usagef(format string, args ...any) skills.Result {
	return skills.Usagef("notes: "+format+"\nusage:\n%s", append(args, usage)...)
}

func run(ctx context.Context, opts Options, inv skills.Invocation) skills.Result {
	if len(inv.Args) == 0 {
		return usagef("no command")
	}
	if inv.UserID == "" {
		return skills.Failf("notes: no user for this task")
	}
	cmd, args := inv.Args[0], inv.Args[1:]
	base, err := opts.Root(inv.UserID)
	if err != nil {
		return skills.Internal("your files", err)
	}
	n := &notebook{dir: filepath.Join(base, Dir), loc: time.UTC}
	if opts.Zone != nil {
		if loc := opts.Zone(ctx, inv.UserID); loc != nil {
			n.loc = loc
		}
	}
	switch cmd {
	case "list":
		if len(args) > 1 {
			return usagef("list takes at most one folder")
		}
		folder := "."
		if len(args) == 1 {
			if folder, err = CleanName(args[0], false); err != nil {
				return usagef("%v", err)
			}
		}
		return n.list(ctx, folder)
	case "read":
		if len(args) != 1 {
			return usagef("read takes one name")
		}
		name, err := CleanName(args[0], true)
		if err != nil {
			return usagef("%v", err)
		}
		return n.read(name)
	case "search":
		var words []string
		for _, a := range args {
			words = append(words, strings.Fields(strings.ToLower(a))...)
		}
		if len(words) == 0 {
			return usagef("search needs at least one word")
		}
		return n.search(ctx, words)
	case "add", "append":
		if len(args) == 0 {
			return usagef("%s needs a name", cmd)
		}
		name, err := CleanName(args[0], true)
		if err != nil {
			return usagef("%v", err)
		}
		if ext := strings.ToLower(path.Ext(name)); ext != ".md" && ext != ".txt" {
			return usagef("%s: notes are written as .md or .txt files", args[0])
		}
		text := strings.Join(args[1:], " ")
		if len(args) == 1 {
			text = string(inv.Stdin)
		}
		if strings.TrimSpace(text) == "" {
			return usagef("%s: no text: give it after the name or on standard input", cmd)
		}
		if !utf8.ValidString(text) || strings.ContainsRune(text, 0) {
			return usagef("%s: the text must be UTF-8 without NUL bytes", cmd)
		}
		return n.write(name, text, cmd == "append")
	}
	return usagef("unknown command %q", cmd)
}

// CleanName checks a note or folder name given by the agent and returns it in slash
// form, relative to notes/. A file name without an extension gets ".md". The error
// says what is wrong in words meant for the agent.
func CleanName(name string, file bool) (string, error) {
	orig := name
	name = strings.TrimPrefix(name, "notes/") // the agent may name the folder too
	switch {
	case name == "" || name == "notes":
		if file {
			return "", fmt.Errorf("%q: no note name", orig)
		}
		return ".", nil
	case strings.HasPrefix(name, "/"):
		return "", fmt.Errorf("%q: give a name under notes/, not an absolute path", orig)
	case strings.ContainsRune(name, '\\'):
		return "", fmt.Errorf("%q: use / to separate folders", orig)
	case !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0:
		return "", fmt.Errorf("%q: a name must be text without control characters", orig)
	}
	name = strings.TrimSuffix(name, "/")
	parts := strings.Split(name, "/")
	if len(parts) > maxDepth {
		return "", fmt.Errorf("%q: at most %d folders deep", orig, maxDepth)
	}
	for _, p := range parts {
		switch {
		case p == "" || p == "." || p == "..":
			return "", fmt.Errorf("%q: empty, \".\" and \"..\" parts are not allowed", orig)
		case strings.HasPrefix(p, "."):
			return "", fmt.Errorf("%q: hidden names (starting with \".\") are not allowed", orig)
		case len(p) > maxNameBytes:
			return "", fmt.Errorf("%q: a part is longer than %d bytes", orig, maxNameBytes)
		case strings.TrimSpace(p) != p:
			return "", fmt.Errorf("%q: a part starts or ends with a space", orig)
		}
	}
	if file && path.Ext(parts[len(parts)-1]) == "" {
		name += ".md"
	}
	return name, nil
}

type notebook struct {
	dir string
	loc *time.Location
}

// open opens the notes folder as a root; ok is false when it does not exist yet.
func (n *notebook) open(create bool) (*os.Root, bool, error) {
	fi, err := os.Lstat(n.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !create {
			return nil, false, nil
		}
		if err := os.Mkdir(n.dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, false, fmt.Errorf("create %s: %w", n.dir, err)
		}
	case err != nil:
		return nil, false, fmt.Errorf("notes folder: %w", err)
	case !fi.IsDir():
		// A link here could point anywhere; the folder must be a real one.
		return nil, false, errNotFolder
	}
	r, err := os.OpenRoot(n.dir)
	if err != nil {
		return nil, false, fmt.Errorf("open %s: %w", n.dir, err)
	}
	return r, true, nil
}

var errNotFolder = errors.New("notes in your workspace is not a folder")

func (n *notebook) failOpen(err error) skills.Result {
	if errors.Is(err, errNotFolder) {
		return skills.Failf("notes: %v", err)
	}
	return skills.Internal("your notes", err)
}

type entry struct {
	name string
	size int64
	mod  time.Time
}

// walk lists the regular, visible files under folder, skipping hidden folders.
func walk(ctx context.Context, r *os.Root, folder string) ([]entry, bool, error) {
	var out []entry
	seen, capped := 0, false
	err := fs.WalkDir(r.FS(), folder, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == folder {
				return err
			}
			return nil // an unreadable entry is skipped
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if seen++; seen > maxWalk {
			capped = true
			return fs.SkipAll
		}
		if p != folder && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil // folders are walked; links and devices never followed
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		out = append(out, entry{name: p, size: info.Size(), mod: info.ModTime()})
		return nil
	})
	return out, capped, err
}

func (n *notebook) list(ctx context.Context, folder string) skills.Result {
	r, ok, err := n.open(false)
	if err != nil {
		return n.failOpen(err)
	}
	if !ok {
		return skills.Result{Stdout: []byte("There are no notes yet (no notes/ folder).\n")}
	}
	defer r.Close()
	if folder != "." {
		fi, err := r.Lstat(folder)
		if err != nil || !fi.IsDir() {
			return skills.Failf("notes: there is no folder notes/%s", folder)
		}
	}
	list, capped, err := walk(ctx, r, folder)
	if err != nil {
		return skills.Internal("your notes", err)
	}
	if len(list) == 0 {
		return skills.Result{Stdout: []byte("No notes.\n")}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].mod.After(list[j].mod) })
	var b strings.Builder
	for _, e := range list {
		fmt.Fprintf(&b, "notes/%s\t%s\t%s\n", e.name, size(e.size), e.mod.In(n.loc).Format("2006-01-02 15:04"))
	}
	if capped {
		fmt.Fprintf(&b, "(stopped after %d entries)\n", maxWalk)
	}
	return skills.Result{Stdout: []byte(b.String())}
}

func size(n int64) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
}

// openRegular opens name for reading only if it is a regular file: never a link, a
// FIFO (which would block) or a device.
func openRegular(r *os.Root, name string) (*os.File, fs.FileInfo, error) {
	fi, err := r.Lstat(name)
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, errNotRegular
	}
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	if fi, err = f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, errNotRegular
	}
	return f, fi, nil
}

var errNotRegular = errors.New("not a regular file")

func (n *notebook) read(name string) skills.Result {
	r, ok, err := n.open(false)
	if err != nil {
		return n.failOpen(err)
	}
	if !ok {
		return skills.Failf("notes: there is no note notes/%s (no notes/ folder yet)", name)
	}
	defer r.Close()
	f, fi, err := openRegular(r, name)
	if err != nil {
		return n.nameFailure(name, err)
	}
	defer f.Close()
	if fi.Size() > MaxNoteBytes {
		return skills.Failf("notes: notes/%s is %s, larger than the %s a note may be; open it from your workspace instead", name, size(fi.Size()), size(MaxNoteBytes))
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxShowBytes+1))
	if err != nil {
		return skills.Internal("your notes", err)
	}
	if bytes.IndexByte(b, 0) >= 0 {
		return skills.Failf("notes: notes/%s is not a text file", name)
	}
	if len(b) > MaxShowBytes {
		b = append(b[:MaxShowBytes], fmt.Sprintf("\n… (cut at %s; the note is %s)\n", size(MaxShowBytes), size(fi.Size()))...)
	}
	return skills.Result{Stdout: b}
}

func (n *notebook) nameFailure(name string, err error) skills.Result {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return skills.Failf("notes: there is no note notes/%s", name)
	case errors.Is(err, errNotRegular):
		return skills.Failf("notes: notes/%s is not a regular file", name)
	case strings.Contains(err.Error(), "escapes from parent"), errors.Is(err, syscall.ELOOP):
		return skills.Failf("notes: notes/%s leads outside notes/ and is refused", name)
	case errors.Is(err, syscall.ENOTDIR):
		return skills.Failf("notes: a part of notes/%s is not a folder", name)
	}
	return skills.Internal("your notes", err)
}

func (n *notebook) search(ctx context.Context, words []string) skills.Result {
	r, ok, err := n.open(false)
	if err != nil {
		return n.failOpen(err)
	}
	if !ok {
		return skills.Result{Stdout: []byte("There are no notes yet (no notes/ folder).\n")}
	}
	defer r.Close()
	list, _, err := walk(ctx, r, ".")
	if err != nil {
		return skills.Internal("your notes", err)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].mod.After(list[j].mod) })
	all := func(s string) bool {
		s = strings.ToLower(s)
		for _, w := range words {
			if !strings.Contains(s, w) {
				return false
			}
		}
		return true
	}
	var b strings.Builder
	hits := 0
	for _, e := range list {
		if hits >= maxHits || ctx.Err() != nil {
			break
		}
		if all(e.name) {
			fmt.Fprintf(&b, "notes/%s (name matches)\n", e.name)
			hits++
		}
		if e.size > MaxNoteBytes {
			continue
		}
		f, _, err := openRegular(r, e.name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), MaxNoteBytes)
		for line := 1; sc.Scan() && hits < maxHits; line++ {
			text := sc.Text()
			if strings.ContainsRune(text, 0) {
				break // a binary file
			}
			if all(text) {
				fmt.Fprintf(&b, "notes/%s:%d: %s\n", e.name, line, clip(strings.TrimSpace(text), 300))
				hits++
			}
		}
		f.Close()
	}
	switch {
	case hits == 0:
		return skills.Result{Stdout: []byte("No note matches.\n")}
	case hits >= maxHits:
		fmt.Fprintf(&b, "(stopped after %d matches; search for more words to narrow it)\n", maxHits)
	}
	return skills.Result{Stdout: []byte(b.String())}
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func (n *notebook) write(name, text string, appendTo bool) skills.Result {
	r, _, err := n.open(true)
	if err != nil {
		return n.failOpen(err)
	}
	defer r.Close()
	if dir := path.Dir(name); dir != "." {
		if err := r.MkdirAll(dir, 0o700); err != nil {
			return n.nameFailure(name, err)
		}
	}
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	if !appendTo {
		f, err := r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return skills.Failf("notes: notes/%s already exists; use \"notes append\" to add to it", name)
		}
		if err != nil {
			return n.nameFailure(name, err)
		}
		if len(text) > MaxNoteBytes {
			f.Close()
			_ = r.Remove(name)
			return skills.Failf("notes: the text is larger than the %s a note may be", size(MaxNoteBytes))
		}
		if _, err := f.WriteString(text); err != nil {
			f.Close()
			return skills.Internal("your notes", err)
		}
		if err := f.Close(); err != nil {
			return skills.Internal("your notes", err)
		}
		return skills.Result{Stdout: []byte(fmt.Sprintf("wrote notes/%s (%s)\n", name, size(int64(len(text)))))}
	}

	fi, err := r.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fi = nil
	case err != nil:
		return n.nameFailure(name, err)
	case !fi.Mode().IsRegular():
		return skills.Failf("notes: notes/%s is not a regular file", name)
	}
	var old int64
	if fi != nil {
		old = fi.Size()
	}
	if old+int64(len(text))+1 > MaxNoteBytes {
		return skills.Failf("notes: notes/%s would grow beyond the %s a note may be; start a new note", name, size(MaxNoteBytes))
	}
	f, err := r.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_APPEND|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return n.nameFailure(name, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return skills.Failf("notes: notes/%s is not a regular file", name)
	} else if st.Size() > 0 {
		// Start on a line of its own.
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			text = "\n" + text
		}
	}
	if _, err := f.WriteString(text); err != nil {
		return skills.Internal("your notes", err)
	}
	if err := f.Close(); err != nil {
		return skills.Internal("your notes", err)
	}
	verb := "appended to"
	if fi == nil {
		verb = "wrote"
	}
	return skills.Result{Stdout: []byte(fmt.Sprintf("%s notes/%s\n", verb, name))}
}
