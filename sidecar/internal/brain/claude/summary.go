package claude

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// summaryMax caps a tool-use summary (in runes): enough to recognise a command or path
// in a Talk progress line, short enough never to flood it.
const summaryMax = 200

// SummarizeToolUse is a short human summary of a tool call: the command for Bash, the
// path for file tools, the URL for WebFetch, the query for searches, else the first
// telling string field of the input, else the compact input JSON. Whitespace is folded
// to single spaces and the result is at most about 200 characters.
func SummarizeToolUse(name string, input json.RawMessage) string {
	var fields map[string]any
	if err := json.Unmarshal(input, &fields); err != nil || fields == nil {
		return clip(string(input), summaryMax)
	}
	str := func(key string) string {
		if s, ok := fields[key].(string); ok {
			return s
		}
		return ""
	}
	join := func(a, sep, b string) string {
		if a == "" || b == "" {
			return a + b
		}
		return a + sep + b
	}

	var s string
	switch name {
	case "Bash", "BashOutput", "PowerShell":
		s = str("command")
	case "Read", "Write", "Edit", "MultiEdit":
		s = str("file_path")
	case "NotebookEdit", "NotebookRead":
		s = str("notebook_path")
	case "Glob", "Grep":
		s = join(str("pattern"), " in ", str("path"))
	case "WebFetch":
		s = str("url")
	case "WebSearch":
		s = str("query")
	case "Task", "Agent":
		s = join(str("subagent_type"), ": ", str("description"))
	case "Skill":
		s = join(str("skill"), " ", str("args"))
	case "TodoWrite":
		if todos, ok := fields["todos"].([]any); ok {
			s = strconv.Itoa(len(todos)) + " items"
		}
	}
	if s == "" {
		for _, key := range []string{"command", "file_path", "path", "url", "query", "pattern", "description", "prompt", "name"} {
			if s = str(key); s != "" {
				break
			}
		}
	}
	if s == "" {
		b, err := json.Marshal(fields)
		if err != nil {
			return ""
		}
		s = string(b)
	}
	return clip(s, summaryMax)
}

// clip folds whitespace runs to one space, trims, and cuts s to at most max runes,
// marking a cut with "…".
func clip(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	n := 0
	for i := range s {
		if n == max-1 {
			return s[:i] + "…"
		}
		n++
	}
	return s
}
