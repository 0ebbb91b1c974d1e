// Package calendar is the sidecar's CalDAV client for the bot account's calendars on
// Nextcloud. Users share calendars with the bot account; Nextcloud then lists each one
// in the bot's calendar home under "<name>_shared_by_<uid>", which is how the sidecar
// learns whose calendar it is (ForUser). The same client serves the calendar skill,
// the calendar-conflicts heartbeat and briefings.
package calendar

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/emersion/go-ical"
	"github.com/emersion/go-webdav/caldav"

	"github.com/istota/istota/sidecar/internal/davshare"
)

// Errors callers tell apart.
var (
	// ErrNotFound: the calendar object (or the event with that UID) does not exist.
	ErrNotFound = errors.New("calendar: not found")
	// ErrPrecondition: the ETag no longer matches (someone else changed the event) or,
	// on create, an object with that name already exists. Re-read and try again.
	ErrPrecondition = errors.New("calendar: precondition failed (the event changed on the server)")
	// ErrRecurring: the event is a recurring series, which Update does not rewrite,
	// because a partial edit could silently move every occurrence.
	ErrRecurring = errors.New("calendar: recurring events cannot be updated here")
	// ErrInvalid: the event or calendar given is not usable (missing fields, path
	// outside the calendar).
	ErrInvalid = errors.New("calendar: invalid request")
	// ErrReadOnly: the server refused a change (403): the calendar or task list is
	// shared with the bot read-only.
	ErrReadOnly = errors.New("calendar: the server refused the change (shared read-only)")
)

// queryMargin widens the time range asked of the server; see Events.
const queryMargin = 24 * time.Hour

// Calendar is one calendar collection in the bot's calendar home (or a task list);
// Owner is the user who shared it with the bot (see package davshare).
type Calendar = davshare.Collection

// Event is one VEVENT, or one occurrence of a recurring one.
type Event struct {
	UID         string    `json:"uid"`
	Summary     string    `json:"summary"`
	Description string    `json:"description,omitempty"`
	Location    string    `json:"location,omitempty"`
	Start       time.Time `json:"start"`
	// End is exclusive. For all-day events Start and End are midnight UTC of the
	// first day and of the day after the last.
	End    time.Time `json:"end"`
	AllDay bool      `json:"all_day"`
	// RecurrenceID is the original start of an occurrence of a recurring event; zero
	// for a single event. Occurrences share the UID, Path and ETag of their series.
	RecurrenceID time.Time `json:"recurrence_id,omitzero"`
	// ETag and Path identify the calendar object resource the event lives in.
	ETag string `json:"etag,omitempty"`
	Path string `json:"path,omitempty"`
}

// Recurring reports whether e is an occurrence of a recurring series.
func (e Event) Recurring() bool { return !e.RecurrenceID.IsZero() }

// Config configures a Client.
type Config struct {
	// Endpoint is the DAV root, e.g. "https://cloud.example/remote.php/dav/".
	Endpoint string
	// Username and Password are the bot account's credentials (an app password).
	Username string
	Password string
	// HomeSet is the calendar home path. Empty means discover it (current-user-principal,
	// then calendar-home-set); on Nextcloud that finds /remote.php/dav/calendars/<bot>/.
	HomeSet string
	// HTTPClient defaults to a client with a 30 s timeout.
	HTTPClient *http.Client
	// Location interprets floating times (no TZID, no "Z"); defaults to UTC.
	Location *time.Location
	Logger   *slog.Logger
}

// Client talks CalDAV to the server as the bot account. It is safe for concurrent use.
type Client struct {
	endpoint *url.URL
	user     string
	pass     string
	http     *http.Client
	dav      *caldav.Client
	loc      *time.Location
	log      *slog.Logger
	homeSet  davshare.Home
}

// New returns a client; it does not contact the server.
func New(cfg Config) (*Client, error) {
	conn, err := davshare.Login{Endpoint: cfg.Endpoint, Username: cfg.Username, Password: cfg.Password,
		HTTPClient: cfg.HTTPClient, Logger: cfg.Logger}.Open("calendar")
	if err != nil {
		return nil, err
	}
	dav, err := caldav.NewClient(conn.Auth, conn.Endpoint.String())
	if err != nil {
		return nil, fmt.Errorf("calendar: new caldav client: %w", err)
	}
	loc := cfg.Location
	if loc == nil {
		loc = time.UTC
	}
	c := &Client{endpoint: conn.Endpoint, user: cfg.Username, pass: cfg.Password, http: conn.HTTP, dav: dav, loc: loc, log: conn.Log}
	c.homeSet.Set(cfg.HomeSet)
	return c, nil
}

func dirPath(p string) string { return davshare.DirPath(p) }

// home returns the calendar home path, discovering it the first time.
func (c *Client) home(ctx context.Context) (string, error) {
	return c.homeSet.Discover(ctx, "calendar", c.dav.FindCurrentUserPrincipal, c.dav.FindCalendarHomeSet)
}

// Calendars lists the calendars in the bot's home: its own and those shared with it.
// A task list (VTODO only) is no event calendar and is left out; see TaskLists.
func (c *Client) Calendars(ctx context.Context) ([]Calendar, error) {
	return c.collections(ctx, ical.CompEvent)
}

// TaskLists lists the collections in the bot's home that hold to-dos (VTODO): Nextcloud
// Tasks' lists, and calendars that take both events and to-dos.
func (c *Client) TaskLists(ctx context.Context) ([]Calendar, error) {
	return c.collections(ctx, ical.CompToDo)
}

// collections lists the collections of the bot's calendar home that take comp; one
// that names no component set takes every component.
func (c *Client) collections(ctx context.Context, comp string) ([]Calendar, error) {
	hs, err := c.home(ctx)
	if err != nil {
		return nil, err
	}
	found, err := c.dav.FindCalendars(ctx, hs)
	if err != nil {
		return nil, fmt.Errorf("calendar: list calendars in %s: %w", hs, err)
	}
	out := make([]Calendar, 0, len(found))
	for _, f := range found {
		if len(f.SupportedComponentSet) > 0 && !slices.Contains(f.SupportedComponentSet, comp) {
			continue
		}
		out = append(out, newCalendar(f.Path, f.Name))
	}
	slices.SortFunc(out, func(a, b Calendar) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

func newCalendar(p, name string) Calendar { return davshare.New(p, name) }

// ForUser returns the calendars uid shared with the bot, so a user's agent only ever
// sees that user's calendars. The bot's own calendars belong to no user.
func ForUser(cals []Calendar, uid string) []Calendar { return davshare.ForUser(cals, uid) }

// Choice says which of a user's calendars the bot may use, as the user chose on the
// settings page (collection paths); chosen is false when the user never chose, which
// means every calendar they shared with the bot.
type Choice func(ctx context.Context, uid string) (paths []string, chosen bool, err error)

// Usable is ForUser narrowed to the calendars the user allowed; a nil choose allows
// every calendar the user shared. The calendar skill, heartbeats and briefings all read
// a user's calendars through it.
func Usable(ctx context.Context, cals []Calendar, uid string, choose Choice) ([]Calendar, error) {
	mine := ForUser(cals, uid)
	if choose == nil || len(mine) == 0 {
		return mine, nil
	}
	paths, chosen, err := choose(ctx, uid)
	if err != nil {
		return nil, fmt.Errorf("calendar: the calendars %s allowed: %w", uid, err)
	}
	if !chosen {
		return mine, nil
	}
	allowed := make(map[string]bool, len(paths))
	for _, p := range paths {
		allowed[dirPath(p)] = true
	}
	var out []Calendar
	for _, c := range mine {
		if allowed[dirPath(c.Path)] {
			out = append(out, c)
		}
	}
	return out, nil
}

// Events returns the events of cal that overlap [from, to), sorted by start. Recurring
// events are expanded into their occurrences in the range (RRULE, EXDATE and
// RECURRENCE-ID overrides); each occurrence has RecurrenceID set.
func (c *Client) Events(ctx context.Context, cal Calendar, from, to time.Time) ([]Event, error) {
	if !to.After(from) {
		return nil, fmt.Errorf("%w: the range end must be after its start", ErrInvalid)
	}
	q := &caldav.CalendarQuery{
		CompRequest: caldav.CalendarCompRequest{Name: ical.CompCalendar, AllProps: true, AllComps: true},
		CompFilter: caldav.CompFilter{
			Name: ical.CompCalendar,
			// The server's window is a day wider on each side and the exact range is
			// applied here: servers evaluate floating times and all-day dates in their
			// own zone, and some are loose at the range's edges.
			Comps: []caldav.CompFilter{{Name: ical.CompEvent, Start: from.Add(-queryMargin).UTC(), End: to.Add(queryMargin).UTC()}},
		},
	}
	objs, err := c.dav.QueryCalendar(ctx, cal.Path, q)
	if err != nil {
		return nil, fmt.Errorf("calendar: query %s: %w", cal.Path, err)
	}
	var out []Event
	for _, o := range objs {
		evs, err := c.objectEvents(o.Data, o.Path, o.ETag, from, to)
		if err != nil {
			// One broken object must not hide the rest of the calendar.
			c.log.Warn("calendar: skipping unreadable event", "path", o.Path, "err", err)
			continue
		}
		out = append(out, evs...)
	}
	sortEvents(out)
	return out, nil
}

// Find returns the (unexpanded) event with uid in cal.
func (c *Client) Find(ctx context.Context, cal Calendar, uid string) (Event, error) {
	if uid == "" {
		return Event{}, fmt.Errorf("%w: no uid", ErrInvalid)
	}
	// Objects created by this client, and by most clients, are named <uid>.ics: try
	// that before reading the whole calendar.
	if safeName(uid) {
		data, etag, err := c.get(ctx, cal.Path+uid+".ics")
		switch {
		case err == nil:
			if ev, ok := c.master(data, cal.Path+uid+".ics", etag, uid); ok {
				return ev, nil
			}
		case !errors.Is(err, ErrNotFound):
			return Event{}, err
		}
	}
	q := &caldav.CalendarQuery{
		CompRequest: caldav.CalendarCompRequest{Name: ical.CompCalendar, AllProps: true, AllComps: true},
		CompFilter: caldav.CompFilter{
			Name:  ical.CompCalendar,
			Comps: []caldav.CompFilter{{Name: ical.CompEvent}},
		},
	}
	objs, err := c.dav.QueryCalendar(ctx, cal.Path, q)
	if err != nil {
		return Event{}, fmt.Errorf("calendar: query %s: %w", cal.Path, err)
	}
	for _, o := range objs {
		if ev, ok := c.master(o.Data, o.Path, o.ETag, uid); ok {
			return ev, nil
		}
	}
	return Event{}, fmt.Errorf("calendar: event %q in %s: %w", uid, cal.ID, ErrNotFound)
}

func (c *Client) master(cal *ical.Calendar, p, etag, uid string) (Event, bool) {
	for _, comp := range cal.Children {
		if comp.Name != ical.CompEvent || comp.Props.Get(ical.PropRecurrenceID) != nil {
			continue
		}
		if got, _ := comp.Props.Text(ical.PropUID); got != uid {
			continue
		}
		ev, err := c.toEvent(comp)
		if err != nil {
			c.log.Warn("calendar: unreadable event", "path", p, "err", err)
			return Event{}, false
		}
		ev.Path, ev.ETag = p, etag
		if comp.Props.Get(ical.PropRecurrenceRule) != nil {
			// Mark the series so callers know Update will refuse it.
			ev.RecurrenceID = ev.Start
		}
		return ev, true
	}
	return Event{}, false
}

// Create stores ev as a new object in cal (If-None-Match: *). An empty UID gets a
// random one. It returns the event with UID, Path and ETag filled in.
func (c *Client) Create(ctx context.Context, cal Calendar, ev Event) (Event, error) {
	if err := checkTimes(ev); err != nil {
		return Event{}, err
	}
	ev.UID, ev.Path = newObject(cal, ev.UID)
	comp := newEventComponent(ev.UID)
	applyEvent(comp, ev)
	etag, err := c.put(ctx, ev.Path, wrap(comp), "", true)
	if err != nil {
		return Event{}, err
	}
	ev.ETag = etag
	ev.RecurrenceID = time.Time{}
	return ev, nil
}

// newObject gives a new object in cal its UID (uid, or a random one) and path: <uid>.ics
// when the UID makes a safe name, a random name otherwise.
func newObject(cal Calendar, uid string) (string, string) {
	if uid == "" {
		uid = randomID() + "@istota"
	}
	name := uid
	if !safeName(name) {
		name = randomID()
	}
	return uid, dirPath(cal.Path) + name + ".ics"
}

// wrap puts comp into a new VCALENDAR object.
func wrap(comp *ical.Component) *ical.Calendar {
	obj := ical.NewCalendar()
	obj.Props.SetText(ical.PropProductID, prodID)
	obj.Props.SetText(ical.PropVersion, "2.0")
	obj.Children = append(obj.Children, comp)
	return obj
}

// Update rewrites the event at ev.Path with ev's fields, keeping every property it
// does not manage (attendees, alarms, …). ev.ETag must be the ETag the caller read:
// a newer version on the server gives ErrPrecondition. Recurring series give
// ErrRecurring.
func (c *Client) Update(ctx context.Context, cal Calendar, ev Event) (Event, error) {
	if err := checkObject(cal, ev); err != nil {
		return Event{}, err
	}
	if err := checkTimes(ev); err != nil {
		return Event{}, err
	}
	data, _, err := c.get(ctx, ev.Path)
	if err != nil {
		return Event{}, err
	}
	var target *ical.Component
	for _, comp := range data.Children {
		if comp.Name != ical.CompEvent {
			continue
		}
		if comp.Props.Get(ical.PropRecurrenceRule) != nil || comp.Props.Get(ical.PropRecurrenceID) != nil {
			return Event{}, fmt.Errorf("calendar: update %q: %w", ev.UID, ErrRecurring)
		}
		if uid, _ := comp.Props.Text(ical.PropUID); uid == ev.UID {
			target = comp
		}
	}
	if target == nil {
		return Event{}, fmt.Errorf("calendar: event %q at %s: %w", ev.UID, ev.Path, ErrNotFound)
	}
	applyEvent(target, ev)
	// The server's copy may be newer than ev.ETag: the If-Match below is what
	// decides, so an edit made meanwhile is never overwritten.
	etag, err := c.put(ctx, ev.Path, data, ev.ETag, false)
	if err != nil {
		return Event{}, err
	}
	ev.ETag = etag
	return ev, nil
}

// Delete removes the object holding ev (for a recurring event: the whole series),
// if its ETag still matches.
func (c *Client) Delete(ctx context.Context, cal Calendar, ev Event) error {
	return c.deleteObject(ctx, cal, ev.Path, ev.ETag)
}

// deleteObject removes the object at p in cal if its ETag still matches.
func (c *Client) deleteObject(ctx context.Context, cal Calendar, p, etag string) error {
	if err := checkPath(cal, p, etag); err != nil {
		return err
	}
	if err := c.checkWritable(ctx, dirPath(cal.Path)); err != nil {
		return err
	}
	req, err := c.newRequest(ctx, http.MethodDelete, p, nil)
	if err != nil {
		return err
	}
	req.Header.Set("If-Match", quoteETag(etag))
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("calendar: delete %s: %w", p, err)
	}
	defer drain(resp)
	if err := statusErr(resp, "delete", p); err != nil {
		return err
	}
	return nil
}

// checkObject makes sure ev names an object inside cal, so that a caller that checked
// the calendar cannot be steered into another one by the event's path.
func checkObject(cal Calendar, ev Event) error {
	return checkPath(cal, ev.Path, ev.ETag)
}

// checkPath is checkObject for any object (event or to-do) at p with etag.
func checkPath(cal Calendar, p, etag string) error {
	if etag == "" {
		return fmt.Errorf("%w: no ETag (read the object first)", ErrInvalid)
	}
	dir := dirPath(cal.Path)
	clean := path.Clean(p)
	if path.Dir(clean)+"/" != dir || !strings.HasSuffix(clean, ".ics") {
		return fmt.Errorf("%w: object path is not in calendar %s", ErrInvalid, cal.ID)
	}
	return nil
}

func checkTimes(ev Event) error {
	if ev.Start.IsZero() || ev.End.IsZero() {
		return fmt.Errorf("%w: start and end are required", ErrInvalid)
	}
	if !ev.End.After(ev.Start) {
		return fmt.Errorf("%w: end must be after start", ErrInvalid)
	}
	return nil
}

// safeNameRE has no length bound of its own: a bounded repetition ({0,200}) compiles
// into a program as long as its bound, at every start of the binary (every sandbox's
// init too). safeName checks the length (ASCII only, so bytes are characters).
var safeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]*$`)

func safeName(s string) bool {
	return len(s) <= 201 && safeNameRE.MatchString(s) && !strings.Contains(s, "..")
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b[:])
}

func (c *Client) newRequest(ctx context.Context, method, p string, body []byte) (*http.Request, error) {
	u := c.endpoint.ResolveReference(&url.URL{Path: p})
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), r)
	if err != nil {
		return nil, fmt.Errorf("calendar: %s %s: %w", method, p, err)
	}
	req.SetBasicAuth(c.user, c.pass)
	return req, nil
}

func (c *Client) get(ctx context.Context, p string) (*ical.Calendar, string, error) {
	req, err := c.newRequest(ctx, http.MethodGet, p, nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Accept", ical.MIMEType)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("calendar: get %s: %w", p, err)
	}
	defer drain(resp)
	if err := statusErr(resp, "get", p); err != nil {
		return nil, "", err
	}
	data, err := ical.NewDecoder(io.LimitReader(resp.Body, 10<<20)).Decode()
	if err != nil {
		return nil, "", fmt.Errorf("calendar: get %s: parse: %w", p, err)
	}
	return data, unquoteETag(resp.Header.Get("ETag")), nil
}

// put stores data at p. With create it sends If-None-Match: *, otherwise If-Match.
// When the server does not return an ETag (Sabre omits it when it altered the data)
// it is read back, because every later update needs it.
func (c *Client) put(ctx context.Context, p string, data *ical.Calendar, etag string, create bool) (string, error) {
	if err := c.checkWritable(ctx, path.Dir(p)+"/"); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := ical.NewEncoder(&buf).Encode(data); err != nil {
		return "", fmt.Errorf("%w: encode event: %v", ErrInvalid, err)
	}
	var resp *http.Response
	for attempt := 0; ; attempt++ {
		req, err := c.newRequest(ctx, http.MethodPut, p, buf.Bytes())
		if err != nil {
			return "", err
		}
		req.Header.Set("Content-Type", ical.MIMEType+"; charset=utf-8")
		if create {
			req.Header.Set("If-None-Match", "*")
		} else {
			req.Header.Set("If-Match", quoteETag(etag))
		}
		if resp, err = c.http.Do(req); err != nil {
			return "", fmt.Errorf("calendar: put %s: %w", p, err)
		}
		defer drain(resp)
		// A new object is put again once after a server error (Nextcloud on SQLite
		// answers 500 while its database is locked): If-None-Match keeps it from
		// landing twice, and a 412 then means the first put did store it, since a new
		// object's name is its fresh UID.
		if create && attempt == 0 && resp.StatusCode >= 500 {
			c.log.Warn("calendar: server error creating an object; trying once more", "path", p, "status", resp.StatusCode)
			select {
			case <-ctx.Done():
				return "", fmt.Errorf("calendar: put %s: %w", p, ctx.Err())
			case <-time.After(time.Second):
			}
			continue
		}
		if create && attempt > 0 && resp.StatusCode == http.StatusPreconditionFailed {
			break
		}
		if err := statusErr(resp, "put", p); err != nil {
			return "", err
		}
		if e := unquoteETag(resp.Header.Get("ETag")); e != "" {
			return e, nil
		}
		break
	}
	_, e, err := c.get(ctx, p)
	if err != nil {
		return "", err
	}
	return e, nil
}

// checkWritable refuses a change to the collection at dir with ErrReadOnly when the
// server says the bot may not write there (a calendar or list shared read-only).
// Nextcloud answers a write into such a share with 404 rather than 403, which would
// read as "not found". A server that does not say leaves it to the write itself.
func (c *Client) checkWritable(ctx context.Context, dir string) error {
	req, err := c.newRequest(ctx, "PROPFIND", dir, []byte(davshare.PrivilegesQuery))
	if err != nil {
		return err
	}
	req.Header.Set("Depth", "0")
	req.Header.Set("Content-Type", "application/xml; charset=utf-8")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("calendar: privileges of %s: %w", dir, err)
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusMultiStatus {
		c.log.Debug("calendar: no privileges answer; the write decides", "path", dir, "status", resp.StatusCode)
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("calendar: privileges of %s: %w", dir, err)
	}
	writable, known, err := davshare.ParseWritable(body)
	if err != nil {
		return fmt.Errorf("calendar: privileges of %s: %w", dir, err)
	}
	if known && !writable {
		return fmt.Errorf("calendar: write into %s: %w", dir, ErrReadOnly)
	}
	return nil
}

func statusErr(resp *http.Response, op, p string) error {
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return fmt.Errorf("calendar: %s %s: %w", op, p, ErrNotFound)
	case resp.StatusCode == http.StatusPreconditionFailed:
		return fmt.Errorf("calendar: %s %s: %w", op, p, ErrPrecondition)
	case resp.StatusCode == http.StatusForbidden && op != "get":
		return fmt.Errorf("calendar: %s %s: %w", op, p, ErrReadOnly)
	}
	return fmt.Errorf("calendar: %s %s: server answered %s", op, p, resp.Status)
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}

func quoteETag(e string) string {
	if strings.HasPrefix(e, `"`) || strings.HasPrefix(e, `W/"`) {
		return e
	}
	return `"` + e + `"`
}

func unquoteETag(e string) string {
	e = strings.TrimPrefix(e, "W/")
	return strings.Trim(e, `"`)
}
