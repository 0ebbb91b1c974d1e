package jobs

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/schedule"
	"github.com/istota/istota/sidecar/internal/store"
)

// dirFiles keeps each user's config files in a directory, as the sidecar's mirror does.
type dirFiles struct {
	root   string
	users  []User
	mu     sync.Mutex
	writes map[string]int
}

func (f *dirFiles) Users(context.Context) ([]User, error) { return f.users, nil }
func (f *dirFiles) Refresh(context.Context, string) error { return nil }
func (f *dirFiles) path(uid, name string) string          { return filepath.Join(f.root, uid, name) }
func (f *dirFiles) ReadConfig(uid, name string) ([]byte, bool, error) {
	b, err := os.ReadFile(f.path(uid, name))
	if os.IsNotExist(err) {
		return nil, false, nil
	}
	return b, err == nil, err
}
func (f *dirFiles) WriteConfig(_ context.Context, uid, name string, data []byte) error {
	f.mu.Lock()
	f.writes[name]++
	f.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(f.path(uid, name)), 0o700); err != nil {
		return err
	}
	return os.WriteFile(f.path(uid, name), data, 0o600)
}
func (f *dirFiles) write(t *testing.T, uid, name, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(f.root, uid), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.path(uid, name), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}
func (f *dirFiles) read(t *testing.T, uid, name string) string {
	t.Helper()
	b, err := os.ReadFile(f.path(uid, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time)     { c.mu.Lock(); c.now = t; c.mu.Unlock() }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }
func mustTime(s string) time.Time    { t, _ := time.Parse(time.RFC3339, s); return t }

type env struct {
	db    *store.DB
	q     *queue.Queue
	sched *schedule.Scheduler
	ob    *outbox.Outbox
	files *dirFiles
	clock *clock
	r     *Runner
}

func newEnv(t *testing.T, start time.Time, users ...User) *env {
	t.Helper()
	ctx := context.Background()
	db, err := testDBs.OpenPath(ctx, filepath.Join(t.TempDir(), "istota.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	c := &clock{now: start}
	e := &env{db: db, clock: c, files: &dirFiles{root: t.TempDir(), users: users, writes: map[string]int{}}}
	e.q = queue.New(db, queue.Options{Clock: c.Now})
	e.sched = schedule.New(db, schedule.Options{Clock: c.Now, Logger: slog.New(slog.DiscardHandler)})
	e.ob = outbox.New(db, nil, outbox.Options{})
	e.r = New(db, e.sched, e.q, e.ob, e.files, Options{Clock: c.Now, BotName: "Istota"})
	for _, u := range users {
		if _, err := db.Write.Exec(`INSERT INTO users (id, email, timezone, is_admin, updated_at) VALUES (?, ?, ?, ?, '')`, u.ID, u.Email, u.Timezone, u.IsAdmin); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// talkedInPrivate records that uid wrote to the bot in a private conversation.
func (e *env) talkedInPrivate(t *testing.T, uid, token string) {
	t.Helper()
	if _, err := e.db.Write.Exec(`INSERT INTO conversations (token, private, updated_at) VALUES (?, 1, '')`, token); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Write.Exec(`INSERT INTO conversation_messages (token, message_id, actor_type, actor_id, text, created_at) VALUES (?, 1, 'users', ?, 'hi', ?)`,
		token, uid, store.FormatTime(e.clock.Now())); err != nil {
		t.Fatal(err)
	}
}

func (e *env) tick(t *testing.T) {
	t.Helper()
	if err := e.r.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (e *env) tasks(t *testing.T) []queue.Task {
	t.Helper()
	ts, err := e.q.List(context.Background(), queue.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].ID < ts[j].ID })
	return ts
}

// finish runs task id to the given end as a worker would.
func (e *env) finish(t *testing.T, id int64, ok bool, result string) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.q.ClaimID(ctx, id, "w"); err != nil {
		t.Fatal(err)
	}
	if err := e.q.Start(ctx, id, "w"); err != nil {
		t.Fatal(err)
	}
	if ok {
		if err := e.q.Complete(ctx, id, "w", queue.Outcome{Result: result}, nil); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := e.q.FailPermanent(ctx, id, "w", result, nil); err != nil {
		t.Fatal(err)
	}
}

func (e *env) notices(t *testing.T, token string) []string {
	t.Helper()
	list, err := e.ob.List(context.Background(), token)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range list {
		out = append(out, m.Text)
	}
	return out
}

const cronFile = "```toml\n" + `[[jobs]]
name = "morning"
schedule = "0 7 * * *"
prompt = "Plan my day"
silent_unless_action = true
` + "```\n"

func TestCronJobQueuedOncePerRun(t *testing.T) {
	alice := User{ID: "alice", Timezone: "Europe/Berlin"}
	e := newEnv(t, mustTime("2026-11-22T05:00:00Z"), alice)
	e.talkedInPrivate(t, "alice", "dmalice1")
	e.files.write(t, "alice", CronFile, cronFile)
	e.tick(t)
	if n := len(e.tasks(t)); n != 0 {
		t.Fatalf("%d tasks before the job is due", n)
	}
	e.clock.Set(mustTime("2026-11-22T06:00:30Z")) // 07:00:30 in Berlin
	e.tick(t)
	e.tick(t)
	ts := e.tasks(t)
	if len(ts) != 1 {
		t.Fatalf("got %d tasks, want 1", len(ts))
	}
	task := ts[0]
	if task.Source != queue.SourceCron || task.Interactive || task.ConversationToken != "dmalice1" || task.Job != "cron:morning" ||
		!task.SilentUnlessAction || !strings.Contains(task.Prompt, "NOTHING_TO_REPORT") || task.DedupeKey != "cron:alice:morning:2026-11-22T06:00Z" {
		t.Fatalf("unexpected task %+v", task)
	}
	j, err := e.sched.Get(context.Background(), "alice", "morning")
	if err != nil {
		t.Fatal(err)
	}
	if want := mustTime("2026-11-23T06:00:00Z"); !j.NextRunAt.Equal(want) {
		t.Fatalf("next run %s, want %s", j.NextRunAt, want)
	}
}

// A fake clock walks across both Berlin DST changes: a 02:30 job runs once on every day,
// on the spring day at 03:00 local (02:30 does not exist), on the fall day once.
func TestCronAcrossDST(t *testing.T) {
	for _, tc := range []struct{ name, from string }{
		{"spring forward", "2026-03-27T12:00:00Z"},
		{"fall back", "2026-10-23T12:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alice := User{ID: "alice", Timezone: "Europe/Berlin"}
			e := newEnv(t, mustTime(tc.from), alice)
			e.talkedInPrivate(t, "alice", "dmalice1")
			e.files.write(t, "alice", CronFile, "```toml\n[[jobs]]\nname = \"night\"\nschedule = \"30 2 * * *\"\nprompt = \"x\"\n```\n")
			end := e.clock.Now().Add(4 * 24 * time.Hour)
			for e.clock.Now().Before(end) {
				e.tick(t)
				e.clock.Add(10 * time.Minute)
			}
			berlin, _ := time.LoadLocation("Europe/Berlin")
			days := map[string]int{}
			for _, task := range e.tasks(t) {
				// The dedupe key holds the scheduled instant.
				at, err := time.Parse("2006-01-02T15:04Z", task.DedupeKey[len("cron:alice:night:"):])
				if err != nil {
					t.Fatal(err)
				}
				local := at.In(berlin)
				days[local.Format("2006-01-02")]++
				if hm := local.Format("15:04"); hm != "02:30" && hm != "03:00" {
					t.Errorf("a run at %s local", local)
				}
			}
			if len(days) != 4 {
				t.Fatalf("runs on %d days, want 4: %v", len(days), days)
			}
			for d, n := range days {
				if n != 1 {
					t.Errorf("%s: %d runs, want 1", d, n)
				}
			}
		})
	}
}

func TestCronFailuresDisableAndTellOnce(t *testing.T) {
	alice := User{ID: "alice", Timezone: "UTC"}
	e := newEnv(t, mustTime("2026-11-22T00:00:30Z"), alice)
	e.talkedInPrivate(t, "alice", "dmalice1")
	e.files.write(t, "alice", CronFile, "```toml\n[[jobs]]\nname = \"hourly\"\nschedule = \"0 * * * *\"\nprompt = \"x\"\n```\n")
	e.tick(t)
	for i := 0; i < 3; i++ {
		e.clock.Add(time.Hour)
		e.tick(t)
		ts := e.tasks(t)
		e.finish(t, ts[len(ts)-1].ID, false, "model API error 500")
		e.tick(t)
		e.tick(t)
	}
	j, err := e.sched.Get(context.Background(), "alice", "hourly")
	if err != nil {
		t.Fatal(err)
	}
	if j.DisabledBy != schedule.DisabledByFailures || j.ConsecutiveFailures != 3 {
		t.Fatalf("job %+v, want disabled after 3 failures", j)
	}
	var told int
	for _, n := range e.notices(t, "dmalice1") {
		if strings.Contains(n, `"hourly" was switched off`) {
			told++
		}
	}
	if told != 1 {
		t.Fatalf("told %d times, want once: %q", told, e.notices(t, "dmalice1"))
	}
	e.clock.Add(time.Hour)
	e.tick(t)
	if n := len(e.tasks(t)); n != 3 {
		t.Fatalf("a disabled job ran: %d tasks", n)
	}
}

func TestBrokenCronKeepsJobsAndTellsOnce(t *testing.T) {
	alice := User{ID: "alice", Timezone: "UTC"}
	e := newEnv(t, mustTime("2026-11-22T00:00:30Z"), alice)
	e.talkedInPrivate(t, "alice", "dmalice1")
	e.files.write(t, "alice", CronFile, cronFile)
	e.tick(t)
	e.files.write(t, "alice", CronFile, "```toml\n[[jobs]]\nname = \"morning\"\nschedule = \"61 7 * * *\"\nprompt = \"x\"\n```\n")
	e.tick(t)
	e.tick(t)
	notes := e.notices(t, "dmalice1")
	if len(notes) != 1 || !strings.Contains(notes[0], "line 4") || !strings.Contains(notes[0], "keep running") {
		t.Fatalf("notices %q, want one naming line 4", notes)
	}
	if _, err := e.sched.Get(context.Background(), "alice", "morning"); err != nil {
		t.Fatalf("the last good job is gone: %v", err)
	}
}

func TestMissingCronWrittenBackOnce(t *testing.T) {
	alice := User{ID: "alice", Timezone: "UTC"}
	e := newEnv(t, mustTime("2026-11-22T00:00:30Z"), alice)
	e.files.write(t, "alice", CronFile, cronFile)
	e.tick(t)
	os.Remove(e.files.path("alice", CronFile))
	e.tick(t)
	if got := e.files.read(t, "alice", CronFile); !strings.Contains(got, `name = "morning"`) || !strings.Contains(got, "silent_unless_action = true") {
		t.Fatalf("CRON.md not written back: %q", got)
	}
	if _, err := e.sched.Get(context.Background(), "alice", "morning"); err != nil {
		t.Fatal(err)
	}
	// Deleted again after the one write-back: the user wants no jobs.
	os.Remove(e.files.path("alice", CronFile))
	e.tick(t)
	if jobs, _ := e.sched.List(context.Background(), "alice"); len(jobs) != 0 {
		t.Fatalf("jobs left after the file was deleted: %v", jobs)
	}
	if e.files.writes[CronFile] != 1 {
		t.Fatalf("CRON.md written %d times, want once", e.files.writes[CronFile])
	}
}

func TestCommandJobsAdminOnly(t *testing.T) {
	root := User{ID: "root", Timezone: "UTC", IsAdmin: true}
	bob := User{ID: "bob", Timezone: "UTC"}
	e := newEnv(t, mustTime("2026-11-22T00:00:30Z"), root, bob)
	job := "```toml\n[[jobs]]\nname = \"df\"\nschedule = \"* * * * *\"\ncommand = \"df -h\"\n```\n"
	e.files.write(t, "root", CronFile, job)
	e.files.write(t, "bob", CronFile, job)
	e.tick(t)
	e.clock.Add(time.Minute)
	e.tick(t)
	ts := e.tasks(t)
	if len(ts) != 1 || ts[0].UserID != "root" || ts[0].Command != "df -h" {
		t.Fatalf("tasks %+v, want one command task of root", ts)
	}
	if fs, err := e.sched.FileStatus(context.Background(), "bob"); err != nil || len(fs.Problems) == 0 || !strings.Contains(fs.Problems[0].Message, "administrators") {
		t.Fatalf("bob's file status %+v, %v", fs, err)
	}
}

func TestJobTargetsOnlyTheUsersOwnPlaces(t *testing.T) {
	alice := User{ID: "alice", Timezone: "UTC", Email: "alice@example.org"}
	e := newEnv(t, mustTime("2026-11-22T00:00:30Z"), alice)
	e.talkedInPrivate(t, "alice", "dmalice1")
	e.files.write(t, "alice", CronFile, "```toml\n"+
		"[[jobs]]\nname = \"a\"\nschedule = \"* * * * *\"\nprompt = \"x\"\nconversation = \"otherroom1\"\n"+
		"[[jobs]]\nname = \"b\"\nschedule = \"* * * * *\"\nprompt = \"x\"\nemail = \"victim@example.com\"\n"+
		"[[jobs]]\nname = \"c\"\nschedule = \"* * * * *\"\nprompt = \"x\"\nemail = \"Alice@Example.org\"\n```\n")
	e.tick(t)
	e.clock.Add(time.Minute)
	e.tick(t)
	got := map[string]queue.Task{}
	for _, task := range e.tasks(t) {
		got[task.Job] = task
	}
	if a := got["cron:a"]; a.ConversationToken != "dmalice1" {
		t.Errorf("job a posts to %q, want the private conversation", a.ConversationToken)
	}
	if b := got["cron:b"]; b.Email != nil || b.ConversationToken != "dmalice1" {
		t.Errorf("job b mails %+v", b.Email)
	}
	if c := got["cron:c"]; c.Email == nil || c.Email.To != "Alice@Example.org" {
		t.Errorf("job c: %+v, want mail to the user's own address", c.Email)
	}
}

func TestTasksFileLifecycle(t *testing.T) {
	alice := User{ID: "alice", Timezone: "UTC"}
	e := newEnv(t, mustTime("2026-11-22T00:00:30Z"), alice)
	e.talkedInPrivate(t, "alice", "dmalice1")
	e.files.write(t, "alice", TasksFile, "# My tasks\n\n- [ ] Summarise inbox/report.pdf\n- [x] Old thing\n")
	e.tick(t)
	e.tick(t)
	ts := e.tasks(t)
	if len(ts) != 1 || ts[0].Source != queue.SourceTasksMD || !strings.Contains(ts[0].Prompt, "Summarise inbox/report.pdf") || ts[0].ConversationToken != "dmalice1" {
		t.Fatalf("tasks %+v", ts)
	}
	if got := e.files.read(t, "alice", TasksFile); !strings.Contains(got, "- [~] Summarise inbox/report.pdf") {
		t.Fatalf("not marked running:\n%s", got)
	}
	// The user edits the file while the task runs.
	e.files.write(t, "alice", TasksFile, "# My tasks\n\n- [~] Summarise inbox/report.pdf\n- [x] Old thing\n- [ ] Book a table\n")
	e.finish(t, ts[0].ID, true, "Three pages, all good.")
	e.tick(t)
	got := e.files.read(t, "alice", TasksFile)
	for _, want := range []string{"- [x] Summarise inbox/report.pdf", "Three pages, all good.", "- [~] Book a table", "# My tasks", "- [x] Old thing"} {
		if !strings.Contains(got, want) {
			t.Errorf("TASKS.md lacks %q:\n%s", want, got)
		}
	}
	e.tick(t)
	if n := len(e.tasks(t)); n != 2 {
		t.Fatalf("%d tasks, want 2", n)
	}
	// Failure is written as [!].
	ts = e.tasks(t)
	e.finish(t, ts[1].ID, false, "agent error: no table free")
	e.tick(t)
	if got := e.files.read(t, "alice", TasksFile); !strings.Contains(got, "- [!] Book a table") || !strings.Contains(got, "no table free") {
		t.Fatalf("failure not written:\n%s", got)
	}
	// Reopened by the user: runs again, once.
	e.files.write(t, "alice", TasksFile, strings.Replace(e.files.read(t, "alice", TasksFile), "- [!] Book a table", "- [ ] Book a table", 1))
	e.tick(t)
	e.tick(t)
	if n := len(e.tasks(t)); n != 3 {
		t.Fatalf("%d tasks after reopening, want 3", n)
	}
}

// A CRON.md the agent changed in a conversation is judged there: the refusal goes to the
// conversation of the edit (once, with the reason), not to the private one; a later
// broken edit the user made in Files goes to the private conversation again.
func TestRefusedAgentEditIsToldWhereItWasAsked(t *testing.T) {
	alice := User{ID: "alice", Timezone: "UTC"}
	e := newEnv(t, mustTime("2026-11-22T00:00:30Z"), alice)
	e.talkedInPrivate(t, "alice", "dmalice1")
	e.files.write(t, "alice", CronFile, cronFile)
	e.tick(t)
	if err := convlog.RecordEdit(context.Background(), e.db.Write, "alice", CronFile, "family42", 7, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	e.files.write(t, "alice", CronFile, "```toml\n[[jobs]]\nname = \"bins\"\nschedule = \"every monday\"\nprompt = \"x\"\n```\n")
	e.tick(t)
	e.tick(t)
	got := e.notices(t, "family42")
	if len(got) != 1 || !strings.Contains(got[0], "CRON.md made here") || !strings.Contains(got[0], "line 4") || !strings.Contains(got[0], "schedule") {
		t.Fatalf("notices in the conversation of the edit: %q", got)
	}
	if n := e.notices(t, "dmalice1"); len(n) != 0 {
		t.Fatalf("the refusal was also told in private: %q", n)
	}
	e.files.write(t, "alice", CronFile, "```toml\n[[jobs]]\nname = \"bins\"\nschedule = \"0 25 * * 1\"\nprompt = \"x\"\n```\n")
	e.tick(t)
	if n := e.notices(t, "dmalice1"); len(n) != 1 || strings.Contains(n[0], "made here") {
		t.Fatalf("the user's own broken edit: %q", n)
	}
	if n := e.notices(t, "family42"); len(n) != 1 {
		t.Fatalf("the conversation of an old edit got %d notices", len(n))
	}
}
