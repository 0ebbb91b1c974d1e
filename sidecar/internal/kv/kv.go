// Package kv is each user's small key-value store (table kv_store): values the agent
// keeps between tasks, grouped by namespace. The agent reads and writes its own user's
// entries through the kv skill, and writes them through deferred operations; the user
// id always comes from the task, never from the agent.
package kv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/store"
)

// Limits on what one entry may hold. They keep the store small enough to list in a
// prompt and stop a runaway agent from filling the database.
const (
	MaxNamespaceLen = 64
	MaxKeyLen       = 256
	MaxValueBytes   = 64 << 10
	// MaxEntriesPerUser caps the number of keys one user may hold over all namespaces.
	MaxEntriesPerUser = 10000
)

// ErrInvalid marks a namespace, key or value that breaks the rules above, and a Set that
// would exceed MaxEntriesPerUser. Its message is safe to show to the agent.
var ErrInvalid = errors.New("invalid")

// Entry is one stored value.
type Entry struct {
	Namespace string
	Key       string
	Value     string
	UpdatedAt time.Time
}

// Store reads and writes kv_store. It is safe for concurrent use.
type Store struct {
	db    *store.DB
	clock func() time.Time
}

// New returns a Store over db. clock may be nil (time.Now).
func New(db *store.DB, clock func() time.Time) *Store {
	if clock == nil {
		clock = time.Now
	}
	return &Store{db: db, clock: clock}
}

// ValidateNamespace checks a namespace: 1 to MaxNamespaceLen characters of ASCII
// letters, digits, '_', '-', '.' and ':', starting with a letter or digit.
func ValidateNamespace(ns string) error {
	if ns == "" || len(ns) > MaxNamespaceLen {
		return fmt.Errorf("%w namespace: must be 1 to %d characters", ErrInvalid, MaxNamespaceLen)
	}
	for i, r := range ns {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			i > 0 && (r == '_' || r == '-' || r == '.' || r == ':')
		if !ok {
			return fmt.Errorf("%w namespace %q: use letters, digits, '_', '-', '.' and ':', starting with a letter or digit", ErrInvalid, ns)
		}
	}
	return nil
}

// ValidateKey checks a key: 1 to MaxKeyLen bytes of UTF-8 text without control
// characters.
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w key: must be 1 to %d bytes", ErrInvalid, MaxKeyLen)
	}
	if !utf8.ValidString(key) || strings.IndexFunc(key, unicode.IsControl) >= 0 {
		return fmt.Errorf("%w key: must be UTF-8 text without control characters", ErrInvalid)
	}
	return nil
}

// ValidateValue checks a value: UTF-8 text of at most MaxValueBytes bytes, without NUL.
func ValidateValue(v string) error {
	if len(v) > MaxValueBytes {
		return fmt.Errorf("%w value: %d bytes is more than the limit of %d", ErrInvalid, len(v), MaxValueBytes)
	}
	if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
		return fmt.Errorf("%w value: must be UTF-8 text without NUL bytes", ErrInvalid)
	}
	return nil
}

func validateUser(userID string) error {
	if strings.TrimSpace(userID) == "" {
		return errors.New("kv: user id is empty")
	}
	return nil
}

// Get returns one entry, or an error matching store.ErrNotFound.
func (s *Store) Get(ctx context.Context, userID, namespace, key string) (Entry, error) {
	if err := errors.Join(validateUser(userID), ValidateNamespace(namespace), ValidateKey(key)); err != nil {
		return Entry{}, fmt.Errorf("kv: get: %w", err)
	}
	e := Entry{Namespace: namespace, Key: key}
	var updated string
	err := s.db.Read.QueryRowContext(ctx, `SELECT value, updated_at FROM kv_store WHERE user_id = ? AND namespace = ? AND key = ?`,
		userID, namespace, key).Scan(&e.Value, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return Entry{}, fmt.Errorf("kv: %s/%s: %w", namespace, key, store.ErrNotFound)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("kv: get: %w", err)
	}
	if e.UpdatedAt, err = store.ParseTime(updated); err != nil {
		return Entry{}, fmt.Errorf("kv: get: %w", err)
	}
	return e, nil
}

// Set stores value under namespace/key for userID, replacing any earlier value. A new
// key is refused with ErrInvalid when the user already holds MaxEntriesPerUser keys.
func (s *Store) Set(ctx context.Context, userID, namespace, key, value string) error {
	if err := errors.Join(validateUser(userID), ValidateNamespace(namespace), ValidateKey(key), ValidateValue(value)); err != nil {
		return fmt.Errorf("kv: set: %w", err)
	}
	tx, err := s.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("kv: set: begin: %w", err)
	}
	defer tx.Rollback()
	// Counting inside the write transaction keeps the cap exact under concurrent Sets.
	var exists, count int
	err = tx.QueryRowContext(ctx, `SELECT
			(SELECT COUNT(*) FROM kv_store WHERE user_id = ? AND namespace = ? AND key = ?),
			(SELECT COUNT(*) FROM kv_store WHERE user_id = ?)`,
		userID, namespace, key, userID).Scan(&exists, &count)
	if err != nil {
		return fmt.Errorf("kv: set: count: %w", err)
	}
	if exists == 0 && count >= MaxEntriesPerUser {
		return fmt.Errorf("kv: set: %w: the limit of %d keys is reached; delete some first", ErrInvalid, MaxEntriesPerUser)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO kv_store (user_id, namespace, key, value, updated_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (user_id, namespace, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		userID, namespace, key, value, store.FormatTime(s.clock()))
	if err != nil {
		return fmt.Errorf("kv: set: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("kv: set: commit: %w", err)
	}
	return nil
}

// Delete removes one entry. It returns an error matching store.ErrNotFound when there
// was nothing to remove, so callers that want idempotence can ignore exactly that.
func (s *Store) Delete(ctx context.Context, userID, namespace, key string) error {
	if err := errors.Join(validateUser(userID), ValidateNamespace(namespace), ValidateKey(key)); err != nil {
		return fmt.Errorf("kv: delete: %w", err)
	}
	res, err := s.db.Write.ExecContext(ctx, `DELETE FROM kv_store WHERE user_id = ? AND namespace = ? AND key = ?`, userID, namespace, key)
	if err != nil {
		return fmt.Errorf("kv: delete: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("kv: delete: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("kv: %s/%s: %w", namespace, key, store.ErrNotFound)
	}
	return nil
}

// List returns the entries of one namespace, ordered by key. An empty namespace is not
// an error: it has no entries.
func (s *Store) List(ctx context.Context, userID, namespace string) ([]Entry, error) {
	if err := errors.Join(validateUser(userID), ValidateNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("kv: list: %w", err)
	}
	rows, err := s.db.Read.QueryContext(ctx, `SELECT key, value, updated_at FROM kv_store WHERE user_id = ? AND namespace = ? ORDER BY key`,
		userID, namespace)
	if err != nil {
		return nil, fmt.Errorf("kv: list: %w", err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		e := Entry{Namespace: namespace}
		var updated string
		if err := rows.Scan(&e.Key, &e.Value, &updated); err != nil {
			return nil, fmt.Errorf("kv: list: %w", err)
		}
		if e.UpdatedAt, err = store.ParseTime(updated); err != nil {
			return nil, fmt.Errorf("kv: list: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("kv: list: %w", err)
	}
	return out, nil
}

// Namespaces returns the user's namespaces that hold at least one entry, sorted.
func (s *Store) Namespaces(ctx context.Context, userID string) ([]string, error) {
	if err := validateUser(userID); err != nil {
		return nil, err
	}
	rows, err := s.db.Read.QueryContext(ctx, `SELECT DISTINCT namespace FROM kv_store WHERE user_id = ? ORDER BY namespace`, userID)
	if err != nil {
		return nil, fmt.Errorf("kv: namespaces: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var ns string
		if err := rows.Scan(&ns); err != nil {
			return nil, fmt.Errorf("kv: namespaces: %w", err)
		}
		out = append(out, ns)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("kv: namespaces: %w", err)
	}
	return out, nil
}
