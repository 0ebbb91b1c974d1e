package skills

import (
	"context"
	"database/sql"
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
// manifest declares; nothing else should read them.
type Credentials struct {
	db    *store.DB
	clock func() time.Time
}

// NewCredentials returns a Credentials over db. clock may be nil (time.Now).
func NewCredentials(db *store.DB, clock func() time.Time) *Credentials {
	if clock == nil {
		clock = time.Now
	}
	return &Credentials{db: db, clock: clock}
}

// CredentialInfo describes a stored credential without its value, for settings pages.
type CredentialInfo struct {
	Name      string
	UpdatedAt time.Time
}

// ValidateCredentialName checks a credential name: 1 to 64 characters of lowercase
// letters, digits, '_', '-' and '.', starting with a letter or digit.
func ValidateCredentialName(name string) error {
	if !credentialRE.MatchString(name) {
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
	_, err := c.db.Write.ExecContext(ctx, `INSERT INTO user_credentials (user_id, name, value, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (user_id, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		userID, name, value, store.FormatTime(c.clock()))
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
// store.ErrNotFound. Only the credential proxy should call it.
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
	return v, nil
}
