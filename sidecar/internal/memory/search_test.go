package memory

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

func TestSearchRanking(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		docs  map[string]string // ref → text, all created at the same time
		query string
		want  []string // refs, best first
	}{
		{
			name: "exact term beats a longer word that starts with it",
			docs: map[string]string{
				"partial": "The deployment pipeline was slow again this week.",
				"exact":   "We will deploy the release on Friday.",
				"none":    "Lunch with Carol on Tuesday.",
			},
			query: "deploy",
			want:  []string{"exact", "partial"},
		},
		{
			name: "all terms beat some terms",
			docs: map[string]string{
				"flight-only": "The flight to Porto was late.",
				"both":        "Booked the flight to Lisbon for March.",
				"city-only":   "Lisbon was sunny all week.",
			},
			query: "Lisbon flight",
			want:  []string{"both"},
		},
		{
			name: "diacritics and case do not matter",
			docs: map[string]string{
				"cafe": "Meeting at the Café Central in Vienna.",
				"tea":  "Tea with Zoe.",
			},
			query: "CAFE central",
			want:  []string{"cafe"},
		},
		{
			name: "stop words do not drown the content words",
			docs: map[string]string{
				"a": "What is the plan for the garden and the house?",
				"b": "Garden plan: tomatoes along the south fence.",
			},
			query: "what is the garden plan",
			want:  []string{"b", "a"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, _ := newMemory(t, Options{})
			for _, ref := range slices.Sorted(mapsKeys(tc.docs)) {
				mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: ref, Text: tc.docs[ref], CreatedAt: testNow, Ephemeral: true})
			}
			hits, err := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: tc.query})
			if err != nil {
				t.Fatal(err)
			}
			got := refs(hits)
			if len(got) < len(tc.want) || !slices.Equal(got[:len(tc.want)], tc.want) {
				t.Errorf("hits = %q, want %q first", got, tc.want)
			}
		})
	}
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestSearchRecencyDecay(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		halfLife time.Duration
		want     []string
	}{
		{"without decay the stronger old match wins", -1, []string{"old", "new"}},
		{"with decay the newer match wins", 30 * 24 * time.Hour, []string{"new", "old"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, _ := newMemory(t, Options{HalfLife: tc.halfLife})
			mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: "old",
				Text: "Dentist: the dentist moved the dentist appointment.", CreatedAt: testNow.AddDate(0, 0, -90), Ephemeral: true})
			mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: "new",
				Text: "Booked a dentist appointment for the kids.", CreatedAt: testNow.AddDate(0, 0, -2), Ephemeral: true})
			hits, err := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "dentist"})
			if err != nil {
				t.Fatal(err)
			}
			if got := refs(hits); !slices.Equal(got, tc.want) {
				t.Errorf("hits = %q, want %q", got, tc.want)
			}
			if len(hits) == 2 && hits[0].Score <= hits[1].Score {
				t.Errorf("scores not descending: %v, %v", hits[0].Score, hits[1].Score)
			}
		})
	}
}

func TestSearchFilters(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newMemory(t, Options{})
	for i, d := range []struct {
		source string
		days   int
	}{{SourceConversation, 1}, {SourceMemoryFile, 10}, {SourceUserMD, 100}} {
		mustIndex(t, m, Doc{Namespace: "user:alice", Source: d.source, SourceRef: fmt.Sprint(i),
			Text: fmt.Sprintf("Budget note number %d.", i), CreatedAt: testNow.AddDate(0, 0, -d.days), Ephemeral: true})
	}
	for _, tc := range []struct {
		name string
		q    Query
		want []string
	}{
		{"since", Query{Since: testNow.AddDate(0, 0, -10)}, []string{"0", "1"}},
		{"until", Query{Until: testNow.AddDate(0, 0, -10)}, []string{"2"}},
		{"sources", Query{Sources: []string{SourceUserMD, SourceMemoryFile}}, []string{"1", "2"}},
		{"exclude", Query{ExcludeSources: []string{SourceUserMD}}, []string{"0", "1"}},
		{"limit", Query{Limit: 1}, []string{"0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.q
			q.Namespaces, q.Text = []string{"user:alice"}, "budget"
			hits, err := m.Search(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			got := refs(hits)
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("hits = %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := m.Search(ctx, Query{Text: "budget"}); err == nil {
		t.Error("a search without namespaces succeeded")
	}
	if _, err := m.Search(ctx, Query{Namespaces: []string{"user:alice", "bob"}, Text: "budget"}); err == nil {
		t.Error("a search with a malformed namespace succeeded")
	}
}

// TestNamespaceIsolationAndHostileQueries: whatever alice types, she sees only her own
// chunks, and no query text is an error.
func TestNamespaceIsolationAndHostileQueries(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newMemory(t, Options{})
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: "a1", Text: "Alice's secret: the alpha launch code is in the blue folder.", Ephemeral: true})
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: "a2", Text: "Alice bought apples and pears.", Ephemeral: true})
	mustIndex(t, m, Doc{Namespace: "user:bob", Source: SourceNote, SourceRef: "b1", Text: "Bob's secret: the alpha launch code is 4242. content secret bob", Ephemeral: true})
	mustIndex(t, m, Doc{Namespace: "channel:other", Source: SourceConversation, SourceRef: "c1", Text: "A secret from another conversation.", Ephemeral: true})

	for _, tc := range []struct {
		query string
		empty bool // no words at all: no hits
	}{
		{query: "secret"},
		{query: "bob"},
		{query: `"secret`},
		{query: `secret" OR "bob`},
		{query: `secret OR bob OR 4242`},
		{query: `NEAR(secret alpha, 2)`},
		{query: `secret AND NOT alpha`},
		{query: `secret NOT`},
		{query: `content:secret`},
		{query: `{content}: secret`},
		{query: `memory_fts:secret`},
		{query: `namespace:user:bob secret`},
		{query: `^secret`},
		{query: `secret*`},
		{query: `- secret`},
		{query: `'; DROP TABLE memory_chunks; --`},
		{query: "secret\x00bob"},
		{query: strings.Repeat("secret ", 5000)},
		{query: "*", empty: true},
		{query: `""`, empty: true},
		{query: "()", empty: true},
		{query: "!!! ??? ...", empty: true},
		{query: "   ", empty: true},
		{query: "", empty: true},
		{query: "* AND *", empty: false}, // "and" is a word: it may match, but only alice's
	} {
		t.Run(excerpt(tc.query, 30), func(t *testing.T) {
			hits, err := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: tc.query})
			if err != nil {
				t.Fatalf("Search(%q): %v", tc.query, err)
			}
			for _, h := range hits {
				if h.Namespace != "user:alice" || strings.Contains(h.Text, "Bob") || strings.Contains(h.Text, "conversation") {
					t.Errorf("alice's search %q returned %s %s: %q", tc.query, h.Namespace, h.SourceRef, h.Text)
				}
			}
			if tc.empty && len(hits) != 0 {
				t.Errorf("a query without words returned %d hits", len(hits))
			}
		})
	}
	// Bob does find his own.
	hits, err := m.Search(ctx, Query{Namespaces: []string{"user:bob"}, Text: "secret 4242"})
	if err != nil || len(hits) != 1 || hits[0].SourceRef != "b1" {
		t.Errorf("bob's search = %+v, %v", hits, err)
	}
	// Both namespaces when both are named, and only then.
	hits, err = m.Search(ctx, Query{Namespaces: []string{"user:alice", "channel:other"}, Text: "secret"})
	if err != nil || len(hits) != 2 {
		t.Errorf("alice+channel search = %q, %v", refs(hits), err)
	}
}

func TestTermsExpressionIsOnlyQuotedTerms(t *testing.T) {
	term := `("[^"]+"|\("[^"]+" OR "[^"]+"\*\))`
	for _, op := range []string{" AND ", " OR "} {
		shape := regexp.MustCompile(`^` + term + `(` + op + term + `)*$`)
		for _, q := range []string{`a" OR x`, `NEAR(a b)`, `col:val`, `x*`, `{a b}: c`, "東京 タワー", `über Straße`, "it's", strings.Repeat("word", 100), `ns: n61`} {
			expr := termsExpression(queryTerms(q), op, nil)
			if !shape.MatchString(expr) {
				t.Errorf("termsExpression(%q, %q) = %q", q, op, expr)
			}
		}
	}
	if got := queryTerms("The cat AND the Dog and THE cat"); !slices.Equal(got, []string{"cat", "dog"}) {
		t.Errorf("queryTerms = %q", got)
	}
	if got := queryTerms("the and or"); !slices.Equal(got, []string{"the", "and", "or"}) {
		t.Errorf("only stop words are kept when nothing else is left: %q", got)
	}
	if got := queryTerms(strings.Repeat("x", 200)); len(got) != 1 || len([]rune(got[0])) != maxTermRunes {
		t.Errorf("long term not cut: %d", len(got[0]))
	}
	var many []string
	for i := range 100 {
		many = append(many, fmt.Sprintf("term%d", i))
	}
	if got := queryTerms(strings.Join(many, " ")); len(got) != maxTerms {
		t.Errorf("%d terms, want %d", len(got), maxTerms)
	}
}

func TestEpisodeWindows(t *testing.T) {
	ctx := context.Background()
	m, db, _ := newMemory(t, Options{HalfLife: -1})
	g := newTextGen(11)
	paras := make([]string, 12)
	for i := range paras {
		paras[i] = g.paragraph(7)
	}
	// A unique word in one paragraph near the middle, another in two paragraphs next to
	// each other.
	paras[6] += " The zanzibarite sample arrived."
	paras[2] += " Quokka spotted."
	paras[3] = "Another quokka, bigger. " + paras[3]
	text := strings.Join(paras, "\n\n")
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceMemoryFile, SourceRef: "memories/2026-02-01.md", Text: text, Ephemeral: true})
	ids := chunkIDs(t, db, "user:alice", SourceMemoryFile, "memories/2026-02-01.md")
	if len(ids) < 6 {
		t.Fatalf("only %d chunks", len(ids))
	}

	hits, err := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "zanzibarite"})
	if err != nil || len(hits) != 1 {
		t.Fatalf("hits = %+v, %v", hits, err)
	}
	h := hits[0]
	pos := slices.Index(ids, h.Matched[0])
	if pos <= 0 || pos >= len(ids)-1 {
		t.Fatalf("the match is chunk %d of %d; the test needs one in the middle", pos, len(ids))
	}
	if !slices.Equal(h.ChunkIDs, ids[pos-1:pos+2]) {
		t.Errorf("episode = %v, want chunks %v", h.ChunkIDs, ids[pos-1:pos+2])
	}
	chunks := Chunk(text)
	if h.Text != joinEpisode(chunks[pos-1:pos+2]) || strings.Count(h.Text, paras[6][:60]) != 1 {
		t.Errorf("episode text is not the three chunks without overlap")
	}
	if !strings.Contains(h.Snippet, "zanzibarite") || len([]rune(h.Snippet)) > SnippetRunes+2 {
		t.Errorf("snippet %q", h.Snippet)
	}

	// Matches in neighbouring chunks come back as one hit.
	hits, err = m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "quokka"})
	if err != nil || len(hits) != 1 {
		t.Fatalf("quokka hits = %d, %v", len(hits), err)
	}
	if !strings.Contains(hits[0].Text, "Quokka spotted.") || !strings.Contains(hits[0].Text, "Another quokka") {
		t.Errorf("merged episode lacks a match: %q", hits[0].Text)
	}

	// A word in every chunk: episodes stay bounded and together cover the matches.
	hits, err = m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "ref", Limit: 20})
	if err != nil || len(hits) == 0 {
		t.Fatalf("ref hits = %d, %v", len(hits), err)
	}
	matched := 0
	for _, h := range hits {
		if len(h.ChunkIDs) > maxEpisodeChunks(DefaultEpisodeWindow) {
			t.Errorf("episode of %d chunks", len(h.ChunkIDs))
		}
		matched += len(h.Matched)
	}
	if matched != len(ids) || len(hits) >= len(ids) {
		t.Errorf("%d hits with %d matches for %d chunks", len(hits), matched, len(ids))
	}

	// Without windows a hit is its chunk alone (the sentence sits in two chunks, one
	// of them as overlap, so there are two hits).
	solo := New(db, Options{EpisodeWindow: -1, Clock: func() time.Time { return testNow }})
	hits, err = solo.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "zanzibarite"})
	if err != nil || len(hits) == 0 {
		t.Fatalf("no window: %d hits, %v", len(hits), err)
	}
	for _, h := range hits {
		if len(h.ChunkIDs) != 1 || h.ChunkIDs[0] != h.Matched[0] {
			t.Errorf("no window: hit with chunks %v, matched %v", h.ChunkIDs, h.Matched)
		}
	}
}

func TestRecallAndFormatHits(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newMemory(t, Options{})
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceUserMD, SourceRef: "USER.md", Text: "Alice prefers aisle seats."})
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceConversation, SourceRef: "task:7",
		Text: "Alice: book aisle seats for Lisbon.", CreatedAt: time.Date(2026, 2, 2, 10, 0, 0, 0, time.UTC), Ephemeral: true})
	got, err := m.Recall(ctx, []string{"user:alice"}, "aisle seats", 5)
	if err != nil || !slices.Equal(got, []string{"2026-02-02: Alice: book aisle seats for Lisbon."}) {
		t.Errorf("Recall = %q, %v (USER.md must be left out)", got, err)
	}
	hits, _ := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "aisle"})
	out := FormatHits(hits, 100)
	if !strings.Contains(out, "[1] ") || !strings.Contains(out, "[2] ") || !strings.Contains(out, "task:7") {
		t.Errorf("FormatHits = %q", out)
	}
	if FormatHits(nil, 0) != "No memories found.\n" {
		t.Error("FormatHits of nothing")
	}
}

func TestSearchCJK(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newMemory(t, Options{})
	for _, d := range []struct{ ns, ref, text string }{
		{"user:alice", "tokyo", "私は東京に住んでいます。毎朝電車で会社へ行きます。"},
		{"user:alice", "osaka", "明日は大阪へ出張します。新幹線の切符を買いました。"},
		{"user:alice", "english", "Alice moved to Tokyo in 2024."},
		{"user:bob", "bob-tokyo", "東京の天気は雨です。"},
		{"user:alice", "korean", "내일 서울에서 회의가 있습니다."},
	} {
		mustIndex(t, m, Doc{Namespace: d.ns, Source: SourceNote, SourceRef: d.ref, Text: d.text, Ephemeral: true})
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"東京", []string{"tokyo"}},
		{"大阪の出張", []string{"osaka"}},
		{"新幹線", []string{"osaka"}},
		{"東京 Tokyo", []string{"tokyo", "english"}},
		{"서울", []string{"korean"}},
		{"京都", nil},
	} {
		t.Run(tc.query, func(t *testing.T) {
			hits, err := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: tc.query})
			if err != nil {
				t.Fatal(err)
			}
			got := refs(hits)
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("hits = %q, want %q", got, want)
			}
		})
	}
	if got := cjkGrams([]string{"東京タワー", "雨", "tokyo", "東京"}); !slices.Equal(got, []string{"東京", "京タ", "タワ", "ワー", "雨"}) {
		t.Errorf("cjkGrams = %q", got)
	}
}

// A word nobody wrote does not empty a search, a chunk with all the words ranks first,
// and when few chunks have all of them the rest come from the rarer words.
func TestSearchAllWordsFirstThenRareWords(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newMemory(t, Options{HalfLife: -1})
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceMemoryFile, SourceRef: "both", Text: "The budget for the Lisbon trip is set."})
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceMemoryFile, SourceRef: "budget", Text: "A budget review is due."})
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceMemoryFile, SourceRef: "lisbon", Text: "Lisbon has nice trams."})
	mustIndex(t, m, Doc{Namespace: "user:bob", Source: SourceMemoryFile, SourceRef: "bob", Text: "Bob's budget for Lisbon."})

	hits, err := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "Lisbon budget"})
	if err != nil || len(hits) != 3 || hits[0].SourceRef != "both" {
		t.Fatalf("hits = %q, %v", refs(hits), err)
	}
	hits, err = m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "budget zorblax"})
	if err != nil || len(hits) == 0 || !slices.Contains(refs(hits), "budget") || slices.Contains(refs(hits), "bob") {
		t.Fatalf("a word nobody wrote emptied or widened the search: %q, %v", refs(hits), err)
	}
	if hits, err := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "zorblax"}); err != nil || len(hits) != 0 {
		t.Fatalf("only an unknown word: %q, %v", refs(hits), err)
	}
	// The namespace token cannot be searched for.
	if hits, err := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: NamespaceToken("user:bob")}); err != nil || len(hits) != 0 {
		t.Fatalf("the namespace token matched: %q, %v", refs(hits), err)
	}
}

// A word matches as a prefix only when other indexed words begin with it: the prefix
// clause of a word nothing extends would match the same chunks a second time.
func TestPrefixClauseOnlyWhereWordsExtend(t *testing.T) {
	ctx := context.Background()
	m, db, _ := newMemory(t, Options{HalfLife: -1})
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceMemoryFile, SourceRef: "a", Text: "The deployment of Lisbon's tram app."})
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceMemoryFile, SourceRef: "b", Text: "We deploy on Friday with Yasmin."})
	terms := []string{"deploy", "yasmin", "tram", "cat"}
	df, expands, _, err := m.docFreq(ctx, terms)
	if err != nil {
		t.Fatal(err)
	}
	if df["deploy"] != 2 || df["yasmin"] != 1 || df["cat"] != 0 {
		t.Fatalf("docFreq: df %v", df)
	}
	sqlite := db.Dialect() != store.Postgres // PostgreSQL ranks with its own query (tsQuery)
	if sqlite {
		if !expands["deploy"] || expands["yasmin"] || expands["tram"] {
			t.Fatalf("docFreq: expands %v", expands)
		}
		if got, want := termsExpression(terms, " AND ", expands), `("deploy" OR "deploy"*) AND "yasmin" AND "tram" AND "cat"`; got != want {
			t.Errorf("termsExpression = %s, want %s", got, want)
		}
	}
	// "tram" gains a longer word: it matches as a prefix from the next search on.
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceMemoryFile, SourceRef: "c", Text: "Trampoline park on Sunday."})
	if _, expands, _, _ = m.docFreq(ctx, terms); sqlite && !expands["tram"] {
		t.Errorf("tram does not expand after trampoline was indexed")
	}
	hits, err := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "tram"})
	if err != nil || len(hits) != 2 || hits[0].SourceRef != "a" {
		t.Errorf("tram: %q, %v (want the exact word first, then trampoline)", refs(hits), err)
	}
}

// The vector index finds what comparing every vector finds, never another namespace's
// chunk even when it is nearer, follows deletions, and is remade for a new model.
func TestVectorIndexAgreesWithFullComparison(t *testing.T) {
	ctx := context.Background()
	vecs := newDenseVectors(64)
	emb := &denseEmbedder{model: "dense-a", vecs: vecs}
	m, db, _ := newMemory(t, Options{Embedder: emb, HalfLife: -1})
	if db.Dialect() == store.Postgres {
		t.Skip("the vector index is sqlite-vec: on PostgreSQL every vector is compared (TestHybridSearch covers that)")
	}
	g := newTextGen(5)
	for i := range 300 {
		ns := "user:alice"
		if i%3 == 0 {
			ns = "user:bob"
		}
		mustIndex(t, m, Doc{Namespace: ns, Source: SourceMemoryFile, SourceRef: fmt.Sprintf("d%d", i), Text: g.paragraph(3)})
	}
	m.embedPending(ctx, nil)
	if n := countRows(t, db, "embedding IS NOT NULL"); n == 0 {
		t.Fatal("no vectors were stored")
	}
	table, ok, err := m.vecIndex(ctx, 64)
	if err != nil || !ok {
		t.Fatalf("index: %v %v", ok, err)
	}
	for _, text := range []string{"budget Lisbon", "dentist appointment Grace", "train tickets Porto"} {
		qv, _ := m.queryVector(ctx, text)
		q := Query{Namespaces: []string{"user:alice"}}
		filter, args := q.filter("c.")
		indexed, err := m.semantic(ctx, qv, q, filter, args, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		full, err := m.rankVectors(ctx, qv, filter, args, 10, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(indexed) == 0 || len(indexed) != len(full) {
			t.Fatalf("%q: indexed %d hits, full %d", text, len(indexed), len(full))
		}
		for i := range full {
			if indexed[i].id != full[i].id {
				t.Errorf("%q: rank %d is %d with the index, %d without", text, i, indexed[i].id, full[i].id)
			}
			if indexed[i].namespace != "user:alice" {
				t.Errorf("%q: the index returned %s's chunk", text, indexed[i].namespace)
			}
		}
	}
	// Deleting chunks deletes their vectors from the index.
	if _, err := db.Write.Exec(`DELETE FROM memory_chunks WHERE namespace = 'user:bob'`); err != nil {
		t.Fatal(err)
	}
	var left int
	db.Read.QueryRow(`SELECT count(*) FROM ` + table + ` WHERE ns = 'user:bob'`).Scan(&left)
	if left != 0 {
		t.Errorf("%d vectors of deleted chunks left in the index", left)
	}
	// Another model gets its own index with its first vectors; the old one is dropped.
	m2 := New(db, Options{Embedder: &denseEmbedder{model: "dense-b", vecs: vecs}})
	mustIndex(t, m2, Doc{Namespace: "user:alice", Source: SourceMemoryFile, SourceRef: "other-model", Text: g.paragraph(3)})
	table2, ok2, err := m2.vecIndex(ctx, 64)
	if err != nil || !ok2 || table2 == table {
		t.Fatalf("new model's index: %s %v %v", table2, ok2, err)
	}
	var n int
	db.Read.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = ?`, table).Scan(&n)
	if n != 0 {
		t.Errorf("the old model's index was not dropped")
	}
}
