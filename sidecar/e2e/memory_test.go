package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// TestSleepCycleWithTheRealCLI: a conversation happens, then the nightly cycle (run now
// with `istota sleep`) asks the real claude CLI, sandboxed and without tools, to extract
// memories; the dated file, the fact and the USER.md change land where the next prompt
// reads them.
func TestSleepCycleWithTheRealCLI(t *testing.T) {
	const token = "sleep001"
	extraction := `{"memories": ["Alice said she drinks green tea every morning."],
 "facts": [{"subject": "alice", "predicate": "drinks", "object": "green tea", "ephemeral": false}],
 "topics": ["tea"],
 "user_md_ops": [{"op": "add_heading", "heading": "Preferences"}, {"op": "append", "heading": "Preferences", "text": "- Drinks green tea in the morning."}]}`
	f := newFixtureWith(t, fakeapi.Script{fakeapi.Reply("Noted: green tea it is.")}, sidecarOptions{progressInterval: "1h", logLevel: "info"}, token)
	f.api.AddScript("sleep", fakeapi.Marker("user_md_ops"), fakeapi.Script{fakeapi.Reply(extraction), fakeapi.Reply("a second run must not ask")})
	f.sc.start()
	f.say(t, token, 3, "alice", "I drink green tea every morning")
	f.waitMessages(t, 1, 3*time.Minute)
	f.sc.stop()

	out, stderr, err := runCLI(t, f.sc.cfgPath, "sleep", "-u", "alice")
	if err != nil {
		t.Fatalf("istota sleep: %v\n%s%s", err, out, stderr)
	}
	var sleepReqs int
	for _, r := range f.api.MessageRequests() {
		if r.Conversation == "sleep" {
			sleepReqs++
			if !strings.Contains(r.UserText(), "I drink green tea every morning") {
				t.Errorf("the transcript is not in the extraction prompt")
			}
			if len(r.Tools) != 0 {
				t.Errorf("the extraction call offered %d tools; it must be text only", len(r.Tools))
			}
		}
	}
	if sleepReqs != 1 {
		t.Fatalf("extraction requests = %d\n%s", sleepReqs, stderr)
	}
	mirror := filepath.Join(f.sc.dir, "data", "users", "alice", "workspace")
	// The dated file is named by the user's day (talkEvent sends Europe/Berlin), which
	// differs from the machine's around midnight.
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	day := time.Now().In(berlin).Format("2006-01-02")
	mem, err := os.ReadFile(filepath.Join(mirror, "memories", day+".md"))
	if err != nil || !strings.Contains(string(mem), "green tea every morning") {
		matches, _ := filepath.Glob(filepath.Join(mirror, "memories", "*"))
		t.Fatalf("dated memory file: %v %q (memories: %v)", err, mem, matches)
	}
	userMD, err := os.ReadFile(filepath.Join(mirror, "istota", "config", "USER.md"))
	if err != nil || !strings.Contains(string(userMD), "## Preferences") || !strings.Contains(string(userMD), "Drinks green tea") {
		t.Fatalf("USER.md after curation: %v %q", err, userMD)
	}
	if _, err := os.Stat(filepath.Join(mirror, "istota", "config", "USER.md.audit.jsonl")); err != nil {
		t.Errorf("no curation audit log: %v", err)
	}
	var facts int
	f.sc.db().QueryRow(`SELECT count(*) FROM knowledge_facts WHERE namespace = 'user:alice' AND object = 'green tea' AND valid_until = ''`).Scan(&facts)
	if facts != 1 {
		t.Fatalf("current facts = %d", facts)
	}
	// Nothing new: a second run asks nothing.
	if out, _, err := runCLI(t, f.sc.cfgPath, "sleep", "-u", "alice"); err != nil || !strings.Contains(out, "nothing to do") {
		t.Fatalf("second run: %v %s", err, out)
	}

	// What was remembered is there for the user to see, at once.
	f.sc.start()
	f.say(t, token, 4, "alice", "!memory facts")
	f.say(t, token, 5, "alice", "!memory search tea")
	msgs := f.waitMessages(t, 3, time.Minute)
	if !strings.Contains(msgs[1].Message, "alice drinks green tea") {
		t.Errorf("!memory facts = %q", msgs[1].Message)
	}
	if !strings.Contains(msgs[2].Message, "green tea") {
		t.Errorf("!memory search = %q", msgs[2].Message)
	}
}
