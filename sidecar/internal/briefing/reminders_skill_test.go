package briefing

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/kv"
	"github.com/istota/istota/sidecar/internal/skills"
)

func remindersEnv(t *testing.T) (*env, skills.Skill, *kv.Store) {
	t.Helper()
	// 2026-05-04 10:15 in Berlin (UTC+2).
	e := newEnv(t, utc("2026-05-04T08:15:00Z"), nil)
	store := kv.New(e.db, nil)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	sk, err := RemindersSkill(RemindersOptions{
		Store: store,
		Zone:  func(context.Context, string) *time.Location { return berlin },
		Clock: e.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.r.opts.KV = store
	return e, sk, store
}

func remind(t *testing.T, sk skills.Skill, args ...string) skills.Result {
	t.Helper()
	return sk.Run(context.Background(), skills.Invocation{UserID: "alice", TaskID: 1, Args: args})
}

func TestRemindersSkillRoundTrip(t *testing.T) {
	e, sk, store := remindersEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "2026-05-04", "18:30", "Call", "mum"}, "Mon 2026-05-04 18:30 — Call mum (Europe/Berlin)"},
		{[]string{"add", "tomorrow", "Buy", "milk"}, "Tue 2026-05-05 — Buy milk"},
		{[]string{"add", "in", "2", "hours", "Check", "the", "oven"}, "Mon 2026-05-04 12:15 — Check the oven"},
		{[]string{"add", "2026-06-01T09:00", "Dentist"}, "Mon 2026-06-01 09:00 — Dentist"},
		{[]string{"add", "2026-05-04T20:00:00Z", "UTC", "input"}, "Mon 2026-05-04 22:00 — UTC input"},
		{[]string{"add", "today", "Water", "plants"}, "Mon 2026-05-04 — Water plants"},
	} {
		r := remind(t, sk, tc.args...)
		if r.ExitCode != 0 || !strings.Contains(string(r.Stdout), tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", tc.args, r.ExitCode, r.Stdout, r.Stderr)
		}
	}
	entries, err := store.List(context.Background(), "alice", RemindersNamespace)
	if err != nil || len(entries) != 6 {
		t.Fatalf("%d entries, %v", len(entries), err)
	}
	var mumKey string
	for _, en := range entries {
		if strings.Contains(en.Value, "Call mum") {
			mumKey = en.Key
			if en.Value != `{"text":"Call mum","due":"2026-05-04T18:30"}` {
				t.Errorf("stored %s", en.Value)
			}
		}
	}

	list := string(remind(t, sk, "list").Stdout)
	order := []string{"Water plants", "Check the oven", "Call mum", "UTC input", "Buy milk", "Dentist"}
	last := -1
	for _, w := range order {
		i := strings.Index(list, w)
		if i < last {
			t.Errorf("list is not soonest first at %q:\n%s", w, list)
		}
		last = i
	}
	if !strings.Contains(list, "Mon 2026-05-04 18:30 (today)\tCall mum") || !strings.Contains(list, "Europe/Berlin") {
		t.Errorf("list:\n%s", list)
	}

	// The briefing reads what the skill wrote: today's reminders, in the user's zone.
	berlin, _ := time.LoadLocation("Europe/Berlin")
	now := e.clock.Now().In(berlin)
	got, err := e.r.remindersSection(context.Background(), runContext{user: User{ID: "alice"}, loc: berlin, now: now, today: startOfDay(now)})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"18:30: Call mum", "12:15: Check the oven", "today: Water plants", "22:00: UTC input"} {
		if !strings.Contains(got, w) {
			t.Errorf("briefing section lacks %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "Buy milk") || strings.Contains(got, "Dentist") {
		t.Errorf("briefing shows later reminders:\n%s", got)
	}

	r := remind(t, sk, "remove", mumKey, "no-such-id")
	if r.ExitCode != 1 || !strings.Contains(string(r.Stdout), "removed "+mumKey) || !strings.Contains(string(r.Stderr), `no reminder "no-such-id"`) {
		t.Errorf("remove: %d %q %q", r.ExitCode, r.Stdout, r.Stderr)
	}
	if list := string(remind(t, sk, "list").Stdout); strings.Contains(list, "Call mum") {
		t.Errorf("removed reminder still listed:\n%s", list)
	}

	// An entry written by hand that the skill cannot read is listed, not hidden.
	if err := store.Set(context.Background(), "alice", RemindersNamespace, "odd", "someday maybe"); err != nil {
		t.Fatal(err)
	}
	if list := string(remind(t, sk, "list").Stdout); !strings.Contains(list, "odd\t(not a reminder this skill can read: someday maybe)") {
		t.Errorf("list:\n%s", list)
	}
}

func TestRemindersSkillRefusesBadInput(t *testing.T) {
	_, sk, _ := remindersEnv(t)
	for _, args := range [][]string{
		nil, {"frob"}, {"add"}, {"add", "tomorrow"}, {"add", "next-week", "x"}, {"add", "2026-13-01", "x"},
		{"add", "2026-05-03", "Yesterday"}, {"add", "today", "09:00", "Earlier today"}, {"add", "in", "x", "y"},
		{"add", "tomorrow", strings.Repeat("x", 501)}, {"add", "tomorrow", "bell\x07"}, {"list", "extra"}, {"remove"},
	} {
		r := remind(t, sk, args...)
		if r.ExitCode != 2 || !strings.Contains(string(r.Stderr), "usage:") {
			t.Errorf("%q: exit %d, stderr %q", args, r.ExitCode, r.Stderr)
		}
	}
	r := remind(t, sk, "add", "2026-05-03", "Yesterday")
	if !strings.Contains(string(r.Stderr), "is in the past") {
		t.Errorf("stderr %q", r.Stderr)
	}
}
