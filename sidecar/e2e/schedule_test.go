package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// Scheduled work end to end with the real binary: an admin's CRON.md with a prompt job
// and a command job, started with !cron run, and a TASKS.md line picked up by the job
// runner; the prompt job goes through the real claude CLI, the command runs in the
// sandbox, and TASKS.md gets its markers and the result.
func TestScheduledWorkEndToEnd(t *testing.T) {
	const token = "sched001"
	script := fakeapi.Script{fakeapi.Reply("Hello Root."), fakeapi.Reply("All done here."), fakeapi.Reply("All done here.")}
	f := newFixture(t, script, token)
	f.sc.start()
	if status, ans := f.sc.post("/v1/talk/events", talkEventAs(token, 1, "root", "hi", true)); status != 200 || ans["status"] != "accepted" {
		t.Fatalf("intake answered %d %v", status, ans)
	}
	f.talk.AddUserMessage(token, 1, "root", "hi")
	f.waitMessages(t, 1, 2*time.Minute)

	config := filepath.Join(f.sc.dir, "data", "users", "root", "workspace", "istota", "config")
	if err := os.MkdirAll(config, 0o700); err != nil {
		t.Fatal(err)
	}
	cron := "```toml\n" +
		"[[jobs]]\nname = \"digest\"\nschedule = \"0 3 1 1 *\"\nprompt = \"Write my digest\"\n\n" +
		"[[jobs]]\nname = \"disk\"\nschedule = \"0 3 1 1 *\"\ncommand = \"echo from-the-sandbox; id -u\"\n```\n"
	if err := os.WriteFile(filepath.Join(config, "CRON.md"), []byte(cron), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(config, "TASKS.md"), []byte("# Tasks\n- [ ] Tidy the notes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	say := func(id int64, text string) {
		t.Helper()
		f.talk.AddUserMessage(token, id, "root", text)
		if status, ans := f.sc.post("/v1/talk/events", talkEventAs(token, id, "root", text, true)); status != 200 {
			t.Fatalf("intake answered %d %v", status, ans)
		}
	}
	// !cron wakes the runner, which syncs the new file first.
	say(2, "!cron")
	waitFor(t, "CRON.md synced", time.Minute, func() bool {
		var n int
		f.sc.db().QueryRow(`SELECT COUNT(*) FROM scheduled_jobs WHERE user_id = 'root'`).Scan(&n)
		return n == 2
	}, f.sc.logs)
	say(3, "!cron run disk")
	say(4, "!cron run digest")
	var texts []string
	waitFor(t, "answers of both jobs and the task", 3*time.Minute, func() bool {
		texts = texts[:0]
		for _, m := range f.talk.Messages() {
			texts = append(texts, m.Message)
		}
		joined := strings.Join(texts, "\n")
		return strings.Contains(joined, "from-the-sandbox") && strings.Count(joined, "All done here.") == 2
	}, f.sc.logs)
	joined := strings.Join(texts, "\n")
	if !strings.Contains(joined, "from-the-sandbox\n65534") {
		t.Errorf("the command did not run as the agent account in the sandbox: %q", joined)
	}
	waitFor(t, "TASKS.md marked done", time.Minute, func() bool {
		b, _ := os.ReadFile(filepath.Join(config, "TASKS.md"))
		return strings.Contains(string(b), "- [x] Tidy the notes") && strings.Contains(string(b), "All done here.")
	}, f.sc.logs)
	waitFor(t, "both job results counted", time.Minute, func() bool {
		var n int
		f.sc.db().QueryRow(`SELECT COUNT(*) FROM scheduled_jobs WHERE user_id = 'root' AND last_result = 'ok'`).Scan(&n)
		return n == 2
	}, f.sc.logs)
	// The scheduled prompt ran without the user's personal memory, and as a cron task.
	var sources []string
	for _, tk := range f.sc.tasks() {
		sources = append(sources, tk.Source)
	}
	if got := strings.Join(sources, ","); strings.Count(got, "cron") != 2 || !strings.Contains(got, "tasks_md") {
		t.Fatalf("task sources %q", got)
	}
}

// A non-admin's command job never runs: it is refused when CRON.md is synced and the
// user is told where and why.
func TestCommandJobRefusedForNonAdmin(t *testing.T) {
	const token = "sched002"
	f := newFixture(t, fakeapi.Script{fakeapi.Reply("Hi.")}, token)
	f.sc.start()
	f.say(t, token, 1, "bob", "hi")
	f.waitMessages(t, 1, 2*time.Minute)
	config := filepath.Join(f.sc.dir, "data", "users", "bob", "workspace", "istota", "config")
	os.MkdirAll(config, 0o700)
	os.WriteFile(filepath.Join(config, "CRON.md"), []byte("```toml\n[[jobs]]\nname = \"evil\"\nschedule = \"* * * * *\"\ncommand = \"id\"\n```\n"), 0o600)
	f.say(t, token, 2, "bob", "!cron")
	msgs := f.waitMessages(t, 3, time.Minute)
	joined := msgs[1].Message + "\n" + msgs[2].Message
	if !strings.Contains(joined, "only administrators may schedule commands") || !strings.Contains(joined, "line 2") {
		t.Fatalf("bob was not told: %q", joined)
	}
	time.Sleep(2 * time.Second)
	for _, tk := range f.sc.tasks() {
		if tk.Source == "cron" {
			t.Fatalf("a command job of a non-admin was queued: %+v", tk)
		}
	}
}
