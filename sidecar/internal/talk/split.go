package talk

import (
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// minMarkedBody is the smallest body budget for which "(i/n)" markers are worth adding;
// below it Split cuts without markers.
const minMarkedBody = 16

// Split cuts text into parts of at most limit characters (runes, as Talk counts them).
// A text that fits is returned unchanged as the only part. Otherwise it prefers to cut at
// a paragraph break, then a line break, then between words, and only as a last resort
// inside a word; it never cuts inside a UTF-8 sequence. It keeps fenced code blocks
// whole when it can; when a block is longer than a part it closes the fence at the end
// of one part and reopens it (with its info string) at the start of the next, so every
// part renders as code. Each part of a split text ends with a "(i/n)" marker on its own
// line, counted in the limit. limit <= 0 means MaxMessageLength.
func Split(text string, limit int) []string {
	if limit <= 0 {
		limit = MaxMessageLength
	}
	if utf8.RuneCountInString(text) <= limit {
		return []string{text}
	}
	text = strings.TrimSpace(text)
	if utf8.RuneCountInString(text) <= limit {
		return []string{text}
	}
	// The marker's width depends on the number of parts, which depends on the budget the
	// marker leaves: grow the assumed digit count until the result agrees with it.
	for digits := 1; ; digits++ {
		markerLen := len("\n\n(/)") + 2*digits
		body := limit - markerLen
		if body < minMarkedBody {
			return splitBody(text, limit)
		}
		parts := splitBody(text, body)
		if len(strconv.Itoa(len(parts))) > digits {
			continue
		}
		if len(parts) == 1 {
			return parts
		}
		for i := range parts {
			parts[i] += "\n\n(" + strconv.Itoa(i+1) + "/" + strconv.Itoa(len(parts)) + ")"
		}
		return parts
	}
}

// splitBody cuts text into parts of at most limit runes, without markers.
func splitBody(text string, limit int) []string {
	var parts []string
	rest := text
	for {
		rest = strings.TrimLeft(rest, "\r\n")
		if rest == "" {
			return parts
		}
		if fits(rest, limit) {
			if p := strings.TrimRight(rest, " \t\r\n"); p != "" {
				parts = append(parts, p)
			}
			return parts
		}
		part, next := cutOnce(rest, limit)
		if p := strings.TrimRight(part, " \t\r\n"); p != "" {
			parts = append(parts, p)
		}
		rest = next
	}
}

type cutKind int

const (
	cutWord cutKind = iota
	cutLine
	cutParagraph
)

// cut is a place where a part may end: the part is rest[:end], the remainder starts at
// rest[next:], and runes is the rune count of rest[:end].
type cut struct {
	end, next, runes int
	kind             cutKind
}

// fence is a fenced code block: the opening line starts at start and ends at openEnd
// (its '\n' or the end of text); the closing line starts at closeStart and ends at end.
// An unclosed fence runs to the end of the text.
type fence struct {
	start, openEnd, closeStart, end int
	marker                          string // the opening run of ` or ~, reused to close
	openLine                        string // reused to reopen, info string included
}

func (f fence) contains(pos int) bool { return pos >= f.start && pos < f.end }

// cutOnce returns the first part of rest (longer than limit runes) and the remainder.
func cutOnce(rest string, limit int) (part, next string) {
	cuts := candidateCuts(rest, limit)
	hard := runeOffset(rest, limit)
	fences := findFences(rest, hard)
	inFence := func(pos int) (fence, bool) {
		// Fences are sorted and disjoint: only the last one starting at or before pos
		// can contain it.
		i := sort.Search(len(fences), func(i int) bool { return fences[i].start > pos }) - 1
		if i >= 0 && fences[i].contains(pos) {
			return fences[i], true
		}
		return fence{}, false
	}

	// 1. Outside code blocks: the latest paragraph break in the second half of the
	// budget, else a line break there, else a word break there, else the latest break of
	// any kind (a short part beats cutting into a code block).
	var outside []cut
	for _, c := range cuts {
		if c.end > 0 {
			if _, in := inFence(c.end); !in {
				outside = append(outside, c)
			}
		}
	}
	for _, kind := range []cutKind{cutParagraph, cutLine, cutWord} {
		if c, ok := latest(outside, func(c cut) bool { return c.kind >= kind && c.runes*2 >= limit }); ok {
			return rest[:c.end], rest[c.next:]
		}
	}
	if c, ok := latest(outside, func(cut) bool { return true }); ok {
		return rest[:c.end], rest[c.next:]
	}

	// 2. The budget ends inside a code block: cut it at a line (else word, else rune)
	// boundary, close it, and reopen it in the next part.
	if f, in := inFence(hard); in {
		budget := limit - 1 - len(f.marker) // room for "\n" + closing marker
		inner := func(c cut) bool { return c.end > f.openEnd && c.end < f.closeStart && c.runes <= budget }
		c, ok := latest(cuts, func(c cut) bool { return c.kind >= cutLine && inner(c) })
		if !ok {
			c, ok = latest(cuts, inner)
		}
		if !ok && budget > 0 {
			if h := runeOffset(rest, budget); h > f.openEnd+1 && h < f.closeStart {
				c, ok = cut{end: h, next: h}, true
			}
		}
		if ok {
			part = strings.TrimRight(rest[:c.end], " \t\r\n") + "\n" + f.marker
			if strings.TrimSpace(rest[c.next:min(f.closeStart, len(rest))]) == "" {
				// Only the closing line is left: the marker just added replaces it.
				return part, rest[min(f.end, len(rest)):]
			}
			return part, f.openLine + "\n" + rest[c.next:]
		}
	}

	// 3. Nothing better: cut at the rune boundary.
	return rest[:hard], rest[hard:]
}

// latest returns the cut with the largest end that satisfies ok.
func latest(cuts []cut, ok func(cut) bool) (cut, bool) {
	for i := len(cuts) - 1; i >= 0; i-- {
		if ok(cuts[i]) {
			return cuts[i], true
		}
	}
	return cut{}, false
}

// candidateCuts lists, in order, every break whose part rest[:end] has at most limit runes.
func candidateCuts(rest string, limit int) []cut {
	var cuts []cut
	runes := 0
	for i := 0; i < len(rest) && runes <= limit; {
		switch b := rest[i]; {
		case b == '\n':
			end := i
			if end > 0 && rest[end-1] == '\r' {
				end--
			}
			next := i + 1
			kind := cutLine
			// A blank line (whitespace only) after this one makes it a paragraph break.
			if j := strings.IndexByte(rest[next:], '\n'); j >= 0 && strings.TrimSpace(rest[next:next+j]) == "" {
				kind = cutParagraph
			}
			// A '\r' dropped from the part is one byte and one rune.
			cuts = append(cuts, cut{end: end, next: next, runes: runes - (i - end), kind: kind})
		case b == ' ' || b == '\t':
			if i == 0 || (rest[i-1] != ' ' && rest[i-1] != '\t' && rest[i-1] != '\n') {
				next := i
				for next < len(rest) && (rest[next] == ' ' || rest[next] == '\t') {
					next++
				}
				cuts = append(cuts, cut{end: i, next: next, runes: runes, kind: cutWord})
			}
		}
		_, size := utf8.DecodeRuneInString(rest[i:])
		i += size
		runes++
	}
	return cuts
}

// fits reports whether s has at most limit runes, without counting past the limit.
func fits(s string, limit int) bool {
	return runeOffset(s, limit) == len(s)
}

// runeOffset returns the byte offset just after the first n runes of s (len(s) if shorter).
func runeOffset(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}

// findFences finds fenced code blocks (``` or ~~~, indented at most three spaces) up to
// byte upTo; nothing later matters for the current cut. A block still open at upTo is
// reported as running to the end of s, whether or not it closes later.
func findFences(s string, upTo int) []fence {
	var out []fence
	var cur *fence
	for lineStart := 0; lineStart < len(s) && lineStart <= upTo; {
		lineEnd := strings.IndexByte(s[lineStart:], '\n')
		if lineEnd < 0 {
			lineEnd = len(s)
		} else {
			lineEnd += lineStart
		}
		line := strings.TrimRight(s[lineStart:lineEnd], "\r")
		if cur == nil {
			if m := fenceMarker(line); m != "" {
				cur = &fence{start: lineStart, openEnd: lineEnd, marker: m, openLine: line}
			}
		} else if isFenceClose(line, cur.marker) {
			cur.closeStart, cur.end = lineStart, lineEnd
			out = append(out, *cur)
			cur = nil
		}
		lineStart = lineEnd + 1
	}
	if cur != nil {
		cur.closeStart, cur.end = len(s), len(s)
		out = append(out, *cur)
	}
	return out
}

func fenceMarker(line string) string {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 {
		return ""
	}
	for _, ch := range []byte{'`', '~'} {
		n := 0
		for n < len(t) && t[n] == ch {
			n++
		}
		if n >= 3 {
			// CommonMark: a backtick fence's info string may not contain a backtick.
			if ch == '`' && strings.IndexByte(t[n:], '`') >= 0 {
				return ""
			}
			return t[:n]
		}
	}
	return ""
}

func isFenceClose(line, marker string) bool {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 {
		return false
	}
	n := 0
	for n < len(t) && t[n] == marker[0] {
		n++
	}
	return n >= len(marker) && strings.TrimSpace(t[n:]) == ""
}
