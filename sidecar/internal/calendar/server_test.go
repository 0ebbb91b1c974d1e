package calendar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
)

// The test server is go-webdav's real CalDAV handler over an in-memory backend. Its
// layout is fixed by go-webdav (principal, home, calendar, object at depths 1–4 under
// the prefix), so the principal and home differ from Nextcloud's; the client finds them
// by discovery, as it does on Nextcloud. Calendar names mimic Nextcloud's sharing.
const (
	testPrefix    = "/remote.php/dav"
	testPrincipal = testPrefix + "/bot/"
	testHome      = testPrefix + "/bot/calendars/"
	testUser      = "bot"
	testPassword  = "app-password-123"
)

type memObject struct {
	data *ical.Calendar
	etag string
	mod  time.Time
}

type memBackend struct {
	mu   sync.Mutex
	cals map[string]caldav.Calendar // by path
	objs map[string]memObject       // by path
	seq  int
	// readOnly are the collections shared with the bot read-only. As on Nextcloud, a
	// PROPFIND for the privileges says so, and a write into them answers 404.
	readOnly map[string]bool
	// failPuts is how many of the next PUTs answer 500 (a locked database).
	failPuts int
}

func newMemBackend() *memBackend {
	return &memBackend{cals: map[string]caldav.Calendar{}, objs: map[string]memObject{}, readOnly: map[string]bool{}}
}

// setReadOnly marks the collection at calPath as shared read-only.
func (b *memBackend) setReadOnly(calPath string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.readOnly[calPath] = true
}

func (b *memBackend) addCalendar(id, name string, comps ...string) string {
	if len(comps) == 0 {
		comps = []string{"VEVENT"}
	}
	p := testHome + id + "/"
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cals[p] = caldav.Calendar{Path: p, Name: name, SupportedComponentSet: comps}
	return p
}

func (b *memBackend) addObject(t *testing.T, calPath, name, ics string) {
	t.Helper()
	data, err := ical.NewDecoder(strings.NewReader(strings.ReplaceAll(ics, "\n", "\r\n"))).Decode()
	if err != nil {
		t.Fatalf("seed %s: %v", name, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	b.objs[calPath+name] = memObject{data: data, etag: fmt.Sprintf("e%d", b.seq), mod: time.Now()}
}

func (b *memBackend) object(p string) (memObject, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.objs[p]
	return o, ok
}

func (b *memBackend) count(calPath string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for p := range b.objs {
		if strings.HasPrefix(p, calPath) {
			n++
		}
	}
	return n
}

func (b *memBackend) CurrentUserPrincipal(context.Context) (string, error) { return testPrincipal, nil }
func (b *memBackend) CalendarHomeSetPath(context.Context) (string, error)  { return testHome, nil }

func (b *memBackend) CreateCalendar(context.Context, *caldav.Calendar) error {
	return webdav.NewHTTPError(http.StatusForbidden, errors.New("read-only home"))
}

func (b *memBackend) ListCalendars(context.Context) ([]caldav.Calendar, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []caldav.Calendar
	for _, c := range b.cals {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func (b *memBackend) GetCalendar(_ context.Context, p string) (*caldav.Calendar, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.cals[dirPath(p)]
	if !ok {
		return nil, webdav.NewHTTPError(http.StatusNotFound, errors.New("no such calendar"))
	}
	return &c, nil
}

func (b *memBackend) toObject(p string, o memObject) caldav.CalendarObject {
	return caldav.CalendarObject{Path: p, ModTime: o.mod, ETag: o.etag, Data: o.data}
}

func (b *memBackend) GetCalendarObject(_ context.Context, p string, _ *caldav.CalendarCompRequest) (*caldav.CalendarObject, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.objs[p]
	if !ok {
		return nil, webdav.NewHTTPError(http.StatusNotFound, errors.New("no such object"))
	}
	co := b.toObject(p, o)
	return &co, nil
}

func (b *memBackend) ListCalendarObjects(_ context.Context, p string, _ *caldav.CalendarCompRequest) ([]caldav.CalendarObject, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p = dirPath(p)
	if _, ok := b.cals[p]; !ok {
		return nil, webdav.NewHTTPError(http.StatusNotFound, errors.New("no such calendar"))
	}
	var out []caldav.CalendarObject
	for op, o := range b.objs {
		if path.Dir(op)+"/" == p {
			out = append(out, b.toObject(op, o))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func (b *memBackend) QueryCalendarObjects(ctx context.Context, p string, q *caldav.CalendarQuery) ([]caldav.CalendarObject, error) {
	all, err := b.ListCalendarObjects(ctx, p, &q.CompRequest)
	if err != nil {
		return nil, err
	}
	return caldav.Filter(q, all)
}

func (b *memBackend) PutCalendarObject(_ context.Context, p string, data *ical.Calendar, opts *caldav.PutCalendarObjectOptions) (*caldav.CalendarObject, error) {
	if _, _, err := caldav.ValidateCalendarObject(data); err != nil {
		return nil, caldav.NewPreconditionError(caldav.PreconditionValidCalendarObjectResource)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.cals[path.Dir(p)+"/"]; !ok {
		return nil, webdav.NewHTTPError(http.StatusConflict, errors.New("no such calendar"))
	}
	if b.readOnly[path.Dir(p)+"/"] {
		return nil, webdav.NewHTTPError(http.StatusNotFound, errors.New("read-only share"))
	}
	cur, exists := b.objs[p]
	if opts.IfNoneMatch.IsWildcard() && exists {
		return nil, webdav.NewHTTPError(http.StatusPreconditionFailed, errors.New("exists"))
	}
	if opts.IfMatch.IsSet() {
		want, err := opts.IfMatch.ETag()
		if err != nil || !exists || want != cur.etag {
			return nil, webdav.NewHTTPError(http.StatusPreconditionFailed, errors.New("etag mismatch"))
		}
	}
	b.seq++
	o := memObject{data: data, etag: fmt.Sprintf("e%d", b.seq), mod: time.Now()}
	b.objs[p] = o
	co := b.toObject(p, o)
	return &co, nil
}

func (b *memBackend) DeleteCalendarObject(_ context.Context, p string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.readOnly[path.Dir(p)+"/"] {
		return webdav.NewHTTPError(http.StatusNotFound, errors.New("read-only share"))
	}
	if _, ok := b.objs[p]; !ok {
		return webdav.NewHTTPError(http.StatusNotFound, errors.New("no such object"))
	}
	delete(b.objs, p)
	return nil
}

// serve wraps the CalDAV handler with what go-webdav leaves to the application and
// Nextcloud does: basic auth, and If-Match on DELETE (the handler does not pass DELETE
// headers to the backend).
func (b *memBackend) serve(t *testing.T) *httptest.Server {
	h := &caldav.Handler{Backend: b, Prefix: testPrefix}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != testUser || p != testPassword {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.Method == "PROPFIND" && r.Header.Get("Depth") == "0" {
			body, _ := io.ReadAll(r.Body)
			b.mu.Lock()
			ro := b.readOnly[dirPath(r.URL.Path)]
			b.mu.Unlock()
			if ro && bytes.Contains(body, []byte("current-user-privilege-set")) {
				// go-webdav does not do ACLs: answer as Nextcloud does for a read-only share.
				w.Header().Set("Content-Type", "application/xml; charset=utf-8")
				w.WriteHeader(http.StatusMultiStatus)
				fmt.Fprintf(w, `<?xml version="1.0"?><d:multistatus xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:response><d:href>%s</d:href>`+
					`<d:propstat><d:prop><d:current-user-privilege-set><d:privilege><d:read/></d:privilege></d:current-user-privilege-set><oc:read-only>1</oc:read-only></d:prop>`+
					`<d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response></d:multistatus>`, r.URL.Path)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		if r.Method == http.MethodPut {
			b.mu.Lock()
			fail := b.failPuts > 0
			if fail {
				b.failPuts--
			}
			b.mu.Unlock()
			if fail {
				http.Error(w, "database is locked", http.StatusInternalServerError)
				return
			}
		}
		if r.Method == http.MethodDelete {
			if im := webdav.ConditionalMatch(r.Header.Get("If-Match")); im.IsSet() {
				want, err := im.ETag()
				o, ok := b.object(r.URL.Path)
				if err != nil || !ok || o.etag != want {
					http.Error(w, "precondition failed", http.StatusPreconditionFailed)
					return
				}
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// fixture is a server with calendars of alice and bob shared with the bot, the bot's
// own calendar and a task list, and a client for it.
type fixture struct {
	b                  *memBackend
	srv                *httptest.Server
	c                  *Client
	alice, bob, botCal Calendar
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	b := newMemBackend()
	alicePath := b.addCalendar("personal_shared_by_alice", "Personal")
	b.addCalendar("work_shared_by_alice", "Alice Work")
	bobPath := b.addCalendar("personal_shared_by_bob", "Personal")
	botPath := b.addCalendar("personal", "Bot")
	b.addCalendar("tasks_shared_by_alice", "Alice Tasks", "VTODO")

	b.addObject(t, alicePath, "standup.ics", `BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//EN
BEGIN:VEVENT
UID:standup
DTSTAMP:20250101T000000Z
SUMMARY:Standup
LOCATION:Room 1
DTSTART;TZID=Europe/Berlin:20250303T090000
DTEND;TZID=Europe/Berlin:20250303T093000
END:VEVENT
END:VCALENDAR
`)
	b.addObject(t, alicePath, "dentist.ics", `BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//EN
BEGIN:VEVENT
UID:dentist
DTSTAMP:20250101T000000Z
SUMMARY:Dentist
DTSTART:20250303T081500Z
DURATION:PT30M
END:VEVENT
END:VCALENDAR
`)
	b.addObject(t, alicePath, "holiday.ics", `BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//EN
BEGIN:VEVENT
UID:holiday
DTSTAMP:20250101T000000Z
SUMMARY:Holiday
DTSTART;VALUE=DATE:20250303
DTEND;VALUE=DATE:20250304
END:VEVENT
END:VCALENDAR
`)
	b.addObject(t, alicePath, "gym-series.ics", `BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//EN
BEGIN:VEVENT
UID:gym
DTSTAMP:20250101T000000Z
SUMMARY:Gym
DTSTART:20250224T180000Z
DTEND:20250224T190000Z
RRULE:FREQ=WEEKLY;COUNT=4
EXDATE:20250310T180000Z
END:VEVENT
END:VCALENDAR
`)
	b.addObject(t, alicePath, "april.ics", `BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//EN
BEGIN:VEVENT
UID:april
DTSTAMP:20250101T000000Z
SUMMARY:Later
DTSTART:20250401T100000Z
DTEND:20250401T110000Z
END:VEVENT
END:VCALENDAR
`)
	b.addObject(t, bobPath, "bob-secret.ics", `BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//EN
BEGIN:VEVENT
UID:bob-secret
DTSTAMP:20250101T000000Z
SUMMARY:Bob's secret meeting
DTSTART:20250303T100000Z
DTEND:20250303T110000Z
END:VEVENT
END:VCALENDAR
`)
	srv := b.serve(t)
	c, err := New(Config{Endpoint: srv.URL + testPrefix + "/", Username: testUser, Password: testPassword})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{
		b: b, srv: srv, c: c,
		alice:  newCalendar(alicePath, "Personal"),
		bob:    newCalendar(bobPath, "Personal"),
		botCal: newCalendar(botPath, "Bot"),
	}
}
