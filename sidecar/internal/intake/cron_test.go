package intake

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/schedule"
)

// wakingScheduler is the real scheduler plus a count of wake-ups.
type wakingScheduler struct {
	*schedule.Scheduler
	woken int
}

func (w *wakingScheduler) Wake() { w.woken++ }

func TestCronCommands(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	sched := &wakingScheduler{Scheduler: schedule.New(f.db, schedule.Options{Clock: func() time.Time { return now }, Logger: slog.New(slog.DiscardHandler)})}
	f.in.opts.Cron = sched
	src := "```toml\n[[jobs]]\nname = \"Weekly review\"\nschedule = \"0 17 * * 5\"\nprompt = \"x\"\n\n[[jobs]]\nname = \"off\"\nschedule = \"@daily\"\nprompt = \"y\"\nenabled = false\n\n[[jobs]]\nname = \"bad\"\nschedule = \"99 * * * *\"\nprompt = \"z\"\n```\n"
	if _, err := sched.Sync(ctx, "alice", false, []byte(src), "Europe/Berlin", now); err != nil {
		t.Fatal(err)
	}
	conv := private("priv0042")
	cases := []struct{ text, want string }{
		{"!cron", "**Weekly review** — `0 17 * * 5` (Europe/Berlin, prompt) · next Fri 27 Nov 17:00"},
		{"!cron disable weekly review", `"Weekly review" is switched off`},
		{"!cron", "switched off with !cron disable"},
		{"!cron enable Weekly review", `"Weekly review" is switched on again`},
		{"!cron enable off", "says `enabled = false` in your CRON.md (line 7)"},
		{"!cron run off", `Running "off" now`},
		{"!cron run nothing", `no scheduled job named "nothing"`},
		{"!cron run", "Which job?"},
		{"!cron frobnicate x", "Unknown `!cron frobnicate`"},
	}
	for i, c := range cases {
		f.handle(Payload{Event: event("Create", conv.Token, int64(100+i), "alice", c.text, 0), Sender: sender("alice"), Conversation: conv})
	}
	texts := f.outboxTexts()
	if len(texts) != len(cases) {
		t.Fatalf("answers = %q", texts)
	}
	for i, c := range cases {
		if !strings.Contains(texts[i], c.want) {
			t.Errorf("%s: %q, want %q", c.text, texts[i], c.want)
		}
	}
	if !strings.Contains(texts[0], "Problems in CRON.md") || !strings.Contains(texts[0], "line 15") {
		t.Errorf("the list does not show the file's problem: %q", texts[0])
	}
	due, err := sched.Due(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 1 || due[0].Name != "off" || !due[0].Manual {
		t.Fatalf("due = %+v, want the run asked for", due)
	}
	if sched.woken == 0 {
		t.Fatal("the job runner was not woken")
	}
	// Bob sees none of Alice's jobs and cannot touch them.
	f.handle(Payload{Event: event("Create", "priv0043", 1, "bob", "!cron run off", 0), Sender: sender("bob"), Conversation: private("priv0043")})
	if got := f.outboxTexts(); !strings.Contains(got[len(got)-1], "no scheduled job") {
		t.Fatalf("bob: %q", got[len(got)-1])
	}
}
