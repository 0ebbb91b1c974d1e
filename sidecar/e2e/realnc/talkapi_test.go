package realnc

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Talk's OCS API as a user's client uses it (spreed 21).
const (
	talkRooms = "/ocs/v2.php/apps/spreed/api/v4/room"
	talkV1    = "/ocs/v2.php/apps/spreed/api/v1"
)

// Talk conversation types.
const (
	roomOneToOne = 1
	roomGroup    = 2
)

// chatMessage is one message of GET /chat/{token}.
type chatMessage struct {
	ID               int64          `json:"id"`
	ActorType        string         `json:"actorType"`
	ActorID          string         `json:"actorId"`
	ActorDisplayName string         `json:"actorDisplayName"`
	Message          string         `json:"message"`
	SystemMessage    string         `json:"systemMessage"`
	Reactions        map[string]int `json:"reactions"`
	Parent           *struct {
		ID int64 `json:"id"`
	} `json:"parent"`
}

func (m chatMessage) fromBot() bool { return m.ActorType == "bots" }

// noteToSelf is user's note-to-self conversation.
func (nc *nextcloud) noteToSelf(t testing.TB, user string) string {
	t.Helper()
	r := nc.ocs(t, user, "GET", talkRooms+"/note-to-self", nil)
	if r.Status != 200 {
		t.Fatalf("note-to-self of %s: %d %s", user, r.Status, r.Raw)
	}
	var room struct {
		Token string `json:"token"`
	}
	r.decode(t, &room)
	return room.Token
}

// createRoom makes a conversation as owner; for one-to-one, invite is the other user.
func (nc *nextcloud) createRoom(t testing.TB, owner string, typ int, name string, invite ...string) string {
	t.Helper()
	body := map[string]any{"roomType": typ, "roomName": name}
	if typ == roomOneToOne {
		body["invite"] = invite[0]
	}
	r := nc.ocs(t, owner, "POST", talkRooms, body)
	if r.Status != 200 && r.Status != 201 {
		t.Fatalf("create room as %s: %d %s", owner, r.Status, r.Raw)
	}
	var room struct {
		Token string `json:"token"`
	}
	r.decode(t, &room)
	if typ != roomOneToOne {
		for _, u := range invite {
			a := nc.ocs(t, owner, "POST", talkRooms+"/"+room.Token+"/participants", map[string]any{"newParticipant": u, "source": "users"})
			if a.Status != 200 {
				t.Fatalf("add %s to %s: %d %s", u, room.Token, a.Status, a.Raw)
			}
		}
	}
	return room.Token
}

// botID finds the Istota bot in the list a conversation's moderator sees.
func (nc *nextcloud) botID(t testing.TB, user, token string) int {
	t.Helper()
	r := nc.ocs(t, user, "GET", talkV1+"/bot/"+token, nil)
	if r.Status != 200 {
		t.Fatalf("list bots in %s as %s: %d %s", token, user, r.Status, r.Raw)
	}
	var bots []struct {
		ID   int    `json:"id"`
		Name string `json:"name"`
	}
	r.decode(t, &bots)
	for _, b := range bots {
		if b.Name == "Istota" {
			return b.ID
		}
	}
	t.Fatalf("no Istota bot offered in %s: %s", token, r.Data)
	return 0
}

// enableBot switches the bot on in a conversation as its moderator would.
func (nc *nextcloud) enableBot(t testing.TB, user, token string) {
	t.Helper()
	id := nc.botID(t, user, token)
	r := nc.ocs(t, user, "POST", fmt.Sprintf("%s/bot/%s/%d", talkV1, token, id), nil)
	if r.Status != 200 && r.Status != 201 {
		t.Fatalf("enable bot in %s as %s: %d %s", token, user, r.Status, r.Raw)
	}
}

// post sends a chat message as user and returns its id and how long the POST took.
func (nc *nextcloud) post(t testing.TB, user, token, text string) (int64, time.Duration) {
	t.Helper()
	r := nc.ocs(t, user, "POST", talkV1+"/chat/"+token, map[string]any{"message": text})
	if r.Status != 201 {
		t.Fatalf("post in %s as %s: %d %s", token, user, r.Status, r.Raw)
	}
	var m chatMessage
	r.decode(t, &m)
	return m.ID, r.Took
}

// messages returns the newest messages of a conversation, oldest first.
func (nc *nextcloud) messages(t testing.TB, user, token string) []chatMessage {
	t.Helper()
	r := nc.ocs(t, user, "GET", talkV1+"/chat/"+token+"?lookIntoFuture=0&limit=200&setReadMarker=0&includeLastKnown=0", nil)
	if r.Status == 304 {
		return nil
	}
	if r.Status != 200 {
		t.Fatalf("read %s as %s: %d %s", token, user, r.Status, r.Raw)
	}
	var msgs []chatMessage
	r.decode(t, &msgs)
	// Newest first from the API.
	for i, j := 0, len(msgs)-1; i < j; i, j = i+1, j-1 {
		msgs[i], msgs[j] = msgs[j], msgs[i]
	}
	return msgs
}

// botMessagesAfter are the bot's chat messages that came after message id.
func botMessagesAfter(msgs []chatMessage, after int64) []chatMessage {
	var out []chatMessage
	for _, m := range msgs {
		if m.ID > after && m.fromBot() && m.SystemMessage == "" {
			out = append(out, m)
		}
	}
	return out
}

// reactions returns who reacted with what on a message.
func (nc *nextcloud) reactions(t testing.TB, user, token string, id int64) map[string][]string {
	t.Helper()
	r := nc.ocs(t, user, "GET", talkV1+"/reaction/"+token+"/"+strconv.FormatInt(id, 10), nil)
	if r.Status == 404 || len(r.Data) == 0 || string(r.Data) == "[]" {
		return map[string][]string{}
	}
	if r.Status != 200 {
		t.Fatalf("reactions of %d as %s: %d %s", id, user, r.Status, r.Raw)
	}
	var byEmoji map[string][]struct {
		ActorType string `json:"actorType"`
		ActorID   string `json:"actorId"`
	}
	if err := json.Unmarshal(r.Data, &byEmoji); err != nil {
		t.Fatalf("reactions %s: %v", r.Data, err)
	}
	out := map[string][]string{}
	for emoji, actors := range byEmoji {
		for _, a := range actors {
			out[emoji] = append(out[emoji], a.ActorType+"/"+a.ActorID)
		}
	}
	return out
}

// botReacted reports whether the bot put emoji on a message.
func botReacted(r map[string][]string, emoji string) bool {
	for _, a := range r[emoji] {
		if strings.HasPrefix(a, "bots/") {
			return true
		}
	}
	return false
}

// shareIntoRoom shares one of user's files into a conversation, as the Talk client's
// "share from Files" does.
func (nc *nextcloud) shareIntoRoom(t testing.TB, user, path, token string) {
	t.Helper()
	r := nc.ocs(t, user, "POST", sharesAPI, map[string]any{"path": path, "shareType": 10, "shareWith": token})
	if r.Status != 200 {
		t.Fatalf("share %s into %s as %s: %d %s", path, token, user, r.Status, r.Raw)
	}
}

// expectEyes fails t unless the bot's 👀 is on message id, with what Nextcloud logged that
// explains its absence. Talk's BotService catches and logs a failed write of a bot's
// reaction, and Nextcloud's comments manager logs (and drops) a failed insert into its
// reactions table, so the sender's POST succeeds either way; when the test server's
// SQLite database was locked for that write, the app did ask for the reaction and the
// miss is logged, not failed.
// Only what was logged from since on (just before the message was posted) counts.
func (nc *nextcloud) expectEyes(t testing.TB, user, token string, id int64, since time.Time, what string) {
	t.Helper()
	r := nc.reactions(t, user, token, id)
	if botReacted(r, "👀") {
		return
	}
	why, locked := nc.reactionErrors(since)
	if locked {
		t.Logf("no 👀 on %s: the test server's SQLite database was locked when Talk stored it: %v%s", what, r, why)
		return
	}
	t.Errorf("no 👀 on %s: %v%s", what, r, why)
}

// reactionErrors is what nextcloud.log says that can explain a missing 👀 (errors about a
// bot's reaction or the comments' reactions table, and the app's own warnings), and
// whether one of them is SQLite's "database is locked"; entries before since are left out.
func (nc *nextcloud) reactionErrors(since time.Time) (string, bool) {
	data, err := os.ReadFile(filepath.Join(nc.root, "data", "nextcloud.log"))
	if err != nil {
		return "\n(nextcloud.log: " + err.Error() + ")", false
	}
	var b strings.Builder
	locked := false
	for _, line := range strings.Split(string(data), "\n") {
		var entry struct {
			Time    string `json:"time"`
			App     string `json:"app"`
			Level   int    `json:"level"`
			Message string `json:"message"`
		}
		if json.Unmarshal([]byte(line), &entry) != nil {
			continue
		}
		// Nextcloud logs whole seconds: keep the second the message was posted in.
		if at, err := time.Parse(time.RFC3339, entry.Time); err == nil && at.Before(since.Truncate(time.Second)) {
			continue
		}
		aboutReaction := strings.Contains(entry.Message, "react as a bot") || entry.App == "core_comments"
		if !aboutReaction && !(entry.App == "istota" && entry.Level >= 2) {
			continue
		}
		if aboutReaction && strings.Contains(entry.Message, "database is locked") {
			locked = true
		}
		fmt.Fprintf(&b, "\nnextcloud.log %s [%s]: %.300s", entry.Time, entry.App, entry.Message)
	}
	if b.Len() == 0 {
		return "\n(nextcloud.log has no error about a reaction and no warning of the app)", false
	}
	return b.String(), locked
}
