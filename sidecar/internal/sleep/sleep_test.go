package sleep

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/curation"
	"github.com/istota/istota/sidecar/internal/knowledge"
	"github.com/istota/istota/sidecar/internal/store"
)

// scripted is an Extractor that answers from a function and keeps the prompts.
type scripted struct {
	mu      sync.Mutex
	prompts []string
	answer  func(prompt string) (string, error)
}

func (s *scripted) Extract(ctx context.Context, prompt string) (string, error) {
	s.mu.Lock()
	s.prompts = append(s.prompts, prompt)
	s.mu.Unlock()
	return s.answer(prompt)
}

func (s *scripted) calls() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.prompts) }

func (s *scripted) last() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.prompts) == 0 {
		return ""
	}
	return s.prompts[len(s.prompts)-1]
}

// recordingIndexer is an Indexer, Retainer and VectorFiller that remembers its calls.
type recordingIndexer struct {
	mu       sync.Mutex
	docs     []Doc
	retained []int
	calls    []string // retention and vector fills, in order
	filled   int      // what FillVectors reports
	fillErr  error
}

func (r *recordingIndexer) FillVectors(_ context.Context, ns string) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "fill "+ns)
	return r.filled, r.fillErr
}

func (r *recordingIndexer) IndexDocument(_ context.Context, d Doc) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.docs = append(r.docs, d)
	return nil
}

func (r *recordingIndexer) ApplyRetention(_ context.Context, ns string, days int) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retained = append(r.retained, days)
	r.calls = append(r.calls, "retain "+ns)
	return 0, nil
}

type env struct {
	db       *store.DB
	graph    *knowledge.Graph
	cycle    *Cycle
	ext      *scripted
	idx      *recordingIndexer
	users    string
	channels string
	now      time.Time
}

func (e *env) userFile(uid, rel string) string {
	return filepath.Join(e.users, uid, filepath.FromSlash(rel))
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	ctx := context.Background()
	db, err := testDBs.OpenPath(ctx, filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e := &env{db: db, ext: &scripted{}, idx: &recordingIndexer{}, users: t.TempDir(), channels: t.TempDir()}
	e.graph = knowledge.New(db, knowledge.Options{Clock: func() time.Time { return e.now }})
	cfg.UserRoot = func(uid string) string { return filepath.Join(e.users, uid) }
	cfg.ChannelRoot = func(token string) string { return filepath.Join(e.channels, token) }
	cfg.BotDir = "istota"
	cfg.Indexer, cfg.Retainer, cfg.Vectors = e.idx, e.idx, e.idx
	cur := curation.New(curation.Options{Clock: func() time.Time { return e.now }})
	if e.cycle, err = New(db, e.graph, cur, e.ext, cfg); err != nil {
		t.Fatal(err)
	}
	for _, u := range []struct{ id, tz string }{{"alice", "Europe/Berlin"}, {"bob", "America/New_York"}} {
		if _, err := db.Write.Exec(`INSERT INTO users (id, timezone, updated_at) VALUES (?, ?, ?)`, u.id, u.tz, store.FormatTime(time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

type taskRow struct {
	user, source, status, token string
	interactive                 bool
	prompt, result              string
	finished                    time.Time
}

func (e *env) addTask(t *testing.T, r taskRow) int64 {
	t.Helper()
	if r.status == "" {
		r.status = "completed"
	}
	if r.source == "" {
		r.source = "talk"
	}
	var id int64
	err := e.db.Write.QueryRow(`INSERT INTO tasks (user_id, source, interactive, status, prompt, conversation_token, result,
		next_attempt_at, created_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		r.user, r.source, map[bool]int{true: 1, false: 0}[r.interactive], r.status, r.prompt, r.token, r.result,
		store.FormatTime(r.finished), store.FormatTime(r.finished.Add(-time.Minute)), store.FormatTime(r.finished)).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (e *env) state(t *testing.T, ns string) State {
	t.Helper()
	st, err := e.cycle.State(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Europe/Berlin is CET (+1) until 2026-03-29 01:00 UTC, CEST (+2) after.
var berlin = mustLoad("Europe/Berlin")

func mustLoad(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

const goodAnswer = `{
  "memories": ["Alice planned the Lisbon trip for April.", "- Alice asked for a vegetarian recipe."],
  "facts": [
    {"subject": "Alice", "predicate": "lives_in", "object": "Berlin", "ephemeral": false},
    {"subject": "Alice", "predicate": "travels_to", "object": "Lisbon in April", "ephemeral": true},
    {"subject": "Alice", "predicate": "likes", "object": "tea\u0007"}
  ],
  "topics": ["travel", "cooking"],
  "user_md_ops": [
    {"op": "append", "heading": "Preferences", "text": "- vegetarian"},
    {"op": "replace", "old": "not in the file", "new": "x"}
  ]
}`

func seedAlice(t *testing.T, e *env) (lastEligible int64) {
	t.Helper()
	day := time.Date(2026, 3, 28, 9, 0, 0, 0, time.UTC)
	e.addTask(t, taskRow{user: "alice", interactive: true, prompt: "Plan my Lisbon trip in April", result: "Here is a plan.", finished: day})
	e.addTask(t, taskRow{user: "alice", interactive: true, prompt: "A vegetarian recipe please", result: "Try shakshuka.", finished: day.Add(time.Hour)})
	e.addTask(t, taskRow{user: "alice", source: "cron", prompt: "SILENT-CRON-JOB", result: "done", finished: day.Add(2 * time.Hour)})
	e.addTask(t, taskRow{user: "alice", status: "failed", prompt: "FAILED-TASK", finished: day.Add(3 * time.Hour)})
	e.addTask(t, taskRow{user: "bob", interactive: true, prompt: "BOBS-SECRET-PLAN", result: "ok", finished: day.Add(4 * time.Hour)})
	return e.addTask(t, taskRow{user: "alice", source: "email", prompt: "Summarize the newsletter", result: "Summary.", finished: day.Add(5 * time.Hour)})
}

func TestHappyPathAndRerun(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{})
	e.now = time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC) // 03:00 CEST
	last := seedAlice(t, e)
	userMD := e.userFile("alice", "istota/config/USER.md")
	if err := os.MkdirAll(filepath.Dir(userMD), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(userMD, []byte("# Alice\n\n## Preferences\n- likes tea\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.ext.answer = func(string) (string, error) { return goodAnswer, nil }

	out, err := e.cycle.Run(ctx, "user:alice", e.now)
	if err != nil {
		t.Fatal(err)
	}
	prompt := e.ext.last()
	for _, want := range []string{"Plan my Lisbon trip", "Try shakshuka.", "Summarize the newsletter", "- likes tea", "Europe/Berlin", "lives_in"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q", want)
		}
	}
	for _, bad := range []string{"SILENT-CRON-JOB", "FAILED-TASK", "BOBS-SECRET-PLAN"} {
		if strings.Contains(prompt, bad) {
			t.Errorf("prompt contains %q", bad)
		}
	}

	// The file is named after the day of the newest task, in Alice's timezone.
	wantFile := "# Memories 2026-03-28\n\n- Alice planned the Lisbon trip for April.\n- Alice asked for a vegetarian recipe.\n\nTopics: travel, cooking\n"
	got, err := os.ReadFile(e.userFile("alice", "memories/2026-03-28.md"))
	if err != nil || string(got) != wantFile {
		t.Fatalf("memory file %q, %v", got, err)
	}
	if out.MemoryFile != "memories/2026-03-28.md" || out.Memories != 2 || out.Tasks != 3 || out.LastTaskID != last {
		t.Errorf("outcome %+v", out)
	}
	if out.Facts != (FactCounts{Added: 2, Rejected: 1}) {
		t.Errorf("facts %+v", out.Facts)
	}
	cur, _ := e.graph.Current(ctx, "user:alice", "alice")
	if len(cur) != 2 || cur[0].Source != "sleep_cycle" {
		t.Fatalf("current facts %+v", cur)
	}
	if out.UserMD.Applied() != 1 || out.UserMD.Rejected() != 1 || !out.UserMD.Changed {
		t.Errorf("USER.md result %+v", out.UserMD)
	}
	if got, _ := os.ReadFile(userMD); string(got) != "# Alice\n\n## Preferences\n- likes tea\n- vegetarian\n" {
		t.Errorf("USER.md %q", got)
	}
	audit, _ := os.ReadFile(userMD + curation.AuditSuffix)
	if n := strings.Count(string(audit), "\n"); n != 2 || !strings.Contains(string(audit), `"source":"sleep_cycle"`) {
		t.Errorf("audit %q", audit)
	}
	wantDocs := []Doc{
		{Namespace: "user:alice", Source: "memory_file", SourceRef: "memories/2026-03-28.md", Text: wantFile,
			CreatedAt: time.Date(2026, 3, 28, 0, 0, 0, 0, berlin), Ephemeral: true},
		{Namespace: "user:alice", Source: "user_md", SourceRef: "istota/config/USER.md",
			Text: "# Alice\n\n## Preferences\n- likes tea\n- vegetarian\n", CreatedAt: e.now},
	}
	sameDoc := func(a, b Doc) bool {
		ta, tb := a.CreatedAt, b.CreatedAt
		a.CreatedAt, b.CreatedAt = time.Time{}, time.Time{}
		return a == b && ta.Equal(tb)
	}
	if len(e.idx.docs) != 2 || !sameDoc(e.idx.docs[0], wantDocs[0]) || !sameDoc(e.idx.docs[1], wantDocs[1]) {
		t.Errorf("indexed %+v", e.idx.docs)
	}
	if st := e.state(t, "user:alice"); st.LastTaskID != last || st.LastError != "" || !st.LastRunAt.Equal(e.now) {
		t.Errorf("state %+v", st)
	}

	// Running again finds nothing new and does not ask the model.
	out, err = e.cycle.Run(ctx, "user:alice", e.now.Add(time.Minute))
	if err != nil || out.Skipped == "" || e.ext.calls() != 1 {
		t.Fatalf("re-run: %+v %v, %d calls", out, err, e.ext.calls())
	}

	// A repeat of the same tasks (as after a crash before the state was saved) adds
	// nothing twice.
	if _, err := e.db.Write.Exec(`UPDATE sleep_state SET last_task_id = 0`); err != nil {
		t.Fatal(err)
	}
	out, err = e.cycle.Run(ctx, "user:alice", e.now.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(e.userFile("alice", "memories/2026-03-28.md")); string(got) != wantFile {
		t.Errorf("repeat changed the memory file: %q", got)
	}
	if out.Memories != 0 || out.Facts.Duplicate != 2 || out.UserMD.Applied() != 0 {
		t.Errorf("repeat outcome %+v", out)
	}
	if got, _ := os.ReadFile(userMD); string(got) != "# Alice\n\n## Preferences\n- likes tea\n- vegetarian\n" {
		t.Errorf("repeat changed USER.md: %q", got)
	}
	if tl, _ := e.graph.Timeline(ctx, "user:alice", ""); len(tl) != 2 {
		t.Errorf("timeline after repeat has %d facts", len(tl))
	}

	// New tasks on the next day append to that day's file; the same memory on another
	// day is written again there (each day's file stands alone).
	e.addTask(t, taskRow{user: "alice", interactive: true, prompt: "Moved to Paris!", result: "Congrats", finished: time.Date(2026, 3, 29, 18, 0, 0, 0, time.UTC)})
	e.ext.answer = func(string) (string, error) {
		return `{"memories":["Alice moved to Paris."],"facts":[{"subject":"alice","predicate":"lives in","object":"Paris"}],"topics":["travel","moving"],"user_md_ops":[]}`, nil
	}
	e.now = time.Date(2026, 3, 30, 1, 0, 0, 0, time.UTC)
	out, err = e.cycle.Run(ctx, "user:alice", e.now)
	if err != nil || out.Facts.Superseded != 1 {
		t.Fatalf("%+v %v", out, err)
	}
	if got, _ := os.ReadFile(e.userFile("alice", "memories/2026-03-29.md")); string(got) != "# Memories 2026-03-29\n\n- Alice moved to Paris.\n\nTopics: travel, moving\n" {
		t.Errorf("next day's file %q", got)
	}
	if cur, _ := e.graph.Current(ctx, "user:alice", "alice"); len(cur) != 2 || cur[0].Object != "Paris" && cur[1].Object != "Paris" {
		t.Errorf("current after the move: %+v", cur)
	}
}

func TestAppendsToAnExistingDayFile(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{})
	e.now = time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
	seedAlice(t, e)
	p := e.userFile("alice", "memories/2026-03-28.md")
	os.MkdirAll(filepath.Dir(p), 0o700)
	os.WriteFile(p, []byte("# Memories 2026-03-28\n\n- Written by hand.\n\nTopics: Travel\n"), 0o640)
	e.ext.answer = func(string) (string, error) {
		return `{"memories":["Written by hand.","Something new."],"topics":["travel","food"]}`, nil
	}
	if _, err := e.cycle.Run(ctx, "user:alice", e.now); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	if want := "# Memories 2026-03-28\n\n- Written by hand.\n\nTopics: Travel\n\n- Something new.\n\nTopics: food\n"; string(got) != want {
		t.Fatalf("got %q want %q", got, want)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", fi.Mode())
	}
}

func TestMalformedAnswerWritesNothing(t *testing.T) {
	for _, tc := range []struct{ name, answer string }{
		{"prose", "Here are the memories: Alice likes tea."},
		{"empty", ""},
		{"array", `["a"]`},
		{"wrong type", `{"memories": "Alice likes tea"}`},
		{"unknown key", `{"memories": ["a"], "mood": "happy"}`},
		{"fact without object", `{"memories": ["a"], "facts": [{"subject": "a", "predicate": "b"}]}`},
		{"op of the wrong shape", `{"memories": ["a"], "user_md_ops": ["append this"]}`},
		{"text after", `{"memories": ["a"]} and more`},
		{"truncated", `{"memories": ["a"`},
		{"unterminated fence", "```json\n{\"memories\": [\"a\"]}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, Config{RetentionDays: 30})
			e.now = time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
			seedAlice(t, e)
			old := e.userFile("alice", "memories/2025-01-01.md")
			os.MkdirAll(filepath.Dir(old), 0o700)
			os.WriteFile(old, []byte("old"), 0o600)
			e.ext.answer = func(string) (string, error) { return tc.answer, nil }

			_, err := e.cycle.Run(ctx, "user:alice", e.now)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("want ErrMalformed, got %v", err)
			}
			entries, _ := os.ReadDir(filepath.Dir(old))
			if len(entries) != 1 {
				t.Errorf("memories folder has %d entries, want only the old file (retention too must wait)", len(entries))
			}
			if _, err := os.Stat(e.userFile("alice", "istota")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("USER.md folder created: %v", err)
			}
			if tl, _ := e.graph.Timeline(ctx, "user:alice", ""); len(tl) != 0 {
				t.Errorf("facts stored: %+v", tl)
			}
			if len(e.idx.docs) != 0 {
				t.Errorf("indexed %+v", e.idx.docs)
			}
			st := e.state(t, "user:alice")
			if st.LastTaskID != 0 || !strings.Contains(st.LastError, "malformed") || !st.LastRunAt.Equal(e.now) {
				t.Fatalf("state %+v", st)
			}
			// The failure waits for the next night rather than retrying at once…
			if due, _ := e.cycle.Due(ctx, "user:alice", e.now.Add(time.Hour)); due {
				t.Error("due again an hour after a failure")
			}
			next := time.Date(2026, 3, 30, 1, 0, 0, 0, time.UTC)
			if due, _ := e.cycle.Due(ctx, "user:alice", next); !due {
				t.Error("not due the next night")
			}
			// …when the same tasks are read again.
			e.ext.answer = func(string) (string, error) { return "```json\n" + goodAnswer + "\n```", nil }
			out, err := e.cycle.Run(ctx, "user:alice", next)
			if err != nil || out.Tasks != 3 || !strings.Contains(e.ext.last(), "Plan my Lisbon trip") {
				t.Fatalf("retry: %+v %v", out, err)
			}
			if st := e.state(t, "user:alice"); st.LastError != "" || st.LastTaskID == 0 {
				t.Fatalf("state after retry %+v", st)
			}
		})
	}
}

func TestExtractorFailure(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{})
	e.now = time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
	seedAlice(t, e)
	e.ext.answer = func(string) (string, error) { return "", errors.New("model overloaded") }
	if _, err := e.cycle.Run(ctx, "user:alice", e.now); err == nil || !strings.Contains(err.Error(), "model overloaded") {
		t.Fatalf("err %v", err)
	}
	if st := e.state(t, "user:alice"); st.LastTaskID != 0 || !strings.Contains(st.LastError, "model overloaded") {
		t.Fatalf("state %+v", st)
	}
	// A run cut short by shutdown records nothing: it runs again after the restart.
	e2 := newEnv(t, Config{})
	seedAlice(t, e2)
	cctx, cancel := context.WithCancel(ctx)
	e2.ext.answer = func(string) (string, error) { cancel(); return "", context.Canceled }
	if _, err := e2.cycle.Run(cctx, "user:alice", e.now); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if _, err := e2.cycle.State(ctx, "user:alice"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("state recorded after cancellation: %v", err)
	}
}

func TestChannelNamespace(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{})
	// 23:30 UTC on the 28th: the 29th in Berlin, but channels live in UTC.
	e.now = time.Date(2026, 3, 29, 3, 0, 0, 0, time.UTC)
	fin := time.Date(2026, 3, 28, 23, 30, 0, 0, time.UTC)
	e.addTask(t, taskRow{user: "alice", token: "room1", interactive: true, prompt: "Team lunch on Friday?", result: "Booked.", finished: fin})
	e.addTask(t, taskRow{user: "bob", token: "room1", interactive: true, prompt: "Who brings cake?", result: "Bob.", finished: fin})
	e.addTask(t, taskRow{user: "alice", token: "room2", interactive: true, prompt: "OTHER-ROOM", result: "x", finished: fin})
	os.MkdirAll(filepath.Join(e.channels, "room1"), 0o700)
	os.WriteFile(filepath.Join(e.channels, "room1", "CHANNEL.md"), []byte("Team room of the billing squad."), 0o600)
	e.ext.answer = func(string) (string, error) {
		return `{"memories":["The team booked lunch for Friday."],"facts":[{"subject":"team lunch","predicate":"day","object":"Friday","ephemeral":true}],"topics":[],"user_md_ops":[{"op":"append","text":"- nope"}]}`, nil
	}
	out, err := e.cycle.Run(ctx, "channel:room1", e.now)
	if err != nil {
		t.Fatal(err)
	}
	p := e.ext.last()
	if !strings.Contains(p, "Who brings cake?") || !strings.Contains(p, "Team lunch") || strings.Contains(p, "OTHER-ROOM") ||
		!strings.Contains(p, "billing squad") || !strings.Contains(p, "(timezone UTC") {
		t.Errorf("prompt:\n%s", p)
	}
	if out.Tasks != 2 || out.IgnoredOps != 1 || out.Facts.Added != 1 {
		t.Errorf("outcome %+v", out)
	}
	if _, err := os.Stat(filepath.Join(e.channels, "room1", "memories", "2026-03-28.md")); err != nil {
		t.Errorf("channel memory file: %v", err)
	}
	if _, err := os.Stat(e.userFile("alice", "istota")); !errors.Is(err, os.ErrNotExist) {
		t.Error("a channel run touched a user's files")
	}
	if cur, _ := e.graph.Current(ctx, "channel:room1", ""); len(cur) != 1 || !cur[0].Ephemeral {
		t.Errorf("channel facts %+v", cur)
	}
	if cur, _ := e.graph.Current(ctx, "user:alice", ""); len(cur) != 0 {
		t.Errorf("user facts %+v", cur)
	}
}

func TestDSTDayInBerlin(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{})
	// 23:30 UTC on 28 March is 00:30 CET on the 29th, the day clocks go forward.
	e.addTask(t, taskRow{user: "alice", interactive: true, prompt: "Late question", result: "Late answer", finished: time.Date(2026, 3, 28, 23, 30, 0, 0, time.UTC)})
	e.ext.answer = func(string) (string, error) { return `{"memories":["Asked late."]}`, nil }

	// Alice is seen for the first time on the evening of the 28th: not due yet.
	first := time.Date(2026, 3, 28, 20, 0, 0, 0, time.UTC)
	if due, err := e.cycle.Due(ctx, "user:alice", first); err != nil || due {
		t.Fatalf("first sight: due=%v %v", due, err)
	}
	// 03:00 CEST on the 29th is 01:00 UTC (not 02:00, as it would be in winter).
	if due, _ := e.cycle.Due(ctx, "user:alice", time.Date(2026, 3, 29, 0, 59, 59, 0, time.UTC)); due {
		t.Fatal("due before 03:00 local")
	}
	at := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
	if due, _ := e.cycle.Due(ctx, "user:alice", at); !due {
		t.Fatal("not due at 03:00 CEST")
	}
	if _, err := e.cycle.Run(ctx, "user:alice", at); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.userFile("alice", "memories/2026-03-29.md")); err != nil {
		t.Fatalf("the local date is the 29th: %v", err)
	}
	if due, _ := e.cycle.Due(ctx, "user:alice", at.Add(23*time.Hour+59*time.Minute)); due {
		t.Fatal("due twice on one day")
	}
	if due, _ := e.cycle.Due(ctx, "user:alice", at.Add(24*time.Hour)); !due {
		t.Fatal("not due the next night")
	}
}

func TestScheduleAcrossDSTChanges(t *testing.T) {
	utc := func(mo time.Month, d, h, m int) time.Time { return time.Date(2026, mo, d, h, m, 0, 0, time.UTC) }
	for _, tc := range []struct {
		cron  string
		from  time.Time
		wants []time.Time
	}{
		// Spring: 03:00 exists on the 29th (CEST); 02:30 does not and runs when the gap
		// ends, at 03:00 CEST. Each local day runs once.
		{"0 3 * * *", utc(3, 27, 12, 0), []time.Time{utc(3, 28, 2, 0), utc(3, 29, 1, 0), utc(3, 30, 1, 0)}},
		{"30 2 * * *", utc(3, 27, 12, 0), []time.Time{utc(3, 28, 1, 30), utc(3, 29, 1, 0), utc(3, 30, 0, 30)}},
		// Autumn: 02:30 happens twice on 25 October; it runs at the first one only.
		{"30 2 * * *", utc(10, 23, 12, 0), []time.Time{utc(10, 24, 0, 30), utc(10, 25, 0, 30), utc(10, 26, 1, 30)}},
		{"0 3 * * *", utc(10, 23, 12, 0), []time.Time{utc(10, 24, 1, 0), utc(10, 25, 2, 0), utc(10, 26, 2, 0)}},
		{"", utc(10, 23, 12, 0), []time.Time{utc(10, 24, 1, 0), utc(10, 25, 2, 0), utc(10, 26, 2, 0)}},
	} {
		t.Run(tc.cron+" "+tc.from.Format("Jan"), func(t *testing.T) {
			s, err := ParseSchedule(tc.cron)
			if err != nil {
				t.Fatal(err)
			}
			at := tc.from
			for i, want := range tc.wants {
				at = s.Next(berlin, at)
				if !at.Equal(want) {
					t.Fatalf("activation %d = %v (%v), want %v", i, at.UTC(), at.In(berlin), want)
				}
			}
		})
	}
	s, _ := ParseSchedule("0 3 * * *")
	last := utc(3, 28, 2, 5)
	for _, tc := range []struct {
		now  time.Time
		want bool
	}{{utc(3, 29, 0, 59), false}, {utc(3, 29, 1, 0), true}, {utc(3, 29, 6, 0), true}} {
		if got := s.Due(berlin, last, tc.now); got != tc.want {
			t.Errorf("Due(%v) = %v", tc.now, got)
		}
	}
	if s.Due(berlin, time.Time{}, utc(3, 29, 6, 0)) {
		t.Error("due without a last run")
	}
	for _, bad := range []string{"CRON_TZ=Asia/Tokyo 0 3 * * *", "0 3 * *", "61 3 * * *"} {
		if _, err := ParseSchedule(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestBudget(t *testing.T) {
	at := time.Date(2026, 3, 28, 9, 0, 0, 0, time.UTC)
	long := func(tag string, n int) string {
		return tag + "-HEAD " + strings.Repeat("x", n) + " " + tag + "-TAIL"
	}
	t.Run("fits", func(t *testing.T) {
		tasks := []task{{ID: 1, Interactive: true, Prompt: "hi", Result: "hello", At: at}}
		b := budget(tasks, time.UTC, 1000, 0.75, 400, 100)
		if b.truncated != 0 || b.dropped != 0 || !strings.Contains(b.text, "hi") || !strings.Contains(b.text, "hello") {
			t.Fatalf("%+v", b)
		}
	})
	t.Run("long tasks are cut in the middle, interactive ones get the larger share", func(t *testing.T) {
		var tasks []task
		for i := range 4 {
			tasks = append(tasks, task{ID: int64(i + 1), Interactive: i%2 == 0, Source: "talk", At: at,
				Prompt: long("P"+string(rune('a'+i)), 5000), Result: long("R"+string(rune('a'+i)), 5000)})
		}
		b := budget(tasks, time.UTC, 4000, 0.75, 4000, 200)
		if n := len([]rune(b.text)); n > 4000+len(tasks) {
			t.Fatalf("transcript of %d characters exceeds the budget", n)
		}
		if b.truncated != 4 || b.dropped != 0 {
			t.Fatalf("truncated %d dropped %d", b.truncated, b.dropped)
		}
		for _, tag := range []string{"Pa-HEAD", "Rc-TAIL", "Pb-HEAD", "Rd-TAIL", "characters omitted"} {
			if !strings.Contains(b.text, tag) {
				t.Errorf("transcript lacks %q", tag)
			}
		}
		// In task order, and the interactive ones longer than the background ones.
		if strings.Index(b.text, "Pa-HEAD") > strings.Index(b.text, "Pb-HEAD") {
			t.Error("tasks out of order")
		}
		parts := strings.Split(b.text, "### Task ")
		if len(parts[1]) <= 2*len(parts[2]) {
			t.Errorf("interactive task %d chars, background %d", len(parts[1]), len(parts[2]))
		}
	})
	t.Run("a group that needs less lends the rest", func(t *testing.T) {
		tasks := []task{
			{ID: 1, Interactive: false, Source: "email", Prompt: "short", Result: "short", At: at},
			{ID: 2, Interactive: true, Source: "talk", Prompt: long("P", 3000), Result: "ok", At: at},
		}
		b := budget(tasks, time.UTC, 3000, 0.5, 4000, 100)
		if b.truncated != 1 || len([]rune(b.text)) < 2800 {
			t.Fatalf("interactive task did not get the unused background share: %d chars", len([]rune(b.text)))
		}
	})
	t.Run("too many tasks drop the oldest", func(t *testing.T) {
		var tasks []task
		for i := range 20 {
			tasks = append(tasks, task{ID: int64(i + 1), Interactive: true, Source: "talk", At: at,
				Prompt: long("T"+string(rune('A'+i)), 1000), Result: "r"})
		}
		b := budget(tasks, time.UTC, 2000, 1, 4000, 400)
		if b.dropped != 15 || strings.Contains(b.text, "TA-HEAD") || !strings.Contains(b.text, "TT-HEAD") {
			t.Fatalf("dropped %d, transcript %d chars", b.dropped, len(b.text))
		}
	})
	if got := truncateMiddle("abcdefghij", 20); got != "abcdefghij" {
		t.Fatal(got)
	}
	got := truncateMiddle(strings.Repeat("h", 500)+strings.Repeat("t", 500), 200)
	if len([]rune(got)) != 200 || !strings.HasPrefix(got, "hhh") || !strings.HasSuffix(got, "ttt") {
		t.Fatalf("%q", got)
	}
}

func TestTaskBudgetReachesTheModel(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{BudgetChars: 3000, MaxTaskChars: 2000, MinTaskChars: 300})
	e.now = time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
	e.addTask(t, taskRow{user: "alice", interactive: true, prompt: "START " + strings.Repeat("lorem ", 3000), result: "THE CONCLUSION",
		finished: time.Date(2026, 3, 28, 9, 0, 0, 0, time.UTC)})
	e.ext.answer = func(string) (string, error) { return `{}`, nil }
	out, err := e.cycle.Run(ctx, "user:alice", e.now)
	if err != nil || out.Truncated != 1 {
		t.Fatalf("%+v %v", out, err)
	}
	p := e.ext.last()
	if !strings.Contains(p, "START") || !strings.Contains(p, "THE CONCLUSION") || strings.Count(p, "lorem") > 400 {
		t.Fatalf("prompt of %d characters", len(p))
	}
	if out.MemoryFile != "" {
		t.Error("an empty answer named a memory file")
	}
	if _, err := os.Stat(e.userFile("alice", "memories")); !errors.Is(err, os.ErrNotExist) {
		t.Error("an empty answer created files")
	}
}

func TestRetention(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{RetentionDays: 30})
	e.now = time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
	dir := e.userFile("alice", "memories")
	os.MkdirAll(dir, 0o700)
	for _, n := range []string{"2026-02-26.md", "2026-02-27.md", "2026-02-28.md", "notes.md", "2026-13-01.md"} {
		os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600)
	}
	out, err := e.cycle.Run(ctx, "user:alice", e.now) // no tasks: retention still runs
	if err != nil || out.Skipped == "" {
		t.Fatalf("%+v %v", out, err)
	}
	// 29 March (local) minus 30 days is 27 February: older files go.
	if strings.Join(out.RemovedFiles, ",") != "memories/2026-02-26.md" {
		t.Fatalf("removed %v", out.RemovedFiles)
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, en := range entries {
		left = append(left, en.Name())
	}
	if strings.Join(left, ",") != "2026-02-27.md,2026-02-28.md,2026-13-01.md,notes.md" {
		t.Fatalf("left %v", left)
	}
	if len(e.idx.retained) != 1 || e.idx.retained[0] != 30 {
		t.Fatalf("index retention %v", e.idx.retained)
	}
}

// Chunks stored while the embeddings endpoint was down get their vectors overnight,
// after retention (nothing is embedded only to be deleted); a failure is a warning.
func TestMissingVectorsAreFilledAfterRetention(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{RetentionDays: 30})
	e.now = time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
	e.idx.filled = 3
	out, err := e.cycle.Run(ctx, "user:alice", e.now)
	if err != nil || out.Embedded != 3 {
		t.Fatalf("%+v %v", out, err)
	}
	if got := strings.Join(e.idx.calls, ", "); got != "retain user:alice, fill user:alice" {
		t.Fatalf("calls: %s", got)
	}
	e.idx.fillErr = errors.New("embeddings endpoint: connection refused")
	out, err = e.cycle.Run(ctx, "channel:tok1", e.now)
	if err != nil || len(out.Warnings) != 1 || !strings.Contains(out.Warnings[0], "fill missing vectors") {
		t.Fatalf("a failing fill: %+v %v", out, err)
	}
}

func TestEphemeralFactsExpireDuringTheRun(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{})
	e.now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	if _, _, err := e.graph.Add(ctx, "user:bob", knowledge.Fact{Subject: "bob", Predicate: "visits", Object: "Rome", Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(knowledge.EphemeralTTL)
	out, err := e.cycle.Run(ctx, "user:alice", e.now)
	if err != nil || out.Expired != 1 {
		t.Fatalf("%+v %v", out, err)
	}
}

func TestBusyAndBadNamespaces(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{})
	e.now = time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
	seedAlice(t, e)
	entered, release := make(chan struct{}), make(chan struct{})
	e.ext.answer = func(string) (string, error) { close(entered); <-release; return `{}`, nil }
	done := make(chan error, 1)
	go func() { _, err := e.cycle.Run(ctx, "user:alice", e.now); done <- err }()
	<-entered
	if _, err := e.cycle.Run(ctx, "user:alice", e.now); !errors.Is(err, ErrBusy) {
		t.Errorf("concurrent run: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"alice", "user:", "user:../x", "group:a", "channel:a/b", "user:.."} {
		if _, err := e.cycle.Run(ctx, ns, e.now); err == nil {
			t.Errorf("%q accepted", ns)
		}
	}
}

func TestSymlinkedMemoriesFolderIsRefused(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{})
	e.now = time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
	seedAlice(t, e)
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(e.users, "alice"), 0o700)
	if err := os.Symlink(outside, e.userFile("alice", "memories")); err != nil {
		t.Fatal(err)
	}
	e.ext.answer = func(string) (string, error) { return goodAnswer, nil }
	if _, err := e.cycle.Run(ctx, "user:alice", e.now); err == nil {
		t.Fatal("wrote through a symlink out of the workspace")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("files outside: %v", entries)
	}
	if st, err := e.cycle.State(ctx, "user:alice"); err == nil && st.LastTaskID != 0 {
		t.Fatalf("cursor moved: %+v", st)
	}
	if tl, _ := e.graph.Timeline(ctx, "user:alice", ""); len(tl) != 0 {
		t.Fatalf("facts stored although the memory file could not be written: %+v", tl)
	}
}

func TestNamespaces(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{})
	now := time.Now()
	for _, c := range []struct {
		token   string
		private int
	}{{"group1", 0}, {"dm1", 1}, {"quiet", 0}} {
		e.db.Write.Exec(`INSERT INTO conversations (token, private, updated_at) VALUES (?, ?, ?)`, c.token, c.private, store.FormatTime(now))
	}
	e.addTask(t, taskRow{user: "alice", token: "group1", prompt: "x", finished: now})
	e.addTask(t, taskRow{user: "alice", token: "dm1", prompt: "x", finished: now})
	got, err := e.cycle.Namespaces(ctx)
	if err != nil || strings.Join(got, ",") != "channel:group1,user:alice,user:bob" {
		t.Fatalf("%v %v", got, err)
	}
}

func TestParseExtraction(t *testing.T) {
	ex, err := ParseExtraction("```json\n{\"memories\":[\"a\"],\"facts\":null,\"topics\":[\"t\"],\"user_md_ops\":[{\"op\":\"remove\",\"text\":\"x\"}]}\n```")
	if err != nil || len(ex.Memories) != 1 || ex.Facts != nil || ex.UserMDOps[0].Kind != curation.Remove {
		t.Fatalf("%+v %v", ex, err)
	}
	if _, err := ParseExtraction("```python\n{}\n```"); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a python fence: %v", err)
	}
	if _, err := ParseExtraction(" {} "); err != nil {
		t.Fatalf("empty object: %v", err)
	}
}

type recordingPruner struct {
	calls []string
	err   error
}

func (p *recordingPruner) PruneHistory(_ context.Context, ns Namespace, before time.Time) (int, error) {
	p.calls = append(p.calls, ns.String()+" "+before.Format(time.RFC3339))
	return 7, p.err
}

// TestHistoryRetention: the nightly run deletes the namespace's history older than
// HistoryDays (read at each run, so the admin's change applies without a restart), cut at
// midnight in the namespace's timezone; a failure is a warning, not a failed run.
func TestHistoryRetention(t *testing.T) {
	ctx := context.Background()
	days := 0
	pruner := &recordingPruner{}
	e := newEnv(t, Config{HistoryDays: func() int { return days }, History: pruner})
	e.now = time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC) // 03:00 in Berlin
	if _, err := e.cycle.Run(ctx, "user:alice", e.now); err != nil || len(pruner.calls) != 0 {
		t.Fatalf("history_days 0 keeps everything: %v %v", pruner.calls, err)
	}
	days = 30
	out, err := e.cycle.Run(ctx, "user:alice", e.now)
	if err != nil || out.PrunedRows != 7 {
		t.Fatalf("%+v %v", out, err)
	}
	if _, err := e.cycle.Run(ctx, "user:bob", e.now); err != nil { // 21:00 on the 28th in New York
		t.Fatal(err)
	}
	if _, err := e.cycle.Run(ctx, "channel:room1", e.now); err != nil {
		t.Fatal(err)
	}
	want := []string{"user:alice 2026-02-27T00:00:00+01:00", "user:bob 2026-02-26T00:00:00-05:00"}
	if len(pruner.calls) != 3 || pruner.calls[0] != want[0] || pruner.calls[1] != want[1] || !strings.HasPrefix(pruner.calls[2], "channel:room1 ") {
		t.Fatalf("pruned %v", pruner.calls)
	}
	pruner.err = errors.New("disk full")
	out, err = e.cycle.Run(ctx, "user:alice", e.now)
	if err != nil || len(out.Warnings) == 0 || !strings.Contains(strings.Join(out.Warnings, " "), "disk full") {
		t.Fatalf("a failed prune: %+v %v", out, err)
	}
}
