package calendar

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/istota/istota/sidecar/internal/skills"
)

func TestSkill(t *testing.T) {
	f := newFixture(t)
	reg := skills.NewRegistry()
	if err := RegisterSkill(reg, f.c, nil); err != nil {
		t.Fatal(err)
	}
	s, ok := reg.Lookup("calendar")
	if !ok {
		t.Fatal("calendar skill not registered")
	}
	run := func(user string, args ...string) skills.Result {
		t.Helper()
		return s.Run(context.Background(), skills.Invocation{Args: args, UserID: user, TaskID: 1})
	}
	bobBefore := f.b.count(f.bob.Path)

	t.Run("list-calendars", func(t *testing.T) {
		r := run("alice", "list-calendars")
		out := string(r.Stdout)
		if r.ExitCode != 0 || !strings.Contains(out, "personal_shared_by_alice") || !strings.Contains(out, "work_shared_by_alice") {
			t.Errorf("exit %d, out %q, err %q", r.ExitCode, out, r.Stderr)
		}
		if strings.Contains(out, "bob") || strings.Contains(out, "Bot") || strings.Contains(out, "tasks") {
			t.Errorf("alice sees foreign calendars: %q", out)
		}
		r = run("bob", "list-calendars", "--json")
		var cals []calendarJSON
		if err := json.Unmarshal(r.Stdout, &cals); err != nil || len(cals) != 1 || cals[0].ID != "personal_shared_by_bob" {
			t.Errorf("bob's calendars = %s (%v)", r.Stdout, err)
		}
		r = run("carol", "list-calendars")
		if r.ExitCode != 0 || !strings.Contains(string(r.Stdout), "no calendars") {
			t.Errorf("carol: exit %d, out %q", r.ExitCode, r.Stdout)
		}
	})

	t.Run("events", func(t *testing.T) {
		r := run("alice", "events", "--from", "2025-03-03", "--to", "2025-03-04", "--json")
		if r.ExitCode != 0 {
			t.Fatalf("exit %d: %s", r.ExitCode, r.Stderr)
		}
		var evs []eventJSON
		if err := json.Unmarshal(r.Stdout, &evs); err != nil {
			t.Fatal(err)
		}
		var uids []string
		for _, e := range evs {
			uids = append(uids, e.UID)
		}
		if got, want := strings.Join(uids, ","), "holiday,standup,dentist,gym"; got != want {
			t.Errorf("alice's events = %s, want %s", got, want)
		}
		// Bob's calendar has the same display name as alice's: by name, alice still
		// reaches only her own.
		r = run("alice", "events", "--from", "2025-03-03T00:00", "--to", "2025-03-04T00:00", "--tz", "Europe/Berlin", "--calendar", "Personal")
		out := string(r.Stdout)
		if r.ExitCode != 0 || !strings.Contains(out, "Standup") || !strings.Contains(out, "2025-03-03T09:00:00+01:00") || strings.Contains(out, "secret") {
			t.Errorf("exit %d, out %q, err %q", r.ExitCode, out, r.Stderr)
		}
	})

	t.Run("refuses another user's calendar", func(t *testing.T) {
		for _, args := range [][]string{
			{"events", "--from", "2025-03-01", "--to", "2025-04-01", "--calendar", "personal_shared_by_bob"},
			{"create", "--calendar", "personal_shared_by_bob", "--summary", "intrusion", "--start", "2025-03-03T12:00:00Z", "--end", "2025-03-03T13:00:00Z"},
			{"create", "--calendar", "Bot", "--summary", "intrusion", "--start", "2025-03-03T12:00:00Z", "--end", "2025-03-03T13:00:00Z"},
			{"update", "bob-secret", "--summary", "hacked"},
			{"update", "bob-secret", "--calendar", "personal_shared_by_bob", "--summary", "hacked"},
			{"delete", "bob-secret"},
		} {
			r := run("alice", args...)
			if r.ExitCode == 0 || strings.Contains(string(r.Stdout), "secret meeting") {
				t.Errorf("%v: exit %d, out %q", args, r.ExitCode, r.Stdout)
			}
		}
		obj, ok := f.b.object(f.bob.Path + "bob-secret.ics")
		if !ok || obj.data.Events()[0].Props.Get("SUMMARY").Value != "Bob's secret meeting" || f.b.count(f.bob.Path) != bobBefore {
			t.Error("bob's calendar was changed by alice's skill calls")
		}
		if r := run("", "list-calendars"); r.ExitCode == 0 {
			t.Error("a call without a user succeeded")
		}
	})

	t.Run("create update delete", func(t *testing.T) {
		r := run("alice", "create", "--calendar", "work_shared_by_alice", "--summary", "Planning", "--start", "2025-03-06T10:00", "--end", "2025-03-06T11:00", "--tz", "Europe/Berlin", "--location", "Room 3", "--json")
		if r.ExitCode != 0 {
			t.Fatalf("create: exit %d: %s", r.ExitCode, r.Stderr)
		}
		var ev eventJSON
		if err := json.Unmarshal(r.Stdout, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.UID == "" || ev.Start != "2025-03-06T10:00:00+01:00" || ev.Calendar != "work_shared_by_alice" {
			t.Fatalf("created %+v", ev)
		}
		if r := run("bob", "update", ev.UID, "--summary", "mine now"); r.ExitCode == 0 {
			t.Errorf("bob updated alice's event: %s", r.Stdout)
		}
		r = run("alice", "update", ev.UID, "--summary", "Planning v2", "--end", "2025-03-06T11:30:00+01:00")
		if r.ExitCode != 0 || !strings.Contains(string(r.Stdout), "Planning v2") {
			t.Fatalf("update: exit %d, out %q, err %q", r.ExitCode, r.Stdout, r.Stderr)
		}
		r = run("alice", "events", "--from", "2025-03-06", "--to", "2025-03-07", "--calendar", "Alice Work", "--json")
		var evs []eventJSON
		if err := json.Unmarshal(r.Stdout, &evs); err != nil || len(evs) != 1 || evs[0].Summary != "Planning v2" || evs[0].End != "2025-03-06T10:30:00Z" || evs[0].Location != "Room 3" {
			t.Fatalf("after update: %s (%v)", r.Stdout, err)
		}
		r = run("alice", "create", "--calendar", "work_shared_by_alice", "--summary", "Trip", "--start", "2025-03-10", "--end", "2025-03-12")
		if r.ExitCode != 0 || !strings.Contains(string(r.Stdout), "all day") {
			t.Errorf("all-day create: exit %d, out %q, err %q", r.ExitCode, r.Stdout, r.Stderr)
		}
		if r := run("alice", "delete", ev.UID); r.ExitCode != 0 {
			t.Fatalf("delete: exit %d: %s", r.ExitCode, r.Stderr)
		}
		if r := run("alice", "delete", ev.UID); r.ExitCode != 1 || !strings.Contains(string(r.Stderr), "no event") {
			t.Errorf("second delete: exit %d, err %q", r.ExitCode, r.Stderr)
		}
		if r := run("alice", "update", "gym", "--summary", "x"); r.ExitCode != 1 || !strings.Contains(string(r.Stderr), "recurring") {
			t.Errorf("update of a series: exit %d, err %q", r.ExitCode, r.Stderr)
		}
	})

	t.Run("usage errors", func(t *testing.T) {
		for _, args := range [][]string{
			nil,
			{"frobnicate"},
			{"events", "--from", "2025-03-03"},
			{"events", "--from", "tomorrow", "--to", "2025-03-04"},
			{"events", "--from", "2025-03-04", "--to", "2025-03-03"},
			{"create", "--calendar", "work_shared_by_alice", "--summary", "x", "--start", "2025-03-03", "--end", "2025-03-03T10:00:00Z"},
			{"create", "--calendar", "work_shared_by_alice", "--summary", "x", "--start", "2025-03-03T10:00:00Z", "--end", "2025-03-03T10:00:00Z", "--tz", "Mars/Olympus"},
			{"update", "standup"},
			{"delete"},
		} {
			if r := run("alice", args...); r.ExitCode != 2 {
				t.Errorf("%v: exit %d (want 2), err %q", args, r.ExitCode, r.Stderr)
			}
		}
	})

	if err := RegisterSkill(reg, f.c, nil); err == nil {
		t.Error("registering the skill twice succeeded")
	}
}
