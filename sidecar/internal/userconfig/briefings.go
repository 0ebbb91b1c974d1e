package userconfig

import (
	"strings"
	"time"
)

// Output says where a briefing is delivered.
type Output string

// The briefing outputs.
const (
	OutputTalk  Output = "talk"
	OutputEmail Output = "email"
	OutputBoth  Output = "both"
)

// Component is one section of a briefing.
type Component string

// The briefing components.
const (
	ComponentCalendar  Component = "calendar"
	ComponentTodos     Component = "todos"
	ComponentEmail     Component = "email"
	ComponentNotes     Component = "notes"
	ComponentReminders Component = "reminders"
	ComponentNews      Component = "news" // headlines from Feeds
	// ComponentMarkets: futures before noon, index closes from noon, from the quote
	// source the administrator configures.
	ComponentMarkets Component = "markets"
)

// Components lists every briefing component.
func Components() []Component {
	return []Component{ComponentCalendar, ComponentTodos, ComponentEmail, ComponentNotes, ComponentReminders, ComponentNews, ComponentMarkets}
}

// BriefingsFile is the valid content of BRIEFINGS.md.
type BriefingsFile struct {
	Briefings []Briefing
}

// Briefing is one named briefing of BRIEFINGS.md, run on Schedule in the user's
// time zone.
type Briefing struct {
	Name       string
	Line       int    // line of the briefing's [[briefings]] header
	Schedule   string // five cron fields or a descriptor; parse it with ParseSchedule
	Output     Output // default talk
	Target     Target // Conversation only with talk/both, Email only with email/both
	Components []Component
	Feeds      []string // http(s) feed URLs, required by and only allowed with news
	Enabled    bool     // default true
}

const briefingKeys = "name, schedule, output, conversation, email, components, feeds, enabled"

// ParseBriefings parses BRIEFINGS.md: [[briefings]] tables inside the first
// ```toml block (or the whole file when it has none). Briefings with a problem
// are left out.
func ParseBriefings(src []byte) (BriefingsFile, []Problem) {
	return ParseBriefingsWith(src, BriefingDefaults{})
}

// BriefingDefaults are the administrator's defaults that a BRIEFINGS.md may lean on.
type BriefingDefaults struct {
	// Components are given to a briefing that lists none (the key left out).
	Components []Component
	// Feeds are read by every news component besides the briefing's own feeds, so a
	// briefing with news may list none of its own when these exist.
	Feeds []string
}

// ParseBriefingsWith is ParseBriefings for a server whose administrator set
// defaults: without them a briefing must name its components, and news its feeds.
// The returned Feeds are the briefing's own; merging the defaults' feeds is the
// caller's business.
func ParseBriefingsWith(src []byte, defaults BriefingDefaults) (BriefingsFile, []Problem) {
	doc, problems := decode(src)
	if problems != nil {
		return BriefingsFile{}, problems
	}
	entries, ps := doc.entries("briefings", "briefing")
	problems = append(problems, ps...)
	var out BriefingsFile
	seen := names{}
	for _, e := range entries {
		b := Briefing{
			Line:     e.line,
			Name:     e.name("briefing"),
			Schedule: e.str("schedule"),
			Output:   Output(e.str("output")),
			Target:   Target{Conversation: e.conversation("conversation"), Email: e.email("email")},
			Enabled:  e.boolean("enabled", true),
		}
		if b.Name != "" {
			seen.check(e, b.Name, "briefing")
		}
		if _, ok := e.m["schedule"]; !ok {
			e.fail("schedule", `is missing; write five fields like "0 7 * * 1-5" or "@daily"`)
		} else if !e.failed("schedule") {
			// The user's zone is applied by the caller; UTC validates the same fields.
			if _, err := ParseSchedule(b.Schedule, time.UTC); err != nil {
				e.fail("schedule", "%v", err)
			}
		}
		switch b.Output {
		case "":
			if !e.failed("output") {
				b.Output = OutputTalk
			}
		case OutputTalk, OutputEmail, OutputBoth:
		default:
			e.fail("output", "%q must be talk, email or both", b.Output)
		}
		if b.Target.Conversation != "" && b.Output == OutputEmail {
			e.fail("conversation", "is set but output is email; use output = \"both\" to post in Talk too")
		}
		if b.Target.Email != "" && b.Output == OutputTalk {
			e.fail("email", "is set but output is talk; use output = \"both\" to send an e-mail too")
		}
		if _, given := e.m["components"]; !given && len(defaults.Components) > 0 {
			b.Components = append([]Component(nil), defaults.Components...)
		} else {
			b.Components = e.components()
		}
		b.Feeds = e.strList("feeds")
		hasNews := false
		for _, c := range b.Components {
			hasNews = hasNews || c == ComponentNews
		}
		if !e.failed("feeds") {
			switch {
			case hasNews && len(b.Feeds) == 0 && len(defaults.Feeds) == 0:
				e.fail("feeds", "the news component needs at least one feed URL")
			case !hasNews && len(b.Feeds) > 0:
				e.fail("feeds", "feeds are only read by the news component; add \"news\" to components")
			}
			dup := map[string]bool{}
			for _, f := range b.Feeds {
				if err := checkWebURL(f); err != nil {
					e.fail("feeds", "%v", err)
				} else if dup[f] {
					e.fail("feeds", "%q is listed twice", f)
				}
				dup[f] = true
			}
		}
		e.unknownKeys(briefingKeys)
		if e.bad() {
			problems = append(problems, e.problems...)
			continue
		}
		out.Briefings = append(out.Briefings, b)
	}
	return out, sortProblems(problems)
}

func (e *entry) components() []Component {
	list := e.strList("components")
	if e.failed("components") {
		return nil
	}
	all := Components()
	names := make([]string, len(all))
	for i, c := range all {
		names[i] = string(c)
	}
	if len(list) == 0 {
		e.fail("components", "a briefing needs at least one component: %s", strings.Join(names, ", "))
		return nil
	}
	var out []Component
	seen := map[Component]bool{}
	for _, s := range list {
		c := Component(strings.ToLower(s))
		known := false
		for _, k := range all {
			known = known || c == k
		}
		switch {
		case !known:
			e.fail("components", "%q is not a component; use %s", s, strings.Join(names, ", "))
		case seen[c]:
			e.fail("components", "%q is listed twice", s)
		default:
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}
