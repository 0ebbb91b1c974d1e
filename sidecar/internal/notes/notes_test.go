package notes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/skills"
)

type env struct {
	t    *testing.T
	root string // the user's workspace
	sk   skills.Skill
}

func newEnv(t *testing.T) *env {
	t.Helper()
	root := t.TempDir()
	sk, err := Skill(Options{
		Root: func(uid string) (string, error) {
			if uid != "alice" {
				t.Errorf("root asked for %q", uid)
			}
			return root, nil
		},
		Zone: func(context.Context, string) *time.Location { return time.FixedZone("X", 2*3600) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, root: root, sk: sk}
}

func (e *env) run(stdin string, args ...string) skills.Result {
	e.t.Helper()
	return e.sk.Run(context.Background(), skills.Invocation{UserID: "alice", TaskID: 1, Args: args, Stdin: []byte(stdin)})
}

func (e *env) write(rel, content string) {
	e.t.Helper()
	p := filepath.Join(e.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

func want(t *testing.T, r skills.Result, code int, out string) {
	t.Helper()
	if r.ExitCode != code {
		t.Fatalf("exit %d, want %d; stdout %q stderr %q err %v", r.ExitCode, code, r.Stdout, r.Stderr, r.Err)
	}
	text := string(r.Stdout) + string(r.Stderr)
	if !strings.Contains(text, out) {
		t.Fatalf("output %q does not contain %q", text, out)
	}
}

func TestAddReadAppendListSearch(t *testing.T) {
	e := newEnv(t)
	want(t, e.run("", "list"), 0, "no notes/ folder")
	want(t, e.run("", "add", "ideas", "Buy", "a", "kayak"), 0, "wrote notes/ideas.md")
	want(t, e.run("", "add", "ideas.md", "again"), 1, "already exists")
	want(t, e.run("Second line", "append", "ideas"), 0, "appended to notes/ideas.md")
	want(t, e.run("", "append", "work/2026/plan.txt", "Ship the browse skill"), 0, "wrote notes/work/2026/plan.txt")

	got, err := os.ReadFile(filepath.Join(e.root, "notes", "ideas.md"))
	if err != nil || string(got) != "Buy a kayak\nSecond line\n" {
		t.Fatalf("ideas.md = %q, %v", got, err)
	}
	// Appending to a file without a final newline starts a new line.
	e.write("notes/raw.md", "no newline")
	want(t, e.run("", "append", "notes/raw.md", "next"), 0, "appended")
	if got, _ := os.ReadFile(filepath.Join(e.root, "notes", "raw.md")); string(got) != "no newline\nnext\n" {
		t.Errorf("raw.md = %q", got)
	}

	want(t, e.run("", "read", "ideas"), 0, "Buy a kayak\nSecond line\n")
	want(t, e.run("", "read", "missing.md"), 1, "there is no note notes/missing.md")

	e.write("notes/.secret.md", "kayak password")
	e.write("notes/.git/config", "kayak")
	l := e.run("", "list")
	want(t, l, 0, "notes/ideas.md")
	want(t, l, 0, "notes/work/2026/plan.txt")
	if strings.Contains(string(l.Stdout), ".secret") || strings.Contains(string(l.Stdout), ".git") {
		t.Errorf("list shows hidden files:\n%s", l.Stdout)
	}
	want(t, e.run("", "list", "work"), 0, "notes/work/2026/plan.txt")
	want(t, e.run("", "list", "nowhere"), 1, "no folder notes/nowhere")

	s := e.run("", "search", "KAYAK")
	want(t, s, 0, "notes/ideas.md:1: Buy a kayak")
	if strings.Contains(string(s.Stdout), "secret") || strings.Contains(string(s.Stdout), ".git") {
		t.Errorf("search reads hidden files:\n%s", s.Stdout)
	}
	want(t, e.run("", "search", "ship", "browse"), 0, "notes/work/2026/plan.txt:1: Ship the browse skill")
	want(t, e.run("", "search", "plan"), 0, "notes/work/2026/plan.txt (name matches)")
	want(t, e.run("", "search", "kayak", "nothing-like-this"), 0, "No note matches.")
}

func TestHostileNamesAreRefused(t *testing.T) {
	e := newEnv(t)
	e.write("outside.md", "the user's other file")
	e.write("notes/ok.md", "fine")
	for _, name := range []string{
		"../outside.md", "notes/../../outside.md", "a/../../outside.md", "/etc/passwd", ".hidden.md",
		"a/.git/config", "a\\b.md", "a\x00b.md", "line\nbreak.md", "", "a//b.md", "./ok.md", " ok.md",
	} {
		for _, cmd := range []string{"read", "add", "append"} {
			args := []string{cmd, name}
			if cmd != "read" {
				args = append(args, "text")
			}
			r := e.run("", args...)
			if r.ExitCode != 2 || len(r.Stderr) == 0 {
				t.Errorf("%s %q: exit %d, stderr %q; want a usage refusal", cmd, name, r.ExitCode, r.Stderr)
			}
		}
	}
	if b, _ := os.ReadFile(filepath.Join(e.root, "outside.md")); string(b) != "the user's other file" {
		t.Errorf("outside.md changed: %q", b)
	}
	want(t, e.run("", "add", "x.sh", "echo"), 2, "written as .md or .txt")
}

func TestLinksOutOfNotesAreRefused(t *testing.T) {
	e := newEnv(t)
	e.write("outside.md", "private")
	e.write("notes/ok.md", "fine")
	outside := filepath.Join(e.root, "outside.md")
	if err := os.Symlink(outside, filepath.Join(e.root, "notes", "abs.md")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside.md", filepath.Join(e.root, "notes", "rel.md")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.root, filepath.Join(e.root, "notes", "dir")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(e.root, "notes", "fifo.md"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"abs.md", "rel.md", "dir/outside.md", "fifo.md"} {
		r := e.run("", "read", name)
		if r.ExitCode != 1 || strings.Contains(string(r.Stdout), "private") {
			t.Errorf("read %s: exit %d, stdout %q, stderr %q", name, r.ExitCode, r.Stdout, r.Stderr)
		}
		r = e.run("", "append", name, "owned")
		if r.ExitCode == 0 {
			t.Errorf("append %s succeeded: %q", name, r.Stdout)
		}
	}
	r := e.run("", "add", "dir/new.md", "owned")
	if r.ExitCode == 0 {
		t.Errorf("add through a link out of notes/ succeeded")
	}
	if _, err := os.Stat(filepath.Join(e.root, "new.md")); err == nil {
		t.Error("a file was written outside notes/")
	}
	if b, _ := os.ReadFile(outside); string(b) != "private" {
		t.Errorf("outside.md changed: %q", b)
	}
	// The links are not listed or searched either.
	l := e.run("", "list")
	if strings.Contains(string(l.Stdout), "abs.md") || strings.Contains(string(l.Stdout), "outside") {
		t.Errorf("list shows links:\n%s", l.Stdout)
	}
	want(t, e.run("", "search", "private"), 0, "No note matches.")

	// notes itself being a link is refused outright.
	e2 := newEnv(t)
	if err := os.Symlink(e.root, filepath.Join(e2.root, "notes")); err != nil {
		t.Fatal(err)
	}
	want(t, e2.run("", "read", "ok.md"), 1, "not a folder")
	want(t, e2.run("", "add", "new.md", "x"), 1, "not a folder")
}

func TestUsage(t *testing.T) {
	e := newEnv(t)
	for _, args := range [][]string{nil, {"frobnicate"}, {"read"}, {"read", "a", "b"}, {"search"}, {"add"}, {"add", "x.md"}, {"list", "a", "b"}} {
		r := e.run("", args...)
		if r.ExitCode != 2 || !strings.Contains(string(r.Stderr), "usage:") {
			t.Errorf("%q: exit %d, stderr %q", args, r.ExitCode, r.Stderr)
		}
	}
}

func TestLimits(t *testing.T) {
	e := newEnv(t)
	e.write("notes/big.md", strings.Repeat("x", MaxNoteBytes+1))
	want(t, e.run("", "read", "big.md"), 1, "larger than")
	want(t, e.run("", "append", "big.md", "more"), 1, "would grow beyond")
	want(t, e.run(strings.Repeat("y", MaxNoteBytes+1), "add", "huge.md"), 1, "larger than")
	if _, err := os.Stat(filepath.Join(e.root, "notes", "huge.md")); err == nil {
		t.Error("the refused note was left behind")
	}
	e.write("notes/bin.md", "a\x00b")
	want(t, e.run("", "read", "bin.md"), 1, "not a text file")
}
