package kv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

func openStore(t *testing.T) (*Store, *store.DB) {
	t.Helper()
	db, err := testDBs.OpenPath(context.Background(), filepath.Join(t.TempDir(), "kv.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return New(db, func() time.Time { return now }), db
}

func TestSetGetListDelete(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t)
	for _, e := range []struct{ user, ns, key, value string }{
		{"alice", "notes", "b", "two"},
		{"alice", "notes", "a", "one"},
		{"alice", "other", "x", "ex"},
		{"bob", "notes", "a", "bob's"},
	} {
		if err := s.Set(ctx, e.user, e.ns, e.key, e.value); err != nil {
			t.Fatalf("Set %+v: %v", e, err)
		}
	}
	got, err := s.Get(ctx, "alice", "notes", "a")
	if err != nil || got.Value != "one" || got.UpdatedAt.IsZero() {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if err := s.Set(ctx, "alice", "notes", "a", "uno"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, "alice", "notes", "a"); got.Value != "uno" {
		t.Errorf("after replace: %q", got.Value)
	}
	if got, _ := s.Get(ctx, "bob", "notes", "a"); got.Value != "bob's" {
		t.Errorf("bob's value changed to %q", got.Value)
	}

	list, err := s.List(ctx, "alice", "notes")
	if err != nil || len(list) != 2 || list[0].Key != "a" || list[1].Key != "b" {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if empty, err := s.List(ctx, "alice", "nothing"); err != nil || len(empty) != 0 {
		t.Errorf("List of an empty namespace = %+v, %v", empty, err)
	}
	ns, err := s.Namespaces(ctx, "alice")
	if err != nil || strings.Join(ns, ",") != "notes,other" {
		t.Errorf("Namespaces = %v, %v", ns, err)
	}

	if err := s.Delete(ctx, "alice", "notes", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "alice", "notes", "a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "alice", "notes", "a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, "bob", "notes", "a"); err != nil {
		t.Errorf("bob's entry went with alice's: %v", err)
	}
}

func TestValidation(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t)
	for _, tc := range []struct {
		name           string
		ns, key, value string
	}{
		{"empty namespace", "", "k", "v"},
		{"namespace with slash", "a/b", "k", "v"},
		{"namespace starting with dot", ".a", "k", "v"},
		{"long namespace", strings.Repeat("n", MaxNamespaceLen+1), "k", "v"},
		{"empty key", "ns", "", "v"},
		{"key with newline", "ns", "a\nb", "v"},
		{"long key", "ns", strings.Repeat("k", MaxKeyLen+1), "v"},
		{"invalid UTF-8 key", "ns", "\xff", "v"},
		{"value too large", "ns", "k", strings.Repeat("v", MaxValueBytes+1)},
		{"value with NUL", "ns", "k", "a\x00b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Set(ctx, "alice", tc.ns, tc.key, tc.value)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Set: %v, want ErrInvalid", err)
			}
		})
	}
	for _, ok := range []struct{ ns, key, value string }{
		{"a.b-c_d:e", "any key, with spaces ✓", ""},
		{strings.Repeat("n", MaxNamespaceLen), strings.Repeat("k", MaxKeyLen), strings.Repeat("v", MaxValueBytes)},
	} {
		if err := s.Set(ctx, "alice", ok.ns, ok.key, ok.value); err != nil {
			t.Errorf("Set(%q, %q): %v", ok.ns, ok.key, err)
		}
	}
	if err := s.Set(ctx, " ", "ns", "k", "v"); err == nil {
		t.Error("Set with a blank user id succeeded")
	}
}

func TestEntryCap(t *testing.T) {
	ctx := context.Background()
	s, db := openStore(t)
	// Fill up to one below the cap directly, then cross it through Set.
	tx, err := db.Write.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := range MaxEntriesPerUser - 1 {
		if _, err := tx.Exec(`INSERT INTO kv_store (user_id, namespace, key, value, updated_at) VALUES ('alice', 'bulk', ?, 'v', '2026-01-01 00:00:00.000')`, fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(ctx, "alice", "ns", "last", "v"); err != nil {
		t.Fatalf("Set of the last allowed key: %v", err)
	}
	if err := s.Set(ctx, "alice", "ns", "one-too-many", "v"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Set over the cap: %v, want ErrInvalid", err)
	}
	if err := s.Set(ctx, "alice", "ns", "last", "replaced"); err != nil {
		t.Errorf("replacing an existing key at the cap: %v", err)
	}
	if err := s.Set(ctx, "bob", "ns", "k", "v"); err != nil {
		t.Errorf("another user is not affected by alice's cap: %v", err)
	}
}
