package realnc

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// talkRoom is one entry of a user's conversation list.
type talkRoom struct {
	Token string `json:"token"`
	Type  int    `json:"type"`
	Name  string `json:"name"`
}

// rooms lists user's conversations.
func (nc *nextcloud) rooms(t testing.TB, user string) []talkRoom {
	t.Helper()
	r := nc.ocs(t, user, "GET", talkRooms, nil)
	if r.Status != 200 {
		t.Fatalf("rooms of %s: %d %s", user, r.Status, r.Raw)
	}
	var rooms []talkRoom
	r.decode(t, &rooms)
	return rooms
}

// botConversations are user's group conversations named after the bot.
func (nc *nextcloud) botConversations(t testing.TB, user string) []talkRoom {
	t.Helper()
	var out []talkRoom
	for _, r := range nc.rooms(t, user) {
		if r.Type == roomGroup && r.Name == "Istota" {
			out = append(out, r)
		}
	}
	return out
}

// botEnabled reports whether the Istota bot is enabled in token, as its moderator sees it.
func (nc *nextcloud) botEnabled(t testing.TB, user, token string) bool {
	t.Helper()
	r := nc.ocs(t, user, "GET", talkV1+"/bot/"+token, nil)
	if r.Status != 200 {
		t.Fatalf("list bots in %s as %s: %d %s", token, user, r.Status, r.Raw)
	}
	var bots []struct {
		Name  string `json:"name"`
		State int    `json:"state"`
	}
	r.decode(t, &bots)
	for _, b := range bots {
		if b.Name == "Istota" {
			return b.State == 1
		}
	}
	return false
}

const welcomeMarker = "Remind me every Monday"

// welcomes are the bot's welcome messages in token.
func (e *env) welcomes(t testing.TB, user, token string) int {
	t.Helper()
	n := 0
	for _, m := range e.nc.messages(t, user, token) {
		if m.fromBot() && strings.Contains(m.Message, welcomeMarker) {
			n++
		}
	}
	return n
}

// homeConversation waits for user's one conversation with the bot and its welcome.
func (e *env) homeConversation(t *testing.T, user string) string {
	t.Helper()
	rooms := e.nc.botConversations(t, user)
	if len(rooms) != 1 {
		t.Fatalf("%s has %d conversation(s) named Istota, want 1: %+v", user, len(rooms), e.nc.rooms(t, user))
	}
	token := rooms[0].Token
	if !e.nc.botEnabled(t, user, token) {
		t.Fatalf("the bot is not enabled in %s's conversation %s", user, token)
	}
	waitUntil(t, user+"'s welcome", time.Minute, func() bool { return e.welcomes(t, user, token) >= 1 }, e.sc.logs)
	return token
}

// testConversation: every user allowed to use the bot finds a conversation with it, with
// the bot enabled and a welcome, made by occ istota:setup, by the background job after an
// access change and for new users; never for a user outside the access list, and never
// twice.
func testConversation(t *testing.T, e *env) {
	nc := e.nc
	setup := func() string {
		t.Helper()
		out, err := nc.occ("istota:setup", "--write="+e.setup, "--sidecar-url=http://"+e.listen)
		if err != nil {
			t.Fatalf("occ istota:setup: %v\n%s", err, out)
		}
		return out
	}
	access := func(users ...string) {
		t.Helper()
		r := nc.ocs(t, "admin", "PUT", istotaAPI+"/admin/settings", map[string]any{"access": map[string]any{"users": users, "groups": []string{}}})
		if r.Status != 200 {
			t.Fatalf("access users %v: %d %s", users, r.Status, r.Raw)
		}
	}
	access("erin")
	defer access()
	nc.addUser(t, "erin")
	nc.addUser(t, "frank")

	out := setup()
	mustContain(t, "occ istota:setup", out, "Conversations with the bot:", "made", "not allowed to use the bot")
	erin := e.homeConversation(t, "erin")
	if got := nc.botConversations(t, "frank"); len(got) != 0 {
		t.Fatalf("frank (not in the access list) got a conversation: %+v", got)
	}
	if n := e.sc.count(t, `SELECT count(*) FROM user_settings WHERE user_id = 'frank' AND key = 'home_conversation'`); n != 0 {
		t.Fatal("the sidecar recorded a conversation for frank")
	}

	t.Run("made once", func(t *testing.T) {
		// alice got hers when the sidecar first started (every user was allowed then), the
		// admin is always allowed: setup and cron again change nothing for anyone.
		alice := e.homeConversation(t, "alice")
		e.homeConversation(t, "admin")
		setup()
		nc.cron(t)
		for user, token := range map[string]string{"erin": erin, "alice": alice} {
			if got := nc.botConversations(t, user); len(got) != 1 || got[0].Token != token {
				t.Errorf("%s's conversations after setup and cron ran again: %+v (want only %s)", user, got, token)
			}
			if n := e.welcomes(t, user, token); n != 1 {
				t.Errorf("%s was welcomed %d times", user, n)
			}
		}
	})

	t.Run("answers without a mention", func(t *testing.T) {
		e.script("[home-1]", fakeapi.Reply("At your service. [home-1-answer]"))
		if got := e.ask(t, "erin", erin, "What can you do? [home-1]"); !strings.Contains(got.Message, "[home-1-answer]") {
			t.Fatalf("answer in erin's conversation: %+v", got)
		}
	})

	t.Run("a refused CRON.md edit is answered here", func(t *testing.T) {
		// The agent (the real CLI in the sandbox, scripted) writes a job whose schedule the
		// checker refuses; the refusal, with the line and the field, comes to erin's
		// conversation where she asked, not to another one.
		write := `mkdir -p /workspace/istota/config && printf '%s\n' '` + "```toml" + `' '[[jobs]]' 'name = "bins"' 'schedule = "every monday"' 'prompt = "Remind me to take out the bins"' '` + "```" + `' > /workspace/istota/config/CRON.md && echo written`
		e.script("[cron-edit]", fakeapi.Bash("Adding the job.", write), fakeapi.Reply("Done: the bins job is in CRON.md. [cron-edit-answer]"))
		before := len(nc.messages(t, "erin", erin))
		if got := e.ask(t, "erin", erin, "Remind me every Monday to take out the bins [cron-edit]"); !strings.Contains(got.Message, "[cron-edit-answer]") {
			t.Fatalf("answer: %+v", got)
		}
		guided := false
		for _, r := range e.api.MessageRequests() {
			if requestMarker("[cron-edit]")(&r) && strings.Contains(r.UserText(), "### CRON.md (guide v") {
				guided = true
			}
		}
		if !guided {
			t.Error("the CRON.md guide was not in the agent's prompt")
		}
		var notice string
		waitUntil(t, "the refusal of the CRON.md edit in erin's conversation", 2*time.Minute, func() bool {
			msgs := nc.messages(t, "erin", erin)
			for _, m := range msgs[min(before, len(msgs)):] {
				if m.fromBot() && strings.Contains(m.Message, "CRON.md made here") {
					notice = m.Message
					return true
				}
			}
			return false
		}, e.sc.logs)
		mustContain(t, "the refusal", notice, "line 4", "schedule")
	})

	t.Run("let in later", func(t *testing.T) {
		access("erin", "frank") // queues the job; Nextcloud's cron runs it
		// cron.php stops at the first job it already ran in this round, so a job queued
		// in the same second as the last check of an earlier one waits for the next run.
		waitUntil(t, "frank's conversation after the access change", time.Minute, func() bool {
			nc.cron(t)
			return len(nc.botConversations(t, "frank")) > 0
		}, e.sc.logs)
		frank := e.homeConversation(t, "frank")
		if frank == erin {
			t.Fatal("frank and erin share a conversation")
		}
		var members []struct {
			ActorID string `json:"actorId"`
		}
		r := nc.ocs(t, "frank", "GET", fmt.Sprintf("%s/%s/participants", talkRooms, frank), nil)
		r.decode(t, &members)
		if len(members) != 1 || members[0].ActorID != "frank" {
			t.Fatalf("frank's conversation has members %+v, want frank alone", members)
		}
	})
}
