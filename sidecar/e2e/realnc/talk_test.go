package realnc

import (
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
	waitUntil(t, "the bot's answer in Talk", timeout, func() bool {
		got = botMessagesAfter(e.nc.messages(t, user, token), after)
		return len(got) >= n
	}, e.sc.logs)
	return got
}

func testTalk(t *testing.T, e *env) {
	nc := e.nc
	t.Run("note to self", func(t *testing.T) {
		token := nc.noteToSelf(t, "alice")
		nc.enableBot(t, "alice", token)
		e.script("[nts-1]", fakeapi.Reply("Hello Alice, noted. [nts-1-answer]"))
		id, _ := nc.post(t, "alice", token, "Please remember this [nts-1]")
		replies := e.waitBotReplies(t, "alice", token, id, 1, 2*time.Minute)
		if !strings.Contains(replies[0].Message, "[nts-1-answer]") {
			t.Fatalf("answer: %+v", replies)
		}
		if replies[0].Parent == nil || replies[0].Parent.ID != id {
			t.Errorf("the answer is not a reply to the question: %+v", replies[0])
		}
		if r := nc.reactions(t, "alice", token, id); !botReacted(r, "👀") {
			t.Errorf("no 👀 on the addressed message: %v", r)
		}
	})
}
