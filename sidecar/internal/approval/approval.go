package approval

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
)

// Status is the state of a question.
type Status string

// Question states.
const (
	Pending   Status = "pending"
	Approved  Status = "approved"
	Denied    Status = "denied"
	Expired   Status = "expired"
	Cancelled Status = "cancelled"
)

// How a question was answered (Request.Via).
const (
	ViaTalkReaction = "talk_reaction"
	ViaTalkReply    = "talk_reply"
	ViaPage         = "page"
	ViaTimeout      = "timeout"
	ViaStop         = "stop"
)

// DefaultTimeout is how long a question waits for an answer; no answer means no.
const DefaultTimeout = 30 * time.Minute

// EventKind is the task event kind of every approval step (istota show, the page).
const EventKind = "approval"

// auditComponent names approvals in the audit log.
const auditComponent = "approval"

// Errors of Decide.
var (
	// ErrNotYours: only the user the question is for may answer it.
	ErrNotYours = errors.New("approval: only the user who was asked may answer")
	// ErrDecided: the question was already answered (or expired, or cancelled).
	ErrDecided = errors.New("approval: the question is already decided")
)

// Request is one question to a user about one action.
type Request struct {
	ID          int64     `json:"id"`
	TaskID      int64     `json:"task_id"`
	UserID      string    `json:"user_id"`
	Tier        Tier      `json:"tier"`
	Kind        string    `json:"kind"`
	Name        string    `json:"name"`
	Summary     string    `json:"summary"`
	Host        string    `json:"host,omitempty"`
	Fingerprint string    `json:"-"`
	AskToken    string    `json:"ask_token"`
	Status      Status    `json:"status"`
	DecidedBy   string    `json:"decided_by"`
	DecidedVia  string    `json:"decided_via"`
	Used        bool      `json:"-"`
	CreatedAt   time.Time `json:"created_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	DecidedAt   time.Time `json:"decided_at"`
}

// Who is the task an action belongs to. It comes from the task that owns the sandbox,
// never from a request.
type Who struct {
	UserID string
	TaskID int64
}

// Outcome is the verdict on one action.
type Outcome struct {
	Allowed bool
	// Message tells the agent why it may not (empty when allowed).
	Message string
	// RequestID is the question that decided it, 0 when the policy alone did.
	RequestID int64
}

// Options configure a Service.
type Options struct {
	// Defaults are the admin's policies in effect now; nil means DefaultPolicies.
	Defaults func() Policies
	// Timeout is how long a question waits now; nil or 0 means DefaultTimeout.
	Timeout func() time.Duration
	// Audit records every question and answer; nil only logs.
	Audit *audit.Log
	// OnNotice wakes the Talk outbox after a question was queued.
	OnNotice func()
	// OnWait is told when a task starts waiting for answers (true) and when it goes on
	// (false), so the worker pool can give its slot to another task meanwhile.
	OnWait func(taskID int64, waiting bool)
	// PollInterval bounds how long a waiting call takes to see an answer given by
	// another process (default 2 s); answers given in this process wake it at once.
	PollInterval time.Duration
	Clock        func() time.Time
	Logger       *slog.Logger
}

// Service asks, waits and records. It is safe for concurrent use.
type Service struct {
	db    *store.DB
	queue *queue.Queue
	out   *outbox.Outbox
	opts  Options

	mu      sync.Mutex
	waiters map[int64]map[chan struct{}]struct{} // by request id
	paused  map[int64]*pause                     // by task id
}

// pause is how long a task has waited for answers: its run's timeout does not count it.
type pause struct {
	total   time.Duration
	since   time.Time
	waiting int
}

// New returns a Service. ob may be nil (no Talk questions, only the page).
func New(db *store.DB, q *queue.Queue, ob *outbox.Outbox, opts Options) *Service {
	if opts.Defaults == nil {
		opts.Defaults = DefaultPolicies
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Audit == nil {
		opts.Audit = audit.New(nil, opts.Logger, opts.Clock)
	}
	if opts.OnNotice == nil {
		opts.OnNotice = func() {}
	}
	if opts.OnWait == nil {
		opts.OnWait = func(int64, bool) {}
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 2 * time.Second
	}
	return &Service{db: db, queue: q, out: ob, opts: opts,
		waiters: map[int64]map[chan struct{}]struct{}{}, paused: map[int64]*pause{}}
}

func (s *Service) timeout() time.Duration {
	if s.opts.Timeout != nil {
		if d := s.opts.Timeout(); d > 0 {
			return d
		}
	}
	return DefaultTimeout
}

// Check decides whether who may do a now. Allowed and denied tiers answer at once; an
// "ask" tier asks the user (once per distinct action and task) and waits for the answer,
// the timeout, or ctx. While it waits the task is pending_confirmation.
func (s *Service) Check(ctx context.Context, who Who, a Action) (Outcome, error) {
	if !a.Tier.Valid() {
		a.Tier = TierAdmin
	}
	pols, err := s.Effective(ctx, who.UserID)
	if err != nil {
		return Outcome{}, err
	}
	switch pols.For(a.Tier) {
	case Allow:
		return Outcome{Allowed: true}, nil
	case Ask:
	default:
		s.record(ctx, who, a.Name, false, "policy_deny", fmt.Sprintf("tier=%s: %s", a.Tier, a.Summary))
		s.event(ctx, who.TaskID, fmt.Sprintf("refused by policy (%s is set to deny): %s", a.Tier, a.Summary))
		return Outcome{Message: fmt.Sprintf("not done: actions of the tier %q (%s) are set to deny for this user; tell the user it was not done and why", a.Tier, a.Tier.Label())}, nil
	}
	req, err := s.open(ctx, who, a)
	if err != nil {
		return Outcome{}, err
	}
	if req.Status == Pending {
		if req, err = s.wait(ctx, req); err != nil {
			return Outcome{RequestID: req.ID}, err
		}
	}
	if err := s.consume(ctx, req.ID); err != nil {
		return Outcome{}, err
	}
	out := Outcome{RequestID: req.ID, Allowed: req.Status == Approved}
	switch req.Status {
	case Denied:
		out.Message = fmt.Sprintf("not done: %s refused it (approval #%d). Do not try it another way; tell the user it was not done", req.DecidedBy, req.ID)
	case Expired:
		out.Message = fmt.Sprintf("not done: nobody answered the question (approval #%d) within %s, which counts as no; tell the user it was not done", req.ID, roundDuration(req.ExpiresAt.Sub(req.CreatedAt)))
	case Cancelled:
		out.Message = fmt.Sprintf("not done: the request was cancelled (approval #%d)", req.ID)
	}
	return out, nil
}

// Fingerprint identifies an action within a task: the same call asked again (after a
// restart re-ran the task) finds its question instead of asking twice.
func Fingerprint(a Action) string {
	h := sha256.New()
	for _, p := range [][]byte{[]byte(a.Kind), []byte(a.Name), []byte(a.Summary), a.Input} {
		h.Write(p)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// open finds the open question for this action of this task (pending, or decided and
// not yet acted on) or asks a new one, posting it to Talk in the same transaction.
func (s *Service) open(ctx context.Context, who Who, a Action) (Request, error) {
	fp := Fingerprint(a)
	t, err := s.queue.Get(ctx, who.TaskID)
	if err != nil {
		return Request{}, fmt.Errorf("approval: ask: %w", err)
	}
	token, replyTo := "", int64(0)
	if t.ConversationToken != "" && t.Source == queue.SourceTalk {
		token, replyTo = t.ConversationToken, t.ReplyToMessageID
	} else if tok, ok, err := convlog.PrivateConversation(ctx, s.db.Read, who.UserID); err != nil {
		return Request{}, fmt.Errorf("approval: ask: %w", err)
	} else if ok {
		token = tok
	}
	now := s.opts.Clock()
	timeout := s.timeout()
	var req Request
	fresh := false
	err = s.withTx(ctx, func(tx *sql.Tx) error {
		row := tx.QueryRowContext(ctx, `SELECT `+columns+` FROM approvals
			WHERE task_id = ? AND fingerprint = ? AND used = 0 ORDER BY id DESC LIMIT 1`, who.TaskID, fp)
		var err error
		if req, err = scan(row); err == nil {
			return nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		var id int64
		err = tx.QueryRowContext(ctx, `INSERT INTO approvals
			(task_id, user_id, tier, kind, name, summary, host, fingerprint, ask_token, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			who.TaskID, who.UserID, a.Tier, a.Kind, a.Name, a.Summary, NormalizeHost(a.Host), fp, token,
			store.FormatTime(now), store.FormatTime(now.Add(timeout))).Scan(&id)
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		req = Request{ID: id, TaskID: who.TaskID, UserID: who.UserID, Tier: a.Tier, Kind: a.Kind, Name: a.Name,
			Summary: a.Summary, Host: NormalizeHost(a.Host), Fingerprint: fp, AskToken: token, Status: Pending, CreatedAt: now, ExpiresAt: now.Add(timeout)}
		fresh = true
		if token == "" || s.out == nil {
			return nil
		}
		return s.out.EnqueueTx(ctx, tx, outbox.Message{
			Token: token, Text: QuestionText(req, t, timeout), ReplyTo: replyTo, TaskID: who.TaskID,
			Kind: "notice", Key: fmt.Sprintf("approval:%d:question", id),
		})
	})
	if err != nil {
		return Request{}, fmt.Errorf("approval: ask: %w", err)
	}
	if fresh {
		s.opts.OnNotice()
		s.record(ctx, who, a.Name, false, "asked", fmt.Sprintf("approval #%d tier=%s: %s", req.ID, a.Tier, a.Summary))
		where := "on the settings page"
		if token != "" {
			where = "in Talk and on the settings page"
		}
		s.event(ctx, who.TaskID, fmt.Sprintf("approval #%d asked %s (%s): %s", req.ID, where, a.Tier, a.Summary))
	}
	return req, nil
}

// wait blocks until req is decided, expires, or ctx ends. The task is
// pending_confirmation meanwhile, and its run's timeout is paused.
func (s *Service) wait(ctx context.Context, req Request) (Request, error) {
	ch := s.subscribe(req.ID)
	defer s.unsubscribe(req.ID, ch)
	if s.pause(req.TaskID) {
		if err := s.queue.Hold(ctx, req.TaskID); err != nil {
			s.unpause(req.TaskID)
			return req, fmt.Errorf("approval: hold task: %w", err)
		}
		s.opts.OnWait(req.TaskID, true)
	}
	defer func() {
		if !s.unpause(req.TaskID) {
			return // another question of the task still waits
		}
		s.opts.OnWait(req.TaskID, false)
		// Back to running whatever happened, unless the task was cancelled meanwhile.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := s.queue.Resume(rctx, req.TaskID); err != nil && !errors.Is(err, queue.ErrLeaseLost) {
			s.opts.Logger.Warn("approval: resuming the task failed", "task_id", req.TaskID, "err", err)
		}
	}()
	tick := time.NewTicker(s.opts.PollInterval)
	defer tick.Stop()
	for {
		cur, err := s.Get(ctx, req.ID)
		if err != nil {
			return req, err
		}
		if cur.Status != Pending {
			return cur, nil
		}
		left := cur.ExpiresAt.Sub(s.opts.Clock())
		if left <= 0 {
			if err := s.expire(ctx, cur); err != nil {
				return cur, err
			}
			continue
		}
		timer := time.NewTimer(left)
		select {
		case <-ch:
		case <-tick.C:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return cur, ctx.Err()
		}
		timer.Stop()
	}
}

// expire records that nobody answered r in time.
func (s *Service) expire(ctx context.Context, r Request) error {
	_, err := s.settle(ctx, r, Expired, "", ViaTimeout)
	if errors.Is(err, ErrDecided) {
		return nil
	}
	return err
}

// Decide answers question id on behalf of uid (who must be the user it asks): approve
// or deny, via one of the Via* channels. The waiting action learns of it at once.
func (s *Service) Decide(ctx context.Context, id int64, uid string, approve bool, via string) (Request, error) {
	r, err := s.Get(ctx, id)
	if err != nil {
		return Request{}, err
	}
	if r.UserID != uid {
		return r, ErrNotYours
	}
	if r.Status != Pending {
		return r, fmt.Errorf("%w (%s)", ErrDecided, r.Status)
	}
	if !s.opts.Clock().Before(r.ExpiresAt) {
		if err := s.expire(ctx, r); err != nil {
			return r, err
		}
		r, _ = s.Get(ctx, id)
		return r, fmt.Errorf("%w (%s)", ErrDecided, Expired)
	}
	st := Denied
	if approve {
		st = Approved
	}
	return s.settle(ctx, r, st, uid, via)
}

// settle moves a pending question to st, records it and wakes its waiters.
func (s *Service) settle(ctx context.Context, r Request, st Status, by, via string) (Request, error) {
	now := s.opts.Clock()
	res, err := s.db.Write.ExecContext(ctx, `UPDATE approvals SET status = ?, decided_by = ?, decided_via = ?, decided_at = ?
		WHERE id = ? AND status = 'pending'`, st, by, via, store.FormatTime(now), r.ID)
	if err != nil {
		return r, fmt.Errorf("approval: decide #%d: %w", r.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return r, fmt.Errorf("approval: decide #%d: %w", r.ID, err)
	} else if n == 0 {
		cur, gerr := s.Get(ctx, r.ID)
		if gerr != nil {
			return r, gerr
		}
		return cur, fmt.Errorf("%w (%s)", ErrDecided, cur.Status)
	}
	r.Status, r.DecidedBy, r.DecidedVia, r.DecidedAt = st, by, via, now
	who := Who{UserID: r.UserID, TaskID: r.TaskID}
	text := fmt.Sprintf("approval #%d %s", r.ID, st)
	if by != "" {
		text += " by " + by
	}
	text += fmt.Sprintf(" (%s): %s", via, r.Summary)
	s.record(ctx, who, r.Name, st == Approved, string(st), fmt.Sprintf("approval #%d tier=%s by=%s via=%s", r.ID, r.Tier, by, via))
	s.event(ctx, r.TaskID, text)
	s.wake(r.ID)
	return r, nil
}

// CancelTasks cancels the open questions of the given tasks (they were stopped), as uid.
func (s *Service) CancelTasks(ctx context.Context, uid string, taskIDs []int64) error {
	var errs []error
	for _, id := range taskIDs {
		rows, err := s.list(ctx, `WHERE task_id = ? AND status = 'pending'`, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, r := range rows {
			if _, err := s.settle(ctx, r, Cancelled, uid, ViaStop); err != nil && !errors.Is(err, ErrDecided) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// consume marks a decision acted on, so the same action later asks again.
func (s *Service) consume(ctx context.Context, id int64) error {
	if _, err := s.db.Write.ExecContext(context.WithoutCancel(ctx), `UPDATE approvals SET used = 1 WHERE id = ?`, id); err != nil {
		return fmt.Errorf("approval: mark #%d used: %w", id, err)
	}
	return nil
}

const columns = `id, task_id, user_id, tier, kind, name, summary, host, fingerprint, ask_token, status,
	decided_by, decided_via, used, created_at, expires_at, decided_at`

type scanner interface{ Scan(dest ...any) error }

func scan(row scanner) (Request, error) {
	var (
		r                     Request
		tier, status          string
		created, exp, decided string
	)
	err := row.Scan(&r.ID, &r.TaskID, &r.UserID, &tier, &r.Kind, &r.Name, &r.Summary, &r.Host, &r.Fingerprint, &r.AskToken,
		&status, &r.DecidedBy, &r.DecidedVia, &r.Used, &created, &exp, &decided)
	if errors.Is(err, sql.ErrNoRows) {
		return Request{}, store.ErrNotFound
	}
	if err != nil {
		return Request{}, fmt.Errorf("approval: read: %w", err)
	}
	r.Tier, r.Status = Tier(tier), Status(status)
	if r.CreatedAt, err = store.ParseTime(created); err == nil {
		if r.ExpiresAt, err = store.ParseTime(exp); err == nil {
			r.DecidedAt, err = store.ParseTime(decided)
		}
	}
	if err != nil {
		return Request{}, fmt.Errorf("approval: read #%d: %w", r.ID, err)
	}
	return r, nil
}

// Get returns question id; an unknown one gives store.ErrNotFound.
func (s *Service) Get(ctx context.Context, id int64) (Request, error) {
	r, err := scan(s.db.Write.QueryRowContext(ctx, `SELECT `+columns+` FROM approvals WHERE id = ?`, id))
	if errors.Is(err, store.ErrNotFound) {
		return Request{}, fmt.Errorf("approval #%d: %w", id, store.ErrNotFound)
	}
	return r, err
}

// Pending lists uid's questions that still wait for an answer: not expired, and their
// task still in flight. Oldest first.
func (s *Service) Pending(ctx context.Context, uid string) ([]Request, error) {
	return s.list(ctx, `WHERE user_id = ? AND status = 'pending' AND expires_at > ?
		AND task_id IN (SELECT id FROM tasks WHERE status IN ('locked', 'running', 'pending_confirmation'))
		ORDER BY id`, uid, store.FormatTime(s.opts.Clock()))
}

// Recent lists uid's latest questions, answered or not, newest first.
func (s *Service) Recent(ctx context.Context, uid string, limit int) ([]Request, error) {
	if limit <= 0 || limit > 200 {
		limit = 20
	}
	return s.list(ctx, `WHERE user_id = ? ORDER BY id DESC LIMIT ?`, uid, limit)
}

func (s *Service) list(ctx context.Context, where string, args ...any) ([]Request, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT `+columns+` FROM approvals `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("approval: list: %w", err)
	}
	defer rows.Close()
	out := []Request{}
	for rows.Next() {
		r, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("approval: list: %w", err)
	}
	return out, nil
}

// Effective is uid's policies now: the admin's, tightened by the user's own choices.
func (s *Service) Effective(ctx context.Context, uid string) (Policies, error) {
	user, err := s.UserPolicies(ctx, uid)
	if err != nil {
		return Policies{}, err
	}
	return s.opts.Defaults().Tighten(user), nil
}

// Defaults are the admin's policies in effect now.
func (s *Service) Defaults() Policies { return s.opts.Defaults() }

// Timeout is how long a question waits now.
func (s *Service) Timeout() time.Duration { return s.timeout() }

// UserPolicies are uid's own choices; a tier the user left alone is empty.
func (s *Service) UserPolicies(ctx context.Context, uid string) (Policies, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT tier, policy FROM approval_policies WHERE user_id = ?`, uid)
	if err != nil {
		return Policies{}, fmt.Errorf("approval: policies of %s: %w", uid, err)
	}
	defer rows.Close()
	var p Policies
	for rows.Next() {
		var tier, pol string
		if err := rows.Scan(&tier, &pol); err != nil {
			return Policies{}, fmt.Errorf("approval: policies of %s: %w", uid, err)
		}
		p.Set(Tier(tier), Policy(pol))
	}
	if err := rows.Err(); err != nil {
		return Policies{}, fmt.Errorf("approval: policies of %s: %w", uid, err)
	}
	return p, nil
}

// PolicyError is a choice a user may not make; Fields names the tiers.
type PolicyError struct{ Fields map[string]string }

func (e *PolicyError) Error() string {
	parts := make([]string, 0, len(e.Fields))
	for _, t := range Tiers() {
		if m, ok := e.Fields[string(t)]; ok {
			parts = append(parts, string(t)+": "+m)
		}
	}
	return "approval: " + strings.Join(parts, "; ")
}

// SetUserPolicies stores uid's choices. An empty policy follows the admin's; a policy
// looser than the admin's is refused with *PolicyError (a user may only tighten).
func (s *Service) SetUserPolicies(ctx context.Context, uid string, p Policies) error {
	admin := s.opts.Defaults()
	bad := map[string]string{}
	for _, t := range Tiers() {
		v := p.For(t)
		switch {
		case v == "":
		case !v.Valid():
			bad[string(t)] = fmt.Sprintf("%q is not allow, ask or deny", v)
		case admin.For(t).Stricter(v) != v:
			bad[string(t)] = fmt.Sprintf("the administrator set %s; you may only choose something stricter", admin.For(t))
		}
	}
	if len(bad) > 0 {
		return &PolicyError{Fields: bad}
	}
	now := store.FormatTime(s.opts.Clock())
	return s.withTx(ctx, func(tx *sql.Tx) error {
		for _, t := range Tiers() {
			var err error
			if v := p.For(t); v == "" || v == admin.For(t) {
				_, err = tx.ExecContext(ctx, `DELETE FROM approval_policies WHERE user_id = ? AND tier = ?`, uid, t)
			} else {
				_, err = tx.ExecContext(ctx, `INSERT INTO approval_policies (user_id, tier, policy, updated_at) VALUES (?, ?, ?, ?)
					ON CONFLICT (user_id, tier) DO UPDATE SET policy = excluded.policy, updated_at = excluded.updated_at`, uid, t, v, now)
			}
			if err != nil {
				return fmt.Errorf("approval: save policies of %s: %w", uid, err)
			}
		}
		return nil
	})
}

// Paused is how long task taskID has waited for answers so far, including a wait in
// progress: the executor does not count it against the run's timeout.
func (s *Service) Paused(taskID int64) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.paused[taskID]
	if p == nil {
		return 0
	}
	d := p.total
	if p.waiting > 0 {
		d += s.opts.Clock().Sub(p.since)
	}
	return d
}

// Forget drops what Paused knows of a finished task.
func (s *Service) Forget(taskID int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.paused[taskID]; p != nil && p.waiting == 0 {
		delete(s.paused, taskID)
	}
}

// pause starts counting a wait of the task; it reports whether it is the first one.
func (s *Service) pause(taskID int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.paused[taskID]
	if p == nil {
		p = &pause{}
		s.paused[taskID] = p
	}
	first := p.waiting == 0
	if first {
		p.since = s.opts.Clock()
	}
	p.waiting++
	return first
}

// unpause ends a wait of the task; it reports whether it was the last one.
func (s *Service) unpause(taskID int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.paused[taskID]
	if p == nil || p.waiting == 0 {
		return false
	}
	p.waiting--
	if p.waiting == 0 {
		p.total += s.opts.Clock().Sub(p.since)
		return true
	}
	return false
}

func (s *Service) subscribe(id int64) chan struct{} {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiters[id] == nil {
		s.waiters[id] = map[chan struct{}]struct{}{}
	}
	s.waiters[id][ch] = struct{}{}
	return ch
}

func (s *Service) unsubscribe(id int64, ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiters[id], ch)
	if len(s.waiters[id]) == 0 {
		delete(s.waiters, id)
	}
}

func (s *Service) wake(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.waiters[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// record writes an audit entry even when ctx has ended.
func (s *Service) record(ctx context.Context, who Who, action string, allowed bool, reason, detail string) {
	err := s.opts.Audit.Record(context.WithoutCancel(ctx), audit.Entry{UserID: who.UserID, TaskID: who.TaskID,
		Component: auditComponent, Action: action, Allowed: allowed, Reason: reason, Detail: detail})
	if err != nil {
		s.opts.Logger.Error("approval: audit failed", "err", err)
	}
}

// event adds a line to the task's events (istota show, the live page).
func (s *Service) event(ctx context.Context, taskID int64, text string) {
	if err := s.queue.AddEvent(context.WithoutCancel(ctx), taskID, EventKind, text); err != nil {
		s.opts.Logger.Warn("approval: task event failed", "task_id", taskID, "err", err)
	}
}

func (s *Service) withTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return s.db.InTx(ctx, fn)
}

func roundDuration(d time.Duration) string {
	if d >= time.Minute && d%time.Minute == 0 {
		return fmt.Sprintf("%d min", int(d/time.Minute))
	}
	return d.Round(time.Second).String()
}
