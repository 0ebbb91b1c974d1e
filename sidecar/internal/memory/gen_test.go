package memory

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// textGen writes deterministic, realistic-looking and non-repeating text: everyday
// sentences about people, places and projects, with a long tail of rarer words drawn
// from a Zipf distribution, as in real notes and chats.
type textGen struct {
	r    *rand.Rand
	zipf *rand.Zipf
	rare []string
}

var (
	genNames   = strings.Fields("Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy Rupert Sybil Trent Victor Walter Yasmin Zoe Marta Jonas Leila Tomás Ingrid Kenji Amara Pavel Sofia")
	genVerbs   = strings.Fields("booked reviewed cancelled moved discussed approved drafted shared postponed finished started planned checked fixed renamed archived scheduled questioned summarised ordered")
	genObjects = []string{"the flight", "the budget", "the quarterly report", "the dentist appointment", "the train tickets",
		"the release notes", "the garden plan", "the server migration", "the birthday dinner", "the insurance claim",
		"the hotel booking", "the tax return", "the team offsite", "the grocery list", "the car repair",
		"the project proposal", "the school meeting", "the rent payment", "the photo album", "the podcast episode"}
	genPlaces = strings.Fields("Lisbon Porto Berlin Vienna Oslo Madrid Prague Dublin Zurich Krakow Tallinn Riga Ghent Lyon Turin Bergen Malmö Seville Graz Bruges")
	genTimes  = []string{"on Monday", "on Tuesday", "next week", "yesterday", "this morning", "before lunch",
		"after the call", "in March", "by Friday", "last night", "tomorrow", "at the weekend"}
	genCJK = strings.Fields("私は 東京で 新しい 計画を 会議の 資料を 週末に 友達と 京都へ 旅行の 予算を 確認して 先生に 電話して 明日の 天気は 駅の 近くで 昼ご飯を 食べました")
)

// newTextGen returns a generator whose text depends on seed. The rare vocabulary is
// the same for every seed, so benchmarks can name rare words in their queries.
func newTextGen(seed uint64) *textGen {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	g := &textGen{r: r, zipf: rand.NewZipf(r, 1.1, 1, 4999)}
	vocab := rand.New(rand.NewPCG(1, 2))
	syll := strings.Fields("ka lo mi ne ru sa ti vo ze pa qu fi go de ha ju xi wa bo le")
	for i := range 5000 {
		var b strings.Builder
		for k := 0; k < 2+i%3; k++ {
			b.WriteString(syll[vocab.IntN(len(syll))])
		}
		fmt.Fprintf(&b, "%d", i%7)
		g.rare = append(g.rare, b.String())
	}
	return g
}

func (g *textGen) pick(list []string) string { return list[g.r.IntN(len(list))] }

// sentence is one sentence, unique thanks to its reference number.
func (g *textGen) sentence() string {
	s := fmt.Sprintf("%s %s %s in %s %s", g.pick(genNames), g.pick(genVerbs), g.pick(genObjects), g.pick(genPlaces), g.pick(genTimes))
	if g.r.IntN(2) == 0 {
		s += fmt.Sprintf(" because of %s and %s", g.rare[g.zipf.Uint64()], g.rare[g.zipf.Uint64()])
	}
	return s + fmt.Sprintf(" (ref %d).", g.r.IntN(1_000_000))
}

// paragraph is n sentences.
func (g *textGen) paragraph(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = g.sentence()
	}
	return strings.Join(parts, " ")
}

// document is paragraphs of 2 to 9 sentences.
func (g *textGen) document(paragraphs int) string {
	parts := make([]string, paragraphs)
	for i := range parts {
		parts[i] = g.paragraph(2 + g.r.IntN(8))
	}
	return strings.Join(parts, "\n\n")
}

// words is n words without any sentence end.
func (g *textGen) words(n int) string {
	parts := make([]string, n)
	for i := range parts {
		switch g.r.IntN(3) {
		case 0:
			parts[i] = strings.ToLower(g.pick(genNames))
		case 1:
			parts[i] = g.rare[g.zipf.Uint64()]
		default:
			parts[i] = g.pick(genVerbs)
		}
	}
	return strings.Join(parts, " ")
}

// letters is n letters without a space.
func (g *textGen) letters(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + g.r.IntN(26))
	}
	return string(b)
}

// cjk is Japanese-looking text without spaces; with stops, sentences end in 。
func (g *textGen) cjk(n int, stops bool) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(g.pick(genCJK))
		if stops && i%6 == 5 {
			b.WriteString("。")
		}
	}
	return b.String()
}

// code is a fenced block of n distinct lines with blank lines between functions.
func (g *textGen) code(n int) string {
	var b strings.Builder
	b.WriteString("```python\n")
	for i := range n {
		if i%4 == 0 {
			fmt.Fprintf(&b, "\ndef step_%d(event):\n", i)
			continue
		}
		fmt.Fprintf(&b, "    value_%d = compute(event, %d)  # %s\n", i, g.r.IntN(1000), g.rare[g.zipf.Uint64()])
	}
	b.WriteString("```")
	return b.String()
}
