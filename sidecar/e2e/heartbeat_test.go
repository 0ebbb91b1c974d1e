package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// Heartbeat checks end to end with the real binary: an admin's HEARTBEAT.md with a
// failing shell-command check and a self-check. The runner reads the file, runs the
// command in the sandbox as the agent account, alerts in the private conversation,
// and answers !check and !check run there.
func TestHeartbeatEndToEnd(t *testing.T) {
	const token = "beat0001"
	f := newFixture(t, fakeapi.Script{fakeapi.Reply("Hello Root.")}, token)
	f.sc.start()
	say := func(id int64, text string) {
		t.Helper()
		f.talk.AddUserMessage(token, id, "root", text)
		if status, ans := f.sc.post("/v1/talk/events", talkEventAs(token, id, "root", text, true)); status != 200 {
			t.Fatalf("intake answered %d %v", status, ans)
		}
	}
	say(1, "hi")
	f.waitMessages(t, 1, 2*time.Minute)

	config := filepath.Join(f.sc.dir, "data", "users", "root", "workspace", "istota", "config")
	if err := os.MkdirAll(config, 0o700); err != nil {
		t.Fatal(err)
	}
	beat := "```toml\n" +
		"[[checks]]\nname = \"Disk\"\nkind = \"shell-command\"\ncommand = \"echo from-the-sandbox; id -u; exit 4\"\ninterval = \"1h\"\n\n" +
		"[[checks]]\nname = \"Health\"\nkind = \"self-check\"\ninterval = \"1h\"\n```\n"
	if err := os.WriteFile(filepath.Join(config, "HEARTBEAT.md"), []byte(beat), 0o600); err != nil {
		t.Fatal(err)
	}
	joined := func() string {
		var texts []string
		for _, m := range f.talk.Messages() {
			texts = append(texts, m.Message)
		}
		return strings.Join(texts, "\n")
	}
	// The runner reads the file within a minute and runs both checks at once.
	waitFor(t, "the scheduled alert of the failing command", 3*time.Minute, func() bool {
		return strings.Contains(joined(), "⚠️ **Disk** (shell-command)")
	}, f.sc.logs)
	if got := joined(); !strings.Contains(got, "exit status 4") || !strings.Contains(got, "from-the-sandbox\n65534") {
		t.Fatalf("the command did not run as the agent account in the sandbox: %q", got)
	}
	// Both checks run in the same pass, but the self-check (which starts a sandbox) may
	// finish after the alert of the other was sent.
	waitFor(t, "the self-check's first run", 2*time.Minute, func() bool {
		var status string
		f.sc.db().QueryRow(`SELECT status FROM heartbeat_checks WHERE user_id = 'root' AND name = 'Health'`).Scan(&status)
		return status == "ok"
	}, f.sc.logs)
	if strings.Contains(joined(), "**Health**") {
		t.Fatalf("a healthy self-check was told: %q", joined())
	}

	n := len(f.talk.Messages())
	say(2, "!check")
	say(3, "!check run health")
	waitFor(t, "the list and the requested run's outcome", 2*time.Minute, func() bool {
		return len(f.talk.Messages()) >= n+3
	}, f.sc.logs)
	msgs := f.talk.Messages()[n:]
	var list, outcome string
	for _, m := range msgs {
		switch {
		case strings.HasPrefix(m.Message, "Your checks"):
			list = m.Message
		case strings.Contains(m.Message, "**Health** (self-check): "):
			outcome = m.Message
		}
	}
	if !strings.Contains(list, "⚠️ **Disk** — shell-command, every 1h") || !strings.Contains(list, "✅ **Health** — self-check") {
		t.Fatalf("!check list: %q", list)
	}
	for _, want := range []string{"ok", "✓ agent:", "✓ sandbox: bwrap works", "✓ database"} {
		if !strings.Contains(outcome, want) {
			t.Fatalf("!check run health: %q lacks %q", outcome, want)
		}
	}
	var status string
	if err := f.sc.db().QueryRow(`SELECT status FROM heartbeat_checks WHERE user_id = 'root' AND name = 'Disk'`).Scan(&status); err != nil || status != "alert" {
		t.Fatalf("stored status %q, %v", status, err)
	}
}
