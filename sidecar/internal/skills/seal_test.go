package skills

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/istota/istota/sidecar/internal/store"
)

func newTestCredentials(t *testing.T, db *store.DB) *Credentials {
	t.Helper()
	c, err := NewCredentials(db, bytes.Repeat([]byte{1}, CredentialKeySize), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The database holds no credential in clear: an administrator's sandbox, which may read
// the database, learns names but no values; a value copied to another user's row or
// read with another key does not open.
func TestCredentialsAreSealedAtRest(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	c := newTestCredentials(t, db)
	const secret = "ghp_very-secret-value"
	if err := c.Set(ctx, "alice", "github-token", secret); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := db.Read.QueryRow(`SELECT value FROM user_credentials WHERE user_id = 'alice'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, secret) || !strings.HasPrefix(stored, sealedPrefix) {
		t.Fatalf("stored value %q is not sealed", stored)
	}
	if got, err := c.Get(ctx, "alice", "github-token"); err != nil || got != secret {
		t.Fatalf("Get = %q, %v", got, err)
	}
	// Copied to bob's row, it does not open.
	if _, err := db.Write.Exec(`INSERT INTO user_credentials (user_id, name, value, updated_at) VALUES ('bob', 'github-token', ?, '')`, stored); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "bob", "github-token"); err == nil {
		t.Fatal("a sealed value opened under another user")
	}
	other, _ := NewCredentials(db, bytes.Repeat([]byte{2}, CredentialKeySize), nil)
	if _, err := other.Get(ctx, "alice", "github-token"); err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("another key: %v", err)
	}
	if _, err := NewCredentials(db, []byte("short"), nil); err == nil {
		t.Fatal("a short key was accepted")
	}
}

func TestLegacyClearValuesAreSealed(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	if _, err := db.Write.Exec(`INSERT INTO user_credentials (user_id, name, value, updated_at) VALUES ('alice', 'old', 'clear-value', '')`); err != nil {
		t.Fatal(err)
	}
	c := newTestCredentials(t, db)
	n, err := c.SealLegacy(ctx)
	if err != nil || n != 1 {
		t.Fatalf("SealLegacy = %d, %v", n, err)
	}
	var stored string
	db.Read.QueryRow(`SELECT value FROM user_credentials WHERE name = 'old'`).Scan(&stored)
	if strings.Contains(stored, "clear-value") {
		t.Fatal("still in clear")
	}
	if got, err := c.Get(ctx, "alice", "old"); err != nil || got != "clear-value" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	if _, err := c.Get(ctx, "alice", "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
}
