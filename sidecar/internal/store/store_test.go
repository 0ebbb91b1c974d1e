package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOpenMigratesOnceAndUsesWAL(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sub", "s.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var mode string
	var version, fk int
	db.Write.QueryRow("PRAGMA journal_mode").Scan(&mode)
	db.Write.QueryRow("PRAGMA user_version").Scan(&version)
	db.Write.QueryRow("PRAGMA foreign_keys").Scan(&fk)
	if mode != "wal" || version != SchemaVersion() || version < 1 || fk != 1 {
		t.Fatalf("journal_mode=%s user_version=%d foreign_keys=%d", mode, version, fk)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm()&0o007 != 0 {
		t.Fatalf("database file mode: %v %v", fi.Mode(), err)
	}
	if _, err := db.Read.Exec(`INSERT INTO settings (key, value) VALUES ('a', 'b')`); err == nil {
		t.Fatal("the read pool accepted a write")
	}
	db.Close()
	// Opening again applies nothing twice.
	db, err = Open(ctx, path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	db.Close()
}

// Every connection reads the database through a memory map, and a reader still sees
// what the writer wrote, before and after a checkpoint moves it from the WAL into the
// (grown) mapped file.
func TestConnectionsReadThroughTheMap(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for name, pool := range map[string]*sql.DB{"writer": db.Write, "reader": db.Read} {
		var size int64
		if err := pool.QueryRow("PRAGMA mmap_size").Scan(&size); err != nil || size != mmapSize {
			t.Fatalf("%s: mmap_size = %d (%v), want %d", name, size, err, int64(mmapSize))
		}
	}
	value := strings.Repeat("v", 3000)
	count := func() int {
		var n int
		if err := db.Read.QueryRow(`SELECT count(*) FROM settings WHERE key LIKE 'm%' AND value = ?`, value).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for round := 1; round <= 3; round++ {
		for i := range 500 {
			if _, err := db.Write.Exec(`INSERT INTO settings (key, value) VALUES (?, ?)`, fmt.Sprintf("m%d-%d", round, i), value); err != nil {
				t.Fatal(err)
			}
		}
		if got := count(); got != 500*round {
			t.Fatalf("round %d, from the WAL: reader sees %d rows, want %d", round, got, 500*round)
		}
		if _, err := db.Write.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			t.Fatal(err)
		}
		if got := count(); got != 500*round {
			t.Fatalf("round %d, from the file: reader sees %d rows, want %d", round, got, 500*round)
		}
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Write.Exec("PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(ctx, path); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("want ErrSchemaTooNew, got %v", err)
	}
}

func TestTimeRoundTripAndOrder(t *testing.T) {
	a := time.Date(2026, 3, 29, 1, 59, 59, 999_000_000, time.FixedZone("CET", 3600))
	b := a.Add(time.Millisecond)
	got, err := ParseTime(FormatTime(a))
	if err != nil || !got.Equal(a) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	if !(FormatTime(a) < FormatTime(b)) {
		t.Fatal("stored times do not sort as text")
	}
	if z, err := ParseTime(""); err != nil || !z.IsZero() {
		t.Fatal("empty must parse as zero")
	}
	if _, err := ParseTime("yesterday"); err == nil {
		t.Fatal("garbage parsed")
	}
}
