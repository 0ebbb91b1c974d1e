package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/openai/fakeapi"
	"github.com/istota/istota/sidecar/internal/talk/talktest"
)

// openaiKey is the OpenAI-compatible endpoint's key: only the fake API may ever see it.
const openaiKey = "sk-openai-e2e-real-key-must-never-enter-the-sandbox"

// TestTalkMessageIsAnsweredByTheOpenAIBrain runs a Talk message through the whole sidecar
// with brain.kind = "openai": the agent loop runs in the sidecar against a scripted Chat
// Completions API, and the model's tool calls run in the real bwrap sandbox.
func TestTalkMessageIsAnsweredByTheOpenAIBrain(t *testing.T) {
	const token = "oai00001"
	// The check runs inside the sandbox: who and where it is, then everything it can
	// see of environments, command lines and files that could hold the key. The pattern
	// is split so that the command line itself does not contain it.
	check := `id -u; pwd; echo ---; env; for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null | tr '\0' '\n'; done; ` +
		`grep -rsl -e 'sk-openai-e2e''-real' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr 2>/dev/null; echo end-of-check`
	script := fakeapi.Script{
		fakeapi.Tool("Let me check where I am.", "bash", map[string]any{"command": check}).Expecting(func(r *fakeapi.Recorded) error {
			u, _ := r.Message("user")
			if !strings.Contains(u.Text(), "Where do you run?") || !strings.Contains(u.Text(), "Alice") {
				return fmt.Errorf("the prompt lacks the request or the user:\n%s", u.Text())
			}
			if sys, _ := r.Message("system"); !strings.Contains(sys.Text(), "istota skill skills") {
				return fmt.Errorf("the system message does not explain the skills:\n%s", sys.Text())
			}
			return nil
		}),
		fakeapi.Tool("", "write_file", map[string]any{"path": "exports/openai-proof.txt", "content": "written from the sandbox\n"}),
		fakeapi.Reply("I run as **nobody** in /workspace.").Expecting(func(r *fakeapi.Recorded) error {
			if res := r.ToolResults(); len(res) != 2 || !strings.HasPrefix(res[1].Text(), "Wrote 25 bytes") {
				return fmt.Errorf("tool results = %+v", res)
			}
			return nil
		}),
	}
	tk := talktest.New(t)
	tk.AddBot(botSecret).EnableIn(token)
	api := fakeapi.New(t, script)
	sc := newSidecar(t, sidecarOptions{
		talkURL: tk.URL, apiURL: api.URL(), apiKey: openaiKey, botSecret: botSecret,
		progressInterval: "0s", brainKind: "openai", model: "gpt-e2e",
	})
	f := &fixture{talk: tk, sc: sc}
	sc.start()
	if ans := f.say(t, token, 42, "alice", "Where do you run?"); ans["status"] != "accepted" || ans["addressed"] != true {
		t.Fatalf("intake answered %v", ans)
	}

	// Two tool calls are reported as progress (progress_interval is 0), then the answer.
	msgs := f.waitMessages(t, 3, 3*time.Minute)
	var progress []string
	var answer talktest.Posted
	for _, m := range msgs {
		if strings.HasPrefix(m.Message, "⏳ ") {
			progress = append(progress, m.Message)
		} else {
			answer = m
		}
	}
	if len(progress) != 2 || !strings.HasPrefix(progress[0], "⏳ bash: id -u; pwd") || progress[1] != "⏳ write_file: exports/openai-proof.txt" {
		t.Errorf("progress messages = %q", progress)
	}
	if answer.Message != "I run as **nobody** in /workspace." || answer.Token != token || answer.ReplyTo != 42 {
		t.Fatalf("Talk got %+v", msgs)
	}
	if fails := api.Failures(); len(fails) > 0 {
		t.Fatalf("model API expectations failed: %v", fails)
	}

	// The API saw the real key on every request.
	reqs := api.Requests()
	if len(reqs) != 3 {
		t.Fatalf("model requests = %d, want 3", len(reqs))
	}
	for i, r := range reqs {
		if r.Authorization() != "Bearer "+openaiKey || r.Request.Model != "gpt-e2e" {
			t.Fatalf("request %d: Authorization %q, model %q", i+1, r.Authorization(), r.Request.Model)
		}
	}

	// The bash call ran inside the sandbox, as the agent account, in the workspace, and
	// nothing there held the key.
	out := reqs[2].ToolResults()[0].Text()
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || lines[0] != "65534" || lines[1] != "/workspace" || !strings.Contains(out, "end-of-check") {
		t.Fatalf("the tool did not run as nobody (65534) in /workspace:\n%s", out)
	}
	for _, secret := range []string{openaiKey, botSecret, string(sc.secret), "canary-secret-in-sidecar-env"} {
		if strings.Contains(out, secret) {
			t.Fatalf("the sandbox sees a secret (%.12s…):\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "ISTOTA_TASK_ID=") {
		t.Errorf("the tool's environment is not the sandbox's:\n%s", out)
	}

	// write_file wrote into the user's workspace through the sandbox.
	written, _ := filepath.Glob(filepath.Join(sc.dir, "data", "users", "*", "workspace", "exports", "openai-proof.txt"))
	if len(written) != 1 {
		t.Fatalf("the written file is not in the user's workspace: %v", written)
	}
	if b, err := os.ReadFile(written[0]); err != nil || string(b) != "written from the sandbox\n" {
		t.Fatalf("written file = %q, %v", b, err)
	}

	tasks := sc.tasks()
	if len(tasks) != 1 || tasks[0].Status != "completed" || tasks[0].Result != answer.Message {
		t.Fatalf("tasks = %+v", tasks)
	}
	if logs := sc.logs(); strings.Contains(logs, openaiKey) || !strings.Contains(logs, "openai run finished") {
		t.Fatalf("the log holds the key or lacks the run:\n%s", logs)
	}

	// Each response's usage was recorded for the user, and !usage shows it.
	var in, outTok, n int64
	sc.db().QueryRow(`SELECT SUM(input_tokens), SUM(output_tokens), SUM(requests) FROM usage WHERE user_id = 'alice' AND task_id = ?`, tasks[0].ID).Scan(&in, &outTok, &n)
	if in != 30 || outTok != 15 || n != 3 {
		t.Fatalf("usage recorded: in=%d out=%d requests=%d, want 30, 15, 3", in, outTok, n)
	}
	f.say(t, token, 43, "alice", "!usage")
	if usage := f.waitMessages(t, 4, time.Minute)[3].Message; !strings.Contains(usage, "| Today | 30 | 15 | 3 |") {
		t.Fatalf("!usage = %q", usage)
	}
}

// TestOpenAIBrainRefusedKeyFailsTheTask checks a permanent API error end to end: the
// failure is recorded with the server's reason, and the key is in neither the task nor
// the log.
func TestOpenAIBrainRefusedKeyFailsTheTask(t *testing.T) {
	const token = "oai00002"
	api := fakeapi.New(t, fakeapi.Script{fakeapi.Error(401, "Incorrect API key provided: "+openaiKey).Times(3)})
	tk := talktest.New(t)
	tk.AddBot(botSecret).EnableIn(token)
	sc := newSidecar(t, sidecarOptions{
		talkURL: tk.URL, apiURL: api.URL(), apiKey: openaiKey, botSecret: botSecret,
		progressInterval: "0s", brainKind: "openai", model: "gpt-e2e",
	})
	f := &fixture{talk: tk, sc: sc}
	sc.start()
	f.say(t, token, 1, "bob", "hello")
	waitFor(t, "the task to be retried or failed", 2*time.Minute, func() bool {
		ts := sc.tasks()
		return len(ts) == 1 && strings.Contains(ts[0].Error, "401")
	}, sc.logs)
	ts := sc.tasks()
	if strings.Contains(ts[0].Error, openaiKey) || !strings.Contains(ts[0].Error, "[redacted]") {
		t.Fatalf("task error = %q", ts[0].Error)
	}
	if strings.Contains(sc.logs(), openaiKey) {
		t.Fatal("the key appears in the sidecar log")
	}
}

// TestStopEndsTheOpenAIBrainsToolInTheSandbox: !stop during a tool call kills the
// sandboxed process and cancels the task; nothing is answered afterwards.
func TestStopEndsTheOpenAIBrainsToolInTheSandbox(t *testing.T) {
	const token = "oai00003"
	api := fakeapi.New(t, fakeapi.Script{fakeapi.Tool("", "bash", map[string]any{"command": "touch started; sleep 297"})})
	tk := talktest.New(t)
	tk.AddBot(botSecret).EnableIn(token)
	sc := newSidecar(t, sidecarOptions{
		talkURL: tk.URL, apiURL: api.URL(), apiKey: openaiKey, botSecret: botSecret,
		progressInterval: "1h", brainKind: "openai", model: "gpt-e2e",
	})
	f := &fixture{talk: tk, sc: sc}
	sc.start()
	f.say(t, token, 1, "dave", "a long job")
	started := func() bool {
		m, _ := filepath.Glob(filepath.Join(sc.dir, "data", "users", "*", "workspace", "started"))
		return len(m) == 1
	}
	waitFor(t, "the tool to start in the sandbox", 2*time.Minute, started, sc.logs)
	// The shell starts sleep a moment after it touched the file.
	waitFor(t, "the tool's sleep to run", 30*time.Second, func() bool { return sleeping() > 0 }, sc.logs)
	if ans := f.say(t, token, 2, "dave", "!stop"); ans["command"] != "stop" {
		t.Fatalf("!stop: %v", ans)
	}
	msgs := f.waitMessages(t, 1, time.Minute)
	if !strings.Contains(msgs[0].Message, "Stopped 1 running") {
		t.Fatalf("!stop answer = %+v", msgs[0])
	}
	waitFor(t, "the sandboxed tool to be killed", 30*time.Second, func() bool { return sleeping() == 0 }, sc.logs)
	waitFor(t, "the task to be cancelled", 30*time.Second, func() bool {
		ts := sc.tasks()
		return len(ts) == 1 && ts[0].Status == "cancelled"
	}, sc.logs)
	time.Sleep(2 * time.Second)
	if n := len(tk.Messages()); n != 1 {
		t.Fatalf("a stopped task still answered: %+v", tk.Messages())
	}
	if n := len(api.Requests()); n != 1 {
		t.Fatalf("the loop went on after !stop: %d model requests", n)
	}
}

// sleeping counts processes running the stop test's "sleep 297".
func sleeping() int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && string(cmdline) == "sleep\x00297\x00" {
			n++
		}
	}
	return n
}
