package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
	"github.com/istota/istota/sidecar/internal/talk/talktest"
)

// groupEvent is a chat message in a group conversation of alice and bob; replyTo, when
// set, is the bot message it answers.
func groupEvent(token string, id int64, uid, text string, replyTo *talktest.Posted) []byte {
	content, _ := json.Marshal(map[string]any{"message": text, "parameters": []any{}})
	object := map[string]any{"type": "Note", "id": strconv.FormatInt(id, 10), "name": "message", "content": string(content), "mediaType": "text/markdown"}
	if replyTo != nil {
		parent, _ := json.Marshal(map[string]any{"message": replyTo.Message, "parameters": []any{}})
		object["inReplyTo"] = map[string]any{"type": "Note",
			"actor":  map[string]any{"type": "Application", "id": "bots/bot-e2e", "name": "Istota"},
			"object": map[string]any{"type": "Note", "id": strconv.FormatInt(replyTo.ID, 10), "name": "message", "content": string(parent), "mediaType": "text/markdown"}}
	}
	return appEvent(token, uid, map[string]any{
		"type":   "Create",
		"actor":  map[string]any{"type": "Person", "id": "users/" + uid, "name": uid, "talkParticipantType": "3"},
		"object": object,
		"target": map[string]any{"type": "Collection", "id": token, "name": "Team"},
	})
}

// likeEvent is a reaction on a bot message, as the app forwards it (with the reacting
// user as sender).
func likeEvent(token string, msg talktest.Posted, uid, emoji string) []byte {
	content, _ := json.Marshal(map[string]any{"message": msg.Message, "parameters": []any{}})
	return appEvent(token, uid, map[string]any{
		"type":    "Like",
		"actor":   map[string]any{"type": "Person", "id": "users/" + uid, "name": uid},
		"object":  map[string]any{"type": "Note", "id": strconv.FormatInt(msg.ID, 10), "name": "", "content": string(content), "mediaType": "text/markdown"},
		"target":  map[string]any{"type": "Collection", "id": token, "name": "Team"},
		"content": emoji,
	})
}

func appEvent(token, uid string, event map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{
		"bot_url":      "nextcloudapp://istota",
		"event":        event,
		"sender":       map[string]any{"uid": uid, "display_name": uid, "email": uid + "@example.com", "timezone": "Europe/Berlin", "language": "en", "allowed": true},
		"conversation": map[string]any{"token": token, "name": "Team", "type": 2, "user_count": 2, "private": false},
		"received_at":  time.Now().UTC().Format(time.RFC3339),
	})
	return b
}

// The real claude CLI in the sandbox asks to send mail to someone else (an external
// action): the task waits, the bot asks once in the conversation, a second user's 👍
// does nothing, the asker's 👍 sends exactly one mail; a "no" reply or no answer sends
// none; Claude Code's own WebFetch is asked about through its PreToolUse hook and 👎
// keeps it from running. Every step is in the task's events and the audit log.
func TestApprovalsInTalk(t *testing.T) {
	srv := startMailServers(t)
	f := newFixture(t, fakeapi.Script{fakeapi.Reply("Hello.")}, "appr0001", "appr0002", "appr0003", "appr0004")
	send := func(marker string) fakeapi.Script {
		return fakeapi.Script{
			fakeapi.Bash("Sending it.", "istota skill email send --to bob@example.org --subject 'Lunch "+marker+"' --body 'See you at noon.'; echo \"exit=$?\""),
			fakeapi.Reply("Finished " + marker + "."),
		}
	}
	for _, m := range []string{"SEND-A", "SEND-B", "SEND-C"} {
		f.api.AddScript(m, fakeapi.Marker(m), send(m))
	}
	f.api.AddScript("FETCH-D", fakeapi.Marker("FETCH-D"), fakeapi.Script{
		fakeapi.ToolCall("Fetching.", "WebFetch", map[string]any{"url": "https://example.net/secret", "prompt": "summarise"}),
		fakeapi.Reply("Finished FETCH-D."),
	})
	f.sc.appendConfig(t, srv.config(`allowed_recipient_domains = ["example.org"]
[approvals]
timeout = "20s"
`))
	f.sc.start()

	post := func(body []byte) map[string]any {
		t.Helper()
		status, ans := f.sc.post("/v1/talk/events", body)
		if status != 200 {
			t.Fatalf("intake answered %d %v", status, ans)
		}
		return ans
	}
	// question waits for the bot's question in token and returns it.
	question := func(token string) talktest.Posted {
		t.Helper()
		var q talktest.Posted
		waitFor(t, "the question in "+token, 2*time.Minute, func() bool {
			for _, m := range f.talk.Messages() {
				if m.Token == token && strings.Contains(m.Message, "(approval #") {
					q = m
					return true
				}
			}
			return false
		}, f.sc.logs)
		return q
	}
	answer := func(token, marker string) string {
		t.Helper()
		var text string
		waitFor(t, "the answer in "+token, 2*time.Minute, func() bool {
			for _, m := range f.talk.Messages() {
				if m.Token == token && strings.Contains(m.Message, "Finished "+marker) {
					text = m.Message
					return true
				}
			}
			return false
		}, f.sc.logs)
		return text
	}
	taskStatus := func(token string) string {
		var s string
		f.sc.db().QueryRow(`SELECT status FROM tasks WHERE conversation_token = ? ORDER BY id DESC LIMIT 1`, token).Scan(&s)
		return s
	}

	// A: bob's 👍 is ignored (and he is told), alice's 👍 sends exactly one mail.
	f.talk.AddUserMessage("appr0001", 1, "alice", "@Istota SEND-A mail bob")
	post(groupEvent("appr0001", 1, "alice", "@Istota SEND-A mail bob", nil))
	q := question("appr0001")
	if !strings.Contains(q.Message, "Send an e-mail to bob@example.org") || !strings.Contains(q.Message, "Lunch SEND-A") || q.ReplyTo != 1 {
		t.Errorf("question = %+v", q)
	}
	if s := taskStatus("appr0001"); s != "pending_confirmation" {
		t.Errorf("task status while waiting = %s", s)
	}
	post(likeEvent("appr0001", q, "bob", "👍"))
	waitFor(t, "bob is told he cannot answer", time.Minute, func() bool {
		for _, m := range f.talk.Messages() {
			if strings.Contains(m.Message, "Only alice can answer") {
				return true
			}
		}
		return false
	}, f.sc.logs)
	time.Sleep(2 * time.Second)
	if n := len(srv.messages()); n != 0 {
		t.Fatalf("%d mail(s) sent after bob's 👍", n)
	}
	post(likeEvent("appr0001", q, "alice", "👍"))
	answer("appr0001", "SEND-A")
	waitFor(t, "the approved mail", time.Minute, func() bool { return len(srv.messages()) == 1 }, f.sc.logs)
	if m := srv.messages()[0]; len(m.to) != 1 || m.to[0] != "bob@example.org" {
		t.Errorf("mail went to %v", m.to)
	}

	// B: alice replies "no" to the question: nothing is sent.
	f.talk.AddUserMessage("appr0002", 11, "alice", "@Istota SEND-B mail bob")
	post(groupEvent("appr0002", 11, "alice", "@Istota SEND-B mail bob", nil))
	qb := question("appr0002")
	post(groupEvent("appr0002", 12, "alice", "no", &qb))
	answer("appr0002", "SEND-B")

	// C: nobody answers within the timeout: no.
	f.talk.AddUserMessage("appr0003", 21, "alice", "@Istota SEND-C mail bob")
	post(groupEvent("appr0003", 21, "alice", "@Istota SEND-C mail bob", nil))
	question("appr0003")
	answer("appr0003", "SEND-C")

	// D: Claude Code's own WebFetch goes through the hook; 👎 keeps it from running.
	f.talk.AddUserMessage("appr0004", 31, "alice", "@Istota FETCH-D")
	post(groupEvent("appr0004", 31, "alice", "@Istota FETCH-D", nil))
	qd := question("appr0004")
	if !strings.Contains(qd.Message, "WebFetch: https://example.net/secret") {
		t.Errorf("hook question = %q", qd.Message)
	}
	post(likeEvent("appr0004", qd, "alice", "👎"))
	answer("appr0004", "FETCH-D")

	if n := len(srv.messages()); n != 1 {
		t.Errorf("%d mails sent in all, want 1", n)
	}
	results := map[string]string{}
	for _, b := range f.api.ToolResults() {
		results[b.ToolUseID] = b.Content
	}
	var all []string
	for _, c := range results {
		all = append(all, c)
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{"queued for delivery to bob@example.org", "alice refused it", "nobody answered", "PreToolUse:WebFetch"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no tool result says %q:\n%s", want, joined)
		}
	}
	if failures := f.api.Failures(); len(failures) > 0 {
		t.Fatalf("fake API expectations failed: %v", failures)
	}

	// The audit log and the task events tell the whole story.
	rows, err := f.sc.db().Query(`SELECT reason, allowed FROM audit_log WHERE component = 'approval' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var trail []string
	for rows.Next() {
		var reason string
		var allowed bool
		rows.Scan(&reason, &allowed)
		trail = append(trail, reason)
	}
	rows.Close()
	if got := strings.Join(trail, ","); got != "asked,approved,asked,denied,asked,expired,asked,denied" {
		t.Errorf("audit trail = %s", got)
	}
	var decided string
	f.sc.db().QueryRow(`SELECT decided_by || ':' || decided_via FROM approvals WHERE id = 1`).Scan(&decided)
	if decided != "alice:talk_reaction" {
		t.Errorf("approval #1 decided by %q", decided)
	}
	var events int
	f.sc.db().QueryRow(`SELECT COUNT(*) FROM task_events WHERE kind = 'approval'`).Scan(&events)
	if events != 8 {
		t.Errorf("%d approval events, want 8", events)
	}
	for _, tk := range f.sc.tasks() {
		if tk.Status != "completed" {
			t.Errorf("task %d is %s", tk.ID, tk.Status)
		}
	}
}

// A task that waits for an answer survives a crash of the sidecar: after SIGKILL and a
// restart the task runs again, finds its question (no second one is posted), and the
// asker's 👍 on the message posted before the crash sends exactly one mail.
func TestApprovalSurvivesRestart(t *testing.T) {
	srv := startMailServers(t)
	f := newFixture(t, fakeapi.Script{fakeapi.Reply("Hello.")}, "apprr001")
	send := fakeapi.Bash("Sending it.", "istota skill email send --to bob@example.org --subject 'Lunch SEND-R' --body 'See you at noon.'; echo \"exit=$?\"")
	// The run cut short by the crash plays the first turn; the run after the restart
	// asks for the same tool call again, then ends.
	f.api.AddScript("SEND-R", fakeapi.Marker("SEND-R"), fakeapi.Script{send, send, fakeapi.Reply("Finished SEND-R.")})
	f.sc.appendConfig(t, srv.config(`allowed_recipient_domains = ["example.org"]
[approvals]
timeout = "10m"
`))
	f.sc.start()

	questions := func() []talktest.Posted {
		var qs []talktest.Posted
		for _, m := range f.talk.Messages() {
			if m.Token == "apprr001" && strings.Contains(m.Message, "(approval #") {
				qs = append(qs, m)
			}
		}
		return qs
	}
	taskStatus := func() string {
		var s string
		f.sc.db().QueryRow(`SELECT status FROM tasks WHERE conversation_token = 'apprr001' ORDER BY id DESC LIMIT 1`).Scan(&s)
		return s
	}
	f.talk.AddUserMessage("apprr001", 1, "alice", "@Istota SEND-R mail bob")
	if status, ans := f.sc.post("/v1/talk/events", groupEvent("apprr001", 1, "alice", "@Istota SEND-R mail bob", nil)); status != 200 {
		t.Fatalf("intake answered %d %v", status, ans)
	}
	// The kill comes once the outbox has recorded the question as sent. This fixture has
	// no app route to ask whether Talk already has a message (outbox.Options.Posted), so
	// a send cut off between Talk's answer and that record is sent again after the
	// restart, by design (at least once); that is the outbox's property, not this test's.
	questionRecorded := func() bool {
		var n int
		f.sc.db().QueryRow(`SELECT COUNT(*) FROM talk_outbox WHERE token = 'apprr001' AND status = 'sent' AND message LIKE '%(approval #%'`).Scan(&n)
		return n == 1
	}
	waitFor(t, "the question", 2*time.Minute, func() bool {
		return len(questions()) == 1 && taskStatus() == "pending_confirmation" && questionRecorded()
	}, f.sc.logs)
	q := questions()[0]

	f.sc.kill()
	waitFor(t, "the waiting agent to die with the sidecar", 30*time.Second, func() bool { return agentProcesses() == 0 }, f.sc.logs)
	f.sc.start()
	// The re-run reaches the same tool call and waits on the same question.
	waitFor(t, "the re-run waiting again", 2*time.Minute, func() bool {
		return taskStatus() == "pending_confirmation" && modelCalls(f.api, "SEND-R") >= 2
	}, f.sc.logs)
	if n := len(questions()); n != 1 {
		t.Fatalf("%d questions posted, want the one from before the restart", n)
	}
	if n := len(srv.messages()); n != 0 {
		t.Fatalf("%d mail(s) sent before the answer", n)
	}
	if status, ans := f.sc.post("/v1/talk/events", likeEvent("apprr001", q, "alice", "👍")); status != 200 {
		t.Fatalf("intake answered %d %v", status, ans)
	}
	waitFor(t, "the answer", 2*time.Minute, func() bool {
		for _, m := range f.talk.Messages() {
			if m.Token == "apprr001" && strings.Contains(m.Message, "Finished SEND-R") {
				return true
			}
		}
		return false
	}, f.sc.logs)
	waitFor(t, "the approved mail", time.Minute, func() bool { return len(srv.messages()) >= 1 }, f.sc.logs)
	time.Sleep(2 * time.Second)
	if n := len(srv.messages()); n != 1 {
		t.Errorf("%d mails sent, want exactly 1", n)
	}
	var approvals int
	f.sc.db().QueryRow(`SELECT COUNT(*) FROM approvals`).Scan(&approvals)
	if approvals != 1 {
		t.Errorf("%d approval rows, want 1", approvals)
	}
	var decided string
	f.sc.db().QueryRow(`SELECT status || ':' || decided_by || ':' || decided_via FROM approvals`).Scan(&decided)
	if decided != "approved:alice:talk_reaction" {
		t.Errorf("approval = %q", decided)
	}
	if s := taskStatus(); s != "completed" {
		t.Errorf("task is %s", s)
	}
	if failures := f.api.Failures(); len(failures) > 0 {
		t.Fatalf("fake API expectations failed: %v", failures)
	}
}

// modelCalls counts the model requests of the named script conversation.
func modelCalls(api *fakeapi.Server, conversation string) int {
	n := 0
	for _, r := range api.MessageRequests() {
		if r.Conversation == conversation {
			n++
		}
	}
	return n
}

// Reaching a host of the admin's allowlist that the user has not approved before is an
// external action: a command in the sandbox that connects to it through the network
// proxy waits for the user's yes, asked in Talk; once approved the host is known for
// that user (a later task reaches it without a question), while another user is asked
// on their own and their 👎 keeps the connection from being made.
func TestNewHostIsAskedAbout(t *testing.T) {
	var hits atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "origin-says-hello")
	}))
	defer origin.Close()
	host := strings.TrimPrefix(origin.URL, "http://")
	get := `exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'GET http://` + host + `/ HTTP/1.1\r\nHost: ` + host + `\r\nConnection: close\r\n\r\n' >&3 && cat <&3; echo`
	f := newFixtureWith(t, fakeapi.Script{fakeapi.Reply("Hello.")}, sidecarOptions{progressInterval: "0s",
		allowedHosts: []string{host}, allowPrivate: []string{host}, extraConfig: "\n[approvals]\ntimeout = \"10m\"\n"},
		"apprn001", "apprn002", "apprn003")
	for _, m := range []string{"NET-A", "NET-B", "NET-C"} {
		f.api.AddScript(m, fakeapi.Marker(m), fakeapi.Script{fakeapi.Bash("Fetching.", get), fakeapi.Reply("Finished " + m + ".")})
	}
	f.sc.start()
	ask := func(token string, id int64, uid, marker string) {
		t.Helper()
		f.talk.AddUserMessage(token, id, uid, "@Istota "+marker)
		if status, ans := f.sc.post("/v1/talk/events", groupEvent(token, id, uid, "@Istota "+marker, nil)); status != 200 {
			t.Fatalf("intake answered %d %v", status, ans)
		}
	}
	questions := func(token string) []talktest.Posted {
		var qs []talktest.Posted
		for _, m := range f.talk.Messages() {
			if m.Token == token && strings.Contains(m.Message, "(approval #") {
				qs = append(qs, m)
			}
		}
		return qs
	}
	finished := func(token, marker string) {
		t.Helper()
		waitFor(t, "the answer to "+marker, 2*time.Minute, func() bool {
			for _, m := range f.talk.Messages() {
				if m.Token == token && strings.Contains(m.Message, "Finished "+marker) {
					return true
				}
			}
			return false
		}, f.sc.logs)
	}
	toolResult := func(marker string) string {
		for _, r := range f.api.MessageRequests() {
			if r.Conversation == marker {
				for _, b := range r.ToolResults() {
					return b.Content
				}
			}
		}
		return ""
	}

	// A: alice's first connection asks; nothing reaches the host before her 👍.
	ask("apprn001", 1, "alice", "NET-A")
	waitFor(t, "the question about the host", 2*time.Minute, func() bool { return len(questions("apprn001")) == 1 }, f.sc.logs)
	q := questions("apprn001")[0]
	if !strings.Contains(q.Message, "Connect to "+host) {
		t.Errorf("question = %q", q.Message)
	}
	time.Sleep(time.Second)
	if n := hits.Load(); n != 0 {
		t.Fatalf("the host was reached %d time(s) before the answer", n)
	}
	f.sc.post("/v1/talk/events", likeEvent("apprn001", q, "alice", "👍"))
	finished("apprn001", "NET-A")
	if out := toolResult("NET-A"); !strings.Contains(out, "origin-says-hello") {
		t.Fatalf("approved connection: %q", out)
	}

	// B: a later task of alice's reaches the now known host without a question.
	ask("apprn002", 11, "alice", "NET-B")
	finished("apprn002", "NET-B")
	if out := toolResult("NET-B"); !strings.Contains(out, "origin-says-hello") {
		t.Fatalf("known host: %q", out)
	}
	if n := len(questions("apprn002")); n != 0 {
		t.Errorf("%d question(s) about a host alice approved before", n)
	}

	// C: bob is asked on his own; his 👎 refuses the connection.
	ask("apprn003", 21, "bob", "NET-C")
	waitFor(t, "bob's question", 2*time.Minute, func() bool { return len(questions("apprn003")) == 1 }, f.sc.logs)
	f.sc.post("/v1/talk/events", likeEvent("apprn003", questions("apprn003")[0], "bob", "👎"))
	finished("apprn003", "NET-C")
	if out := toolResult("NET-C"); strings.Contains(out, "origin-says-hello") || !strings.Contains(out, "403") || !strings.Contains(out, "bob refused it") {
		t.Fatalf("refused connection: %q", out)
	}
	if n := hits.Load(); n != 2 {
		t.Errorf("the host was reached %d times, want 2 (alice's two tasks)", n)
	}
	var refused int
	f.sc.db().QueryRow(`SELECT COUNT(*) FROM audit_log WHERE component = 'netproxy' AND reason = 'not_approved' AND user_id = 'bob'`).Scan(&refused)
	if refused != 1 {
		t.Errorf("%d audit rows for bob's refused connection, want 1", refused)
	}
}
