package approval

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
)

type fixture struct {
	db      *store.DB
	q       *queue.Queue
	ob      *outbox.Outbox
	svc     *Service
	task    queue.Task
	timeout atomic.Int64
	defs    Policies
}

func newFixture(t *testing.T, source, token string) *fixture {
	t.Helper()
	ctx := context.Background()
	db, err := testDBs.OpenPath(ctx, filepath.Join(t.TempDir(), "istota.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f := &fixture{db: db, q: queue.New(db, queue.Options{}), defs: DefaultPolicies()}
	f.ob = outbox.New(db, nil, outbox.Options{})
	f.timeout.Store(int64(time.Minute))
	f.svc = f.newService()
	task, _, err := f.q.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: source, Interactive: true, Prompt: "mail bob",
		ConversationToken: token, ReplyToMessageID: 41})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.q.Claim(ctx, "w1", false); err != nil {
		t.Fatal(err)
	}
	if err := f.q.Start(ctx, task.ID, "w1"); err != nil {
		t.Fatal(err)
	}
	f.task = task
	return f
}

func (f *fixture) newService() *Service {
	return New(f.db, f.q, f.ob, Options{
		Defaults:     func() Policies { return f.defs },
		Timeout:      func() time.Duration { return time.Duration(f.timeout.Load()) },
		Audit:        audit.New(f.db, nil, nil),
		PollInterval: 20 * time.Millisecond,
	})
}

func (f *fixture) who() Who { return Who{UserID: "alice", TaskID: f.task.ID} }

var mailBob = Action{Tier: TierExternal, Kind: "skill", Name: "email send",
	Summary: `Send an e-mail to bob@example.org, subject "Hi", 1 line: hello`, Input: []byte("--to bob@example.org")}

// checkAsync runs Check in the background and returns where its outcome arrives.
func (f *fixture) checkAsync(ctx context.Context, a Action) <-chan result {
	ch := make(chan result, 1)
	go func() {
		o, err := f.svc.Check(ctx, f.who(), a)
		ch <- result{o, err}
	}()
	return ch
}

type result struct {
	out Outcome
	err error
}

// waitPending waits until alice has n open questions and returns them.
// waitPending waits for n pending questions and then, for a moment, for the task to be
// held: the service records the question's event and holds the task just after the
// question is stored, and a test that answered before that would race it.
func (f *fixture) waitPending(t *testing.T, n int) []Request {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		got, err := f.svc.Pending(context.Background(), "alice")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == n {
			for held := time.Now().Add(2 * time.Second); n > 0 && time.Now().Before(held) && f.taskStatus(t) != queue.PendingConfirmation; {
				time.Sleep(10 * time.Millisecond)
			}
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %d pending question(s)", n)
	return nil
}

func (f *fixture) taskStatus(t *testing.T) queue.Status {
	t.Helper()
	got, err := f.q.Get(context.Background(), f.task.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got.Status
}

func receive(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("Check did not return")
	}
	return result{}
}

func TestPolicyTightening(t *testing.T) {
	admin := Policies{Read: Allow, WriteOwn: Ask, External: Ask, Admin: Deny}
	got := admin.Tighten(Policies{Read: Ask, WriteOwn: Allow, External: Deny})
	want := Policies{Read: Ask, WriteOwn: Ask, External: Deny, Admin: Deny}
	if got != want {
		t.Errorf("Tighten = %+v, want %+v", got, want)
	}
	if err := (Policies{Read: "maybe", WriteOwn: Allow, External: Ask, Admin: Deny}).Validate(); err == nil {
		t.Error("Validate accepted an unknown policy")
	}
}

func TestAllowAndDenyAnswerAtOnce(t *testing.T) {
	f := newFixture(t, queue.SourceTalk, "room0001")
	ctx := context.Background()
	out, err := f.svc.Check(ctx, f.who(), Action{Tier: TierRead, Kind: "tool", Name: "Read", Summary: "Read: notes.md"})
	if err != nil || !out.Allowed {
		t.Fatalf("read = %+v, %v; want allowed", out, err)
	}
	f.defs.External = Deny
	out, err = f.svc.Check(ctx, f.who(), mailBob)
	if err != nil || out.Allowed || !strings.Contains(out.Message, "deny") {
		t.Fatalf("denied tier = %+v, %v", out, err)
	}
	var n int
	f.db.Read.QueryRow(`SELECT COUNT(*) FROM audit_log WHERE component = 'approval' AND reason = 'policy_deny'`).Scan(&n)
	if n != 1 {
		t.Errorf("policy_deny audit rows = %d, want 1", n)
	}
}

func TestAskInTalkAndApprove(t *testing.T) {
	f := newFixture(t, queue.SourceTalk, "room0001")
	ctx := context.Background()
	done := f.checkAsync(ctx, mailBob)
	req := f.waitPending(t, 1)[0]
	if f.taskStatus(t) != queue.PendingConfirmation {
		t.Errorf("task status while asking = %s", f.taskStatus(t))
	}
	// One message in the conversation, replying to the request, naming the action.
	var text string
	var replyTo int64
	var n int
	f.db.Read.QueryRow(`SELECT COUNT(*), MAX(message), MAX(reply_to) FROM talk_outbox WHERE token = 'room0001'`).Scan(&n, &text, &replyTo)
	if n != 1 || replyTo != 41 || !strings.Contains(text, "bob@example.org") || !strings.Contains(text, "(approval #1)") {
		t.Errorf("question: %d message(s), reply_to %d: %q", n, replyTo, text)
	}
	if _, err := f.svc.Decide(ctx, req.ID, "bob", true, ViaPage); !errors.Is(err, ErrNotYours) {
		t.Errorf("bob's answer: %v, want ErrNotYours", err)
	}
	if _, err := f.svc.Decide(ctx, req.ID, "alice", true, ViaTalkReaction); err != nil {
		t.Fatal(err)
	}
	r := receive(t, done)
	if r.err != nil || !r.out.Allowed {
		t.Fatalf("outcome = %+v, %v", r.out, r.err)
	}
	if f.taskStatus(t) != queue.Running {
		t.Errorf("task status after the answer = %s", f.taskStatus(t))
	}
	if _, err := f.svc.Decide(ctx, req.ID, "alice", false, ViaPage); !errors.Is(err, ErrDecided) {
		t.Errorf("second answer: %v, want ErrDecided", err)
	}
	// The same action again asks again: a yes is good for one action only.
	again := f.checkAsync(ctx, mailBob)
	req2 := f.waitPending(t, 1)[0]
	if req2.ID == req.ID {
		t.Fatal("the used answer was reused")
	}
	if _, err := f.svc.Decide(ctx, req2.ID, "alice", false, ViaTalkReply); err != nil {
		t.Fatal(err)
	}
	if r := receive(t, again); r.err != nil || r.out.Allowed || !strings.Contains(r.out.Message, "alice refused") {
		t.Fatalf("denied outcome = %+v, %v", r.out, r.err)
	}
	var reasons []string
	rows, _ := f.db.Read.Query(`SELECT reason || ':' || allowed FROM audit_log WHERE component = 'approval' ORDER BY id`)
	for rows.Next() {
		var s string
		rows.Scan(&s)
		reasons = append(reasons, s)
	}
	rows.Close()
	if got := strings.Join(reasons, ","); got != "asked:0,approved:1,asked:0,denied:0" {
		t.Errorf("audit = %s", got)
	}
	evs, _ := f.q.Events(ctx, f.task.ID)
	if len(evs) != 4 || evs[1].Kind != EventKind || !strings.Contains(evs[1].Text, "approved by alice (talk_reaction)") {
		t.Errorf("task events = %+v", evs)
	}
}

func TestNoAnswerMeansNo(t *testing.T) {
	f := newFixture(t, queue.SourceTalk, "room0001")
	f.timeout.Store(int64(150 * time.Millisecond))
	out, err := f.svc.Check(context.Background(), f.who(), mailBob)
	if err != nil || out.Allowed || !strings.Contains(out.Message, "nobody answered") {
		t.Fatalf("outcome = %+v, %v", out, err)
	}
	r, _ := f.svc.Get(context.Background(), out.RequestID)
	if r.Status != Expired || r.DecidedVia != ViaTimeout {
		t.Errorf("request = %+v", r)
	}
	if p := f.svc.Paused(f.task.ID); p < 100*time.Millisecond {
		t.Errorf("paused %s, want the time it waited", p)
	}
}

// A restart while a question waits: the re-run of the task finds the same question
// (no second message) and the answer given meanwhile.
func TestQuestionSurvivesRestart(t *testing.T) {
	f := newFixture(t, queue.SourceTalk, "room0001")
	ctx, stop := context.WithCancel(context.Background())
	done := f.checkAsync(ctx, mailBob)
	req := f.waitPending(t, 1)[0]
	stop() // the sidecar goes down
	if r := receive(t, done); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("outcome after shutdown = %+v, %v", r.out, r.err)
	}
	restarted := f.newService()
	if _, err := restarted.Decide(context.Background(), req.ID, "alice", true, ViaPage); err != nil {
		t.Fatal(err)
	}
	out, err := restarted.Check(context.Background(), f.who(), mailBob)
	if err != nil || !out.Allowed || out.RequestID != req.ID {
		t.Fatalf("re-run outcome = %+v, %v", out, err)
	}
	var n int
	f.db.Read.QueryRow(`SELECT COUNT(*) FROM talk_outbox`).Scan(&n)
	if n != 1 {
		t.Errorf("%d questions posted, want 1", n)
	}
}

func TestUnattendedAsksInThePrivateConversation(t *testing.T) {
	f := newFixture(t, queue.SourceCron, "")
	ctx := context.Background()
	mustExec(t, f.db.Write, `INSERT INTO conversations (token, private, updated_at) VALUES ('priv0001', 1, '2026-01-01T00:00:00Z')`)
	mustExec(t, f.db.Write, `INSERT INTO conversation_messages (token, message_id, actor_type, actor_id, text, created_at)
		VALUES ('priv0001', 7, 'users', 'alice', 'hi', '2026-01-01T00:00:00Z')`)
	done := f.checkAsync(ctx, mailBob)
	req := f.waitPending(t, 1)[0]
	var text string
	f.db.Read.QueryRow(`SELECT message FROM talk_outbox WHERE token = 'priv0001'`).Scan(&text)
	if req.AskToken != "priv0001" || !strings.Contains(text, "scheduled task") {
		t.Errorf("question in %q: %q", req.AskToken, text)
	}
	if _, err := f.svc.Decide(ctx, req.ID, "alice", true, ViaPage); err != nil {
		t.Fatal(err)
	}
	if r := receive(t, done); !r.out.Allowed {
		t.Fatalf("outcome = %+v", r.out)
	}
}

func TestMatchTalkAnswers(t *testing.T) {
	f := newFixture(t, queue.SourceTalk, "room0001")
	ctx := context.Background()
	done := f.checkAsync(ctx, mailBob)
	req := f.waitPending(t, 1)[0]
	var question string
	f.db.Read.QueryRow(`SELECT message FROM talk_outbox`).Scan(&question)
	tests := []struct {
		name string
		a    TalkAnswer
		want Match
	}{
		{"reaction yes", TalkAnswer{Token: "room0001", UserID: "alice", Reaction: "👍🏽", Quoted: question},
			Match{Handled: true, RequestID: req.ID, Approve: true, Via: ViaTalkReaction}},
		{"reply no", TalkAnswer{Token: "room0001", UserID: "alice", Text: "No!", Quoted: question},
			Match{Handled: true, RequestID: req.ID, Via: ViaTalkReply}},
		{"bare yes", TalkAnswer{Token: "room0001", UserID: "alice", Text: "yes"},
			Match{Handled: true, RequestID: req.ID, Approve: true, Via: ViaTalkReply}},
		{"someone else", TalkAnswer{Token: "room0001", UserID: "bob", Reaction: "👍", Quoted: question},
			Match{Handled: true, Notice: "Only alice can answer approval #1; your answer was ignored."}},
		{"someone else's bare yes", TalkAnswer{Token: "room0001", UserID: "bob", Text: "yes"}, Match{}},
		{"other conversation", TalkAnswer{Token: "room0002", UserID: "alice", Reaction: "👍", Quoted: question}, Match{}},
		{"other emoji", TalkAnswer{Token: "room0001", UserID: "alice", Reaction: "🎉", Quoted: question}, Match{}},
		{"not an answer", TalkAnswer{Token: "room0001", UserID: "alice", Text: "what subject?", Quoted: question}, Match{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := f.db.Write.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			got, err := f.svc.MatchTx(ctx, tx, tc.a)
			if err != nil || got != tc.want {
				t.Errorf("MatchTx = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	if _, err := f.svc.Decide(ctx, req.ID, "alice", true, ViaTalkReaction); err != nil {
		t.Fatal(err)
	}
	receive(t, done)
}

func TestUsersMayOnlyTighten(t *testing.T) {
	f := newFixture(t, queue.SourceTalk, "room0001")
	ctx := context.Background()
	err := f.svc.SetUserPolicies(ctx, "alice", Policies{External: Allow})
	var pe *PolicyError
	if !errors.As(err, &pe) || pe.Fields["external"] == "" {
		t.Fatalf("loosening: %v", err)
	}
	if err := f.svc.SetUserPolicies(ctx, "alice", Policies{WriteOwn: Ask, External: Deny}); err != nil {
		t.Fatal(err)
	}
	got, err := f.svc.Effective(ctx, "alice")
	if want := (Policies{Read: Allow, WriteOwn: Ask, External: Deny, Admin: Ask}); err != nil || got != want {
		t.Errorf("Effective = %+v, %v; want %+v", got, err, want)
	}
	// The admin tightens too: the stricter still wins.
	f.defs.WriteOwn = Deny
	if got, _ := f.svc.Effective(ctx, "alice"); got.WriteOwn != Deny {
		t.Errorf("write_own = %s, want deny", got.WriteOwn)
	}
}

func TestCancelTasks(t *testing.T) {
	f := newFixture(t, queue.SourceTalk, "room0001")
	ctx := context.Background()
	done := f.checkAsync(ctx, mailBob)
	f.waitPending(t, 1)
	if err := f.svc.CancelTasks(ctx, "alice", []int64{f.task.ID}); err != nil {
		t.Fatal(err)
	}
	if r := receive(t, done); r.out.Allowed || !strings.Contains(r.out.Message, "cancelled") {
		t.Fatalf("outcome = %+v", r.out)
	}
}

func TestParseAnswer(t *testing.T) {
	for text, want := range map[string]int{"yes": 1, "Yes.": 1, "👍": 1, "ok!": 1, "no": 0, "Nein": 0, "👎": 0, "maybe": -1, "yes but": -1} {
		approve, ok := ParseAnswer(text)
		got := -1
		if ok {
			got = 0
			if approve {
				got = 1
			}
		}
		if got != want {
			t.Errorf("ParseAnswer(%q) = %d, want %d", text, got, want)
		}
	}
}

func mustExec(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.Exec(q); err != nil {
		t.Fatal(err)
	}
}
