package prompt

import (
	"embed"
	"fmt"
	"regexp"
	"strings"
)

// GuidesVersion is the version of the guides in guides/: raise it with every change to
// their text, so a prompt (and a golden test) says which the agent was given.
const GuidesVersion = 1

//go:embed guides/*.md
var guideFiles embed.FS

// guide is one of the user's configuration files the agent may edit, and the words that
// make a request likely to be about it.
type guide struct {
	file  string
	about *regexp.Regexp
}

// guides are in the order they are shown. The patterns lean towards showing a guide
// too often rather than too rarely: a few hundred tokens against a job never written.
var guides = []guide{
	{"CRON.md", regexp.MustCompile(`(?i)cron|remind|erinner|schedul|\bevery\b|\beach (day|morning|evening|night|week|month)|daily|weekly|monthly|jeden|jede|täglich|wöchentlich|monatlich|(mon|tues|wednes|thurs|fri|satur|sun)days\b|montags|dienstags|mittwochs|donnerstags|freitags|samstags|sonntags|\bat \d{1,2}(:\d\d)?\s*(am|pm)?\b`)},
	{"HEARTBEAT.md", regexp.MustCompile(`(?i)heartbeat|monitor|überwach|\bwatch|\balert|warn me|tell me (when|if)|let me know (when|if)|notify me|sag mir (wenn|falls|bescheid)|\b(is|goes) (down|up)\b|uptime|erreichbar|deadline|overdue|conflict|clash`)},
	{"BRIEFINGS.md", regexp.MustCompile(`(?i)briefing|digest|summary|summari[sz]e|zusammenfassung|headlines|news|nachrichten|morning (update|overview)`)},
	{"TASKS.md", regexp.MustCompile(`(?i)tasks\.md|to-?do|task list|aufgabe|\bdue\b`)},
}

// GuidesFor returns the guides of the configuration files a request is likely about,
// rendered for the prompt: configDir is where the files are inside the sandbox (e.g.
// /workspace/istota/config). A request that names none gets none.
func GuidesFor(request, configDir string) []string {
	var out []string
	for _, g := range guides {
		if !strings.Contains(strings.ToUpper(request), g.file) && !g.about.MatchString(request) {
			continue
		}
		b, err := guideFiles.ReadFile("guides/" + g.file)
		if err != nil {
			continue // cannot happen: the files are embedded and tested
		}
		text := strings.ReplaceAll(strings.TrimSpace(string(b)), "{config}", configDir)
		out = append(out, fmt.Sprintf("### %s (guide v%d)\n\n%s", g.file, GuidesVersion, text))
	}
	return out
}
