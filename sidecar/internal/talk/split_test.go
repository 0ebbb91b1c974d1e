package talk

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

var markerRE = regexp.MustCompile(`\n\n\((\d+)/(\d+)\)$`)

// checkParts verifies the properties every split must have and returns the bodies with
// their markers removed.
func checkParts(t *testing.T, text string, limit int, parts []string) []string {
	t.Helper()
	if len(parts) == 0 {
		t.Fatal("no parts")
	}
	bodies := make([]string, len(parts))
	for i, p := range parts {
		if n := utf8.RuneCountInString(p); n > limit {
			t.Fatalf("part %d has %d runes, limit %d", i+1, n, limit)
		}
		if utf8.ValidString(text) && !utf8.ValidString(p) {
			t.Fatalf("part %d is not valid UTF-8: %q", i+1, p)
		}
		bodies[i] = p
		// Markers are left out only when they would not leave minMarkedBody runes.
		digits := len(fmt.Sprint(len(parts)))
		if len(parts) > 1 && limit-5-2*digits >= minMarkedBody {
			m := markerRE.FindStringSubmatch(p)
			if m == nil || m[1] != fmt.Sprint(i+1) || m[2] != fmt.Sprint(len(parts)) {
				t.Fatalf("part %d lacks marker (%d/%d): ...%q", i+1, i+1, len(parts), p[max(0, len(p)-20):])
			}
			bodies[i] = strings.TrimSuffix(p, m[0])
		}
	}
	return bodies
}

func squeeze(s string) string { return strings.Join(strings.Fields(s), "") }

func TestSplitFits(t *testing.T) {
	for _, text := range []string{"", "short", strings.Repeat("é", 100)} {
		got := Split(text, 100)
		if len(got) != 1 || got[0] != text {
			t.Fatalf("Split(%q) = %q, want it unchanged", text, got)
		}
	}
	// Surrounding whitespace does not count: Talk trims it too.
	if got := Split("\n\n"+strings.Repeat("a", 100)+"\n\n", 100); len(got) != 1 || got[0] != strings.Repeat("a", 100) {
		t.Fatalf("got %q", got)
	}
}

func TestSplitPrefersParagraphsThenLinesThenWords(t *testing.T) {
	para := strings.Repeat("word ", 12) // 60 runes
	cases := []struct {
		name  string
		text  string
		limit int
		want  []string // bodies without markers
	}{
		{"paragraphs", para + "\n\n" + para + "\n\n" + para, 140,
			[]string{strings.TrimSpace(para + "\n\n" + para), strings.TrimSpace(para)}},
		{"lines when no paragraph fits", strings.Repeat("line of text here\n", 8), 60,
			[]string{"line of text here\nline of text here\nline of text here", "line of text here\nline of text here\nline of text here", "line of text here\nline of text here"}},
		{"words when no line fits", strings.Repeat("abcdefghi ", 10), 40,
			[]string{"abcdefghi abcdefghi abcdefghi", "abcdefghi abcdefghi abcdefghi", "abcdefghi abcdefghi abcdefghi", "abcdefghi"}},
		{"hard cut inside a long word", strings.Repeat("x", 50), 30,
			[]string{strings.Repeat("x", 23), strings.Repeat("x", 23), "xxxx"}},
		{"crlf line endings", strings.Repeat("line of text here\r\n", 4), 50,
			[]string{"line of text here\r\nline of text here", "line of text here\r\nline of text here"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parts := Split(c.text, c.limit)
			got := checkParts(t, c.text, c.limit, parts)
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", c.want) {
				t.Fatalf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestSplitNeverCutsInsideARune(t *testing.T) {
	text := strings.Repeat("😀", 100) // 4 bytes each, no breaks at all
	parts := Split(text, 33)
	bodies := checkParts(t, text, 33, parts)
	if got := strings.Join(bodies, ""); got != text {
		t.Fatalf("content changed: %q", got)
	}
}

func TestSplitKeepsCodeBlocksWhole(t *testing.T) {
	intro := strings.Repeat("Some intro text. ", 3)
	code := "```go\n" + strings.Repeat("fmt.Println(1)\n", 5) + "```"
	text := intro + "\n\n" + code + "\n\nAfter the block."
	parts := Split(text, len(code)+20)
	bodies := checkParts(t, text, len(code)+20, parts)
	found := false
	for _, b := range bodies {
		if strings.Contains(b, code) {
			found = true
		}
		if strings.Count(b, "```")%2 != 0 {
			t.Fatalf("part with an unbalanced fence: %q", b)
		}
	}
	if !found {
		t.Fatalf("code block was cut although it fits a part: %q", bodies)
	}
}

func TestSplitReopensLongCodeBlocks(t *testing.T) {
	var lines []string
	for i := range 40 {
		lines = append(lines, fmt.Sprintf("    line_%02d = compute(%d)", i, i))
	}
	text := "Here is the code:\n\n```python\n" + strings.Join(lines, "\n") + "\n```\n\nDone."
	limit := 300
	parts := Split(text, limit)
	bodies := checkParts(t, text, limit, parts)
	if len(bodies) < 3 {
		t.Fatalf("expected several parts, got %d", len(bodies))
	}
	var all strings.Builder
	for i, b := range bodies {
		if strings.Count(b, "```")%2 != 0 {
			t.Fatalf("part %d has an unbalanced fence:\n%s", i+1, b)
		}
		if i > 0 && strings.Contains(b, "line_") && !strings.HasPrefix(b, "```python\n") && !strings.HasPrefix(b, "Done") {
			t.Fatalf("part %d continues code without reopening the fence:\n%s", i+1, b)
		}
		all.WriteString(b + "\n")
	}
	// Every code line survives, intact and in order, with its indentation.
	joined := all.String()
	last := -1
	for _, l := range lines {
		at := strings.Index(joined, l+"\n")
		if at < 0 || at < last {
			t.Fatalf("line %q missing or out of order", l)
		}
		last = at
	}
	if !strings.HasSuffix(bodies[len(bodies)-1], "Done.") {
		t.Fatalf("last part: %q", bodies[len(bodies)-1])
	}
}

func TestSplitMarkersFitTheLimit(t *testing.T) {
	// Enough parts for two-digit markers: the budget must shrink to fit "(10/12)".
	text := strings.Repeat("abcdefghij ", 120)
	for _, limit := range []int{30, 64, 100, 1000} {
		parts := Split(text, limit)
		bodies := checkParts(t, text, limit, parts)
		if squeeze(strings.Join(bodies, "")) != squeeze(text) {
			t.Fatalf("limit %d: content changed", limit)
		}
	}
}

func TestSplitTinyLimitWithoutMarkers(t *testing.T) {
	parts := Split("abcdefghijklmnopqrstuvwxyz", 5)
	if strings.Join(parts, "") != "abcdefghijklmnopqrstuvwxyz" {
		t.Fatalf("got %q", parts)
	}
	for _, p := range parts {
		if utf8.RuneCountInString(p) > 5 {
			t.Fatalf("part %q over the limit", p)
		}
	}
}

func TestSplitMaxMessageLength(t *testing.T) {
	text := strings.Repeat("Ünïcödé paragraph text. ", 2000) // 48000 runes, more bytes
	parts := Split(text, 0)
	bodies := checkParts(t, text, MaxMessageLength, parts)
	if len(parts) != 2 {
		t.Fatalf("got %d parts, want 2", len(parts))
	}
	if squeeze(strings.Join(bodies, "")) != squeeze(text) {
		t.Fatal("content changed")
	}
}

func FuzzSplit(f *testing.F) {
	f.Add("hello world\n\nsecond paragraph", 12)
	f.Add("```\ncode code code\n```\ntext", 20)
	f.Add("~~~~js\na\nb\nc\n~~~~", 17)
	f.Add(strings.Repeat("é ", 40), 19)
	f.Add("a\r\n\r\nb\xff\xfe c", 3)
	f.Fuzz(func(t *testing.T, text string, limit int) {
		if limit <= 0 || limit > 500 || len(text) > 4000 {
			return
		}
		parts := Split(text, limit)
		bodies := checkParts(t, text, limit, parts)
		// Without fences nothing is added or lost except whitespace at the cuts.
		if !strings.Contains(text, "```") && !strings.Contains(text, "~~~") && len(parts) > 1 {
			if squeeze(strings.Join(bodies, "")) != squeeze(text) {
				t.Fatalf("content changed:\n%q\n%q", text, bodies)
			}
		}
	})
}
