package realnc

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// davSetup is nc.dav for a test's own setup, tried again while Nextcloud's SQLite
// database is locked by the sidecar's and the app's requests at the same moment (it
// answers 500 then, and the write did not happen).
func (nc *nextcloud) davSetup(t *testing.T, user, method, path string, body []byte, header map[string]string) (int, []byte) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		st, raw := nc.dav(t, user, method, path, body, header)
		if st != 500 || !strings.Contains(string(raw), "database is locked") || attempt == 5 {
			return st, raw
		}
		t.Logf("%s %s: the database is locked; again in a second", method, path)
		time.Sleep(time.Second)
	}
}

// shareWithBot shares user's calendar, task list or address book at base with the bot
// account, as Nextcloud's Calendar, Tasks and Contacts apps do. Nextcloud makes a share
// read-write when <read-write/> is there at all, whatever it holds, so a read-only
// share leaves it out.
func (nc *nextcloud) shareWithBot(t *testing.T, user, base string, writable bool) {
	t.Helper()
	rw := ""
	if writable {
		rw = "<o:read-write/>"
	}
	share := `<?xml version="1.0" encoding="utf-8"?>
<o:share xmlns:d="DAV:" xmlns:o="http://owncloud.org/ns"><o:set><d:href>principal:principals/users/istota</d:href>` + rw + `</o:set></o:share>`
	if st, raw := nc.davSetup(t, user, "POST", base, []byte(share), map[string]string{"Content-Type": "application/xml; charset=utf-8"}); st/100 != 2 {
		t.Fatalf("share %s with the bot: %d %s", base, st, raw)
	}
}

// makeTaskList creates a to-do list (VTODO only, as Nextcloud Tasks makes them) of
// user's with one open to-do <name>-task@istota.test, and shares it with the bot.
func (nc *nextcloud) makeTaskList(t *testing.T, user, name, summary string, writable bool) {
	t.Helper()
	base := "/remote.php/dav/calendars/" + user + "/" + name + "/"
	mk := `<?xml version="1.0" encoding="utf-8"?>
<c:mkcalendar xmlns:d="DAV:" xmlns:c="urn:ietf:params:xml:ns:caldav"><d:set><d:prop><d:displayname>` + name + `</d:displayname>
<c:supported-calendar-component-set><c:comp name="VTODO"/></c:supported-calendar-component-set></d:prop></d:set></c:mkcalendar>`
	if st, raw := nc.davSetup(t, user, "MKCALENDAR", base, []byte(mk), map[string]string{"Content-Type": "application/xml"}); st != 201 {
		t.Fatalf("MKCALENDAR %s: %d %s", base, st, raw)
	}
	due := time.Now().UTC().AddDate(0, 0, 3).Format("20060102")
	ics := fmt.Sprintf("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//istota tests//EN\r\nBEGIN:VTODO\r\nUID:%s-task@istota.test\r\nDTSTAMP:%s\r\nDUE;VALUE=DATE:%s\r\nPRIORITY:5\r\nSUMMARY:%s\r\nSTATUS:NEEDS-ACTION\r\nEND:VTODO\r\nEND:VCALENDAR\r\n",
		name, time.Now().UTC().Format("20060102T150405Z"), due, summary)
	if st, raw := nc.davSetup(t, user, "PUT", base+"task.ics", []byte(ics), map[string]string{"Content-Type": "text/calendar; charset=utf-8"}); st != 201 {
		t.Fatalf("PUT to-do: %d %s", st, raw)
	}
	nc.shareWithBot(t, user, base, writable)
}

// makeAddressBook creates an address book of user's with one contact and shares it
// (read-only) with the bot.
func (nc *nextcloud) makeAddressBook(t *testing.T, user, name, fn, email string) {
	t.Helper()
	base := "/remote.php/dav/addressbooks/users/" + user + "/" + name + "/"
	mk := `<?xml version="1.0" encoding="utf-8"?>
<d:mkcol xmlns:d="DAV:" xmlns:card="urn:ietf:params:xml:ns:carddav"><d:set><d:prop>
<d:resourcetype><d:collection/><card:addressbook/></d:resourcetype><d:displayname>` + name + `</d:displayname></d:prop></d:set></d:mkcol>`
	if st, raw := nc.davSetup(t, user, "MKCOL", base, []byte(mk), map[string]string{"Content-Type": "application/xml"}); st != 201 {
		t.Fatalf("MKCOL %s: %d %s", base, st, raw)
	}
	vcf := fmt.Sprintf("BEGIN:VCARD\r\nVERSION:3.0\r\nUID:%s-contact@istota.test\r\nFN:%s\r\nEMAIL;TYPE=work:%s\r\nTEL;TYPE=cell:+49 170 555 0199\r\nORG:Istota Test Org\r\nEND:VCARD\r\n",
		name, fn, email)
	if st, raw := nc.davSetup(t, user, "PUT", base+"contact.vcf", []byte(vcf), map[string]string{"Content-Type": "text/vcard; charset=utf-8"}); st != 201 {
		t.Fatalf("PUT contact: %d %s", st, raw)
	}
	nc.shareWithBot(t, user, base, false)
}

// testTasksContacts: through the real claude CLI in alice's sandbox, the tasks skill
// lists alice's to-dos, adds one (visible to alice over CalDAV) and completes one, with
// alice approving each change; a list she shared read-only and bob's list are refused.
// The contacts skill finds her contact and never bob's, which is shared with the bot too.
func testTasksContacts(t *testing.T, e *env) {
	nc := e.nc
	nc.makeTaskList(t, "alice", "alicetodo", "Renew the passport [tc-alice-task]", true)
	nc.makeTaskList(t, "alice", "alicero", "Read-only chore [tc-alice-ro]", false)
	nc.makeTaskList(t, "bob", "bobtodo", "Bob's secret errand [tc-bob-task]", true)
	nc.makeAddressBook(t, "alice", "alicebook", "Ann Archer [tc-alice-contact]", "ann@archer.example")
	nc.makeAddressBook(t, "bob", "bobbook", "Ann Bobsfriend [tc-bob-contact]", "ann@bobsfriend.example")

	// Alice's settings page lists her calendars, and no task list among them (a to-do
	// list is no event calendar). It is also the bot's first CalDAV request, which on a
	// busy test server can take longer than one skill call may wait.
	r := nc.ocs(t, "alice", "GET", istotaAPI+"/me/settings", nil)
	if r.Status != 200 || strings.Contains(string(r.Data), "alicetodo") || strings.Contains(string(r.Data), "bobtodo") {
		t.Fatalf("alice's calendars on the settings page: %d %s", r.Status, r.Data)
	}

	due := time.Now().UTC().AddDate(0, 0, 7).Format("2006-01-02")
	cmd := strings.Join([]string{
		"echo '[tc-out]'",
		"istota skill tasks lists",
		"istota skill tasks list",
		"istota skill tasks add --list alicetodo_shared_by_alice --summary 'Buy a birthday cake [tc-new]' --due " + due + " --priority high",
		"istota skill tasks done alicetodo-task@istota.test",
		"istota skill tasks add --list alicero_shared_by_alice --summary 'no [tc-ro-add]'; echo exit=$?",
		"istota skill tasks add --list bobtodo_shared_by_bob --summary 'no [tc-intrude]'; echo exit=$?",
		"echo '[tc-after]'; istota skill tasks list --all",
		"istota skill contacts books",
		"istota skill contacts search archer",
		"istota skill contacts search Bobsfriend",
	}, "; ")
	e.script("[tc-q]", fakeapi.Bash("Looking at your lists and contacts.", cmd),
		fakeapi.Reply("Added the cake and found Ann. [tc-answer]"))
	nts := nc.noteToSelf(t, "alice")
	nc.enableBot(t, "alice", nts)
	got, asked := e.askApproving(t, "alice", nts, "Add a cake to my to-dos and find Ann's address [tc-q]", "[tc-answer]")
	if !strings.Contains(got.Message, "[tc-answer]") {
		t.Fatalf("answer: %q", got.Message)
	}
	// Every change was asked about (external), the reads were not.
	if len(asked) != 4 || !strings.Contains(asked[0], "external: Add a to-do") || !strings.Contains(asked[1], "external: Complete the to-do alicetodo-task@istota.test") {
		t.Fatalf("questions: %q", asked)
	}

	out := e.toolOutput("[tc-out]")
	mustContain(t, "the skills' output", out,
		"alicetodo_shared_by_alice\talicetodo", "alicero_shared_by_alice\talicero",
		"[ ] Renew the passport [tc-alice-task]", "due: ",
		"added: [ ] Buy a birthday cake [tc-new]", "due: "+due, "priority: 1",
		"done: alicetodo-task@istota.test",
		"the list alicero_shared_by_alice is shared with the bot read-only", "exit=1",
		`"bobtodo_shared_by_bob" is not one of the task lists you shared with the bot account "istota"`,
		"[x] Renew the passport [tc-alice-task]",
		"alicebook_shared_by_alice\talicebook",
		"Ann Archer [tc-alice-contact]", "e-mail: ann@archer.example (work)", "organisation: Istota Test Org",
		`no contact matches "Bobsfriend" in your address books`)
	for _, foreign := range []string{"[tc-bob-task]", "bobtodo", "[tc-bob-contact]", "bobbook", "bobsfriend.example"} {
		if strings.Contains(strings.ReplaceAll(out, `"bobtodo_shared_by_bob" is not one`, ""), foreign) {
			t.Fatalf("alice's skills showed bob's %s:\n%s", foreign, out)
		}
	}
	if strings.Contains(out, "exit=0") {
		t.Fatalf("a refused change exited 0:\n%s", out)
	}

	// Over CalDAV, as alice and bob see their lists.
	mine := nc.calendarData(t, "alice", "alicetodo")
	mustContain(t, "alice's list", mine, "Buy a birthday cake [tc-new]", "PRIORITY:1", "STATUS:COMPLETED")
	if strings.Count(mine, "BEGIN:VTODO") != 2 {
		t.Fatalf("alice's list:\n%s", mine)
	}
	if ro := nc.calendarData(t, "alice", "alicero"); strings.Contains(ro, "[tc-ro-add]") || !strings.Contains(ro, "[tc-alice-ro]") {
		t.Fatalf("alice's read-only list changed:\n%s", ro)
	}
	if bob := nc.calendarData(t, "bob", "bobtodo"); strings.Contains(bob, "[tc-intrude]") || strings.Contains(bob, "COMPLETED") {
		t.Fatalf("bob's list changed:\n%s", bob)
	}
}
