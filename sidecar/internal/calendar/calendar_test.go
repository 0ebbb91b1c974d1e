package calendar

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-ical"
)

func ids(cals []Calendar) []string {
	var out []string
	for _, c := range cals {
		out = append(out, c.ID+"|"+c.Owner)
	}
	return out
}

func TestCalendarsDiscovery(t *testing.T) {
	f := newFixture(t)
	want := []string{"personal|", "personal_shared_by_alice|alice", "personal_shared_by_bob|bob", "work_shared_by_alice|alice"}
	tests := []struct {
		name    string
		homeSet string
	}{
		{"discovered", ""},
		{"configured", testHome},
		{"configured without slash", strings.TrimSuffix(testHome, "/")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(Config{Endpoint: f.srv.URL + testPrefix, Username: testUser, Password: testPassword, HomeSet: tt.homeSet})
			if err != nil {
				t.Fatal(err)
			}
			cals, err := c.Calendars(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(cals); !slices.Equal(got, want) {
				t.Errorf("calendars = %v, want %v (the VTODO list must be left out)", got, want)
			}
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		c, err := New(Config{Endpoint: f.srv.URL + testPrefix, Username: testUser, Password: "wrong"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Calendars(context.Background())
		if err == nil {
			t.Fatal("Calendars with a wrong password succeeded")
		}
		if strings.Contains(err.Error(), "wrong") || strings.Contains(err.Error(), testPassword) {
			t.Errorf("error leaks the password: %v", err)
		}
	})
}

func TestForUser(t *testing.T) {
	f := newFixture(t)
	cals, err := f.c.Calendars(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		uid  string
		want []string
	}{
		{"alice", []string{"personal_shared_by_alice|alice", "work_shared_by_alice|alice"}},
		{"bob", []string{"personal_shared_by_bob|bob"}},
		{"", nil},
		{"ali", nil},
		{"bot", nil},
	}
	for _, tt := range tests {
		t.Run(tt.uid, func(t *testing.T) {
			if got := ids(ForUser(cals, tt.uid)); !slices.Equal(got, tt.want) {
				t.Errorf("ForUser(%q) = %v, want %v", tt.uid, got, tt.want)
			}
		})
	}
	if got := newCalendar("/x/cal_shared_by_a_shared_by_carol_d/", "").Owner; got != "carol_d" {
		t.Errorf("owner with underscores = %q, want carol_d", got)
	}
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestEvents(t *testing.T) {
	f := newFixture(t)
	type row struct{ uid, start, end string }
	tests := []struct {
		name     string
		from, to string
		want     []row
	}{
		{"one week", "2025-03-01T00:00:00Z", "2025-03-08T00:00:00Z", []row{
			{"holiday", "2025-03-03T00:00:00Z", "2025-03-04T00:00:00Z"},
			{"standup", "2025-03-03T08:00:00Z", "2025-03-03T08:30:00Z"},
			{"dentist", "2025-03-03T08:15:00Z", "2025-03-03T08:45:00Z"},
			{"gym", "2025-03-03T18:00:00Z", "2025-03-03T19:00:00Z"},
		}},
		{"series with an exception", "2025-03-04T00:00:00Z", "2025-04-01T00:00:00Z", []row{
			{"gym", "2025-03-17T18:00:00Z", "2025-03-17T19:00:00Z"},
		}},
		{"range cuts into an event", "2025-03-03T08:20:00Z", "2025-03-03T08:25:00Z", []row{
			{"holiday", "2025-03-03T00:00:00Z", "2025-03-04T00:00:00Z"},
			{"standup", "2025-03-03T08:00:00Z", "2025-03-03T08:30:00Z"},
			{"dentist", "2025-03-03T08:15:00Z", "2025-03-03T08:45:00Z"},
		}},
		{"empty", "2025-05-01T00:00:00Z", "2025-06-01T00:00:00Z", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := f.c.Events(context.Background(), f.alice, utc(tt.from), utc(tt.to))
			if err != nil {
				t.Fatal(err)
			}
			var got []row
			for _, e := range evs {
				got = append(got, row{e.UID, e.Start.UTC().Format(time.RFC3339), e.End.UTC().Format(time.RFC3339)})
				if e.ETag == "" || !strings.HasPrefix(e.Path, f.alice.Path) {
					t.Errorf("%s: etag %q path %q", e.UID, e.ETag, e.Path)
				}
				if e.UID == "bob-secret" {
					t.Errorf("bob's event in alice's calendar")
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("events =\n%v\nwant\n%v", got, tt.want)
			}
		})
	}

	evs, err := f.c.Events(context.Background(), f.alice, utc("2025-03-03T00:00:00Z"), utc("2025-03-04T00:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		switch e.UID {
		case "standup":
			if e.Start.Location().String() != "Europe/Berlin" || e.Start.Hour() != 9 || e.Location != "Room 1" {
				t.Errorf("standup = %v at %q, want 09:00 Europe/Berlin in Room 1", e.Start, e.Location)
			}
		case "holiday":
			if !e.AllDay {
				t.Errorf("holiday is not all-day")
			}
		case "gym":
			if !e.Recurring() || !e.RecurrenceID.Equal(e.Start) {
				t.Errorf("gym occurrence has RecurrenceID %v", e.RecurrenceID)
			}
		}
	}
	if _, err := f.c.Events(context.Background(), f.alice, utc("2025-03-03T00:00:00Z"), utc("2025-03-03T00:00:00Z")); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty range: err = %v, want ErrInvalid", err)
	}
}

func TestCreateUpdateDelete(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	created, err := f.c.Create(ctx, f.alice, Event{
		Summary: "Review", Location: "Room 2",
		Start: time.Date(2025, 3, 5, 14, 0, 0, 0, berlin), End: time.Date(2025, 3, 5, 15, 0, 0, 0, berlin),
	})
	if err != nil {
		t.Fatal(err)
	}
	if created.UID == "" || created.ETag == "" || created.Path != f.alice.Path+created.UID+".ics" {
		t.Fatalf("created = %+v", created)
	}
	obj, ok := f.b.object(created.Path)
	if !ok {
		t.Fatal("object not on the server")
	}
	if p := obj.data.Events()[0].Props.Get(ical.PropDateTimeStart); p.Params.Get(ical.PropTimezoneID) != "Europe/Berlin" || p.Value != "20250305T140000" {
		t.Errorf("stored DTSTART = %+v, want 20250305T140000 with TZID Europe/Berlin", p)
	}

	found, err := f.c.Find(ctx, f.alice, created.UID)
	if err != nil {
		t.Fatal(err)
	}
	if found.ETag != created.ETag || !found.Start.Equal(created.Start) || found.Summary != "Review" {
		t.Errorf("found = %+v, want %+v", found, created)
	}

	// The same UID again: If-None-Match refuses to overwrite.
	if _, err := f.c.Create(ctx, f.alice, Event{UID: created.UID, Summary: "dup", Start: created.Start, End: created.End}); !errors.Is(err, ErrPrecondition) {
		t.Errorf("second create with the same UID: err = %v, want ErrPrecondition", err)
	}

	upd := found
	upd.Summary = "Review (moved)"
	upd.Start, upd.End = upd.Start.Add(time.Hour), upd.End.Add(time.Hour)
	updated, err := f.c.Update(ctx, f.alice, upd)
	if err != nil {
		t.Fatal(err)
	}
	if updated.ETag == "" || updated.ETag == found.ETag {
		t.Errorf("etag after update = %q (before %q)", updated.ETag, found.ETag)
	}
	evs, err := f.c.Events(ctx, f.alice, utc("2025-03-05T00:00:00Z"), utc("2025-03-06T00:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Summary != "Review (moved)" || !evs[0].Start.Equal(utc("2025-03-05T14:00:00Z")) || evs[0].Location != "Room 2" {
		t.Errorf("after update: %+v", evs)
	}

	stale := found // still carries the ETag from before the update
	stale.Summary = "lost update"
	t.Run("stale update", func(t *testing.T) {
		if _, err := f.c.Update(ctx, f.alice, stale); !errors.Is(err, ErrPrecondition) {
			t.Errorf("err = %v, want ErrPrecondition", err)
		}
	})
	t.Run("stale delete", func(t *testing.T) {
		if err := f.c.Delete(ctx, f.alice, stale); !errors.Is(err, ErrPrecondition) {
			t.Errorf("err = %v, want ErrPrecondition", err)
		}
	})
	t.Run("path outside the calendar", func(t *testing.T) {
		other := updated
		other.Path = f.bob.Path + "bob-secret.ics"
		if err := f.c.Delete(ctx, f.alice, other); !errors.Is(err, ErrInvalid) {
			t.Errorf("delete: err = %v, want ErrInvalid", err)
		}
		other.Path = f.alice.Path + "../personal_shared_by_bob/bob-secret.ics"
		if _, err := f.c.Update(ctx, f.alice, other); !errors.Is(err, ErrInvalid) {
			t.Errorf("update: err = %v, want ErrInvalid", err)
		}
		if _, ok := f.b.object(f.bob.Path + "bob-secret.ics"); !ok {
			t.Error("bob's event is gone")
		}
	})
	t.Run("recurring", func(t *testing.T) {
		gym, err := f.c.Find(ctx, f.alice, "gym")
		if err != nil {
			t.Fatal(err)
		}
		if !gym.Recurring() || gym.Path != f.alice.Path+"gym-series.ics" {
			t.Fatalf("gym = %+v", gym)
		}
		gym.Summary = "x"
		if _, err := f.c.Update(ctx, f.alice, gym); !errors.Is(err, ErrRecurring) {
			t.Errorf("err = %v, want ErrRecurring", err)
		}
	})

	if obj, _ := f.b.object(created.Path); obj.data.Events()[0].Props.Get(ical.PropSummary).Value != "Review (moved)" {
		t.Error("a refused update changed the event")
	}
	if err := f.c.Delete(ctx, f.alice, updated); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Find(ctx, f.alice, created.UID); !errors.Is(err, ErrNotFound) {
		t.Errorf("find after delete: err = %v, want ErrNotFound", err)
	}
	if err := f.c.Delete(ctx, f.alice, updated); !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrPrecondition) {
		t.Errorf("second delete: err = %v, want ErrNotFound or ErrPrecondition", err)
	}
}

func TestConflicts(t *testing.T) {
	ev := func(uid, start, end string) Event { return Event{UID: uid, Start: utc(start), End: utc(end)} }
	allDay := ev("day", "2025-03-03T00:00:00Z", "2025-03-04T00:00:00Z")
	allDay.AllDay = true
	tests := []struct {
		name   string
		events []Event
		want   []string
	}{
		{"none", []Event{ev("a", "2025-03-03T08:00:00Z", "2025-03-03T09:00:00Z"), ev("b", "2025-03-03T09:00:00Z", "2025-03-03T10:00:00Z")}, nil},
		{"overlap", []Event{ev("b", "2025-03-03T08:30:00Z", "2025-03-03T10:00:00Z"), ev("a", "2025-03-03T08:00:00Z", "2025-03-03T09:00:00Z")}, []string{"a-b"}},
		{"contained and chained", []Event{
			ev("long", "2025-03-03T08:00:00Z", "2025-03-03T12:00:00Z"),
			ev("x", "2025-03-03T09:00:00Z", "2025-03-03T10:00:00Z"),
			ev("y", "2025-03-03T09:30:00Z", "2025-03-03T11:00:00Z"),
			ev("z", "2025-03-03T12:00:00Z", "2025-03-03T13:00:00Z"),
		}, []string{"long-x", "long-y", "x-y"}},
		{"all-day and zero-length ignored", []Event{allDay, ev("a", "2025-03-03T08:00:00Z", "2025-03-03T09:00:00Z"), ev("p", "2025-03-03T08:30:00Z", "2025-03-03T08:30:00Z")}, nil},
		{"same event twice", []Event{ev("a", "2025-03-03T08:00:00Z", "2025-03-03T09:00:00Z"), ev("a", "2025-03-03T08:00:00Z", "2025-03-03T09:00:00Z")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range Conflicts(tt.events) {
				got = append(got, p[0].UID+"-"+p[1].UID)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Conflicts = %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("from the server", func(t *testing.T) {
		f := newFixture(t)
		evs, err := f.c.Events(context.Background(), f.alice, utc("2025-03-01T00:00:00Z"), utc("2025-03-08T00:00:00Z"))
		if err != nil {
			t.Fatal(err)
		}
		c := Conflicts(evs)
		if len(c) != 1 || c[0][0].UID != "standup" || c[0][1].UID != "dentist" {
			t.Errorf("Conflicts = %+v, want standup-dentist (the all-day holiday must not count)", c)
		}
	})
}
