package signing

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

// ErrReplayed means a nonce was presented twice within the timestamp window.
var ErrReplayed = errors.New("request nonce already used")

// Nonces remembers the nonces of accepted requests until their window closes. They are
// kept in the database so a replay is refused even across a sidecar restart.
type Nonces struct {
	db   *store.DB
	uses atomic.Int64
}

// NewNonces returns a nonce store over db.
func NewNonces(db *store.DB) *Nonces { return &Nonces{db: db} }

// Use records nonce as used at now, or returns ErrReplayed.
func (n *Nonces) Use(ctx context.Context, nonce string, now time.Time) error {
	// A nonce must be remembered for as long as its timestamp could still be accepted:
	// up to MaxSkew in the future plus MaxSkew of validity.
	res, err := n.db.Write.ExecContext(ctx, `INSERT INTO request_nonces (nonce, expires_at) VALUES (?, ?) ON CONFLICT DO NOTHING`,
		nonce, store.FormatTime(now.Add(2*MaxSkew)))
	if err != nil {
		return fmt.Errorf("record nonce: %w", err)
	}
	if c, _ := res.RowsAffected(); c == 0 {
		return ErrReplayed
	}
	// Sweep expired nonces now and then instead of on every request.
	if n.uses.Add(1)%256 == 0 {
		if _, err := n.db.Write.ExecContext(ctx, `DELETE FROM request_nonces WHERE expires_at < ?`, store.FormatTime(now)); err != nil {
			return fmt.Errorf("sweep nonces: %w", err)
		}
	}
	return nil
}
