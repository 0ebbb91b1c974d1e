// Package userconfig parses the configuration files a user keeps in
// /Users/{uid}/{bot}/config: CRON.md, HEARTBEAT.md, BRIEFINGS.md and TASKS.md.
//
// The parsers work on bytes only; reading the files, scheduling and running are
// elsewhere. They never stop at the first mistake: every entry that is wrong is
// reported as a Problem naming the line in the original Markdown file and the
// field, and left out, while the correct entries are returned. A file that cannot
// be read as TOML at all yields no entries and one Problem; the caller then keeps
// running the last good set and shows the user the problems.
package userconfig

import (
	"fmt"
	"sort"
)

// Problem is one mistake in a configuration file, phrased for the user who wrote it.
type Problem struct {
	Line    int    // 1-based line in the original Markdown file; 0 when no line applies
	Field   string // the TOML key at fault, "" for the file or entry as a whole
	Message string
}

// String renders the problem as "line 12: schedule: …", the form shown to users.
func (p Problem) String() string {
	s := ""
	if p.Line > 0 {
		s = fmt.Sprintf("line %d: ", p.Line)
	}
	if p.Field != "" {
		s += p.Field + ": "
	}
	return s + p.Message
}

// sortProblems orders problems by line so the user reads them top to bottom.
func sortProblems(ps []Problem) []Problem {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Line < ps[j].Line })
	return ps
}
