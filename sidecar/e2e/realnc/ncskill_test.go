package realnc

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// approveAll answers yes, as user on the settings page (through the app's OCS API), to
// every question the agent is waiting on, and returns their summaries.
func (e *env) approveAll(t *testing.T, user string) []string {
	t.Helper()
	r := e.nc.ocs(t, user, "GET", istotaAPI+"/me/approvals", nil)
	if r.Status != 200 {
		t.Fatalf("approvals of %s: %d %s", user, r.Status, r.Raw)
	}
	var a struct {
		Pending []struct {
			ID      int64  `json:"id"`
			Tier    string `json:"tier"`
			Summary string `json:"summary"`
		} `json:"pending"`
	}
	r.decode(t, &a)
	var out []string
	for _, p := range a.Pending {
		d := e.nc.ocs(t, user, "POST", fmt.Sprintf("%s/me/approvals/%d", istotaAPI, p.ID), map[string]any{"approve": true})
		if d.Status != 200 {
			t.Fatalf("approve #%d as %s: %d %s", p.ID, user, d.Status, d.Raw)
		}
		out = append(out, p.Tier+": "+p.Summary)
	}
	return out
}

// askApproving posts text as user and, until the bot's answer carrying want arrives
// (the questions are replies to the message too), approves whatever the task asks; it
// returns the answer and the questions that were approved.
func (e *env) askApproving(t *testing.T, user, token, text, want string) (chatMessage, []string) {
	t.Helper()
	id, _ := e.nc.post(t, user, token, text)
	var got chatMessage
	var asked []string
	waitUntil(t, "the bot's answer to "+strconv.Quote(text), 3*time.Minute, func() bool {
		asked = append(asked, e.approveAll(t, user)...)
		for _, m := range e.nc.messages(t, user, token) {
			if m.fromBot() && m.ID > id && strings.Contains(m.Message, want) {
				got = m
				return true
			}
		}
		return false
	}, e.sc.logs)
	return got, asked
}

// toolOutput is every tool result the agent got that contains marker.
func (e *env) toolOutput(marker string) string {
	var b strings.Builder
	for _, r := range e.api.ToolResults() {
		if strings.Contains(r.Content, marker) {
			b.WriteString(r.Content + "\n")
		}
	}
	return b.String()
}

// ocsShare is a share as Nextcloud's files_sharing OCS API lists it.
type ocsShare struct {
	ID         string `json:"id"`
	ShareType  int    `json:"share_type"`
	UIDOwner   string `json:"uid_owner"`
	Path       string `json:"path"`
	FileTarget string `json:"file_target"`
	ShareWith  string `json:"share_with"`
	Token      string `json:"token"`
	Expiration string `json:"expiration"`
	Password   string `json:"password"`
	Permission int    `json:"permissions"`
	Label      string `json:"label"`
}

func (nc *nextcloud) shares(t *testing.T, user, query string) []ocsShare {
	t.Helper()
	r := nc.ocs(t, user, "GET", sharesAPI+"?"+query, nil)
	if r.Status != 200 {
		t.Fatalf("shares of %s (%s): %d %s", user, query, r.Status, r.Raw)
	}
	var out []ocsShare
	r.decode(t, &out)
	return out
}

// testNextcloudSkill: the agent in alice's sandbox uses the nextcloud skill through the
// credential proxy and the app, with alice approving the external actions on her settings
// page: her file shared with bob appears among bob's shares and opens for him, a link
// with expiry and password exists as asked, a folder appears in her WebDAV, her shares
// are listed, the bot posts into a conversation she is in; and it is refused bob's files,
// a folder bob shared with her, and a conversation she is not in.
func testNextcloudSkill(t *testing.T, e *env) {
	nc := e.nc
	nc.putFile(t, "alice", "Reports/q3-[ncs].txt", []byte("Q3 figures for bob [ncs-file]\n"))
	nc.putFile(t, "bob", "BobStuff/secret.txt", []byte("bob's secret [ncs-bob]\n"))
	nc.putFile(t, "bob", "ForAlice/plan.txt", []byte("bob's plan\n"))
	if r := nc.ocs(t, "bob", "POST", sharesAPI,
		map[string]any{"path": "/ForAlice", "shareType": 0, "shareWith": "alice", "permissions": 31}); r.Status != 200 {
		t.Fatalf("bob shares ForAlice with alice: %d %s", r.Status, r.Raw)
	}
	nts := nc.noteToSelf(t, "alice")
	nc.enableBot(t, "alice", nts)
	team := nc.createRoom(t, "alice", roomGroup, "Skill team", "bob")
	nc.enableBot(t, "alice", team)
	bobsRoom := nc.createRoom(t, "bob", roomGroup, "Bob alone")
	nc.enableBot(t, "bob", bobsRoom)
	expires := time.Now().UTC().AddDate(0, 0, 20).Format("2006-01-02")

	t.Run("share, link, folder and list", func(t *testing.T) {
		cmd := strings.Join([]string{
			"istota skill nextcloud share 'Reports/q3-[ncs].txt' --user bob --note 'for the meeting'",
			fmt.Sprintf("istota skill nextcloud share 'Reports/q3-[ncs].txt' --link --expires %s --generate-password --json", expires),
			"istota skill nextcloud mkdir Projects/2026/Q4-ncs",
			"echo '[ncs-listing]'; istota skill nextcloud shares",
		}, "; echo; ")
		e.script("[ncs-share]", fakeapi.Bash("Sharing it.", cmd), fakeapi.Reply("Shared with Bob and as a link. [ncs-share-answer]"))
		got, asked := e.askApproving(t, "alice", nts, "Share my Q3 report with Bob and make a link [ncs-share]", "[ncs-share-answer]")
		if !strings.Contains(got.Message, "[ncs-share-answer]") {
			t.Fatalf("answer: %q", got.Message)
		}
		// Both shares were asked about (external); the folder was not (write-own).
		if len(asked) != 2 || !strings.Contains(asked[0], "external: Share \"Reports/q3-[ncs].txt\" with the user bob") ||
			!strings.Contains(asked[1], "Make a public link") || !strings.Contains(asked[1], "password protected, expires "+expires) {
			t.Fatalf("questions: %q", asked)
		}
		out := e.toolOutput("[ncs-listing]")
		mustContain(t, "the skill's output", out, "shared Reports/q3-[ncs].txt with the user bob (read", "created the folder Projects/2026/Q4-ncs",
			`"type": "link"`, `"password": true`, `"expires": "`+expires+`"`, "Reports/q3-[ncs].txt as a public link http")
		var linkPassword string
		if i := strings.Index(out, `"generated_password": "`); i >= 0 {
			linkPassword, _, _ = strings.Cut(out[i+len(`"generated_password": "`):], `"`)
		}
		if len(linkPassword) < 20 {
			t.Fatalf("no generated password in the output:\n%s", out)
		}
		if n := e.sc.count(t, `SELECT COUNT(*) FROM task_events WHERE text LIKE ?`, "%"+linkPassword+"%"); n != 0 {
			t.Fatalf("the generated password is in %d task events", n)
		}

		// Bob sees the share, from alice, and can read the file.
		var found *ocsShare
		for _, s := range nc.shares(t, "bob", "shared_with_me=true") {
			if s.UIDOwner == "alice" && strings.Contains(s.FileTarget, "q3-[ncs].txt") {
				found = &s
			}
		}
		if found == nil || found.Permission&2 != 0 {
			t.Fatalf("bob's shares lack alice's read-only report: %+v", nc.shares(t, "bob", "shared_with_me=true"))
		}
		if b, ok := nc.getFile(t, "bob", found.FileTarget); !ok || !strings.Contains(string(b), "[ncs-file]") {
			t.Fatalf("bob cannot read the shared file %s: %q", found.FileTarget, b)
		}
		// The link: alice's, with the expiry and a password, and the URL the skill printed.
		var link *ocsShare
		for _, s := range nc.shares(t, "alice", "path="+url.QueryEscape("/Reports/q3-[ncs].txt")) {
			if s.ShareType == 3 {
				link = &s
			}
		}
		if link == nil || !strings.HasPrefix(link.Expiration, expires) || link.Password == "" || link.Password == linkPassword || link.UIDOwner != "alice" {
			t.Fatalf("the link share: %+v", link)
		}
		if !strings.Contains(out, link.Token) {
			t.Fatalf("the printed URL does not carry the link's token %s:\n%s", link.Token, out)
		}
		// The link opens with the generated password, and not without one.
		for _, withPassword := range []bool{false, true} {
			req, _ := http.NewRequest("GET", nc.URL+"/public.php/webdav/", nil)
			if withPassword {
				req.SetBasicAuth(link.Token, linkPassword)
			}
			resp, err := nc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if withPassword != (resp.StatusCode == 200 && strings.Contains(string(body), "[ncs-file]")) {
				t.Fatalf("the public link (password given: %t): %d %.200s", withPassword, resp.StatusCode, body)
			}
		}
		// The folder is in alice's files over WebDAV.
		if names := nc.list(t, "alice", "Projects/2026"); len(names) != 1 || names[0] != "Q4-ncs" {
			t.Fatalf("alice's Projects/2026: %v", names)
		}
		mustContain(t, "the listing", out[strings.Index(out, "[ncs-listing]"):], "Reports/q3-[ncs].txt with the user bob", "Reports/q3-[ncs].txt as a public link")
	})

	t.Run("post into a conversation she is in", func(t *testing.T) {
		cmd := fmt.Sprintf("echo '[ncs-convs]'; istota skill nextcloud conversations; istota skill nextcloud post %s 'The Q3 report is shared with Bob. [ncs-posted]'", team)
		e.script("[ncs-post]", fakeapi.Bash("Posting.", cmd), fakeapi.Reply("Posted in the team room. [ncs-post-answer]"))
		got, asked := e.askApproving(t, "alice", nts, "Tell the team the report is shared [ncs-post]", "[ncs-post-answer]")
		if !strings.Contains(got.Message, "[ncs-post-answer]") {
			t.Fatalf("answer: %q", got.Message)
		}
		if len(asked) != 1 || !strings.Contains(asked[0], "external: Post as the bot in the Talk conversation "+team) {
			t.Fatalf("questions: %q", asked)
		}
		out := e.toolOutput("[ncs-convs]")
		mustContain(t, "the conversations", out, team+"\tSkill team\tbot added", `posted in "Skill team"`)
		if strings.Contains(out, bobsRoom) {
			t.Fatalf("alice's conversations list bob's room:\n%s", out)
		}
		waitUntil(t, "the bot's post in the team room, as bob sees it", time.Minute, func() bool {
			for _, m := range nc.messages(t, "bob", team) {
				if m.fromBot() && strings.Contains(m.Message, "[ncs-posted]") {
					return true
				}
			}
			return false
		}, e.sc.logs)
	})

	t.Run("refusals", func(t *testing.T) {
		cmd := strings.Join([]string{
			"echo '[ncs-refusals]'",
			"istota skill nextcloud share ../bob/files/BobStuff/secret.txt --user alice; echo exit=$?",
			"istota skill nextcloud share /bob/files/BobStuff/secret.txt --link; echo exit=$?",
			"istota skill nextcloud share ForAlice/plan.txt --link; echo exit=$?",
			"istota skill nextcloud mkdir ForAlice/mine; echo exit=$?",
			fmt.Sprintf("istota skill nextcloud post %s 'alice was here [ncs-intruder]'; echo exit=$?", bobsRoom),
		}, "; ")
		e.script("[ncs-refuse]", fakeapi.Bash("Trying.", cmd), fakeapi.Reply("Some of that was refused. [ncs-refuse-answer]"))
		got, _ := e.askApproving(t, "alice", nts, "Share bob's things and post in his room [ncs-refuse]", "[ncs-refuse-answer]")
		if !strings.Contains(got.Message, "[ncs-refuse-answer]") {
			t.Fatalf("answer: %q", got.Message)
		}
		out := e.toolOutput("[ncs-refusals]")
		mustContain(t, "the refusals", out,
			`".." part`, "exit=2",
			`there is no file or folder "bob/files/BobStuff/secret.txt" in your files`,
			`"ForAlice/plan.txt" belongs to bob and is only shared with you`, "exit=1",
			`"ForAlice" belongs to bob`,
			"you are not in a conversation "+strconv.Quote(bobsRoom))
		if strings.Contains(out, "exit=0") {
			t.Fatalf("a refused call exited 0:\n%s", out)
		}
		for _, s := range nc.shares(t, "bob", "") {
			if strings.Contains(s.Path, "secret.txt") || strings.Contains(s.Path, "plan.txt") {
				t.Fatalf("a share of bob's file was made: %+v", s)
			}
		}
		if names := nc.list(t, "bob", "ForAlice"); len(names) != 1 {
			t.Fatalf("bob's ForAlice changed: %v", names)
		}
		for _, m := range nc.messages(t, "bob", bobsRoom) {
			if strings.Contains(m.Message, "[ncs-intruder]") {
				t.Fatalf("the bot posted into bob's room for alice: %+v", m)
			}
		}
		// Every action, done or refused, is in the sidecar's audit log.
		if n := e.sc.count(t, `SELECT COUNT(*) FROM audit_log WHERE component = 'nextcloud' AND user_id = 'alice' AND allowed = 0`); n < 4 {
			t.Fatalf("%d refusals audited, want at least 4", n)
		}
		if n := e.sc.count(t, `SELECT COUNT(*) FROM audit_log WHERE component = 'nextcloud' AND user_id = 'alice' AND allowed = 1 AND action IN ('share', 'mkdir', 'post')`); n != 4 {
			t.Fatalf("%d actions audited as done, want 4 (two shares, a folder, a post)", n)
		}
		if n := e.sc.count(t, `SELECT COUNT(*) FROM task_events WHERE kind = 'nextcloud'`); n < 8 {
			t.Fatalf("%d nextcloud task events, want at least 8", n)
		}
	})
}
