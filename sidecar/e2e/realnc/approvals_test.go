package realnc

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// react puts emoji on a message as user, through Talk's reaction API (Talk then tells
// the bot, which has the reaction feature).
func (nc *nextcloud) react(t testing.TB, user, token string, id int64, emoji string) {
	t.Helper()
	r := nc.ocs(t, user, "POST", talkV1+"/reaction/"+token+"/"+strconv.FormatInt(id, 10), map[string]any{"reaction": emoji})
	if r.Status != 200 && r.Status != 201 {
		t.Fatalf("react %s on %d as %s: %d %s", emoji, id, user, r.Status, r.Raw)
	}
}

// reply posts text as user in reply to message id.
func (nc *nextcloud) reply(t testing.TB, user, token string, id int64, text string) int64 {
	t.Helper()
	r := nc.ocs(t, user, "POST", talkV1+"/chat/"+token, map[string]any{"message": text, "replyTo": id})
	if r.Status != 201 {
		t.Fatalf("reply in %s as %s: %d %s", token, user, r.Status, r.Raw)
	}
	var m chatMessage
	r.decode(t, &m)
	return m.ID
}

// testApprovals: an action of the external tier (creating an event in a calendar alice
// shared with the bot) waits for alice's yes, asked in the real Talk conversation where
// she asked. Bob's 👍 there is ignored and he is told so; alice's 👍 creates exactly one
// event; her "no" in reply creates none; a question answered on the settings page (OCS
// API) goes on, and bob can neither see nor answer alice's questions there.
func testApprovals(t *testing.T, e *env) {
	nc := e.nc
	nc.makeSharedCalendar(t, "alice", "apprcal", "Existing [appr-existing]", true)
	room := nc.createRoom(t, "alice", roomGroup, "Plans", "bob")
	nc.enableBot(t, "alice", room)
	day := time.Now().UTC().Add(72 * time.Hour).Format("2006-01-02")
	create := func(tag string) fakeapi.Turn {
		return fakeapi.Bash("Adding it.", fmt.Sprintf("istota skill calendar create --calendar apprcal_shared_by_alice --summary 'Dinner %s' --start %sT19:00 --end %sT20:00 --tz Europe/Berlin; echo exit=$?", tag, day, day))
	}
	question := func(asked int64) chatMessage {
		t.Helper()
		var q chatMessage
		waitUntil(t, "the bot's question", 2*time.Minute, func() bool {
			for _, m := range botMessagesAfter(nc.messages(t, "alice", room), asked) {
				if strings.Contains(m.Message, "(approval #") && m.Parent != nil && m.Parent.ID == asked {
					q = m
					return true
				}
			}
			return false
		}, e.sc.logs)
		return q
	}
	answered := func(asked int64, tag string) {
		t.Helper()
		waitUntil(t, "the answer "+tag, 2*time.Minute, func() bool {
			for _, m := range botMessagesAfter(nc.messages(t, "alice", room), asked) {
				if strings.Contains(m.Message, tag) {
					return true
				}
			}
			return false
		}, e.sc.logs)
	}
	toolOutput := func(marker string) string {
		var out []string
		for _, r := range e.api.MessageRequests() {
			if r.Conversation == marker {
				for _, b := range r.ToolResults() {
					out = append(out, b.Content)
				}
			}
		}
		return strings.Join(out, "\n")
	}
	events := func(tag string) int {
		return strings.Count(nc.calendarData(t, "alice", "apprcal"), "SUMMARY:Dinner "+tag)
	}

	t.Run("talk reaction", func(t *testing.T) {
		e.script("[appr-1]", create("[appr-ev1]"), fakeapi.Reply("Booked. [appr-1-done]"))
		asked, _ := nc.post(t, "alice", room, "@Istota put dinner in my calendar [appr-1]")
		q := question(asked)
		mustContain(t, "the question", q.Message, "Create a calendar event", "Dinner [appr-ev1]")
		if st := e.taskStatus(t, "[appr-1]"); st != "pending_confirmation" {
			t.Errorf("task status while waiting = %s", st)
		}
		nc.react(t, "bob", room, q.ID, "👍")
		waitUntil(t, "bob told he cannot answer", time.Minute, func() bool {
			for _, m := range botMessagesAfter(nc.messages(t, "bob", room), q.ID) {
				if strings.Contains(m.Message, "Only alice can answer") {
					return true
				}
			}
			return false
		}, e.sc.logs)
		if n := events("[appr-ev1]"); n != 0 {
			t.Fatalf("%d event(s) created after bob's 👍", n)
		}
		nc.react(t, "alice", room, q.ID, "👍")
		answered(asked, "[appr-1-done]")
		if n := events("[appr-ev1]"); n != 1 {
			t.Fatalf("%d events after alice's 👍, want 1; the tool said:\n%s", n, toolOutput("[appr-1]"))
		}
	})

	t.Run("talk reply no", func(t *testing.T) {
		e.script("[appr-2]", create("[appr-ev2]"), fakeapi.Reply("Not booked. [appr-2-done]").Expecting(fakeapi.ExpectToolResult("alice refused it")))
		asked, _ := nc.post(t, "alice", room, "@Istota put lunch in my calendar [appr-2]")
		q := question(asked)
		nc.reply(t, "alice", room, q.ID, "no")
		answered(asked, "[appr-2-done]")
		if n := events("[appr-ev2]"); n != 0 {
			t.Fatalf("%d event(s) created after alice said no", n)
		}
	})

	t.Run("settings page", func(t *testing.T) {
		e.script("[appr-3]", create("[appr-ev3]"), fakeapi.Reply("Booked from the page. [appr-3-done]"))
		asked, _ := nc.post(t, "alice", room, "@Istota put breakfast in my calendar [appr-3]")
		question(asked)
		type listing struct {
			Pending []struct {
				ID      int64  `json:"id"`
				Summary string `json:"summary"`
			} `json:"pending"`
			Recent []struct {
				ID         int64  `json:"id"`
				Status     string `json:"status"`
				DecidedBy  string `json:"decided_by"`
				DecidedVia string `json:"decided_via"`
			} `json:"recent"`
		}
		var mine listing
		r := nc.ocs(t, "alice", "GET", istotaAPI+"/me/approvals", nil)
		if r.Status != 200 {
			t.Fatalf("alice's approvals: %d %s", r.Status, r.Raw)
		}
		r.decode(t, &mine)
		if len(mine.Pending) != 1 || !strings.Contains(mine.Pending[0].Summary, "[appr-ev3]") {
			t.Fatalf("alice's pending approvals: %s", r.Data)
		}
		id := mine.Pending[0].ID
		if r := nc.ocs(t, "bob", "GET", istotaAPI+"/me/approvals", nil); r.Status != 200 || strings.Contains(string(r.Data), "[appr-ev") {
			t.Fatalf("bob's list shows alice's questions: %d %s", r.Status, r.Data)
		}
		if r := nc.ocs(t, "bob", "POST", fmt.Sprintf("%s/me/approvals/%d", istotaAPI, id), map[string]any{"approve": true}); r.Status/100 == 2 {
			t.Fatalf("bob answered alice's question: %d %s", r.Status, r.Raw)
		}
		if r := nc.ocs(t, "alice", "POST", fmt.Sprintf("%s/me/approvals/%d", istotaAPI, id), map[string]any{"approve": true}); r.Status != 200 {
			t.Fatalf("alice's approval on the page: %d %s", r.Status, r.Raw)
		}
		answered(asked, "[appr-3-done]")
		if n := events("[appr-ev3]"); n != 1 {
			t.Fatalf("%d events after the page's approval, want 1; the tool said:\n%s", n, toolOutput("[appr-3]"))
		}
		r = nc.ocs(t, "alice", "GET", istotaAPI+"/me/approvals", nil)
		mine = listing{}
		r.decode(t, &mine)
		var trail []string
		for _, q := range mine.Recent {
			trail = append(trail, q.Status+":"+q.DecidedBy+":"+q.DecidedVia)
		}
		got, _ := json.Marshal(trail)
		mustContain(t, "alice's answered questions", string(got), "approved:alice:talk_reaction", "denied:alice:talk_reply", "approved:alice:page")
	})
	if f := e.api.Failures(); len(f) > 0 {
		t.Fatalf("fake API expectations failed: %v", f)
	}
}
