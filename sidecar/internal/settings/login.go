package settings

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

// loginRefusedKey is the settings row (outside the admin. prefix) where the last refusal
// of the model credential by the upstream API is kept, so `istota doctor`, a separate
// process, can report it too.
const loginRefusedKey = "state.login_refused"

// Refusal is the model API refusing the credential in effect (HTTP 401 or 403).
type Refusal struct {
	At     time.Time
	Status int
	Kind   string // LoginSubscription or LoginAPIKey
}

type refusalRow struct {
	At          string `json:"at"`
	Status      int    `json:"status"`
	Kind        string `json:"kind"`
	Fingerprint string `json:"fingerprint"`
}

// fingerprint identifies a secret without revealing it.
func fingerprint(secret string) string {
	sum := sha256.Sum256([]byte("istota-login\n" + secret))
	return hex.EncodeToString(sum[:8])
}

// RecordLoginRefused notes that the model API refused the credential in effect now with
// status. A subscription token from `claude setup-token` cannot be refreshed by the
// sidecar (it comes without a refresh token), so the admin is told instead.
func (s *Store) RecordLoginRefused(ctx context.Context, status int) error {
	l := s.Login()
	if l.Kind == LoginNone {
		return nil
	}
	b, err := json.Marshal(refusalRow{At: store.FormatTime(s.opts.Clock()), Status: status, Kind: l.Kind, Fingerprint: fingerprint(l.Secret)})
	if err != nil {
		return fmt.Errorf("settings: record login refusal: %w", err)
	}
	_, err = s.db.Write.ExecContext(ctx, `INSERT INTO settings (key, value, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		loginRefusedKey, string(b), store.FormatTime(s.opts.Clock()))
	if err != nil {
		return fmt.Errorf("settings: record login refusal: %w", err)
	}
	return nil
}

// LoginRefused returns the last refusal of the credential in effect now; ok is false
// when it was never refused, or only an earlier credential was (a new token pasted in the
// panel clears the warning at once).
func (s *Store) LoginRefused(ctx context.Context) (r Refusal, ok bool, err error) {
	var raw string
	err = s.db.Read.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ?`, loginRefusedKey).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return Refusal{}, false, nil
	}
	if err != nil {
		return Refusal{}, false, fmt.Errorf("settings: login refusal: %w", err)
	}
	var row refusalRow
	if err := json.Unmarshal([]byte(raw), &row); err != nil {
		return Refusal{}, false, fmt.Errorf("settings: login refusal: %w", err)
	}
	l := s.Login()
	if l.Kind == LoginNone || row.Kind != l.Kind || row.Fingerprint != fingerprint(l.Secret) {
		return Refusal{}, false, nil
	}
	at, err := store.ParseTime(row.At)
	if err != nil {
		return Refusal{}, false, fmt.Errorf("settings: login refusal: %w", err)
	}
	return Refusal{At: at, Status: row.Status, Kind: row.Kind}, true, nil
}

// Advice is what the admin should do about a refusal, in plain words.
func (r Refusal) Advice() string {
	if r.Kind == LoginSubscription {
		return fmt.Sprintf("the model API refused the Claude subscription token (HTTP %d) at %s: it has probably expired or been revoked, and it cannot be refreshed here; run `claude setup-token` and paste the new token into Administration settings → Istota → Model",
			r.Status, r.At.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("the model API refused the API key (HTTP %d) at %s: check or replace it in Administration settings → Istota → Model",
		r.Status, r.At.UTC().Format(time.RFC3339))
}
