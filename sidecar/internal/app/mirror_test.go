package app

import (
	"strings"
	"testing"

	"github.com/istota/istota/sidecar/internal/store"
)

// A host alone with its SQLite database keeps the records of its one mirror, named ""; a
// host sharing PostgreSQL gets a name of its own that lasts across restarts, and
// another data directory, or the same one on another machine, gets another.
func TestMirrorName(t *testing.T) {
	if got, err := mirrorName(store.SQLite, t.TempDir(), "h1"); err != nil || got != "" {
		t.Fatalf("SQLite: %q, %v", got, err)
	}
	dir := t.TempDir()
	first, err := mirrorName(store.Postgres, dir, "h1")
	if err != nil || !strings.HasPrefix(first, "h1/") || len(first) != len("h1/")+16 {
		t.Fatalf("PostgreSQL: %q, %v", first, err)
	}
	if again, err := mirrorName(store.Postgres, dir, "h1"); err != nil || again != first {
		t.Fatalf("after a restart: %q (%v), want %q", again, err, first)
	}
	if other, _ := mirrorName(store.Postgres, t.TempDir(), "h1"); other == first {
		t.Fatal("two data directories share a mirror name")
	}
	if moved, _ := mirrorName(store.Postgres, dir, "h2"); moved == first {
		t.Fatal("a data directory copied to another host keeps its mirror name")
	}
}
