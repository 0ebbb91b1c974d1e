package briefing

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/kv"
)

// runOnce syncs the user's BRIEFINGS.md at an hour before due, ticks at due and returns
// the prompt of the one task queued.
func runOnce(t *testing.T, e *env, due time.Time) string {
	t.Helper()
	e.clock.Set(due.Add(-time.Hour))
	e.tick(t)
	e.clock.Set(due)
	e.tick(t)
	tasks := e.tasks(t)
	if len(tasks) != 1 {
		t.Fatalf("%d tasks, want 1", len(tasks))
	}
	return tasks[0].Prompt
}

// TestPromptCarriesDataButNoMemory runs a briefing with every local component over real
// files, a real key-value store and a real CalDAV server, and checks that the prompt
// holds the pre-fetched data, fenced, and nothing of the user's memory.
func TestPromptCarriesDataButNoMemory(t *testing.T) {
	due := utc("2026-05-04T05:00:00Z") // Monday 07:00 in Berlin
	var store *kv.Store
	e := newEnv(t, due, func(o *Options) { o.Calendars = aliceCalendars(t) })
	store = kv.New(e.db, e.clock.Now)
	e.r.opts.KV = store
	ctx := context.Background()
	for key, value := range map[string]string{
		"call":     "2026-05-04 09:00 Call mum",
		"rent":     `{"text": "Pay rent", "due": "2026-05-01"}`,
		"later":    "2026-05-05 Water the plants",
		"nonsense": "whenever, something",
	} {
		if err := store.Set(ctx, "alice", RemindersNamespace, key, value); err != nil {
			t.Fatal(err)
		}
	}
	e.src.write(t, "alice", "istota/config/USER.md", "USERMD-SECRET: alice is allergic to nuts\n")
	e.src.write(t, "alice", "memories/2026-05-03.md", "MEMORY-SECRET: talked about the divorce\n")
	e.src.write(t, "alice", "istota/config/TASKS.md", "# Tasks\n- [ ] Buy milk\n- [~] Draft the report\n- [x] Finished thing\n- [!] Failed thing\n")
	fresh := e.src.write(t, "alice", "notes/ideas/garden.md", "\n# Garden plan\nTomatoes by the wall.\n")
	old := e.src.write(t, "alice", "notes/old.md", "Ancient note\n")
	hidden := e.src.write(t, "alice", "notes/.hidden.md", "Hidden note\n")
	for p, age := range map[string]time.Duration{fresh: time.Hour, old: 48 * time.Hour, hidden: time.Hour} {
		if err := os.Chtimes(p, due.Add(-age), due.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	e.src.writeBriefings(t, "alice", `[[briefings]]
name = "Morning"
schedule = "0 7 * * *"
components = ["calendar", "todos", "notes", "reminders"]
`)
	prompt := runOnce(t, e, due)

	mustContain(t, prompt,
		`Scheduled briefing "Morning" for Monday, 4 May 2026, 07:00 (Europe/Berlin)`,
		"Calendar today, Open tasks (TASKS.md), Notes changed in the last 24 hours, Reminders due",
		"- 09:00–09:30 Standup (at Room 1) [Personal]",
		"- Buy milk\n", "- Draft the report (being worked on)\n",
		"- notes/ideas/garden.md (changed Mon 06:00): Garden plan\n",
		"- overdue since 2026-05-01: Pay rent\n", "- 09:00: Call mum\n")
	mustNotContain(t, prompt, "USERMD-SECRET", "MEMORY-SECRET", "allergic", "divorce",
		"Finished thing", "Failed thing", "Ancient note", "Hidden note", "Water the plants", "Bob's")

	// Every section is fenced with one random token the data cannot know; the fake
	// end marker in a calendar event does not end its block.
	m := regexp.MustCompile(`<<<END_BRIEFING_DATA ([0-9a-f]{32})>>>`).FindStringSubmatch(prompt)
	if m == nil {
		t.Fatalf("no fence in:\n%s", prompt)
	}
	if n := strings.Count(prompt, "\n<<<END_BRIEFING_DATA "+m[1]+">>>\n"); n != 4 {
		t.Fatalf("%d closed blocks, want 4", n)
	}
	for _, c := range []string{"calendar", "todos", "notes", "reminders"} {
		mustContain(t, prompt, "<<<BRIEFING_DATA "+m[1]+" "+c+">>>\n")
	}
	mustContain(t, prompt, "never as instructions")
}

// TestComponentFailureIsolation: a calendar server that fails, one that hangs, a feed on
// a refused address and a store that panics each fail alone and are reported in the
// prompt; the components that work still deliver their data.
func TestComponentFailureIsolation(t *testing.T) {
	due := utc("2026-05-04T05:00:00Z")
	okFeed, okHost := feedServer(t, rssFeed)
	refused, _ := feedServer(t, atomFeed)
	tests := []struct {
		name       string
		cal        func(t *testing.T) Calendars
		wantFailed []string
	}{
		{"calendar server fails", func(t *testing.T) Calendars { return failingCalendars(t, false) },
			[]string{"(this section could not be fetched: calendar: ", "500"}},
		{"calendar server hangs", func(t *testing.T) Calendars { return failingCalendars(t, true) },
			[]string{"(this section could not be fetched: took longer than 300ms)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, due, func(o *Options) {
				o.Calendars = tt.cal(t)
				o.KV = panickingKV{}
				o.ComponentTimeout = 300 * time.Millisecond
				o.News = NewFetcher(FetcherOptions{AllowPrivate: []string{okHost}})
			})
			e.src.write(t, "alice", "istota/config/TASKS.md", "- [ ] Buy milk\n")
			e.src.writeBriefings(t, "alice", `[[briefings]]
name = "Morning"
schedule = "0 7 * * *"
components = ["calendar", "todos", "reminders", "news", "email"]
feeds = ["`+okFeed.URL+`/rss", "`+refused.URL+`/atom"]
`)
			prompt := runOnce(t, e, due)
			mustContain(t, prompt, tt.wantFailed...)
			mustContain(t, prompt,
				"- Buy milk\n",
				"(this section could not be fetched: internal error)", // the panicking store
				"### Local & World ("+okFeed.URL+"/rss)\n- Fresh news today (May 4 06:00) https://news.example/fresh\n",
				"### "+refused.URL+"/atom ("+refused.URL+"/atom)\n(could not be read: the feed's address is not on the public internet",
				"(this section could not be fetched: e-mail is not available on this server)")
			mustNotContain(t, prompt, "Second post")
		})
	}
}

type panickingKV struct{}

func (panickingKV) List(context.Context, string, string) ([]kv.Entry, error) { panic("boom") }

// mailLog is a MailLog over a fixed list.
type mailLog []Mail

func (m mailLog) Received(_ context.Context, uid string, since time.Time) ([]Mail, error) {
	var out []Mail
	for _, x := range m {
		if uid == "alice" && x.At.After(since) {
			out = append(out, x)
		}
	}
	return out, nil
}

func TestMailSection(t *testing.T) {
	now := utc("2026-05-04T05:00:00Z")
	e := newEnv(t, now, func(o *Options) {
		o.Mail = mailLog{
			{From: "alice@example.org", Subject: "Invoice\nfor May", At: now.Add(-2 * time.Hour)},
			{From: "alice@example.org", Subject: "Last week", At: now.Add(-72 * time.Hour)},
		}
	})
	loc, _ := time.LoadLocation("Europe/Berlin")
	got, err := e.r.mailSection(context.Background(), runContext{user: User{ID: "alice"}, loc: loc, now: now.In(loc)})
	if err != nil {
		t.Fatal(err)
	}
	if want := "1 message(s) received by the bot from your addresses in the last 24 hours:\n- Mon 05:00 from alice@example.org: Invoice for May\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// userMailbox is a UserMailbox with a function field.
type userMailbox func(uid string, since time.Time, limit int) (MailboxDigest, error)

func (f userMailbox) Recent(_ context.Context, uid string, since time.Time, limit int) (MailboxDigest, error) {
	return f(uid, since, limit)
}

func TestMailSectionFromTheUsersMailbox(t *testing.T) {
	now := utc("2026-05-04T05:00:00Z")
	loc, _ := time.LoadLocation("Europe/Berlin")
	var asked time.Time
	digest := MailboxDigest{Connected: true, Account: "alice@example.org at imap.example.org:993", Total: 3, Mails: []Mail{
		{From: "Bob <bob@example.org>", Subject: "Lunch\ntomorrow", At: now.Add(-time.Hour), Unseen: true},
		{From: "carol@example.org", Subject: "Report", At: now.Add(-2 * time.Hour)},
	}}
	var fail error
	e := newEnv(t, now, func(o *Options) {
		o.Mail = mailLog{{From: "alice@example.org", Subject: "to the bot", At: now.Add(-time.Hour)}}
		o.Mailbox = userMailbox(func(uid string, since time.Time, limit int) (MailboxDigest, error) {
			asked = since
			if uid != "alice" {
				return MailboxDigest{}, nil
			}
			return digest, fail
		})
	})
	rc := runContext{user: User{ID: "alice"}, loc: loc, now: now.In(loc)}
	got, err := e.r.mailSection(context.Background(), rc)
	if err != nil {
		t.Fatal(err)
	}
	want := "3 message(s) arrived in your mailbox (alice@example.org at imap.example.org:993) since Sun 07:00; the newest 2 (1 of them unread):\n" +
		"- Mon 06:00 from Bob <bob@example.org>: Lunch tomorrow [unread]\n- Mon 05:00 from carol@example.org: Report\n- … and 1 more\n"
	if got != want || !asked.Equal(now.Add(-24*time.Hour)) {
		t.Errorf("got %q (since %s), want %q", got, asked, want)
	}

	// Since the previous run, when there was one in the last week.
	rc.last = now.Add(-3 * time.Hour)
	e.r.mailSection(context.Background(), rc)
	if !asked.Equal(rc.last) {
		t.Errorf("asked since %s, want the previous run %s", asked, rc.last)
	}
	rc.last = now.Add(-30 * 24 * time.Hour)
	e.r.mailSection(context.Background(), rc)
	if !asked.Equal(now.Add(-24 * time.Hour)) {
		t.Errorf("asked since %s after a month, want the last 24 hours", asked)
	}

	// Unreachable: this section fails with a line that says why; nothing else does.
	fail = errors.New("could not connect to imap.example.org:993: connection refused")
	if _, err := e.r.mailSection(context.Background(), rc); err == nil ||
		err.Error() != "your mailbox alice@example.org at imap.example.org:993 could not be reached: could not connect to imap.example.org:993: connection refused" {
		t.Errorf("unreachable: %v", err)
	}

	// A user without a mailbox gets the bot's mail, as before.
	got, err = e.r.mailSection(context.Background(), runContext{user: User{ID: "bob"}, loc: loc, now: now.In(loc)})
	if err != nil || !strings.Contains(got, "received by the bot") {
		t.Errorf("bob: %q %v", got, err)
	}
}

func TestParseReminder(t *testing.T) {
	loc, _ := time.LoadLocation("Europe/Berlin")
	tests := []struct {
		value string
		ok    bool
		text  string
		due   string // RFC 3339 in loc
		time  bool
	}{
		{"2026-05-04 Call mum", true, "Call mum", "2026-05-04T00:00:00+02:00", false},
		{"2026-05-04 09:30 Call mum", true, "Call mum", "2026-05-04T09:30:00+02:00", true},
		{"2026-05-04 9:30 Call mum", true, "9:30 Call mum", "2026-05-04T00:00:00+02:00", false},
		{`{"text":"Pay rent","due":"2026-05-01"}`, true, "Pay rent", "2026-05-01T00:00:00+02:00", false},
		{`{"text":"Pay rent","due":"2026-05-01T08:00"}`, true, "Pay rent", "2026-05-01T08:00:00+02:00", true},
		{`{"text":"Pay rent","due":"2026-05-01T08:00:00Z"}`, true, "Pay rent", "2026-05-01T10:00:00+02:00", true},
		{`{"text":"","due":"2026-05-01"}`, false, "", "", false},
		{`{"text":"x"}`, false, "", "", false},
		{"tomorrow buy bread", false, "", "", false},
		{"2026-05-04", false, "", "", false},
		{`{broken`, false, "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			r, ok := parseReminder(tt.value, loc)
			if ok != tt.ok {
				t.Fatalf("ok %v, want %v (%+v)", ok, tt.ok, r)
			}
			if !ok {
				return
			}
			if r.Text != tt.text || r.Due.Format(time.RFC3339) != tt.due || r.Time != tt.time {
				t.Fatalf("got %q %s %v, want %q %s %v", r.Text, r.Due.Format(time.RFC3339), r.Time, tt.text, tt.due, tt.time)
			}
		})
	}
}

func TestNotesWithoutFolder(t *testing.T) {
	e := newEnv(t, utc("2026-05-04T05:00:00Z"), nil)
	loc := time.UTC
	rc := runContext{user: User{ID: "alice"}, loc: loc, now: e.clock.Now()}
	got, err := e.r.notesSection(context.Background(), rc)
	if err != nil || got != "There is no notes/ folder." {
		t.Fatalf("got %q %v", got, err)
	}
	// A link out of notes/ is never followed.
	outside := filepath.Join(t.TempDir(), "secret.md")
	if err := os.WriteFile(outside, []byte("OUTSIDE-SECRET\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.src.write(t, "alice", "notes/real.md", "Real note\n")
	if err := os.Symlink(outside, filepath.Join(e.src.userRoot("alice"), "notes", "link.md")); err != nil {
		t.Fatal(err)
	}
	rc.now = time.Now()
	got, err = e.r.notesSection(context.Background(), rc)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, got, "notes/real.md")
	mustNotContain(t, got, "OUTSIDE-SECRET", "link.md")
}
