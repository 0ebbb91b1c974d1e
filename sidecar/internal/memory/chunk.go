package memory

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Chunk sizes, in characters (runes). Chunks end at paragraph boundaries when they can,
// else at sentence boundaries, else between words: a search hit then reads as a whole
// thought, and a chunk stays small enough for an embedding model and a prompt snippet.
const (
	// ChunkMax is the hard upper bound of a chunk.
	ChunkMax = 1200
	// ChunkMin is the size from which a chunk prefers to end at the next paragraph.
	ChunkMin = 800
	// ChunkOverlap bounds the text repeated from the end of one chunk at the start of
	// the next, so a fact that straddles a boundary is found with its context.
	ChunkOverlap = 200
	// fragmentMax bounds one packing unit: longer sentences (or lines without any
	// sentence end, or CJK text without spaces) are cut into fragments this long, so
	// that the overlap can always carry some text over.
	fragmentMax = 100
)

// Unit levels: where a unit starts, which decides where a chunk may end.
const (
	levelFragment  = iota // inside a sentence: a chunk ends here only when it must
	levelSentence         // a sentence or a line
	levelParagraph        // a paragraph or a fenced code block
)

// unit is the smallest piece the packer moves: a sentence, a code line or a fragment.
type unit struct {
	text  string
	sep   string // what joins it to the unit before it in the same chunk
	level int
	runes int
	// group is the size of the paragraph or sentence the unit starts (0 for
	// fragments), so the packer can keep a group whole when it fits in a fresh chunk.
	group int
}

// Chunk splits text into chunks of at most ChunkMax characters: paragraphs first
// (fenced code blocks count as one paragraph and keep their lines), then sentences,
// then words, then characters, with up to ChunkOverlap characters of whole sentences
// (or fragments) repeated between neighbouring chunks. The result depends only on
// text. Whitespace inside prose lines is collapsed; code keeps its spacing.
func Chunk(text string) []string {
	units := splitUnits(text)
	if len(units) == 0 {
		return nil
	}
	return pack(units)
}

// normalize is what the content hash is computed over: the text with every run of
// whitespace collapsed to one space, so re-indexing the same words with different line
// breaks or indentation is recognised as a duplicate.
func normalize(s string) string { return strings.Join(strings.Fields(s), " ") }

// contentHash is the hex SHA-256 of the normalized text.
func contentHash(s string) string {
	sum := sha256.Sum256([]byte(normalize(s)))
	return hex.EncodeToString(sum[:])
}

// cleanText turns CR LF and lone CR into LF and drops control characters other than
// newline and tab, which would only confuse tokenizers and terminals.
func cleanText(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || !unicode.IsControl(r) {
			return r
		}
		return -1
	}, s)
}

type block struct {
	lines []string
	code  bool
}

// splitBlocks cuts text into paragraphs at blank lines, keeping a fenced code block
// (``` or ~~~) together with its blank lines. An unclosed fence runs to the end.
func splitBlocks(text string) []block {
	var blocks []block
	var cur []string
	fence := ""
	flush := func(code bool) {
		if len(cur) > 0 {
			blocks = append(blocks, block{lines: cur, code: code})
		}
		cur = nil
	}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimRightFunc(line, unicode.IsSpace)
		if fence != "" {
			cur = append(cur, line)
			if closesFence(line, fence) {
				flush(true)
				fence = ""
			}
			continue
		}
		if f := opensFence(line); f != "" {
			flush(false)
			cur = []string{line}
			fence = f
			continue
		}
		if line == "" {
			flush(false)
			continue
		}
		cur = append(cur, line)
	}
	if fence != "" {
		// Trailing blank lines of an unclosed fence are noise.
		for len(cur) > 1 && cur[len(cur)-1] == "" {
			cur = cur[:len(cur)-1]
		}
	}
	flush(fence != "")
	return blocks
}

// opensFence returns the fence (``` or ~~~, three or more) that line opens, or "".
func opensFence(line string) string {
	trimmed := strings.TrimLeft(line, " ")
	if len(line)-len(trimmed) > 3 || len(trimmed) < 3 {
		return ""
	}
	c := trimmed[0]
	if c != '`' && c != '~' {
		return ""
	}
	n := 0
	for n < len(trimmed) && trimmed[n] == c {
		n++
	}
	if n < 3 || (c == '`' && strings.ContainsRune(trimmed[n:], '`')) {
		return ""
	}
	return trimmed[:n]
}

// closesFence reports whether line closes fence: the same character at least as many
// times, and nothing after it.
func closesFence(line, fence string) bool {
	trimmed := strings.TrimSpace(line)
	if len(line)-len(strings.TrimLeft(line, " ")) > 3 || len(trimmed) < len(fence) {
		return false
	}
	return strings.Trim(trimmed, fence[:1]) == ""
}

// splitUnits turns text into packing units.
func splitUnits(text string) []unit {
	var units []unit
	for _, b := range splitBlocks(cleanText(text)) {
		start := len(units)
		if b.code {
			for i, line := range b.lines {
				level, sep := levelSentence, "\n"
				if i == 0 {
					level, sep = levelParagraph, "\n\n"
				}
				units = appendPieces(units, hardSplit(line, fragmentMax), "", level, sep)
			}
		} else {
			first := true
			for _, line := range b.lines {
				line = normalize(line)
				if line == "" {
					continue
				}
				for i, s := range splitSentences(line) {
					level, sep := levelSentence, " "
					switch {
					case first:
						level, sep = levelParagraph, "\n\n"
					case i == 0:
						sep = "\n"
					case !s.spaced:
						sep = "" // CJK sentences follow each other without a space
					}
					first = false
					if utf8.RuneCountInString(s.text) <= fragmentMax {
						units = appendPieces(units, []string{s.text}, "", level, sep)
						continue
					}
					units = appendSentenceFragments(units, s.text, level, sep)
				}
			}
		}
		if len(units) > start {
			units[start].group = groupSize(units[start:])
		}
	}
	// Sentence groups: the size of each sentence that was cut into fragments, or of the
	// unit itself.
	for i := range units {
		if units[i].level == levelSentence {
			units[i].group = groupSize(units[i:])
		}
	}
	return units
}

// groupSize is the size of the group units[0] starts: up to the next unit of at least
// its level.
func groupSize(units []unit) int {
	n := units[0].runes
	for _, u := range units[1:] {
		if u.level >= units[0].level {
			break
		}
		n += utf8.RuneCountInString(u.sep) + u.runes
	}
	return n
}

// appendPieces appends pieces as units: the first with level and sep, the others as
// fragments joined by innerSep.
func appendPieces(units []unit, pieces []string, innerSep string, level int, sep string) []unit {
	for i, p := range pieces {
		u := unit{text: p, sep: sep, level: level, runes: utf8.RuneCountInString(p)}
		if i > 0 {
			u.sep, u.level = innerSep, levelFragment
		}
		units = append(units, u)
	}
	return units
}

// appendSentenceFragments cuts a long sentence into word groups of at most fragmentMax
// characters; a single word longer than that is cut between characters.
func appendSentenceFragments(units []unit, s string, level int, sep string) []unit {
	var cur []string
	curLen := 0
	emit := func() {
		if len(cur) == 0 {
			return
		}
		units = appendPieces(units, []string{strings.Join(cur, " ")}, "", level, sep)
		level, sep = levelFragment, " "
		cur, curLen = nil, 0
	}
	for _, w := range strings.Fields(s) {
		wl := utf8.RuneCountInString(w)
		if wl > fragmentMax {
			emit()
			units = appendPieces(units, hardSplit(w, fragmentMax), "", level, sep)
			level, sep = levelFragment, " "
			continue
		}
		if curLen > 0 && curLen+1+wl > fragmentMax {
			emit()
		}
		if curLen > 0 {
			curLen++
		}
		cur = append(cur, w)
		curLen += wl
	}
	emit()
	return units
}

// hardSplit cuts s into pieces of at most n characters. An empty s gives one empty
// piece, so empty code lines survive.
func hardSplit(s string, n int) []string {
	if utf8.RuneCountInString(s) <= n {
		return []string{s}
	}
	var out []string
	rs := []rune(s)
	for len(rs) > n {
		out = append(out, string(rs[:n]))
		rs = rs[n:]
	}
	if len(rs) > 0 {
		out = append(out, string(rs))
	}
	return out
}

// isCJKStop reports full-width sentence ends, which need no following space.
func isCJKStop(r rune) bool {
	switch r {
	case '。', '！', '？', '｡', '．':
		return true
	}
	return false
}

func isStop(r rune) bool { return r == '.' || r == '!' || r == '?' || r == '…' }

func isCloser(r rune) bool {
	switch r {
	case '"', '\'', ')', ']', '»', '”', '’', '」', '』', '）', '】':
		return true
	}
	return false
}

// sentence is one sentence of a line; spaced tells whether a space separated it from
// the sentence before.
type sentence struct {
	text   string
	spaced bool
}

// splitSentences cuts a line after ., !, ?, … followed by a space (or the end), and
// after full-width stops, keeping closing quotes and brackets with their sentence.
// Decimal points and dotted names stay inside their sentence.
func splitSentences(line string) []sentence {
	rs := []rune(line)
	var out []sentence
	start := 0
	cut := func(end int) {
		spaced := start < len(rs) && unicode.IsSpace(rs[start])
		if s := strings.TrimSpace(string(rs[start:end])); s != "" {
			out = append(out, sentence{text: s, spaced: spaced})
		}
		start = end
	}
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		cjk := isCJKStop(r)
		if !cjk && !isStop(r) {
			continue
		}
		j := i + 1
		for j < len(rs) && (isStop(rs[j]) || isCJKStop(rs[j])) {
			j++
		}
		for j < len(rs) && isCloser(rs[j]) {
			j++
		}
		if cjk || j == len(rs) || unicode.IsSpace(rs[j]) {
			cut(j)
		}
		i = j - 1
	}
	cut(len(rs))
	return out
}

// pack joins units into chunks of at most ChunkMax characters.
func pack(units []unit) []string {
	var chunks []string
	var cur []unit
	size := 0       // characters in cur, separators included
	ownStart := 0   // index in cur of the first unit that is not overlap
	prevSize := 0   // size of the last emitted chunk
	var prev []unit // units of the last emitted chunk
	sepLen := func(u unit) int { return utf8.RuneCountInString(u.sep) }

	flush := func(next unit) {
		chunks = append(chunks, join(cur))
		prev, prevSize = cur, size
		// Carry whole trailing units, at most ChunkOverlap characters, never the whole
		// chunk, and only as many as still leave room for next.
		k := len(cur)
		ov := 0
		for k > 1 {
			add := cur[k-1].runes
			if k < len(cur) {
				add += sepLen(cur[k])
			}
			if ov+add > ChunkOverlap {
				break
			}
			ov += add
			k--
		}
		over := append([]unit(nil), cur[k:]...)
		for len(over) > 0 && ov+sepLen(next)+next.runes > ChunkMax {
			ov -= over[0].runes
			if len(over) > 1 {
				ov -= sepLen(over[1])
			}
			over = over[1:]
		}
		cur, size, ownStart = over, ov, len(over)
	}

	for _, u := range units {
		// Only a chunk with text of its own may end; overlap alone never makes one.
		if len(cur) > ownStart {
			fits := size+sepLen(u)+u.runes <= ChunkMax
			switch {
			case u.level == levelParagraph && size >= ChunkMin:
				flush(u)
			case u.level >= levelSentence && size+sepLen(u)+u.group > ChunkMax &&
				u.group <= ChunkMax-ChunkOverlap && size >= ChunkMin/2:
				// The paragraph or sentence u starts fits whole in a fresh chunk but not
				// in this one: end here rather than cut it.
				flush(u)
			case !fits:
				flush(u)
			}
		}
		if len(cur) == 0 {
			cur, size = []unit{u}, u.runes
			continue
		}
		cur = append(cur, u)
		size += sepLen(u) + u.runes
	}
	if len(cur) == 0 {
		return chunks
	}
	// A short tail is folded into the chunk before it when it fits, rather than left
	// as a scrap that is mostly overlap.
	own := cur[ownStart:]
	ownSize := 0
	for i, u := range own {
		if i > 0 {
			ownSize += sepLen(u)
		}
		ownSize += u.runes
	}
	if len(chunks) > 0 && ownStart > 0 && ownSize < ChunkMin/4 &&
		prevSize+sepLen(own[0])+ownSize <= ChunkMax {
		chunks[len(chunks)-1] = join(append(append([]unit(nil), prev...), own...))
		return chunks
	}
	return append(chunks, join(cur))
}

// join renders units as text; the first unit's separator is dropped.
func join(units []unit) string {
	var b strings.Builder
	for i, u := range units {
		if i > 0 {
			b.WriteString(u.sep)
		}
		b.WriteString(u.text)
	}
	return b.String()
}
