package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/istota/istota/sidecar/internal/store"
)

// testNow is the fake clock's start.
var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func openDB(t testing.TB) *store.DB {
	t.Helper()
	db, err := testDBs.OpenPath(context.Background(), filepath.Join(t.TempDir(), "memory.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// newMemory opens a fresh database and a Memory on a fake clock.
func newMemory(t testing.TB, opts Options) (*Memory, *store.DB, *fakeClock) {
	t.Helper()
	db := openDB(t)
	clock := &fakeClock{now: testNow}
	if opts.Clock == nil {
		opts.Clock = clock.Now
	}
	return New(db, opts), db, clock
}

// syncBuffer is a log sink tests can read while the code under test writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger(buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// synonym gives the fake embedding a little meaning: words in one group share a
// dimension, so a query can find a chunk by vector that shares no word with it.
func synonym(w string) string {
	switch w {
	case "airplane", "plane", "aeroplane":
		return "flight"
	case "trip", "voyage":
		return "journey"
	}
	return w
}

// fakeEmbedding is a deterministic bag-of-words vector: each word (after synonyms) adds
// ±1 to a dimension chosen by its hash.
func fakeEmbedding(text string, dim int) []float32 {
	v := make([]float32, dim)
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		w = synonym(w)
		h := fnv.New64a()
		h.Write([]byte(w))
		x := h.Sum64()
		sign := float32(1)
		if x&1 == 1 {
			sign = -1
		}
		v[(x>>1)%uint64(dim)] += sign
	}
	return v
}

// denseVectors gives every word a fixed pseudo-random direction; a text's embedding is
// the sum of its words' directions. Unlike fakeEmbedding's one-hot words, every
// dimension carries signal, as in the vectors real models produce, so quantised
// indexes behave as they would in use. The cache holds each word's direction once.
type denseVectors struct {
	dim   int
	mu    sync.Mutex
	words map[string][]float32
}

func newDenseVectors(dim int) *denseVectors {
	return &denseVectors{dim: dim, words: map[string][]float32{}}
}

func (d *denseVectors) embed(text string) []float32 {
	v := make([]float32, d.dim)
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		// Like a real model, meaning comes from content words, not from "the" and "of".
		if isStopword(w) || len(w) < 3 || unicode.IsDigit([]rune(w)[0]) {
			continue
		}
		w = synonym(w)
		d.mu.Lock()
		wv, ok := d.words[w]
		if !ok {
			h := fnv.New64a()
			h.Write([]byte(w))
			r := rand.New(rand.NewPCG(h.Sum64(), 7))
			wv = make([]float32, d.dim)
			for i := range wv {
				wv[i] = float32(r.NormFloat64())
			}
			d.words[w] = wv
		}
		d.mu.Unlock()
		for i, x := range wv {
			v[i] += x
		}
	}
	return v
}

// denseEmbedder is an in-process Embedder over denseVectors.
type denseEmbedder struct {
	model string
	vecs  *denseVectors
}

func (e *denseEmbedder) Model() string { return e.model }

func (e *denseEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = e.vecs.embed(t)
	}
	return out, nil
}

// funcEmbedder is an in-process Embedder for benchmarks and unit tests.
type funcEmbedder struct {
	model string
	dim   int
	calls atomic.Int64
}

func (f *funcEmbedder) Model() string { return f.model }

func (f *funcEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	f.calls.Add(1)
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = fakeEmbedding(t, f.dim)
	}
	return out, nil
}

// embedServer is an OpenAI-compatible embeddings endpoint on loopback.
type embedServer struct {
	*httptest.Server
	key      string
	dim      int
	failing  atomic.Bool
	requests atomic.Int64
	inputs   atomic.Int64 // texts embedded
	mu       sync.Mutex
	paths    []string
}

func newEmbedServer(t testing.TB, key string, dim int) *embedServer {
	t.Helper()
	s := &embedServer{key: key, dim: dim}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		s.mu.Lock()
		s.paths = append(s.paths, r.URL.Path)
		s.mu.Unlock()
		if s.failing.Load() {
			// A careless server that echoes the request's credentials.
			http.Error(w, "upstream overloaded; auth was "+r.Header.Get("Authorization"), http.StatusServiceUnavailable)
			return
		}
		if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+s.key ||
			r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad request", http.StatusUnauthorized)
			return
		}
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model == "" || len(req.Input) == 0 {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		s.inputs.Add(int64(len(req.Input)))
		type item struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		resp := struct {
			Object string `json:"object"`
			Data   []item `json:"data"`
			Model  string `json:"model"`
		}{Object: "list", Model: req.Model}
		// Answer in reverse order: clients must sort by index.
		for i := len(req.Input) - 1; i >= 0; i-- {
			resp.Data = append(resp.Data, item{"embedding", i, fakeEmbedding(req.Input[i], s.dim)})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *embedServer) embedder(t testing.TB, base string) *HTTPEmbedder {
	t.Helper()
	e, err := NewHTTPEmbedder(HTTPEmbedderConfig{URL: base, Model: "fake-embed-1", APIKey: s.key})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// mustIndex indexes d or fails the test.
func mustIndex(t testing.TB, m *Memory, d Doc) int {
	t.Helper()
	n, err := m.Index(context.Background(), d)
	if err != nil {
		t.Fatalf("Index(%s %s %s): %v", d.Namespace, d.Source, d.SourceRef, err)
	}
	return n
}

func countRows(t testing.TB, db *store.DB, where string, args ...any) int {
	t.Helper()
	var n int
	q := "SELECT count(*) FROM memory_chunks"
	if where != "" {
		q += " WHERE " + where
	}
	if err := db.Read.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func refs(hits []Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.SourceRef
	}
	return out
}
