package skills

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/store"
)

// MaxCredentialBytes bounds one credential value (long enough for a JWT or a PEM key).
const MaxCredentialBytes = 16 << 10

// ErrInvalidCredential marks a credential name or value that cannot be stored. Its
// message never contains the value.
var ErrInvalidCredential = errors.New("invalid credential")

// Credentials is the per-user credential store (table user_credentials). Values leave
// it only through Get, which the credential proxy calls to hand a skill the secrets its
// manifest declares. The only other reader is the sidecar acting for that same user
// outside any sandbox (package mailbox: the briefing reading the user's own mailbox);
// nothing that runs for another user, and nothing inside a sandbox, may read them.
//
// Values are sealed with AES-256-GCM under a key kept outside the database, because
// administrators' sandboxes may read the database: a copy of it reveals which
// credentials exist, never their values. The user and the name are bound into each
// sealed value, so a value moved to another row does not open.
type Credentials struct {
	db    *store.DB
	aead  cipher.AEAD
	clock func() time.Time
}

// CredentialKeySize is the length of the key NewCredentials takes.
const CredentialKeySize = 32

// sealedPrefix marks a sealed value; rows written before sealing existed have none and
// are sealed by SealLegacy.
const sealedPrefix = "v1:"

// NewCredentials returns a Credentials over db that seals values with key
// (CredentialKeySize random bytes). clock may be nil (time.Now).
func NewCredentials(db *store.DB, key []byte, clock func() time.Time) (*Credentials, error) {
	if len(key) != CredentialKeySize {
		return nil, fmt.Errorf("credentials: the key must be %d bytes, got %d", CredentialKeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	if clock == nil {
		clock = time.Now
	}
	return &Credentials{db: db, aead: aead, clock: clock}, nil
}

func boundTo(userID, name string) []byte { return []byte(userID + "\x00" + name) }

func (c *Credentials) seal(userID, name, value string) (string, error) {
	nonce := make([]byte, c.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := c.aead.Seal(nonce, nonce, []byte(value), boundTo(userID, name))
	return sealedPrefix + base64.StdEncoding.EncodeToString(out), nil
}

func (c *Credentials) open(userID, name, stored string) (string, error) {
	if !strings.HasPrefix(stored, sealedPrefix) {
		return stored, nil // written before sealing; SealLegacy seals it at startup
	}
	raw, err := base64.StdEncoding.DecodeString(stored[len(sealedPrefix):])
	if err != nil || len(raw) < c.aead.NonceSize() {
		return "", errors.New("the stored value is damaged")
	}
	n := c.aead.NonceSize()
	plain, err := c.aead.Open(nil, raw[:n], raw[n:], boundTo(userID, name))
	if err != nil {
		return "", errors.New("the stored value does not open with this sidecar's credential key")
	}
	return string(plain), nil
}

// SealLegacy seals values stored in clear by earlier versions and returns how many.
func (c *Credentials) SealLegacy(ctx context.Context) (int, error) {
	rows, err := c.db.Write.QueryContext(ctx, `SELECT user_id, name, value FROM user_credentials WHERE value NOT LIKE 'v1:%'`)
	if err != nil {
		return 0, fmt.Errorf("credentials: seal: %w", err)
	}
	type row struct{ uid, name, value string }
	var clear []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.uid, &r.name, &r.value); err != nil {
			rows.Close()
			return 0, fmt.Errorf("credentials: seal: %w", err)
		}
		clear = append(clear, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("credentials: seal: %w", err)
	}
	for _, r := range clear {
		sealed, err := c.seal(r.uid, r.name, r.value)
		if err != nil {
			return 0, fmt.Errorf("credentials: seal: %w", err)
		}
		if _, err := c.db.Write.ExecContext(ctx, `UPDATE user_credentials SET value = ? WHERE user_id = ? AND name = ? AND value = ?`, sealed, r.uid, r.name, r.value); err != nil {
			return 0, fmt.Errorf("credentials: seal: %w", err)
		}
	}
	return len(clear), nil
}

// CredentialInfo describes a stored credential without its value, for settings pages.
type CredentialInfo struct {
	Name      string
	UpdatedAt time.Time
}

// ValidateCredentialName checks a credential name: 1 to 64 characters of lowercase
// letters, digits, '_', '-' and '.', starting with a letter or digit.
func ValidateCredentialName(name string) error {
	if !validCredentialName(name) {
		return fmt.Errorf("%w name %q: use 1 to 64 lowercase letters, digits, '_', '-' and '.'", ErrInvalidCredential, name)
	}
	return nil
}

func checkUser(userID string) error {
	if strings.TrimSpace(userID) == "" {
		return errors.New("user id is empty")
	}
	return nil
}

// Set stores (or replaces) the user's credential name.
func (c *Credentials) Set(ctx context.Context, userID, name, value string) error {
	if err := errors.Join(checkUser(userID), ValidateCredentialName(name)); err != nil {
		return fmt.Errorf("credentials: set: %w", err)
	}
	switch {
	case value == "":
		return fmt.Errorf("credentials: set %s: %w: the value is empty", name, ErrInvalidCredential)
	case len(value) > MaxCredentialBytes:
		return fmt.Errorf("credentials: set %s: %w: the value is longer than %d bytes", name, ErrInvalidCredential, MaxCredentialBytes)
	case !utf8.ValidString(value) || strings.ContainsRune(value, 0):
		return fmt.Errorf("credentials: set %s: %w: the value must be UTF-8 text without NUL bytes", name, ErrInvalidCredential)
	}
	sealed, err := c.seal(userID, name, value)
	if err != nil {
		return fmt.Errorf("credentials: set %s: %w", name, err)
	}
	_, err = c.db.Write.ExecContext(ctx, `INSERT INTO user_credentials (user_id, name, value, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (user_id, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		userID, name, sealed, store.FormatTime(c.clock()))
	if err != nil {
		return fmt.Errorf("credentials: set %s: %w", name, err)
	}
	return nil
}

// Delete removes the user's credential name; store.ErrNotFound when it did not exist.
func (c *Credentials) Delete(ctx context.Context, userID, name string) error {
	if err := checkUser(userID); err != nil {
		return fmt.Errorf("credentials: delete: %w", err)
	}
	res, err := c.db.Write.ExecContext(ctx, `DELETE FROM user_credentials WHERE user_id = ? AND name = ?`, userID, name)
	if err != nil {
		return fmt.Errorf("credentials: delete %s: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("credentials: delete %s: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("credentials: %s: %w", name, store.ErrNotFound)
	}
	return nil
}

// Names lists the user's credentials, without values, sorted by name.
func (c *Credentials) Names(ctx context.Context, userID string) ([]CredentialInfo, error) {
	if err := checkUser(userID); err != nil {
		return nil, fmt.Errorf("credentials: names: %w", err)
	}
	rows, err := c.db.Read.QueryContext(ctx, `SELECT name, updated_at FROM user_credentials WHERE user_id = ? ORDER BY name`, userID)
	if err != nil {
		return nil, fmt.Errorf("credentials: names: %w", err)
	}
	defer rows.Close()
	var out []CredentialInfo
	for rows.Next() {
		var ci CredentialInfo
		var updated string
		if err := rows.Scan(&ci.Name, &updated); err != nil {
			return nil, fmt.Errorf("credentials: names: %w", err)
		}
		if ci.UpdatedAt, err = store.ParseTime(updated); err != nil {
			return nil, fmt.Errorf("credentials: names: %w", err)
		}
		out = append(out, ci)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("credentials: names: %w", err)
	}
	return out, nil
}

// Get returns the value of the user's credential name, or an error matching
// store.ErrNotFound. Only the credential proxy, and the sidecar acting for userID
// itself (see Credentials), should call it.
func (c *Credentials) Get(ctx context.Context, userID, name string) (string, error) {
	if err := checkUser(userID); err != nil {
		return "", fmt.Errorf("credentials: get: %w", err)
	}
	var v string
	err := c.db.Read.QueryRowContext(ctx, `SELECT value FROM user_credentials WHERE user_id = ? AND name = ?`, userID, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("credentials: %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("credentials: get %s: %w", name, err)
	}
	plain, err := c.open(userID, name, v)
	if err != nil {
		return "", fmt.Errorf("credentials: get %s: %w", name, err)
	}
	return plain, nil
}
