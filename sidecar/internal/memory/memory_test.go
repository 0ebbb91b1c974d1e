package memory

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

func TestIndexDeduplicatesPerNamespace(t *testing.T) {
	m, db, _ := newMemory(t, Options{})
	g := newTextGen(1)
	text := g.document(6)
	doc := Doc{Namespace: "user:alice", Source: SourceMemoryFile, SourceRef: "memories/2026-02-28.md", Text: text, Ephemeral: true}
	first := mustIndex(t, m, doc)
	if first < 2 || first != len(Chunk(text)) {
		t.Fatalf("first Index added %d, want all %d chunks", first, len(Chunk(text)))
	}
	for _, tc := range []struct {
		name string
		doc  Doc
		want int
	}{
		{"same text again", doc, 0},
		{"same text, other reference", Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: "copy", Text: text, Ephemeral: true}, 0},
		{"same words, other whitespace", Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: "ws",
			Text: strings.ReplaceAll(text, ". ", ".   "), Ephemeral: true}, 0},
		{"same text, other namespace", Doc{Namespace: "user:bob", Source: SourceMemoryFile, SourceRef: doc.SourceRef, Text: text, Ephemeral: true}, first},
		{"a repeated paragraph within one document", Doc{Namespace: "user:carol", Source: SourceNote, SourceRef: "r",
			Text: "Carol likes green tea.\n\nCarol likes green tea."}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustIndex(t, m, tc.doc); got != tc.want {
				t.Errorf("added %d, want %d", got, tc.want)
			}
		})
	}
	if n := countRows(t, db, "namespace = 'user:alice'"); n != first {
		t.Errorf("alice has %d rows, want %d", n, first)
	}
	var fts int
	ftsRows := `SELECT count(*) FROM memory_fts`
	if db.Dialect() == store.Postgres {
		ftsRows = `SELECT count(*) FROM memory_chunks WHERE tsv IS NOT NULL`
	}
	if err := db.Read.QueryRow(ftsRows).Scan(&fts); err != nil || fts != countRows(t, db, "") {
		t.Errorf("full-text rows = %d (%v), chunk rows = %d", fts, err, countRows(t, db, ""))
	}
}

func TestIndexRefusesBadInput(t *testing.T) {
	m, _, _ := newMemory(t, Options{})
	for _, tc := range []struct {
		name string
		doc  Doc
	}{
		{"no namespace", Doc{Source: SourceNote, Text: "x"}},
		{"unknown namespace kind", Doc{Namespace: "team:x", Source: SourceNote, Text: "x"}},
		{"empty id", Doc{Namespace: "user:", Source: SourceNote, Text: "x"}},
		{"control character", Doc{Namespace: "user:a\nb", Source: SourceNote, Text: "x"}},
		{"bad source", Doc{Namespace: "user:a", Source: "Notes!", Text: "x"}},
		{"bad ref", Doc{Namespace: "user:a", Source: SourceNote, SourceRef: "a\x00b", Text: "x"}},
		{"huge", Doc{Namespace: "user:a", Source: SourceNote, Text: strings.Repeat("x", maxDocBytes+1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := m.Index(context.Background(), tc.doc); !errors.Is(err, ErrInvalid) {
				t.Errorf("Index: %v, want ErrInvalid", err)
			}
		})
	}
	if n, err := m.Index(context.Background(), Doc{Namespace: "user:a", Source: SourceNote, Text: " \n\n "}); n != 0 || err != nil {
		t.Errorf("blank text: %d, %v", n, err)
	}
}

func TestReplaceSourceAndDelete(t *testing.T) {
	ctx := context.Background()
	emb := &funcEmbedder{model: "fake", dim: 32}
	m, db, _ := newMemory(t, Options{Embedder: emb})
	g := newTextGen(2)
	paras := []string{g.paragraph(8), g.paragraph(8), g.paragraph(8), g.paragraph(8)}
	doc := Doc{Namespace: "user:alice", Source: SourceUserMD, SourceRef: "USER.md", Text: strings.Join(paras, "\n\n")}
	added, removed, err := m.ReplaceSource(ctx, doc)
	if err != nil || added == 0 || removed != 0 {
		t.Fatalf("first ReplaceSource = %d, %d, %v", added, removed, err)
	}
	before := countRows(t, db, "source = 'user_md'")
	calls := emb.calls.Load()

	if a, r, err := m.ReplaceSource(ctx, doc); a != 0 || r != 0 || err != nil {
		t.Errorf("unchanged text: %d, %d, %v", a, r, err)
	}
	if emb.calls.Load() != calls {
		t.Error("unchanged text was embedded again")
	}

	// Replace the last paragraph: its chunks go, the others keep their vectors.
	doc.Text = strings.Join(append(paras[:3:3], "Alice now prefers window seats on long flights."), "\n\n")
	added, removed, err = m.ReplaceSource(ctx, doc)
	if err != nil || added == 0 || removed == 0 {
		t.Fatalf("changed text: %d, %d, %v", added, removed, err)
	}
	if got := countRows(t, db, "source = 'user_md'"); got != len(Chunk(doc.Text)) {
		t.Errorf("%d rows after replace, want %d (before %d)", got, len(Chunk(doc.Text)), before)
	}
	if got := countRows(t, db, "embedding IS NULL"); got != 0 {
		t.Errorf("%d chunks lost or lack their vectors", got)
	}
	ids := chunkIDs(t, db, "user:alice", SourceUserMD, "USER.md")
	var contents []string
	for _, id := range ids {
		var c string
		db.Read.QueryRow(`SELECT content FROM memory_chunks WHERE id = ?`, id).Scan(&c)
		contents = append(contents, c)
	}
	if strings.Join(contents, "\x00") != strings.Join(Chunk(doc.Text), "\x00") {
		t.Error("after a replace the chunks are not stored in text order")
	}
	hits, err := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "window seats"})
	if err != nil || len(hits) == 0 || !strings.Contains(hits[0].Text, "window seats") {
		t.Errorf("new text not found: %+v, %v", hits, err)
	}

	n, err := m.Delete(ctx, "user:alice", SourceUserMD, "USER.md")
	if err != nil || n != len(ids) {
		t.Errorf("Delete = %d, %v, want %d", n, err, len(ids))
	}
	if got := countRows(t, db, ""); got != 0 {
		t.Errorf("%d rows left", got)
	}
	if hits, err := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "window seats"}); err != nil || len(hits) != 0 {
		t.Errorf("deleted text still found: %+v, %v", hits, err)
	}
}

func chunkIDs(t *testing.T, db *store.DB, ns, source, ref string) []int64 {
	t.Helper()
	rows, err := db.Read.Query(`SELECT id FROM memory_chunks WHERE namespace = ? AND source = ? AND source_ref = ? ORDER BY id`, ns, source, ref)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		ids = append(ids, id)
	}
	return ids
}

func TestIndexConversation(t *testing.T) {
	ctx := context.Background()
	m, db, _ := newMemory(t, Options{})
	at := time.Date(2026, 2, 20, 9, 30, 0, 0, time.UTC)
	turns := []Turn{
		{Speaker: "Alice", Text: "Can you book the train to Porto for Friday?", At: at},
		{Speaker: "Istota", Text: "Booked: 08:12 from Lisbon, seat 42.", At: at.Add(time.Minute)},
		{Speaker: "Alice", Text: "   "},
	}
	for _, ns := range []string{UserNamespace("alice"), ChannelNamespace("tok123")} {
		if n, err := m.IndexConversation(ctx, ns, 42, turns); err != nil || n != 1 {
			t.Fatalf("IndexConversation(%s) = %d, %v", ns, n, err)
		}
	}
	var content, created, ref string
	var eph int
	err := db.Read.QueryRow(`SELECT content, created_at, source_ref, ephemeral FROM memory_chunks WHERE namespace = 'user:alice'`).
		Scan(&content, &created, &ref, &eph)
	if err != nil {
		t.Fatal(err)
	}
	want := "Alice: Can you book the train to Porto for Friday?\n\nIstota: Booked: 08:12 from Lisbon, seat 42."
	if content != want || created != store.FormatTime(at) || ref != "task:42" || eph != 1 {
		t.Errorf("stored %q %s %s ephemeral=%d", content, created, ref, eph)
	}
	// A retried task re-indexes its conversation in place.
	turns[1].Text = "Booked: 09:40 from Lisbon, seat 7."
	if _, err := m.IndexConversation(ctx, "user:alice", 42, turns[:2]); err != nil {
		t.Fatal(err)
	}
	if got := countRows(t, db, "namespace = 'user:alice'"); got != 1 {
		t.Errorf("%d rows after re-indexing the task, want 1", got)
	}
	hits, err := m.Search(ctx, Query{Namespaces: []string{"channel:tok123"}, Text: "train Porto"})
	if err != nil || len(hits) != 1 || hits[0].SourceRef != "task:42" || hits[0].Source != SourceConversation {
		t.Errorf("channel search = %+v, %v", hits, err)
	}
}

func TestApplyRetention(t *testing.T) {
	ctx := context.Background()
	m, db, clock := newMemory(t, Options{})
	const days = 30
	cutoff := testNow.AddDate(0, 0, -days)
	docs := []struct {
		ref       string
		created   time.Time
		ephemeral bool
		kept      bool
	}{
		{"recent", testNow.Add(-24 * time.Hour), true, true},
		{"exactly at the cutoff", cutoff, true, true},
		{"a millisecond older", cutoff.Add(-time.Millisecond), true, false},
		{"a year old", testNow.AddDate(-1, 0, 0), true, false},
		{"USER.md from long ago", testNow.AddDate(-3, 0, 0), false, true},
	}
	for i, d := range docs {
		mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: d.ref,
			Text: "Alice remembers item number " + string(rune('A'+i)) + ".", CreatedAt: d.created, Ephemeral: d.ephemeral})
	}
	mustIndex(t, m, Doc{Namespace: "user:bob", Source: SourceNote, SourceRef: "old", Text: "Bob's old note.",
		CreatedAt: testNow.AddDate(-1, 0, 0), Ephemeral: true})

	if n, err := m.ApplyRetention(ctx, "user:alice", 0); n != 0 || err != nil {
		t.Errorf("retention 0 days = %d, %v; want nothing deleted", n, err)
	}
	n, err := m.ApplyRetention(ctx, "user:alice", days)
	if err != nil || n != 2 {
		t.Fatalf("ApplyRetention = %d, %v, want 2", n, err)
	}
	for _, d := range docs {
		got := countRows(t, db, "namespace = 'user:alice' AND source_ref = ?", d.ref) == 1
		if got != d.kept {
			t.Errorf("%s: kept = %v, want %v", d.ref, got, d.kept)
		}
	}
	if countRows(t, db, "namespace = 'user:bob'") != 1 {
		t.Error("retention of alice touched bob")
	}
	// A day later the chunk that sat on the cutoff has expired; USER.md never does.
	clock.Advance(24 * time.Hour)
	if n, err := m.ApplyRetention(ctx, "user:alice", days); n != 1 || err != nil {
		t.Errorf("a day later: %d, %v, want 1", n, err)
	}
	if countRows(t, db, "source_ref = 'USER.md from long ago'") != 1 {
		t.Error("a non-ephemeral chunk was deleted")
	}
}

func TestNonEphemeralDocumentTakesOverDuplicateChunk(t *testing.T) {
	ctx := context.Background()
	m, db, _ := newMemory(t, Options{})
	text := "Alice is allergic to peanuts."
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceConversation, SourceRef: "task:1", Text: text,
		CreatedAt: testNow.AddDate(-1, 0, 0), Ephemeral: true})
	if n := mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceUserMD, SourceRef: "USER.md", Text: text}); n != 1 {
		t.Fatalf("USER.md added %d, want it to take the chunk over", n)
	}
	if n, _ := m.ApplyRetention(ctx, "user:alice", 30); n != 0 {
		t.Error("retention deleted text that USER.md holds")
	}
	if countRows(t, db, "source = 'user_md' AND ephemeral = 0") != 1 {
		t.Error("the chunk does not belong to USER.md")
	}
	// The other way round an ephemeral duplicate never takes a USER.md chunk.
	if n := mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: "n", Text: text, Ephemeral: true}); n != 0 {
		t.Errorf("ephemeral duplicate added %d", n)
	}
}

func TestStats(t *testing.T) {
	ctx := context.Background()
	emb := &funcEmbedder{model: "fake", dim: 16}
	m, db, _ := newMemory(t, Options{Embedder: emb})
	g := newTextGen(3)
	old := testNow.AddDate(0, -2, 0)
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: "a", Text: g.document(5), CreatedAt: old, Ephemeral: true})
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceUserMD, SourceRef: "USER.md", Text: "Alice likes tea."})
	mustIndex(t, m, Doc{Namespace: "user:bob", Source: SourceNote, SourceRef: "b", Text: "Bob likes coffee.", Ephemeral: true})
	if _, err := db.Write.Exec(`UPDATE memory_chunks SET embedding = NULL WHERE source = 'user_md'`); err != nil {
		t.Fatal(err)
	}
	st, err := m.Stats(ctx, "user:alice")
	if err != nil {
		t.Fatal(err)
	}
	notes := countRows(t, db, "namespace = 'user:alice' AND source = 'note'")
	if st.Chunks != notes+1 || st.Sources != 2 || st.BySource[SourceNote] != notes || st.BySource[SourceUserMD] != 1 ||
		st.Ephemeral != notes || st.Embedded != notes || st.NotEmbedded != 1 || st.EmbedModel != "fake" ||
		!st.Oldest.Equal(old) || !st.Newest.Equal(testNow) {
		t.Errorf("Stats = %+v (notes %d)", st, notes)
	}
	res, err := m.Reindex(ctx, "user:alice")
	if err != nil || res.Embedded != 1 || res.Remaining != 0 {
		t.Errorf("Reindex = %+v, %v", res, err)
	}
	if st, _ := m.Stats(ctx, "user:alice"); st.NotEmbedded != 0 {
		t.Errorf("after Reindex %d chunks lack vectors", st.NotEmbedded)
	}
	if st, err := m.Stats(ctx, "user:nobody"); err != nil || st.Chunks != 0 || !st.Oldest.IsZero() {
		t.Errorf("empty namespace: %+v, %v", st, err)
	}
	plain := New(db, Options{})
	if _, err := plain.Reindex(ctx, "user:alice"); !errors.Is(err, ErrNoEmbedder) {
		t.Errorf("Reindex without embedder: %v", err)
	}
	if st, _ := plain.Stats(ctx, "user:alice"); st.Embedded != 0 || st.NotEmbedded != st.Chunks {
		t.Errorf("without embedder: %+v", st)
	}
}
