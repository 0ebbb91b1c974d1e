package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
	"github.com/istota/istota/sidecar/internal/talk/talktest"
)

const (
	botSecret = "e2e-bot-secret-0123456789abcdef0123456789abcdef"
	apiKey    = "sk-ant-e2e-real-key-must-never-enter-the-sandbox"
)

// fixture is a fake Talk, a scripted model API and a sidecar wired to both.
type fixture struct {
	bot  *talktest.Bot
	talk *talktest.Server
	api  *fakeapi.Server
	sc   *sidecar
}

func newFixture(t *testing.T, script fakeapi.Script, tokens ...string) *fixture {
	return newFixtureWith(t, script, sidecarOptions{progressInterval: "0s"}, tokens...)
}

func newFixtureWith(t testing.TB, script fakeapi.Script, o sidecarOptions, tokens ...string) *fixture {
	t.Helper()
	tk := talktest.New(t)
	bot := tk.AddBot(botSecret)
	bot.EnableIn(tokens...)
	api := fakeapi.New(t, script)
	o.talkURL, o.apiURL, o.apiKey, o.botSecret = tk.URL, api.URL(), apiKey, botSecret
	sc := newSidecar(t, o)
	return &fixture{bot: bot, talk: tk, api: api, sc: sc}
}

// say posts a user's chat message: Talk stores it (so a reply may refer to it) and the
// app forwards it to the sidecar.
func (f *fixture) say(t *testing.T, token string, id int64, uid, text string) map[string]any {
	t.Helper()
	f.talk.AddUserMessage(token, id, uid, text)
	status, ans := f.sc.post("/v1/talk/events", talkEvent(token, id, uid, text, true))
	if status != 200 {
		t.Fatalf("intake answered %d %v", status, ans)
	}
	return ans
}

func (f *fixture) waitMessages(t *testing.T, n int, timeout time.Duration) []talktest.Posted {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	msgs, err := f.talk.WaitMessages(ctx, n)
	if err != nil {
		t.Fatalf("waiting for %d Talk message(s): %v (got %d)\n--- sidecar log ---\n%s", n, err, len(f.talk.Messages()), f.sc.logs())
	}
	return msgs
}

// agentProcesses counts processes running the agent binary inside a sandbox.
func agentProcesses() int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), "/opt/istota/agent/") {
			n++
		}
	}
	return n
}

func TestTalkMessageIsAnsweredByClaudeInTheSandbox(t *testing.T) {
	const token = "abcd1234"
	script := fakeapi.Script{
		fakeapi.ToolCall("Let me check.", "Bash", map[string]any{"command": "echo hello-from-tool; id -u", "description": "Print a greeting"}),
		{
			Content: []fakeapi.Content{{Text: "The tool said **hello**."}},
			Expect: func(r *fakeapi.Recorded) error {
				for _, b := range r.ToolResults() {
					if strings.Contains(b.Content, "hello-from-tool") {
						return nil
					}
				}
				return fmt.Errorf("no tool result with the tool's output in the second request: %+v", r.ToolResults())
			},
		},
	}
	f := newFixture(t, script, token)
	f.sc.start()
	if ans := f.say(t, token, 42, "alice", "Please run a greeting for me"); ans["status"] != "accepted" || ans["addressed"] != true {
		t.Fatalf("intake answered %v", ans)
	}
	// progress_interval is 0 here, so the tool call is reported before the answer.
	msgs := f.waitMessages(t, 2, 3*time.Minute)
	progress, got := msgs[0], msgs[1]
	if !strings.HasPrefix(progress.Message, "⏳ Bash: echo hello-from-tool") || !progress.Silent || progress.Token != token {
		t.Errorf("progress message = %+v", progress)
	}
	if got.Message != "The tool said **hello**." || got.Token != token || got.ReplyTo != 42 {
		t.Fatalf("Talk got %+v", got)
	}
	if got.ReferenceID == "" {
		t.Error("reply without a referenceId")
	}
	if n := f.talk.Count(401); n != 0 {
		t.Errorf("Talk refused %d requests as unauthorized", n)
	}
	if fails := f.api.Failures(); len(fails) > 0 {
		t.Fatalf("model API expectations failed: %v", fails)
	}

	// The tool really ran, inside the sandbox, as an unprivileged user.
	results := f.api.ToolResults()
	if len(results) != 1 || !strings.Contains(results[0].Content, "hello-from-tool") {
		t.Fatalf("tool results = %+v", results)
	}
	if lines := strings.Fields(results[0].Content); len(lines) != 2 || lines[1] != "65534" {
		t.Fatalf("the tool did not run as the agent account (nobody, 65534): %q", results[0].Content)
	}

	// The model API saw the real key, added outside the sandbox, and the request and
	// the user's identity in the prompt.
	reqs := f.api.MessageRequests()
	if len(reqs) < 2 {
		t.Fatalf("model requests = %d", len(reqs))
	}
	for _, r := range reqs {
		if r.APIKey() != apiKey {
			t.Fatalf("model API got key %q, want the configured key", r.APIKey())
		}
	}
	if txt := reqs[0].UserText(); !strings.Contains(txt, "Please run a greeting for me") || !strings.Contains(txt, "Alice") {
		t.Errorf("prompt lacks the request or the user:\n%s", txt)
	}

	tasks := f.sc.tasks()
	if len(tasks) != 1 || tasks[0].Status != "completed" || tasks[0].Attempts != 0 && tasks[0].Attempts != 1 {
		t.Fatalf("tasks = %+v", tasks)
	}
	if !strings.Contains(f.sc.logs(), "task completed") {
		t.Errorf("no completion logged")
	}
	if strings.Contains(f.sc.logs(), apiKey) || strings.Contains(f.sc.logs(), botSecret) {
		t.Fatal("a secret appears in the sidecar log")
	}

	// The tokens the gateway counted are what !usage reports.
	var in, out int64
	f.sc.db().QueryRow(`SELECT SUM(input_tokens), SUM(output_tokens) FROM usage WHERE user_id = 'alice'`).Scan(&in, &out)
	if in == 0 || out == 0 {
		t.Fatalf("the gateway recorded no usage for alice: in=%d out=%d", in, out)
	}
	f.say(t, token, 43, "alice", "!usage")
	usage := f.waitMessages(t, 3, time.Minute)[2].Message
	if !strings.Contains(usage, fmt.Sprintf("| Today | %d | %d | 2 |", in, out)) {
		t.Fatalf("!usage = %q (recorded in=%d out=%d)", usage, in, out)
	}
}

func TestSidecarCrashDuringRunCompletesTheTaskOnce(t *testing.T) {
	const token = "crash001"
	release := make(chan struct{})
	script := fakeapi.Script{
		{WaitFor: release, Content: []fakeapi.Content{{Text: "answer from the first run, which crashed"}}},
		fakeapi.Reply("Recovered answer."),
	}
	f := newFixture(t, script, token)
	f.sc.start()
	if ans := f.say(t, token, 7, "bob", "a question"); ans["status"] != "accepted" {
		t.Fatalf("intake: %v", ans)
	}
	waitFor(t, "the agent's first model request", 2*time.Minute, func() bool { return len(f.api.MessageRequests()) >= 1 }, f.sc.logs)
	if agentProcesses() == 0 {
		t.Fatal("no agent process found while the run is in flight")
	}

	// The sidecar dies (only its own pid: its sandboxes must die with it).
	f.sc.cmd.Process.Kill()
	<-f.sc.exited
	waitFor(t, "sandboxed agents to die with the sidecar", 30*time.Second, func() bool { return agentProcesses() == 0 }, f.sc.logs)
	close(release)

	f.sc.start()
	msgs := f.waitMessages(t, 1, 3*time.Minute)
	if msgs[0].Message != "Recovered answer." || msgs[0].ReplyTo != 7 {
		t.Fatalf("reply = %+v", msgs[0])
	}
	time.Sleep(2 * time.Second)
	if n := len(f.talk.Messages()); n != 1 {
		t.Fatalf("Talk got %d messages, want exactly 1: %+v", n, f.talk.Messages())
	}
	tasks := f.sc.tasks()
	if len(tasks) != 1 || tasks[0].Status != "completed" || tasks[0].Result != "Recovered answer." {
		t.Fatalf("tasks = %+v", tasks)
	}
}

func TestTalkOutageDelaysTheAnswerButNeverDropsIt(t *testing.T) {
	const token = "outage01"
	f := newFixture(t, fakeapi.Script{fakeapi.Reply("Answer after the outage.")}, token)
	f.talk.SetDown(503)
	f.sc.start()
	f.say(t, token, 9, "carol", "hello?")
	// The 👀 reaction is refused too, so the count alone does not say the reply was: the
	// task must also have finished (its answer then waits in the outbox).
	var refusedAtCompletion int
	waitFor(t, "the task to complete and Talk to refuse twice more after it", 2*time.Minute, func() bool {
		if tasks := f.sc.tasks(); len(tasks) != 1 || tasks[0].Status != "completed" {
			return false
		}
		if refusedAtCompletion == 0 {
			refusedAtCompletion = f.talk.Count(503) + 1
		}
		return f.talk.Count(503) >= refusedAtCompletion+1
	}, f.sc.logs)
	if n := len(f.talk.Messages()); n != 0 {
		t.Fatalf("a message was accepted during the outage: %d", n)
	}
	f.talk.SetUp()
	msgs := f.waitMessages(t, 1, 2*time.Minute)
	if msgs[0].Message != "Answer after the outage." || msgs[0].ReplyTo != 9 {
		t.Fatalf("reply = %+v", msgs[0])
	}
	time.Sleep(3 * time.Second)
	if n := len(f.talk.Messages()); n != 1 {
		t.Fatalf("the reply arrived %d times", n)
	}
}

func TestStopKillsTheRunningAgent(t *testing.T) {
	const token = "stop0001"
	hold := make(chan struct{})
	f := newFixture(t, fakeapi.Script{{WaitFor: hold, Content: []fakeapi.Content{{Text: "too late"}}}}, token)
	t.Cleanup(func() { close(hold) })
	f.sc.start()
	f.say(t, token, 1, "dave", "a long job")
	waitFor(t, "the agent to call the model", 2*time.Minute, func() bool { return len(f.api.MessageRequests()) >= 1 }, f.sc.logs)

	if ans := f.say(t, token, 2, "dave", "!stop"); ans["command"] != "stop" {
		t.Fatalf("!stop: %v", ans)
	}
	msgs := f.waitMessages(t, 1, time.Minute)
	if !strings.Contains(msgs[0].Message, "Stopped 1 running") || msgs[0].ReplyTo != 2 {
		t.Fatalf("!stop answer = %+v", msgs[0])
	}
	waitFor(t, "the agent process group to be killed", 30*time.Second, func() bool { return agentProcesses() == 0 }, f.sc.logs)
	if tasks := f.sc.tasks(); len(tasks) != 1 || tasks[0].Status != "cancelled" {
		t.Fatalf("tasks = %+v", tasks)
	}
	time.Sleep(2 * time.Second)
	if n := len(f.talk.Messages()); n != 1 {
		t.Fatalf("a stopped task still answered: %+v", f.talk.Messages())
	}
}
