package memory

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// prose returns n paragraphs of sentences sentences each, every sentence unique.
func prose(n, sentences int) string {
	var b strings.Builder
	for p := range n {
		if p > 0 {
			b.WriteString("\n\n")
		}
		for s := range sentences {
			if s > 0 {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "Paragraph %d sentence %d: Alice reviewed the Lisbon budget with Bob.", p, s)
		}
	}
	return b.String()
}

func TestChunkInvariants(t *testing.T) {
	g := newTextGen(7)
	longWord := g.letters(5000)
	words := g.words(900)
	cjkSentences := g.cjk(900, true)
	cjkRun := g.cjk(900, false)
	codeLong := g.code(200)
	for _, tc := range []struct {
		name       string
		text       string
		wantChunks int // 0: more than one, checked loosely
	}{
		{"short", "Just one sentence.", 1},
		{"prose", prose(6, 12), 0},
		{"long paragraph without sentence ends", words, 0},
		{"one long word", longWord, 0},
		{"CJK sentences", cjkSentences, 0},
		{"CJK without punctuation", cjkRun, 0},
		{"long code block", codeLong, 0},
		{"realistic document", g.document(20), 0},
		{"mixed", g.document(2) + "\n\n" + codeLong + "\n\n" + cjkSentences + "\n\n" + words, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chunks := Chunk(tc.text)
			if tc.wantChunks > 0 && len(chunks) != tc.wantChunks {
				t.Fatalf("got %d chunks, want %d", len(chunks), tc.wantChunks)
			}
			if tc.wantChunks == 0 && len(chunks) < 2 {
				t.Fatalf("got %d chunks, want several", len(chunks))
			}
			again := Chunk(tc.text)
			if strings.Join(again, "\x00") != strings.Join(chunks, "\x00") {
				t.Fatal("Chunk is not deterministic")
			}
			for i, c := range chunks {
				n := utf8.RuneCountInString(c)
				if n == 0 || n > ChunkMax {
					t.Errorf("chunk %d has %d characters, want 1..%d", i, n, ChunkMax)
				}
				if !utf8.ValidString(c) {
					t.Errorf("chunk %d is not valid UTF-8", i)
				}
			}
			// Neighbours overlap, and joining them without the overlap gives the text
			// back (whitespace aside): nothing is lost or invented.
			for i := 1; i < len(chunks); i++ {
				if overlapLen(chunks[i-1], chunks[i]) == 0 {
					t.Errorf("chunks %d and %d do not overlap", i-1, i)
				}
			}
			if got, want := normalize(joinEpisode(chunks)), normalize(tc.text); got != want {
				t.Errorf("joined chunks differ from the text:\n got %.200q\nwant %.200q", got, want)
			}
		})
	}
}

// overlapLen is the longest prefix of b (at least minOverlapBytes, at most
// ChunkOverlap characters) that ends a.
func overlapLen(a, b string) int {
	for k := min(len(a), runePrefixLen(b, ChunkOverlap)); k >= minOverlapBytes; k-- {
		if strings.HasSuffix(a, b[:k]) {
			return k
		}
	}
	return 0
}

func TestChunkEmpty(t *testing.T) {
	for _, text := range []string{"", "   ", "\n\n\t\n", "\x00\x01"} {
		if got := Chunk(text); got != nil {
			t.Errorf("Chunk(%q) = %q, want nil", text, got)
		}
	}
}

func TestChunkPrefersParagraphAndSentenceBoundaries(t *testing.T) {
	// Paragraphs of about 500 characters: every chunk must end where a paragraph ends.
	text := prose(8, 7)
	paragraphs := strings.Split(text, "\n\n")
	for i, c := range Chunk(text) {
		ends := false
		for _, p := range paragraphs {
			if strings.HasSuffix(c, p) {
				ends = true
			}
		}
		if !ends {
			t.Errorf("chunk %d does not end at a paragraph boundary: …%q", i, c[max(0, len(c)-60):])
		}
		if n := utf8.RuneCountInString(c); n < 400 && i < len(Chunk(text))-1 {
			t.Errorf("chunk %d is only %d characters", i, n)
		}
	}
	// One paragraph far larger than a chunk: chunks end at sentence ends.
	for i, c := range Chunk(prose(1, 60)) {
		if !strings.HasSuffix(c, "Bob.") {
			t.Errorf("chunk %d of a long paragraph does not end a sentence: …%q", i, c[max(0, len(c)-40):])
		}
	}
}

func TestChunkOverlapCarriesWholeSentences(t *testing.T) {
	chunks := Chunk(prose(1, 60))
	if len(chunks) < 3 {
		t.Fatalf("got %d chunks", len(chunks))
	}
	for i := 1; i < len(chunks); i++ {
		if !strings.HasPrefix(chunks[i], "Paragraph 0 sentence ") {
			t.Errorf("chunk %d does not start with a whole sentence: %.40q", i, chunks[i])
		}
		first := chunks[i][:strings.Index(chunks[i], "Bob.")+4]
		if !strings.Contains(chunks[i-1], first) {
			t.Errorf("chunk %d starts with %q, which chunk %d does not end with", i, first, i-1)
		}
	}
}

func TestChunkKeepsCodeBlocks(t *testing.T) {
	code := "```go\nfunc main() {\n\n\tfmt.Println(\"a  b\")\n}\n```"
	text := prose(1, 3) + "\n\n" + code + "\n\nAfter the code."
	chunks := Chunk(text)
	if len(chunks) != 1 {
		t.Fatalf("got %d chunks, want 1", len(chunks))
	}
	if !strings.Contains(chunks[0], code) {
		t.Errorf("the code block lost its blank line or spacing:\n%s", chunks[0])
	}
	// An unclosed fence runs to the end and still keeps its lines.
	if got := Chunk("```\nx  =  1\n\ny = 2"); len(got) != 1 || got[0] != "```\nx  =  1\n\ny = 2" {
		t.Errorf("unclosed fence: %q", got)
	}
}

func TestSplitSentences(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"One. Two! Three? Four", []string{"One.", "Two!", "Three?", "Four"}},
		{"Pi is 3.14 today. Next.", []string{"Pi is 3.14 today.", "Next."}},
		{`He said "stop." Then left.`, []string{`He said "stop."`, "Then left."}},
		{"Wait... what?! Yes.", []string{"Wait...", "what?!", "Yes."}},
		{"私は学生です。東京に住んでいます！本当？", []string{"私は学生です。", "東京に住んでいます！", "本当？"}},
		{"「はい。」と言った。", []string{"「はい。」", "と言った。"}},
		{"no end at all", []string{"no end at all"}},
	} {
		var got []string
		for _, s := range splitSentences(tc.in) {
			got = append(got, s.text)
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("splitSentences(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestContentHashNormalizesWhitespace(t *testing.T) {
	a := contentHash("Alice  likes\n tea.")
	if b := contentHash("  Alice likes tea.  "); a != b {
		t.Error("whitespace changes the hash")
	}
	if c := contentHash("alice likes tea."); a == c {
		t.Error("case does not change the hash")
	}
	if len(a) != 64 {
		t.Errorf("hash %q is not hex SHA-256", a)
	}
}
