package memory

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const testKey = "sk-test-0123456789-secret"

func TestHTTPEmbedderEndpoint(t *testing.T) {
	srv := newEmbedServer(t, testKey, 8)
	for _, tc := range []struct {
		base string
		path string
	}{
		{srv.URL, "/v1/embeddings"},
		{srv.URL + "/", "/v1/embeddings"},
		{srv.URL + "/v1", "/v1/embeddings"},
		{srv.URL + "/openai/v1/", "/openai/v1/embeddings"},
		{srv.URL + "/custom/embeddings", "/custom/embeddings"},
		{srv.URL + "/proxy", "/proxy/v1/embeddings"},
	} {
		t.Run(tc.base, func(t *testing.T) {
			srv.mu.Lock()
			srv.paths = nil
			srv.mu.Unlock()
			vecs, err := srv.embedder(t, tc.base).Embed(context.Background(), []string{"one", "two words", "three"})
			if err != nil {
				t.Fatal(err)
			}
			if len(vecs) != 3 || len(vecs[1]) != 8 {
				t.Fatalf("got %d vectors", len(vecs))
			}
			// The server answers in reverse order; the client puts them back.
			for i, text := range []string{"one", "two words", "three"} {
				want := fakeEmbedding(text, 8)
				for k := range want {
					if vecs[i][k] != want[k] {
						t.Fatalf("vector %d is not the one for %q", i, text)
					}
				}
			}
			srv.mu.Lock()
			defer srv.mu.Unlock()
			if len(srv.paths) != 1 || srv.paths[0] != tc.path {
				t.Errorf("requested %v, want %s", srv.paths, tc.path)
			}
		})
	}
	for _, cfg := range []HTTPEmbedderConfig{
		{URL: "", Model: "m"},
		{URL: "ftp://x", Model: "m"},
		{URL: "http://", Model: "m"},
		{URL: srv.URL, Model: " "},
	} {
		if _, err := NewHTTPEmbedder(cfg); err == nil {
			t.Errorf("NewHTTPEmbedder(%+v) accepted", cfg)
		}
	}
}

func TestHTTPEmbedderBadResponses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"server error echoing the key", 500, "boom: Bearer " + testKey, "HTTP 500"},
		{"not JSON", 200, "<html>", "decode"},
		{"too few vectors", 200, `{"data":[{"index":0,"embedding":[1,2]}]}`, "got 1"},
		{"repeated index", 200, `{"data":[{"index":0,"embedding":[1,2]},{"index":0,"embedding":[1,2]}]}`, "repeated index"},
		{"index out of range", 200, `{"data":[{"index":0,"embedding":[1,2]},{"index":5,"embedding":[1,2]}]}`, "bad or repeated"},
		{"mixed dimensions", 200, `{"data":[{"index":0,"embedding":[1,2]},{"index":1,"embedding":[1,2,3]}]}`, "dimensions"},
		{"empty vector", 200, `{"data":[{"index":0,"embedding":[]},{"index":1,"embedding":[]}]}`, "dimensions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			e, err := NewHTTPEmbedder(HTTPEmbedderConfig{URL: srv.URL, Model: "m", APIKey: testKey})
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.Embed(context.Background(), []string{"a", "b"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Embed: %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), testKey) {
				t.Errorf("the error shows the API key: %v", err)
			}
		})
	}
}

func TestHybridSearch(t *testing.T) {
	ctx := context.Background()
	const dim = 512 // wide enough that no word of these documents collides with "flight"
	srv := newEmbedServer(t, testKey, dim)
	m, db, _ := newMemory(t, Options{Embedder: srv.embedder(t, srv.URL), EmbedBatch: 2})
	docs := map[string]string{
		"flight": "Booked the flight to Lisbon for the conference.",
		"kettle": "Bought a new kettle for the office kitchen.",
		"garden": "Planted tomatoes and basil in the garden.",
	}
	for _, ref := range []string{"flight", "kettle", "garden"} {
		mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: ref, Text: docs[ref], Ephemeral: true})
	}
	if got := srv.requests.Load(); got != 3 {
		t.Errorf("%d embeddings requests for 3 single-chunk documents", got)
	}

	// Vectors are stored normalized, little-endian float32, with their model.
	rows, err := db.Read.Query(`SELECT content, embedding, embed_model FROM memory_chunks`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var content, model string
		var blob []byte
		if err := rows.Scan(&content, &blob, &model); err != nil {
			t.Fatal(err)
		}
		v, ok := decodeVector(blob)
		want, _ := unitVector(fakeEmbedding(content, dim))
		if !ok || len(blob) != 4*dim || model != "fake-embed-1" {
			t.Fatalf("stored %d bytes of model %q", len(blob), model)
		}
		var norm float64
		for i := range v {
			norm += float64(v[i]) * float64(v[i])
			if math.Abs(float64(v[i]-want[i])) > 1e-6 {
				t.Fatalf("stored vector differs from the endpoint's at %d", i)
			}
		}
		if math.Abs(norm-1) > 1e-5 {
			t.Errorf("stored vector has length² %v", norm)
		}
	}
	rows.Close()

	// "airplane" appears in no chunk: only the vectors (where airplane ~ flight) find it.
	hits, err := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "airplane"})
	if err != nil || len(hits) == 0 || hits[0].SourceRef != "flight" {
		t.Errorf("hybrid search for airplane = %q, %v", refs(hits), err)
	}
	keywordsOnly := New(db, Options{Clock: func() time.Time { return testNow }})
	if hits, err := keywordsOnly.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "airplane"}); err != nil || len(hits) != 0 {
		t.Errorf("keyword-only search for airplane = %q, %v", refs(hits), err)
	}
	strict := New(db, Options{Embedder: srv.embedder(t, srv.URL), MinSimilarity: 0.9, Clock: func() time.Time { return testNow }})
	if hits, err := strict.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "airplane"}); err != nil || len(hits) != 0 {
		t.Errorf("airplane above similarity 0.9 = %q, %v", refs(hits), err)
	}
	// Fusion: the chunk both rankings find comes first, the one only vectors find
	// (airplane ~ flight) follows.
	hits, err = m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "kettle airplane"})
	if got := refs(hits); err != nil || len(got) < 2 || got[0] != "kettle" || got[1] != "flight" {
		t.Errorf("fused ranking = %q, %v", got, err)
	}
	// Vectors respect namespaces too.
	mustIndex(t, m, Doc{Namespace: "user:bob", Source: SourceNote, SourceRef: "bob-flight", Text: "Bob's airplane to Oslo.", Ephemeral: true})
	hits, _ = m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "airplane Oslo"})
	for _, h := range hits {
		if h.Namespace != "user:alice" {
			t.Errorf("alice's hybrid search returned %s", h.SourceRef)
		}
	}
}

func TestEmbeddingFailureFallsBackToKeywords(t *testing.T) {
	ctx := context.Background()
	srv := newEmbedServer(t, testKey, 64)
	srv.failing.Store(true)
	var logs syncBuffer
	m, db, clock := newMemory(t, Options{Embedder: srv.embedder(t, srv.URL), Logger: testLogger(&logs)})

	for _, d := range []struct{ ref, text string }{
		{"flight", "Booked the flight to Lisbon for the conference."},
		{"kettle", "Bought a new kettle for the office kitchen."},
	} {
		if n := mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: d.ref, Text: d.text, Ephemeral: true}); n != 1 {
			t.Fatalf("Index while the endpoint fails added %d", n)
		}
	}
	if got := countRows(t, db, "embedding IS NULL"); got != 2 {
		t.Errorf("%d chunks without vectors, want 2", got)
	}
	hits, err := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "Lisbon"})
	if err != nil || len(hits) != 1 || hits[0].SourceRef != "flight" {
		t.Errorf("keyword fallback = %q, %v", refs(hits), err)
	}
	if hits, err := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "airplane"}); err != nil || len(hits) != 0 {
		t.Errorf("airplane without vectors = %q, %v", refs(hits), err)
	}
	if got := srv.requests.Load(); got != 1 {
		t.Errorf("%d requests to a failing endpoint within its rest period, want 1", got)
	}
	if got := strings.Count(logs.String(), "embeddings endpoint failed"); got != 1 {
		t.Errorf("failure logged %d times, want once:\n%s", got, logs.String())
	}

	// Past the rest period, and with the endpoint back, vectors return.
	srv.failing.Store(false)
	clock.Advance(2 * embedRetryAfter)
	res, err := m.Reindex(ctx, "user:alice")
	if err != nil || res.Embedded != 2 || res.Remaining != 0 {
		t.Fatalf("Reindex = %+v, %v", res, err)
	}
	hits, err = m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "airplane"})
	if err != nil || len(hits) == 0 || hits[0].SourceRef != "flight" {
		t.Errorf("after recovery = %q, %v", refs(hits), err)
	}
	if !strings.Contains(logs.String(), "recovered") {
		t.Errorf("recovery not logged:\n%s", logs.String())
	}

	// The nightly fill is Reindex; without an endpoint it has nothing to do.
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: "second", Text: "Another note on trains.", Ephemeral: true})
	srv.failing.Store(true)
	clock.Advance(2 * embedRetryAfter)
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: "down", Text: "Written while the endpoint was down.", Ephemeral: true})
	srv.failing.Store(false)
	if n, err := m.FillVectors(ctx, "user:alice"); err != nil || n != 1 {
		t.Fatalf("FillVectors = %d, %v", n, err)
	}
	if n, err := New(db, Options{}).FillVectors(ctx, "user:alice"); err != nil || n != 0 {
		t.Fatalf("FillVectors without an endpoint = %d, %v", n, err)
	}

	// A failing Reindex reports what is left.
	srv.failing.Store(true)
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: "new", Text: "A third note.", Ephemeral: true})
	res, err = m.Reindex(ctx, "user:alice")
	if err == nil || res.Remaining != 1 {
		t.Errorf("failing Reindex = %+v, %v", res, err)
	}
	if strings.Contains(logs.String(), testKey) || (err != nil && strings.Contains(err.Error(), testKey)) {
		t.Error("the API key reached the log or an error")
	}
}

func TestSlowEmbeddingEndpointDoesNotBlockSearch(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // hang until the client gives up
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	e, err := NewHTTPEmbedder(HTTPEmbedderConfig{URL: srv.URL, Model: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	db := openDB(t)
	// Index without the endpoint, search with it: only the query needs a vector.
	mustIndex(t, New(db, Options{}), Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: "n", Text: "Lisbon in May.", Ephemeral: true})
	m := New(db, Options{Embedder: e, QueryTimeout: 200 * time.Millisecond})
	hits, err := m.Search(ctx, Query{Namespaces: []string{"user:alice"}, Text: "Lisbon"})
	if err != nil || len(hits) != 1 {
		t.Errorf("search with a hanging endpoint = %q, %v", refs(hits), err)
	}
	// A caller that gives up gets its error, not keyword results.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Search(cctx, Query{Namespaces: []string{"user:alice"}, Text: "Lisbon"}); err == nil {
		t.Error("a cancelled search succeeded")
	}
}
