// Package users keeps what the sidecar knows about each Nextcloud user: the profile the
// app sends with every Talk event and settings-page session (the app is the authority on
// identity), and the per-user settings made on the personal settings page (timezone,
// the e-mail addresses that may write to the bot, the calendars it may use).
package users

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"slices"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

// Profile is a user as the app describes them, plus the sidecar's access decision.
type Profile struct {
	UID         string
	DisplayName string
	Email       string
	Timezone    string // IANA; invalid or empty becomes UTC
	Language    string // empty becomes "en"
	Groups      []string
	// NextcloudAdmin is what Nextcloud says; IstotaAdmin is the sidecar's decision
	// (Nextcloud admin or named in the access settings), stored in users.is_admin.
	NextcloudAdmin bool
	IstotaAdmin    bool
}

// Execer is a *sql.DB or a *sql.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Upsert records p. A timezone the user chose on the settings page wins over the one
// Nextcloud sends, so it is not overwritten by the next Talk event.
func Upsert(ctx context.Context, db Execer, p Profile, now time.Time) error {
	tz := p.Timezone
	if _, err := time.LoadLocation(tz); tz == "" || err != nil {
		tz = "UTC"
	}
	lang := p.Language
	if lang == "" {
		lang = "en"
	}
	groups, err := json.Marshal(cleanList(p.Groups))
	if err != nil {
		return fmt.Errorf("users: record %s: %w", p.UID, err)
	}
	_, err = db.ExecContext(ctx, `INSERT INTO users (id, display_name, email, timezone, language, is_admin, groups, nextcloud_admin, updated_at)
		VALUES (?1, ?2, ?3, COALESCE((SELECT CASE WHEN value LIKE '"%"' THEN substr(value, 2, length(value) - 2) END
			FROM user_settings WHERE user_id = ?1 AND key = 'timezone'), ?4), ?5, ?6, ?7, ?8, ?9)
		ON CONFLICT (id) DO UPDATE SET display_name = excluded.display_name, email = excluded.email,
			timezone = excluded.timezone, language = excluded.language, is_admin = excluded.is_admin,
			groups = excluded.groups, nextcloud_admin = excluded.nextcloud_admin, updated_at = excluded.updated_at`,
		p.UID, p.DisplayName, p.Email, tz, lang, p.IstotaAdmin, string(groups), p.NextcloudAdmin, store.FormatTime(now))
	if err != nil {
		return fmt.Errorf("users: record %s: %w", p.UID, err)
	}
	return nil
}

// cleanList trims, drops empty entries and duplicates, and keeps the order.
func cleanList(in []string) []string {
	out := []string{}
	for _, s := range in {
		s = strings.TrimSpace(s)
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// User is one row of the users table.
type User struct {
	Profile
	UpdatedAt time.Time
}

// Get returns a user, or an error matching store.ErrNotFound for a uid the sidecar
// never heard of.
func Get(ctx context.Context, db *sql.DB, uid string) (User, error) {
	var (
		u       User
		groups  string
		updated string
	)
	err := db.QueryRowContext(ctx, `SELECT id, display_name, email, timezone, language, is_admin, groups, nextcloud_admin, updated_at
		FROM users WHERE id = ?`, uid).Scan(&u.UID, &u.DisplayName, &u.Email, &u.Timezone, &u.Language, &u.IstotaAdmin, &groups, &u.NextcloudAdmin, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return User{}, fmt.Errorf("users: %s: %w", uid, store.ErrNotFound)
	}
	if err != nil {
		return User{}, fmt.Errorf("users: %s: %w", uid, err)
	}
	if err := json.Unmarshal([]byte(groups), &u.Groups); err != nil {
		return User{}, fmt.Errorf("users: %s: groups: %w", uid, err)
	}
	if u.UpdatedAt, err = store.ParseTime(updated); err != nil {
		return User{}, fmt.Errorf("users: %s: %w", uid, err)
	}
	return u, nil
}

// Decider recomputes the Istota-admin flag of a stored user when the access settings
// change; it is the access settings' decision function.
type Decider func(uid string, groups []string, nextcloudAdmin bool) (allowed, admin bool)

// RecomputeAdmins brings users.is_admin in line with decide for every user, so that a
// change of admin_users / admin_groups reaches the executor and the scheduler at once.
func RecomputeAdmins(ctx context.Context, db *store.DB, decide Decider) error {
	rows, err := db.Read.QueryContext(ctx, `SELECT id, groups, nextcloud_admin, is_admin FROM users`)
	if err != nil {
		return fmt.Errorf("users: recompute admins: %w", err)
	}
	type change struct {
		uid   string
		admin bool
	}
	var changes []change
	for rows.Next() {
		var (
			uid, groups      string
			ncAdmin, isAdmin bool
			gs               []string
		)
		if err := rows.Scan(&uid, &groups, &ncAdmin, &isAdmin); err != nil {
			rows.Close()
			return fmt.Errorf("users: recompute admins: %w", err)
		}
		_ = json.Unmarshal([]byte(groups), &gs)
		if _, admin := decide(uid, gs, ncAdmin); admin != isAdmin {
			changes = append(changes, change{uid, admin})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("users: recompute admins: %w", err)
	}
	for _, c := range changes {
		if _, err := db.Write.ExecContext(ctx, `UPDATE users SET is_admin = ? WHERE id = ?`, c.admin, c.uid); err != nil {
			return fmt.Errorf("users: recompute admins: %w", err)
		}
	}
	return nil
}

// MarkSession records that the user opened the settings page.
func MarkSession(ctx context.Context, db *store.DB, uid string, now time.Time) error {
	if _, err := db.Write.ExecContext(ctx, `UPDATE users SET session_at = ? WHERE id = ?`, store.FormatTime(now), uid); err != nil {
		return fmt.Errorf("users: session of %s: %w", uid, err)
	}
	return nil
}

// Per-user setting keys (user_settings.key).
const (
	SettingTimezone  = "timezone"  // JSON string: the user's own choice over Nextcloud's
	SettingCalendars = "calendars" // JSON array of calendar paths the bot may use
	// SettingHomeConversation is the token (JSON string) of the private conversation the
	// app made for the user, where notices go until they write in another one.
	SettingHomeConversation = "home_conversation"
	// SettingWelcomedAt is when (JSON string, RFC 3339) the welcome was queued: it is
	// sent once per user, whatever happens to the conversation later.
	SettingWelcomedAt = "welcomed_at"
	// SettingMailbox is the user's own IMAP account without its password (JSON object,
	// package mailbox); the password is sealed in user_credentials.
	SettingMailbox = "mailbox"
)

// MaxEmails is how many extra addresses one user may register.
const MaxEmails = 10

// FieldError is a per-user setting that was refused; Field is the settings key.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Emails lists the extra addresses uid may write to the bot from, sorted.
func Emails(ctx context.Context, db *sql.DB, uid string) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT email FROM user_emails WHERE user_id = ? ORDER BY email`, uid)
	if err != nil {
		return nil, fmt.Errorf("users: e-mails of %s: %w", uid, err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var e string
		if err := rows.Scan(&e); err != nil {
			return nil, fmt.Errorf("users: e-mails of %s: %w", uid, err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// NormalizeEmails checks a list of bare addresses and returns them lowercased without
// duplicates, or a FieldError for the field "emails".
func NormalizeEmails(in []string) ([]string, error) {
	out := []string{}
	for _, raw := range in {
		s := strings.ToLower(strings.TrimSpace(raw))
		if s == "" {
			continue
		}
		a, err := mail.ParseAddress(s)
		if err != nil || a.Address != s || a.Name != "" || !strings.Contains(s, "@") || len(s) > 254 {
			return nil, &FieldError{Field: "emails", Message: fmt.Sprintf("%q is not a plain e-mail address", clip(raw, 80))}
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if len(out) > MaxEmails {
		return nil, &FieldError{Field: "emails", Message: fmt.Sprintf("at most %d addresses", MaxEmails)}
	}
	return out, nil
}

// ClaimedByOthers returns the addresses of list that belong to a user other than uid.
func ClaimedByOthers(ctx context.Context, db *sql.DB, uid string, list []string) ([]string, error) {
	var taken []string
	for _, e := range list {
		var owner string
		err := db.QueryRowContext(ctx, `SELECT user_id FROM user_emails WHERE email = ?`, e).Scan(&owner)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("users: e-mail owner: %w", err)
		}
		if owner != uid {
			taken = append(taken, e)
		}
	}
	return taken, nil
}

// SetEmails replaces uid's extra addresses (already normalized). An address another
// user holds is refused with a FieldError, also when a concurrent save took it first.
func SetEmails(ctx context.Context, tx *sql.Tx, uid string, list []string, now time.Time) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM user_emails WHERE user_id = ?`, uid); err != nil {
		return fmt.Errorf("users: set e-mails of %s: %w", uid, err)
	}
	for _, e := range list {
		res, err := tx.ExecContext(ctx, `INSERT INTO user_emails (email, user_id, created_at) VALUES (?, ?, ?) ON CONFLICT (email) DO NOTHING`,
			e, uid, store.FormatTime(now))
		if err != nil {
			return fmt.Errorf("users: set e-mails of %s: %w", uid, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return &FieldError{Field: "emails", Message: e + " is already used by another user"}
		}
	}
	return nil
}

// Setting reads one per-user setting into v; ok is false when it was never set.
func Setting(ctx context.Context, db *sql.DB, uid, key string, v any) (ok bool, err error) {
	var raw string
	err = db.QueryRowContext(ctx, `SELECT value FROM user_settings WHERE user_id = ? AND key = ?`, uid, key).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("users: setting %s of %s: %w", key, uid, err)
	}
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		return false, fmt.Errorf("users: setting %s of %s: %w", key, uid, err)
	}
	return true, nil
}

// SetSetting stores one per-user setting as JSON.
func SetSetting(ctx context.Context, db Execer, uid, key string, v any, now time.Time) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("users: setting %s of %s: %w", key, uid, err)
	}
	_, err = db.ExecContext(ctx, `INSERT INTO user_settings (user_id, key, value, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (user_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		uid, key, string(b), store.FormatTime(now))
	if err != nil {
		return fmt.Errorf("users: setting %s of %s: %w", key, uid, err)
	}
	return nil
}

// UpdateSetting replaces one per-user setting only if it exists, and reports whether it
// did: a late write (a check that ends after the user removed the setting) must not
// bring it back.
func UpdateSetting(ctx context.Context, db Execer, uid, key string, v any, now time.Time) (bool, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return false, fmt.Errorf("users: setting %s of %s: %w", key, uid, err)
	}
	res, err := db.ExecContext(ctx, `UPDATE user_settings SET value = ?, updated_at = ? WHERE user_id = ? AND key = ?`,
		string(b), store.FormatTime(now), uid, key)
	if err != nil {
		return false, fmt.Errorf("users: setting %s of %s: %w", key, uid, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("users: setting %s of %s: %w", key, uid, err)
	}
	return n > 0, nil
}

// DeleteSetting removes one per-user setting; a missing one is not an error.
func DeleteSetting(ctx context.Context, db Execer, uid, key string) error {
	if _, err := db.ExecContext(ctx, `DELETE FROM user_settings WHERE user_id = ? AND key = ?`, uid, key); err != nil {
		return fmt.Errorf("users: delete setting %s of %s: %w", key, uid, err)
	}
	return nil
}

// SetTimezone stores the user's own timezone and applies it to the profile at once.
func SetTimezone(ctx context.Context, tx *sql.Tx, uid, tz string, now time.Time) error {
	if _, err := time.LoadLocation(tz); tz == "" || err != nil {
		return &FieldError{Field: "timezone", Message: fmt.Sprintf("%q is not an IANA time zone such as Europe/Berlin", clip(tz, 60))}
	}
	if err := SetSetting(ctx, tx, uid, SettingTimezone, tz, now); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE users SET timezone = ? WHERE id = ?`, tz, uid); err != nil {
		return fmt.Errorf("users: timezone of %s: %w", uid, err)
	}
	return nil
}

// EnabledCalendars returns the calendar paths uid allowed the bot to use; ok is false
// when the user never chose, which means every calendar they shared with the bot.
func EnabledCalendars(ctx context.Context, db *sql.DB, uid string) (paths []string, ok bool, err error) {
	ok, err = Setting(ctx, db, uid, SettingCalendars, &paths)
	return paths, ok, err
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// OwnsAddress reports whether addr is one of the user's addresses: their Nextcloud
// profile address (profileEmail) or one they added on the settings page. Scheduled
// work mails its owner only, never anybody else.
func OwnsAddress(ctx context.Context, db *sql.DB, uid, profileEmail, addr string) (bool, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return false, nil
	}
	if p := strings.TrimSpace(profileEmail); p != "" && strings.EqualFold(p, addr) {
		return true, nil
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM user_emails WHERE email = ? AND user_id = ?`, addr, uid).Scan(&n); err != nil {
		return false, fmt.Errorf("users: addresses of %s: %w", uid, err)
	}
	return n > 0, nil
}
