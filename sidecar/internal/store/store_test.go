package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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
