package executor

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/istota/istota/sidecar/internal/brain"
	"github.com/istota/istota/sidecar/internal/queue"
)

// txMailer records mailed answers in the completing transaction, as the mail outbox
// does; fail makes it refuse, which must roll the completion back.
type txMailer struct {
	mu   sync.Mutex
	sent []string
	fail bool
}

func (m *txMailer) QueueReplyTx(ctx context.Context, tx *sql.Tx, t queue.Task, body string) error {
	if m.fail {
		return errors.New("mail outbox unavailable")
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO kv_store (user_id, namespace, key, value, updated_at) VALUES (?, 'mail', ?, ?, '')`, t.UserID, t.Email.To, body); err != nil {
		return err
	}
	m.mu.Lock()
	m.sent = append(m.sent, t.Email.To+": "+body)
	m.mu.Unlock()
	return nil
}

func (e *env) scheduledTask(t *testing.T, nt queue.NewTask) queue.Task {
	t.Helper()
	ctx := context.Background()
	if _, _, err := e.q.Enqueue(ctx, nt); err != nil {
		t.Fatal(err)
	}
	claimed, err := e.q.Claim(ctx, "w1", false)
	if err != nil {
		t.Fatal(err)
	}
	return claimed
}

func (e *env) setAdmin(t *testing.T, uid string, admin bool) {
	t.Helper()
	if _, err := e.db.Write.Exec(`INSERT INTO users (id, is_admin, updated_at) VALUES (?, ?, '') ON CONFLICT (id) DO UPDATE SET is_admin = excluded.is_admin`, uid, admin); err != nil {
		t.Fatal(err)
	}
}

func TestSilentRunDeliversNothing(t *testing.T) {
	for _, tc := range []struct {
		answer    string
		delivered bool
	}{
		{NothingToReport, false},
		{"  " + NothingToReport + "\n", false},
		{"Your disk is 95% full.", true},
	} {
		b := &scriptedBrain{result: brain.Result{OK: true, Text: tc.answer}}
		m := &txMailer{}
		e := newEnv(t, b, func(o *Options) { o.Mailer = m })
		tk := e.scheduledTask(t, queue.NewTask{UserID: "alice", Source: queue.SourceCron, Prompt: "check", ConversationToken: "room0001",
			Delivery: queue.Delivery{SilentUnlessAction: true, Email: &queue.EmailReply{To: "alice@example.org", Subject: "x"}}})
		e.ex.Handle(context.Background(), tk)
		got, _ := e.q.Get(context.Background(), tk.ID)
		if got.Status != queue.Completed {
			t.Fatalf("%q: task %+v", tc.answer, got)
		}
		if n := len(e.outbox(t)); (n == 1) != tc.delivered || len(m.sent) != n {
			t.Errorf("%q: %d Talk message(s), %d mail(s); delivered = %v", tc.answer, n, len(m.sent), tc.delivered)
		}
	}
}

func TestMailedAnswerIsPartOfTheCompletion(t *testing.T) {
	b := &scriptedBrain{result: brain.Result{OK: true, Text: "Here is your digest."}}
	m := &txMailer{}
	e := newEnv(t, b, func(o *Options) { o.Mailer = m })
	tk := e.scheduledTask(t, queue.NewTask{UserID: "alice", Source: queue.SourceEmail, Prompt: "digest",
		Delivery: queue.Delivery{Email: &queue.EmailReply{To: "alice@example.org", Subject: "Re: digest", InReplyTo: "<a@b>"}}})
	e.ex.Handle(context.Background(), tk)
	if len(m.sent) != 1 || m.sent[0] != "alice@example.org: Here is your digest." {
		t.Fatalf("mailed %q", m.sent)
	}

	// A mail outbox that refuses rolls the completion back: the task is not recorded
	// as done without its answer queued.
	m2 := &txMailer{fail: true}
	e2 := newEnv(t, &scriptedBrain{result: brain.Result{OK: true, Text: "x"}}, func(o *Options) { o.Mailer = m2 })
	tk2 := e2.scheduledTask(t, queue.NewTask{UserID: "alice", Source: queue.SourceEmail, Prompt: "digest",
		Delivery: queue.Delivery{Email: &queue.EmailReply{To: "alice@example.org", Subject: "x"}}})
	e2.ex.Handle(context.Background(), tk2)
	if got, _ := e2.q.Get(context.Background(), tk2.ID); got.Status == queue.Completed {
		t.Fatalf("completed without its mailed answer: %+v", got)
	}
}

// commandBrain stands in for brain/command: it records that it ran.
type commandBrain struct{ ran []string }

func (c *commandBrain) Run(_ context.Context, req brain.Request, _ brain.Launcher, _ func(brain.Event)) (brain.Result, error) {
	c.ran = append(c.ran, req.Prompt)
	return brain.Result{OK: true, Text: "ran " + req.Prompt}, nil
}

func TestCommandJobsRunForAdminsOnly(t *testing.T) {
	agent := &scriptedBrain{result: brain.Result{OK: true, Text: "agent"}}
	shell := &commandBrain{}
	e := newEnv(t, agent, func(o *Options) { o.Commands = shell })
	e.setAdmin(t, "root", true)
	tk := e.scheduledTask(t, queue.NewTask{UserID: "root", Source: queue.SourceCron, Prompt: "Scheduled command df", ConversationToken: "room0001",
		DedupeKey: "a", Delivery: queue.Delivery{Command: "df -h"}})
	e.ex.Handle(context.Background(), tk)
	if len(shell.ran) != 1 || shell.ran[0] != "df -h" || agent.got.Prompt != "" {
		t.Fatalf("commands run %q; agent prompt %q", shell.ran, agent.got.Prompt)
	}
	if rows := e.outbox(t); len(rows) != 1 || rows[0].Message != "ran df -h" {
		t.Fatalf("outbox %+v", rows)
	}

	// No longer an admin when the run starts: refused for good, once, without retries.
	e.setAdmin(t, "root", false)
	tk = e.scheduledTask(t, queue.NewTask{UserID: "root", Source: queue.SourceCron, Prompt: "Scheduled command df", ConversationToken: "room0001",
		DedupeKey: "b", MaxAttempts: 4, Delivery: queue.Delivery{Command: "df -h"}})
	e.ex.Handle(context.Background(), tk)
	got, _ := e.q.Get(context.Background(), tk.ID)
	if got.Status != queue.Failed || len(shell.ran) != 1 || !strings.Contains(got.Error, "only administrators") {
		t.Fatalf("task %+v, commands %q", got, shell.ran)
	}
	rows := e.outbox(t)
	if last := rows[len(rows)-1]; !strings.Contains(last.Message, "only administrators may schedule commands") {
		t.Fatalf("user told %q", last.Message)
	}
}

type fixedBudget string

func (b fixedBudget) Refusal(context.Context, string, string) (string, error) { return string(b), nil }

// A user over budget gets no model run from any source, is told why once, and the
// task is not retried the same day.
func TestOverBudgetRunsNothing(t *testing.T) {
	agent := &scriptedBrain{result: brain.Result{OK: true, Text: "should not run"}}
	e := newEnv(t, agent, func(o *Options) { o.Budget = fixedBudget("You have used your daily budget of 1000 model tokens.") })
	tk := e.scheduledTask(t, queue.NewTask{UserID: "alice", Source: queue.SourceCron, Prompt: "digest", ConversationToken: "room0001", MaxAttempts: 4})
	e.ex.Handle(context.Background(), tk)
	got, _ := e.q.Get(context.Background(), tk.ID)
	if got.Status != queue.Failed || agent.got.Prompt != "" {
		t.Fatalf("task %+v ran the agent: %q", got, agent.got.Prompt)
	}
	rows := e.outbox(t)
	if len(rows) != 1 || !strings.Contains(rows[0].Message, "daily budget of 1000") {
		t.Fatalf("outbox %+v", rows)
	}

	// Under budget, it runs.
	e2 := newEnv(t, &scriptedBrain{result: brain.Result{OK: true, Text: "ran"}}, func(o *Options) { o.Budget = fixedBudget("") })
	tk2 := e2.scheduledTask(t, queue.NewTask{UserID: "alice", Source: queue.SourceCron, Prompt: "digest", ConversationToken: "room0001"})
	e2.ex.Handle(context.Background(), tk2)
	if got, _ := e2.q.Get(context.Background(), tk2.ID); got.Status != queue.Completed {
		t.Fatalf("under budget: %+v", got)
	}
}
