package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/talk"
	"github.com/istota/istota/sidecar/internal/usage"
)

type fixture struct {
	t      *testing.T
	db     *store.DB
	q      *queue.Queue
	in     *Intake
	cancel *recordingCanceller
	// now is the intake's and the queue's clock; tests run on one goroutine.
	now time.Time
}

type recordingCanceller struct {
	mu  sync.Mutex
	ids []int64
}

func (r *recordingCanceller) Cancel(id int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, id)
	return true
}

// nopSender stands in for Talk: these tests only look at what is queued in the outbox,
// whose delivery is never started here.
type nopSender struct{}

func (nopSender) SendMessage(context.Context, string, string, talk.SendOptions) error { return nil }

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db, err := testDBs.OpenPath(context.Background(), filepath.Join(t.TempDir(), "i.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f := &fixture{t: t, db: db, now: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	clock := func() time.Time { return f.now }
	f.q = queue.New(db, queue.Options{Clock: clock})
	ob := outbox.New(db, nopSender{}, outbox.Options{})
	f.cancel = &recordingCanceller{}
	f.in = New(db, f.q, ob, Options{BotName: "Istota", Canceller: f.cancel, Clock: clock})
	return f
}

// event builds a BotInvokeEvent message as the app forwards it (reference §12).
func event(typ, token string, id int64, uid, text string, participantType int) json.RawMessage {
	content, _ := json.Marshal(map[string]any{"message": text, "parameters": []any{}})
	actor := map[string]any{"type": "Person", "id": "users/" + uid, "name": strings.ToUpper(uid[:1]) + uid[1:]}
	if participantType > 0 {
		actor["talkParticipantType"] = fmt.Sprint(participantType)
	}
	raw, _ := json.Marshal(map[string]any{
		"type":   typ,
		"actor":  actor,
		"object": map[string]any{"type": "Note", "id": fmt.Sprint(id), "name": "message", "content": string(content), "mediaType": "text/markdown"},
		"target": map[string]any{"type": "Collection", "id": token, "name": "Room " + token},
	})
	return raw
}

func sender(uid string) *Sender {
	return &Sender{UID: uid, DisplayName: uid, Timezone: "Europe/Berlin", Language: "de", Allowed: true}
}

func intp(v int) *int { return &v }

func (f *fixture) handle(p Payload) Answer {
	f.t.Helper()
	ans, err := f.in.Handle(context.Background(), p)
	if err != nil {
		f.t.Fatalf("handle: %v", err)
	}
	return ans
}

func (f *fixture) count(table string) int {
	f.t.Helper()
	var n int
	if err := f.db.Read.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *fixture) outboxTexts() []string {
	f.t.Helper()
	rows, err := f.db.Read.Query(`SELECT message FROM talk_outbox ORDER BY id`)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		rows.Scan(&s)
		out = append(out, s)
	}
	return out
}

func private(token string) Conversation {
	return Conversation{Token: token, Name: "Note to self", Type: intp(6), UserCount: intp(1), Private: true}
}

func group(token string) Conversation {
	return Conversation{Token: token, Name: "Team", Type: intp(2), UserCount: intp(4)}
}

func TestPrivateConversationAnswersEverythingOnce(t *testing.T) {
	f := newFixture(t)
	p := Payload{BotURL: "nextcloudapp://istota", Event: event("Create", "abcd1234", 7, "alice", "what is on today?", 1), Sender: sender("alice"), Conversation: private("abcd1234")}
	ans := f.handle(p)
	if ans.Status != StatusAccepted || !ans.Addressed || ans.TaskID == 0 {
		t.Fatalf("first delivery: %+v", ans)
	}
	again := f.handle(p)
	if again.Status != StatusDuplicate || !again.Addressed {
		t.Fatalf("redelivery: %+v", again)
	}
	if n := f.count("tasks"); n != 1 {
		t.Fatalf("tasks = %d, want 1", n)
	}
	task, err := f.q.Get(context.Background(), ans.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if task.UserID != "alice" || task.ConversationToken != "abcd1234" || task.ReplyToMessageID != 7 || task.Prompt != "what is on today?" || !task.Interactive {
		t.Errorf("task = %+v", task)
	}
	var tz string
	f.db.Read.QueryRow(`SELECT timezone FROM users WHERE id = 'alice'`).Scan(&tz)
	if tz != "Europe/Berlin" {
		t.Errorf("user profile not recorded: tz=%q", tz)
	}
}

func TestGroupConversationAnswersOnlyMentionsAndCommands(t *testing.T) {
	cases := []struct {
		text      string
		addressed bool
	}{
		{"lunch anyone?", false},
		{"@Istota what is the capital of France?", true},
		{"hey @istota, you there", true},
		{"email me at bob@Istota.example", false},
		{"@Istotabot is someone else", false},
		{"!help", true},
		{"  !status", true},
	}
	f := newFixture(t)
	for i, c := range cases {
		t.Run(c.text, func(t *testing.T) {
			ans := f.handle(Payload{Event: event("Create", "team0001", int64(100+i), "bob", c.text, 3), Sender: sender("bob"), Conversation: group("team0001")})
			if ans.Addressed != c.addressed {
				t.Fatalf("addressed = %v, want %v (%+v)", ans.Addressed, c.addressed, ans)
			}
		})
	}
	if n := f.count("conversation_messages"); n != len(cases) {
		t.Fatalf("every message must be logged: %d of %d", n, len(cases))
	}
}

func TestRespondModeNeedsModerator(t *testing.T) {
	f := newFixture(t)
	conv := group("team0002")
	ans := f.handle(Payload{Event: event("Create", "team0002", 1, "bob", "!respond all", 3), Sender: sender("bob"), Conversation: conv})
	if ans.Command != "respond" {
		t.Fatalf("%+v", ans)
	}
	if ans := f.handle(Payload{Event: event("Create", "team0002", 2, "bob", "plain message", 3), Sender: sender("bob"), Conversation: conv}); ans.Addressed {
		t.Fatal("a non-moderator switched the conversation to respond all")
	}
	f.handle(Payload{Event: event("Create", "team0002", 3, "carol", "!respond all", 2), Sender: sender("carol"), Conversation: conv})
	if ans := f.handle(Payload{Event: event("Create", "team0002", 4, "bob", "plain message", 3), Sender: sender("bob"), Conversation: conv}); !ans.Addressed || ans.TaskID == 0 {
		t.Fatalf("respond all not in effect: %+v", ans)
	}
	f.handle(Payload{Event: event("Create", "team0002", 5, "carol", "!respond mentions", 1), Sender: sender("carol"), Conversation: conv})
	if ans := f.handle(Payload{Event: event("Create", "team0002", 6, "bob", "plain again", 3), Sender: sender("bob"), Conversation: conv}); ans.Addressed {
		t.Fatal("respond mentions not in effect")
	}
	texts := f.outboxTexts()
	if len(texts) != 3 || !strings.Contains(texts[0], "Only moderators") || !strings.Contains(texts[1], "every message") {
		t.Fatalf("command answers = %q", texts)
	}
}

func TestCommandsAnsweredAtOnceWithoutTask(t *testing.T) {
	f := newFixture(t)
	conv := private("priv0001")
	f.handle(Payload{Event: event("Create", "priv0001", 1, "alice", "!help", 0), Sender: sender("alice"), Conversation: conv})
	f.handle(Payload{Event: event("Create", "priv0001", 2, "alice", "!status", 0), Sender: sender("alice"), Conversation: conv})
	f.handle(Payload{Event: event("Create", "priv0001", 3, "alice", "!frobnicate", 0), Sender: sender("alice"), Conversation: conv})
	if n := f.count("tasks"); n != 0 {
		t.Fatalf("commands created %d tasks", n)
	}
	texts := f.outboxTexts()
	if len(texts) != 3 {
		t.Fatalf("answers = %q", texts)
	}
	for i, want := range []string{"!stop", "Nothing is running", "Unknown command `!frobnicate`"} {
		if !strings.Contains(texts[i], want) {
			t.Errorf("answer %d = %q, want it to contain %q", i, texts[i], want)
		}
	}
	// A redelivered command is not answered twice.
	f.handle(Payload{Event: event("Create", "priv0001", 1, "alice", "!help", 0), Sender: sender("alice"), Conversation: conv})
	if n := len(f.outboxTexts()); n != 3 {
		t.Fatalf("redelivered command answered again: %d answers", n)
	}
}

func TestStopCancelsRunningAndQueued(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	conv := private("priv0002")
	first := f.handle(Payload{Event: event("Create", "priv0002", 1, "alice", "long job", 0), Sender: sender("alice"), Conversation: conv})
	second := f.handle(Payload{Event: event("Create", "priv0002", 2, "alice", "next job", 0), Sender: sender("alice"), Conversation: conv})
	claimed, err := f.q.Claim(ctx, "w1", false)
	if err != nil || claimed.ID != first.TaskID {
		t.Fatalf("claim: %+v %v", claimed, err)
	}
	if err := f.q.Start(ctx, claimed.ID, "w1"); err != nil {
		t.Fatal(err)
	}
	status := f.handle(Payload{Event: event("Create", "priv0002", 3, "alice", "!status", 0), Sender: sender("alice"), Conversation: conv})
	if status.Command != "status" {
		t.Fatal(status)
	}
	f.handle(Payload{Event: event("Create", "priv0002", 4, "alice", "!stop", 0), Sender: sender("alice"), Conversation: conv})
	if len(f.cancel.ids) != 1 || f.cancel.ids[0] != first.TaskID {
		t.Fatalf("running task not stopped: %v", f.cancel.ids)
	}
	for _, id := range []int64{first.TaskID, second.TaskID} {
		task, _ := f.q.Get(ctx, id)
		if task.Status != queue.Cancelled {
			t.Errorf("task %d is %s", id, task.Status)
		}
	}
	texts := f.outboxTexts()
	if !strings.Contains(texts[0], "Running:") || !strings.Contains(texts[0], "long job") || !strings.Contains(texts[0], "Queued (1)") {
		t.Errorf("status = %q", texts[0])
	}
	if !strings.Contains(texts[1], "Stopped 1 running and dropped 1 queued") {
		t.Errorf("stop = %q", texts[1])
	}
	if err := f.q.Complete(ctx, first.TaskID, "w1", queue.Outcome{Result: "late"}, nil); !errors.Is(err, queue.ErrCancelled) {
		t.Errorf("a stopped task completed: %v", err)
	}
}

// !status tells a task that waits to run again after a failed attempt from one that is
// new, with the retry time in the user's zone and the attempt it will be, and counts the
// attempt of a running retry.
func TestStatusShowsRetries(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	q := f.q // its clock says 10:00 UTC, 11:00 in Berlin
	conv := private("priv0003")
	first := f.handle(Payload{Event: event("Create", "priv0003", 1, "alice", "held back", 0), Sender: sender("alice"), Conversation: conv})
	second := f.handle(Payload{Event: event("Create", "priv0003", 2, "alice", "fresh one", 0), Sender: sender("alice"), Conversation: conv})
	run := func(want int64) {
		t.Helper()
		claimed, err := q.Claim(ctx, "w1", false)
		if err != nil || claimed.ID != want {
			t.Fatalf("claim: %+v %v, want task %d", claimed, err, want)
		}
		if err := q.Start(ctx, claimed.ID, "w1"); err != nil {
			t.Fatal(err)
		}
	}
	status := func(id int64) string {
		t.Helper()
		f.handle(Payload{Event: event("Create", "priv0003", id, "alice", "!status", 0), Sender: sender("alice"), Conversation: conv})
		texts := f.outboxTexts()
		return texts[len(texts)-1]
	}
	run(first.TaskID)
	if _, _, err := q.Fail(ctx, first.TaskID, "w1", "model API error 529 (api_error): Overloaded", true, nil); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("Queued (2):\n- #%d held back (waiting to retry at 11:01, attempt 2 of 4)\n- #%d fresh one", first.TaskID, second.TaskID)
	if got := status(3); got != want {
		t.Errorf("!status while waiting =\n%s\nwant\n%s", got, want)
	}
	run(second.TaskID)
	if err := q.Complete(ctx, second.TaskID, "w1", queue.Outcome{Result: "done"}, nil); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(time.Minute)
	run(first.TaskID)
	f.now = f.now.Add(5 * time.Second)
	want = fmt.Sprintf("Running:\n- #%d held back (running for 5s, attempt 2 of 4)", first.TaskID)
	if got := status(4); got != want {
		t.Errorf("!status of the running retry =\n%s\nwant\n%s", got, want)
	}
}

func TestGuestsAndDisallowedUsersGetNoTask(t *testing.T) {
	f := newFixture(t)
	conv := group("pub00001")
	guest := f.handle(Payload{Event: event("Create", "pub00001", 1, "x", "@Istota hi", 4), Sender: nil, Conversation: conv})
	denied := sender("mallory")
	denied.Allowed = false
	refused := f.handle(Payload{Event: event("Create", "pub00001", 2, "mallory", "@Istota hi", 3), Sender: denied, Conversation: conv})
	if guest.Addressed || refused.Addressed || f.count("tasks") != 0 {
		t.Fatalf("guest %+v, denied %+v, tasks %d", guest, refused, f.count("tasks"))
	}
	texts := f.outboxTexts()
	if len(texts) != 1 || !strings.Contains(texts[0], "not allowed") {
		t.Fatalf("the disallowed user must be told once: %q", texts)
	}
}

func TestInvalidEventsLeaveNoTrace(t *testing.T) {
	f := newFixture(t)
	good := event("Create", "abcd1234", 1, "alice", "hi", 1)
	cases := []struct {
		name string
		p    Payload
	}{
		{"no event", Payload{Sender: sender("alice"), Conversation: private("abcd1234")}},
		{"event null", Payload{Event: json.RawMessage("null"), Sender: sender("alice")}},
		{"not an object", Payload{Event: json.RawMessage(`"Create"`), Sender: sender("alice")}},
		{"bad token", Payload{Event: event("Create", "../../etc", 1, "alice", "hi", 1), Sender: sender("alice")}},
		{"message id zero", Payload{Event: event("Create", "abcd1234", 0, "alice", "hi", 1), Sender: sender("alice")}},
		{"token mismatch", Payload{Event: good, Sender: sender("alice"), Conversation: private("zzzz9999")}},
		{"empty uid", Payload{Event: good, Sender: &Sender{Allowed: true}}},
		{"other bot", Payload{BotURL: "nextcloudapp://otherapp", Event: good, Sender: sender("alice")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := f.in.Handle(context.Background(), c.p)
			var inv *InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("want InvalidError, got %v", err)
			}
		})
	}
	for _, table := range []string{"tasks", "conversation_messages", "conversations", "users", "talk_outbox"} {
		if n := f.count(table); n != 0 {
			t.Errorf("%s has %d rows after invalid input", table, n)
		}
	}
}

func TestJoinRecordsConversationAndLikeIsIgnored(t *testing.T) {
	f := newFixture(t)
	join, _ := json.Marshal(map[string]any{"type": "Join",
		"actor":  map[string]any{"type": "Application", "id": "bots/bot-123", "name": "Istota"},
		"object": map[string]any{"type": "Collection", "id": "room0001", "name": "Planning"}})
	if ans := f.handle(Payload{Event: join}); ans.Status != StatusIgnored {
		t.Fatalf("join: %+v", ans)
	}
	if n := f.count("conversations"); n != 1 {
		t.Fatalf("conversation not recorded on Join")
	}
	like, _ := json.Marshal(map[string]any{"type": "Like",
		"actor":   map[string]any{"type": "Person", "id": "users/alice", "name": "Alice"},
		"object":  map[string]any{"type": "Note", "id": "5", "name": "", "content": `{"message":"x","parameters":[]}`, "mediaType": "text/markdown"},
		"target":  map[string]any{"type": "Collection", "id": "room0001", "name": "Planning"},
		"content": "👀"})
	if ans := f.handle(Payload{Event: like, Sender: sender("alice")}); ans.Status != StatusIgnored || ans.Addressed {
		t.Fatalf("like: %+v", ans)
	}
	if n := f.count("tasks") + f.count("talk_outbox"); n != 0 {
		t.Fatal("a reaction caused work")
	}
}

func fileShare(token string, id int64, uid, caption string) json.RawMessage {
	msg := "{file}"
	if caption != "" {
		msg = caption
	}
	content, _ := json.Marshal(map[string]any{"message": msg, "parameters": map[string]any{
		"actor": map[string]any{"type": "user", "id": uid, "name": uid},
		"file":  map[string]any{"type": "file", "id": "881", "name": "report.pdf", "size": "52311", "path": "report.pdf", "mimetype": "application/pdf"},
	}})
	raw, _ := json.Marshal(map[string]any{
		"type":   "Activity",
		"actor":  map[string]any{"type": "Person", "id": "users/" + uid, "name": uid},
		"object": map[string]any{"type": "Note", "id": fmt.Sprint(id), "name": "", "content": string(content), "mediaType": "text/markdown"},
		"target": map[string]any{"type": "Collection", "id": token, "name": "Room"},
	})
	return raw
}

func TestSharedFilesReachTheTask(t *testing.T) {
	f := newFixture(t)
	att := []Attachment{{Name: "report.pdf", Path: "inbox/report.pdf", MimeType: "application/pdf", Size: 52311}}
	ans := f.handle(Payload{Event: fileShare("priv0003", 10, "alice", ""), Sender: sender("alice"), Conversation: private("priv0003"), Attachments: att})
	if ans.Status != StatusAccepted || ans.TaskID == 0 {
		t.Fatalf("a file in the private conversation: %+v", ans)
	}
	task, _ := f.q.Get(context.Background(), ans.TaskID)
	if !strings.Contains(task.Prompt, "inbox/report.pdf") || !strings.Contains(task.Prompt, "[file: report.pdf]") {
		t.Fatalf("prompt = %q", task.Prompt)
	}
	// In a group, only a caption naming the bot makes it a request.
	if ans := f.handle(Payload{Event: fileShare("team0003", 11, "bob", ""), Sender: sender("bob"), Conversation: group("team0003"), Attachments: att}); ans.Addressed {
		t.Fatalf("an uncaptioned file in a group: %+v", ans)
	}
	if ans := f.handle(Payload{Event: fileShare("team0003", 12, "bob", "@Istota summarise this"), Sender: sender("bob"), Conversation: group("team0003"), Attachments: att}); !ans.Addressed || ans.TaskID == 0 {
		t.Fatalf("a captioned file in a group: %+v", ans)
	}
	for _, bad := range []string{"../../etc/passwd", "inbox/../x", "/inbox/a", "shared/a", "inbox//a"} {
		_, err := f.in.Handle(context.Background(), Payload{Event: fileShare("priv0003", 13, "alice", ""), Sender: sender("alice"), Conversation: private("priv0003"),
			Attachments: []Attachment{{Name: "x", Path: bad}}})
		var inv *InvalidError
		if !errors.As(err, &inv) {
			t.Errorf("attachment path %q accepted: %v", bad, err)
		}
	}
}

type fakeMemory struct{}

func (fakeMemory) UserMD(uid string) (string, error)      { return "# " + uid + "\n- likes tea", nil }
func (fakeMemory) ChannelMD(token string) (string, error) { return "About " + token, nil }
func (fakeMemory) Facts(_ context.Context, uid string) ([]string, error) {
	return []string{uid + " lives_in Berlin"}, nil
}
func (fakeMemory) Search(_ context.Context, uid, q string) ([]string, error) {
	return []string{"2026-11-20: " + uid + " asked about " + q}, nil
}

func TestMemoryCommands(t *testing.T) {
	f := newFixture(t)
	f.in.opts.Memory = fakeMemory{}
	priv, grp := private("priv0009"), group("team0009")
	cases := []struct {
		conv Conversation
		text string
		want string
	}{
		{priv, "!memory user", "likes tea"},
		{priv, "!memory facts", "alice lives_in Berlin"},
		{priv, "!memory search flights", "asked about flights"},
		{priv, "!memory search", "Use `!memory search <words>`"},
		{priv, "!memory", "Use `!memory user`"},
		{grp, "!memory user", "only show what I remember about you in our private conversation"},
		{grp, "!memory facts", "private conversation"},
		{grp, "!memory channel", "About team0009"},
	}
	for i, c := range cases {
		f.handle(Payload{Event: event("Create", c.conv.Token, int64(50+i), "alice", c.text, 3), Sender: sender("alice"), Conversation: c.conv})
	}
	texts := f.outboxTexts()
	if len(texts) != len(cases) {
		t.Fatalf("answers = %q", texts)
	}
	for i, c := range cases {
		if !strings.Contains(texts[i], c.want) {
			t.Errorf("%s in %s: %q, want %q", c.text, c.conv.Token, texts[i], c.want)
		}
		if !c.conv.Private && strings.Contains(texts[i], "likes tea") {
			t.Errorf("personal memory shown in a group: %q", texts[i])
		}
	}
}

type fakeUsage struct{ sinces []time.Time }

func (f *fakeUsage) Since(_ context.Context, uid string, since time.Time) (usage.Totals, error) {
	f.sinces = append(f.sinces, since)
	return usage.Totals{InputTokens: int64(100 * len(f.sinces)), OutputTokens: 7, Requests: 2, CostUSD: 0.125}, nil
}

func TestUsageCommandUsesTheUsersCalendar(t *testing.T) {
	f := newFixture(t) // the clock says Sunday 2026-11-22 10:00 UTC = 11:00 in Berlin
	fu := &fakeUsage{}
	f.in.opts.Usage = fu
	f.handle(Payload{Event: event("Create", "priv0010", 1, "alice", "!usage", 0), Sender: sender("alice"), Conversation: private("priv0010")})
	berlin, _ := time.LoadLocation("Europe/Berlin")
	want := []time.Time{
		time.Date(2026, 11, 22, 0, 0, 0, 0, berlin), // today
		time.Date(2026, 11, 16, 0, 0, 0, 0, berlin), // Monday
		time.Date(2026, 11, 1, 0, 0, 0, 0, berlin),  // the 1st
	}
	if len(fu.sinces) != 3 {
		t.Fatalf("sums = %v", fu.sinces)
	}
	for i := range want {
		if !fu.sinces[i].Equal(want[i]) {
			t.Errorf("period %d starts %s, want %s", i, fu.sinces[i], want[i])
		}
	}
	text := f.outboxTexts()[0]
	for _, w := range []string{"Today | 100 | 7 | 2 | $0.12", "This week | 200", "This month | 300"} {
		if !strings.Contains(text, w) {
			t.Errorf("!usage = %q, want %q", text, w)
		}
	}
}
