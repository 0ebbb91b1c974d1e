package executor

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain"
	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/talk"
	"github.com/istota/istota/sidecar/internal/workspace"
)

// scriptedBrain plays back events and a result; the real CLI is exercised by the
// brain/claude and e2e tests, this one pins what the executor does with outcomes.
type scriptedBrain struct {
	events []brain.Event
	result brain.Result
	err    error
	block  bool // wait for ctx to end, like a hung agent
	got    brain.Request
	act    func() // what the agent does to the files, before its result
}

func (b *scriptedBrain) Run(ctx context.Context, req brain.Request, l brain.Launcher, on func(brain.Event)) (brain.Result, error) {
	b.got = req
	if _, err := l.Command(ctx, []string{"agent"}, nil, strings.NewReader(req.Prompt)); err != nil {
		return brain.Result{}, err
	}
	for _, e := range b.events {
		on(e)
	}
	if b.act != nil {
		b.act()
	}
	if b.block {
		<-ctx.Done()
		return brain.Result{}, ctx.Err()
	}
	return b.result, b.err
}

type recordingLaunchers struct {
	mu     sync.Mutex
	ws     []Workspace
	closed int
}

func (r *recordingLaunchers) ForTask(_ context.Context, _ queue.Task, ws Workspace) (brain.Launcher, func() error, error) {
	r.mu.Lock()
	r.ws = append(r.ws, ws)
	r.mu.Unlock()
	return launcherFunc(func(ctx context.Context, argv []string, _ map[string]string, _ io.Reader) (*exec.Cmd, error) {
			return exec.CommandContext(ctx, "true"), nil
		}), func() error {
			r.mu.Lock()
			r.closed++
			r.mu.Unlock()
			return nil
		}, nil
}

// orderedFiles is a Files that logs its calls to events.
type orderedFiles struct{ events *eventLog }

func (f orderedFiles) Prepare(_ context.Context, uid string, _ time.Time) (workspace.Report, error) {
	f.events.add("pull " + uid)
	return workspace.Report{}, nil
}
func (f orderedFiles) Finish(_ context.Context, uid string) (workspace.Report, error) {
	f.events.add("push " + uid)
	return workspace.Report{}, nil
}
func (f orderedFiles) PrepareChannel(_ context.Context, token string, _ time.Time) (workspace.Report, error) {
	f.events.add("pull " + token)
	return workspace.Report{}, nil
}
func (f orderedFiles) FinishChannel(_ context.Context, token string) (workspace.Report, error) {
	f.events.add("push " + token)
	return workspace.Report{}, nil
}

// orderedLaunchers logs when a task's sandbox starts, runs a command and closes.
type orderedLaunchers struct{ events *eventLog }

func (l orderedLaunchers) ForTask(context.Context, queue.Task, Workspace) (brain.Launcher, func() error, error) {
	l.events.add("sandbox start")
	return launcherFunc(func(ctx context.Context, _ []string, _ map[string]string, _ io.Reader) (*exec.Cmd, error) {
			l.events.add("command")
			return exec.CommandContext(ctx, "true"), nil
		}), func() error {
			l.events.add("sandbox close")
			return nil
		}, nil
}

type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (e *eventLog) add(s string) {
	e.mu.Lock()
	e.events = append(e.events, s)
	e.mu.Unlock()
}

func (e *eventLog) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.events)
}

type launcherFunc func(context.Context, []string, map[string]string, io.Reader) (*exec.Cmd, error)

func (f launcherFunc) Command(ctx context.Context, argv []string, env map[string]string, stdin io.Reader) (*exec.Cmd, error) {
	return f(ctx, argv, env, stdin)
}

type nopSender struct{}

func (nopSender) SendMessage(context.Context, string, string, talk.SendOptions) error { return nil }

type env struct {
	db    *store.DB
	q     *queue.Queue
	ex    *Executor
	b     *scriptedBrain
	l     *recordingLaunchers
	clock *fakeClock
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newEnv(t *testing.T, b *scriptedBrain, mod func(*Options)) *env {
	t.Helper()
	dir := t.TempDir()
	db, err := testDBs.OpenPath(context.Background(), filepath.Join(dir, "e.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clock := &fakeClock{now: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	q := queue.New(db, queue.Options{Clock: clock.Now})
	l := &recordingLaunchers{}
	opts := Options{BotName: "Istota", DataDir: filepath.Join(dir, "data"), Owner: "w1", Clock: clock.Now,
		ProgressInterval: 8 * time.Second, MaxProgressMessages: 5, ContextMessages: 10, TaskTimeout: time.Minute}
	if mod != nil {
		mod(&opts)
	}
	ex := New(db, q, outbox.New(db, nopSender{}, outbox.Options{Clock: clock.Now}), b, l, opts)
	return &env{db: db, q: q, ex: ex, b: b, l: l, clock: clock}
}

func (e *env) talkTask(t *testing.T, text string) queue.Task {
	t.Helper()
	ctx := context.Background()
	if _, err := convlog.Record(ctx, e.db.Write, convlog.Message{Token: "room0001", ID: 5, ActorType: "users", ActorID: "alice", ActorName: "Alice", Text: text, At: e.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	tk, _, err := e.q.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: "talk", Interactive: true, Prompt: text, ConversationToken: "room0001", ReplyToMessageID: 5, DedupeKey: "talk:room0001:5"})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := e.q.Claim(ctx, "w1", false)
	if err != nil || claimed.ID != tk.ID {
		t.Fatalf("claim: %+v %v", claimed, err)
	}
	return claimed
}

type row struct {
	Kind, Message string
	ReplyTo       int64
}

func (e *env) outbox(t *testing.T) []row {
	t.Helper()
	rows, err := e.db.Read.Query(`SELECT kind, message, reply_to FROM talk_outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		var r row
		rows.Scan(&r.Kind, &r.Message, &r.ReplyTo)
		out = append(out, r)
	}
	return out
}

func TestCompletedTaskQueuesReplyAndLogsIt(t *testing.T) {
	b := &scriptedBrain{result: brain.Result{OK: true, Text: "  Two.  ", InputTokens: 10, OutputTokens: 3}}
	e := newEnv(t, b, nil)
	tk := e.talkTask(t, "what is 1+1?")
	e.ex.Handle(context.Background(), tk)

	got, _ := e.q.Get(context.Background(), tk.ID)
	if got.Status != queue.Completed || got.Result != "Two." || got.InputTokens != 10 {
		t.Fatalf("task = %+v", got)
	}
	if rows := e.outbox(t); len(rows) != 1 || rows[0] != (row{"reply", "Two.", 5}) {
		t.Fatalf("outbox = %+v", rows)
	}
	recent, _ := convlog.Recent(context.Background(), e.db.Read, "room0001", 0, 10)
	if len(recent) != 2 || !recent[1].FromBot || recent[1].Text != "Two." {
		t.Fatalf("the bot's reply is not in the conversation log: %+v", recent)
	}
	if !strings.Contains(b.got.Prompt, "what is 1+1?") || !strings.Contains(b.got.Prompt, "Nextcloud Talk") {
		t.Errorf("prompt:\n%s", b.got.Prompt)
	}
	if e.l.closed != 1 {
		t.Errorf("sandbox closed %d times", e.l.closed)
	}
}

// The task's sandbox starts before its files are pulled, so that it gets ready while
// they arrive; its commands come after the pull, and it closes after the run.
func TestSandboxStartsBeforeThePull(t *testing.T) {
	events := &eventLog{}
	b := &scriptedBrain{result: brain.Result{OK: true, Text: "Done."}, act: func() { events.add("agent") }}
	e := newEnv(t, b, func(o *Options) { o.Files = orderedFiles{events} })
	e.ex.launchers = orderedLaunchers{events}
	tk := e.talkTask(t, "hello")
	e.ex.Handle(context.Background(), tk)
	if err := e.ex.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := events.list()
	at := func(ev string) int {
		i := slices.Index(got, ev)
		if i < 0 {
			t.Fatalf("no %q in %q", ev, got)
		}
		return i
	}
	if !(at("sandbox start") < at("pull alice") && at("sandbox start") < at("pull room0001") &&
		at("pull alice") < at("agent") && at("pull room0001") < at("agent") && at("agent") < at("sandbox close")) {
		t.Fatalf("order of a task's steps: %q", got)
	}
}

// runAgain makes the waiting task due, claims it and runs it, as the worker pool would
// once the backoff has passed.
func (e *env) runAgain(t *testing.T, id int64) {
	t.Helper()
	ctx := context.Background()
	e.clock.Advance(time.Hour)
	next, err := e.q.Claim(ctx, "w1", false)
	if err != nil || next.ID != id {
		t.Fatalf("claim of the retry: %+v %v", next, err)
	}
	e.ex.Handle(ctx, next)
}

// A Talk request held back by the model API: one notice, at the first such failure, in
// the user's zone with the next attempt's number; no more at later retries; the final
// failure names what an administrator can check.
func TestTransientFailureTellsTheUserOnce(t *testing.T) {
	unavailable := brain.Result{OK: false, Transient: true, APIStatus: 529, Text: "API Error: 529 Overloaded"}
	for _, tc := range []struct {
		name       string
		first      brain.Result // the first run's outcome; later runs are unavailable
		wantNotice string       // after the first transient failure
	}{
		{"unavailable from the start", unavailable,
			"The model service is not answering; I'll try again at 11:01, attempt 2 of 4."},
		{"after an agent error", brain.Result{OK: false, Subtype: "error_during_execution"},
			"The model service is not answering; I'll try again at 12:04, attempt 3 of 4."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &scriptedBrain{result: tc.first}
			e := newEnv(t, b, nil)
			ctx := context.Background()
			if _, err := e.db.Write.Exec(`INSERT INTO users (id, timezone, updated_at) VALUES ('alice', 'Europe/Berlin', '')`); err != nil {
				t.Fatal(err)
			}
			tk := e.talkTask(t, "hi")
			e.ex.Handle(ctx, tk)
			b.result = unavailable
			if !tc.first.Transient {
				if rows := e.outbox(t); len(rows) != 0 {
					t.Fatalf("a non-transient failure was announced: %+v", rows)
				}
				e.runAgain(t, tk.ID)
			}
			got, _ := e.q.Get(ctx, tk.ID)
			if !got.WaitingToRetry() || got.TransientFailures != 1 || !strings.Contains(got.Error, "529") {
				t.Fatalf("task = %+v", got)
			}
			rows := e.outbox(t)
			if len(rows) != 1 || rows[0] != (row{"notice", tc.wantNotice, 5}) {
				t.Fatalf("outbox = %+v, want the notice %q", rows, tc.wantNotice)
			}
			for got.Status == queue.Pending {
				e.runAgain(t, tk.ID)
				got, _ = e.q.Get(ctx, tk.ID)
			}
			if got.Status != queue.Failed || got.Attempts != 4 || got.Runs() != 4 {
				t.Fatalf("task = %+v", got)
			}
			rows = e.outbox(t)
			if len(rows) != 2 || rows[1].Kind != "notice" || rows[1].ReplyTo != 5 {
				t.Fatalf("outbox = %+v, want the one retry notice and the final message", rows)
			}
			final := rows[1].Message
			for _, want := range []string{"error 529", "after 4 attempts", "reachable", "API key", "`istota doctor`"} {
				if !strings.Contains(final, want) {
					t.Errorf("final message %q lacks %q", final, want)
				}
			}
			if strings.Contains(final, "Overloaded") {
				t.Errorf("internal detail reached the user: %q", final)
			}
		})
	}
}

// Only a Talk request is told that it waits: mail, scheduled work and requests without
// a conversation retry quietly.
func TestTransientFailureOfOtherSourcesIsNotAnnounced(t *testing.T) {
	for _, nt := range []queue.NewTask{
		{UserID: "alice", Source: queue.SourceCron, Prompt: "digest", ConversationToken: "room0001", Delivery: queue.Delivery{Job: "cron:digest"}},
		{UserID: "alice", Source: queue.SourceEmail, Prompt: "mail", Delivery: queue.Delivery{Email: &queue.EmailReply{To: "alice@example.com", Subject: "Re: x"}}},
		{UserID: "alice", Source: queue.SourceCLI, Interactive: true, Prompt: "cli"},
	} {
		t.Run(nt.Source, func(t *testing.T) {
			e := newEnv(t, &scriptedBrain{result: brain.Result{OK: false, Transient: true, APIStatus: 503}}, nil)
			tk := e.scheduledTask(t, nt)
			e.ex.Handle(context.Background(), tk)
			got, _ := e.q.Get(context.Background(), tk.ID)
			if !got.WaitingToRetry() || got.TransientFailures != 1 {
				t.Fatalf("task = %+v", got)
			}
			if rows := e.outbox(t); len(rows) != 0 {
				t.Fatalf("outbox = %+v, want nothing", rows)
			}
		})
	}
}

func TestFinalFailureTellsTheUserOnce(t *testing.T) {
	b := &scriptedBrain{result: brain.Result{OK: false, APIStatus: 401, Text: "Invalid API key"}}
	e := newEnv(t, b, nil)
	ctx := context.Background()
	tk := e.talkTask(t, "hi")
	for attempt := 0; attempt < 4; attempt++ {
		e.ex.Handle(ctx, tk)
		e.clock.Advance(time.Hour)
		next, err := e.q.Claim(ctx, "w1", false)
		if errors.Is(err, queue.ErrNoTask) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		tk = next
	}
	got, _ := e.q.Get(ctx, tk.ID)
	if got.Status != queue.Failed || got.Attempts != 4 {
		t.Fatalf("task = %+v", got)
	}
	rows := e.outbox(t)
	if len(rows) != 1 || rows[0].Kind != "notice" || !strings.Contains(rows[0].Message, "error 401") || rows[0].ReplyTo != 5 {
		t.Fatalf("outbox = %+v", rows)
	}
	if strings.Contains(rows[0].Message, "Invalid API key") {
		t.Errorf("internal detail reached the user: %q", rows[0].Message)
	}
}

func TestTimeoutFailsTheAttempt(t *testing.T) {
	b := &scriptedBrain{block: true}
	e := newEnv(t, b, func(o *Options) { o.TaskTimeout = 50 * time.Millisecond })
	tk := e.talkTask(t, "slow")
	e.ex.Handle(context.Background(), tk)
	got, _ := e.q.Get(context.Background(), tk.ID)
	if got.Status != queue.Pending || got.Attempts != 1 || !strings.Contains(got.Error, "timed out") {
		t.Fatalf("task = %+v", got)
	}
}

func TestStoppedTaskRecordsNothing(t *testing.T) {
	b := &scriptedBrain{block: true}
	e := newEnv(t, b, nil)
	tk := e.talkTask(t, "long")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.ex.Handle(ctx, tk); close(done) }()
	time.Sleep(20 * time.Millisecond)
	if _, err := e.q.Cancel(context.Background(), tk.ID); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	got, _ := e.q.Get(context.Background(), tk.ID)
	if got.Status != queue.Cancelled || got.Attempts != 0 {
		t.Fatalf("task = %+v", got)
	}
	if rows := e.outbox(t); len(rows) != 0 {
		t.Fatalf("a stopped task answered: %+v", rows)
	}
}

func TestProgressIsRateLimitedAndCapped(t *testing.T) {
	e := newEnv(t, &scriptedBrain{}, nil)
	tk := e.talkTask(t, "work")
	p := newProgress(e.ex, tk, e.ex.opts.Logger)
	tool := func(cmd string) { p.event(brain.Event{Kind: brain.ToolUse, Tool: "Bash", ToolInput: cmd}) }
	tool("too early") // within 8 s of the start
	e.clock.Advance(8 * time.Second)
	tool("first")
	e.clock.Advance(7 * time.Second)
	tool("too soon after the first")
	for i := 0; i < 10; i++ {
		e.clock.Advance(9 * time.Second)
		tool("more")
	}
	p.event(brain.Event{Kind: brain.Text, Text: "thinking"})
	var progress []string
	for _, r := range e.outbox(t) {
		if r.Kind == "progress" {
			progress = append(progress, r.Message)
		}
	}
	if len(progress) != 5 || progress[0] != "⏳ Bash: first" {
		t.Fatalf("progress = %q", progress)
	}
	events, _ := e.q.Events(context.Background(), tk.ID)
	if len(events) != 14 {
		t.Fatalf("every event must be recorded: %d", len(events))
	}
}

func TestSafeName(t *testing.T) {
	cases := map[string]string{
		"alice":           "alice",
		"Alice.Smith":     "Alice.Smith",
		"..":              "%2e.",
		".hidden":         "%2ehidden",
		"a/b":             "a%2fb",
		"a b":             "a%20b",
		"bob@example.com": "bob@example.com",
		"%":               "%25",
		"":                "%",
	}
	seen := map[string]string{}
	for in, want := range cases {
		got := SafeName(in)
		if got != want {
			t.Errorf("SafeName(%q) = %q, want %q", in, got, want)
		}
		if prev, dup := seen[got]; dup {
			t.Errorf("%q and %q share %q", prev, in, got)
		}
		seen[got] = in
		if strings.ContainsAny(got, "/") || got == "." || got == ".." {
			t.Errorf("unsafe name %q", got)
		}
	}
}

// A request about a schedule gets the CRON.md guide; when the agent changes CRON.md, the
// conversation is recorded as where the checker's verdict goes and the runners are woken.
func TestConfigEditsAreRecordedForTheVerdict(t *testing.T) {
	b := &scriptedBrain{result: brain.Result{OK: true, Text: "Added the job."}}
	woken := 0
	e := newEnv(t, b, func(o *Options) { o.OnConfigEdit = func() { woken++ } })
	cron := filepath.Join(e.ex.userDir("alice"), "workspace", "istota", "config", "CRON.md")
	if err := os.MkdirAll(filepath.Dir(cron), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(cron, []byte("<!-- seed -->\n"), 0o600)
	b.act = func() { os.WriteFile(cron, []byte("```toml\n[[jobs]]\nname = \"bins\"\n```\n"), 0o600) }
	tk := e.talkTask(t, "Remind me every Monday at 8 to take out the bins")
	e.ex.Handle(context.Background(), tk)

	if !strings.Contains(b.got.Prompt, "### CRON.md (guide v") || !strings.Contains(b.got.Prompt, "/workspace/istota/config/CRON.md") {
		t.Fatalf("no CRON.md guide in the prompt:\n%s", b.got.Prompt)
	}
	if strings.Contains(b.got.Prompt, "### BRIEFINGS.md") {
		t.Errorf("an unrelated guide is in the prompt")
	}
	var raw string
	if err := e.db.Read.QueryRow(`SELECT value FROM user_settings WHERE user_id = 'alice' AND key = 'config_edit:CRON.md'`).Scan(&raw); err != nil || !strings.Contains(raw, `"token":"room0001"`) {
		t.Fatalf("edit record = %q %v", raw, err)
	}
	if woken != 1 {
		t.Fatalf("runners woken %d times", woken)
	}
	// A task that changes nothing records nothing.
	e.db.Write.Exec(`DELETE FROM user_settings`)
	b.act = nil
	e.ex.Handle(context.Background(), e.talkTask2(t, "What is on today?"))
	var n int
	e.db.Read.QueryRow(`SELECT count(*) FROM user_settings`).Scan(&n)
	if n != 0 || woken != 1 {
		t.Fatalf("a task without edits: %d records, woken %d", n, woken)
	}
}

func (e *env) talkTask2(t *testing.T, text string) queue.Task {
	t.Helper()
	ctx := context.Background()
	tk, _, err := e.q.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: "talk", Interactive: true, Prompt: text, ConversationToken: "room0001", ReplyToMessageID: 6, DedupeKey: "talk:room0001:6"})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := e.q.Claim(ctx, "w1", false)
	if err != nil || claimed.ID != tk.ID {
		t.Fatalf("claim: %+v %v", claimed, err)
	}
	return claimed
}
