package knowledge

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

// testClock is a settable clock shared by a test and its Graph.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func openGraph(t *testing.T, opts Options) (*Graph, *testClock, *store.DB) {
	t.Helper()
	db, err := testDBs.OpenPath(context.Background(), filepath.Join(t.TempDir(), "k.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clock := &testClock{t: t0}
	opts.Clock = clock.Now
	return New(db, opts), clock, db
}

func lines(facts []Fact) string {
	var out []string
	for _, f := range facts {
		out = append(out, f.String())
	}
	return strings.Join(out, "; ")
}

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		in      Fact
		want    string
		wantErr bool
	}{
		{Fact{Subject: "  Alice ", Predicate: " Lives  In", Object: " Berlin,\t Germany "}, "Alice lives_in Berlin, Germany", false},
		{Fact{Subject: "alice", Predicate: "works-at", Object: "ACME"}, "alice works_at ACME", false},
		{Fact{Subject: "alice", Predicate: "__Job  Title__", Object: "engineer"}, "alice job_title engineer", false},
		{Fact{Subject: " ", Predicate: "x", Object: "y"}, "", true},
		{Fact{Subject: "a", Predicate: "-", Object: "y"}, "", true},
		{Fact{Subject: "a", Predicate: "p", Object: ""}, "", true},
		{Fact{Subject: "a", Predicate: "p", Object: strings.Repeat("x", MaxObjectLen+1)}, "", true},
		{Fact{Subject: "a\x00b", Predicate: "p", Object: "o"}, "", true},
	} {
		t.Run(tc.want, func(t *testing.T) {
			got, err := Normalize(tc.in)
			if tc.wantErr {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("want ErrInvalid, got %v (%q)", err, got.String())
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("got %q, %v; want %q", got.String(), err, tc.want)
			}
		})
	}
}

func TestJaccardBoundary(t *testing.T) {
	// words(prefix, n) gives n distinct words: p0 p1 …
	words := func(prefix string, n int) string {
		var w []string
		for i := range n {
			w = append(w, fmt.Sprintf("%s%d", prefix, i))
		}
		return strings.Join(w, " ")
	}
	for _, tc := range []struct {
		name string
		a, b string
		want float64
		dup  bool
	}{
		// 59 shared words, 100 in the union.
		{"0.59", words("s", 59) + " " + words("a", 20), words("s", 59) + " " + words("b", 21), 0.59, false},
		// 3 shared words, 5 in the union.
		{"0.6", "red blue green yellow", "red blue green purple", 0.6, true},
		{"0.6 large", words("s", 60) + " " + words("a", 20), words("s", 60) + " " + words("b", 20), 0.6, true},
		{"case and punctuation do not matter", "Berlin, Germany", "berlin germany", 1, true},
		{"disjoint", "Berlin", "Paris", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Jaccard(tc.a, tc.b); got != tc.want {
				t.Fatalf("Jaccard = %v, want %v", got, tc.want)
			}
			// Through Add: a multi-valued predicate, so only the duplicate check decides.
			g, _, _ := openGraph(t, Options{})
			ctx := context.Background()
			first, _, err := g.Add(ctx, "user:alice", Fact{Subject: "alice", Predicate: "likes", Object: tc.a})
			if err != nil {
				t.Fatal(err)
			}
			got, res, err := g.Add(ctx, "user:alice", Fact{Subject: "Alice", Predicate: "Likes", Object: tc.b})
			if err != nil {
				t.Fatal(err)
			}
			if tc.dup && (res != Duplicate || got.ID != first.ID) {
				t.Fatalf("want Duplicate of %d, got %s %d", first.ID, res, got.ID)
			}
			if !tc.dup && (res != Added || got.ID == first.ID) {
				t.Fatalf("want Added, got %s %d", res, got.ID)
			}
		})
	}
}

func TestSupersession(t *testing.T) {
	day := func(d int) time.Time { return t0.AddDate(0, 0, d) }
	type add struct {
		f    Fact
		want AddResult
	}
	for _, tc := range []struct {
		name     string
		adds     []add
		current  string
		timeline string
		ended    int // how many facts of the timeline have ended
	}{
		{
			name: "single-valued replaces",
			adds: []add{
				{Fact{Subject: "alice", Predicate: "lives_in", Object: "Berlin", ValidFrom: day(-10)}, Added},
				{Fact{Subject: "Alice", Predicate: "lives in", Object: "Paris", ValidFrom: day(-1)}, Superseded},
			},
			current:  "Alice lives_in Paris",
			timeline: "alice lives_in Berlin; Alice lives_in Paris",
			ended:    1,
		},
		{
			name: "multi-valued accumulates",
			adds: []add{
				{Fact{Subject: "alice", Predicate: "likes", Object: "tea"}, Added},
				{Fact{Subject: "alice", Predicate: "likes", Object: "jazz"}, Added},
			},
			current:  "alice likes tea; alice likes jazz",
			timeline: "alice likes tea; alice likes jazz",
		},
		{
			name: "restated value is a duplicate, not a supersession",
			adds: []add{
				{Fact{Subject: "alice", Predicate: "works_at", Object: "ACME Corp"}, Added},
				{Fact{Subject: "alice", Predicate: "works_at", Object: "acme corp."}, Duplicate},
			},
			current:  "alice works_at ACME Corp",
			timeline: "alice works_at ACME Corp",
		},
		{
			name: "other subject is independent",
			adds: []add{
				{Fact{Subject: "alice", Predicate: "lives_in", Object: "Berlin"}, Added},
				{Fact{Subject: "bob", Predicate: "lives_in", Object: "Paris"}, Added},
			},
			current:  "alice lives_in Berlin; bob lives_in Paris",
			timeline: "alice lives_in Berlin; bob lives_in Paris",
		},
		{
			name: "older value arriving late is stored as history",
			adds: []add{
				{Fact{Subject: "alice", Predicate: "lives_in", Object: "Paris", ValidFrom: day(-1)}, Added},
				{Fact{Subject: "alice", Predicate: "lives_in", Object: "Berlin", ValidFrom: day(-10)}, Historical},
			},
			current:  "alice lives_in Paris",
			timeline: "alice lives_in Berlin; alice lives_in Paris",
			ended:    1,
		},
		{
			name: "configured predicate set",
			adds: []add{
				{Fact{Subject: "alice", Predicate: "likes", Object: "tea", ValidFrom: day(-2)}, Added},
				{Fact{Subject: "alice", Predicate: "likes", Object: "coffee", ValidFrom: day(-1)}, Superseded},
			},
			current:  "alice likes coffee",
			timeline: "alice likes tea; alice likes coffee",
			ended:    1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{}
			if tc.name == "configured predicate set" {
				opts.SingleValued = []string{"Likes"}
			}
			g, _, _ := openGraph(t, opts)
			ctx := context.Background()
			for i, a := range tc.adds {
				_, res, err := g.Add(ctx, "user:alice", a.f)
				if err != nil || res != a.want {
					t.Fatalf("add %d: got %s, %v; want %s", i, res, err, a.want)
				}
			}
			cur, err := g.Current(ctx, "user:alice", "")
			if err != nil {
				t.Fatal(err)
			}
			if got := lines(cur); got != tc.current {
				t.Errorf("current = %q, want %q", got, tc.current)
			}
			tl, err := g.Timeline(ctx, "user:alice", "")
			if err != nil {
				t.Fatal(err)
			}
			if got := lines(tl); got != tc.timeline {
				t.Errorf("timeline = %q, want %q", got, tc.timeline)
			}
			ended := 0
			for _, f := range tl {
				if !f.ValidUntil.IsZero() {
					ended++
					if !f.ValidUntil.After(f.ValidFrom) {
						t.Errorf("fact %q ends %v before it starts %v", f, f.ValidUntil, f.ValidFrom)
					}
				}
			}
			if ended != tc.ended {
				t.Errorf("%d ended facts, want %d", ended, tc.ended)
			}
		})
	}
}

func TestSupersededEndsWhereTheNewOneStarts(t *testing.T) {
	g, _, _ := openGraph(t, Options{})
	ctx := context.Background()
	old, _, _ := g.Add(ctx, "user:a", Fact{Subject: "a", Predicate: "phone", Object: "111", ValidFrom: t0.AddDate(0, -1, 0)})
	nw, res, err := g.Add(ctx, "user:a", Fact{Subject: "a", Predicate: "phone", Object: "222"})
	if err != nil || res != Superseded || !nw.ValidFrom.Equal(t0) {
		t.Fatalf("%+v %s %v", nw, res, err)
	}
	got, err := g.Get(ctx, "user:a", old.ID)
	if err != nil || !got.ValidUntil.Equal(nw.ValidFrom) {
		t.Fatalf("old fact ends %v, want %v (%v)", got.ValidUntil, nw.ValidFrom, err)
	}
}

func TestConcurrentAddsKeepOneCurrentValue(t *testing.T) {
	g, clock, _ := openGraph(t, Options{})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := g.Add(ctx, "user:a", Fact{Subject: "a", Predicate: "lives_in", Object: fmt.Sprintf("city%d", i),
				ValidFrom: t0.Add(time.Duration(i) * time.Minute)})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	clock.Set(t0.Add(time.Hour))
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	cur, _ := g.Current(ctx, "user:a", "a")
	if len(cur) != 1 || cur[0].Object != "city7" {
		t.Fatalf("current = %q, want only the latest value city7", lines(cur))
	}
	tl, _ := g.Timeline(ctx, "user:a", "a")
	open := 0
	for _, f := range tl {
		if f.ValidUntil.IsZero() {
			open++
		}
	}
	if len(tl) != 8 || open != 1 {
		t.Fatalf("timeline has %d facts, %d without an end; want 8 and 1", len(tl), open)
	}
}

func TestEphemeralExpiresAtExactlyNinetyDays(t *testing.T) {
	start := t0
	expiry := start.Add(90 * 24 * time.Hour)
	for _, tc := range []struct {
		name    string
		now     time.Time
		expired bool
	}{
		{"one millisecond before", expiry.Add(-time.Millisecond), false},
		{"exactly 90 days", expiry, true},
		{"after", expiry.Add(time.Hour), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, clock, _ := openGraph(t, Options{})
			ctx := context.Background()
			eph, _, err := g.Add(ctx, "user:a", Fact{Subject: "a", Predicate: "travels_to", Object: "Lisbon", ValidFrom: start, Ephemeral: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := g.Add(ctx, "user:a", Fact{Subject: "a", Predicate: "likes", Object: "tea", ValidFrom: start}); err != nil {
				t.Fatal(err)
			}
			clock.Set(tc.now)
			// Current hides an expired ephemeral fact even before ExpireEphemeral ran.
			cur, _ := g.Current(ctx, "user:a", "")
			if got, want := len(cur), map[bool]int{true: 1, false: 2}[tc.expired]; got != want {
				t.Fatalf("before expiry pass: %d current facts (%q), want %d", got, lines(cur), want)
			}
			n, err := g.ExpireEphemeral(ctx, tc.now)
			if err != nil {
				t.Fatal(err)
			}
			if (n == 1) != tc.expired {
				t.Fatalf("ExpireEphemeral ended %d facts, expired=%v", n, tc.expired)
			}
			got, _ := g.Get(ctx, "user:a", eph.ID)
			if tc.expired && !got.ValidUntil.Equal(expiry) {
				t.Fatalf("valid_until = %v, want %v", got.ValidUntil, expiry)
			}
			if !tc.expired && !got.ValidUntil.IsZero() {
				t.Fatalf("valid_until = %v, want current", got.ValidUntil)
			}
			// A second pass changes nothing.
			if n, _ := g.ExpireEphemeral(ctx, tc.now); n != 0 {
				t.Fatalf("second pass ended %d", n)
			}
		})
	}
}

func TestInvalidateDeleteNotFoundAndIsolation(t *testing.T) {
	g, clock, _ := openGraph(t, Options{})
	ctx := context.Background()
	f, _, err := g.Add(ctx, "user:alice", Fact{Subject: "alice", Predicate: "likes", Object: "tea", Source: "agent"})
	if err != nil || f.Source != "agent" || f.ID == 0 {
		t.Fatalf("%+v %v", f, err)
	}
	if _, _, err := g.Add(ctx, "user:bob", Fact{Subject: "bob", Predicate: "likes", Object: "tea"}); err != nil {
		t.Fatal(err)
	}
	// Bob's namespace cannot see, end or delete Alice's fact.
	if _, err := g.Get(ctx, "user:bob", f.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get across namespaces: %v", err)
	}
	if err := g.Invalidate(ctx, "user:bob", f.ID, time.Time{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Invalidate across namespaces: %v", err)
	}
	if err := g.Delete(ctx, "user:bob", f.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Delete across namespaces: %v", err)
	}
	if cur, _ := g.Current(ctx, "user:bob", ""); lines(cur) != "bob likes tea" {
		t.Fatalf("bob sees %q", lines(cur))
	}
	// Ending at or before the start is refused.
	if err := g.Invalidate(ctx, "user:alice", f.ID, t0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Invalidate at start: %v", err)
	}
	clock.Set(t0.Add(time.Hour))
	if err := g.Invalidate(ctx, "user:alice", f.ID, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if cur, _ := g.Current(ctx, "user:alice", ""); len(cur) != 0 {
		t.Fatalf("invalidated fact still current: %q", lines(cur))
	}
	got, _ := g.Get(ctx, "user:alice", f.ID)
	if !got.ValidUntil.Equal(t0.Add(time.Hour)) {
		t.Fatalf("valid_until = %v", got.ValidUntil)
	}
	// A second invalidation keeps the first end.
	if err := g.Invalidate(ctx, "user:alice", f.ID, t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, _ := g.Get(ctx, "user:alice", f.ID); !got.ValidUntil.Equal(t0.Add(time.Hour)) {
		t.Fatalf("second invalidation moved the end to %v", got.ValidUntil)
	}
	// After invalidation the same fact may be stated again: it is new, not a duplicate.
	if _, res, err := g.Add(ctx, "user:alice", Fact{Subject: "alice", Predicate: "likes", Object: "tea"}); err != nil || res != Added {
		t.Fatalf("re-add after invalidation: %s %v", res, err)
	}
	if err := g.Delete(ctx, "user:alice", f.ID); err != nil {
		t.Fatal(err)
	}
	if err := g.Delete(ctx, "user:alice", f.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if tl, _ := g.Timeline(ctx, "user:alice", "alice"); len(tl) != 1 {
		t.Fatalf("timeline after delete: %q", lines(tl))
	}
	if _, _, err := g.Add(ctx, " ", Fact{Subject: "a", Predicate: "b", Object: "c"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty namespace: %v", err)
	}
}

func TestRelevant(t *testing.T) {
	g, _, _ := openGraph(t, Options{})
	ctx := context.Background()
	for i, f := range []Fact{
		{Subject: "Alice", Predicate: "lives_in", Object: "Berlin"},
		{Subject: "Alice", Predicate: "likes", Object: "green tea"},
		{Subject: "Bob Miller", Predicate: "works_at", Object: "ACME"},
		{Subject: "project Apollo", Predicate: "deadline", Object: "end of March"},
		{Subject: "the cat", Predicate: "is", Object: "the best"},
	} {
		f.ValidFrom = t0.Add(-time.Duration(10-i) * time.Minute)
		if _, _, err := g.Add(ctx, "user:alice", f); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := g.Add(ctx, "user:other", Fact{Subject: "Alice", Predicate: "secret", Object: "x"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		text  string
		limit int
		want  string
	}{
		{"What should I bring Bob? He visits from Berlin.", 10, "Alice lives_in Berlin"},
		{"Ask bob miller about it", 10, "Bob Miller works_at ACME"},
		{"Make Alice some tea", 10, "Alice likes green tea; Alice lives_in Berlin"},
		{"make alice some tea", 1, "Alice likes green tea"},
		{"how is the Apollo project going", 10, "project Apollo deadline end of March"},
		{"the best of the rest", 10, "the cat is the best"},
		{"the one and the other", 10, ""},
		{"nothing here", 10, ""},
		{"Alice", 0, ""},
	} {
		t.Run(tc.text, func(t *testing.T) {
			got, err := g.Relevant(ctx, "user:alice", tc.text, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if lines(got) != tc.want {
				t.Fatalf("got %q, want %q", lines(got), tc.want)
			}
		})
	}
}
