// Package intake turns Talk events forwarded by the Nextcloud app into conversation-log
// rows, answered !commands and queued tasks. It is idempotent by conversation token and
// message id: a redelivered event changes nothing.
package intake

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/talk"
	"github.com/istota/istota/sidecar/internal/usage"
	"github.com/istota/istota/sidecar/internal/users"
)

// Payload is the body of POST /v1/talk/events (docs/app-sidecar-protocol.md).
type Payload struct {
	BotURL       string          `json:"bot_url"`
	Event        json.RawMessage `json:"event"`
	Sender       *Sender         `json:"sender"`
	Conversation Conversation    `json:"conversation"`
	ReceivedAt   string          `json:"received_at"`
	// Attachments are files shared in the conversation that the app copied into the
	// bot's storage (paths relative to the user's /Users/{uid}/ folder).
	Attachments      []Attachment      `json:"attachments"`
	AttachmentErrors []AttachmentError `json:"attachment_errors"`
}

// Attachment is one file the app copied into the user's inbox/.
type Attachment struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	MimeType string `json:"mimetype"`
	Size     int64  `json:"size"`
}

// AttachmentError is a shared file the app could not copy.
type AttachmentError struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Sender is the Nextcloud user behind a message, as the app knows them.
type Sender struct {
	UID         string `json:"uid"`
	DisplayName string `json:"display_name"`
	Email       string `json:"email"`
	Timezone    string `json:"timezone"`
	Language    string `json:"language"`
	IsAdmin     bool   `json:"is_admin"`
	// Allowed is the app's old access flag, used only when Options.Access is nil:
	// the sidecar decides from its access settings and Groups.
	Allowed bool     `json:"allowed"`
	Groups  []string `json:"groups"`
}

// Conversation is what the app could learn about the room.
type Conversation struct {
	Token     string `json:"token"`
	Name      string `json:"name"`
	Type      *int   `json:"type"`
	UserCount *int   `json:"user_count"`
	Private   bool   `json:"private"`
}

// Status values of an Answer.
const (
	StatusAccepted  = "accepted"
	StatusLogged    = "logged"
	StatusDuplicate = "duplicate"
	StatusIgnored   = "ignored"
)

// Answer is returned to the app; Addressed tells it whether to add the 👀 reaction.
type Answer struct {
	Status    string `json:"status"`
	Addressed bool   `json:"addressed"`
	TaskID    int64  `json:"task_id,omitempty"`
	Command   string `json:"command,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// InvalidError is bad input from the app: nothing was stored.
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string { return "invalid event: " + e.Msg }

// MemoryView is what !memory shows: the user's own memory and the conversation's.
type MemoryView interface {
	UserMD(uid string) (string, error)
	ChannelMD(token string) (string, error)
	Facts(ctx context.Context, uid string) ([]string, error)
	Search(ctx context.Context, uid, query string) ([]string, error)
}

// UsageView sums a user's model usage since a time.
type UsageView interface {
	Since(ctx context.Context, uid string, since time.Time) (usage.Totals, error)
}

// Access decides, from the sidecar's access settings, whether a user may use the bot
// and whether they are an Istota admin; *settings.Store implements it.
type Access interface {
	Decide(uid string, groups []string, nextcloudAdmin bool) (allowed, admin bool)
}

// Budget says why a user may not start agent work now ("" when they may);
// *settings.Budget implements it.
type Budget interface {
	Refusal(ctx context.Context, uid, timezone string) (string, error)
}

// decide applies Options.Access to a sender.
func (in *Intake) decide(s Sender) (allowed, admin bool) {
	if in.opts.Access == nil {
		return s.Allowed, s.IsAdmin
	}
	return in.opts.Access.Decide(s.UID, s.Groups, s.IsAdmin)
}

// Approvals is the approvals service as intake uses it (*approval.Service).
type Approvals interface {
	MatchTx(ctx context.Context, tx *sql.Tx, a approval.TalkAnswer) (approval.Match, error)
	Decide(ctx context.Context, id int64, uid string, approve bool, via string) (approval.Request, error)
	CancelTasks(ctx context.Context, uid string, taskIDs []int64) error
}

// Canceller stops a running task's process group (the worker pool).
type Canceller interface {
	Cancel(taskID int64) bool
}

// Options configures an Intake.
type Options struct {
	BotName   string
	BotURL    string
	Clock     func() time.Time
	Logger    *slog.Logger
	Canceller Canceller
	// Memory answers !memory; nil answers that memory is not available.
	Memory MemoryView
	// Usage answers !usage; nil answers that usage is not recorded.
	Usage UsageView
	// Cron answers !cron; nil answers that scheduled jobs are not available.
	Cron Cron
	// Checks answers !check; nil answers that heartbeat checks are not available.
	Checks Checks
	// Access decides who may use the bot and who is an Istota admin (the admin
	// panel's access settings); nil trusts the payload's allowed and is_admin flags.
	Access Access
	// Budget refuses new agent tasks of a user over the daily token budget; nil has
	// no budget.
	Budget Budget
	// Approvals reads yes/no answers (replies and 👍/👎 reactions) to the questions the
	// bot asked, and cancels the questions of tasks !stop stops; nil reads none.
	Approvals Approvals
	// OnTask and OnReply are wake-up hints for the worker pool and the outbox.
	OnTask func()
	// Prefetch, if set, is told whose files a new task will need (the sender's and the
	// conversation's), so they can be fetched while the task waits.
	Prefetch func(uid, token string)
	OnReply  func()
}

// Intake handles forwarded Talk events.
type Intake struct {
	db      *store.DB
	queue   *queue.Queue
	outbox  *outbox.Outbox
	opts    Options
	mention *regexp.Regexp
}

// New returns an Intake.
func New(db *store.DB, q *queue.Queue, ob *outbox.Outbox, opts Options) *Intake {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.BotURL == "" {
		opts.BotURL = "nextcloudapp://istota"
	}
	for _, f := range []*func(){&opts.OnTask, &opts.OnReply} {
		if *f == nil {
			*f = func() {}
		}
	}
	// "@Istota" as a word, case-insensitive; Talk delivers it as plain text (reference §12).
	mention := regexp.MustCompile(`(?i)(^|[^\pL\pN_])@` + regexp.QuoteMeta(opts.BotName) + `($|[^\pL\pN_])`)
	return &Intake{db: db, queue: q, outbox: ob, opts: opts, mention: mention}
}

var tokenPattern = regexp.MustCompile(`^[a-z0-9]{4,30}$`)

// Handle processes one event. An error of type *InvalidError means the input was bad and
// nothing was stored; any other error is internal.
func (in *Intake) Handle(ctx context.Context, p Payload) (Answer, error) {
	if p.BotURL != "" && !strings.HasPrefix(p.BotURL, in.opts.BotURL) {
		return Answer{}, &InvalidError{Msg: "bot_url is not this bot's"}
	}
	if len(p.Event) == 0 || string(p.Event) == "null" {
		return Answer{}, &InvalidError{Msg: "event is missing"}
	}
	ev, err := talk.ParseEvent(p.Event)
	if err != nil {
		return Answer{}, &InvalidError{Msg: err.Error()}
	}
	if !tokenPattern.MatchString(ev.Token) {
		return Answer{}, &InvalidError{Msg: "conversation token is not a Talk token"}
	}
	if p.Conversation.Token != "" && p.Conversation.Token != ev.Token {
		return Answer{}, &InvalidError{Msg: "conversation.token does not match the event's target"}
	}
	if p.Sender != nil && p.Sender.UID == "" {
		return Answer{}, &InvalidError{Msg: "sender.uid is empty"}
	}
	for _, a := range p.Attachments {
		if !validAttachmentPath(a.Path) {
			return Answer{}, &InvalidError{Msg: fmt.Sprintf("attachment path %q is not inside inbox/", a.Path)}
		}
	}
	switch {
	case ev.Type == "Create" || ev.Type == "Activity" && isFileShare(ev):
		if ev.MessageID <= 0 {
			return Answer{}, &InvalidError{Msg: "object.id is not a message id"}
		}
		return in.handleMessage(ctx, p, ev)
	case ev.Type == talk.TypeLike:
		return in.handleReaction(ctx, p, ev)
	case ev.Type == "Join" || ev.Type == "Leave":
		err := in.tx(ctx, func(tx *sql.Tx) error { return in.upsertConversation(ctx, tx, ev, p.Conversation) })
		return Answer{Status: StatusIgnored, Reason: strings.ToLower(ev.Type)}, err
	default:
		// Activity (system messages), Like and Undo carry nothing to answer yet.
		return Answer{Status: StatusIgnored, Reason: "event type " + ev.Type + " is not handled"}, nil
	}
}

func (in *Intake) handleMessage(ctx context.Context, p Payload, ev talk.Event) (Answer, error) {
	var ans Answer
	var woke struct{ task, reply bool }
	var cancelled []queue.Task
	var answer approval.Match
	err := in.tx(ctx, func(tx *sql.Tx) error {
		ans, woke.task, woke.reply, cancelled, answer = Answer{}, false, false, nil, approval.Match{}
		if err := in.upsertConversation(ctx, tx, ev, p.Conversation); err != nil {
			return err
		}
		if p.Sender != nil {
			if err := in.upsertUser(ctx, tx, *p.Sender); err != nil {
				return err
			}
		}
		created, err := convlog.Record(ctx, tx, convlog.Message{
			Token: ev.Token, ID: ev.MessageID, ActorType: ev.ActorType, ActorID: ev.ActorID,
			ActorName: ev.ActorName, Text: ev.Message, ReplyToID: parentID(ev), At: in.opts.Clock(),
		})
		if err != nil {
			return err
		}
		mode, err := respondMode(ctx, tx, ev.Token)
		if err != nil {
			return err
		}
		addressed := in.addressed(ev.Message, p.Conversation.Private, mode)
		if ev.Type == "Activity" && !p.Conversation.Private && !in.mention.MatchString(ev.Message) {
			// A file dropped into a group conversation is not a request unless its
			// caption names the bot, whatever the respond mode.
			addressed = false
		}
		if !created {
			ans = Answer{Status: StatusDuplicate, Addressed: addressed}
			return nil
		}
		if in.opts.Approvals != nil && p.Sender != nil && ev.Type == talk.TypeCreate {
			// A yes or no to a question the bot asked is no request of its own,
			// addressed or not (a reply in a group need not name the bot).
			quoted := ""
			if ev.InReplyTo != nil && ev.InReplyTo.ActorType == talk.ActorBots {
				quoted = ev.InReplyTo.Message
			}
			m, err := in.opts.Approvals.MatchTx(ctx, tx, approval.TalkAnswer{Token: ev.Token, UserID: p.Sender.UID, Text: ev.Message, Quoted: quoted})
			if err != nil {
				return err
			}
			if m.Handled {
				answer = m
				ans = Answer{Status: StatusAccepted, Reason: "answer to a question"}
				if m.Notice != "" {
					woke.reply = true
					return in.notice(ctx, tx, ev, "approval", m.Notice)
				}
				return nil
			}
		}
		if !addressed {
			ans = Answer{Status: StatusLogged}
			return nil
		}
		if allowed, _ := in.decide(derefSender(p.Sender)); p.Sender == nil || !allowed {
			ans = Answer{Status: StatusLogged, Reason: "sender may not use the bot"}
			if p.Sender != nil {
				woke.reply = true
				return in.notice(ctx, tx, ev, "not-allowed", "Sorry, your account is not allowed to use "+in.opts.BotName+". Ask your Nextcloud admin to add you.")
			}
			return nil
		}
		if cmd, args, ok := parseCommand(ev.Message); ok && ev.Type == "Create" {
			ans = Answer{Status: StatusAccepted, Addressed: true, Command: cmd}
			reply, c, err := in.runCommand(ctx, tx, cmd, args, ev, *p.Sender, p.Conversation)
			if err != nil {
				return err
			}
			cancelled = c
			woke.reply = true
			return in.notice(ctx, tx, ev, "cmd", reply)
		}
		if in.opts.Budget != nil {
			refusal, err := in.opts.Budget.Refusal(ctx, p.Sender.UID, p.Sender.Timezone)
			if err != nil {
				return err
			}
			if refusal != "" {
				ans = Answer{Status: StatusAccepted, Addressed: true, Reason: "over the daily token budget"}
				woke.reply = true
				return in.notice(ctx, tx, ev, "budget", refusal)
			}
		}
		id, _, err := in.queue.EnqueueTx(ctx, tx, queue.NewTask{
			UserID:            p.Sender.UID,
			Source:            "talk",
			Interactive:       true,
			Prompt:            withAttachments(ev.Message, p.Attachments, p.AttachmentErrors),
			Attachments:       taskAttachments(p.Attachments),
			ConversationToken: ev.Token,
			ReplyToMessageID:  ev.MessageID,
			DedupeKey:         fmt.Sprintf("talk:%s:%d", ev.Token, ev.MessageID),
		})
		if err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		woke.task = true
		ans = Answer{Status: StatusAccepted, Addressed: true, TaskID: id}
		return nil
	})
	if err != nil {
		return Answer{}, err
	}
	if ans.Command == "cron" && in.opts.Cron != nil {
		in.opts.Cron.Wake() // a run asked for with !cron run starts now, not next minute
	}
	in.decideAnswer(ctx, ev, p.Sender, answer)
	var stopped []int64
	for _, t := range cancelled {
		stopped = append(stopped, t.ID)
		if in.opts.Canceller != nil && in.opts.Canceller.Cancel(t.ID) {
			in.opts.Logger.Info("stopped running task", "task_id", t.ID, "user_id", t.UserID)
		}
	}
	if len(stopped) > 0 && in.opts.Approvals != nil {
		if err := in.opts.Approvals.CancelTasks(ctx, p.Sender.UID, stopped); err != nil {
			in.opts.Logger.Error("cancelling the questions of stopped tasks failed", "user_id", p.Sender.UID, "err", err)
		}
	}
	if woke.task {
		if in.opts.Prefetch != nil {
			in.opts.Prefetch(p.Sender.UID, ev.Token)
		}
		in.opts.OnTask()
	}
	if woke.reply {
		in.opts.OnReply()
	}
	return ans, nil
}

// handleReaction reads a 👍 or 👎 on a question the bot asked as its answer. Other
// reactions change nothing.
func (in *Intake) handleReaction(ctx context.Context, p Payload, ev talk.Event) (Answer, error) {
	if in.opts.Approvals == nil || p.Sender == nil {
		return Answer{Status: StatusIgnored, Reason: "reaction"}, nil
	}
	var m approval.Match
	err := in.tx(ctx, func(tx *sql.Tx) error {
		var err error
		m, err = in.opts.Approvals.MatchTx(ctx, tx, approval.TalkAnswer{Token: ev.Token, UserID: p.Sender.UID, Reaction: ev.Reaction, Quoted: ev.Message})
		if err != nil || m.Notice == "" {
			return err
		}
		return in.notice(ctx, tx, ev, "approval-"+p.Sender.UID, m.Notice)
	})
	if err != nil {
		return Answer{}, err
	}
	if !m.Handled {
		return Answer{Status: StatusIgnored, Reason: "reaction"}, nil
	}
	if m.Notice != "" {
		in.opts.OnReply()
	}
	in.decideAnswer(ctx, ev, p.Sender, m)
	return Answer{Status: StatusAccepted, Reason: "answer to a question"}, nil
}

// decideAnswer gives the answer m found, after the event's transaction committed; a
// question that ended meanwhile is told to the sender.
func (in *Intake) decideAnswer(ctx context.Context, ev talk.Event, s *Sender, m approval.Match) {
	if m.RequestID == 0 || s == nil {
		return
	}
	r, err := in.opts.Approvals.Decide(ctx, m.RequestID, s.UID, m.Approve, m.Via)
	switch {
	case errors.Is(err, approval.ErrDecided):
		err = in.outbox.Enqueue(ctx, outbox.Message{Token: ev.Token, ReplyTo: ev.MessageID, Kind: "notice",
			Text: fmt.Sprintf("Approval #%d is already %s.", r.ID, r.Status), Key: fmt.Sprintf("approval:%d:late:%d", r.ID, ev.MessageID)})
		in.opts.OnReply()
	case err == nil:
		in.opts.Logger.Info("question answered in Talk", "approval_id", r.ID, "user_id", s.UID, "status", r.Status, "via", m.Via)
	}
	if err != nil {
		in.opts.Logger.Error("answering a question failed", "approval_id", m.RequestID, "user_id", s.UID, "err", err)
	}
}

// addressed applies the rules of ARCHITECTURE.md §4.2: an explicit respond mode wins;
// otherwise a private conversation gets an answer to everything and any other only to
// messages that name the bot or start with '!'.
func (in *Intake) addressed(text string, private bool, mode string) bool {
	named := strings.HasPrefix(strings.TrimSpace(text), "!") || in.mention.MatchString(text)
	switch mode {
	case "all":
		return true
	case "mentions":
		return named
	}
	return private || named
}

func parentID(ev talk.Event) int64 {
	if ev.InReplyTo != nil {
		return ev.InReplyTo.MessageID
	}
	return 0
}

func respondMode(ctx context.Context, tx *sql.Tx, token string) (string, error) {
	var mode string
	err := tx.QueryRowContext(ctx, `SELECT respond_mode FROM conversations WHERE token = ?`, token).Scan(&mode)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read respond mode: %w", err)
	}
	return mode, nil
}

func (in *Intake) upsertConversation(ctx context.Context, tx *sql.Tx, ev talk.Event, c Conversation) error {
	typ, count := 0, 0
	if c.Type != nil {
		typ = *c.Type
	}
	if c.UserCount != nil {
		count = *c.UserCount
	}
	name := c.Name
	if name == "" {
		name = ev.RoomName
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO conversations (token, name, type, user_count, private, updated_at)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (token) DO UPDATE SET name = excluded.name, type = excluded.type,
			user_count = excluded.user_count, private = excluded.private, updated_at = excluded.updated_at`,
		ev.Token, name, typ, count, c.Private, store.FormatTime(in.opts.Clock()))
	if err != nil {
		return fmt.Errorf("record conversation: %w", err)
	}
	return nil
}

func (in *Intake) upsertUser(ctx context.Context, tx *sql.Tx, s Sender) error {
	_, admin := in.decide(s)
	return users.Upsert(ctx, tx, users.Profile{UID: s.UID, DisplayName: s.DisplayName, Email: s.Email, Timezone: s.Timezone,
		Language: s.Language, Groups: s.Groups, NextcloudAdmin: s.IsAdmin, IstotaAdmin: admin}, in.opts.Clock())
}

func derefSender(s *Sender) Sender {
	if s == nil {
		return Sender{}
	}
	return *s
}

// notice queues an immediate answer to a message, keyed so a redelivery cannot send it twice.
func (in *Intake) notice(ctx context.Context, tx *sql.Tx, ev talk.Event, kind, text string) error {
	return in.outbox.EnqueueTx(ctx, tx, outbox.Message{
		Token:   ev.Token,
		Text:    text,
		ReplyTo: ev.MessageID,
		Kind:    "notice",
		Key:     fmt.Sprintf("talk:%s:%d:%s", ev.Token, ev.MessageID, kind),
	})
}

func (in *Intake) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	return in.db.InTx(ctx, fn)
}

// isFileShare reports whether an Activity is a file shared into the conversation
// (reference §4.5: a system message carrying parameters.file).
func isFileShare(ev talk.Event) bool {
	_, ok := ev.Parameters["file"]
	return ok && (ev.ObjectName == "" || ev.ObjectName == "message" || ev.ObjectName == "file_shared")
}

func validAttachmentPath(p string) bool {
	if !strings.HasPrefix(p, "inbox/") || strings.Contains(p, "\x00") {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
	}
	return true
}

// taskAttachments are the files the task keeps (voice messages are transcribed before
// it runs).
func taskAttachments(atts []Attachment) []queue.Attachment {
	out := make([]queue.Attachment, 0, len(atts))
	for _, a := range atts {
		out = append(out, queue.Attachment{Path: a.Path, MimeType: a.MimeType, Size: a.Size})
	}
	return out
}

// withAttachments tells the agent where the shared files are in its workspace.
func withAttachments(text string, atts []Attachment, errs []AttachmentError) string {
	if len(atts) == 0 && len(errs) == 0 {
		return text
	}
	var b strings.Builder
	b.WriteString(strings.TrimSpace(text))
	if len(atts) > 0 {
		b.WriteString("\n\nShared file(s), saved in your working directory:")
		for _, a := range atts {
			fmt.Fprintf(&b, "\n- %s (%s, %d bytes)", a.Path, a.MimeType, a.Size)
		}
	}
	for _, e := range errs {
		fmt.Fprintf(&b, "\n- %s could not be copied: %s", e.Name, e.Reason)
	}
	return strings.TrimSpace(b.String())
}
