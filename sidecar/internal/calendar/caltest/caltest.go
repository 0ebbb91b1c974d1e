// Package caltest serves calendars for tests: go-webdav's real CalDAV handler over a
// small read-only in-memory store, laid out as Nextcloud shares calendars with the bot
// account ("<name>_shared_by_<uid>") and guarded by the bot's basic-auth login.
package caltest

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

	"github.com/emersion/go-ical"
	"github.com/emersion/go-webdav"
	"github.com/emersion/go-webdav/caldav"
)

// Where the server keeps things and the login it accepts.
const (
	Prefix    = "/remote.php/dav"
	Principal = Prefix + "/bot/"
	Home      = Prefix + "/bot/calendars/"
	User      = "bot"
	Password  = "bot-app-password"
)

// Server is a running CalDAV server; add calendars and events before the code under
// test reads them.
type Server struct {
	URL string // the server's base URL; the CalDAV endpoint is Endpoint()

	mu   sync.Mutex
	cals map[string]caldav.Calendar
	objs map[string]*ical.Calendar
}

// New starts a server that stops when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{cals: map[string]caldav.Calendar{}, objs: map[string]*ical.Calendar{}}
	h := &caldav.Handler{Backend: backend{s}, Prefix: Prefix}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != User || p != Password {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Endpoint is the DAV root a calendar client is given.
func (s *Server) Endpoint() string { return s.URL + Prefix + "/" }

// AddCalendar adds a calendar with the last path segment id and returns its path.
func (s *Server) AddCalendar(id, name string) string {
	p := Home + id + "/"
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cals[p] = caldav.Calendar{Path: p, Name: name, SupportedComponentSet: []string{"VEVENT"}}
	return p
}

// AddEvent stores one VEVENT in the calendar at calPath; props are extra iCalendar
// lines (DTSTART, DTEND, LOCATION, …).
func (s *Server) AddEvent(t testing.TB, calPath, uid, summary string, props ...string) {
	t.Helper()
	ics := "BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//test//EN\nBEGIN:VEVENT\nUID:" + uid + "\nDTSTAMP:20260101T000000Z\nSUMMARY:" + summary + "\n" +
		strings.Join(props, "\n") + "\nEND:VEVENT\nEND:VCALENDAR\n"
	data, err := ical.NewDecoder(strings.NewReader(strings.ReplaceAll(ics, "\n", "\r\n"))).Decode()
	if err != nil {
		t.Fatalf("event %s: %v", uid, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objs[calPath+uid+".ics"] = data
}

// backend is the caldav.Backend over the server's store.
type backend struct{ s *Server }

var errReadOnly = webdav.NewHTTPError(http.StatusForbidden, errors.New("read-only"))

func (backend) CurrentUserPrincipal(context.Context) (string, error)   { return Principal, nil }
func (backend) CalendarHomeSetPath(context.Context) (string, error)    { return Home, nil }
func (backend) CreateCalendar(context.Context, *caldav.Calendar) error { return errReadOnly }
func (backend) DeleteCalendarObject(context.Context, string) error     { return errReadOnly }
func (backend) PutCalendarObject(context.Context, string, *ical.Calendar, *caldav.PutCalendarObjectOptions) (*caldav.CalendarObject, error) {
	return nil, errReadOnly
}

func (b backend) ListCalendars(context.Context) ([]caldav.Calendar, error) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	out := make([]caldav.Calendar, 0, len(b.s.cals))
	for _, c := range b.s.cals {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func (b backend) GetCalendar(_ context.Context, p string) (*caldav.Calendar, error) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	c, ok := b.s.cals[dir(p)]
	if !ok {
		return nil, webdav.NewHTTPError(http.StatusNotFound, errors.New("no such calendar"))
	}
	return &c, nil
}

func (b backend) GetCalendarObject(_ context.Context, p string, _ *caldav.CalendarCompRequest) (*caldav.CalendarObject, error) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	o, ok := b.s.objs[p]
	if !ok {
		return nil, webdav.NewHTTPError(http.StatusNotFound, errors.New("no such object"))
	}
	return &caldav.CalendarObject{Path: p, ETag: "e-" + path.Base(p), Data: o}, nil
}

func (b backend) ListCalendarObjects(_ context.Context, p string, _ *caldav.CalendarCompRequest) ([]caldav.CalendarObject, error) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	p = dir(p)
	var out []caldav.CalendarObject
	for op, o := range b.s.objs {
		if path.Dir(op)+"/" == p {
			out = append(out, caldav.CalendarObject{Path: op, ETag: "e-" + path.Base(op), Data: o})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func (b backend) QueryCalendarObjects(ctx context.Context, p string, q *caldav.CalendarQuery) ([]caldav.CalendarObject, error) {
	all, err := b.ListCalendarObjects(ctx, p, &q.CompRequest)
	if err != nil {
		return nil, err
	}
	return caldav.Filter(q, all)
}

func dir(p string) string {
	if strings.HasSuffix(p, "/") {
		return p
	}
	return p + "/"
}
