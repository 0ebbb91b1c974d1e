package userconfig

import (
	"bytes"
	"strings"
)

// The configuration files live in the user's Nextcloud folder and are edited in
// Nextcloud's Markdown editor, so they are Markdown first: prose and HTML comments
// (which the editor hides, and which the seeded files use for their explanations)
// around the data. The scanner below walks the file once, line by line, and knows
// which bytes are inside an HTML comment or a fenced code block, so that neither a
// commented-out example nor a code sample is ever taken for real configuration.

// mdLine is one line of the original file with what the scanner learned about it.
type mdLine struct {
	start   int    // byte offset of the line in the original file
	text    string // the line without its line ending
	visible string // text with HTML comment parts replaced by spaces; "" inside fences
	inFence bool   // inside a fenced code block (fence lines themselves excluded)
	fenceID int    // which fence (1-based) for inFence lines and fence delimiters
	isFence bool   // an opening or closing fence line
	info    string // info string of an opening fence, lower-cased
}

// scanMarkdown splits src into lines and classifies them. It never fails: an
// unclosed comment runs to the end of the file, as in HTML, and an unclosed fence
// runs to the end of the file, as in CommonMark.
func scanMarkdown(src []byte) []mdLine {
	var lines []mdLine
	inComment := false
	fenceChar, fenceLen, fenceID := byte(0), 0, 0
	for off := 0; off <= len(src); {
		end := bytes.IndexByte(src[off:], '\n')
		next := 0
		if end < 0 {
			end = len(src)
			next = len(src) + 1
		} else {
			end += off
			next = end + 1
		}
		text := strings.TrimSuffix(string(src[off:end]), "\r")
		l := mdLine{start: off, text: text}
		switch {
		case fenceLen > 0:
			if c, n, rest := fenceDelim(text); c == fenceChar && n >= fenceLen && strings.TrimSpace(rest) == "" {
				l.isFence, l.fenceID = true, fenceID
				fenceChar, fenceLen = 0, 0
			} else {
				l.inFence, l.fenceID = true, fenceID
			}
		case !inComment:
			if c, n, rest := fenceDelim(text); n > 0 && !(c == '`' && strings.Contains(rest, "`")) {
				fenceID++
				fenceChar, fenceLen = c, n
				l.isFence, l.fenceID = true, fenceID
				l.info = strings.ToLower(firstWord(rest))
				break
			}
			fallthrough
		default:
			l.visible, inComment = stripComments(text, inComment)
		}
		lines = append(lines, l)
		off = next
	}
	return lines
}

// fenceDelim reports whether line opens or closes a code fence: up to three spaces,
// then three or more backticks or tildes. It returns the fence character, the run
// length (0 when the line is no fence) and what follows the run.
func fenceDelim(line string) (byte, int, string) {
	i := 0
	for i < len(line) && i < 3 && line[i] == ' ' {
		i++
	}
	if i >= len(line) || (line[i] != '`' && line[i] != '~') {
		return 0, 0, ""
	}
	c := line[i]
	n := 0
	for i+n < len(line) && line[i+n] == c {
		n++
	}
	if n < 3 {
		return 0, 0, ""
	}
	return c, n, line[i+n:]
}

func firstWord(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// stripComments replaces every part of line inside an HTML comment with spaces, so
// that columns and line numbers stay where they were, and reports whether a comment
// is still open at the end of the line.
func stripComments(line string, inComment bool) (string, bool) {
	if !inComment && !strings.Contains(line, "<!--") {
		return line, false
	}
	b := []byte(line)
	for i := 0; i < len(b); {
		if inComment {
			j := strings.Index(line[i:], "-->")
			if j < 0 {
				blank(b[i:])
				return string(b), true
			}
			blank(b[i : i+j+3])
			i += j + 3
			inComment = false
			continue
		}
		j := strings.Index(line[i:], "<!--")
		if j < 0 {
			break
		}
		i += j
		blank(b[i : i+4])
		i += 4
		inComment = true
	}
	return string(b), inComment
}

func blank(b []byte) {
	for i := range b {
		b[i] = ' '
	}
}

// tomlText returns the TOML part of a Markdown configuration file: the contents of
// the first ```toml fenced block outside HTML comments, or, when there is no such
// block, the whole file with HTML comments blanked out. Every other line is emptied
// rather than dropped, so a line number in the returned text is the line number in
// the original file.
func tomlText(src []byte) string {
	lines := scanMarkdown(src)
	id := 0
	for _, l := range lines {
		if l.isFence && l.info == "toml" {
			id = l.fenceID
			break
		}
	}
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		switch {
		case id != 0:
			if l.inFence && l.fenceID == id {
				b.WriteString(l.text)
			}
		case l.inFence:
			// The whole file is TOML: fenced lines count as they are.
			b.WriteString(l.text)
		case !l.isFence:
			b.WriteString(l.visible)
		}
	}
	return b.String()
}
