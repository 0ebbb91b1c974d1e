package schedule

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time { return c.t }

func newTest(t *testing.T, start time.Time) (*Scheduler, *fakeClock, *store.DB) {
	t.Helper()
	db, err := testDBs.OpenPath(context.Background(), filepath.Join(t.TempDir(), "istota.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clock := &fakeClock{t: start}
	return New(db, Options{Clock: clock.Now, Logger: slog.New(slog.DiscardHandler)}), clock, db
}

func cronMD(body string) []byte { return []byte("# Jobs\n\n```toml\n" + body + "```\n") }

const (
	jobMorning = "[[jobs]]\nname = \"morning\"\nschedule = \"0 7 * * *\"\nprompt = \"Plan my day\"\n"
	jobWeekly  = "[[jobs]]\nname = \"weekly\"\nschedule = \"0 9 * * 1\"\nprompt = \"Review the week\"\n"
	jobBackup  = "[[jobs]]\nname = \"backup\"\nschedule = \"@daily\"\ncommand = \"backup.sh\"\n"
)

func jobsByName(t *testing.T, s *Scheduler, uid string) map[string]Job {
	t.Helper()
	jobs, err := s.List(context.Background(), uid)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]Job{}
	for _, j := range jobs {
		m[j.Name] = j
	}
	return m
}

func mustSync(t *testing.T, s *Scheduler, uid string, admin bool, src []byte, now time.Time) SyncResult {
	t.Helper()
	res, err := s.Sync(context.Background(), uid, admin, src, "Europe/Berlin", now)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestSyncAddChangeDelete(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC) // 12:00 in Berlin
	s, _, _ := newTest(t, now)

	res := mustSync(t, s, "alice", false, cronMD(jobMorning+jobWeekly), now)
	if !res.Changed || res.KeptLastGood || len(res.Problems) != 0 {
		t.Fatalf("first sync = %+v", res)
	}
	jobs := jobsByName(t, s, "alice")
	if len(jobs) != 2 {
		t.Fatalf("jobs = %v", jobs)
	}
	if got, want := jobs["morning"].NextRunAt, time.Date(2026, 6, 2, 5, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("morning next run = %s, want %s (07:00 Berlin)", got, want)
	}
	if jobs["morning"].TZ != "Europe/Berlin" {
		t.Errorf("tz = %q, want the user's", jobs["morning"].TZ)
	}

	// Run state of an unchanged job survives a sync of an edited file.
	if _, err := s.RecordResult(ctx, "alice", "morning", false, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordResult(ctx, "alice", "weekly", false, now); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Hour)
	changedMorning := strings.Replace(jobMorning, "0 7 * * *", "30 6 * * *", 1)
	res = mustSync(t, s, "alice", false, cronMD(jobWeekly+changedMorning), later)
	if !res.Changed {
		t.Fatalf("edit not seen: %+v", res)
	}
	jobs = jobsByName(t, s, "alice")
	if got := jobs["weekly"]; got.ConsecutiveFailures != 1 || got.Line != 4 {
		t.Errorf("unchanged weekly: failures %d line %d, want 1 and moved to line 4", got.ConsecutiveFailures, got.Line)
	}
	if got := jobs["morning"]; got.ConsecutiveFailures != 0 || got.Schedule != "30 6 * * *" ||
		!got.NextRunAt.Equal(time.Date(2026, 6, 2, 4, 30, 0, 0, time.UTC)) {
		t.Errorf("changed morning = %+v, want reset failures and next run 06:30 Berlin", got)
	}

	res = mustSync(t, s, "alice", false, cronMD(jobWeekly), later)
	if !res.Changed {
		t.Fatal("delete not seen")
	}
	if jobs = jobsByName(t, s, "alice"); len(jobs) != 1 || jobs["weekly"].Name == "" {
		t.Errorf("after delete: %v", jobs)
	}

	// The same bytes again: nothing to do.
	if res = mustSync(t, s, "alice", false, cronMD(jobWeekly), later.Add(time.Minute)); res.Changed {
		t.Errorf("unchanged file reported a change: %+v", res)
	}

	// An empty file is a deliberate "no jobs", not a broken file.
	if res = mustSync(t, s, "alice", false, nil, later); !res.Changed || res.KeptLastGood {
		t.Errorf("empty file: %+v", res)
	}
	if jobs = jobsByName(t, s, "alice"); len(jobs) != 0 {
		t.Errorf("empty file kept %v", jobs)
	}
}

func TestSyncKeepsLastGoodOnBrokenFile(t *testing.T) {
	now := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	s, _, _ := newTest(t, now)
	mustSync(t, s, "alice", false, cronMD(jobMorning), now)

	tests := []struct {
		name     string
		src      []byte
		wantLine int
		field    string
	}{
		{"bad toml", cronMD("[[jobs]]\nname = \"morning\nschedule = 1\n"), 0, ""},
		{"bad cron expression", cronMD("[[jobs]]\nname = \"morning\"\nschedule = \"0 25 * * *\"\nprompt = \"p\"\n"), 6, "schedule"},
		{"both prompt and command", cronMD("[[jobs]]\nname = \"morning\"\nschedule = \"@daily\"\nprompt = \"p\"\ncommand = \"c\"\n"), 8, "command"},
		{"neither prompt nor command", cronMD("[[jobs]]\nname = \"morning\"\nschedule = \"@daily\"\n"), 4, "prompt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := mustSync(t, s, "alice", false, tt.src, now)
			if !res.KeptLastGood || res.Changed || len(res.Problems) == 0 {
				t.Fatalf("result = %+v, want last good kept with problems", res)
			}
			p := res.Problems[0]
			if tt.wantLine > 0 && (p.Line != tt.wantLine || p.Field != tt.field) {
				t.Errorf("problem = %q, want line %d field %s", p, tt.wantLine, tt.field)
			}
			if tt.wantLine == 0 && p.Line == 0 {
				t.Errorf("problem %q has no line", p)
			}
			jobs := jobsByName(t, s, "alice")
			if j := jobs["morning"]; j.Schedule != "0 7 * * *" || j.Prompt != "Plan my day" {
				t.Errorf("last good job lost: %v", jobs)
			}
			fs, err := s.FileStatus(context.Background(), "alice")
			if err != nil {
				t.Fatal(err)
			}
			if !fs.KeptLastGood || len(fs.Problems) != len(res.Problems) || fs.Problems[0] != p {
				t.Errorf("file status = %+v", fs)
			}
		})
	}

	// A file with one broken and one good job applies the good one and reports the other.
	res := mustSync(t, s, "alice", false, cronMD(jobWeekly+"[[jobs]]\nname = \"bad\"\nschedule = \"nope\"\nprompt = \"p\"\n"), now)
	if res.KeptLastGood || !res.Changed || len(res.Problems) != 1 || res.Problems[0].Line != 10 {
		t.Errorf("partly broken file: %+v", res)
	}
	if jobs := jobsByName(t, s, "alice"); len(jobs) != 1 || jobs["weekly"].Name == "" {
		t.Errorf("partly broken file gave %v", jobs)
	}
}

func TestSyncCommandJobsAdminOnly(t *testing.T) {
	now := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	s, _, _ := newTest(t, now)

	res := mustSync(t, s, "bob", false, cronMD(jobMorning+jobBackup), now)
	if len(res.Problems) != 1 || res.Problems[0].Field != "command" || res.Problems[0].Line != 8 {
		t.Fatalf("problems = %v, want the command job refused at line 8", res.Problems)
	}
	if jobs := jobsByName(t, s, "bob"); len(jobs) != 1 || jobs["backup"].Name != "" {
		t.Errorf("non-admin jobs = %v", jobs)
	}

	res = mustSync(t, s, "root", true, cronMD(jobMorning+jobBackup), now)
	if len(res.Problems) != 0 {
		t.Fatalf("admin problems = %v", res.Problems)
	}
	jobs := jobsByName(t, s, "root")
	if jobs["backup"].Command != "backup.sh" {
		t.Fatalf("admin jobs = %v", jobs)
	}
	due, err := s.Due(context.Background(), jobs["backup"].NextRunAt)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range due {
		if d.Name != "backup" {
			continue
		}
		if err := d.Authorize(true); err != nil {
			t.Errorf("admin refused: %v", err)
		}
		if err := d.Authorize(false); !errors.Is(err, ErrCommandNotAllowed) {
			t.Errorf("Authorize(false) = %v, want ErrCommandNotAllowed", err)
		}
	}
}

// runAcross walks the clock from "from" to "to" in steps, enqueueing every due run into a
// real queue exactly as the caller will, and returns the run times.
func runAcross(t *testing.T, s *Scheduler, clock *fakeClock, q *queue.Queue, from, to time.Time, step time.Duration) []time.Time {
	t.Helper()
	ctx := context.Background()
	var runs []time.Time
	for now := from; !now.After(to); now = now.Add(step) {
		clock.t = now
		due, err := s.Due(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range due {
			task, created, err := q.Enqueue(ctx, queue.NewTask{UserID: d.UserID, Source: queue.SourceCron,
				Prompt: d.Prompt, DedupeKey: d.DedupeKey})
			if err != nil {
				t.Fatal(err)
			}
			if created {
				runs = append(runs, d.RunAt)
			}
			if err := s.MarkEnqueued(ctx, d, task.ID, d.RunAt); err != nil {
				t.Fatal(err)
			}
		}
	}
	return runs
}

func TestDueAcrossDST(t *testing.T) {
	berlin := mustLoc(t, "Europe/Berlin")
	daily := cronMD("[[jobs]]\nname = \"night\"\nschedule = \"30 2 * * *\"\nprompt = \"p\"\n")
	tests := []struct {
		name     string
		from, to time.Time
		want     []time.Time // local times
	}{
		// 02:30 does not exist on 29 March 2026: the run happens at 03:00 local, once.
		{"spring forward", time.Date(2026, 3, 28, 12, 0, 0, 0, berlin), time.Date(2026, 3, 30, 12, 0, 0, 0, berlin),
			[]time.Time{time.Date(2026, 3, 29, 3, 0, 0, 0, berlin), time.Date(2026, 3, 30, 2, 30, 0, 0, berlin)}},
		// 02:30 happens twice on 25 October 2026: the job runs at the first one only.
		{"fall back", time.Date(2026, 10, 24, 12, 0, 0, 0, berlin), time.Date(2026, 10, 26, 12, 0, 0, 0, berlin),
			[]time.Time{time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), time.Date(2026, 10, 26, 2, 30, 0, 0, berlin)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clock, db := newTest(t, tt.from)
			q := queue.New(db, queue.Options{Clock: clock.Now})
			mustSync(t, s, "alice", false, daily, tt.from)
			runs := runAcross(t, s, clock, q, tt.from, tt.to, 5*time.Minute)
			if len(runs) != len(tt.want) {
				t.Fatalf("runs = %v, want %v", runs, tt.want)
			}
			for i := range runs {
				if !runs[i].Equal(tt.want[i]) {
					t.Errorf("run %d at %s, want %s", i, runs[i].In(berlin), tt.want[i].In(berlin))
				}
			}
		})
	}
}

func TestDedupeAfterCrash(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 6, 1, 4, 0, 0, 0, time.UTC)
	s, clock, db := newTest(t, now)
	q := queue.New(db, queue.Options{Clock: clock.Now})
	mustSync(t, s, "alice", false, cronMD(jobMorning), now)

	runAt := time.Date(2026, 6, 1, 5, 0, 0, 0, time.UTC)
	clock.t = runAt.Add(30 * time.Second)
	first, err := s.Due(ctx, clock.t)
	if err != nil || len(first) != 1 {
		t.Fatalf("due = %v, %v", first, err)
	}
	if want := "cron:alice:morning:2026-06-01T05:00Z"; first[0].DedupeKey != want || DedupeKey("alice", "morning", runAt.Add(59*time.Second)) != want {
		t.Errorf("dedupe key = %q, want %q", first[0].DedupeKey, want)
	}
	t1, created, err := q.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: queue.SourceCron, Prompt: first[0].Prompt, DedupeKey: first[0].DedupeKey})
	if err != nil || !created {
		t.Fatal(created, err)
	}
	// Crash here: MarkEnqueued never ran. The next cycle sees the same run and key.
	clock.t = clock.t.Add(time.Minute)
	again, err := s.Due(ctx, clock.t)
	if err != nil || len(again) != 1 || again[0].DedupeKey != first[0].DedupeKey {
		t.Fatalf("due after crash = %v, %v", again, err)
	}
	t2, created, err := q.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: queue.SourceCron, Prompt: again[0].Prompt, DedupeKey: again[0].DedupeKey})
	if err != nil || created || t2.ID != t1.ID {
		t.Fatalf("second enqueue created=%v id=%d (first %d), err %v", created, t2.ID, t1.ID, err)
	}
	for i := 0; i < 2; i++ { // marking twice is harmless
		if err := s.MarkEnqueued(ctx, again[0], t2.ID, again[0].RunAt); err != nil {
			t.Fatal(err)
		}
	}
	j, err := s.Get(ctx, "alice", "morning")
	if err != nil {
		t.Fatal(err)
	}
	if !j.NextRunAt.Equal(runAt.Add(24*time.Hour)) || j.LastTaskID != t1.ID || !j.LastRunAt.Equal(runAt) {
		t.Errorf("after mark: next %s task %d last %s", j.NextRunAt, j.LastTaskID, j.LastRunAt)
	}
	if due, _ := s.Due(ctx, clock.t); len(due) != 0 {
		t.Errorf("still due: %v", due)
	}

	// Runs missed while the sidecar was down collapse into one.
	clock.t = runAt.Add(72*time.Hour + time.Hour)
	due, err := s.Due(ctx, clock.t)
	if err != nil || len(due) != 1 {
		t.Fatalf("due after downtime = %v, %v", due, err)
	}
	if err := s.MarkEnqueued(ctx, due[0], 99, due[0].RunAt); err != nil {
		t.Fatal(err)
	}
	if j, _ := s.Get(ctx, "alice", "morning"); !j.NextRunAt.Equal(runAt.Add(96 * time.Hour)) {
		t.Errorf("next after downtime = %s, want the next future slot", j.NextRunAt)
	}
}

func TestFailuresAutoDisableAndReenable(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	s, _, _ := newTest(t, now)
	mustSync(t, s, "alice", false, cronMD(jobMorning), now)

	steps := []struct {
		ok           bool
		wantDisabled bool
		wantFailures int
	}{
		{false, false, 1},
		{true, false, 0}, // success resets
		{false, false, 1},
		{false, false, 2},
		{false, true, 3}, // the third in a row disables, reported once
		{false, false, 4},
	}
	for i, st := range steps {
		disabled, err := s.RecordResult(ctx, "alice", "morning", st.ok, now)
		if err != nil {
			t.Fatal(err)
		}
		j, _ := s.Get(ctx, "alice", "morning")
		if disabled != st.wantDisabled || j.ConsecutiveFailures != st.wantFailures {
			t.Errorf("step %d: disabled=%v failures=%d, want %v and %d", i, disabled, j.ConsecutiveFailures, st.wantDisabled, st.wantFailures)
		}
	}
	j, _ := s.Get(ctx, "alice", "morning")
	if j.Active() || j.DisabledBy != DisabledByFailures || !strings.Contains(j.DisabledReason, "3 times") {
		t.Errorf("after failures: %+v", j)
	}
	if due, _ := s.Due(ctx, now.Add(48*time.Hour)); len(due) != 0 {
		t.Errorf("disabled job due: %v", due)
	}
	// An unchanged file does not re-enable it.
	mustSync(t, s, "alice", false, append(cronMD(jobMorning), '\n'), now)
	if j, _ := s.Get(ctx, "alice", "morning"); j.Active() {
		t.Error("sync of an unchanged job re-enabled it")
	}

	later := now.Add(72 * time.Hour)
	if err := s.SetEnabled(ctx, "alice", "morning", true, later); err != nil {
		t.Fatal(err)
	}
	j, _ = s.Get(ctx, "alice", "morning")
	if !j.Active() || j.ConsecutiveFailures != 0 || j.DisabledReason != "" || !j.NextRunAt.After(later) {
		t.Errorf("after enable: %+v", j)
	}

	// !cron disable survives a sync and keeps the job out of Due; RunNow still runs it.
	if err := s.SetEnabled(ctx, "alice", "morning", false, later); err != nil {
		t.Fatal(err)
	}
	mustSync(t, s, "alice", false, cronMD(strings.Replace(jobMorning, "Plan", "Sketch", 1)), later)
	if j, _ := s.Get(ctx, "alice", "morning"); j.DisabledBy != DisabledByUser {
		t.Errorf("user disable lost on edit: %+v", j)
	}
	if err := s.RunNow(ctx, "alice", "morning", later); err != nil {
		t.Fatal(err)
	}
	due, err := s.Due(ctx, later)
	if err != nil || len(due) != 1 || !due[0].Manual || !due[0].RunAt.Equal(later) {
		t.Fatalf("run now: %v, %v", due, err)
	}
	if err := s.MarkEnqueued(ctx, due[0], 7, due[0].RunAt); err != nil {
		t.Fatal(err)
	}
	if due, _ := s.Due(ctx, later.Add(time.Hour)); len(due) != 0 {
		t.Errorf("manual run repeated: %v", due)
	}

	// A job the file disables cannot be enabled by command.
	mustSync(t, s, "alice", false, cronMD(jobMorning+"enabled = false\n"), later)
	if err := s.SetEnabled(ctx, "alice", "morning", true, later); !errors.Is(err, ErrDisabledInFile) {
		t.Errorf("enable of file-disabled job = %v", err)
	}
	for _, err := range []error{
		s.SetEnabled(ctx, "alice", "nope", true, later),
		s.RunNow(ctx, "alice", "nope", later),
		func() error { _, err := s.RecordResult(ctx, "alice", "nope", true, later); return err }(),
	} {
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown job: %v, want ErrNotFound", err)
		}
	}
}
