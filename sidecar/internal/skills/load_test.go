package skills

import (
	"context"
	"strings"
	"testing"
)

func names(list []Skill) string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = s.Name
	}
	return strings.Join(out, ",")
}

func TestForPrompt(t *testing.T) {
	nop := func(context.Context, Invocation) Result { return Result{} }
	r := NewRegistry()
	for _, m := range []Manifest{
		{Name: "always", Summary: "s", Load: Load{Always: true}},
		{Name: "bymail", Summary: "s", Load: Load{Resources: []string{ResourceEmail}}},
		{Name: "remind", Summary: "s", Load: Load{Keywords: []string{"remind", "don t forget"}}},
		{Name: "cal", Summary: "s", Load: Load{Keywords: []string{"calendar", "termin"}}},
		{Name: "admin", Summary: "s", AdminOnly: true, Load: Load{Always: true}},
		{Name: "plain", Summary: "s"},
		{Name: "mbox", Summary: "s", Load: Load{Needs: []string{ResourceMailbox}, Keywords: []string{"mail"}}},
	} {
		if err := r.Register(Skill{Manifest: m, Run: nop}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name            string
		req             Request
		described, rest string
	}{
		{"unrelated", Request{Text: "What is 1+1?"}, "always", "bymail,cal,mbox,plain,remind"},
		{"keyword prefix", Request{Text: "Set REMINDERS for me"}, "always,remind", "bymail,cal,mbox,plain"},
		{"words in a row", Request{Text: "Don't forget the milk"}, "always,remind", "bymail,cal,mbox,plain"},
		{"not inside a word", Request{Text: "unremindful, a mocalendar"}, "always", "bymail,cal,mbox,plain,remind"},
		{"umlauts and punctuation", Request{Text: "Neuer Termin: Zahnarzt"}, "always,cal", "bymail,mbox,plain,remind"},
		{"resource", Request{Text: "hi", Resources: []string{ResourceEmail}}, "always,bymail", "cal,mbox,plain,remind"},
		{"admin", Request{Text: "hi", IsAdmin: true}, "admin,always", "bymail,cal,mbox,plain,remind"},
		{"needs unmet", Request{Text: "any new mail?"}, "always", "bymail,cal,mbox,plain,remind"},
		{"needs met, no keyword", Request{Text: "hi", Resources: []string{ResourceMailbox}}, "always", "bymail,cal,mbox,plain,remind"},
		{"needs met and keyword", Request{Text: "any new mail?", Resources: []string{ResourceMailbox}}, "always,mbox", "bymail,cal,plain,remind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, o := r.ForPrompt(tc.req)
			if names(d) != tc.described || names(o) != tc.rest {
				t.Errorf("described %q others %q, want %q and %q", names(d), names(o), tc.described, tc.rest)
			}
		})
	}
}

func TestLoadValidation(t *testing.T) {
	nop := func(context.Context, Invocation) Result { return Result{} }
	for _, l := range []Load{
		{Keywords: []string{""}}, {Keywords: []string{"Upper"}}, {Keywords: []string{"two  spaces"}}, {Keywords: []string{"don't"}},
		{Resources: []string{"Bad Resource"}}, {Needs: []string{"Bad Need"}},
	} {
		err := NewRegistry().Register(Skill{Manifest: Manifest{Name: "x", Summary: "s", Load: l}, Run: nop})
		if err == nil || !strings.Contains(err.Error(), "load") {
			t.Errorf("%+v: err = %v", l, err)
		}
	}
}

func TestSynopsis(t *testing.T) {
	s := Skill{Manifest: Manifest{Name: "notes", Usage: "notes list\nnotes read NAME\nA note.\n\n"}}
	if got, want := s.Synopsis(), "istota skill notes list\nistota skill notes read NAME\n  A note.\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
