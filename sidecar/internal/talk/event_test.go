package talk

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// captured101 is the webhook body observed on Nextcloud 31.0.2 / Talk 21.1.0, byte for
// byte (reference §10.1).
const captured101 = `{"type":"Create","actor":{"type":"Person","id":"users\/alice","name":"Alice","talkParticipantType":"1"},"object":{"type":"Note","id":"3","name":"message","content":"{\"message\":\"Hello {mention-user1}, this is a message for the bot 3d873220\",\"parameters\":{\"mention-user1\":{\"type\":\"user\",\"id\":\"bob\",\"name\":\"Bob\",\"mention-id\":\"bob\"}}}","mediaType":"text\/markdown"},"target":{"type":"Collection","id":"ok8wuc9k","name":"Bot acceptance 01:57:48"}}`

func TestParseEventCapturedWebhook(t *testing.T) {
	ev, err := ParseEvent([]byte(captured101))
	if err != nil {
		t.Fatal(err)
	}
	want := Event{
		Type: TypeCreate, ActorType: "users", ActorID: "alice", ActorName: "Alice", ParticipantType: 1,
		MessageID: 3, ObjectName: "message",
		Message:    "Hello @Bob, this is a message for the bot 3d873220",
		RawMessage: "Hello {mention-user1}, this is a message for the bot 3d873220",
		Parameters: map[string]json.RawMessage{
			"mention-user1": json.RawMessage(`{"type":"user","id":"bob","name":"Bob","mention-id":"bob"}`),
		},
		Token: "ok8wuc9k", RoomName: "Bot acceptance 01:57:48",
	}
	if !reflect.DeepEqual(ev, want) {
		t.Fatalf("got  %+v\nwant %+v", ev, want)
	}
}

func TestParseEventShapes(t *testing.T) {
	// The app forwards getMessage() re-encoded by PHP: same structure, no \/ escaping
	// needed, parameters [] when empty (reference §12).
	appCreate := `{"type":"Create","actor":{"type":"Person","id":"users/alice","name":"Alice","talkParticipantType":"1"},"object":{"type":"Note","id":"84","name":"message","content":"{\"message\":\"@Istota hello\",\"parameters\":[]}","mediaType":"text/markdown"},"target":{"type":"Collection","id":"abcd1234","name":"Alice"}}`

	reply := `{"type":"Create","actor":{"type":"Person","id":"users/alice","name":"Alice","talkParticipantType":"3"},` +
		`"object":{"type":"Note","id":"90","name":"message","content":"{\"message\":\"and this?\",\"parameters\":[]}","mediaType":"text/markdown",` +
		`"inReplyTo":{"type":"Note","actor":{"type":"Person","id":"bots/bot-0123abcd","name":"Istota"},` +
		`"object":{"type":"Note","id":"88","name":"message","content":"{\"message\":\"Hi {mention-user1}\",\"parameters\":{\"mention-user1\":{\"type\":\"user\",\"id\":\"alice\",\"name\":\"Alice Liddell\",\"mention-id\":\"alice\"}}}","mediaType":"text/markdown"}}},` +
		`"target":{"type":"Collection","id":"abcd1234","name":"Alice"}}`

	federated := `{"type":"Create","actor":{"type":"Person","id":"federated_users/carol@cloud.example/sub","name":"Carol","talkParticipantType":"3"},"object":{"type":"Note","id":"7","name":"message","content":"{\"message\":\"hi\",\"parameters\":[]}","mediaType":"text/markdown"},"target":{"type":"Collection","id":"room7777","name":"Fed"}}`

	guest := `{"type":"Create","actor":{"type":"Person","id":"guests/5f2b1c","name":"","talkParticipantType":"4"},"object":{"type":"Note","id":8,"name":"message","content":"{\"message\":\"{mention-call1} and {mention-group1}, see {mention-guest1}\",\"parameters\":{\"mention-call1\":{\"type\":\"call\",\"id\":\"room7777\",\"name\":\"Team room\",\"call-type\":\"group\",\"mention-id\":\"all\"},\"mention-group1\":{\"type\":\"user-group\",\"id\":\"devs\",\"name\":\"Developers\",\"mention-id\":\"group/devs\"},\"mention-guest1\":{\"type\":\"guest\",\"id\":\"guest/abc\",\"name\":\"Visitor\",\"mention-id\":\"guest/abc\"}}}","mediaType":"text/markdown"},"target":{"type":"Collection","id":"room7777","name":"Team room"}}`

	fileShare := `{"type":"Activity","actor":{"type":"Person","id":"users/alice","name":"Alice"},"object":{"type":"Note","id":"95","name":"","content":"{\"message\":\"{file}\",\"parameters\":{\"actor\":{\"type\":\"user\",\"id\":\"alice\",\"name\":\"Alice\"},\"file\":{\"type\":\"file\",\"id\":\"312\",\"name\":\"report.pdf\",\"size\":\"2048\",\"path\":\"report.pdf\",\"link\":\"https://cloud.example/s/xyz\",\"mimetype\":\"application/pdf\",\"permissions\":\"1\"}}}","mediaType":"text/markdown"},"target":{"type":"Collection","id":"abcd1234","name":"Alice"}}`

	callStarted := `{"type":"Activity","actor":{"type":"Person","id":"users/alice","name":"Alice"},"object":{"type":"Note","id":"96","name":"call_started","content":"{\"message\":\"{actor} started a call\",\"parameters\":{\"actor\":{\"type\":\"user\",\"id\":\"alice\",\"name\":\"Alice\"}}}","mediaType":"text/markdown"},"target":{"type":"Collection","id":"abcd1234","name":"Alice"}}`

	like := `{"type":"Like","actor":{"type":"Person","id":"users/bob","name":"Bob","talkParticipantType":"3"},"object":{"type":"Note","id":"1567","name":"","content":"{\"message\":\"hello\",\"parameters\":[]}","mediaType":"text/markdown"},"target":{"type":"Collection","id":"n3xtc10ud","name":"Room name"},"content":"\ud83d\udc4d"}`

	undo := `{"type":"Undo","actor":{"type":"Person","id":"users/bob","name":"Bob","talkParticipantType":"3"},"object":{"type":"Like","actor":{"type":"Person","id":"users/bob","name":"Bob","talkParticipantType":"3"},"object":{"type":"Note","id":"1567","name":"","content":"{\"message\":\"hello\",\"parameters\":[]}","mediaType":"text/markdown"},"target":{"type":"Collection","id":"n3xtc10ud","name":"Room name"},"content":"\ud83d\udc4d"},"target":{"type":"Collection","id":"n3xtc10ud","name":"Room name"}}`

	join := `{"type":"Join","actor":{"type":"Application","id":"bots\/bot-9f86d081884c7d659a2feaa0c55ad015a3bf4f1b","name":"Istota"},"object":{"type":"Collection","id":"ok8wuc9k","name":"Bot acceptance"}}`
	leave := strings.Replace(join, `"Join"`, `"Leave"`, 1)

	cases := []struct {
		name string
		in   string
		want Event
	}{
		{"app create with empty parameters", appCreate, Event{
			Type: TypeCreate, ActorType: "users", ActorID: "alice", ActorName: "Alice", ParticipantType: 1,
			MessageID: 84, ObjectName: "message", Message: "@Istota hello", RawMessage: "@Istota hello",
			Parameters: map[string]json.RawMessage{}, Token: "abcd1234", RoomName: "Alice",
		}},
		{"reply to a bot message", reply, Event{
			Type: TypeCreate, ActorType: "users", ActorID: "alice", ActorName: "Alice", ParticipantType: 3,
			MessageID: 90, ObjectName: "message", Message: "and this?", RawMessage: "and this?",
			Parameters: map[string]json.RawMessage{}, Token: "abcd1234", RoomName: "Alice",
			InReplyTo: &Parent{MessageID: 88, ActorType: "bots", ActorID: "bot-0123abcd", ActorName: "Istota", Message: "Hi @Alice Liddell"},
		}},
		{"federated actor split on the first slash", federated, Event{
			Type: TypeCreate, ActorType: "federated_users", ActorID: "carol@cloud.example/sub", ActorName: "Carol", ParticipantType: 3,
			MessageID: 7, ObjectName: "message", Message: "hi", RawMessage: "hi",
			Parameters: map[string]json.RawMessage{}, Token: "room7777", RoomName: "Fed",
		}},
		{"guest with numeric id and group, call and guest mentions", guest, Event{
			Type: TypeCreate, ActorType: "guests", ActorID: "5f2b1c", ParticipantType: 4,
			MessageID: 8, ObjectName: "message", Message: "@all and @Developers, see @Visitor",
			RawMessage: "{mention-call1} and {mention-group1}, see {mention-guest1}",
			Token:      "room7777", RoomName: "Team room",
		}},
		{"file share activity", fileShare, Event{
			Type: TypeActivity, ActorType: "users", ActorID: "alice", ActorName: "Alice",
			MessageID: 95, Message: "[file: report.pdf]", RawMessage: "{file}",
			Token: "abcd1234", RoomName: "Alice",
		}},
		{"system message", callStarted, Event{
			Type: TypeActivity, ActorType: "users", ActorID: "alice", ActorName: "Alice",
			MessageID: 96, ObjectName: "call_started", Message: "Alice started a call", RawMessage: "{actor} started a call",
			Token: "abcd1234", RoomName: "Alice",
		}},
		{"like", like, Event{
			Type: TypeLike, ActorType: "users", ActorID: "bob", ActorName: "Bob", ParticipantType: 3,
			MessageID: 1567, Message: "hello", RawMessage: "hello", Parameters: map[string]json.RawMessage{},
			Token: "n3xtc10ud", RoomName: "Room name", Reaction: "👍",
		}},
		{"undo wraps the like", undo, Event{
			Type: TypeUndo, ActorType: "users", ActorID: "bob", ActorName: "Bob", ParticipantType: 3,
			MessageID: 1567, Message: "hello", RawMessage: "hello", Parameters: map[string]json.RawMessage{},
			Token: "n3xtc10ud", RoomName: "Room name", Reaction: "👍",
		}},
		{"join keeps the room in object", join, Event{
			Type: TypeJoin, ActorType: "bots", ActorID: "bot-9f86d081884c7d659a2feaa0c55ad015a3bf4f1b", ActorName: "Istota",
			ObjectName: "Bot acceptance", Parameters: map[string]json.RawMessage{}, Token: "ok8wuc9k", RoomName: "Bot acceptance",
		}},
		{"leave", leave, Event{
			Type: TypeLeave, ActorType: "bots", ActorID: "bot-9f86d081884c7d659a2feaa0c55ad015a3bf4f1b", ActorName: "Istota",
			ObjectName: "Bot acceptance", Parameters: map[string]json.RawMessage{}, Token: "ok8wuc9k", RoomName: "Bot acceptance",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseEvent([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			// Parameters are compared by key; their raw bytes are checked elsewhere.
			if len(c.want.Parameters) == 0 && len(got.Parameters) > 0 {
				c.want.Parameters = got.Parameters
			}
			if got.Parameters == nil {
				t.Fatal("Parameters is nil, want an empty map")
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestParseEventUndoFallsBackToInnerActorAndTarget(t *testing.T) {
	in := `{"type":"Undo","object":{"type":"Like","actor":{"type":"Person","id":"users/bob","name":"Bob"},"object":{"type":"Note","id":"5","name":"","content":"{\"message\":\"x\",\"parameters\":[]}"},"target":{"type":"Collection","id":"room1234","name":"R"},"content":"🎉"}}`
	ev, err := ParseEvent([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if ev.ActorID != "bob" || ev.Token != "room1234" || ev.Reaction != "🎉" || ev.MessageID != 5 {
		t.Fatalf("got %+v", ev)
	}
}

func TestParseEventErrors(t *testing.T) {
	base := map[string]any{
		"type":   "Create",
		"actor":  map[string]any{"type": "Person", "id": "users/alice", "name": "Alice", "talkParticipantType": "1"},
		"object": map[string]any{"type": "Note", "id": "3", "name": "message", "content": `{"message":"hi","parameters":[]}`},
		"target": map[string]any{"type": "Collection", "id": "ok8wuc9k", "name": "Room"},
	}
	mutate := func(f func(m map[string]any)) string {
		b, _ := json.Marshal(base)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		f(m)
		out, _ := json.Marshal(m)
		return string(out)
	}
	obj := func(m map[string]any, key string) map[string]any { return m[key].(map[string]any) }

	cases := []struct {
		name, in, field string
	}{
		{"empty input", "", "empty input"},
		{"not an object", `[1,2]`, "not a JSON object"},
		{"broken JSON", `{"type":`, "talk event"},
		{"missing type", mutate(func(m map[string]any) { delete(m, "type") }), "field type"},
		{"missing actor", mutate(func(m map[string]any) { delete(m, "actor") }), "field actor is missing"},
		{"actor id without type", mutate(func(m map[string]any) { obj(m, "actor")["id"] = "alice" }), "field actor.id"},
		{"actor id with empty id part", mutate(func(m map[string]any) { obj(m, "actor")["id"] = "users/" }), "field actor.id"},
		{"participant type not numeric", mutate(func(m map[string]any) { obj(m, "actor")["talkParticipantType"] = "owner" }), "field actor.talkParticipantType"},
		{"missing object", mutate(func(m map[string]any) { delete(m, "object") }), "field object is missing"},
		{"object id not numeric", mutate(func(m map[string]any) { obj(m, "object")["id"] = "abc" }), "field object.id"},
		{"object id zero", mutate(func(m map[string]any) { obj(m, "object")["id"] = "0" }), "field object.id"},
		{"content missing", mutate(func(m map[string]any) { delete(obj(m, "object"), "content") }), "field object.content is missing"},
		{"content not JSON", mutate(func(m map[string]any) { obj(m, "object")["content"] = "hello" }), "field object.content"},
		{"content without message", mutate(func(m map[string]any) { obj(m, "object")["content"] = `{"parameters":[]}` }), "field object.content.message"},
		{"parameters a non-empty list", mutate(func(m map[string]any) { obj(m, "object")["content"] = `{"message":"x","parameters":[1]}` }), "field object.content.parameters"},
		{"inReplyTo without actor", mutate(func(m map[string]any) {
			obj(m, "object")["inReplyTo"] = map[string]any{"type": "Note", "object": map[string]any{"id": "1", "content": `{"message":"x","parameters":[]}`}}
		}), "field object.inReplyTo.actor"},
		{"inReplyTo with bad content", mutate(func(m map[string]any) {
			obj(m, "object")["inReplyTo"] = map[string]any{"type": "Note", "actor": map[string]any{"id": "users/bob"}, "object": map[string]any{"id": "1", "content": "nope"}}
		}), "field object.inReplyTo.object.content"},
		{"missing target", mutate(func(m map[string]any) { delete(m, "target") }), "field target is missing"},
		{"empty token", mutate(func(m map[string]any) { obj(m, "target")["id"] = "" }), "field target.id is empty"},
		{"like without emoji", mutate(func(m map[string]any) { m["type"] = "Like" }), "field content"},
		{"undo without object", `{"type":"Undo","actor":{"id":"users/bob"},"target":{"id":"room1234"}}`, "field object is missing"},
		{"undo of something else", `{"type":"Undo","actor":{"id":"users/bob"},"object":{"type":"Create"},"target":{"id":"room1234"}}`, "field object.type"},
		{"join without room", `{"type":"Join","actor":{"type":"Application","id":"bots/bot-1","name":"Istota"}}`, "field object is missing"},
		{"name of wrong type", mutate(func(m map[string]any) { obj(m, "actor")["name"] = []int{1} }), "field actor.name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseEvent([]byte(c.in))
			if err == nil {
				t.Fatalf("no error for %s", c.in)
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Fatalf("error %q does not mention %q", err, c.field)
			}
		})
	}
}

func TestParseEventUnsupportedType(t *testing.T) {
	_, err := ParseEvent([]byte(`{"type":"Update","actor":{"id":"users/a"}}`))
	if !errors.Is(err, ErrUnsupportedType) {
		t.Fatalf("got %v, want ErrUnsupportedType", err)
	}
}

func TestRenderMessage(t *testing.T) {
	params := map[string]json.RawMessage{
		"mention-user1":      json.RawMessage(`{"type":"user","id":"bob","name":"Bob Builder","mention-id":"bob"}`),
		"mention-federated1": json.RawMessage(`{"type":"user","id":"carol","name":"Carol","server":"https://other.example","mention-id":"federated_user/carol@other.example"}`),
		"mention-email1":     json.RawMessage(`{"type":"email","id":"x","name":"","mention-id":"email/x"}`),
		"object":             json.RawMessage(`{"type":"talk-poll","id":"4","name":"Lunch?"}`),
		"weird":              json.RawMessage(`"just a string"`),
		"actor":              json.RawMessage(`{"type":"user","id":"alice","name":"Alice"}`),
	}
	cases := []struct{ in, want string }{
		{"hi {mention-user1}!", "hi @Bob Builder!"},
		{"{mention-federated1}", "@Carol"},
		{"{mention-email1}", "@email/x"},
		{"poll: {object}", "poll: [talk-poll: Lunch?]"},
		{"{unknown} {} { mention-user1} {weird}", "{unknown} {} { mention-user1} {weird}"},
		{"{{mention-user1}}", "{@Bob Builder}"},
		{"unclosed {mention-user1", "unclosed {mention-user1"},
		{"{actor} joined", "Alice joined"},
		{"no placeholders", "no placeholders"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			if got := RenderMessage(c.in, params); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

func FuzzParseEvent(f *testing.F) {
	f.Add([]byte(captured101))
	f.Add([]byte(`{"type":"Undo","object":{"type":"Like","object":{"id":"1","content":"{}"}}}`))
	f.Add([]byte(`{"type":"Join","actor":{"id":"bots/x"},"object":{"id":"tok"}}`))
	f.Add([]byte(`{"type":"Create","actor":{"id":"users/a","talkParticipantType":99999999999999999999},"object":{"id":"1","content":"{\"message\":\"{a}{b\",\"parameters\":{\"a\":null}}"},"target":{"id":"t"}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		ev, err := ParseEvent(raw)
		if err != nil {
			return
		}
		if ev.Type == "" || ev.Token == "" || ev.ActorType == "" || ev.ActorID == "" || ev.Parameters == nil {
			t.Fatalf("accepted an event without required fields: %+v", ev)
		}
	})
}
