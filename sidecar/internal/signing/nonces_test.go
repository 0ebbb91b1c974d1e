package signing

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

func TestNoncesRefuseReplayAcrossRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "n.db")
	db, err := testDBs.OpenPath(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	n := NewNonces(db)
	if err := n.Use(ctx, "nonce-0000000000000001", now); err != nil {
		t.Fatal(err)
	}
	if err := n.Use(ctx, "nonce-0000000000000001", now); !errors.Is(err, ErrReplayed) {
		t.Fatalf("second use: %v", err)
	}
	db.Close()

	db, err = testDBs.OpenPath(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n = NewNonces(db)
	if err := n.Use(ctx, "nonce-0000000000000001", now.Add(time.Minute)); !errors.Is(err, ErrReplayed) {
		t.Fatalf("replay after restart: %v", err)
	}
	// Sweeping removes only expired nonces.
	for i := 0; i < 300; i++ {
		if err := n.Use(ctx, fmt.Sprintf("fresh-%016d", i), now.Add(20*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	var left int
	db.Read.QueryRow(`SELECT count(*) FROM request_nonces WHERE nonce = 'nonce-0000000000000001'`).Scan(&left)
	if left != 0 {
		t.Errorf("expired nonce not swept")
	}
}
