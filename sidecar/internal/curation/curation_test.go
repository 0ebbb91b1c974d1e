package curation

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const name = "istota/config/USER.md"

var fixedNow = time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)

func newCurator(opts Options) *Curator {
	opts.Clock = func() time.Time { return fixedNow }
	return New(opts)
}

func writeDoc(t *testing.T, root, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func readAudit(t *testing.T, root string) []auditLine {
	t.Helper()
	f, err := os.Open(filepath.Join(root, filepath.FromSlash(name+AuditSuffix)))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

const base = `# About Alice

Alice is a developer.

## Preferences
- likes tea
- dislikes meetings before 10

### Food
- vegetarian

## Work
Works on the billing system.

` + "```sh" + `
# not a heading: a shell comment
echo hi
` + "```" + `
`

func TestOps(t *testing.T) {
	for _, tc := range []struct {
		name   string
		doc    string
		ops    []Op
		want   string   // the document afterwards
		reject []string // for each op: "" applied, or a piece of its reason
	}{
		{
			name:   "append under a heading goes before its subsections and continues the list",
			doc:    base,
			ops:    []Op{{Kind: Append, Heading: "preferences", Text: "- likes jazz"}},
			want:   strings.Replace(base, "- dislikes meetings before 10\n", "- dislikes meetings before 10\n- likes jazz\n", 1),
			reject: []string{""},
		},
		{
			name:   "append accepts the heading with its #s",
			doc:    base,
			ops:    []Op{{Kind: Append, Heading: "### Food", Text: "- no mushrooms"}},
			want:   strings.Replace(base, "- vegetarian\n", "- vegetarian\n- no mushrooms\n", 1),
			reject: []string{""},
		},
		{
			name:   "append a paragraph after a paragraph keeps a blank line",
			doc:    "## Work\nWorks on billing.\n\n## Next\n",
			ops:    []Op{{Kind: Append, Heading: "Work", Text: "Leads the team since May."}},
			want:   "## Work\nWorks on billing.\n\nLeads the team since May.\n\n## Next\n",
			reject: []string{""},
		},
		{
			name:   "append to an empty section",
			doc:    "## Empty\n## Next\n- x\n",
			ops:    []Op{{Kind: Append, Heading: "Empty", Text: "- first"}},
			want:   "## Empty\n\n- first\n\n## Next\n- x\n",
			reject: []string{""},
		},
		{
			name:   "append without heading goes to the end",
			doc:    base,
			ops:    []Op{{Kind: Append, Text: "Last line."}},
			want:   base + "\nLast line.\n",
			reject: []string{""},
		},
		{
			name:   "append to an empty file",
			doc:    "",
			ops:    []Op{{Kind: Append, Text: "- hello  \n\n"}},
			want:   "- hello\n",
			reject: []string{""},
		},
		{
			name: "append rejections",
			doc:  base,
			ops: []Op{
				{Kind: Append, Heading: "Hobbies", Text: "- chess"},
				{Kind: Append, Heading: "Preferences", Text: "  \n "},
				{Kind: Append, Heading: "Preferences", Text: "- likes tea"},
				{Kind: Append, Heading: "Preferences", Text: "## Sneaky\n- x"},
				{Kind: Append, Heading: "Preferences", Text: strings.Repeat("x", 2001)},
				{Kind: Append, Heading: "not a heading: a shell comment", Text: "- x"},
				{Kind: Append, Text: "bell\a"},
			},
			want:   base,
			reject: []string{"not found", "empty", "already under", "contains a heading", "longer than 2000", "not found", "control characters"},
		},
		{
			name: "add_heading at the end, with a body; duplicates refused in any case and level",
			doc:  base,
			ops: []Op{
				{Kind: AddHeading, Heading: "Hobbies", Text: "- chess"},
				{Kind: AddHeading, Heading: "## hobbies"},
				{Kind: AddHeading, Heading: "# FOOD"},
				{Kind: AddHeading, Heading: "not a heading: a shell comment"},
				{Kind: AddHeading, Heading: "####### seven"},
				{Kind: AddHeading, Heading: "two\nlines"},
				{Kind: AddHeading, Heading: "  "},
			},
			want:   base + "\n## Hobbies\n\n- chess\n\n## not a heading: a shell comment\n",
			reject: []string{"", "already exists", "already exists", "", "1 to 6", "one line", "empty"},
		},
		{
			name:   "add_heading with an explicit level, then append to it",
			doc:    "",
			ops:    []Op{{Kind: AddHeading, Heading: "### Deep"}, {Kind: Append, Heading: "Deep", Text: "- item"}},
			want:   "### Deep\n\n- item\n",
			reject: []string{"", ""},
		},
		{
			name: "replace needs exactly one occurrence",
			doc:  base,
			ops: []Op{
				{Kind: Replace, Old: "likes tea", New: "likes green tea"},
				{Kind: Replace, Old: "likes", New: "loves"},
				{Kind: Replace, Old: "coffee", New: "tea"},
				{Kind: Replace, Old: "vegetarian", New: ""},
				{Kind: Replace, Old: "vegetarian", New: "vegetarian"},
				{Kind: Replace, Old: "Work\nWorks", New: "x"},
				{Kind: Replace, Old: "", New: "x"},
				{Kind: Replace, Old: "the billing system", New: "two\n## Heading"},
			},
			want:   strings.Replace(base, "- likes tea", "- likes green tea", 1),
			reject: []string{"", "occurs 2 times", "not found", "use remove", "same as old", "touches the heading", "old is empty", "contains a heading"},
		},
		{
			name:   "replace whole lines keeps the line structure",
			doc:    "- a\n- b\n- c\n",
			ops:    []Op{{Kind: Replace, Old: "- b\n", New: "- B1\n- B2\n\n"}},
			want:   "- a\n- B1\n- B2\n- c\n",
			reject: []string{""},
		},
		{
			name: "remove a list item takes its line; a phrase inside a line stays a phrase",
			doc:  base,
			ops: []Op{
				{Kind: Remove, Text: "dislikes meetings before 10"},
				{Kind: Remove, Text: " on the billing system"},
				{Kind: Remove, Text: "e"},
				{Kind: Remove, Text: "nothing like this"},
				{Kind: Remove, Text: "## Work"},
				{Kind: Remove, Text: " "},
			},
			want: strings.Replace(strings.Replace(base, "- dislikes meetings before 10\n", "", 1),
				"Works on the billing system.", "Works.", 1),
			reject: []string{"", "", "occurs", "not found", "touches the heading", "empty"},
		},
		{
			name:   "remove a paragraph squeezes the blank lines",
			doc:    "# T\n\nfirst\n\nsecond\n\nthird\n",
			ops:    []Op{{Kind: Remove, Text: "second"}},
			want:   "# T\n\nfirst\n\nthird\n",
			reject: []string{""},
		},
		{
			name: "remove_heading takes its subsections, not the code block comment",
			doc:  base,
			ops: []Op{
				{Kind: RemoveHeading, Heading: "Preferences"},
				{Kind: RemoveHeading, Heading: "not a heading: a shell comment"},
				{Kind: RemoveHeading, Heading: "Food"},
			},
			want:   strings.Replace(base, "## Preferences\n- likes tea\n- dislikes meetings before 10\n\n### Food\n- vegetarian\n\n", "", 1),
			reject: []string{"", "not found", "not found"},
		},
		{
			name:   "remove_heading of the last section trims the end",
			doc:    "# A\n\ntext\n\n## B\n- b\n",
			ops:    []Op{{Kind: RemoveHeading, Heading: "B"}},
			want:   "# A\n\ntext\n",
			reject: []string{""},
		},
		{
			name:   "ambiguous heading",
			doc:    "## Notes\n- a\n\n## Notes\n- b\n",
			ops:    []Op{{Kind: Append, Heading: "Notes", Text: "- c"}, {Kind: RemoveHeading, Heading: "notes"}},
			want:   "## Notes\n- a\n\n## Notes\n- b\n",
			reject: []string{"occurs 2 times", "occurs 2 times"},
		},
		{
			name:   "headings: closing #s, tilde fences, indented code and hashtags",
			doc:    "## Closed ##\n~~~\n## fenced\n~~~\n    ## indented code\n#hashtag\n",
			ops:    []Op{{Kind: Append, Heading: "Closed", Text: "- x"}, {Kind: AddHeading, Heading: "fenced"}, {Kind: AddHeading, Heading: "hashtag"}},
			want:   "## Closed ##\n~~~\n## fenced\n~~~\n    ## indented code\n#hashtag\n\n- x\n\n## fenced\n\n## hashtag\n",
			reject: []string{"", "", ""},
		},
		{
			name:   "unknown and missing kinds",
			doc:    base,
			ops:    []Op{{Kind: "rewrite", Text: "x"}, {Text: "x"}},
			want:   base,
			reject: []string{"unknown op", "op is missing"},
		},
		{
			name:   "later ops see earlier ones",
			doc:    "",
			ops:    []Op{{Kind: AddHeading, Heading: "A"}, {Kind: AddHeading, Heading: "A"}, {Kind: Append, Heading: "A", Text: "- 1"}, {Kind: Replace, Old: "- 1", New: "- one"}, {Kind: RemoveHeading, Heading: "A"}},
			want:   "",
			reject: []string{"", "already exists", "", "", ""},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.reject) != len(tc.ops) {
				t.Fatalf("test table: %d ops, %d expectations", len(tc.ops), len(tc.reject))
			}
			root := t.TempDir()
			p := filepath.Join(root, filepath.FromSlash(name))
			if tc.doc != "" {
				writeDoc(t, root, tc.doc, 0o640)
			}
			res, err := newCurator(Options{}).Apply(context.Background(), root, name, tc.ops, AuditMeta{Source: "test", TaskID: 7})
			if err != nil {
				t.Fatal(err)
			}
			for i, o := range res.Ops {
				if tc.reject[i] == "" && !o.Applied {
					t.Errorf("op %d %+v rejected: %s", i, o.Op, o.Reason)
				}
				if tc.reject[i] != "" && (o.Applied || !strings.Contains(o.Reason, tc.reject[i])) {
					t.Errorf("op %d %+v: applied=%v reason %q, want rejection with %q", i, o.Op, o.Applied, o.Reason, tc.reject[i])
				}
			}
			got, err := os.ReadFile(p)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("document:\n%s\n--- want:\n%s", got, tc.want)
			}
			audit := readAudit(t, root)
			if len(audit) != len(tc.ops) {
				t.Fatalf("%d audit lines for %d ops", len(audit), len(tc.ops))
			}
			for i, l := range audit {
				wantResult := map[bool]string{true: "applied", false: "rejected"}[res.Ops[i].Applied]
				if l.Result != wantResult || l.Reason != res.Ops[i].Reason || l.Op != tc.ops[i].Kind ||
					l.Source != "test" || l.TaskID != 7 || l.Time != "2026-03-29T01:00:00Z" {
					t.Errorf("audit line %d = %+v", i, l)
				}
			}
		})
	}
}

func TestRewritesOnlyOnChangeAndKeepsMode(t *testing.T) {
	root := t.TempDir()
	p := writeDoc(t, root, base, 0o640)
	ino := func() uint64 {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	before := ino()
	c := newCurator(Options{})
	ctx := context.Background()
	res, err := c.Apply(ctx, root, name, []Op{{Kind: Remove, Text: "absent"}, {Kind: AddHeading, Heading: "Work"}}, AuditMeta{})
	if err != nil || res.Changed || res.Applied() != 0 || res.Rejected() != 2 {
		t.Fatalf("%+v %v", res, err)
	}
	if ino() != before {
		t.Fatal("the file was rewritten although nothing changed")
	}
	res, err = c.Apply(ctx, root, name, []Op{{Kind: Append, Heading: "Work", Text: "Also on-call."}, {Kind: Remove, Text: "absent"}}, AuditMeta{})
	if err != nil || !res.Changed || res.Applied() != 1 || res.Rejected() != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	if ino() == before {
		t.Fatal("a changed file was written in place, not replaced atomically")
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want 0640", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temporary file left behind: %s", e.Name())
		}
	}
	if got := len(readAudit(t, root)); got != 4 {
		t.Fatalf("%d audit lines, want 4", got)
	}
}

func TestNewFileModeAndCRLF(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	res, err := newCurator(Options{}).Apply(ctx, root, name, []Op{{Kind: Append, Text: "- a"}}, AuditMeta{})
	if err != nil || !res.Changed {
		t.Fatalf("%+v %v", res, err)
	}
	fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("new file: %v %v", fi.Mode(), err)
	}

	p := writeDoc(t, root, "## A\r\n- a\r\n", 0o600)
	if _, err := newCurator(Options{}).Apply(ctx, root, name, []Op{{Kind: Append, Heading: "A", Text: "- b\r\n- c"}}, AuditMeta{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); string(got) != "## A\r\n- a\r\n- b\r\n- c\r\n" {
		t.Fatalf("CRLF document became %q", got)
	}
}

func TestFileCapAndOpCount(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	big := "## A\n" + strings.Repeat("- filler line\n", 10)
	p := writeDoc(t, root, big, 0o600)
	c := newCurator(Options{MaxFileChars: len(big) + 10, MaxOps: 3})
	res, err := c.Apply(ctx, root, name, []Op{
		{Kind: Append, Heading: "A", Text: "- short"},         // +8: fits
		{Kind: Append, Heading: "A", Text: "- too long now"},  // would pass the cap
		{Kind: Remove, Text: "- short"},                       // shrinking is always allowed
		{Kind: Append, Heading: "A", Text: "- beyond MaxOps"}, // fourth op
	}, AuditMeta{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"", "grow beyond", "", "too many operations"}
	for i, o := range res.Ops {
		if (want[i] == "") != o.Applied || !strings.Contains(o.Reason, want[i]) {
			t.Errorf("op %d: applied=%v reason=%q, want %q", i, o.Applied, o.Reason, want[i])
		}
	}
	// Applying and then removing the same line gives the original back: no rewrite.
	if res.Changed {
		t.Error("Changed although the document ended as it began")
	}
	if got, _ := os.ReadFile(p); string(got) != big {
		t.Fatalf("document %q", got)
	}
	// A document already over the cap (edited by hand) can still shrink.
	c = newCurator(Options{MaxFileChars: 20})
	res, err = c.Apply(ctx, root, name, []Op{{Kind: RemoveHeading, Heading: "A"}, {Kind: Append, Text: "- x"}}, AuditMeta{})
	if err != nil || !res.Ops[0].Applied || !res.Ops[1].Applied {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestSymlinkOutsideTheRootIsRefused(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(outside, []byte("TOP SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct{ name, link string }{
		{"the file itself", filepath.FromSlash(name)},
		{"the audit log", filepath.FromSlash(name + AuditSuffix)},
		{"a parent folder", "istota"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.RemoveAll(filepath.Join(root, "istota"))
			target := outside
			if tc.link == "istota" {
				target = filepath.Dir(outside)
			} else {
				writeDoc(t, root, "## A\n", 0o600)
				os.Remove(filepath.Join(root, tc.link))
			}
			if err := os.Symlink(target, filepath.Join(root, tc.link)); err != nil {
				t.Fatal(err)
			}
			_, err := newCurator(Options{}).Apply(ctx, root, name, []Op{{Kind: Append, Text: "- leaked?"}}, AuditMeta{})
			if err == nil {
				t.Fatal("Apply followed a symlink out of the workspace")
			}
			if got, _ := os.ReadFile(outside); string(got) != "TOP SECRET\n" {
				t.Fatalf("outside file changed: %q", got)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(outside), "config")); err == nil {
				t.Fatal("a folder was created outside the workspace")
			}
		})
	}
	if _, err := newCurator(Options{}).Apply(ctx, root, "../x.md", nil, AuditMeta{}); err == nil {
		t.Fatal("a name climbing out of the root was accepted")
	}
}

func TestLockWaitEndsWithContext(t *testing.T) {
	root := t.TempDir()
	writeDoc(t, root, "## A\n", 0o600)
	f, err := os.OpenFile(filepath.Join(root, filepath.FromSlash(name+LockSuffix)), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = newCurator(Options{}).Apply(ctx, root, name, []Op{{Kind: Append, Heading: "A", Text: "- x"}}, AuditMeta{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Apply while locked: %v", err)
	}
	if got := readAudit(t, root); len(got) != 0 {
		t.Fatalf("audit written without the lock: %+v", got)
	}
}

// checkAllLines verifies that every writer's every line made it into the document and
// the audit log: with a lost update some would be missing.
func checkAllLines(t *testing.T, root string, writers, each int) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	for w := range writers {
		for i := range each {
			if line := fmt.Sprintf("- writer %d line %d\n", w, i); !strings.Contains(string(got), line) {
				t.Errorf("lost %q", line)
			}
		}
	}
	if n := strings.Count(string(got), "- writer "); n != writers*each {
		t.Errorf("%d lines, want %d", n, writers*each)
	}
	if n := len(readAudit(t, root)); n != writers*each {
		t.Errorf("%d audit lines, want %d", n, writers*each)
	}
}

func TestConcurrentGoroutinesAreSerialized(t *testing.T) {
	root := t.TempDir()
	writeDoc(t, root, "## Log\n", 0o600)
	const writers, each = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newCurator(Options{MaxFileChars: 1 << 20})
			for i := range each {
				res, err := c.Apply(context.Background(), root, name,
					[]Op{{Kind: Append, Heading: "Log", Text: fmt.Sprintf("- writer %d line %d", w, i)}}, AuditMeta{Source: "test"})
				if err == nil && res.Applied() != 1 {
					err = fmt.Errorf("rejected: %s", res.Ops[0].Reason)
				}
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkAllLines(t, root, writers, each)
}

// TestHelperProcess is not a test: TestConcurrentProcessesAreSerialized runs the test
// binary again with CURATION_HELPER set, and each such process appends its lines.
func TestHelperProcess(t *testing.T) {
	root := os.Getenv("CURATION_HELPER_ROOT")
	if root == "" {
		t.Skip("helper for TestConcurrentProcessesAreSerialized")
	}
	w, _ := strconv.Atoi(os.Getenv("CURATION_HELPER_WRITER"))
	each, _ := strconv.Atoi(os.Getenv("CURATION_HELPER_EACH"))
	c := New(Options{MaxFileChars: 1 << 20})
	for i := range each {
		res, err := c.Apply(context.Background(), root, name,
			[]Op{{Kind: Append, Heading: "Log", Text: fmt.Sprintf("- writer %d line %d", w, i)}}, AuditMeta{Source: "process"})
		if err != nil || res.Applied() != 1 {
			fmt.Fprintf(os.Stderr, "writer %d line %d: %+v %v\n", w, i, res, err)
			os.Exit(1)
		}
	}
}

func TestConcurrentProcessesAreSerialized(t *testing.T) {
	root := t.TempDir()
	writeDoc(t, root, "## Log\n", 0o600)
	const writers, each = 4, 15
	var cmds []*exec.Cmd
	for w := range writers {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "CURATION_HELPER_ROOT="+root,
			"CURATION_HELPER_WRITER="+strconv.Itoa(w), "CURATION_HELPER_EACH="+strconv.Itoa(each))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("writer process: %v", err)
		}
	}
	checkAllLines(t, root, writers, each)
}

func TestOpJSON(t *testing.T) {
	var ops []Op
	if err := json.Unmarshal([]byte(`[{"op":"replace","old":"a","new":"b"},{"op":"append","heading":"H","text":"t"}]`), &ops); err != nil {
		t.Fatal(err)
	}
	want := []Op{{Kind: Replace, Old: "a", New: "b"}, {Kind: Append, Heading: "H", Text: "t"}}
	if fmt.Sprint(ops) != fmt.Sprint(want) {
		t.Fatalf("got %+v", ops)
	}
}
