package curation

import (
	"strings"
)

// heading is one ATX heading of a document.
type heading struct {
	line  int    // index in the document's lines
	level int    // 1 … 6
	title string // as written, without the #s
}

// fence tracks fenced code blocks while walking lines: inside one, nothing is a heading.
type fence struct {
	char  byte // '`' or '~' while open, 0 when closed
	width int
}

// indentOK reports whether line starts with at most three spaces, returning the rest.
func indentOK(line string) (string, bool) {
	n := 0
	for n < len(line) && line[n] == ' ' {
		n++
	}
	if n > 3 {
		return "", false
	}
	return line[n:], true
}

// step feeds one line to the fence tracker and reports whether the line is part of a
// fenced block (its opening and closing lines included).
func (f *fence) step(line string) bool {
	rest, ok := indentOK(line)
	if f.char != 0 {
		if ok {
			n := run(rest, f.char)
			if n >= f.width && strings.TrimSpace(rest[n:]) == "" {
				f.char = 0
			}
		}
		return true
	}
	if !ok || rest == "" || (rest[0] != '`' && rest[0] != '~') {
		return false
	}
	c := rest[0]
	n := run(rest, c)
	if n < 3 || (c == '`' && strings.ContainsRune(rest[n:], '`')) {
		return false
	}
	f.char, f.width = c, n
	return true
}

func run(s string, c byte) int {
	n := 0
	for n < len(s) && s[n] == c {
		n++
	}
	return n
}

// parseHeadingLine recognizes an ATX heading: up to three spaces, one to six '#', then a
// space, a tab or the end of the line. An optional closing run of '#' is dropped.
func parseHeadingLine(line string) (level int, title string, ok bool) {
	rest, ok := indentOK(line)
	if !ok {
		return 0, "", false
	}
	n := run(rest, '#')
	if n < 1 || n > 6 {
		return 0, "", false
	}
	rest = rest[n:]
	if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
		return 0, "", false
	}
	rest = strings.TrimSpace(rest)
	// "## Title ##": the closing sequence must be preceded by a space (or be all there is).
	if trimmed := strings.TrimRight(rest, "#"); trimmed != rest {
		if trimmed == "" {
			rest = ""
		} else if strings.HasSuffix(trimmed, " ") || strings.HasSuffix(trimmed, "\t") {
			rest = strings.TrimSpace(trimmed)
		}
	}
	return n, rest, true
}

// headings lists the document's headings, skipping fenced code.
func headings(lines []string) []heading {
	var out []heading
	var f fence
	for i, l := range lines {
		if f.step(l) {
			continue
		}
		if level, title, ok := parseHeadingLine(l); ok {
			out = append(out, heading{line: i, level: level, title: title})
		}
	}
	return out
}

// hasHeading reports whether text, read on its own, contains a heading line.
func hasHeading(text string) bool {
	return len(headings(strings.Split(text, "\n"))) > 0
}

// titleKey is how headings are compared: without #s, space-collapsed, case-folded.
func titleKey(s string) string {
	s = strings.TrimSpace(s)
	if _, title, ok := parseHeadingLine(s); ok {
		s = title
	} else {
		s = strings.TrimLeft(s, "#")
	}
	return strings.ToLower(strings.Join(strings.Fields(s), " "))
}

// findHeading returns the headings whose title matches want.
func findHeading(hs []heading, want string) []heading {
	key := titleKey(want)
	var out []heading
	for _, h := range hs {
		if titleKey(h.title) == key {
			out = append(out, h)
		}
	}
	return out
}

// sectionEnd is the line after h's section: the next heading of the same or a higher
// level (so subsections belong to it), or the end.
func sectionEnd(hs []heading, h heading, n int) int {
	for _, o := range hs {
		if o.line > h.line && o.level <= h.level {
			return o.line
		}
	}
	return n
}

// bodyEnd is the line after h's own text: the next heading of any level, or the end.
func bodyEnd(hs []heading, h heading, n int) int {
	for _, o := range hs {
		if o.line > h.line {
			return o.line
		}
	}
	return n
}

func isBlank(s string) bool { return strings.TrimSpace(s) == "" }

// isListItem reports whether a line starts a Markdown list item.
func isListItem(s string) bool {
	s = strings.TrimLeft(s, " \t")
	if len(s) >= 2 && (s[0] == '-' || s[0] == '*' || s[0] == '+') && (s[1] == ' ' || s[1] == '\t') {
		return true
	}
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n > 0 && n+1 < len(s) && (s[n] == '.' || s[n] == ')') && (s[n+1] == ' ' || s[n+1] == '\t')
}

// isBareMarker reports whether a line holds only a list marker (what is left after its
// text was removed).
func isBareMarker(s string) bool {
	t := strings.TrimSpace(s)
	if t == "-" || t == "*" || t == "+" {
		return true
	}
	n := 0
	for n < len(t) && t[n] >= '0' && t[n] <= '9' {
		n++
	}
	return n > 0 && n == len(t)-1 && (t[n] == '.' || t[n] == ')')
}

// insertBlock inserts the block's lines into lines so that it follows the last
// non-blank line before at (but not before floor, the heading line, if any), keeping
// lists together and separating everything else with one blank line.
func insertBlock(lines []string, at, floor int, block []string) []string {
	end := at
	for end > floor+1 && end > 0 && isBlank(lines[end-1]) {
		end--
	}
	var ins []string
	if end > 0 {
		prev := lines[end-1]
		switch {
		case floor >= 0 && end == floor+1:
			ins = append(ins, "") // right after the heading
		case isListItem(block[0]) && (isListItem(prev) || strings.HasPrefix(prev, "  ")):
			// continue the list
		default:
			ins = append(ins, "")
		}
	}
	ins = append(ins, block...)
	// Keep what followed (blank lines the section had, then the next heading) apart.
	rest := lines[end:]
	if len(rest) > 0 && !isBlank(rest[0]) {
		ins = append(ins, "")
	}
	out := make([]string, 0, len(lines)+len(ins))
	out = append(out, lines[:end]...)
	out = append(out, ins...)
	return append(out, rest...)
}

// squeezeBlankAt tidies the seam left where lines were removed (i is the index of the
// line that followed them): two blank lines meeting there become one, and blank lines
// left at the start or the end of the document go.
func squeezeBlankAt(lines []string, i int) []string {
	switch {
	case i == 0:
		for len(lines) > 0 && isBlank(lines[0]) {
			lines = lines[1:]
		}
	case i >= len(lines):
		for len(lines) > 0 && isBlank(lines[len(lines)-1]) {
			lines = lines[:len(lines)-1]
		}
	case isBlank(lines[i-1]) && isBlank(lines[i]):
		lines = append(lines[:i], lines[i+1:]...)
	}
	return lines
}
