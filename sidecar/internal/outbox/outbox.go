// Package outbox delivers the bot's Talk messages durably through the talk_outbox table.
// A reply is enqueued in the same transaction that completes its task, then a single
// loop posts it, in order per conversation, retrying until Talk accepts it: an outage
// delays answers, it never drops them.
//
// Failure handling follows what Talk's answers mean (shared/reference/talk-bots.md §6,
// §10.4): network errors, 5xx and 429 are retried with exponential backoff forever; a
// 401 means the bot is not enabled in the conversation or its secret is wrong, and
// every 401 counts toward Nextcloud's brute-force protection, so it is retried only
// after a long hold and gives up after a few attempts; 400/404/413 cannot succeed and
// fail the row at once (a 400 for a message with a reply target is first retried once
// without the target, since the parent may have been deleted or moved).
//
// Delivery is exactly once when Options.Posted is set, at least once otherwise. A row is
// marked in flight before each send; a send that ends without an answer from Talk (the
// process died, or the connection broke after the request left) leaves the mark, and
// before such a row is sent again Posted says whether Talk already has it (each part
// carries a deterministic referenceId, which the app can look up). Without Posted, or
// when the app cannot say, the message is sent again.
package outbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/talk"
)

// Kinds of messages; progress messages are posted silently (no notifications).
const (
	KindReply    = "reply"
	KindProgress = "progress"
	KindNotice   = "notice"
)

// Row statuses in talk_outbox.
const (
	StatusPending = "pending"
	StatusSent    = "sent"
	StatusFailed  = "failed"
)

// Defaults for Options fields left zero.
const (
	DefaultMinBackoff      = 2 * time.Second
	DefaultMaxBackoff      = 5 * time.Minute
	DefaultAuthRetryAfter  = time.Hour
	DefaultMaxAuthAttempts = 3
	DefaultPollInterval    = 5 * time.Second
	DefaultKeepSent        = 7 * 24 * time.Hour
)

// batchSize caps how many pending rows one pass loads; a full batch makes the loop go
// again at once.
const batchSize = 500

// authPrefix starts last_error of a row held after a 401; the consecutive 401 count
// follows, so it survives restarts without a schema change.
const authPrefix = "unauthorized ("

// Sender posts one message to Talk. *talk.Client implements it; errors are classified
// with talk.IsAuth, talk.IsPermanent and talk.IsRetryable.
type Sender interface {
	SendMessage(ctx context.Context, token, message string, opts talk.SendOptions) error
}

// Options tune an Outbox. Zero values take the defaults above.
type Options struct {
	// Clock returns the current time; tests pass a fake.
	Clock  func() time.Time
	Logger *slog.Logger
	// MinBackoff doubles after each retryable failure of a row, up to MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// AuthRetryAfter is how long a row is held after a 401 before it is tried again;
	// after MaxAuthAttempts consecutive 401s it is marked failed.
	AuthRetryAfter  time.Duration
	MaxAuthAttempts int
	// PollInterval is how often the loop looks for due rows without a Wake.
	PollInterval time.Duration
	// KeepSent is how long sent rows are kept; within it, enqueuing the same key again
	// is a no-op.
	KeepSent time.Duration
	// Posted, if set, reports which of referenceIDs are already in conversation token.
	// It returns ErrCannotTell when it has no way to know (the message is then sent).
	Posted func(ctx context.Context, token string, referenceIDs []string) ([]string, error)
	// Active, if set, says whether this process delivers now: when several processes
	// share the database only the elected leader does (package leader), and a pass of
	// any other sends nothing. Nil means always.
	Active func() bool
}

// ErrCannotTell is what Options.Posted returns when it cannot find out.
var ErrCannotTell = errors.New("outbox: cannot tell whether the message was posted")

// Message is one logical message; long texts become several rows.
type Message struct {
	Token string
	Text  string
	// ReplyTo is the Talk message id to reply to, 0 for none; only the first part
	// carries it.
	ReplyTo int64
	// TaskID links the message to its task (0 for none).
	TaskID int64
	// Kind is reply (default), progress or notice.
	Kind string
	// Key identifies the message for idempotency, e.g. "task:12:reply": enqueuing the
	// same key again does nothing.
	Key string
}

// Entry is one row of the outbox.
type Entry struct {
	ID            int64
	Token         string
	Text          string
	ReplyTo       int64
	ReferenceID   string
	TaskID        int64
	Kind          string
	Status        string
	Attempts      int
	NextAttemptAt time.Time
	LastError     string
	CreatedAt     time.Time
	SentAt        time.Time
}

// Stats summarises the outbox.
type Stats struct {
	Pending int
	// Held are pending rows waiting after a 401 (a subset of Pending).
	Held   int
	Sent   int
	Failed int
	// OldestPending is when the oldest pending row was enqueued (zero if none).
	OldestPending time.Time
}

// Outbox delivers talk_outbox rows. Methods are safe for concurrent use.
type Outbox struct {
	db     *store.DB
	sender Sender
	opts   Options
	log    *slog.Logger

	wake chan struct{}

	// passMu serialises delivery passes (the loop and DeliverDue).
	passMu    sync.Mutex
	lastPrune time.Time

	mu         sync.Mutex
	stop       chan struct{}
	hardCancel context.CancelFunc
	done       chan struct{}
}

// New returns an outbox over db that posts through sender. Call Start to run delivery.
func New(db *store.DB, sender Sender, opts Options) *Outbox {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.MinBackoff)
	if opts.AuthRetryAfter <= 0 {
		opts.AuthRetryAfter = DefaultAuthRetryAfter
	}
	if opts.MaxAuthAttempts <= 0 {
		opts.MaxAuthAttempts = DefaultMaxAuthAttempts
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.KeepSent <= 0 {
		opts.KeepSent = DefaultKeepSent
	}
	return &Outbox{
		db: db, sender: sender, opts: opts, log: opts.Logger,
		wake: make(chan struct{}, 1),
	}
}

// ReferenceID is the Talk referenceId of part index of the message with key: hex
// SHA-256 of key, '#', index (64 characters, Talk's maximum).
func ReferenceID(key string, index int) string {
	sum := sha256.Sum256([]byte(key + "#" + strconv.Itoa(index)))
	return hex.EncodeToString(sum[:])
}

// Enqueue stores m for delivery and wakes the loop.
func (o *Outbox) Enqueue(ctx context.Context, m Message) error {
	tx, err := o.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: begin: %w", err)
	}
	defer tx.Rollback()
	if err := o.EnqueueTx(ctx, tx, m); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: commit: %w", err)
	}
	o.Wake()
	return nil
}

// EnqueueTx stores m inside the caller's transaction, so that completing a task and
// enqueuing its answer commit together. The text is split at Talk's length limit; the
// parts get deterministic reference ids, and a key that is already present makes the
// call a no-op. Call Wake after the commit for prompt delivery (the loop also polls).
func (o *Outbox) EnqueueTx(ctx context.Context, tx *sql.Tx, m Message) error {
	if err := validate(&m); err != nil {
		return err
	}
	var exists int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM talk_outbox WHERE reference_id = ?`, ReferenceID(m.Key, 0)).Scan(&exists)
	switch {
	case err == nil:
		return nil // enqueued before: idempotent
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("outbox: look up key %q: %w", m.Key, err)
	}
	now := store.FormatTime(o.opts.Clock())
	var taskID any
	if m.TaskID != 0 {
		taskID = m.TaskID
	}
	for i, part := range talk.Split(m.Text, talk.MaxMessageLength) {
		replyTo := int64(0)
		if i == 0 {
			replyTo = m.ReplyTo
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO talk_outbox
			(token, message, reply_to, reference_id, task_id, kind, status, attempts, next_attempt_at, created_at)
			VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?)
			ON CONFLICT (reference_id) DO NOTHING`,
			m.Token, part, replyTo, ReferenceID(m.Key, i), taskID, m.Kind, now, now)
		if err != nil {
			return fmt.Errorf("outbox: insert part %d of %q: %w", i+1, m.Key, err)
		}
	}
	return nil
}

func validate(m *Message) error {
	if m.Kind == "" {
		m.Kind = KindReply
	}
	switch {
	case m.Key == "":
		return errors.New("outbox: message key is empty")
	case !talk.ValidToken(m.Token):
		return fmt.Errorf("outbox: message %q: invalid conversation token %q", m.Key, m.Token)
	case strings.TrimSpace(m.Text) == "":
		return fmt.Errorf("outbox: message %q: text is empty", m.Key)
	case m.Kind != KindReply && m.Kind != KindProgress && m.Kind != KindNotice:
		return fmt.Errorf("outbox: message %q: unknown kind %q", m.Key, m.Kind)
	case m.ReplyTo < 0 || m.TaskID < 0:
		return fmt.Errorf("outbox: message %q: negative reply or task id", m.Key)
	}
	return nil
}

// Wake asks the loop to look for due rows now. It never blocks.
func (o *Outbox) Wake() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Start runs the delivery loop in one goroutine until ctx ends or Close is called.
// An Outbox runs at most one loop in its life: later calls to Start do nothing.
func (o *Outbox) Start(ctx context.Context) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done != nil {
		return
	}
	// The loop's context is cancelled only when Close gives up waiting (or ctx ends),
	// so that Close normally lets an in-flight send finish and record its outcome.
	loopCtx, cancel := context.WithCancel(ctx)
	o.stop, o.hardCancel, o.done = make(chan struct{}), cancel, make(chan struct{})
	go o.run(loopCtx, o.stop, o.done)
}

// Close stops the loop and waits for it. An in-flight send may finish until ctx ends;
// then it is aborted and its row stays pending. Close without Start returns nil.
func (o *Outbox) Close(ctx context.Context) error {
	o.mu.Lock()
	stop, cancel, done := o.stop, o.hardCancel, o.done
	if done != nil {
		select {
		case <-stop:
		default:
			close(stop)
		}
	}
	o.mu.Unlock()
	if done == nil {
		return nil
	}
	defer cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		cancel()
		<-done
		return fmt.Errorf("outbox: close: %w", ctx.Err())
	}
}

func (o *Outbox) run(ctx context.Context, stop, done chan struct{}) {
	defer close(done)
	stopping := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	timer := time.NewTimer(o.opts.PollInterval)
	defer timer.Stop()
	for {
		wait := o.opts.PollInterval
		_, next, err := o.pass(ctx, stopping)
		switch {
		case err != nil && ctx.Err() == nil:
			o.log.Error("outbox delivery pass failed", "err", err)
		case !next.IsZero():
			wait = min(wait, max(next.Sub(o.opts.Clock()), 0))
		}
		timer.Reset(wait) // Go 1.23+ timers: no stale tick survives a Reset
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-o.wake:
		case <-timer.C:
		}
	}
}

// DeliverDue runs one delivery pass now, as the loop does, and returns how many rows
// were sent. It is for tests, the CLI and shutdown flushes; it waits for a running pass.
func (o *Outbox) DeliverDue(ctx context.Context) (int, error) {
	sent, _, err := o.pass(ctx, func() bool { return false })
	return sent, err
}

type row struct {
	id          int64
	token       string
	text        string
	replyTo     int64
	referenceID string
	kind        string
	attempts    int
	nextAttempt time.Time
	lastError   string
	inFlight    bool // an earlier send may have reached Talk
}

// pass tries every conversation's due rows in id order. A row that must wait blocks the
// rows after it in the same conversation; other conversations go on. It returns how
// many rows were delivered and when the next waiting row is due (zero if none waits).
func (o *Outbox) pass(ctx context.Context, stopping func() bool) (sent int, next time.Time, err error) {
	o.passMu.Lock()
	defer o.passMu.Unlock()
	if o.opts.Active != nil && !o.opts.Active() {
		return 0, time.Time{}, nil
	}

	rows, err := o.loadPending(ctx)
	if err != nil {
		return 0, time.Time{}, err
	}
	var order []string
	byToken := map[string][]row{}
	for _, r := range rows {
		if _, ok := byToken[r.token]; !ok {
			order = append(order, r.token)
		}
		byToken[r.token] = append(byToken[r.token], r)
	}
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, token := range order {
	rowsOfToken:
		for _, r := range byToken[token] {
			if stopping() || ctx.Err() != nil {
				return sent, next, nil
			}
			if r.nextAttempt.After(o.opts.Clock()) {
				earliest(r.nextAttempt)
				break // later rows of this conversation wait for this one
			}
			retryAt, delivered, err := o.attempt(ctx, r)
			if err != nil {
				return sent, next, err
			}
			if delivered {
				sent++
			}
			if !delivered && !retryAt.IsZero() {
				earliest(retryAt)
				break rowsOfToken
			}
		}
	}
	if len(rows) == batchSize {
		earliest(o.opts.Clock()) // more rows than one batch: go again at once
	}
	if err := o.pruneIfDue(ctx); err != nil {
		o.log.Warn("outbox prune failed", "err", err)
	}
	return sent, next, nil
}

func (o *Outbox) loadPending(ctx context.Context) ([]row, error) {
	rs, err := o.db.Read.QueryContext(ctx, `SELECT id, token, message, reply_to, reference_id, kind, attempts, next_attempt_at, last_error, in_flight
		FROM talk_outbox WHERE status = 'pending' ORDER BY id LIMIT ?`, batchSize)
	if err != nil {
		return nil, fmt.Errorf("outbox: load pending: %w", err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		var next string
		if err := rs.Scan(&r.id, &r.token, &r.text, &r.replyTo, &r.referenceID, &r.kind, &r.attempts, &next, &r.lastError, &r.inFlight); err != nil {
			return nil, fmt.Errorf("outbox: scan pending: %w", err)
		}
		if r.nextAttempt, err = store.ParseTime(next); err != nil {
			return nil, fmt.Errorf("outbox: row %d: %w", r.id, err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox: load pending: %w", err)
	}
	return out, nil
}

// attempt sends one row and records the outcome. It returns delivered, or the time the
// row may be tried again (zero when it failed for good and the conversation may go on).
// An error means the outcome could not be recorded.
func (o *Outbox) attempt(ctx context.Context, r row) (retryAt time.Time, delivered bool, err error) {
	if r.inFlight && o.opts.Posted != nil {
		posted, err := o.opts.Posted(ctx, r.token, []string{r.referenceID})
		switch {
		case err == nil && slices.Contains(posted, r.referenceID):
			now := o.opts.Clock()
			if err := o.update(ctx, r.id, StatusSent, r.attempts, now, "", now, false); err != nil {
				return time.Time{}, false, err
			}
			o.log.Info("talk message was already delivered by an interrupted send; not sending it again", "outbox_id", r.id, "token", r.token)
			return time.Time{}, true, nil
		case err == nil, errors.Is(err, ErrCannotTell):
			// Not there (or no way to know): send it.
		case ctx.Err() != nil:
			return o.opts.Clock(), false, nil
		default:
			retry := o.opts.Clock().Add(o.backoff(r.attempts + 1))
			o.log.Warn("cannot tell whether an interrupted send reached Talk; asking again later", "outbox_id", r.id, "token", r.token, "retry_at", retry, "err", err)
			return retry, false, o.update(ctx, r.id, StatusPending, r.attempts+1, retry, err.Error(), time.Time{}, true)
		}
	}
	for {
		if err := o.markInFlight(ctx, r.id); err != nil {
			return time.Time{}, false, err
		}
		sendErr := o.sender.SendMessage(ctx, r.token, r.text, talk.SendOptions{
			ReplyTo:     r.replyTo,
			ReferenceID: r.referenceID,
			Silent:      r.kind == KindProgress,
		})
		now := o.opts.Clock()
		attempts := r.attempts + 1
		switch {
		case sendErr == nil:
			err := o.update(ctx, r.id, StatusSent, attempts, now, "", now, false)
			if err != nil {
				// Talk has the message; the row stays pending and will be sent again.
				return time.Time{}, false, fmt.Errorf("outbox: record delivery of row %d (it will be sent again): %w", r.id, err)
			}
			o.log.Debug("talk message delivered", "outbox_id", r.id, "token", r.token, "kind", r.kind, "attempts", attempts)
			return time.Time{}, true, nil

		case ctx.Err() != nil:
			// Shutting down: the attempt does not count; the row stays in flight, since
			// the request may have left.
			return o.opts.Clock(), false, nil

		case talk.IsAuth(sendErr):
			n := authFailures(r.lastError) + 1
			reason := fmt.Sprintf("%s%d/%d): Talk refused the bot's signature (HTTP 401): the bot is not enabled in conversation %s, or the configured bot secret is wrong",
				authPrefix, n, o.opts.MaxAuthAttempts, r.token)
			if n >= o.opts.MaxAuthAttempts {
				o.log.Error("talk message failed: bot not accepted by Talk, giving up", "outbox_id", r.id, "token", r.token,
					"auth_attempt", n, "max_auth_attempts", o.opts.MaxAuthAttempts, "reason", "bot not enabled in the conversation or wrong bot secret")
				return time.Time{}, false, o.update(ctx, r.id, StatusFailed, attempts, now, reason, time.Time{}, false)
			}
			retry := now.Add(o.opts.AuthRetryAfter)
			o.log.Error("talk message held: bot not accepted by Talk", "outbox_id", r.id, "token", r.token,
				"auth_attempt", n, "max_auth_attempts", o.opts.MaxAuthAttempts, "retry_at", retry,
				"reason", "bot not enabled in the conversation or wrong bot secret")
			return retry, false, o.update(ctx, r.id, StatusPending, attempts, retry, reason, time.Time{}, false)

		case talk.IsPermanent(sendErr) && isStatus(sendErr, 400) && r.replyTo != 0:
			// The reply target may be gone or elsewhere: post the answer without it.
			o.log.Warn("talk refused the reply target, sending without it", "outbox_id", r.id, "token", r.token, "reply_to", r.replyTo)
			if _, err := o.db.Write.ExecContext(ctx, `UPDATE talk_outbox SET reply_to = 0, attempts = ?, last_error = ? WHERE id = ?`,
				attempts, "reply target refused: "+sendErr.Error(), r.id); err != nil {
				return time.Time{}, false, fmt.Errorf("outbox: drop reply target of row %d: %w", r.id, err)
			}
			r.replyTo, r.attempts, r.lastError = 0, attempts, ""
			continue

		case talk.IsPermanent(sendErr):
			o.log.Error("talk message failed permanently", "outbox_id", r.id, "token", r.token, "kind", r.kind, "err", sendErr)
			return time.Time{}, false, o.update(ctx, r.id, StatusFailed, attempts, now, sendErr.Error(), time.Time{}, false)

		default:
			// Retryable (network, 5xx, 429) or unexpected: wait and try again, forever.
			retry := now.Add(o.backoff(attempts))
			o.log.Warn("talk message not delivered, will retry", "outbox_id", r.id, "token", r.token,
				"attempts", attempts, "retry_at", retry, "err", sendErr)
			return retry, false, o.update(ctx, r.id, StatusPending, attempts, retry, sendErr.Error(), time.Time{}, mayHaveArrived(sendErr))
		}
	}
}

// update records an attempt's outcome. It is deliberately not tied to the send's
// context alone: a cancellation right after Talk answered must not lose the outcome.
// inFlight says whether the message may have reached Talk without an answer.
func (o *Outbox) update(ctx context.Context, id int64, status string, attempts int, next time.Time, lastError string, sentAt time.Time, inFlight bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	sent := ""
	if !sentAt.IsZero() {
		sent = store.FormatTime(sentAt)
	}
	_, err := o.db.Write.ExecContext(ctx, `UPDATE talk_outbox
		SET status = ?, attempts = ?, next_attempt_at = ?, last_error = ?, sent_at = ?, in_flight = ?
		WHERE id = ?`, status, attempts, store.FormatTime(next), lastError, sent, inFlight, id)
	if err != nil {
		return fmt.Errorf("outbox: update row %d: %w", id, err)
	}
	return nil
}

// markInFlight records that a send of row id starts; only an answer from Talk clears it.
func (o *Outbox) markInFlight(ctx context.Context, id int64) error {
	if _, err := o.db.Write.ExecContext(ctx, `UPDATE talk_outbox SET in_flight = 1 WHERE id = ?`, id); err != nil {
		return fmt.Errorf("outbox: mark row %d in flight: %w", id, err)
	}
	return nil
}

// mayHaveArrived reports whether a failed send may still have reached Talk: any failure
// other than an HTTP answer or a connection that was never made.
func mayHaveArrived(err error) bool {
	var se *talk.StatusError
	if errors.As(err, &se) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return true
}

// backoff is MinBackoff doubled per earlier failed attempt, capped at MaxBackoff.
func (o *Outbox) backoff(attempts int) time.Duration {
	d := o.opts.MinBackoff
	for i := 1; i < attempts && d < o.opts.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, o.opts.MaxBackoff)
}

// authFailures reads the consecutive 401 count recorded in last_error.
func authFailures(lastError string) int {
	rest, ok := strings.CutPrefix(lastError, authPrefix)
	if !ok {
		return 0
	}
	num, _, _ := strings.Cut(rest, "/")
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func isStatus(err error, status int) bool {
	var se *talk.StatusError
	return errors.As(err, &se) && se.Status == status
}

// pruneIfDue deletes sent rows older than KeepSent, at most once an hour.
func (o *Outbox) pruneIfDue(ctx context.Context) error {
	now := o.opts.Clock()
	if !o.lastPrune.IsZero() && now.Sub(o.lastPrune) < time.Hour {
		return nil
	}
	o.lastPrune = now
	_, err := o.db.Write.ExecContext(ctx, `DELETE FROM talk_outbox WHERE status = 'sent' AND sent_at < ?`,
		store.FormatTime(now.Add(-o.opts.KeepSent)))
	if err != nil {
		return fmt.Errorf("outbox: prune sent rows: %w", err)
	}
	return nil
}

func (o *Outbox) count(ctx context.Context, status string) (int, error) {
	var n int
	if err := o.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM talk_outbox WHERE status = ?`, status).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox: count %s: %w", status, err)
	}
	return n, nil
}

// Pending returns how many rows wait for delivery.
func (o *Outbox) Pending(ctx context.Context) (int, error) { return o.count(ctx, StatusPending) }

// Failed lists rows that will not be delivered, oldest first.
func (o *Outbox) Failed(ctx context.Context) ([]Entry, error) {
	return o.list(ctx, `WHERE status = 'failed' ORDER BY id`)
}

// List returns every row of conversation token, oldest first (for admin views and tests).
func (o *Outbox) List(ctx context.Context, token string) ([]Entry, error) {
	return o.list(ctx, `WHERE token = ? ORDER BY id`, token)
}

func (o *Outbox) list(ctx context.Context, where string, args ...any) ([]Entry, error) {
	rs, err := o.db.Read.QueryContext(ctx, `SELECT id, token, message, reply_to, reference_id, COALESCE(task_id, 0), kind, status,
		attempts, next_attempt_at, last_error, created_at, sent_at FROM talk_outbox `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: list: %w", err)
	}
	defer rs.Close()
	var out []Entry
	for rs.Next() {
		var e Entry
		var next, created, sent string
		if err := rs.Scan(&e.ID, &e.Token, &e.Text, &e.ReplyTo, &e.ReferenceID, &e.TaskID, &e.Kind, &e.Status,
			&e.Attempts, &next, &e.LastError, &created, &sent); err != nil {
			return nil, fmt.Errorf("outbox: scan: %w", err)
		}
		for _, f := range []struct {
			dst *time.Time
			src string
		}{{&e.NextAttemptAt, next}, {&e.CreatedAt, created}, {&e.SentAt, sent}} {
			if *f.dst, err = store.ParseTime(f.src); err != nil {
				return nil, fmt.Errorf("outbox: row %d: %w", e.ID, err)
			}
		}
		out = append(out, e)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox: list: %w", err)
	}
	return out, nil
}

// Retry puts a failed row back in the queue (an admin's decision after fixing the
// cause, e.g. enabling the bot in the conversation). It returns store.ErrNotFound if
// the row does not exist or has not failed.
func (o *Outbox) Retry(ctx context.Context, id int64) error {
	res, err := o.db.Write.ExecContext(ctx, `UPDATE talk_outbox SET status = 'pending', next_attempt_at = ?, last_error = ''
		WHERE id = ? AND status = 'failed'`, store.FormatTime(o.opts.Clock()), id)
	if err != nil {
		return fmt.Errorf("outbox: retry row %d: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("outbox: retry row %d: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("outbox: retry row %d: %w", id, store.ErrNotFound)
	}
	o.Wake()
	return nil
}

// Stats counts rows by status.
func (o *Outbox) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	var oldest sql.NullString
	err := o.db.Read.QueryRowContext(ctx, `SELECT
		COUNT(CASE WHEN status = 'pending' THEN 1 END),
		COUNT(CASE WHEN status = 'pending' AND last_error LIKE 'unauthorized (%' THEN 1 END),
		COUNT(CASE WHEN status = 'sent' THEN 1 END),
		COUNT(CASE WHEN status = 'failed' THEN 1 END),
		MIN(CASE WHEN status = 'pending' THEN created_at END)
		FROM talk_outbox`).Scan(&s.Pending, &s.Held, &s.Sent, &s.Failed, &oldest)
	if err != nil {
		return Stats{}, fmt.Errorf("outbox: stats: %w", err)
	}
	if oldest.Valid {
		if s.OldestPending, err = store.ParseTime(oldest.String); err != nil {
			return Stats{}, fmt.Errorf("outbox: stats: %w", err)
		}
	}
	return s, nil
}
