package heartbeat

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/calendar"
	"github.com/istota/istota/sidecar/internal/calendar/caltest"
)

// addEvent stores a one-event object in the calendar with id.
func addEvent(t *testing.T, srv *caltest.Server, calID, uid, summary string, start, end time.Time) {
	t.Helper()
	srv.AddEvent(t, caltest.Home+calID+"/", uid, summary,
		"DTSTART:"+start.UTC().Format("20060102T150405Z"), "DTEND:"+end.UTC().Format("20060102T150405Z"))
}

func TestCalendarConflicts(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	now := time.Date(2026, 9, 14, 8, 0, 0, 0, berlin)
	b := caltest.New(t)
	for _, id := range []string{"personal_shared_by_alice", "work_shared_by_alice", "personal_shared_by_bob", "personal"} {
		b.AddCalendar(id, id)
	}
	at := func(h, m int) time.Time { return time.Date(2026, 9, 14, h, m, 0, 0, berlin) }
	// Alice: a personal appointment overlapping a work meeting (across her calendars),
	// one event back to back, one tomorrow beyond the 24 hours, one overlap that is over.
	addEvent(t, b, "personal_shared_by_alice", "dentist", "Dentist", at(10, 0), at(11, 0))
	addEvent(t, b, "work_shared_by_alice", "review", "Design review", at(10, 30), at(11, 30))
	addEvent(t, b, "work_shared_by_alice", "lunch", "Lunch", at(11, 30), at(12, 30))
	addEvent(t, b, "work_shared_by_alice", "past", "Early call", at(6, 0), at(7, 0))
	addEvent(t, b, "personal_shared_by_alice", "past2", "Early run", at(6, 30), at(7, 30))
	addEvent(t, b, "personal_shared_by_alice", "later1", "Offsite", now.Add(25*time.Hour), now.Add(27*time.Hour))
	addEvent(t, b, "work_shared_by_alice", "later2", "Offsite prep", now.Add(26*time.Hour), now.Add(28*time.Hour))
	// Bob's overlapping events and the bot's own calendar are not Alice's business.
	addEvent(t, b, "personal_shared_by_bob", "bob1", "Bob secret A", at(9, 0), at(10, 0))
	addEvent(t, b, "personal_shared_by_bob", "bob2", "Bob secret B", at(9, 30), at(10, 30))
	addEvent(t, b, "personal", "bot1", "Bot own", at(10, 0), at(11, 0))

	client, err := calendar.New(calendar.Config{Endpoint: b.Endpoint(), Username: caltest.User, Password: caltest.Password})
	if err != nil {
		t.Fatal(err)
	}

	h := newHarness(t, now, Options{Calendars: client})
	h.src.setUsers(User{ID: "alice", Timezone: "Europe/Berlin"}, User{ID: "carol", Timezone: "UTC"})
	h.privateConversation("alice", "privdm1")
	cfg := heartbeatFile(check("name", `"Calendar"`, "kind", `"calendar-conflicts"`, "interval", `"1h"`, "cooldown", `"0s"`))
	h.src.write(t, "alice", ConfigFile, cfg)
	h.src.write(t, "carol", ConfigFile, cfg)
	h.runOnce()

	ms := h.messages()
	if len(ms) != 1 {
		t.Fatalf("messages %+v", ms)
	}
	text := ms[0].Text
	for _, want := range []string{"1 overlap(s)", "“Dentist” Mon 10:00–11:00 overlaps “Design review” Mon 10:30–11:30"} {
		if !strings.Contains(text, want) {
			t.Errorf("alert lacks %q:\n%s", want, text)
		}
	}
	for _, unwanted := range []string{"Bob", "Bot own", "Lunch", "Early", "Offsite"} {
		if strings.Contains(text, unwanted) {
			t.Errorf("alert names %q:\n%s", unwanted, text)
		}
	}
	if st := h.state("carol", "Calendar"); st.Status != StatusOK || !strings.Contains(st.Message, "no calendar is shared") {
		t.Fatalf("carol shares nothing: %+v", st)
	}

	// The same conflict is told once; a new one is told.
	h.clock.Set(now.Add(time.Hour))
	h.runOnce()
	if n := len(h.messages()); n != 1 {
		t.Fatalf("the same conflict was told again: %+v", h.messages())
	}
	addEvent(t, b, "personal_shared_by_alice", "gym", "Gym", at(12, 0), at(13, 0))
	h.clock.Set(now.Add(2 * time.Hour))
	h.runOnce()
	ms = h.messages()
	if len(ms) != 2 || !strings.Contains(ms[1].Text, "2 overlap(s)") || !strings.Contains(ms[1].Text, "“Lunch” Mon 11:30–12:30 overlaps “Gym”") {
		t.Fatalf("a new conflict: %+v", ms)
	}
}

func TestCalendarConflictsWithTheServerDown(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	client, err := calendar.New(calendar.Config{Endpoint: srv.URL + "/remote.php/dav/", Username: "bot", Password: "x"})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, time.Date(2026, 9, 14, 8, 0, 0, 0, time.UTC), Options{Calendars: client})
	h.src.setUsers(User{ID: "alice"})
	h.privateConversation("alice", "privdm1")
	h.src.write(t, "alice", ConfigFile, heartbeatFile(check("name", `"Calendar"`, "kind", `"calendar-conflicts"`)))
	h.runOnce()
	if st := h.state("alice", "Calendar"); st.Status != StatusError || !strings.Contains(st.Message, "could not list the calendars") {
		t.Fatalf("%+v", st)
	}
	if n := len(h.messages()); n != 0 {
		t.Fatalf("an error was sent: %+v", h.messages())
	}
}
