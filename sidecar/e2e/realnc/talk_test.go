package realnc

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// requestMarker matches the model calls of the task whose request (not the conversation
// context before it) carries marker.
func requestMarker(marker string) fakeapi.Matcher {
	return func(r *fakeapi.Recorded) bool {
		text := r.UserText()
		if i := strings.LastIndex(text, "## Request from"); i >= 0 {
			text = text[i:]
		}
		return strings.Contains(text, marker)
	}
}

// script makes the model answer the task whose request carries marker with turns.
func (e *env) script(marker string, turns ...fakeapi.Turn) {
	e.api.AddScript(marker, requestMarker(marker), fakeapi.Script(turns))
}

// waitBotReplies waits until the bot has posted n messages after message id in token
// (as user sees the conversation) and returns them.
func (e *env) waitBotReplies(t *testing.T, user, token string, after int64, n int, timeout time.Duration) []chatMessage {
	t.Helper()
	var got []chatMessage
	waitUntil(t, fmt.Sprintf("%d answer(s) of the bot in Talk", n), timeout, func() bool {
		got = botMessagesAfter(e.nc.messages(t, user, token), after)
		return len(got) >= n
	}, e.sc.logs)
	return got
}

// replyTo returns the bot's message that replies to message id, if any.
func replyTo(msgs []chatMessage, id int64) (chatMessage, bool) {
	for _, m := range msgs {
		if m.fromBot() && m.SystemMessage == "" && m.Parent != nil && m.Parent.ID == id {
			return m, true
		}
	}
	return chatMessage{}, false
}

// tasksWith counts the sidecar's tasks whose prompt carries marker.
func (e *env) tasksWith(t *testing.T, marker string) int {
	t.Helper()
	return e.sc.count(t, `SELECT count(*) FROM tasks WHERE instr(prompt, ?) > 0`, marker)
}

// taskStatus is the status of the newest task whose prompt carries marker.
func (e *env) taskStatus(t *testing.T, marker string) string {
	t.Helper()
	db := e.sc.db(t)
	defer db.Close()
	var st string
	db.QueryRow(`SELECT status FROM tasks WHERE instr(prompt, ?) > 0 ORDER BY id DESC LIMIT 1`, marker).Scan(&st)
	return st
}

// ask posts text as user in token and waits for the bot's reply to it.
func (e *env) ask(t *testing.T, user, token, text string) chatMessage {
	t.Helper()
	id, _ := e.nc.post(t, user, token, text)
	var got chatMessage
	waitUntil(t, "the bot's reply to "+strconv.Quote(text), 2*time.Minute, func() bool {
		var ok bool
		got, ok = replyTo(e.nc.messages(t, user, token), id)
		return ok
	}, e.sc.logs)
	return got
}

func testTalk(t *testing.T, e *env) {
	nc := e.nc
	nts := nc.noteToSelf(t, "alice")
	nc.enableBot(t, "alice", nts)

	t.Run("note to self", func(t *testing.T) {
		e.script("[nts-1]", fakeapi.Reply("Hello Alice, noted. [nts-1-answer]"))
		posted := time.Now()
		id, _ := nc.post(t, "alice", nts, "Please remember this [nts-1]")
		replies := e.waitBotReplies(t, "alice", nts, id, 1, 2*time.Minute)
		if !strings.Contains(replies[0].Message, "[nts-1-answer]") {
			t.Fatalf("answer: %+v", replies)
		}
		if replies[0].Parent == nil || replies[0].Parent.ID != id {
			t.Errorf("the answer is not a reply to the question: %+v", replies[0])
		}
		nc.expectEyes(t, "alice", nts, id, posted, "the addressed message")
	})

	// A group conversation of alice's with bob, the bot enabled by alice (its owner).
	group := nc.createRoom(t, "alice", roomGroup, "Team", "bob")
	nc.enableBot(t, "alice", group)

	t.Run("group: only addressed messages", func(t *testing.T) {
		plain, _ := nc.post(t, "bob", group, "Lunch at noon? [grp-plain]")
		e.script("[grp-1]", fakeapi.Reply("Bob, here is the answer. [grp-1-answer]"))
		posted := time.Now()
		addressed, _ := nc.post(t, "bob", group, "@Istota what is on today? [grp-1]")
		var answer chatMessage
		waitUntil(t, "the answer to bob's mention", 2*time.Minute, func() bool {
			var ok bool
			answer, ok = replyTo(nc.messages(t, "bob", group), addressed)
			return ok
		}, e.sc.logs)
		if !strings.Contains(answer.Message, "[grp-1-answer]") {
			t.Fatalf("answer to bob: %+v", answer)
		}
		nc.expectEyes(t, "bob", group, addressed, posted, "bob's mention")
		if r := nc.reactions(t, "bob", group, plain); botReacted(r, "👀") {
			t.Errorf("👀 on a message that did not address the bot: %v", r)
		}
		if _, ok := replyTo(nc.messages(t, "bob", group), plain); ok || e.tasksWith(t, "[grp-plain]") != 0 {
			t.Errorf("the bot worked on a message that did not address it")
		}
		// The request ran as bob, not as the conversation's owner.
		if n := e.sc.count(t, `SELECT count(*) FROM tasks WHERE user_id = 'bob' AND instr(prompt, '[grp-1]') > 0`); n != 1 {
			t.Errorf("bob's mention made %d task(s) for bob", n)
		}
	})

	t.Run("one-to-one", func(t *testing.T) {
		o2o := nc.createRoom(t, "alice", roomOneToOne, "", "bob")
		nc.enableBot(t, "alice", o2o)
		e.script("[o2o-1]", fakeapi.Reply("Here you go. [o2o-1-answer]"))
		if got := e.ask(t, "alice", o2o, "@Istota summarise please [o2o-1]"); !strings.Contains(got.Message, "[o2o-1-answer]") {
			t.Fatalf("answer in the one-to-one: %+v", got)
		}
	})

	t.Run("commands", func(t *testing.T) {
		checks := []struct{ cmd, want string }{
			{"!help", "Commands (answered at once)"},
			{"!status", "Nothing is running or queued for you."},
			{"!usage", "Today"},
			{"!memory user", "USER.md"},
			{"!cron", "CRON.md"},
			{"!check", "HEARTBEAT.md"},
			{"!stop", "Nothing to stop."},
			{"!nonsense", "Unknown command"},
		}
		before := e.api.MessageRequests()
		for _, c := range checks {
			got := e.ask(t, "alice", nts, c.cmd)
			if !strings.Contains(got.Message, c.want) {
				t.Errorf("%s answered %q, want it to contain %q", c.cmd, got.Message, c.want)
			}
		}
		if after := e.api.MessageRequests(); len(after) != len(before) {
			t.Errorf("commands called the model %d time(s)", len(after)-len(before))
		}
		// !respond: only a moderator may switch a group to every message.
		if got := e.ask(t, "bob", group, "!respond all"); !strings.Contains(got.Message, "Only moderators") {
			t.Errorf("bob (no moderator) switched the group: %q", got.Message)
		}
		if got := e.ask(t, "alice", group, "!respond all"); !strings.Contains(got.Message, "every message") {
			t.Fatalf("!respond all as the owner: %q", got.Message)
		}
		e.script("[resp-1]", fakeapi.Reply("Answering without a mention. [resp-1-answer]"))
		if got := e.ask(t, "bob", group, "no mention here [resp-1]"); !strings.Contains(got.Message, "[resp-1-answer]") {
			t.Errorf("after !respond all: %q", got.Message)
		}
		if got := e.ask(t, "alice", group, "!respond mentions"); !strings.Contains(got.Message, "only messages that mention") {
			t.Fatalf("!respond mentions: %q", got.Message)
		}
	})

	t.Run("stop", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		e.script("[stop-1]", fakeapi.Reply("This must never be posted [stop-1-answer]").Waiting(release))
		id, _ := nc.post(t, "alice", nts, "Write me a very long essay [stop-1]")
		waitUntil(t, "the task to run", 2*time.Minute, func() bool { return e.taskStatus(t, "[stop-1]") == "running" }, e.sc.logs)
		status := e.ask(t, "alice", nts, "!status")
		if !strings.Contains(status.Message, "Running:") || !strings.Contains(status.Message, "[stop-1]") {
			t.Errorf("!status while running: %q", status.Message)
		}
		if got := e.ask(t, "alice", nts, "!stop"); !strings.Contains(got.Message, "Stopped 1 running") {
			t.Fatalf("!stop: %q", got.Message)
		}
		waitUntil(t, "the task to be cancelled", time.Minute, func() bool { return e.taskStatus(t, "[stop-1]") == "cancelled" }, e.sc.logs)
		// A later question is answered; the stopped one never is.
		e.script("[stop-2]", fakeapi.Reply("Still here. [stop-2-answer]"))
		e.ask(t, "alice", nts, "Are you there? [stop-2]")
		for _, m := range nc.messages(t, "alice", nts) {
			if strings.Contains(m.Message, "[stop-1-answer]") {
				t.Fatalf("the stopped task answered: %+v", m)
			}
		}
		if _, ok := replyTo(nc.messages(t, "alice", nts), id); ok {
			t.Errorf("the stopped request got a reply")
		}
	})

	t.Run("progress and a long answer", func(t *testing.T) {
		var lines []string
		for i := 1; i <= 1500; i++ {
			lines = append(lines, fmt.Sprintf("line %04d of the long answer, with enough words to fill Talk's limit quickly.", i))
		}
		long := strings.Join(lines, "\n")
		e.script("[long-1]",
			fakeapi.ToolCall("Let me look that up first. [long-1-progress]", "Bash", map[string]any{"command": "echo looked-up", "description": "Look it up"}),
			fakeapi.Reply(long))
		id, _ := nc.post(t, "alice", nts, "Give me everything [long-1]")
		var bot []chatMessage
		waitUntil(t, "the whole long answer", 3*time.Minute, func() bool {
			bot = botMessagesAfter(nc.messages(t, "alice", nts), id)
			joined := ""
			for _, m := range bot {
				joined += m.Message
			}
			return strings.Contains(joined, "line 1500")
		}, e.sc.logs)
		if len(bot) < 4 {
			t.Fatalf("want a progress message and the answer in at least 3 parts, got %d message(s)", len(bot))
		}
		if !strings.Contains(bot[0].Message, "echo looked-up") {
			t.Errorf("the first message is not the progress message naming the tool: %q", excerpt(bot[0].Message))
		}
		re := regexp.MustCompile(`line (\d{4}) of`)
		last := 0
		for _, m := range bot[1:] {
			if len(m.Message) > 32000 {
				t.Errorf("a part is longer than Talk's limit: %d", len(m.Message))
			}
			for _, g := range re.FindAllStringSubmatch(m.Message, -1) {
				n, _ := strconv.Atoi(g[1])
				if n != last+1 {
					t.Fatalf("the answer's lines are out of order or missing: %d after %d", n, last)
				}
				last = n
			}
		}
		if last != 1500 {
			t.Errorf("the answer ended at line %d", last)
		}
	})

	t.Run("sidecar down", func(t *testing.T) { testSidecarDown(t, e, nts) })
}

func excerpt(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// testSidecarDown posts while the sidecar is gone: the sender's post still succeeds at
// once, the events wait in the app's outbox, and after the restart (and Nextcloud's
// background job) every question is answered exactly once.
func testSidecarDown(t *testing.T, e *env, token string) {
	nc := e.nc
	e.sc.kill()
	const n = 4
	ids := make([]int64, n)
	for i := range ids {
		marker := fmt.Sprintf("[down-%d]", i)
		e.script(marker, fakeapi.Reply("Answer while you waited "+marker+"-answer"))
		posted := time.Now()
		ids[i], _ = nc.post(t, "alice", token, "Question asked while the sidecar is down "+marker)
		nc.expectEyes(t, "alice", token, ids[i], posted, marker+" while the sidecar is down")
	}
	if out, _ := nc.occ("istota:self-test"); !strings.Contains(out, "✗ sidecar reachable") || !strings.Contains(out, "4 Talk event(s) waiting") {
		t.Errorf("self-test while the sidecar is down:\n%s", out)
	}
	e.sc.start(t)
	// The sidecar says hello to the app on start, and the app hands the waiting events
	// over at once: no new message and no cron run are needed.
	waitUntil(t, "every question asked while down to be answered", 2*time.Minute, func() bool {
		msgs := nc.messages(t, "alice", token)
		for _, id := range ids {
			if _, ok := replyTo(msgs, id); !ok {
				return false
			}
		}
		return true
	}, e.sc.logs)
	if !strings.Contains(e.sc.logs(), "told the Nextcloud app the sidecar is back") {
		t.Errorf("the sidecar did not log its hello to the app")
	}
	// Nothing more arrives: run Nextcloud's background jobs (the outbox job among them)
	// and ask once more, then count.
	nc.cron(t)
	e.script("[down-after]", fakeapi.Reply("Back to normal [down-after-answer]"))
	e.ask(t, "alice", token, "And now? [down-after]")
	msgs := nc.messages(t, "alice", token)
	for i, id := range ids {
		replies := 0
		for _, m := range msgs {
			if m.fromBot() && m.SystemMessage == "" && m.Parent != nil && m.Parent.ID == id {
				replies++
			}
		}
		if replies != 1 {
			t.Errorf("question %d was answered %d times", i, replies)
		}
		if got := e.tasksWith(t, fmt.Sprintf("[down-%d]", i)); got != 1 {
			t.Errorf("question %d made %d tasks", i, got)
		}
	}
}
