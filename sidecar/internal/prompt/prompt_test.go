package prompt

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("prompt differs from %s:\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

func TestBuildGolden(t *testing.T) {
	now := time.Date(2026, 11, 22, 9, 30, 0, 0, time.UTC)
	alice := User{ID: "alice", DisplayName: "Alice Liddell", Timezone: "Europe/Berlin", Language: "de"}
	ctxMsgs := []Message{
		{ID: 40, Author: "Bob", Text: "Lunch at noon?", At: now.Add(-20 * time.Minute)},
		{ID: -7, Author: "Istota", FromBot: true, Text: "Noted.", At: now.Add(-19 * time.Minute)},
		{ID: 41, Author: "Alice Liddell", Text: "Sure.\nSee you", At: now.Add(-10 * time.Minute)},
	}
	cases := []struct {
		name string
		in   Input
	}{
		{"talk_private_minimal", Input{BotName: "Istota", Now: now, User: alice, Source: "talk", Room: "Alice", Request: "What is 2+2?", Workspace: "/workspace"}},
		{"talk_with_memory_context_reply", Input{BotName: "Istota", Now: now, User: alice, Source: "talk", Room: "Team", Persona: "Be terse.",
			UserMD: "# Alice\n- likes tea", Context: ctxMsgs,
			ReplyTo: &Message{ID: 12, Author: "Bob", Text: "The report is in /shared/q3.pdf", At: now.Add(-48 * time.Hour)},
			Request: "@Istota summarise that report", Workspace: "/workspace"}},
		{"cli_admin", Input{BotName: "Istota", Now: now, User: User{ID: "root", IsAdmin: true}, Source: "cli", Request: "list my files"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { golden(t, c.name, Build(c.in)) })
	}
}

func TestReplyToForcedInOnlyOnce(t *testing.T) {
	now := time.Date(2026, 11, 22, 9, 30, 0, 0, time.UTC)
	m := Message{ID: 41, Author: "Bob", Text: "in window", At: now}
	out := Build(Input{BotName: "Istota", Now: now, User: User{ID: "a"}, Source: "talk", Context: []Message{m}, ReplyTo: &m, Request: "ok"})
	if n := strings.Count(out, "in window"); n != 1 {
		t.Fatalf("replied-to message inside the window appears %d times:\n%s", n, out)
	}
}

func TestContextBudgetDropsOldestButKeepsReplyTo(t *testing.T) {
	now := time.Date(2026, 11, 22, 9, 30, 0, 0, time.UTC)
	var msgs []Message
	for i := 0; i < 100; i++ {
		msgs = append(msgs, Message{ID: int64(100 + i), Author: "Bob", Text: strings.Repeat("x", 300) + string(rune('A'+i%26)), At: now})
	}
	reply := Message{ID: 5, Author: "Carol", Text: "the old question", At: now.Add(-time.Hour)}
	out := Build(Input{BotName: "Istota", Now: now, User: User{ID: "a"}, Source: "talk", Context: msgs, ReplyTo: &reply, Request: "answer it"})
	if !strings.Contains(out, "the old question") {
		t.Fatal("replied-to message dropped")
	}
	if strings.Contains(out, "#100 ") {
		t.Fatal("oldest message kept although over budget")
	}
	if !strings.Contains(out, "#199 ") {
		t.Fatal("newest message dropped")
	}
}
