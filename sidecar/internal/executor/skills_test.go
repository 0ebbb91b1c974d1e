package executor

import (
	"context"
	"strings"
	"testing"

	"github.com/istota/istota/sidecar/internal/brain"
	"github.com/istota/istota/sidecar/internal/kv"
	"github.com/istota/istota/sidecar/internal/notes"
	"github.com/istota/istota/sidecar/internal/skills"
)

// promptFor runs one Talk task with the real skills registry and returns its prompt.
func promptFor(t *testing.T, request string) string {
	t.Helper()
	reg := skills.NewRegistry()
	b := &scriptedBrain{result: brain.Result{OK: true, Text: "ok"}}
	e := newEnv(t, b, func(o *Options) { o.Skills = reg })
	if err := skills.RegisterBuiltins(reg, kv.New(e.db, nil), nil); err != nil {
		t.Fatal(err)
	}
	if err := notes.Register(reg, notes.Options{Root: func(string) (string, error) { return t.TempDir(), nil }}); err != nil {
		t.Fatal(err)
	}
	nop := func(context.Context, skills.Invocation) skills.Result { return skills.Result{} }
	for _, s := range []skills.Skill{
		{Manifest: skills.Manifest{Name: "admintool", Summary: "for admins", Usage: "admintool", AdminOnly: true, Load: skills.Load{Always: true}}, Run: nop},
		{Manifest: skills.Manifest{Name: "roomtool", Summary: "for conversations", Usage: "roomtool", Load: skills.Load{Resources: []string{skills.ResourceTalk}}}, Run: nop},
		{Manifest: skills.Manifest{Name: "mailtool", Summary: "for mail tasks", Usage: "mailtool", Load: skills.Load{Resources: []string{skills.ResourceEmail}}}, Run: nop},
	} {
		if err := reg.Register(s); err != nil {
			t.Fatal(err)
		}
	}
	e.ex.Handle(context.Background(), e.talkTask(t, request))
	if b.got.Prompt == "" {
		t.Fatal("the agent got no prompt")
	}
	return b.got.Prompt
}

func TestPromptDescribesTheSkillsTheRequestNeeds(t *testing.T) {
	p := promptFor(t, "Please put 'buy milk' in my Notes")
	skillsPart := p[strings.Index(p, "\n## Skills\n"):]
	for _, w := range []string{
		"### notes — list, read, search and write the notes in your notes/ folder",
		"istota skill notes add NAME [TEXT…]",
		"### roomtool — for conversations", // a Talk task has the talk resource
	} {
		if !strings.Contains(skillsPart, w) {
			t.Errorf("the skills part lacks %q:\n%s", w, skillsPart)
		}
	}
	if !strings.Contains(skillsPart, "Other skills: kv, mailtool, skills, whoami.") {
		t.Errorf("the other skills are not named:\n%s", skillsPart)
	}
	for _, bad := range []string{"### kv", "istota skill kv get", "admintool", "### mailtool"} {
		if strings.Contains(p, bad) {
			t.Errorf("the prompt has %q:\n%s", bad, skillsPart)
		}
	}
}

func TestPromptLeavesOutSkillsAnUnrelatedRequestDoesNotNeed(t *testing.T) {
	p := promptFor(t, "what is 1+1?")
	if strings.Contains(p, "### notes") || strings.Contains(p, "istota skill notes add") {
		t.Errorf("an unrelated request got the notes skill's usage:\n%s", p)
	}
	if !strings.Contains(p, "Other skills: kv, mailtool, notes, skills, whoami.") {
		t.Errorf("the skills are not named:\n%s", p)
	}
	if strings.Contains(p, "admintool") {
		t.Errorf("a user who is not an admin sees an admin-only skill")
	}
}
