// Package audit records security decisions (refused skills, refused hosts, applied or
// rejected deferred operations) with a stable reason code, in the database where the
// admin can see them, and in the log.
package audit

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

// Stable reason codes. Tests and the admin panel match on them.
const (
	ReasonUnknownSkill         = "unknown_skill"
	ReasonNotAuthorized        = "not_authorized"
	ReasonCredentialNotPresent = "credential_not_present"
	ReasonHostNotAllowed       = "host_not_allowed"
	ReasonPrivateAddress       = "private_address"
	ReasonBadRequest           = "bad_request"
	ReasonBadToken             = "bad_token"
	ReasonInvalidOperation     = "invalid_operation"
	// ReasonNotApproved: the action's tier is set to deny, or the user said no (or did
	// not answer in time) when asked.
	ReasonNotApproved = "not_approved"
	// ReasonSNIMismatch: a tunnel's TLS ClientHello named another server than the
	// CONNECT host (domain fronting), named none, or hid it (encrypted ClientHello).
	ReasonSNIMismatch = "sni_mismatch"
)

// Entry is one decision.
type Entry struct {
	UserID    string
	TaskID    int64
	Component string // credproxy | netproxy | gateway | deferred
	Action    string // what was asked: a skill name, host:port, an operation kind
	Allowed   bool
	Reason    string
	Detail    string // never a secret
}

// Log writes entries to the audit_log table and to slog.
type Log struct {
	db     *store.DB
	logger *slog.Logger
	clock  func() time.Time
}

// New returns a Log. A nil db only logs (for components used without a database).
func New(db *store.DB, logger *slog.Logger, clock func() time.Time) *Log {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if clock == nil {
		clock = time.Now
	}
	return &Log{db: db, logger: logger, clock: clock}
}

// Record stores e. Refusals are logged as warnings, allowed actions at debug level.
func (l *Log) Record(ctx context.Context, e Entry) error {
	attrs := []any{"component", e.Component, "user_id", e.UserID, "task_id", e.TaskID, "action", e.Action, "allowed", e.Allowed}
	if e.Reason != "" {
		attrs = append(attrs, "reason", e.Reason)
	}
	if e.Detail != "" {
		attrs = append(attrs, "detail", e.Detail)
	}
	if e.Allowed {
		l.logger.Debug("audit", attrs...)
	} else {
		l.logger.Warn("refused", attrs...)
	}
	if l.db == nil {
		return nil
	}
	_, err := l.db.Write.ExecContext(ctx, `INSERT INTO audit_log (at, user_id, task_id, component, action, allowed, reason, detail)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, store.FormatTime(l.clock()), e.UserID, e.TaskID, e.Component, e.Action, e.Allowed, e.Reason, e.Detail)
	if err != nil {
		return fmt.Errorf("audit: record: %w", err)
	}
	return nil
}

// Recent returns the newest entries, optionally only refusals or one user's.
func (l *Log) Recent(ctx context.Context, userID string, refusalsOnly bool, limit int) ([]Entry, error) {
	if l.db == nil {
		return nil, nil
	}
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	rows, err := l.db.Read.QueryContext(ctx, `SELECT user_id, task_id, component, action, allowed, reason, detail FROM audit_log
		WHERE (? = '' OR user_id = ?) AND (? = 0 OR allowed = 0) ORDER BY id DESC LIMIT ?`, userID, userID, refusalsOnly, limit)
	if err != nil {
		return nil, fmt.Errorf("audit: recent: %w", err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var e Entry
		if err := rows.Scan(&e.UserID, &e.TaskID, &e.Component, &e.Action, &e.Allowed, &e.Reason, &e.Detail); err != nil {
			return nil, fmt.Errorf("audit: recent: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Prune deletes uid's audit entries older than before (history retention).
func (l *Log) Prune(ctx context.Context, uid string, before time.Time) (int, error) {
	if l.db == nil {
		return 0, nil
	}
	res, err := l.db.Write.ExecContext(ctx, `DELETE FROM audit_log WHERE user_id = ? AND at < ?`, uid, store.FormatTime(before))
	if err != nil {
		return 0, fmt.Errorf("audit: prune %s: %w", uid, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("audit: prune %s: %w", uid, err)
	}
	return int(n), nil
}
