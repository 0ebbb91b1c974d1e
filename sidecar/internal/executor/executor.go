// Package executor runs one claimed task: it assembles the prompt, runs the brain in the
// user's sandbox, streams rate-limited progress to Talk and records the outcome, with the
// reply enqueued in the same transaction that completes the task.
package executor

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/brain"
	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/deferred"
	"github.com/istota/istota/sidecar/internal/knowledge"
	"github.com/istota/istota/sidecar/internal/memory"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/prompt"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/usage"
	"github.com/istota/istota/sidecar/internal/workspace"
)

// Launchers gives each task a launcher that starts the agent inside that task's sandbox;
// the returned close function releases the task's sockets and temporary files.
type Launchers interface {
	ForTask(ctx context.Context, t queue.Task, ws Workspace) (brain.Launcher, func() error, error)
}

// Workspace is where one task's files live on the host.
type Workspace struct {
	Root string // the user's workspace mirror, /workspace inside the sandbox
	Home string // the user's persistent agent home
	Tmp  string // this task's temporary directory
	// Channel is the conversation's folder (CHANNEL.md, memories), empty without one.
	Channel string
	// Admin is true when the task's user is a Nextcloud (Istota) admin: their sandbox
	// also shows every user's workspace and the database.
	Admin bool
}

// Files keeps the local mirrors in step with Nextcloud. Errors from Pull mean the task
// runs on the mirror as it is; a failed Push is retried later by the syncer itself.
type Files interface {
	// Prepare readies a user's mirror before a task (pull, or for a new user only the
	// seed files locally); Finish sends what the task wrote (provisioning a new user).
	// since is when the task was made: a sync begun after it needs no repeating.
	Prepare(ctx context.Context, uid string, since time.Time) (workspace.Report, error)
	Finish(ctx context.Context, uid string) (workspace.Report, error)
	PrepareChannel(ctx context.Context, token string, since time.Time) (workspace.Report, error)
	FinishChannel(ctx context.Context, token string) (workspace.Report, error)
}

// ChannelDir is where a conversation task sees the conversation's folder.
const ChannelDir = "/channel"

// Where admins' sandboxes show every user's workspace and the database.
const (
	AdminUsersDir = "/srv/istota/users"
	AdminDBDir    = "/srv/istota/db"
)

// Options configures an Executor.
type Options struct {
	// Transcriber turns voice messages into text before a task starts; nil means none
	// is set up (the user is told).
	Transcriber Transcriber
	// OCR says tesseract (and pdftoppm) are installed, so the agent can read images.
	OCR                 bool
	BotName             string
	DataDir             string
	Model               string
	MaxTurns            int
	TaskTimeout         time.Duration
	ProgressInterval    time.Duration
	MaxProgressMessages int
	ContextMessages     int
	// DatedDays of memories/YYYY-MM-DD.md and MaxMemoryChars for the prompt.
	DatedDays      int
	MaxMemoryChars int
	Owner          string // the worker pool's lease owner
	Clock          func() time.Time
	Logger         *slog.Logger
	// OnReply is a wake-up hint for the outbox.
	OnReply func()
	// OnConfigEdit is called after a completed task changed one of the user's checked
	// configuration files (ValidatedFiles), so their runners look at it now; nil for none.
	OnConfigEdit func()
	// Deferred applies the operations a successful run left in its temp dir; nil
	// ignores them.
	Deferred Deferred
	// Facts gives the knowledge facts relevant to a request; nil adds none.
	Facts Facts
	// Usage records each run's cost estimate (token counts come from the gateway);
	// nil records nothing.
	Usage UsageRecorder
	// Memory indexes each finished conversation turn and, with Recall, adds memories
	// found by search to prompts; nil does neither.
	Memory Memory
	Recall bool
	// Files syncs the user's and the conversation's folders with Nextcloud around each
	// run; nil works on the local mirrors only (no bot account configured).
	Files Files
	// Mailer queues the answer of a task that is delivered by e-mail (Task.Email), in
	// the transaction that completes or finally fails it; nil leaves such answers in the
	// task's result only.
	Mailer Mailer
	// Commands runs a scheduled command job (Task.Command) in the sandbox instead of
	// the agent; nil fails such tasks.
	Commands brain.Brain
	// Budget refuses to start a model run for a user over their daily token budget,
	// whatever queued the task (Talk, mail, CRON.md, TASKS.md, briefings); nil has none.
	Budget Budget
	// Approvals checks the agent's own tool calls in brains that run their tool loop
	// here, and says how long a task waited for the user's answers, which its timeout
	// does not count; nil checks nothing.
	Approvals Approvals
	// Skills chooses the skills the prompt describes (the rest are only named); nil
	// describes none and leaves the agent to "istota skill skills".
	Skills SkillCatalog
	// UserResources names the resources a user has for the choice of skills
	// (skills.ResourceMailbox when they connected a mailbox); nil has none.
	UserResources func(ctx context.Context, uid string) []string
}

// SkillCatalog chooses the skills a prompt describes; *skills.Registry implements it.
type SkillCatalog interface {
	ForPrompt(req skills.Request) (described, others []skills.Skill)
}

// Approvals is the approvals check as the executor uses it (*approval.Service).
type Approvals interface {
	Check(ctx context.Context, who approval.Who, a approval.Action) (approval.Outcome, error)
	Paused(taskID int64) time.Duration
	Forget(taskID int64)
}

// errTaskTimeout ends a run that took longer than Options.TaskTimeout, not counting
// the time it waited for the user's answers.
var errTaskTimeout = errors.New("task timeout")

// Budget says why a user may not start a model run now ("" when they may).
type Budget interface {
	Refusal(ctx context.Context, uid, timezone string) (string, error)
}

// budgetError fails a task whose user is over budget; retrying the same day cannot help.
type budgetError struct{ msg string }

func (e *budgetError) Error() string { return "over the daily token budget: " + e.msg }

// Mailer queues a mailed answer durably, inside the caller's transaction, so that it is
// sent if and only if the task is recorded as finished.
type Mailer interface {
	QueueReplyTx(ctx context.Context, tx *sql.Tx, t queue.Task, body string) error
}

// NothingToReport is the answer a scheduled run marked silent_unless_action gives when
// nothing needs the user's attention; such an answer is recorded but not delivered.
const NothingToReport = "NOTHING_TO_REPORT"

// silent reports whether a finished run's answer is to be kept from the user.
func silent(t queue.Task, answer string) bool {
	return t.SilentUnlessAction && strings.HasPrefix(strings.TrimSpace(answer), NothingToReport)
}

// errNotAdmin fails a command job whose owner is no longer an administrator; retrying
// cannot help.
var errNotAdmin = errors.New("only administrators may run scheduled commands; the job was refused at run time")

// UsageRecorder stores model usage.
type UsageRecorder interface {
	Record(ctx context.Context, e usage.Entry) error
}

// Memory is the searchable memory index.
type Memory interface {
	IndexConversation(ctx context.Context, ns string, taskID int64, turns []memory.Turn) (int, error)
	Recall(ctx context.Context, namespaces []string, text string, limit int) ([]string, error)
}

// Facts finds knowledge facts relevant to a text in a namespace ("user:<uid>").
type Facts interface {
	Relevant(ctx context.Context, ns, text string, limit int) ([]knowledge.Fact, error)
}

// Deferred applies an agent's deferred operations with the identity of the task.
type Deferred interface {
	Apply(ctx context.Context, dir string, t queue.Task) (deferred.Report, error)
}

// Executor runs tasks.
type Executor struct {
	db        *store.DB
	queue     *queue.Queue
	outbox    *outbox.Outbox
	brain     brain.Brain
	launchers Launchers
	opts      Options

	// pushes are the uploads after answers, run outside the worker's slot so the next
	// task starts while Nextcloud takes the files; pushSlots bounds them.
	pushes    sync.WaitGroup
	pushSlots chan struct{}
	// stopPushes cancels pushCtx, under which the pushes run, when Wait gives up.
	pushCtx    context.Context
	stopPushes context.CancelFunc
}

// maxPushes bounds the uploads running after answers at once.
const maxPushes = 8

// New returns an Executor.
func New(db *store.DB, q *queue.Queue, ob *outbox.Outbox, b brain.Brain, l Launchers, opts Options) *Executor {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.OnReply == nil {
		opts.OnReply = func() {}
	}
	if opts.TaskTimeout <= 0 {
		opts.TaskTimeout = 15 * time.Minute
	}
	pushCtx, stop := context.WithCancel(context.Background())
	return &Executor{db: db, queue: q, outbox: ob, brain: b, launchers: l, opts: opts,
		pushSlots: make(chan struct{}, maxPushes), pushCtx: pushCtx, stopPushes: stop}
}

// Handle is the worker pool's handler: it owns the task from Start to Complete or Fail.
func (e *Executor) Handle(ctx context.Context, t queue.Task) {
	log := e.opts.Logger.With("task_id", t.ID, "user_id", t.UserID, "source", t.Source)
	if err := e.queue.Start(ctx, t.ID, e.opts.Owner); err != nil {
		log.Warn("task could not be started", "err", err)
		return
	}
	var ph phases
	res, runErr := e.run(ctx, t, log, &ph)
	// Whatever happened to the run (even !stop), what the agent wrote reaches Nextcloud:
	// after the answer is on its way and outside the worker's slot, so neither the answer
	// nor the next task waits for the upload. The user's next task may start meanwhile,
	// but its pull waits for this push (one sync of a tree at a time), so it starts from
	// the pushed state; and a crash before the push ends loses nothing: every sync is
	// two-way, so the next one sends what is left.
	defer e.pushAfter(t, log)
	log = log.With("pull_ms", ph.pull.Milliseconds(), "agent_ms", ph.agent.Milliseconds())
	switch {
	case errors.Is(ctx.Err(), context.Canceled) && !errors.Is(runErr, context.DeadlineExceeded):
		// Stopped with !stop (the row is already cancelled) or the sidecar is shutting
		// down (the lease is left to expire and the task runs again after restart).
		log.Info("task run interrupted", "err", runErr)
		return
	case runErr == nil && res.OK:
		e.complete(t, res, ph.edited, log)
	default:
		e.fail(t, res, runErr, log)
	}
}

// taskTimer cancels a run with errTaskTimeout once it has run Options.TaskTimeout, not
// counting the time it waited for the user's answers. The returned func stops it.
func (e *Executor) taskTimer(taskID int64, cancel context.CancelCauseFunc) func() {
	start := time.Now()
	var (
		mu      sync.Mutex
		timer   *time.Timer
		stopped bool
	)
	var check func()
	check = func() {
		var paused time.Duration
		if e.opts.Approvals != nil {
			paused = e.opts.Approvals.Paused(taskID)
		}
		left := e.opts.TaskTimeout + paused - time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case stopped:
		case left > 0:
			timer = time.AfterFunc(left, check)
		default:
			cancel(errTaskTimeout)
		}
	}
	mu.Lock()
	timer = time.AfterFunc(e.opts.TaskTimeout, check)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		timer.Stop()
		mu.Unlock()
		if e.opts.Approvals != nil {
			e.opts.Approvals.Forget(taskID)
		}
	}
}

// approver asks the approvals check about one of the agent's own tool calls of t.
func (e *Executor) approver(t queue.Task) func(ctx context.Context, tool string, input json.RawMessage) (bool, string, error) {
	if e.opts.Approvals == nil {
		return nil
	}
	return func(ctx context.Context, tool string, input json.RawMessage) (bool, string, error) {
		out, err := e.opts.Approvals.Check(ctx, approval.Who{UserID: t.UserID, TaskID: t.ID}, approval.ClassifyTool(tool, input))
		return out.Allowed, out.Message, err
	}
}

// Prompt builds the prompt a task would get, for `istota task --dry-run`.
func (e *Executor) Prompt(ctx context.Context, t queue.Task) (string, error) {
	u, err := e.loadUser(ctx, t.UserID)
	if err != nil {
		return "", err
	}
	return e.buildPrompt(ctx, t, u)
}

// phases is where a task's time went before its answer, for the log line that ends it:
// an admin (and `make bench`) can see what the answer waited for besides the agent.
type phases struct {
	pull, agent time.Duration
	// edited are the ValidatedFiles the run changed.
	edited []string
}

// ValidatedFiles are the user's configuration files whose content the sidecar checks
// after a change (CRON.md, HEARTBEAT.md, BRIEFINGS.md). When the agent changed one, the
// checker's verdict goes to the conversation of the task (convlog.RecordEdit).
var ValidatedFiles = [...]string{"CRON.md", "HEARTBEAT.md", "BRIEFINGS.md"}

// configHashes fingerprints the user's ValidatedFiles ("" for a missing one).
func (e *Executor) configHashes(uid string) map[string]string {
	out := make(map[string]string, len(ValidatedFiles))
	for _, name := range ValidatedFiles {
		b, err := os.ReadFile(filepath.Join(e.userDir(uid), "workspace", strings.ToLower(e.opts.BotName), "config", name))
		if err != nil {
			out[name] = ""
			continue
		}
		sum := sha256.Sum256(b)
		out[name] = hex.EncodeToString(sum[:])
	}
	return out
}

func (e *Executor) run(ctx context.Context, t queue.Task, log *slog.Logger, ph *phases) (res brain.Result, err error) {
	ws, err := e.prepareWorkspace(t)
	if err != nil {
		return brain.Result{}, err
	}
	defer os.RemoveAll(ws.Tmp)
	u, err := e.loadUser(ctx, t.UserID)
	if err != nil {
		return brain.Result{}, err
	}
	ws.Admin = u.IsAdmin
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The sandbox starts before the pull and gets ready while the files arrive: its
	// start is off the answer's path (the launcher's commands see the pulled files).
	launcher, closeSandbox, err := e.launchers.ForTask(runCtx, t, ws)
	if err != nil {
		return brain.Result{}, fmt.Errorf("prepare sandbox: %w", err)
	}
	defer func() {
		if err := closeSandbox(); err != nil {
			log.Warn("sandbox cleanup failed", "err", err)
		}
	}()
	start := time.Now()
	e.pullFiles(ctx, t, log)
	ph.pull = time.Since(start)
	run, text := e.brain, ""
	if t.Command != "" {
		// Admin status may have changed since the job was synced: check again.
		if !u.IsAdmin {
			return brain.Result{}, errNotAdmin
		}
		if e.opts.Commands == nil {
			return brain.Result{}, errors.New("scheduled commands are not available in this sidecar")
		}
		run, text = e.opts.Commands, t.Command
	} else {
		if e.opts.Budget != nil {
			msg, err := e.opts.Budget.Refusal(ctx, t.UserID, u.Timezone)
			if err != nil {
				return brain.Result{}, err
			}
			if msg != "" {
				return brain.Result{}, &budgetError{msg: msg}
			}
		}
		// Voice messages become text before the agent starts.
		t.Prompt += e.transcribeVoice(ctx, t, ws, log)
		if text, err = e.buildPrompt(ctx, t, u); err != nil {
			return brain.Result{}, err
		}
	}
	stopTimer := e.taskTimer(t.ID, cancel)
	defer stopTimer()
	if err := os.Mkdir(deferred.Dir(ws.Tmp), 0o700); err != nil {
		return brain.Result{}, fmt.Errorf("create the deferred operations folder: %w", err)
	}
	progress := newProgress(e, t, log)
	defer func() { e.recordCost(t, res, log) }()
	before := e.configHashes(t.UserID)
	defer func() {
		after := e.configHashes(t.UserID)
		for _, name := range ValidatedFiles {
			if before[name] != after[name] {
				ph.edited = append(ph.edited, name)
			}
		}
	}()
	agentStart := time.Now()
	res, err = run.Run(runCtx, brain.Request{
		TaskID:   t.ID,
		UserID:   t.UserID,
		Prompt:   text,
		Model:    e.opts.Model,
		MaxTurns: e.opts.MaxTurns,
		Approve:  e.approver(t),
	}, launcher, progress.event)
	ph.agent = time.Since(agentStart)
	if errors.Is(context.Cause(runCtx), errTaskTimeout) && ctx.Err() == nil {
		return res, fmt.Errorf("timed out after %s: %w", e.opts.TaskTimeout, context.DeadlineExceeded)
	}
	if err == nil && res.OK && e.opts.Deferred != nil {
		report, derr := e.opts.Deferred.Apply(ctx, deferred.Dir(ws.Tmp), t)
		if derr != nil {
			log.Error("applying deferred operations failed", "err", derr)
		}
		for _, r := range report.Rejected {
			log.Warn("deferred operation rejected", "file", r.File, "op", r.Op, "reason", r.Reason, "detail", r.Detail)
		}
		if n := len(report.Applied); n > 0 {
			log.Info("deferred operations applied", "count", n)
		}
	}
	return res, err
}

func (e *Executor) pullFiles(ctx context.Context, t queue.Task, log *slog.Logger) {
	if e.opts.Files == nil {
		return
	}
	// A sync begun after the task was made (the prefetch queued with it, usually) saw
	// everything its request can refer to. A retry pulls afresh: time has passed.
	since := t.CreatedAt
	if t.Attempts > 0 {
		since = time.Time{}
	}
	// The user's tree and the conversation's are independent: pull both at once.
	var wg sync.WaitGroup
	if t.ConversationToken != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rep, err := e.opts.Files.PrepareChannel(ctx, t.ConversationToken, since); err != nil {
				log.Warn("pulling the conversation folder failed", "err", err)
			} else {
				logConflicts(log, rep)
			}
		}()
	}
	if rep, err := e.opts.Files.Prepare(ctx, t.UserID, since); err != nil {
		log.Warn("pulling the user's files failed; running on the local mirror as it is", "err", err)
	} else {
		logConflicts(log, rep)
	}
	wg.Wait()
}

// pushAfter starts the push of a finished task's files, waiting for a free push slot
// first so that a slow Nextcloud holds the workers back rather than piling up uploads.
func (e *Executor) pushAfter(t queue.Task, log *slog.Logger) {
	if e.opts.Files == nil {
		return
	}
	e.pushSlots <- struct{}{}
	e.pushes.Add(1)
	go func() {
		defer e.pushes.Done()
		defer func() { <-e.pushSlots }()
		start := time.Now()
		e.pushFiles(e.pushCtx, t, log)
		log.Debug("task files pushed", "push_ms", time.Since(start).Milliseconds())
	}()
}

// Wait returns when the pushes after answers have ended (they outlive their tasks'
// handlers), or when ctx ends.
func (e *Executor) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { e.pushes.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		// What they did not send stays in the mirrors for the next sync.
		e.stopPushes()
		<-done
		return fmt.Errorf("executor: uploads after answers stopped unfinished: %w", ctx.Err())
	}
}

func (e *Executor) pushFiles(ctx context.Context, t queue.Task, log *slog.Logger) {
	if e.opts.Files == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if rep, err := e.opts.Files.Finish(ctx, t.UserID); err != nil {
		log.Warn("pushing the user's files failed; they are retried", "err", err)
	} else {
		logConflicts(log, rep)
	}
	if t.ConversationToken != "" {
		if rep, err := e.opts.Files.FinishChannel(ctx, t.ConversationToken); err != nil {
			log.Warn("pushing the conversation folder failed; it is retried", "err", err)
		} else {
			logConflicts(log, rep)
		}
	}
}

func logConflicts(log *slog.Logger, rep workspace.Report) {
	for _, c := range rep.Conflicts {
		log.Warn("both sides changed a file; both versions are kept", "path", c.Path, "copy", c.Copy)
	}
}

func (e *Executor) complete(t queue.Task, res brain.Result, edited []string, log *slog.Logger) {
	// A fresh context: the reply must be recorded even if shutdown began meanwhile.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	answer := strings.TrimSpace(res.Text)
	if answer == "" {
		answer = "(The agent finished without a text answer.)"
	}
	err := e.queue.Complete(ctx, t.ID, e.opts.Owner, queue.Outcome{
		Result: answer, InputTokens: res.InputTokens, OutputTokens: res.OutputTokens, CostUSD: res.CostUSD,
	}, func(tx *sql.Tx) error {
		// What the checker says about a file the agent changed is told where the
		// change was asked for.
		if t.ConversationToken != "" {
			for _, name := range edited {
				if err := convlog.RecordEdit(ctx, tx, t.UserID, name, t.ConversationToken, t.ID, e.opts.Clock()); err != nil {
					return err
				}
			}
		}
		if silent(t, answer) {
			return nil
		}
		if t.Email != nil && e.opts.Mailer != nil {
			if err := e.opts.Mailer.QueueReplyTx(ctx, tx, t, answer); err != nil {
				return err
			}
		}
		if t.ConversationToken == "" {
			return nil
		}
		if err := e.outbox.EnqueueTx(ctx, tx, outbox.Message{
			Token: t.ConversationToken, Text: answer, ReplyTo: t.ReplyToMessageID, TaskID: t.ID,
			Kind: "reply", Key: fmt.Sprintf("task:%d:reply", t.ID),
		}); err != nil {
			return err
		}
		return convlog.RecordBotReply(ctx, tx, t.ConversationToken, t.ID, e.opts.BotName, answer, t.ReplyToMessageID, e.opts.Clock())
	})
	if err != nil {
		if errors.Is(err, queue.ErrCancelled) || errors.Is(err, queue.ErrLeaseLost) {
			log.Info("result discarded: task was stopped or taken over", "err", err)
			return
		}
		log.Error("recording the result failed", "err", err)
		return
	}
	if t.Email != nil && e.opts.Mailer == nil {
		log.Warn("the answer was meant for e-mail, but mail is not configured; it is kept in the task's result only")
	}
	log.Info("task completed", "input_tokens", res.InputTokens, "output_tokens", res.OutputTokens, "turns", res.NumTurns, "silent", silent(t, answer), "edited", strings.Join(edited, ","))
	e.opts.OnReply()
	if len(edited) > 0 && e.opts.OnConfigEdit != nil {
		e.opts.OnConfigEdit()
	}
	e.indexConversation(ctx, t, answer, log)
}

// indexConversation makes the finished exchange searchable, in the user's namespace and
// the conversation's. Scheduled and briefing runs are not conversations and stay out.
func (e *Executor) indexConversation(ctx context.Context, t queue.Task, answer string, log *slog.Logger) {
	if e.opts.Memory == nil || t.Source == queue.SourceCron || t.Source == queue.SourceBriefing {
		return
	}
	u, _ := e.loadUser(ctx, t.UserID)
	who := u.DisplayName
	if who == "" {
		who = t.UserID
	}
	now := e.opts.Clock()
	turns := []memory.Turn{{Speaker: who, Text: t.Prompt, At: t.CreatedAt}, {Speaker: e.opts.BotName, Text: answer, At: now}}
	if _, err := e.opts.Memory.IndexConversation(ctx, memory.UserNamespace(t.UserID), t.ID, turns); err != nil {
		log.Warn("indexing the conversation for memory search failed", "err", err)
	}
	if t.ConversationToken != "" {
		if _, err := e.opts.Memory.IndexConversation(ctx, memory.ChannelNamespace(t.ConversationToken), t.ID, turns); err != nil {
			log.Warn("indexing the conversation for the channel's memory failed", "err", err)
		}
	}
}

func (e *Executor) fail(t queue.Task, res brain.Result, runErr error, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reason, userReason := failureReason(t, res, runErr)
	notice := func(tx *sql.Tx, final bool) error {
		switch {
		case final:
			return e.notifyFailure(ctx, tx, t, userReason)
		case res.Transient:
			return e.notifyRetry(ctx, tx, t)
		}
		return nil
	}
	var (
		retryAt time.Time
		final   bool
		err     error
	)
	var overBudget *budgetError
	if errors.Is(runErr, errNotAdmin) || errors.As(runErr, &overBudget) {
		final, err = true, e.queue.FailPermanent(ctx, t.ID, e.opts.Owner, reason, notice)
	} else {
		retryAt, final, err = e.queue.Fail(ctx, t.ID, e.opts.Owner, reason, res.Transient, notice)
	}
	if err != nil {
		if errors.Is(err, queue.ErrCancelled) || errors.Is(err, queue.ErrLeaseLost) {
			log.Info("failure discarded: task was stopped or taken over", "err", err)
			return
		}
		log.Error("recording the failure failed", "err", err, "reason", reason)
		return
	}
	if final {
		log.Warn("task failed", "reason", reason)
		e.opts.OnReply()
		return
	}
	log.Info("task will be retried", "reason", reason, "transient", res.Transient, "retry_at", retryAt)
}

// recordCost stores the agent's own cost estimate of a run, failed runs included: the
// model was paid for either way.
func (e *Executor) recordCost(t queue.Task, res brain.Result, log *slog.Logger) {
	if e.opts.Usage == nil || res.CostUSD == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.opts.Usage.Record(ctx, usage.Entry{At: e.opts.Clock(), UserID: t.UserID, TaskID: t.ID, Model: e.opts.Model, CostUSD: res.CostUSD}); err != nil {
		log.Warn("recording the run's cost failed", "err", err)
	}
}

// NotifyFailure tells the user, in the same transaction that fails the task for good,
// that a task was given up. The queue and the worker pool call it when they fail a task
// themselves (an expired lease on the last attempt, a crashed handler).
func (e *Executor) NotifyFailure(tx *sql.Tx, t queue.Task) error {
	return e.notifyFailure(context.Background(), tx, t, "the run was interrupted too many times.")
}

func (e *Executor) notifyFailure(ctx context.Context, tx *sql.Tx, t queue.Task, userReason string) error {
	if t.Email != nil && e.opts.Mailer != nil {
		if err := e.opts.Mailer.QueueReplyTx(ctx, tx, t, "Sorry, I could not complete this request: "+userReason); err != nil {
			return err
		}
	}
	if t.ConversationToken == "" {
		return nil
	}
	return e.outbox.EnqueueTx(ctx, tx, outbox.Message{
		Token: t.ConversationToken, ReplyTo: t.ReplyToMessageID, TaskID: t.ID, Kind: "notice",
		Text: "Sorry, I could not complete this request: " + userReason,
		Key:  fmt.Sprintf("task:%d:failed", t.ID),
	})
}

// notifyRetry tells the user that their request is held back because the model API is
// unavailable, when it runs again and as which attempt. It runs inside the transaction
// that schedules the retry, so the notice exists if and only if the retry does, and only
// the failure that makes TransientFailures 1 sends it: a task that keeps failing is
// announced once, not at every retry (its final failure has its own message). The
// outbox key makes a repeated call a no-op as well.
//
// Only Talk requests get it: there a person has just asked and otherwise sees 👀 and
// nothing more. A mailed request is answered (or its failure told) by mail later, and a
// "not yet" mail would only add noise to the thread; scheduled work (CRON.md, TASKS.md,
// briefings) has nobody waiting, and reports its final outcome where it always does.
func (e *Executor) notifyRetry(ctx context.Context, tx *sql.Tx, t queue.Task) error {
	if t.Source != queue.SourceTalk || t.ConversationToken == "" {
		return nil
	}
	cur, err := e.queue.GetTx(ctx, tx, t.ID)
	if err != nil {
		return err
	}
	if cur.TransientFailures != 1 || !cur.WaitingToRetry() {
		return nil
	}
	u, err := e.loadUser(ctx, t.UserID)
	if err != nil {
		return err
	}
	loc, err := time.LoadLocation(u.Timezone)
	if err != nil {
		loc = time.UTC
	}
	return e.outbox.EnqueueTx(ctx, tx, outbox.Message{
		Token: t.ConversationToken, ReplyTo: t.ReplyToMessageID, TaskID: t.ID, Kind: outbox.KindNotice,
		Text: fmt.Sprintf("The model service is not answering; I'll try again at %s, attempt %d of %d.",
			queue.RetryClock(cur.NextAttemptAt, e.opts.Clock(), loc), cur.Attempts+1, cur.MaxAttempts),
		Key: fmt.Sprintf("task:%d:retry-notice", t.ID),
	})
}

// adminChecks is what the failure message of a model API failure asks an administrator
// to look at.
const adminChecks = "An administrator can check that the model API is reachable from the Istota server and that its API key is valid, and run `istota doctor`."

// failureReason gives the reason kept with the task and the shorter one told the user
// when this failure of t is its last.
func failureReason(t queue.Task, res brain.Result, runErr error) (internal, user string) {
	switch {
	case errors.Is(runErr, context.DeadlineExceeded):
		return runErr.Error(), "it took longer than the time limit."
	case errors.Is(runErr, errNotAdmin):
		return runErr.Error(), "only administrators may schedule commands."
	case errors.As(runErr, new(*budgetError)):
		var be *budgetError
		errors.As(runErr, &be)
		return runErr.Error(), be.msg
	case runErr != nil:
		return runErr.Error(), "the agent stopped unexpectedly. The administrator can find details in the sidecar log."
	case res.Transient:
		internal, status := "model API unavailable: "+strings.TrimSpace(res.Text), ""
		if res.APIStatus != 0 {
			internal = fmt.Sprintf("model API error %d (%s): %s", res.APIStatus, res.TerminalReason, res.Text)
			status = fmt.Sprintf(" (error %d)", res.APIStatus)
		}
		tries := "1 attempt"
		if n := t.Attempts + 1; n > 1 {
			tries = fmt.Sprintf("%d attempts", n)
		}
		return internal, fmt.Sprintf("the model service is not answering%s; I gave up after %s. %s", status, tries, adminChecks)
	case res.APIStatus == 401 || res.APIStatus == 403:
		return fmt.Sprintf("model API error %d (%s): %s", res.APIStatus, res.TerminalReason, res.Text),
			fmt.Sprintf("the model API refused the server's API key (error %d). An administrator can check the key in the Istota admin settings and run `istota doctor`.", res.APIStatus)
	case res.APIStatus != 0:
		return fmt.Sprintf("model API error %d (%s): %s", res.APIStatus, res.TerminalReason, res.Text),
			fmt.Sprintf("the model API answered with error %d. %s", res.APIStatus, adminChecks)
	case res.Subtype != "" && res.Subtype != "success":
		return "agent stopped: " + res.Subtype, "the agent stopped (" + strings.TrimPrefix(res.Subtype, "error_") + ")."
	default:
		msg := strings.TrimSpace(res.Text)
		if msg == "" {
			msg = "no result"
		}
		return "agent error: " + msg, "the agent reported an error."
	}
}

func (e *Executor) userDir(uid string) string {
	return filepath.Join(e.opts.DataDir, "users", SafeName(uid))
}

// ChannelDir is the local mirror of a conversation's folder /Channels/{token}/.
func (e *Executor) channelDir(token string) string {
	return ChannelMirror(e.opts.DataDir, token)
}

// ChannelMirror returns where the mirror of a conversation's folder lives.
func ChannelMirror(dataDir, token string) string {
	return filepath.Join(dataDir, "channels", SafeName(token))
}

// UserMirror returns where the mirror of a user's /Users/{uid}/ lives.
func UserMirror(dataDir, uid string) string {
	return filepath.Join(dataDir, "users", SafeName(uid), "workspace")
}

func (e *Executor) prepareWorkspace(t queue.Task) (Workspace, error) {
	base := e.userDir(t.UserID)
	ws := Workspace{
		Root: filepath.Join(base, "workspace"),
		Home: filepath.Join(base, "home"),
		Tmp:  filepath.Join(e.opts.DataDir, "tmp", fmt.Sprintf("task-%d", t.ID)),
	}
	// The parents are 0711 so the agent account can pass through to the directories
	// bound into its sandbox without listing anyone else's; the leaves are 0700 and
	// handed to the agent account by the sandbox.
	for _, d := range []string{filepath.Dir(base), base, filepath.Dir(ws.Tmp)} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return Workspace{}, fmt.Errorf("create %s: %w", d, err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return Workspace{}, fmt.Errorf("chmod %s: %w", d, err)
		}
	}
	dirs := []string{ws.Root, ws.Home}
	if t.ConversationToken != "" {
		ws.Channel = e.channelDir(t.ConversationToken)
		parent := filepath.Dir(ws.Channel)
		if err := os.MkdirAll(parent, 0o711); err != nil {
			return Workspace{}, fmt.Errorf("create %s: %w", parent, err)
		}
		if err := os.Chmod(parent, 0o711); err != nil {
			return Workspace{}, fmt.Errorf("chmod %s: %w", parent, err)
		}
		dirs = append(dirs, ws.Channel)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return Workspace{}, fmt.Errorf("create %s: %w", d, err)
		}
	}
	// A left-over tmp dir from a crashed attempt is discarded: each run starts clean.
	if err := os.RemoveAll(ws.Tmp); err != nil {
		return Workspace{}, fmt.Errorf("clear %s: %w", ws.Tmp, err)
	}
	if err := os.MkdirAll(ws.Tmp, 0o700); err != nil {
		return Workspace{}, fmt.Errorf("create %s: %w", ws.Tmp, err)
	}
	return ws, nil
}

// readConfigFile reads one of the user's config files (USER.md, PERSONA.md) from the
// bot folder of their workspace; a missing file is not an error.
func (e *Executor) readConfigFile(uid, name string) string {
	p := filepath.Join(e.userDir(uid), "workspace", strings.ToLower(e.opts.BotName), "config", name)
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	const max = 64 << 10
	if len(b) > max {
		b = b[:max]
	}
	return stripComments(string(b))
}

// stripComments removes HTML comments: the seeded example files explain themselves in
// comments that the agent need not read on every task.
func stripComments(s string) string {
	for {
		start := strings.Index(s, "<!--")
		if start < 0 {
			return s
		}
		end := strings.Index(s[start:], "-->")
		if end < 0 {
			return s[:start]
		}
		s = s[:start] + s[start+end+3:]
	}
}

func (e *Executor) buildPrompt(ctx context.Context, t queue.Task, u prompt.User) (string, error) {
	in := prompt.Input{
		BotName:   e.opts.BotName,
		Now:       e.opts.Clock(),
		User:      u,
		Source:    t.Source,
		Persona:   e.readConfigFile(t.UserID, "PERSONA.md"),
		UserMD:    e.readConfigFile(t.UserID, "USER.md"),
		Request:   t.Prompt,
		Workspace: "/workspace",
	}
	in.Resources = append(in.Resources,
		"Skills: run `istota skill skills` to list the skills you may use (they act with the user's credentials; you never see them).",
		"Changes you may not make directly (background subtasks, the user's key-value store) are requested as JSON files in "+deferred.SandboxDir+", applied after you finish: "+
			`{"op":"subtask","prompt":"…"}, {"op":"kv_set","namespace":"…","key":"…","value":"…"}, {"op":"kv_delete","namespace":"…","key":"…"}; one operation per *.json file.`,
		"Network access goes through a proxy that allows only the hosts the administrator listed.")
	if e.opts.OCR {
		in.Resources = append(in.Resources,
			"To read the text in a photo, scan or PDF: `istota skill ocr FILE [--lang eng+deu]` (Nextcloud's own OCR when its administrator installed a provider, else tesseract). "+
				"In your sandbox `tesseract IMAGE - -l eng` works too (languages: `tesseract --list-langs`); for a scanned PDF first `pdftoppm -r 200 -png FILE.pdf /tmp/page`, then each /tmp/page-N.png.")
	}
	if u.IsAdmin {
		in.Resources = append(in.Resources,
			"As an administrator you can read and change every user's workspace under "+AdminUsersDir+".",
			"The Istota database is at "+AdminDBDir+"/istota.db; open it with `sqlite3 'file:"+AdminDBDir+"/istota.db?mode=ro'` (read-only unless the admin allowed writes).")
	}
	personal := t.Source != queue.SourceBriefing && t.Source != queue.SourceCron
	if !personal {
		// Briefings and scheduled jobs never see personal memory.
		in.UserMD = ""
	} else {
		in.Dated = e.datedMemories(t.UserID, u.Timezone)
		if e.opts.Facts != nil {
			facts, err := e.opts.Facts.Relevant(ctx, "user:"+t.UserID, t.Prompt, 20)
			if err != nil {
				return "", fmt.Errorf("knowledge facts: %w", err)
			}
			for _, f := range facts {
				in.Facts = append(in.Facts, f.String())
			}
		}
		if e.opts.Recall && e.opts.Memory != nil {
			namespaces := []string{memory.UserNamespace(t.UserID)}
			if t.ConversationToken != "" {
				namespaces = append(namespaces, memory.ChannelNamespace(t.ConversationToken))
			}
			recalled, err := e.opts.Memory.Recall(ctx, namespaces, t.Prompt, 5)
			if err != nil {
				e.opts.Logger.Warn("memory recall failed; answering without it", "task_id", t.ID, "err", err)
			}
			in.Recalled = recalled
		}
	}
	in.MaxMemoryChars = e.opts.MaxMemoryChars
	if e.opts.Skills != nil {
		var have []string
		if e.opts.UserResources != nil {
			have = e.opts.UserResources(ctx, t.UserID)
		}
		in.Skills, in.OtherSkills = skillDocs(e.opts.Skills, t, u.IsAdmin, have)
	}
	if t.Source != queue.SourceCron && t.Source != queue.SourceBriefing {
		in.Guides = prompt.GuidesFor(t.Prompt, in.Workspace+"/"+strings.ToLower(e.opts.BotName)+"/config")
	}
	if t.ConversationToken != "" {
		in.Resources = append(in.Resources, "The conversation's shared folder is "+ChannelDir+" (CHANNEL.md, memories/); everyone in the conversation can see what you put there.")
		if b, err := os.ReadFile(filepath.Join(ChannelMirror(e.opts.DataDir, t.ConversationToken), "CHANNEL.md")); err == nil {
			in.ChannelMD = stripComments(string(b[:min(len(b), 64<<10)]))
		}
	}
	if t.Source == "talk" && t.ConversationToken != "" {
		_ = e.db.Read.QueryRowContext(ctx, `SELECT name FROM conversations WHERE token = ?`, t.ConversationToken).Scan(&in.Room)
		msgs, err := e.conversationContext(ctx, t, e.opts.Logger)
		if err != nil {
			return "", err
		}
		in.Context = msgs
		// The message that triggered the task may itself reply to an older one.
		if cur, err := convlog.Get(ctx, e.db.Read, t.ConversationToken, t.ReplyToMessageID); err == nil && cur.ReplyToID != 0 {
			if parent, err := convlog.Get(ctx, e.db.Read, t.ConversationToken, cur.ReplyToID); err == nil {
				pm := toPromptMessage(parent)
				in.ReplyTo = &pm
			}
		}
	}
	return prompt.Build(in), nil
}

// skillDocs chooses the skills the prompt of t describes: by the words of the request
// (not for briefings) and the resources the task has.
func skillDocs(cat SkillCatalog, t queue.Task, isAdmin bool, have []string) ([]prompt.SkillDoc, []string) {
	req := skills.Request{Text: t.Prompt, IsAdmin: isAdmin, Resources: slices.Clone(have)}
	if t.Source == queue.SourceBriefing {
		// A briefing only reports the data it was given; its words (calendar, today,
		// notes) must not pull skill usage into its prompt.
		req.Text = ""
	}
	if t.Source == queue.SourceEmail {
		req.Resources = append(req.Resources, skills.ResourceEmail)
	}
	if t.ConversationToken != "" {
		req.Resources = append(req.Resources, skills.ResourceTalk)
	}
	described, others := cat.ForPrompt(req)
	docs := make([]prompt.SkillDoc, len(described))
	for i, s := range described {
		docs[i] = prompt.SkillDoc{Name: s.Name, Summary: s.Summary, Synopsis: s.Synopsis()}
	}
	names := make([]string, len(others))
	for i, s := range others {
		names[i] = s.Name
	}
	return docs, names
}

// datedMemories reads the last DatedDays days of memories/YYYY-MM-DD.md, oldest first,
// by the user's calendar.
func (e *Executor) datedMemories(uid, tz string) []prompt.DatedMemory {
	loc, err := time.LoadLocation(tz)
	if err != nil {
		loc = time.UTC
	}
	today := e.opts.Clock().In(loc)
	var out []prompt.DatedMemory
	for i := e.opts.DatedDays - 1; i >= 0; i-- {
		day := today.AddDate(0, 0, -i).Format("2006-01-02")
		b, err := os.ReadFile(filepath.Join(UserMirror(e.opts.DataDir, uid), "memories", day+".md"))
		if err != nil {
			continue
		}
		if text := strings.TrimSpace(stripComments(string(b[:min(len(b), 32<<10)]))); text != "" {
			out = append(out, prompt.DatedMemory{Date: day, Text: text})
		}
	}
	return out
}

func toPromptMessage(m convlog.Message) prompt.Message {
	return prompt.Message{ID: m.ID, Author: m.ActorName, FromBot: m.FromBot, Text: m.Text, At: m.At, ReplyToID: m.ReplyToID}
}

func (e *Executor) loadUser(ctx context.Context, uid string) (prompt.User, error) {
	u := prompt.User{ID: uid, Timezone: "UTC"}
	err := e.db.Read.QueryRowContext(ctx, `SELECT display_name, email, timezone, language, is_admin FROM users WHERE id = ?`, uid).
		Scan(&u.DisplayName, &u.Email, &u.Timezone, &u.Language, &u.IsAdmin)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return prompt.User{}, fmt.Errorf("load user %s: %w", uid, err)
	}
	return u, nil
}

// progress turns brain events into task events and rate-limited Talk progress messages.
type progress struct {
	e    *Executor
	t    queue.Task
	log  *slog.Logger
	mu   sync.Mutex
	last time.Time
	sent int
}

func newProgress(e *Executor, t queue.Task, log *slog.Logger) *progress {
	// The run's start counts as the last message: quick answers get no progress at all.
	return &progress{e: e, t: t, log: log, last: e.opts.Clock()}
}

func (p *progress) event(ev brain.Event) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var kind, text string
	switch ev.Kind {
	case brain.ToolUse:
		kind, text = "tool", strings.TrimSpace(ev.Tool+": "+ev.ToolInput)
	case brain.Text:
		kind, text = "progress", ev.Text
	case brain.Retry:
		kind, text = "retry", ev.Text
	default:
		return
	}
	if err := p.e.queue.AddEvent(ctx, p.t.ID, kind, text); err != nil {
		p.log.Warn("recording a task event failed", "err", err)
	}
	if kind != "tool" || !p.t.Interactive || p.t.ConversationToken == "" {
		return
	}
	p.mu.Lock()
	now := p.e.opts.Clock()
	due := p.sent < p.e.opts.MaxProgressMessages && now.Sub(p.last) >= p.e.opts.ProgressInterval
	if due {
		p.sent++
		p.last = now
	}
	n := p.sent
	p.mu.Unlock()
	if !due {
		return
	}
	err := p.e.outbox.Enqueue(ctx, outbox.Message{
		Token: p.t.ConversationToken, TaskID: p.t.ID, Kind: "progress",
		Text: "⏳ " + excerpt(text, 300),
		Key:  fmt.Sprintf("task:%d:progress:%d:%d", p.t.ID, p.t.Attempts, n),
	})
	if err != nil {
		p.log.Warn("queueing a progress message failed", "err", err)
		return
	}
	p.e.opts.OnReply()
}

func excerpt(s string, n int) string {
	r := []rune(strings.TrimSpace(s))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n-1]) + "…"
}
