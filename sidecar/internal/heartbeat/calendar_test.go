package heartbeat

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-ical"
	"github.com/emersion/go-webdav"
	"github.com/emersion/go-webdav/caldav"

	"github.com/istota/istota/sidecar/internal/calendar"
)

// calBackend is a small in-memory store behind go-webdav's real CalDAV handler. Its
// calendars are named the way Nextcloud names calendars shared with the bot account.
type calBackend struct {
	mu   sync.Mutex
	cals map[string]caldav.Calendar
	objs map[string]*ical.Calendar
}

const (
	calPrefix = "/remote.php/dav"
	calHome   = calPrefix + "/bot/calendars/"
)

func (b *calBackend) CurrentUserPrincipal(context.Context) (string, error) {
	return calPrefix + "/bot/", nil
}
func (b *calBackend) CalendarHomeSetPath(context.Context) (string, error) { return calHome, nil }
func (b *calBackend) CreateCalendar(context.Context, *caldav.Calendar) error {
	return webdav.NewHTTPError(http.StatusForbidden, errors.New("read-only"))
}

func (b *calBackend) ListCalendars(context.Context) ([]caldav.Calendar, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []caldav.Calendar
	for _, c := range b.cals {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func (b *calBackend) GetCalendar(_ context.Context, p string) (*caldav.Calendar, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	c, ok := b.cals[p]
	if !ok {
		return nil, webdav.NewHTTPError(http.StatusNotFound, errors.New("no such calendar"))
	}
	return &c, nil
}

func (b *calBackend) GetCalendarObject(_ context.Context, p string, _ *caldav.CalendarCompRequest) (*caldav.CalendarObject, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.objs[p]
	if !ok {
		return nil, webdav.NewHTTPError(http.StatusNotFound, errors.New("no such object"))
	}
	return &caldav.CalendarObject{Path: p, ETag: "e-" + path.Base(p), Data: o}, nil
}

func (b *calBackend) ListCalendarObjects(_ context.Context, p string, _ *caldav.CalendarCompRequest) ([]caldav.CalendarObject, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	var out []caldav.CalendarObject
	for op, o := range b.objs {
		if path.Dir(op)+"/" == p {
			out = append(out, caldav.CalendarObject{Path: op, ETag: "e-" + path.Base(op), Data: o})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func (b *calBackend) QueryCalendarObjects(ctx context.Context, p string, q *caldav.CalendarQuery) ([]caldav.CalendarObject, error) {
	all, err := b.ListCalendarObjects(ctx, p, &q.CompRequest)
	if err != nil {
		return nil, err
	}
	return caldav.Filter(q, all)
}

func (b *calBackend) PutCalendarObject(context.Context, string, *ical.Calendar, *caldav.PutCalendarObjectOptions) (*caldav.CalendarObject, error) {
	return nil, webdav.NewHTTPError(http.StatusForbidden, errors.New("read-only"))
}

func (b *calBackend) DeleteCalendarObject(context.Context, string) error {
	return webdav.NewHTTPError(http.StatusForbidden, errors.New("read-only"))
}

// addEvent stores a one-event object in the calendar with id.
func (b *calBackend) addEvent(t *testing.T, calID, uid, summary string, start, end time.Time) {
	t.Helper()
	ics := "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\nBEGIN:VEVENT\r\nUID:" + uid +
		"\r\nDTSTAMP:20260101T000000Z\r\nSUMMARY:" + summary +
		"\r\nDTSTART:" + start.UTC().Format("20060102T150405Z") + "\r\nDTEND:" + end.UTC().Format("20060102T150405Z") +
		"\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
	data, err := ical.NewDecoder(strings.NewReader(ics)).Decode()
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.objs[calHome+calID+"/"+uid+".ics"] = data
}

func TestCalendarConflicts(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	now := time.Date(2026, 9, 14, 8, 0, 0, 0, berlin)
	b := &calBackend{cals: map[string]caldav.Calendar{}, objs: map[string]*ical.Calendar{}}
	for _, id := range []string{"personal_shared_by_alice", "work_shared_by_alice", "personal_shared_by_bob", "personal"} {
		b.cals[calHome+id+"/"] = caldav.Calendar{Path: calHome + id + "/", Name: id, SupportedComponentSet: []string{"VEVENT"}}
	}
	at := func(h, m int) time.Time { return time.Date(2026, 9, 14, h, m, 0, 0, berlin) }
	// Alice: a personal appointment overlapping a work meeting (across her calendars),
	// one event back to back, one tomorrow beyond the 24 hours, one overlap that is over.
	b.addEvent(t, "personal_shared_by_alice", "dentist", "Dentist", at(10, 0), at(11, 0))
	b.addEvent(t, "work_shared_by_alice", "review", "Design review", at(10, 30), at(11, 30))
	b.addEvent(t, "work_shared_by_alice", "lunch", "Lunch", at(11, 30), at(12, 30))
	b.addEvent(t, "work_shared_by_alice", "past", "Early call", at(6, 0), at(7, 0))
	b.addEvent(t, "personal_shared_by_alice", "past2", "Early run", at(6, 30), at(7, 30))
	b.addEvent(t, "personal_shared_by_alice", "later1", "Offsite", now.Add(25*time.Hour), now.Add(27*time.Hour))
	b.addEvent(t, "work_shared_by_alice", "later2", "Offsite prep", now.Add(26*time.Hour), now.Add(28*time.Hour))
	// Bob's overlapping events and the bot's own calendar are not Alice's business.
	b.addEvent(t, "personal_shared_by_bob", "bob1", "Bob secret A", at(9, 0), at(10, 0))
	b.addEvent(t, "personal_shared_by_bob", "bob2", "Bob secret B", at(9, 30), at(10, 30))
	b.addEvent(t, "personal", "bot1", "Bot own", at(10, 0), at(11, 0))

	handler := &caldav.Handler{Backend: b, Prefix: calPrefix}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "bot" || p != "app-password" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	client, err := calendar.New(calendar.Config{Endpoint: srv.URL + calPrefix + "/", Username: "bot", Password: "app-password"})
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
	b.addEvent(t, "personal_shared_by_alice", "gym", "Gym", at(12, 0), at(13, 0))
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
