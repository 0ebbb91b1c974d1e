// Package curation edits USER.md (and files like it) by small operations instead of
// rewriting it: append a line to a section, add or remove a heading, replace or remove an
// exact piece of text. Each operation is checked on its own against the document as it
// stands, so a bad one is rejected with a reason while the good ones apply; the file is
// rewritten atomically and only when something changed; every operation, applied or not,
// is recorded in an audit log next to the file; and writers are serialized with a file
// lock, because the sleep cycle, the agent and the settings page may edit at once.
//
// All file access goes through an os.Root opened at the caller's workspace root: the
// workspace is writable by the agent, so a symlink planted there must not lead the
// sidecar to read or write anything outside it.
package curation

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
)

// Kind names an operation.
type Kind string

// The operations.
const (
	// Append adds Text at the end of the section under Heading, or at the end of the
	// document when Heading is empty.
	Append Kind = "append"
	// AddHeading adds a new heading (level from its leading #s, ## by default) at the end
	// of the document, with Text as its optional body. A heading that exists is refused.
	AddHeading Kind = "add_heading"
	// Replace changes Old, which must occur exactly once, to New.
	Replace Kind = "replace"
	// Remove deletes Text, which must occur exactly once; a line left empty goes too.
	Remove Kind = "remove"
	// RemoveHeading deletes Heading with its whole section, subsections included.
	RemoveHeading Kind = "remove_heading"
)

// Op is one edit. Which fields matter depends on Kind; the others are ignored.
type Op struct {
	Kind    Kind   `json:"op"`
	Heading string `json:"heading,omitempty"`
	Text    string `json:"text,omitempty"`
	Old     string `json:"old,omitempty"`
	New     string `json:"new,omitempty"`
}

// AuditMeta says who asked for the operations; it is written with each audit line.
type AuditMeta struct {
	Source string // sleep_cycle | agent | user | …
	TaskID int64  // the task behind the edit, if any
}

// OpResult is what happened to one operation.
type OpResult struct {
	Op      Op
	Applied bool
	Reason  string // why it was rejected (or why the write failed)
}

// Result is what Apply did.
type Result struct {
	Ops     []OpResult // in the order given
	Changed bool       // the file was rewritten
}

// Applied counts the operations that took effect.
func (r Result) Applied() int {
	n := 0
	for _, o := range r.Ops {
		if o.Applied {
			n++
		}
	}
	return n
}

// Rejected counts the operations that did not.
func (r Result) Rejected() int { return len(r.Ops) - r.Applied() }

// Options configure a Curator. Zero values take the defaults.
type Options struct {
	MaxOpChars      int // longest text one operation may insert (default 2000)
	MaxHeadingChars int // longest heading (default 200)
	MaxFileChars    int // the document may not grow beyond this (default 20000)
	MaxOps          int // operations per call; the rest are rejected (default 50)
	// FileMode is the mode of a file Apply creates (default 0600); an existing file
	// keeps its mode.
	FileMode fs.FileMode
	// Clock is the time source for audit lines (time.Now when nil).
	Clock func() time.Time
}

// Curator applies operations. It holds no state between calls and is safe for
// concurrent use; concurrent calls on one file wait for each other's lock.
type Curator struct {
	opts Options
}

// New returns a Curator.
func New(opts Options) *Curator {
	if opts.MaxOpChars <= 0 {
		opts.MaxOpChars = 2000
	}
	if opts.MaxHeadingChars <= 0 {
		opts.MaxHeadingChars = 200
	}
	if opts.MaxFileChars <= 0 {
		opts.MaxFileChars = 20000
	}
	if opts.MaxOps <= 0 {
		opts.MaxOps = 50
	}
	if opts.FileMode == 0 {
		opts.FileMode = 0o600
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	return &Curator{opts: opts}
}

// LockSuffix and AuditSuffix name the files kept beside the curated one.
const (
	LockSuffix  = ".lock"
	AuditSuffix = ".audit.jsonl"
)

// Apply applies ops in order to the file name ('/'-separated, relative to root) and
// returns what happened to each. A missing file is an empty document, created (with its
// folders) when an operation adds something. The returned error is for failures of the
// file system only (lock, read, write, audit); rejected operations are not errors.
func (c *Curator) Apply(ctx context.Context, root, name string, ops []Op, meta AuditMeta) (Result, error) {
	name = path.Clean(strings.TrimPrefix(name, "/"))
	if name == "." || strings.HasPrefix(name, "../") || name == ".." {
		return Result{}, fmt.Errorf("curation: bad file name %q", name)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return Result{}, fmt.Errorf("curation: open workspace root: %w", err)
	}
	defer r.Close()
	if dir := path.Dir(name); dir != "." {
		if err := r.MkdirAll(dir, 0o700); err != nil {
			return Result{}, fmt.Errorf("curation: create %s: %w", dir, err)
		}
	}

	unlock, err := lock(ctx, r, name+LockSuffix)
	if err != nil {
		return Result{}, fmt.Errorf("curation: lock %s: %w", name, err)
	}
	defer unlock()

	orig, mode, exists, err := readDoc(r, name)
	if err != nil {
		return Result{}, fmt.Errorf("curation: read %s: %w", name, err)
	}
	crlf := strings.Contains(orig, "\r\n")
	doc := strings.ReplaceAll(orig, "\r\n", "\n")

	res := Result{Ops: make([]OpResult, len(ops))}
	changed := false
	for i, op := range ops {
		res.Ops[i].Op = op
		if i >= c.opts.MaxOps {
			res.Ops[i].Reason = fmt.Sprintf("too many operations in one call (at most %d)", c.opts.MaxOps)
			continue
		}
		next, err := c.apply(doc, op)
		if err == nil && len(next) > c.opts.MaxFileChars && len(next) > len(doc) {
			err = fmt.Errorf("the file would grow beyond %d characters", c.opts.MaxFileChars)
		}
		if err != nil {
			res.Ops[i].Reason = err.Error()
			continue
		}
		res.Ops[i].Applied = true
		doc = next
		changed = true
	}

	var writeErr error
	if changed {
		out := doc
		if crlf {
			out = strings.ReplaceAll(out, "\n", "\r\n")
		}
		if out != orig {
			if !exists {
				mode = c.opts.FileMode
			}
			writeErr = WriteAtomic(r, name, []byte(out), mode)
			res.Changed = writeErr == nil
		}
		if writeErr != nil {
			for i := range res.Ops {
				if res.Ops[i].Applied {
					res.Ops[i].Applied = false
					res.Ops[i].Reason = "not saved: the file could not be written"
				}
			}
		}
	}
	auditErr := c.audit(r, name+AuditSuffix, res, meta)
	if writeErr != nil {
		return res, fmt.Errorf("curation: write %s: %w", name, writeErr)
	}
	if auditErr != nil {
		return res, fmt.Errorf("curation: audit %s: %w", name, auditErr)
	}
	return res, nil
}

// KindReplace is the audit kind of a whole-file replacement made with Replace.
const KindReplace Kind = "edit"

// Replace replaces the whole file with content under the same lock Apply takes, so a
// person's edit (the settings page) and a curation never interleave. check sees the
// current content first and may refuse (a stale ETag); its error is returned as is and
// nothing is written. An unchanged file is not rewritten. The replacement is audited
// like an operation, with meta's source.
func (c *Curator) Replace(ctx context.Context, root, name string, content []byte, check func(current []byte) error, meta AuditMeta) (changed bool, err error) {
	name = path.Clean(strings.TrimPrefix(name, "/"))
	if name == "." || strings.HasPrefix(name, "../") || name == ".." {
		return false, fmt.Errorf("curation: bad file name %q", name)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return false, fmt.Errorf("curation: create workspace root: %w", err)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return false, fmt.Errorf("curation: open workspace root: %w", err)
	}
	defer r.Close()
	if dir := path.Dir(name); dir != "." {
		if err := r.MkdirAll(dir, 0o700); err != nil {
			return false, fmt.Errorf("curation: create %s: %w", dir, err)
		}
	}
	unlock, err := lock(ctx, r, name+LockSuffix)
	if err != nil {
		return false, fmt.Errorf("curation: lock %s: %w", name, err)
	}
	defer unlock()
	orig, mode, exists, err := readDoc(r, name)
	if err != nil {
		return false, fmt.Errorf("curation: read %s: %w", name, err)
	}
	if err := check([]byte(orig)); err != nil {
		return false, err
	}
	if orig == string(content) {
		return false, nil
	}
	if !exists {
		mode = c.opts.FileMode
	}
	if err := WriteAtomic(r, name, content, mode); err != nil {
		return false, fmt.Errorf("curation: write %s: %w", name, err)
	}
	res := Result{Changed: true, Ops: []OpResult{{Applied: true, Op: Op{Kind: KindReplace,
		Text: fmt.Sprintf("replaced the whole file (%d → %d bytes)", len(orig), len(content))}}}}
	if err := c.audit(r, name+AuditSuffix, res, meta); err != nil {
		return true, fmt.Errorf("curation: audit %s: %w", name, err)
	}
	return true, nil
}

// apply applies one operation to doc (LF line endings) or says why not.
func (c *Curator) apply(doc string, op Op) (string, error) {
	lines := splitLines(doc)
	hs := headings(lines)
	switch op.Kind {
	case Append:
		text, err := c.checkText("text", op.Text)
		if err != nil {
			return "", err
		}
		block := strings.Split(text, "\n")
		if strings.TrimSpace(op.Heading) == "" {
			if containsBlock(lines, 0, len(lines), text) {
				return "", errors.New("the text is already in the file")
			}
			return joinLines(insertBlock(lines, len(lines), -1, block)), nil
		}
		h, err := c.oneHeading(hs, op.Heading)
		if err != nil {
			return "", err
		}
		end := bodyEnd(hs, h, len(lines))
		if containsBlock(lines, h.line+1, end, text) {
			return "", fmt.Errorf("the text is already under %q", h.title)
		}
		return joinLines(insertBlock(lines, end, h.line, block)), nil

	case AddHeading:
		level, title, err := c.checkHeading(op.Heading)
		if err != nil {
			return "", err
		}
		if len(findHeading(hs, title)) > 0 {
			return "", fmt.Errorf("heading %q already exists", title)
		}
		block := []string{strings.Repeat("#", level) + " " + title}
		if strings.TrimSpace(op.Text) != "" {
			text, err := c.checkText("text", op.Text)
			if err != nil {
				return "", err
			}
			block = append(block, "")
			block = append(block, strings.Split(text, "\n")...)
		}
		if len(lines) > 0 {
			lines = append(trimTrailingBlank(lines), "")
		}
		return joinLines(append(lines, block...)), nil

	case Replace:
		if op.Old == "" {
			return "", errors.New("old is empty")
		}
		if strings.TrimSpace(op.New) == "" {
			return "", errors.New("new is empty (to delete text, use remove)")
		}
		newText, err := c.checkText("new", op.New)
		if err != nil {
			return "", err
		}
		old := strings.ReplaceAll(op.Old, "\r\n", "\n")
		at, err := c.findOnce(doc, lines, hs, old, "old")
		if err != nil {
			return "", err
		}
		// Surrounding blank lines of the model's New are noise; keep the document's own.
		if strings.TrimSpace(old) == newText {
			return "", errors.New("new is the same as old")
		}
		return doc[:at] + replacementFor(old, newText) + doc[at+len(old):], nil

	case Remove:
		if strings.TrimSpace(op.Text) == "" {
			return "", errors.New("text is empty")
		}
		text := strings.ReplaceAll(op.Text, "\r\n", "\n")
		at, err := c.findOnce(doc, lines, hs, text, "text")
		if err != nil {
			return "", err
		}
		return removeAt(doc, at, len(text)), nil

	case RemoveHeading:
		if strings.TrimSpace(op.Heading) == "" {
			return "", errors.New("heading is empty")
		}
		h, err := c.oneHeading(hs, op.Heading)
		if err != nil {
			return "", err
		}
		end := sectionEnd(hs, h, len(lines))
		out := append(append([]string{}, lines[:h.line]...), lines[end:]...)
		return joinLines(squeezeBlankAt(out, h.line)), nil

	case "":
		return "", errors.New("op is missing")
	default:
		return "", fmt.Errorf("unknown op %q (want append, add_heading, replace, remove or remove_heading)", clip(string(op.Kind), 40))
	}
}

// checkText validates text an operation inserts and returns it without surrounding
// blank lines and trailing spaces.
func (c *Curator) checkText(field, s string) (string, error) {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRightFunc(l, unicode.IsSpace)
	}
	s = strings.Trim(strings.Join(lines, "\n"), "\n")
	switch {
	case strings.TrimSpace(s) == "":
		return "", fmt.Errorf("%s is empty", field)
	case utf8.RuneCountInString(s) > c.opts.MaxOpChars:
		return "", fmt.Errorf("%s is longer than %d characters", field, c.opts.MaxOpChars)
	case !utf8.ValidString(s):
		return "", fmt.Errorf("%s is not valid UTF-8", field)
	case strings.IndexFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) >= 0:
		return "", fmt.Errorf("%s contains control characters", field)
	case hasHeading(s):
		return "", fmt.Errorf("%s contains a heading (use add_heading)", field)
	}
	return s, nil
}

// checkHeading validates a heading for add_heading: one line, level 1 to 6 (## when no
// #s are given), a title of at most MaxHeadingChars.
func (c *Curator) checkHeading(s string) (int, string, error) {
	s = strings.TrimSpace(s)
	if strings.ContainsAny(s, "\r\n") {
		return 0, "", errors.New("heading must be one line")
	}
	level, title := 2, s
	if strings.HasPrefix(s, "#") {
		var ok bool
		level, title, ok = parseHeadingLine(s)
		if !ok {
			return 0, "", errors.New("heading must be 1 to 6 '#' followed by a space and a title")
		}
	}
	title = strings.Join(strings.Fields(title), " ")
	switch {
	case title == "":
		return 0, "", errors.New("heading is empty")
	case utf8.RuneCountInString(title) > c.opts.MaxHeadingChars:
		return 0, "", fmt.Errorf("heading is longer than %d characters", c.opts.MaxHeadingChars)
	case !utf8.ValidString(title) || strings.IndexFunc(title, unicode.IsControl) >= 0:
		return 0, "", errors.New("heading contains control characters")
	}
	return level, title, nil
}

// oneHeading finds the single heading matching want.
func (c *Curator) oneHeading(hs []heading, want string) (heading, error) {
	found := findHeading(hs, want)
	switch len(found) {
	case 0:
		return heading{}, fmt.Errorf("heading %q not found", clip(strings.TrimSpace(want), 80))
	case 1:
		return found[0], nil
	default:
		return heading{}, fmt.Errorf("heading %q occurs %d times", clip(strings.TrimSpace(want), 80), len(found))
	}
}

// findOnce returns the offset of the single occurrence of s in doc, refusing text that
// is absent, ambiguous or touches a heading line (headings change only through
// add_heading and remove_heading, so the document's structure stays intact).
func (c *Curator) findOnce(doc string, lines []string, hs []heading, s, field string) (int, error) {
	switch n := strings.Count(doc, s); n {
	case 0:
		return 0, fmt.Errorf("%s not found in the file", field)
	case 1:
	default:
		return 0, fmt.Errorf("%s occurs %d times (quote more of the text)", field, n)
	}
	at := strings.Index(doc, s)
	offsets := lineOffsets(lines)
	for _, h := range hs {
		start := offsets[h.line]
		end := start + len(lines[h.line])
		if at < end && at+len(s) > start {
			return 0, fmt.Errorf("%s touches the heading %q (use add_heading or remove_heading)", field, h.title)
		}
	}
	return at, nil
}

// replacementFor keeps the line structure around a replaced piece: when old spanned
// whole lines (ended with a newline) so does the replacement.
func replacementFor(old, newText string) string {
	if strings.HasSuffix(old, "\n") {
		return newText + "\n"
	}
	return newText
}

// removeAt deletes doc[at:at+n]; when that empties a line, or leaves only a list
// marker, the line goes too, and a doubled blank line at the seam is squeezed.
func removeAt(doc string, at, n int) string {
	lineStart := strings.LastIndex(doc[:at], "\n") + 1
	lineEnd := len(doc)
	if i := strings.Index(doc[at+n:], "\n"); i >= 0 {
		lineEnd = at + n + i
	}
	rest := doc[lineStart:at] + doc[at+n:lineEnd]
	if isBlank(rest) || isBareMarker(rest) {
		// Drop the whole line(s) including the newline after them.
		cut := lineEnd
		if cut < len(doc) {
			cut++
		}
		before := splitLines(doc[:lineStart])
		after := splitLines(doc[cut:])
		return joinLines(squeezeBlankAt(append(before, after...), len(before)))
	}
	return doc[:at] + doc[at+n:]
}

// containsBlock reports whether text already occurs within lines[from:to].
func containsBlock(lines []string, from, to int, text string) bool {
	if from >= to {
		return false
	}
	return strings.Contains(strings.Join(lines[from:to], "\n"), text)
}

func splitLines(doc string) []string {
	if doc == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(doc, "\n"), "\n")
}

func joinLines(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

func lineOffsets(lines []string) []int {
	out := make([]int, len(lines))
	off := 0
	for i, l := range lines {
		out[i] = off
		off += len(l) + 1
	}
	return out
}

func trimTrailingBlank(lines []string) []string {
	for len(lines) > 0 && isBlank(lines[len(lines)-1]) {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// lock takes an exclusive flock on the lock file, polling so that ctx can end the wait.
// Every writer (goroutine or process) opens the file itself: flock conflicts between
// separate opens even within one process.
func lock(ctx context.Context, r *os.Root, name string) (func(), error) {
	f, err := r.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	wait := 5 * time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		if wait < 200*time.Millisecond {
			wait *= 2
		}
	}
}

// readDoc reads the file; a missing file is an empty document.
func readDoc(r *os.Root, name string) (doc string, mode fs.FileMode, exists bool, err error) {
	f, err := r.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, false, err
	}
	if !fi.Mode().IsRegular() {
		return "", 0, false, fmt.Errorf("%s is not a regular file", name)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "", 0, false, err
	}
	return string(b), fi.Mode().Perm(), true, nil
}

// WriteAtomic replaces name with data: a temporary file in the same folder, synced,
// given the old file's mode (and owner, when the sidecar runs as root), then renamed
// over it, so a reader sees the old or the new document, never half of one.
func WriteAtomic(r *os.Root, name string, data []byte, mode fs.FileMode) error {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	dir := path.Dir(name)
	tmp := path.Join(dir, "."+path.Base(name)+".tmp-"+hex.EncodeToString(rnd[:]))
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			_ = r.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil { // the umask may have narrowed it
		return err
	}
	if fi, err := r.Lstat(name); err == nil && os.Geteuid() == 0 {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			if err := f.Chown(int(st.Uid), int(st.Gid)); err != nil {
				return err
			}
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := r.Rename(tmp, name); err != nil {
		return err
	}
	ok = true
	if d, err := r.Open(dir); err == nil {
		_ = d.Sync() // the rename is durable once the folder is synced
		d.Close()
	}
	return nil
}

// auditLine is one line of the audit log.
type auditLine struct {
	Time    string `json:"time"`
	Op      Kind   `json:"op"`
	Heading string `json:"heading,omitempty"`
	Text    string `json:"text,omitempty"`
	Old     string `json:"old,omitempty"`
	New     string `json:"new,omitempty"`
	Result  string `json:"result"` // applied | rejected
	Reason  string `json:"reason,omitempty"`
	Source  string `json:"source,omitempty"`
	TaskID  int64  `json:"task_id,omitempty"`
}

// maxAuditField bounds each text field of an audit line: a rejected oversized operation
// is recorded, but not in full.
const maxAuditField = 4000

func (c *Curator) audit(r *os.Root, name string, res Result, meta AuditMeta) error {
	if len(res.Ops) == 0 {
		return nil
	}
	now := c.opts.Clock().UTC().Format(time.RFC3339)
	var b strings.Builder
	for _, o := range res.Ops {
		l := auditLine{
			Time: now, Op: Kind(clip(string(o.Op.Kind), 40)),
			Heading: clip(o.Op.Heading, maxAuditField), Text: clip(o.Op.Text, maxAuditField),
			Old: clip(o.Op.Old, maxAuditField), New: clip(o.Op.New, maxAuditField),
			Result: "rejected", Reason: o.Reason, Source: meta.Source, TaskID: meta.TaskID,
		}
		if o.Applied {
			l.Result = "applied"
		}
		j, err := json.Marshal(l)
		if err != nil {
			return err
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	f, err := r.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, c.opts.FileMode)
	if err != nil {
		return err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return fmt.Errorf("%s is not a regular file", name)
	}
	// One write of whole lines: the lock already keeps writers apart.
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
