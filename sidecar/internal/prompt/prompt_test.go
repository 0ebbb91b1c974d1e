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
		{"talk_with_all_memory", Input{BotName: "Istota", Now: now, User: alice, Source: "talk", Room: "Team",
			UserMD: "# Alice\n- likes tea", Facts: []string{"alice lives_in Berlin", "alice works_at ACME"},
			ChannelMD: "Team channel for the Q4 launch.",
			Dated:     []DatedMemory{{Date: "2026-11-20", Text: "Discussed the launch plan."}, {Date: "2026-11-21", Text: "Alice booked a flight to Lisbon."}},
			Recalled:  []string{"2026-10-02: Alice prefers aisle seats."},
			Request:   "book me a hotel", Workspace: "/workspace"}},
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

func TestMemoryCapTrimsRecalledThenDatedThenFactsButNeverUserOrChannelMD(t *testing.T) {
	now := time.Date(2026, 11, 22, 9, 30, 0, 0, time.UTC)
	big := strings.Repeat("u", 5000)
	in := Input{BotName: "Istota", Now: now, User: User{ID: "a"}, Source: "talk", UserMD: big, ChannelMD: big + "c",
		Facts:    []string{"fact-one", "fact-two"},
		Dated:    []DatedMemory{{Date: "2026-11-20", Text: "old-day"}, {Date: "2026-11-21", Text: "new-day"}},
		Recalled: []string{"recalled-one", "recalled-two"},
		Request:  "hi"}
	cases := []struct {
		max        int
		keep, drop []string
	}{
		{0, []string{"recalled-two", "old-day", "fact-two"}, nil},
		{85, []string{"recalled-one", "old-day", "new-day", "fact-two"}, []string{"recalled-two"}},
		{50, []string{"new-day", "fact-two"}, []string{"recalled-one", "old-day"}},
		{12, []string{"fact-one"}, []string{"new-day", "fact-two"}},
		{1, nil, []string{"fact-one", "Known facts", "Recent memories", "Recalled memories"}},
	}
	for _, c := range cases {
		out := Build(func() Input { x := in; x.MaxMemoryChars = c.max; return x }())
		if !strings.Contains(out, big) || !strings.Contains(out, big+"c") {
			t.Fatalf("max %d: USER.md or CHANNEL.md trimmed", c.max)
		}
		for _, k := range c.keep {
			if !strings.Contains(out, k) {
				t.Errorf("max %d: %q dropped", c.max, k)
			}
		}
		for _, d := range c.drop {
			if strings.Contains(out, d) {
				t.Errorf("max %d: %q kept", c.max, d)
			}
		}
	}
}

func TestSkillsSectionComesLast(t *testing.T) {
	in := Input{BotName: "Istota", Now: time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC), User: User{ID: "alice"}, Source: "talk", Request: "add to my notes"}
	if p := Build(in); strings.Contains(p, "## Skills") {
		t.Errorf("a prompt without skills has a skills section:\n%s", p)
	}
	in.Skills = []SkillDoc{{Name: "notes", Summary: "your notes", Synopsis: "istota skill notes list\n  A note.\n"}}
	in.OtherSkills = []string{"kv", "whoami"}
	p := Build(in)
	i := strings.Index(p, "\n## Skills\n")
	if i < 0 || i < strings.Index(p, "## How to answer") {
		t.Fatalf("the skills section is missing or not last:\n%s", p)
	}
	want := "### notes — your notes\n\n```\nistota skill notes list\n  A note.\n```\n\nOther skills: kv, whoami. `istota skill skills NAME` shows how to use one.\n"
	if !strings.HasSuffix(p, want) {
		t.Errorf("the skills section ends\n%q\nwant\n%q", p[i:], want)
	}
}
