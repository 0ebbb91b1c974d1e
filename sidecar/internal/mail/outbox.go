package mail

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
)

// Kinds of outgoing mail (mail_outbox.kind, mail_sent.kind).
const (
	// KindReply is a task's answer or its failure notice.
	KindReply = "reply"
	// KindNotice is the channel's own message to a user, e.g. that their
	// mail was too large to process.
	KindNotice = "notice"
	// KindSkill is mail the agent sent through the email skill.
	KindSkill = "skill"
)

// Outbox row statuses.
const (
	StatusPending = "pending"
	StatusSent    = "sent"
	StatusFailed  = "failed"
)

// Defaults for OutboxOptions fields left zero.
const (
	DefaultOutboxMinBackoff   = 30 * time.Second
	DefaultOutboxMaxBackoff   = 30 * time.Minute
	DefaultOutboxGiveUpAfter  = 72 * time.Hour
	DefaultOutboxPollInterval = 10 * time.Second
	DefaultOutboxKeepSent     = 7 * 24 * time.Hour
)

// outboxBatch caps the rows one delivery pass loads.
const outboxBatch = 100

// ErrRateLimited is returned by QueueSkillSend when the user has sent as many
// messages through the skill in the last hour as allowed.
var ErrRateLimited = errors.New("mail: hourly sending limit reached")

// Submitter submits one message; *Sender implements it.
type Submitter interface {
	Send(ctx context.Context, out Outgoing) (string, error)
	NewMessageID() string
}

// OutboxOptions tune an Outbox. Zero values take the defaults above.
type OutboxOptions struct {
	Clock  func() time.Time
	Logger *slog.Logger
	// MinBackoff doubles after each failed attempt of a row, up to MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// GiveUpAfter fails a row still not accepted this long after it was
	// queued: a reply days late is worse than none, and the user can ask again.
	GiveUpAfter time.Duration
	// PollInterval is how often the loop looks for due rows without a Wake.
	PollInterval time.Duration
	// KeepSent is how long sent rows stay in the outbox (mail_sent keeps the
	// record of every sent message for good).
	KeepSent time.Duration
}

// Outbox submits the rows of mail_outbox over SMTP, retrying with backoff, and
// records every message the server accepted in mail_sent. Rows are written in
// the transaction that finishes their task (QueueReplyTx, the executor's
// Mailer hook), so an answer is mailed if and only if its task is recorded as
// finished.
//
// Delivery is at least once, as SMTP allows nothing better: if the process
// dies after the server accepted a message and before the row is marked sent,
// the message is submitted again after the restart — with the same
// Message-ID, chosen when the row was written, so mail clients show it once.
// A row is marked sent exactly once.
type Outbox struct {
	db     *store.DB
	sender Submitter
	opts   OutboxOptions
	log    *slog.Logger
	wake   chan struct{}

	// passMu serialises delivery passes (the loop and DeliverDue).
	passMu    sync.Mutex
	lastPrune time.Time
}

// NewOutbox returns an outbox over db that submits through sender. Run starts
// delivery.
func NewOutbox(db *store.DB, sender Submitter, opts OutboxOptions) *Outbox {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultOutboxMinBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultOutboxMaxBackoff
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.MinBackoff)
	if opts.GiveUpAfter <= 0 {
		opts.GiveUpAfter = DefaultOutboxGiveUpAfter
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultOutboxPollInterval
	}
	if opts.KeepSent <= 0 {
		opts.KeepSent = DefaultOutboxKeepSent
	}
	return &Outbox{db: db, sender: sender, opts: opts, log: opts.Logger, wake: make(chan struct{}, 1)}
}

// Queued is one message to store for delivery.
type Queued struct {
	// Key makes the call idempotent: a key already present is a no-op.
	Key    string
	Kind   string // KindReply, KindNotice or KindSkill
	UserID string
	TaskID int64 // 0 for none
	// To holds the recipients ("a@b" or "Name <a@b>").
	To         []string
	Subject    string
	Body       string
	InReplyTo  string
	References []string
}

func (q Queued) outgoing(messageID string) Outgoing {
	return Outgoing{To: q.To, Subject: q.Subject, Body: q.Body, InReplyTo: q.InReplyTo, References: q.References, MessageID: messageID}
}

// EnqueueTx stores q inside the caller's transaction and returns the
// Message-ID the message will carry. A key that is already present returns
// that row's Message-ID with created false. A message that could never be
// sent (see Outgoing.Validate) is refused with an error matching ErrInvalid
// or ErrHeaderInjection. Call Wake after the commit for prompt delivery.
func (o *Outbox) EnqueueTx(ctx context.Context, tx *sql.Tx, q Queued) (messageID string, created bool, err error) {
	if q.Key == "" {
		return "", false, errors.New("mail outbox: message key is empty")
	}
	switch q.Kind {
	case KindReply, KindNotice, KindSkill:
	default:
		return "", false, fmt.Errorf("mail outbox: message %q: unknown kind %q", q.Key, q.Kind)
	}
	if err := q.outgoing("").Validate(); err != nil {
		return "", false, fmt.Errorf("mail outbox: message %q: %w", q.Key, err)
	}
	if strings.TrimSpace(q.Body) == "" {
		return "", false, fmt.Errorf("mail outbox: message %q: %w: body is empty", q.Key, ErrInvalid)
	}
	err = tx.QueryRowContext(ctx, `SELECT message_id FROM mail_outbox WHERE dedupe_key = ?`, q.Key).Scan(&messageID)
	switch {
	case err == nil:
		return messageID, false, nil
	case !errors.Is(err, sql.ErrNoRows):
		return "", false, fmt.Errorf("mail outbox: look up key %q: %w", q.Key, err)
	}
	messageID = o.sender.NewMessageID()
	if err := o.insert(ctx, tx, q, messageID, StatusPending, ""); err != nil {
		return "", false, err
	}
	return messageID, true, nil
}

func (o *Outbox) insert(ctx context.Context, tx *sql.Tx, q Queued, messageID, status, lastError string) error {
	rcpts, err := json.Marshal(q.To)
	if err != nil {
		return fmt.Errorf("mail outbox: encode recipients of %q: %w", q.Key, err)
	}
	var taskID any
	if q.TaskID > 0 {
		taskID = q.TaskID
	}
	now := store.FormatTime(o.opts.Clock())
	_, err = tx.ExecContext(ctx, `INSERT INTO mail_outbox
		(dedupe_key, kind, user_id, task_id, recipients, subject, in_reply_to, refs, body, message_id,
		 status, next_attempt_at, last_error, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		q.Key, q.Kind, q.UserID, taskID, string(rcpts), q.Subject, q.InReplyTo, strings.Join(q.References, " "),
		q.Body, messageID, status, now, lastError, now)
	if err != nil {
		return fmt.Errorf("mail outbox: insert %q: %w", q.Key, err)
	}
	return nil
}

// QueueReplyTx queues the mailed answer of task t (t.Email) in the
// transaction that completes or finally fails it; it is the executor's Mailer
// hook. One task mails at most one answer. A delivery that can never be sent
// (a header injection in a subject taken from a user's CRON.md, a bad
// address) is stored as failed with the reason, for the admin to see, and
// does not fail the task's transaction; only database errors do.
func (o *Outbox) QueueReplyTx(ctx context.Context, tx *sql.Tx, t queue.Task, body string) error {
	if t.Email == nil {
		return nil
	}
	q := Queued{
		Key: "task:" + strconv.FormatInt(t.ID, 10), Kind: KindReply, UserID: t.UserID, TaskID: t.ID,
		To: []string{t.Email.To}, Subject: t.Email.Subject, Body: body,
		InReplyTo: t.Email.InReplyTo, References: t.Email.References,
	}
	if strings.TrimSpace(q.Subject) == "" {
		q.Subject = "(no subject)"
	}
	_, _, err := o.EnqueueTx(ctx, tx, q)
	if err == nil {
		o.Wake() // a hint: the loop also polls, should this come before the commit
		return nil
	}
	if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrHeaderInjection) {
		return err
	}
	o.log.Error("mailed answer refused: it can never be sent", "task_id", t.ID, "user_id", t.UserID, "err", err)
	var exists int
	switch e := tx.QueryRowContext(ctx, `SELECT 1 FROM mail_outbox WHERE dedupe_key = ?`, q.Key).Scan(&exists); {
	case e == nil:
		return nil
	case !errors.Is(e, sql.ErrNoRows):
		return fmt.Errorf("mail outbox: look up key %q: %w", q.Key, e)
	}
	// Stored neutralised, so that nothing of it can ever reach a header.
	q.Subject = oneLine(q.Subject)
	for i := range q.To {
		q.To[i] = oneLine(q.To[i])
	}
	return o.insert(ctx, tx, q, "", StatusFailed, "refused: "+oneLine(err.Error()))
}

// QueueSkillSend queues a message the agent sends for userID through the
// email skill, unless the user has already queued limit such messages in the
// last hour (ErrRateLimited; limit 0 refuses every send). The count and the
// insert share one transaction, so concurrent calls cannot exceed the limit.
func (o *Outbox) QueueSkillSend(ctx context.Context, userID string, taskID int64, to []string, subject, body string, limit int) (string, error) {
	tx, err := o.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("mail outbox: begin: %w", err)
	}
	defer tx.Rollback()
	var n int
	since := store.FormatTime(o.opts.Clock().Add(-time.Hour))
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM mail_outbox WHERE user_id = ? AND kind = 'skill' AND created_at > ?`,
		userID, since).Scan(&n); err != nil {
		return "", fmt.Errorf("mail outbox: count sends of %q: %w", userID, err)
	}
	if n >= limit {
		return "", fmt.Errorf("%w (%d per hour)", ErrRateLimited, limit)
	}
	key := "skill:" + o.sender.NewMessageID() // each call is a new message
	id, _, err := o.EnqueueTx(ctx, tx, Queued{
		Key: key, Kind: KindSkill, UserID: userID, TaskID: taskID, To: to, Subject: subject, Body: body,
	})
	if err != nil {
		return "", err
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("mail outbox: commit: %w", err)
	}
	o.Wake()
	return id, nil
}

// Wake asks the loop to look for due rows now. It never blocks.
func (o *Outbox) Wake() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Run delivers due rows until ctx ends. The caller owns the goroutine; a send
// in flight when ctx ends is aborted and its row stays pending.
func (o *Outbox) Run(ctx context.Context) {
	timer := time.NewTimer(o.opts.PollInterval)
	defer timer.Stop()
	for {
		wait := o.opts.PollInterval
		_, next, err := o.pass(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			o.log.Error("mail delivery pass failed", "err", err)
		case !next.IsZero():
			wait = min(wait, max(next.Sub(o.opts.Clock()), 0))
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-o.wake:
		case <-timer.C:
		}
	}
}

// DeliverDue runs one delivery pass now and returns how many messages the
// server accepted. It is for tests and the CLI.
func (o *Outbox) DeliverDue(ctx context.Context) (int, error) {
	sent, _, err := o.pass(ctx)
	return sent, err
}

type outboxRow struct {
	id        int64
	key       string
	kind      string
	userID    string
	taskID    int64
	to        []string
	subject   string
	inReplyTo string
	refs      []string
	body      string
	messageID string
	attempts  int
	next      time.Time
	created   time.Time
}

// pass tries every due row in id order and returns how many were sent and
// when the next waiting row is due (zero if none).
func (o *Outbox) pass(ctx context.Context) (sent int, next time.Time, err error) {
	o.passMu.Lock()
	defer o.passMu.Unlock()
	rows, err := o.loadPending(ctx)
	if err != nil {
		return 0, time.Time{}, err
	}
	for _, r := range rows {
		if ctx.Err() != nil {
			return sent, next, nil
		}
		if r.next.After(o.opts.Clock()) {
			if next.IsZero() || r.next.Before(next) {
				next = r.next
			}
			continue
		}
		retryAt, ok, err := o.attempt(ctx, r)
		if err != nil {
			return sent, next, err
		}
		if ok {
			sent++
		}
		if !retryAt.IsZero() && (next.IsZero() || retryAt.Before(next)) {
			next = retryAt
		}
	}
	if len(rows) == outboxBatch {
		next = o.opts.Clock()
	}
	if err := o.pruneIfDue(ctx); err != nil {
		o.log.Warn("mail outbox prune failed", "err", err)
	}
	return sent, next, nil
}

func (o *Outbox) loadPending(ctx context.Context) ([]outboxRow, error) {
	rs, err := o.db.Read.QueryContext(ctx, `SELECT id, dedupe_key, kind, user_id, COALESCE(task_id, 0), recipients, subject,
		in_reply_to, refs, body, message_id, attempts, next_attempt_at, created_at
		FROM mail_outbox WHERE status = 'pending' ORDER BY id LIMIT ?`, outboxBatch)
	if err != nil {
		return nil, fmt.Errorf("mail outbox: load pending: %w", err)
	}
	defer rs.Close()
	var out []outboxRow
	for rs.Next() {
		var r outboxRow
		var rcpts, refs, next, created string
		if err := rs.Scan(&r.id, &r.key, &r.kind, &r.userID, &r.taskID, &rcpts, &r.subject, &r.inReplyTo, &refs,
			&r.body, &r.messageID, &r.attempts, &next, &created); err != nil {
			return nil, fmt.Errorf("mail outbox: scan pending: %w", err)
		}
		if err := json.Unmarshal([]byte(rcpts), &r.to); err != nil {
			return nil, fmt.Errorf("mail outbox: row %d: recipients: %w", r.id, err)
		}
		r.refs = strings.Fields(refs)
		if r.next, err = store.ParseTime(next); err != nil {
			return nil, fmt.Errorf("mail outbox: row %d: %w", r.id, err)
		}
		if r.created, err = store.ParseTime(created); err != nil {
			return nil, fmt.Errorf("mail outbox: row %d: %w", r.id, err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("mail outbox: load pending: %w", err)
	}
	return out, nil
}

// attempt submits one row and records the outcome: sent, or when to retry
// (zero when the row failed for good). An error means the outcome could not
// be recorded.
func (o *Outbox) attempt(ctx context.Context, r outboxRow) (retryAt time.Time, sent bool, err error) {
	now := o.opts.Clock()
	if now.Sub(r.created) > o.opts.GiveUpAfter {
		reason := fmt.Sprintf("not accepted by the mail server within %s; gave up", o.opts.GiveUpAfter)
		o.log.Error("mail not delivered, giving up", "outbox_id", r.id, "task_id", r.taskID, "attempts", r.attempts)
		return time.Time{}, false, o.finish(ctx, r, StatusFailed, r.attempts, reason)
	}
	_, sendErr := o.sender.Send(ctx, Outgoing{
		To: r.to, Subject: r.subject, Body: r.body, InReplyTo: r.inReplyTo, References: r.refs, MessageID: r.messageID,
	})
	attempts := r.attempts + 1
	switch {
	case sendErr == nil:
		if err := o.finish(ctx, r, StatusSent, attempts, ""); err != nil {
			return time.Time{}, false, fmt.Errorf("%w (the message was accepted and may be sent again)", err)
		}
		o.log.Info("mail delivered", "outbox_id", r.id, "kind", r.kind, "task_id", r.taskID, "user_id", r.userID,
			"message_id", r.messageID, "attempts", attempts)
		return time.Time{}, true, nil
	case ctx.Err() != nil:
		// Shutting down: the attempt does not count.
		return time.Time{}, false, nil
	case IsPermanent(sendErr):
		o.log.Error("mail refused for good", "outbox_id", r.id, "kind", r.kind, "task_id", r.taskID, "err", sendErr)
		return time.Time{}, false, o.finish(ctx, r, StatusFailed, attempts, sendErr.Error())
	default:
		retry := o.opts.Clock().Add(o.backoff(attempts))
		o.log.Warn("mail not delivered, will retry", "outbox_id", r.id, "task_id", r.taskID, "attempts", attempts,
			"retry_at", retry, "err", sendErr)
		if err := o.update(ctx, `UPDATE mail_outbox SET attempts = ?, next_attempt_at = ?, last_error = ?
			WHERE id = ? AND status = 'pending'`, attempts, store.FormatTime(retry), sendErr.Error(), r.id); err != nil {
			return time.Time{}, false, fmt.Errorf("mail outbox: record retry of row %d: %w", r.id, err)
		}
		return retry, false, nil
	}
}

// finish marks a row sent (recording it in mail_sent in the same
// transaction) or failed. The status guard makes the transition happen once.
func (o *Outbox) finish(ctx context.Context, r outboxRow, status string, attempts int, lastError string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	tx, err := o.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("mail outbox: begin: %w", err)
	}
	defer tx.Rollback()
	now := store.FormatTime(o.opts.Clock())
	sentAt := ""
	if status == StatusSent {
		sentAt = now
	}
	res, err := tx.ExecContext(ctx, `UPDATE mail_outbox SET status = ?, attempts = ?, last_error = ?, sent_at = ?
		WHERE id = ? AND status = 'pending'`, status, attempts, lastError, sentAt, r.id)
	if err != nil {
		return fmt.Errorf("mail outbox: update row %d: %w", r.id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("mail outbox: update row %d: %w", r.id, err)
	} else if n == 0 {
		return nil // finished meanwhile
	}
	if status == StatusSent {
		_, err := tx.ExecContext(ctx, `INSERT INTO mail_sent (sent_at, user_id, task_id, kind, recipients, subject, message_id)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (message_id) DO NOTHING`,
			now, r.userID, r.taskID, r.kind, strings.Join(r.to, ", "), r.subject, r.messageID)
		if err != nil {
			return fmt.Errorf("mail outbox: record sent row %d: %w", r.id, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("mail outbox: commit row %d: %w", r.id, err)
	}
	return nil
}

func (o *Outbox) update(ctx context.Context, query string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, err := o.db.Write.ExecContext(ctx, query, args...)
	return err
}

func (o *Outbox) backoff(attempts int) time.Duration {
	d := o.opts.MinBackoff
	for i := 1; i < attempts && d < o.opts.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, o.opts.MaxBackoff)
}

// pruneIfDue deletes sent rows older than KeepSent, at most once an hour.
// Their record stays in mail_sent.
func (o *Outbox) pruneIfDue(ctx context.Context) error {
	now := o.opts.Clock()
	if !o.lastPrune.IsZero() && now.Sub(o.lastPrune) < time.Hour {
		return nil
	}
	o.lastPrune = now
	if _, err := o.db.Write.ExecContext(ctx, `DELETE FROM mail_outbox WHERE status = 'sent' AND sent_at < ?`,
		store.FormatTime(now.Add(-o.opts.KeepSent))); err != nil {
		return fmt.Errorf("mail outbox: prune: %w", err)
	}
	return nil
}

// OutboxEntry is one row of the outbox, for admin views and tests.
type OutboxEntry struct {
	ID         int64
	Key        string
	Kind       string
	UserID     string
	TaskID     int64
	To         []string
	Subject    string
	InReplyTo  string
	References []string
	Body       string
	MessageID  string
	Status     string
	Attempts   int
	LastError  string
	CreatedAt  time.Time
	SentAt     time.Time
}

// Entries lists the outbox rows of userID ("" for every user), oldest first.
func (o *Outbox) Entries(ctx context.Context, userID string) ([]OutboxEntry, error) {
	rs, err := o.db.Read.QueryContext(ctx, `SELECT id, dedupe_key, kind, user_id, COALESCE(task_id, 0), recipients, subject,
		in_reply_to, refs, body, message_id, status, attempts, last_error, created_at, sent_at
		FROM mail_outbox WHERE ? = '' OR user_id = ? ORDER BY id`, userID, userID)
	if err != nil {
		return nil, fmt.Errorf("mail outbox: list: %w", err)
	}
	defer rs.Close()
	var out []OutboxEntry
	for rs.Next() {
		var e OutboxEntry
		var rcpts, refs, created, sent string
		if err := rs.Scan(&e.ID, &e.Key, &e.Kind, &e.UserID, &e.TaskID, &rcpts, &e.Subject, &e.InReplyTo, &refs,
			&e.Body, &e.MessageID, &e.Status, &e.Attempts, &e.LastError, &created, &sent); err != nil {
			return nil, fmt.Errorf("mail outbox: scan: %w", err)
		}
		if err := json.Unmarshal([]byte(rcpts), &e.To); err != nil {
			return nil, fmt.Errorf("mail outbox: row %d: recipients: %w", e.ID, err)
		}
		e.References = strings.Fields(refs)
		if e.CreatedAt, err = store.ParseTime(created); err != nil {
			return nil, fmt.Errorf("mail outbox: row %d: %w", e.ID, err)
		}
		if e.SentAt, err = store.ParseTime(sent); err != nil {
			return nil, fmt.Errorf("mail outbox: row %d: %w", e.ID, err)
		}
		out = append(out, e)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("mail outbox: list: %w", err)
	}
	return out, nil
}

// SentMail is one message the bot sent (a row of mail_sent).
type SentMail struct {
	SentAt     time.Time
	UserID     string
	TaskID     int64
	Kind       string
	Recipients string
	Subject    string
	MessageID  string
}

// Sent lists the messages sent for userID ("" for every user), newest first,
// at most limit (0 for 100).
func (o *Outbox) Sent(ctx context.Context, userID string, limit int) ([]SentMail, error) {
	if limit <= 0 {
		limit = 100
	}
	rs, err := o.db.Read.QueryContext(ctx, `SELECT sent_at, user_id, task_id, kind, recipients, subject, message_id
		FROM mail_sent WHERE ? = '' OR user_id = ? ORDER BY id DESC LIMIT ?`, userID, userID, limit)
	if err != nil {
		return nil, fmt.Errorf("mail sent: list: %w", err)
	}
	defer rs.Close()
	var out []SentMail
	for rs.Next() {
		var m SentMail
		var at string
		if err := rs.Scan(&at, &m.UserID, &m.TaskID, &m.Kind, &m.Recipients, &m.Subject, &m.MessageID); err != nil {
			return nil, fmt.Errorf("mail sent: scan: %w", err)
		}
		if m.SentAt, err = store.ParseTime(at); err != nil {
			return nil, fmt.Errorf("mail sent: %w", err)
		}
		out = append(out, m)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("mail sent: list: %w", err)
	}
	return out, nil
}
