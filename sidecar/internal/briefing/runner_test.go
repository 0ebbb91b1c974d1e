package briefing

import (
	"context"
	"database/sql"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

const (
	gapBriefing      = "[[briefings]]\nname = \"night\"\nschedule = \"30 2 * * *\"\ncomponents = [\"todos\"]\n"
	midnightBriefing = "[[briefings]]\nname = \"midnight\"\nschedule = \"0 0 * * *\"\ncomponents = [\"todos\"]\n"
	morningBriefing  = "[[briefings]]\nname = \"morning\"\nschedule = \"0 7 * * *\"\ncomponents = [\"todos\"]\n"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// runKeys walks the fake clock minute by minute from "from" to "to", ticking each
// minute, and returns the dedupe keys of the briefing tasks queued.
func runKeys(t *testing.T, e *env, from, to time.Time) []string {
	t.Helper()
	for now := from; !now.After(to); now = now.Add(time.Minute) {
		e.clock.Set(now)
		e.tick(t)
	}
	var keys []string
	for _, task := range e.tasks(t) {
		keys = append(keys, task.DedupeKey)
	}
	return keys
}

// TestDueAcrossMidnightAndDST walks two days around each Europe/Berlin DST change: a
// briefing at 02:30 runs once at the end of the spring gap and once (the first time)
// on the repeated autumn hour; a midnight briefing runs at local midnight.
func TestDueAcrossMidnightAndDST(t *testing.T) {
	tests := []struct {
		name     string
		from, to time.Time
		want     []string
	}{
		{"spring forward 2026-03-29", utc("2026-03-28T12:00:00Z"), utc("2026-03-30T12:00:00Z"), []string{
			"briefing:alice:midnight:2026-03-28T23:00Z", // 00:00 CET, 29 March
			"briefing:alice:night:2026-03-29T01:00Z",    // 02:30 does not exist: 03:00 CEST
			"briefing:alice:midnight:2026-03-29T22:00Z", // 00:00 CEST, 30 March
			"briefing:alice:night:2026-03-30T00:30Z",    // 02:30 CEST
		}},
		{"fall back 2026-10-25", utc("2026-10-24T12:00:00Z"), utc("2026-10-26T12:00:00Z"), []string{
			"briefing:alice:midnight:2026-10-24T22:00Z", // 00:00 CEST, 25 October
			"briefing:alice:night:2026-10-25T00:30Z",    // the first 02:30 (CEST) only
			"briefing:alice:midnight:2026-10-25T23:00Z", // 00:00 CET, 26 October
			"briefing:alice:night:2026-10-26T01:30Z",    // 02:30 CET
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.from, nil)
			e.src.writeBriefings(t, "alice", midnightBriefing+gapBriefing)
			got := runKeys(t, e, tt.from, tt.to)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("runs\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestUserTimezone checks that the same cron runs at the user's local time.
func TestUserTimezone(t *testing.T) {
	start := utc("2026-06-01T00:00:00Z")
	e := newEnv(t, start, nil)
	e.src.users = append(e.src.users, User{ID: "bob", Timezone: "America/New_York"}, User{ID: "carol", Timezone: "Mars/Olympus"})
	for _, u := range []string{"alice", "bob", "carol"} {
		e.src.writeBriefings(t, u, morningBriefing)
	}
	e.tick(t)
	want := map[string]time.Time{
		"alice": utc("2026-06-01T05:00:00Z"), // 07:00 CEST
		"bob":   utc("2026-06-01T11:00:00Z"), // 07:00 EDT
		"carol": utc("2026-06-01T07:00:00Z"), // unknown zone: UTC
	}
	for uid, next := range want {
		if got := e.state(t, uid, "morning").NextRunAt; !got.Equal(next) {
			t.Errorf("%s: next run %s, want %s", uid, got, next)
		}
	}
	_, problems, err := e.r.Status(context.Background(), "carol")
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || !strings.Contains(problems[0].Message, "Mars/Olympus") {
		t.Fatalf("carol's problems = %v, want one about the zone", problems)
	}
}

func TestOneTaskPerRun(t *testing.T) {
	due := utc("2026-05-04T05:00:00Z") // 07:00 in Berlin
	t.Run("repeated tick", func(t *testing.T) {
		e := newEnv(t, due.Add(-time.Hour), nil)
		e.src.writeBriefings(t, "alice", morningBriefing)
		e.tick(t)
		e.clock.Set(due)
		e.tick(t)
		e.tick(t)
		if n := len(e.tasks(t)); n != 1 {
			t.Fatalf("%d tasks, want 1", n)
		}
	})
	t.Run("concurrent ticks", func(t *testing.T) {
		e := newEnv(t, due.Add(-time.Hour), nil)
		e.src.writeBriefings(t, "alice", morningBriefing)
		e.tick(t)
		e.clock.Set(due)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = e.r.Tick(context.Background()) }()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		tasks := e.tasks(t)
		if len(tasks) != 1 {
			t.Fatalf("%d tasks, want 1", len(tasks))
		}
		if s := e.state(t, "alice", "morning"); s.LastTaskID != tasks[0].ID || !s.NextRunAt.Equal(due.Add(24*time.Hour)) {
			t.Fatalf("state %+v after the run", s)
		}
	})
	t.Run("crash between enqueue and mark", func(t *testing.T) {
		e := newEnv(t, due.Add(-time.Hour), nil)
		e.src.writeBriefings(t, "alice", morningBriefing)
		e.tick(t)
		e.clock.Set(due)
		// The first process queued the run and died before recording it.
		first, created, err := e.q.Enqueue(context.Background(), queue.NewTask{UserID: "alice", Source: queue.SourceBriefing,
			Prompt: "from before the crash", DedupeKey: DedupeKey("alice", "morning", due)})
		if err != nil || !created {
			t.Fatal(created, err)
		}
		e.clock.Set(due.Add(2 * time.Minute)) // restarted a little later
		e.tick(t)
		tasks := e.tasks(t)
		if len(tasks) != 1 || tasks[0].ID != first.ID {
			t.Fatalf("tasks %+v, want only the one from before the crash", tasks)
		}
		s := e.state(t, "alice", "morning")
		if s.LastTaskID != first.ID || !s.LastRunAt.Equal(due) || !s.NextRunAt.Equal(due.Add(24*time.Hour)) {
			t.Fatalf("state %+v, want the run recorded and the next one tomorrow", s)
		}
	})
	t.Run("missed runs collapse into one", func(t *testing.T) {
		e := newEnv(t, due.Add(-time.Hour), nil)
		e.src.writeBriefings(t, "alice", morningBriefing)
		e.tick(t)
		// Down for three and a half days.
		back := due.Add(84 * time.Hour)
		e.clock.Set(back)
		e.tick(t)
		e.tick(t)
		tasks := e.tasks(t)
		if len(tasks) != 1 || tasks[0].DedupeKey != DedupeKey("alice", "morning", due) {
			t.Fatalf("tasks %+v, want one run for the first missed time", tasks)
		}
		if next := e.state(t, "alice", "morning").NextRunAt; !next.After(back) || next.Sub(back) > 24*time.Hour {
			t.Fatalf("next run %s, want the next 07:00 after %s", next, back)
		}
	})
}

func TestBrokenFileKeepsLastGood(t *testing.T) {
	start := utc("2026-05-04T04:00:00Z")
	var told []string
	e := newEnv(t, start, func(o *Options) {
		o.Notify = func(ctx context.Context, tx *sql.Tx, uid, key, text string) error {
			told = append(told, uid+": "+text)
			return nil
		}
	})
	e.src.writeBriefings(t, "alice", morningBriefing)
	e.tick(t)
	good := e.state(t, "alice", "morning")

	// Broken TOML: the briefing stays, with its schedule, and the user is told once.
	e.src.writeBriefings(t, "alice", "[[briefings]\nname = \"morning\"\n")
	e.tick(t)
	e.tick(t)
	list, problems, err := e.r.Status(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || !list[0].NextRunAt.Equal(good.NextRunAt) {
		t.Fatalf("briefings %+v, want the last good one kept", list)
	}
	if len(problems) != 1 || problems[0].Line != 7 || !strings.Contains(problems[0].Message, "not valid TOML") {
		t.Fatalf("problems %+v, want the TOML error where the decoder met it (line 7)", problems)
	}
	if len(told) != 1 || !strings.Contains(told[0], "line 7") || !strings.Contains(told[0], "keep running") {
		t.Fatalf("told %q, want one notice naming line 7", told)
	}
	// It still runs while broken.
	e.clock.Set(utc("2026-05-04T05:00:00Z"))
	e.tick(t)
	if n := len(e.tasks(t)); n != 1 {
		t.Fatalf("%d tasks while the file is broken, want 1", n)
	}

	// A file with one bad briefing: the good one runs, the bad one is named.
	e.src.writeBriefings(t, "alice", morningBriefing+"[[briefings]]\nname = \"bad\"\nschedule = \"0 25 * * *\"\ncomponents = [\"todos\"]\n")
	e.tick(t)
	list, problems, _ = e.r.Status(context.Background(), "alice")
	if len(list) != 1 || list[0].Name != "morning" {
		t.Fatalf("briefings %+v, want morning only", list)
	}
	if len(problems) != 1 || problems[0].Line != 12 || problems[0].Field != "schedule" {
		t.Fatalf("problems %+v, want the schedule on line 12", problems)
	}
	if len(told) != 2 || !strings.Contains(told[1], "other briefings") {
		t.Fatalf("told %q, want a second notice for the new version", told)
	}

	// Deleting the file removes the briefings (there is nothing to keep running).
	if err := removeFile(e.src, "alice"); err != nil {
		t.Fatal(err)
	}
	e.tick(t)
	if list, _, _ = e.r.Status(context.Background(), "alice"); len(list) != 0 {
		t.Fatalf("briefings %+v after the file was deleted", list)
	}
}

func TestStatusAndResults(t *testing.T) {
	start := utc("2026-05-04T04:00:00Z")
	e := newEnv(t, start, func(o *Options) {
		o.Defaults = Defaults{Components: []userconfig.Component{userconfig.ComponentTodos, userconfig.ComponentNews},
			Feeds: []string{"https://admin.example/feed", "https://me.example/feed"}}
	})
	e.src.writeBriefings(t, "alice", "[[briefings]]\nname = \"morning\"\nschedule = \"0 7 * * *\"\n"+
		"[[briefings]]\nname = \"news\"\nschedule = \"0 8 * * *\"\ncomponents = [\"news\"]\nfeeds = [\"https://me.example/feed\", \"https://mine.example/rss\"]\n"+
		"[[briefings]]\nname = \"off\"\nschedule = \"0 9 * * *\"\ncomponents = [\"notes\"]\nenabled = false\n")
	e.tick(t)
	list, problems, err := e.r.Status(context.Background(), "alice")
	if err != nil || len(problems) != 0 || len(list) != 3 {
		t.Fatalf("status %+v %v %v", list, problems, err)
	}
	morning, news, off := list[0], list[1], list[2]
	if !reflect.DeepEqual(morning.Components, []userconfig.Component{"todos", "news"}) ||
		!reflect.DeepEqual(morning.Feeds, []string{"https://admin.example/feed", "https://me.example/feed"}) {
		t.Errorf("morning %+v: want the admin's components and feeds", morning)
	}
	if !reflect.DeepEqual(news.Feeds, []string{"https://me.example/feed", "https://mine.example/rss", "https://admin.example/feed"}) {
		t.Errorf("news feeds %q: want the user's, then the admin's, each once", news.Feeds)
	}
	if off.Enabled || !off.NextRunAt.IsZero() || off.Output != userconfig.OutputTalk || off.Timezone != "Europe/Berlin" {
		t.Errorf("off %+v: want disabled without a next run", off)
	}
	if morning.LastResult != "" || !morning.NextRunAt.Equal(utc("2026-05-04T05:00:00Z")) {
		t.Errorf("morning %+v before any run", morning)
	}

	e.clock.Set(utc("2026-05-04T05:00:00Z"))
	e.tick(t)
	if s := e.state(t, "alice", "morning"); s.LastResult != ResultQueued || !s.LastRunAt.Equal(utc("2026-05-04T05:00:00Z")) {
		t.Fatalf("after queueing: %+v", s)
	}
	tasks := e.tasks(t)
	if len(tasks) != 1 {
		t.Fatalf("%d tasks", len(tasks))
	}
	e.finish(t, tasks[0].ID, false)
	if s := e.state(t, "alice", "morning"); s.LastResult != ResultFailed {
		t.Fatalf("after failing: %+v", s)
	}
	e.tick(t) // settles the result into the briefing
	if _, err := e.db.Write.Exec(`DELETE FROM tasks`); err != nil {
		t.Fatal(err)
	}
	if s := e.state(t, "alice", "morning"); s.LastResult != ResultFailed {
		t.Fatalf("after the task was deleted: %+v, want the settled result", s)
	}

	// Changing the admin's defaults changes the briefings that rely on them.
	e2 := New(e.db, e.q, e.src, Options{Clock: e.clock.Now, Defaults: Defaults{Components: []userconfig.Component{userconfig.ComponentReminders}}})
	if err := e2.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	list, problems, _ = e2.Status(context.Background(), "alice")
	if len(list) != 3 || len(problems) != 0 || !reflect.DeepEqual(list[0].Components, []userconfig.Component{"reminders"}) ||
		len(list[0].Feeds) != 0 || !reflect.DeepEqual(list[1].Feeds, []string{"https://me.example/feed", "https://mine.example/rss"}) {
		t.Fatalf("with new defaults: %+v %v; want morning with reminders and news with its own feeds only", list, problems)
	}
}

func TestDelivery(t *testing.T) {
	due := utc("2026-05-04T05:00:00Z")
	tests := []struct {
		name      string
		settings  string
		user      User
		wantToken string
		wantMail  string
	}{
		{"talk to the latest private conversation", "", User{ID: "alice", Timezone: "UTC", Email: "alice@example.org"}, "private2", ""},
		{"talk to a conversation of the user", "conversation = \"group1\"\n", User{ID: "alice", Timezone: "UTC"}, "group1", ""},
		{"talk to someone else's conversation", "conversation = \"other\"\n", User{ID: "alice", Timezone: "UTC"}, "private2", ""},
		{"email to the user's address", "output = \"email\"\n", User{ID: "alice", Timezone: "UTC", Email: "alice@example.org"}, "", "alice@example.org"},
		{"email to an added address", "output = \"email\"\nemail = \"work@example.org\"\n", User{ID: "alice", Timezone: "UTC", Email: "alice@example.org"}, "", "work@example.org"},
		{"email to a stranger", "output = \"email\"\nemail = \"victim@example.net\"\n", User{ID: "alice", Timezone: "UTC", Email: "alice@example.org"}, "", "alice@example.org"},
		{"email without any address", "output = \"email\"\n", User{ID: "alice", Timezone: "UTC"}, "private2", ""},
		{"both", "output = \"both\"\nconversation = \"group1\"\n", User{ID: "alice", Timezone: "UTC", Email: "alice@example.org"}, "group1", "alice@example.org"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, due.Add(-time.Hour), func(o *Options) { o.BotName = "Ada" })
			e.src.users = []User{tt.user}
			e.talkedIn(t, "alice", "private1", true, due.Add(-48*time.Hour))
			e.talkedIn(t, "alice", "group1", false, due.Add(-24*time.Hour))
			e.talkedIn(t, "alice", "private2", true, due.Add(-2*time.Hour))
			e.talkedIn(t, "bob", "other", false, due.Add(-time.Hour))
			if _, err := e.db.Write.Exec(`INSERT INTO user_emails (email, user_id, created_at) VALUES ('work@example.org', 'alice', '')`); err != nil {
				t.Fatal(err)
			}
			e.src.writeBriefings(t, "alice", "[[briefings]]\nname = \"Morning\"\nschedule = \"0 5 * * *\"\ncomponents = [\"todos\"]\n"+tt.settings)
			e.tick(t)
			e.clock.Set(due)
			e.tick(t)
			tasks := e.tasks(t)
			if len(tasks) != 1 {
				t.Fatalf("%d tasks", len(tasks))
			}
			task := tasks[0]
			if task.ConversationToken != tt.wantToken {
				t.Errorf("conversation %q, want %q", task.ConversationToken, tt.wantToken)
			}
			gotMail := ""
			if task.Email != nil {
				gotMail = task.Email.To
				if task.Email.Subject != "Ada briefing: Morning" {
					t.Errorf("subject %q", task.Email.Subject)
				}
			}
			if gotMail != tt.wantMail {
				t.Errorf("mail to %q, want %q", gotMail, tt.wantMail)
			}
			if task.Source != queue.SourceBriefing || task.Interactive || task.Job != "briefing:Morning" || task.MaxAttempts != 2 {
				t.Errorf("task %+v: want a non-interactive briefing task for job briefing:Morning", task)
			}
		})
	}
}

func TestRunStopsWithContext(t *testing.T) {
	e := newEnv(t, time.Now(), func(o *Options) { o.Clock = time.Now })
	e.src.writeBriefings(t, "alice", morningBriefing)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.r.Run(ctx) }()
	// The first tick syncs the file; wait for it, then stop the loop.
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, _, err := e.r.Status(context.Background(), "alice")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the loop never synced the file")
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.r.Wake()
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
