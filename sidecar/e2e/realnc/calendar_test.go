package realnc

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// makeCalendar creates a calendar of user's over CalDAV with one event today and shares
// it (read-only) with the bot account, as Nextcloud's Calendar app does.
func (nc *nextcloud) makeCalendar(t *testing.T, user, name, summary string) {
	t.Helper()
	nc.makeSharedCalendar(t, user, name, summary, false)
}

// makeSharedCalendar is makeCalendar with the bot's share read-write when writable.
func (nc *nextcloud) makeSharedCalendar(t *testing.T, user, name, summary string, writable bool) {
	t.Helper()
	base := "/remote.php/dav/calendars/" + user + "/" + name + "/"
	mk := `<?xml version="1.0" encoding="utf-8"?>
<c:mkcalendar xmlns:d="DAV:" xmlns:c="urn:ietf:params:xml:ns:caldav"><d:set><d:prop><d:displayname>` + name + `</d:displayname>
<c:supported-calendar-component-set><c:comp name="VEVENT"/></c:supported-calendar-component-set></d:prop></d:set></c:mkcalendar>`
	if st, raw := nc.dav(t, user, "MKCALENDAR", base, []byte(mk), map[string]string{"Content-Type": "application/xml"}); st != 201 {
		t.Fatalf("MKCALENDAR %s: %d %s", base, st, raw)
	}
	start := time.Now().UTC().Add(time.Hour).Truncate(time.Hour)
	ics := fmt.Sprintf("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//istota tests//EN\r\nBEGIN:VEVENT\r\nUID:%s-event@istota.test\r\nDTSTAMP:%s\r\nDTSTART:%s\r\nDTEND:%s\r\nSUMMARY:%s\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
		name, start.Format("20060102T150405Z"), start.Format("20060102T150405Z"), start.Add(time.Hour).Format("20060102T150405Z"), summary)
	if st, raw := nc.dav(t, user, "PUT", base+"event.ics", []byte(ics), map[string]string{"Content-Type": "text/calendar; charset=utf-8"}); st != 201 {
		t.Fatalf("PUT event: %d %s", st, raw)
	}
	nc.shareWithBot(t, user, base, writable)
}

// calendarData returns every event of one of user's calendars as iCalendar text.
func (nc *nextcloud) calendarData(t *testing.T, user, name string) string {
	t.Helper()
	q := `<?xml version="1.0" encoding="utf-8"?>
<c:calendar-query xmlns:d="DAV:" xmlns:c="urn:ietf:params:xml:ns:caldav"><d:prop><c:calendar-data/></d:prop>
<c:filter><c:comp-filter name="VCALENDAR"/></c:filter></c:calendar-query>`
	st, raw := nc.dav(t, user, "REPORT", "/remote.php/dav/calendars/"+user+"/"+name+"/", []byte(q),
		map[string]string{"Content-Type": "application/xml; charset=utf-8", "Depth": "1"})
	if st != 207 {
		t.Fatalf("REPORT %s/%s: %d %s", user, name, st, raw)
	}
	return string(raw)
}

// testCalendars: an event in a calendar alice shares with the bot is read by the
// calendar skill in her sandbox; bob's calendar, shared with the bot too, never is.
func testCalendars(t *testing.T, e *env) {
	nc := e.nc
	nc.makeCalendar(t, "alice", "family", "Dentist appointment [cal-alice]")
	nc.makeCalendar(t, "bob", "bobwork", "Bob's secret meeting [cal-bob]")

	// Alice's settings page lists the calendar she shared.
	r := nc.ocs(t, "alice", "GET", istotaAPI+"/me/settings", nil)
	if r.Status != 200 || !strings.Contains(string(r.Data), "family") || strings.Contains(string(r.Data), "bobwork") {
		t.Fatalf("alice's calendars on the settings page: %d %s", r.Status, r.Data)
	}

	from := time.Now().UTC().Format("2006-01-02")
	to := time.Now().UTC().Add(48 * time.Hour).Format("2006-01-02")
	cmd := fmt.Sprintf("istota skill calendar events --from %s --to %s; echo; istota skill calendar list-calendars", from, to)
	e.script("[cal-q]", fakeapi.Bash("Looking at your calendar.", cmd),
		fakeapi.Reply("You have the dentist. [cal-answer]").Expecting(fakeapi.ExpectToolResult("[cal-alice]")))
	nts := nc.noteToSelf(t, "alice")
	nc.enableBot(t, "alice", nts)
	got := e.ask(t, "alice", nts, "What is in my calendar? [cal-q]")
	if !strings.Contains(got.Message, "[cal-answer]") {
		t.Fatalf("answer: %q", got.Message)
	}
	if f := e.api.Failures(); len(f) > 0 {
		t.Fatalf("the calendar skill did not show alice's event: %v", f)
	}
	for _, b := range e.api.ToolResults() {
		if strings.Contains(b.Content, "[cal-bob]") || strings.Contains(b.Content, "bobwork") {
			t.Fatalf("alice's calendar skill showed bob's calendar: %s", b.Content)
		}
	}
}
