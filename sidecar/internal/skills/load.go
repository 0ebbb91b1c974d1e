package skills

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// Load says when a skill's usage is put into the agent's prompt up front, so prompts
// carry only the skills a request is likely to need. It never decides whether a skill
// may be called: "istota skill skills" lists, and the proxy runs, every skill the user
// may use. A skill whose Load is zero is named in the prompt but not described.
type Load struct {
	// Needs lists resources the task must all have before any rule below can describe
	// the skill: the mailbox skill is described only for a user who connected a
	// mailbox, however much the request talks about mail.
	Needs []string
	// Always describes the skill in every prompt.
	Always bool
	// Resources describes it when the task has one of these resources (Resource*).
	Resources []string
	// Keywords describes it when a word of the request starts with one of these
	// (lower case; "remind" matches "reminders"). A keyword of several words matches
	// those words in a row.
	Keywords []string
}

// Resources a task can have; the executor says which ones a task has.
const (
	// ResourceEmail: the task came by e-mail.
	ResourceEmail = "email"
	// ResourceTalk: the task came from a Talk conversation.
	ResourceTalk = "talk"
	// ResourceMailbox: the user connected their own mailbox (package mailbox).
	ResourceMailbox = "mailbox"
)

// Request is what the choice of skills for a prompt looks at.
type Request struct {
	Text      string   // the request, as the user wrote it
	Resources []string // the task's resources (Resource*)
	IsAdmin   bool
}

// ForPrompt returns the skills to describe in the prompt for req (Load matched) and
// the other skills the user may use, each sorted by name. Admin-only skills are in
// neither list for users who are not admins.
func (r *Registry) ForPrompt(req Request) (described, others []Skill) {
	words := " " + strings.Join(strings.FieldsFunc(strings.ToLower(req.Text), func(c rune) bool {
		return !unicode.IsLetter(c) && !unicode.IsDigit(c)
	}), " ")
	for _, s := range r.Available(req.IsAdmin) {
		if s.Load.matches(words, req.Resources) {
			described = append(described, s)
		} else {
			others = append(others, s)
		}
	}
	return described, others
}

// matches reports whether l selects a skill for a request whose words, lower case,
// are joined by single spaces after a leading space.
func (l Load) matches(words string, resources []string) bool {
	for _, res := range l.Needs {
		if !slices.Contains(resources, res) {
			return false
		}
	}
	if l.Always {
		return true
	}
	for _, res := range l.Resources {
		if slices.Contains(resources, res) {
			return true
		}
	}
	for _, k := range l.Keywords {
		if strings.Contains(words, " "+k) {
			return true
		}
	}
	return false
}

func (l Load) validate() error {
	for _, res := range slices.Concat(l.Needs, l.Resources) {
		if !nameRE.MatchString(res) {
			return fmt.Errorf("load resource %q must match %s", res, nameRE)
		}
	}
	for _, k := range l.Keywords {
		norm := strings.Join(strings.FieldsFunc(strings.ToLower(k), func(c rune) bool {
			return !unicode.IsLetter(c) && !unicode.IsDigit(c)
		}), " ")
		if k == "" || norm != k {
			return fmt.Errorf("load keyword %q must be lower-case words separated by single spaces", k)
		}
	}
	return nil
}

// Synopsis is the skill's usage as the agent reads it: the lines that start with the
// skill's name as commands ("istota skill …"), the others as notes below them.
func (s Skill) Synopsis() string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s.Usage, "\n"), "\n") {
		switch {
		case line == s.Name || strings.HasPrefix(line, s.Name+" "):
			fmt.Fprintf(&b, "istota skill %s\n", line)
		case line != "":
			fmt.Fprintf(&b, "  %s\n", line)
		}
	}
	return b.String()
}
