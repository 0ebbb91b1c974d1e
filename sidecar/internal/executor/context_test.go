package executor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain"
	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/queue"
)

// A long conversation keeps its recent messages and, in a third of the room, the older
// ones that bear on the request; the agent's past answers carry what it did for them.
func TestConversationContextNarrowsAndShowsPastActions(t *testing.T) {
	b := &scriptedBrain{result: brain.Result{OK: true, Text: "Done."}}
	e := newEnv(t, b, func(o *Options) { o.ContextMessages = 9 })
	ctx := context.Background()
	base := e.clock.Now().Add(-3 * time.Hour)
	// An earlier task that booked the kayak, with its tool calls.
	past, _, err := e.q.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: "talk", Interactive: true, Prompt: "book the kayak", ConversationToken: "room0001"})
	if err != nil {
		t.Fatal(err)
	}
	e.q.AddEvent(ctx, past.ID, queue.EventTool, "Bash: istota skill browse https://kayak.example/booking")
	e.q.AddEvent(ctx, past.ID, queue.EventTool, "Write: notes/kayak.md")
	e.q.AddEvent(ctx, past.ID, "progress", "thinking")
	if _, err := e.q.Claim(ctx, "w1", false); err != nil {
		t.Fatal(err)
	}
	e.q.Start(ctx, past.ID, "w1")
	if err := e.q.Complete(ctx, past.ID, "w1", queue.Outcome{Result: "Booked."}, nil); err != nil {
		t.Fatal(err)
	}
	record := func(id int64, who, text string, fromBot bool, at time.Time) {
		t.Helper()
		m := convlog.Message{Token: "room0001", ID: id, ActorType: "users", ActorID: who, ActorName: who, Text: text, At: at, FromBot: fromBot}
		if _, err := convlog.Record(ctx, e.db.Write, m); err != nil {
			t.Fatal(err)
		}
	}
	record(1, "alice", "Please book the kayak for Saturday at the river club", false, base)
	if err := convlog.RecordBotReply(ctx, e.db.Write, "room0001", past.ID, "Istota", "Booked the kayak, confirmation in notes/kayak.md", 1, base.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		record(int64(10+i), "bob", fmt.Sprintf("chatter number %d about lunch plans", i), false, base.Add(time.Duration(10+i)*time.Minute))
	}
	tk := e.talkTask(t, "Did the kayak booking go through?")
	e.ex.Handle(ctx, tk)

	p := b.got.Prompt
	for _, want := range []string{
		"Please book the kayak for Saturday",
		"Booked the kayak, confirmation in notes/kayak.md",
		"(what you did then: Bash: istota skill browse https://kayak.example/booking; Write: notes/kayak.md)",
		"picked as relevant to the request",
		"chatter number 29 about lunch plans",
	} {
		if !strings.Contains(p, want) {
			t.Errorf("the prompt lacks %q:\n%s", want, p)
		}
	}
	if strings.Contains(p, "chatter number 5 about") || strings.Contains(p, "thinking") {
		t.Errorf("the prompt keeps irrelevant old messages or non-tool events:\n%s", p)
	}
}

func TestNarrowKeepsShortConversationsWhole(t *testing.T) {
	msgs := []convlog.Message{{ID: 1, Text: "a"}, {ID: 2, Text: "b"}}
	got := narrow(msgs, "anything", 5)
	if len(got) != 2 || got[0].earlier || got[1].earlier {
		t.Fatalf("narrow = %+v", got)
	}
	// Over the limit with nothing relevant: only the recent ones.
	var many []convlog.Message
	for i := range 12 {
		many = append(many, convlog.Message{ID: int64(i + 1), Text: fmt.Sprintf("message %d", i)})
	}
	got = narrow(many, "kayak", 6)
	if len(got) != 4 || got[0].msg.ID != 9 || got[3].msg.ID != 12 {
		t.Fatalf("narrow without relevant messages = %+v", got)
	}
}
