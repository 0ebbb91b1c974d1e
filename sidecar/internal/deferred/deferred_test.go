package deferred

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/kv"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
)

type fixture struct {
	db      *store.DB
	kv      *kv.Store
	queue   *queue.Queue
	audit   *audit.Log
	applier *Applier
	parent  queue.Task
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	ctx := context.Background()
	db, err := testDBs.OpenPath(ctx, filepath.Join(t.TempDir(), "istota.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := &fixture{db: db, kv: kv.New(db, nil), queue: queue.New(db, queue.Options{}), audit: audit.New(db, logger, nil)}
	f.applier = New(f.kv, f.queue, f.audit, logger, opts)
	f.parent, _, err = f.queue.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: queue.SourceTalk, Prompt: "do things",
		ConversationToken: "room1", ReplyToMessageID: 77, DedupeKey: "talk:room1:77"})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// opDir returns a fresh deferred folder with the given files.
func opDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), DirName)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func outcomeFiles(os []Outcome) []string {
	var n []string
	for _, o := range os {
		n = append(n, o.File)
	}
	return n
}

func findOutcome(os []Outcome, file string) (Outcome, bool) {
	for _, o := range os {
		if o.File == file {
			return o, true
		}
	}
	return Outcome{}, false
}

func (f *fixture) tasks(t *testing.T) []queue.Task {
	t.Helper()
	rows, err := f.db.Read.Query(`SELECT id, user_id, source, interactive, prompt, conversation_token, reply_to_message_id, COALESCE(dedupe_key, '') FROM tasks ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []queue.Task
	for rows.Next() {
		var tk queue.Task
		if err := rows.Scan(&tk.ID, &tk.UserID, &tk.Source, &tk.Interactive, &tk.Prompt, &tk.ConversationToken, &tk.ReplyToMessageID, &tk.DedupeKey); err != nil {
			t.Fatal(err)
		}
		out = append(out, tk)
	}
	return out
}

func TestApplyValidAndInvalidIndependently(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Options{})
	if err := f.kv.Set(ctx, "alice", "notes", "old", "gone soon"); err != nil {
		t.Fatal(err)
	}
	if err := f.kv.Set(ctx, "bob", "notes", "todo", "bob's own"); err != nil {
		t.Fatal(err)
	}
	dir := opDir(t, map[string]string{
		"01-set.json":            `{"op":"kv_set","namespace":"notes","key":"todo","value":"buy milk"}`,
		"02-claims-bob.json":     `{"op":"kv_set","namespace":"notes","key":"todo2","value":"x","user_id":"bob","conversation":"other-room"}`,
		"03-object.json":         `{"op":"kv_set","namespace":"notes","key":"obj","value":{"a":[1, 2]}}`,
		"04-delete.json":         `{"op":"kv_delete","namespace":"notes","key":"old"}`,
		"05-delete-missing.json": `{"op":"kv_delete","namespace":"notes","key":"never-was"}`,
		"06-subtask.json":        `{"op":"subtask","prompt":"Summarise the report","uid":"bob"}`,
		"10-bad-json.json":       `{"op":"kv_set",`,
		"11-unknown-op.json":     `{"op":"send_mail","to":"x@example.com"}`,
		"12-no-op.json":          `{"namespace":"notes"}`,
		"13-extra-field.json":    `{"op":"kv_delete","namespace":"notes","key":"k","force":true}`,
		"14-bad-ns.json":         `{"op":"kv_set","namespace":"a/b","key":"k","value":"v"}`,
		"15-empty-prompt.json":   `{"op":"subtask","prompt":"  "}`,
		"16-array.json":          `[1,2]`,
		"17-trailing.json":       `{"op":"kv_delete","namespace":"n","key":"k"} {}`,
		"18-too-big.json":        `{"op":"kv_set","namespace":"n","key":"k","value":"` + strings.Repeat("x", MaxFileBytes) + `"}`,
		"19-value-too-big.json":  `{"op":"kv_set","namespace":"n","key":"k","value":"` + strings.Repeat("x", kv.MaxValueBytes+1) + `"}`,
		"not-json.txt":           `{"op":"kv_set","namespace":"n","key":"ignored","value":"v"}`,
	})
	rep, err := f.applier.Apply(ctx, dir, f.parent)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	wantApplied := []string{"01-set.json", "02-claims-bob.json", "03-object.json", "04-delete.json", "05-delete-missing.json", "06-subtask.json"}
	if got := outcomeFiles(rep.Applied); !slices.Equal(got, wantApplied) {
		t.Errorf("applied %v, want %v", got, wantApplied)
	}
	wantRejected := []string{"10-bad-json.json", "11-unknown-op.json", "12-no-op.json", "13-extra-field.json", "14-bad-ns.json",
		"15-empty-prompt.json", "16-array.json", "17-trailing.json", "18-too-big.json", "19-value-too-big.json"}
	if got := outcomeFiles(rep.Rejected); !slices.Equal(got, wantRejected) {
		t.Errorf("rejected %v, want %v", got, wantRejected)
	}
	for _, o := range rep.Rejected {
		if o.Reason != audit.ReasonInvalidOperation || o.Detail == "" {
			t.Errorf("rejection %+v", o)
		}
	}

	// Identity came from the task: alice got every write, bob nothing.
	for _, c := range []struct{ user, key, want string }{
		{"alice", "todo", "buy milk"},
		{"alice", "todo2", "x"},
		{"alice", "obj", `{"a":[1,2]}`},
		{"bob", "todo", "bob's own"},
	} {
		e, err := f.kv.Get(ctx, c.user, "notes", c.key)
		if err != nil || e.Value != c.want {
			t.Errorf("%s's %s = %q, %v; want %q", c.user, c.key, e.Value, err, c.want)
		}
	}
	if _, err := f.kv.Get(ctx, "bob", "notes", "todo2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a file's user_id reached bob's store: %v", err)
	}
	if _, err := f.kv.Get(ctx, "alice", "notes", "old"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("kv_delete did not delete: %v", err)
	}
	if _, err := f.kv.Get(ctx, "alice", "notes", "ignored"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a file not named *.json was applied: %v", err)
	}
	claim, _ := findOutcome(rep.Applied, "02-claims-bob.json")
	if !slices.Equal(claim.Ignored, []string{"user_id", "conversation"}) {
		t.Errorf("identity fields flagged = %v", claim.Ignored)
	}

	tasks := f.tasks(t)
	if len(tasks) != 2 {
		t.Fatalf("tasks = %+v", tasks)
	}
	st := tasks[1]
	wantKey := SubtaskDedupePrefix + "1:06-subtask.json"
	if st.UserID != "alice" || st.Prompt != "Summarise the report" || st.Interactive || st.ConversationToken != "room1" ||
		st.ReplyToMessageID != 77 || st.DedupeKey != wantKey || st.Source != queue.SourceCron {
		t.Errorf("subtask = %+v", st)
	}
	if o, _ := findOutcome(rep.Applied, "06-subtask.json"); o.TaskID != st.ID || !slices.Equal(o.Ignored, []string{"uid"}) {
		t.Errorf("subtask outcome = %+v", o)
	}

	// Every file was handled and removed, except the one that is not an operation.
	left, _ := os.ReadDir(dir)
	if len(left) != 1 || left[0].Name() != "not-json.txt" {
		t.Errorf("left in the folder: %v", left)
	}

	// The audit log has every decision, with the claimed identity noted, never used.
	entries, err := f.audit.Recent(ctx, "", false, 100)
	if err != nil {
		t.Fatal(err)
	}
	var allowed, refused int
	for _, e := range entries {
		if e.UserID != "alice" || e.TaskID != f.parent.ID || e.Component != "deferred" {
			t.Errorf("audit entry %+v", e)
		}
		if e.Allowed {
			allowed++
		} else if e.Reason == audit.ReasonInvalidOperation {
			refused++
		}
		if e.Action == OpKVSet && strings.Contains(e.Detail, "notes/todo2") && !strings.Contains(e.Detail, "ignored identity fields user_id,conversation") {
			t.Errorf("identity claim not flagged in the audit log: %+v", e)
		}
	}
	if allowed != len(wantApplied) || refused != len(wantRejected) {
		t.Errorf("audit has %d allowed and %d refused entries", allowed, refused)
	}
}

func TestReapplyIsIdempotent(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Options{})
	files := map[string]string{
		"a.json": `{"op":"subtask","prompt":"first"}`,
		"b.json": `{"op":"kv_set","namespace":"n","key":"k","value":"v"}`,
		"c.json": `{"op":"kv_delete","namespace":"n","key":"other"}`,
	}
	dir := opDir(t, files)
	rep1, err := f.applier.Apply(ctx, dir, f.parent)
	if err != nil || len(rep1.Applied) != 3 {
		t.Fatalf("first Apply = %+v, %v", rep1, err)
	}
	// A crash between applying and removing leaves the same files behind.
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rep2, err := f.applier.Apply(ctx, dir, f.parent)
	if err != nil || len(rep2.Applied) != 3 || len(rep2.Rejected) != 0 {
		t.Fatalf("second Apply = %+v, %v", rep2, err)
	}
	a1, _ := findOutcome(rep1.Applied, "a.json")
	a2, _ := findOutcome(rep2.Applied, "a.json")
	if a1.TaskID == 0 || a1.TaskID != a2.TaskID || !strings.Contains(a2.Detail, "already queued") {
		t.Errorf("subtask outcomes %+v and %+v", a1, a2)
	}
	if n := len(f.tasks(t)); n != 2 {
		t.Errorf("%d tasks after re-applying, want the parent and one subtask", n)
	}
	if e, _ := f.kv.Get(ctx, "alice", "n", "k"); e.Value != "v" {
		t.Errorf("value = %q", e.Value)
	}
	// A missing folder is nothing to do.
	if rep, err := f.applier.Apply(ctx, filepath.Join(t.TempDir(), "none"), f.parent); err != nil || len(rep.Applied)+len(rep.Rejected) != 0 {
		t.Errorf("Apply of a missing folder = %+v, %v", rep, err)
	}
}

func TestLinksAndSpecialFilesAreRefused(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Options{})
	outside := t.TempDir()
	target := filepath.Join(outside, "target.json")
	body := `{"op":"kv_set","namespace":"n","key":"via-link","value":"v"}`
	if err := os.WriteFile(target, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := opDir(t, map[string]string{"ok.json": `{"op":"kv_set","namespace":"n","key":"ok","value":"v"}`})
	if err := os.Symlink(target, filepath.Join(dir, "link.json")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	rep, err := f.applier.Apply(ctx, dir, f.parent)
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomeFiles(rep.Applied); !slices.Equal(got, []string{"ok.json"}) {
		t.Errorf("applied %v", got)
	}
	if got := outcomeFiles(rep.Rejected); !slices.Equal(got, []string{"dir.json", "fifo.json", "link.json"}) {
		t.Errorf("rejected %v", got)
	}
	if o, _ := findOutcome(rep.Rejected, "link.json"); !strings.Contains(o.Detail, "symbolic link") {
		t.Errorf("link rejection = %+v", o)
	}
	if _, err := f.kv.Get(ctx, "alice", "n", "via-link"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the link was followed: %v", err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != body {
		t.Errorf("the link target was touched: %q, %v", b, err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left in the folder: %v", left)
	}

	// The folder itself replaced by a link to somewhere else.
	tmp := t.TempDir()
	linked := filepath.Join(tmp, DirName)
	if err := os.Symlink(outside, linked); err != nil {
		t.Fatal(err)
	}
	rep, err = f.applier.Apply(ctx, linked, f.parent)
	if err != nil || len(rep.Applied) != 0 || len(rep.Rejected) != 1 || rep.Rejected[0].Reason != audit.ReasonInvalidOperation {
		t.Fatalf("Apply through a linked folder = %+v, %v", rep, err)
	}
	if _, err := os.Stat(target); err != nil {
		t.Errorf("the linked folder's contents were touched: %v", err)
	}
	if _, err := os.Lstat(linked); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link was not removed: %v", err)
	}
}

func TestSubtaskLimits(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Options{MaxSubtasks: 2, MaxFiles: 4})
	dir := opDir(t, map[string]string{
		"1.json": `{"op":"subtask","prompt":"one"}`,
		"2.json": `{"op":"subtask","prompt":"two"}`,
		"3.json": `{"op":"subtask","prompt":"three"}`,
		"4.json": `{"op":"subtask","prompt":"` + strings.Repeat("p", MaxPromptBytes+1) + `"}`,
		"5.json": `{"op":"kv_set","namespace":"n","key":"k","value":"v"}`,
	})
	rep, err := f.applier.Apply(ctx, dir, f.parent)
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomeFiles(rep.Applied); !slices.Equal(got, []string{"1.json", "2.json"}) {
		t.Errorf("applied %v", got)
	}
	for file, want := range map[string]string{"3.json": "more than 2 subtasks", "4.json": "longer than", "5.json": "more than 4 operation files"} {
		if o, ok := findOutcome(rep.Rejected, file); !ok || !strings.Contains(o.Detail, want) {
			t.Errorf("%s: %+v, want %q", file, o, want)
		}
	}

	// A subtask's own deferred subtasks are refused; its other operations apply.
	sub, err := f.queue.Get(ctx, rep.Applied[0].TaskID)
	if err != nil {
		t.Fatal(err)
	}
	dir = opDir(t, map[string]string{
		"a.json": `{"op":"subtask","prompt":"again"}`,
		"b.json": `{"op":"kv_set","namespace":"n","key":"from-subtask","value":"v"}`,
	})
	rep, err = f.applier.Apply(ctx, dir, sub)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := findOutcome(rep.Rejected, "a.json"); !ok || !strings.Contains(o.Detail, "cannot create subtasks") {
		t.Errorf("nested subtask: %+v", rep)
	}
	if _, ok := findOutcome(rep.Applied, "b.json"); !ok {
		t.Errorf("the subtask's kv_set was not applied: %+v", rep)
	}
}
