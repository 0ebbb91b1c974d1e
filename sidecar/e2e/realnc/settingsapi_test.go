package realnc

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
	"github.com/istota/istota/sidecar/internal/store"
)

// istotaAPI is the app's OCS API for its settings pages.
const istotaAPI = "/ocs/v2.php/apps/istota/api/v1"

// testSettingsAPI drives the app's OCS routes through Nextcloud as the pages do: every
// personal route answers for the logged-in user only, whatever ids the request names;
// every admin route refuses a non-admin; the WebSocket token opens the sidecar's stream.
func testSettingsAPI(t *testing.T, e *env) {
	nc := e.nc
	// Both users have a finished task by now (the talk step); give alice a fact too.
	aliceTask := e.sc.count(t, `SELECT max(id) FROM tasks WHERE user_id = 'alice' AND status = 'completed'`)
	bobTask := e.sc.count(t, `SELECT max(id) FROM tasks WHERE user_id = 'bob' AND status = 'completed'`)
	if aliceTask == 0 || bobTask == 0 {
		t.Fatalf("the talk step left no finished tasks (alice %d, bob %d)", aliceTask, bobTask)
	}
	factID := e.insertFact(t, "user:alice", "alice", "likes", "green tea [fact-alice]")

	type call struct {
		method, path string
		body         any
	}
	personal := []call{
		{"GET", "/me", nil},
		{"GET", "/me/status", nil},
		{"GET", fmt.Sprintf("/me/tasks/%d/events", bobTask), nil},
		{"GET", "/me/memory/user", nil},
		{"GET", "/me/memory/audit", nil},
		{"GET", "/me/memory/channels", nil},
		{"GET", "/me/memory/dated", nil},
		{"GET", "/me/memory/facts", nil},
		{"GET", "/me/memory/search?q=tea", nil},
		{"GET", "/me/schedule", nil},
		{"GET", "/me/settings", nil},
	}
	t.Run("personal routes answer for the session's user", func(t *testing.T) {
		for _, c := range personal {
			r := nc.ocs(t, "bob", c.method, istotaAPI+c.path, c.body)
			if strings.Contains(string(r.Raw), "[fact-alice]") || strings.Contains(string(r.Raw), "\"alice\"") {
				t.Errorf("%s %s as bob shows alice's data: %s", c.method, c.path, r.Raw)
			}
			if r.Status >= 500 {
				t.Errorf("%s %s as bob: %d %s", c.method, c.path, r.Status, r.Raw)
			}
		}
		// Alice sees her own task's events; bob asking for them gets 404, not her data.
		if r := nc.ocs(t, "alice", "GET", fmt.Sprintf("%s/me/tasks/%d/events", istotaAPI, aliceTask), nil); r.Status != 200 {
			t.Errorf("alice reading her task's events: %d %s", r.Status, r.Raw)
		}
		if r := nc.ocs(t, "bob", "GET", fmt.Sprintf("%s/me/tasks/%d/events", istotaAPI, aliceTask), nil); r.Status != 404 {
			t.Errorf("bob reading alice's task: %d %s", r.Status, r.Raw)
		}
		// A user id in the query or body is never taken.
		r := nc.ocs(t, "bob", "GET", istotaAPI+"/me/status?uid=alice&user=alice", nil)
		var st struct {
			Recent []struct {
				ID int `json:"id"`
			} `json:"recent"`
		}
		r.decode(t, &st)
		for _, task := range st.Recent {
			if task.ID == aliceTask {
				t.Errorf("bob's status lists alice's task %d", aliceTask)
			}
		}
		// Alice's fact: hers to see, not bob's to change.
		if r := nc.ocs(t, "alice", "GET", istotaAPI+"/me/memory/facts", nil); !strings.Contains(string(r.Raw), "[fact-alice]") {
			t.Errorf("alice does not see her fact: %d %s", r.Status, r.Raw)
		}
		if r := nc.ocs(t, "bob", "POST", fmt.Sprintf("%s/me/memory/facts/%d/invalidate", istotaAPI, factID), nil); r.Status != 404 {
			t.Errorf("bob invalidating alice's fact: %d %s", r.Status, r.Raw)
		}
		if r := nc.ocs(t, "bob", "DELETE", fmt.Sprintf("%s/me/memory/facts/%d", istotaAPI, factID), nil); r.Status != 404 {
			t.Errorf("bob deleting alice's fact: %d %s", r.Status, r.Raw)
		}
		if n := e.sc.count(t, `SELECT count(*) FROM knowledge_facts WHERE id = ? AND valid_until = ''`, factID); n != 1 {
			t.Errorf("alice's fact was changed by bob's requests")
		}
		// USER.md written through the page lands in the writer's own file only.
		var mem struct {
			Content string `json:"content"`
			ETag    string `json:"etag"`
		}
		nc.ocs(t, "bob", "GET", istotaAPI+"/me/memory/user", nil).decode(t, &mem)
		if r := nc.ocs(t, "bob", "PUT", istotaAPI+"/me/memory/user", map[string]any{"content": mem.Content + "\n- Bob prefers short answers [usermd-bob]\n", "etag": mem.ETag}); r.Status != 200 {
			t.Fatalf("bob writing his USER.md: %d %s", r.Status, r.Raw)
		}
		if r := nc.ocs(t, "alice", "GET", istotaAPI+"/me/memory/user", nil); strings.Contains(string(r.Raw), "[usermd-bob]") {
			t.Errorf("bob's USER.md edit shows in alice's")
		}
		// …and in Nextcloud, where bob sees it in his share.
		waitUntil(t, "bob's USER.md edit in his files", time.Minute, func() bool {
			for _, p := range []string{"istota/config/USER.md"} {
				if b, ok := nc.getFile(t, "bob", p); ok && strings.Contains(string(b), "[usermd-bob]") {
					return true
				}
			}
			return false
		}, e.sc.logs)
		// Stop acts on the caller's tasks only.
		release := make(chan struct{})
		defer close(release)
		e.script("[api-stop]", fakeapi.Reply("never [api-stop-answer]").Waiting(release))
		nts := nc.noteToSelf(t, "alice")
		nc.post(t, "alice", nts, "Something slow [api-stop]")
		waitUntil(t, "alice's slow task to run", 2*time.Minute, func() bool { return e.taskStatus(t, "[api-stop]") == "running" }, e.sc.logs)
		if r := nc.ocs(t, "bob", "POST", istotaAPI+"/me/stop", nil); r.Status != 200 || e.taskStatus(t, "[api-stop]") != "running" {
			t.Errorf("bob's stop touched alice's task: %d %s, status %s", r.Status, r.Raw, e.taskStatus(t, "[api-stop]"))
		}
		if r := nc.ocs(t, "alice", "POST", istotaAPI+"/me/stop", nil); r.Status != 200 {
			t.Errorf("alice's stop: %d %s", r.Status, r.Raw)
		}
		waitUntil(t, "alice's task to be cancelled", time.Minute, func() bool { return e.taskStatus(t, "[api-stop]") == "cancelled" }, e.sc.logs)
	})

	t.Run("admin routes refuse non-admins", func(t *testing.T) {
		before := nc.ocs(t, "admin", "GET", istotaAPI+"/admin/settings", nil)
		if before.Status != 200 {
			t.Fatalf("admin reading the settings: %d %s", before.Status, before.Raw)
		}
		if strings.Contains(string(before.Raw), apiKey) {
			t.Fatal("the admin settings answer carries the API key")
		}
		for _, c := range []call{
			{"GET", "/admin/health", nil},
			{"GET", "/admin/settings", nil},
			{"PUT", "/admin/settings", map[string]any{"workers": map[string]any{"max": 1}}},
		} {
			r := nc.ocs(t, "alice", c.method, istotaAPI+c.path, c.body)
			if r.Status != 403 {
				t.Errorf("%s %s as alice: %d %s", c.method, c.path, r.Status, r.Raw)
			}
		}
		if after := nc.ocs(t, "admin", "GET", istotaAPI+"/admin/settings", nil); string(after.Data) != string(before.Data) {
			t.Errorf("alice's refused PUT changed the settings:\n%s\n%s", before.Data, after.Data)
		}
		if r := nc.ocs(t, "admin", "GET", istotaAPI+"/admin/health", nil); r.Status != 200 || !strings.Contains(string(r.Raw), "bwrap") {
			t.Errorf("admin health: %d %s", r.Status, r.Raw)
		}
	})

	t.Run("WebSocket token", func(t *testing.T) {
		r := nc.ocs(t, "alice", "POST", istotaAPI+"/me/ws-token", nil)
		var tok struct {
			Token string `json:"token"`
			URL   string `json:"url"`
		}
		r.decode(t, &tok)
		if r.Status != 200 || tok.Token == "" {
			t.Fatalf("ws-token: %d %s", r.Status, r.Raw)
		}
		// The browser reaches /v1/ws through the reverse proxy; here directly.
		ws := "ws" + strings.TrimPrefix(e.sc.url, "http") + "/v1/ws?token=" + tok.Token
		conn, resp, err := websocket.DefaultDialer.Dial(ws, http.Header{"Origin": {nc.URL}})
		if err != nil {
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			t.Fatalf("WebSocket with the app's token: %v (%d)", err, status)
		}
		defer conn.Close()
		e.script("[ws-1]", fakeapi.Reply("Streamed. [ws-1-answer]"))
		nts := nc.noteToSelf(t, "alice")
		nc.post(t, "alice", nts, "Stream this [ws-1]")
		deadline := time.Now().Add(2 * time.Minute)
		for {
			conn.SetReadDeadline(deadline)
			var fr map[string]any
			if err := conn.ReadJSON(&fr); err != nil {
				t.Fatalf("reading the live stream: %v\n%s", err, tail(e.sc.logs(), 40))
			}
			if task, ok := fr["task"].(map[string]any); ok && task["status"] == "completed" && strings.Contains(fmt.Sprint(task["prompt"], task["result"]), "ws-1") {
				break
			}
		}
		// Single use: the same token again is refused.
		if _, resp, err := websocket.DefaultDialer.Dial(ws, http.Header{"Origin": {nc.URL}}); err == nil || resp == nil || resp.StatusCode != 401 {
			t.Errorf("a used token opened the stream again: %v", err)
		}
	})
}

// insertFact adds a current knowledge fact to the sidecar's database, as the nightly
// sleep cycle would.
func (e *env) insertFact(t *testing.T, namespace, subject, predicate, object string) int {
	t.Helper()
	db := e.sc.dbRW(t)
	defer db.Close()
	now := store.FormatTime(time.Now())
	res, err := db.Exec(`INSERT INTO knowledge_facts (namespace, subject, predicate, object, valid_from, source, created_at) VALUES (?, ?, ?, ?, ?, 'sleep_cycle', ?)`,
		namespace, subject, predicate, object, now, now)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := res.LastInsertId()
	return int(id)
}

// testAccess limits the bot to a group: a user outside it gets a clear answer in Talk
// and no task, a member keeps working.
func testAccess(t *testing.T, e *env) {
	nc := e.nc
	nc.addUser(t, "carol")
	nc.mustOcc(t, "group:add", "family")
	nc.mustOcc(t, "group:adduser", "family", "alice")
	r := nc.ocs(t, "admin", "PUT", istotaAPI+"/admin/settings", map[string]any{"access": map[string]any{"groups": []string{"family"}}})
	if r.Status != 200 {
		t.Fatalf("limit access to family: %d %s", r.Status, r.Raw)
	}
	defer nc.ocs(t, "admin", "PUT", istotaAPI+"/admin/settings", map[string]any{"access": map[string]any{"groups": []string{}}})

	carolNotes := nc.noteToSelf(t, "carol")
	nc.enableBot(t, "carol", carolNotes)
	e.script("[access-carol]", fakeapi.Reply("must not run [access-carol-answer]"))
	got := e.ask(t, "carol", carolNotes, "Hello there [access-carol]")
	if !strings.Contains(strings.ToLower(got.Message), "not") || strings.Contains(got.Message, "[access-carol-answer]") {
		t.Errorf("carol's answer does not refuse clearly: %q", got.Message)
	}
	if n := e.tasksWith(t, "[access-carol]"); n != 0 {
		t.Errorf("carol's message made %d task(s)", n)
	}
	if r := nc.ocs(t, "carol", "GET", istotaAPI+"/me", nil); r.Status != 200 || !strings.Contains(string(r.Data), `"allowed":false`) {
		t.Errorf("carol's session: %d %s", r.Status, r.Raw)
	}
	e.script("[access-alice]", fakeapi.Reply("You are in. [access-alice-answer]"))
	if got := e.ask(t, "alice", nc.noteToSelf(t, "alice"), "Still allowed? [access-alice]"); !strings.Contains(got.Message, "[access-alice-answer]") {
		t.Errorf("alice (in family) was not answered: %q", got.Message)
	}
}
