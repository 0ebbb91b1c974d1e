// Package briefing runs the named briefings of each user's BRIEFINGS.md: at a
// briefing's time (its cron in the user's time zone) it fetches the parts the user
// asked for — today's calendar, open TASKS.md lines, recent mail, changed notes, due
// reminders, news headlines, market quotes — and queues one task whose prompt carries that data as
// fenced, untrusted blocks. The executor keeps personal memory out of briefing tasks;
// the answer goes to Talk, e-mail or both through the task's delivery.
//
// The file is the source of truth for what a briefing is, merged over the
// administrator's defaults; this package owns when it runs next and how its last run
// ended. A broken file keeps the last good briefings running and the problems are
// kept (and told to the user once per version of the file). Each run has a dedupe key
// ("briefing:<uid>:<name>:<minute>"), so a repeated tick or a crash between queueing
// and recording never runs a briefing twice, and runs missed while the sidecar was
// down collapse into one.
//
// Reminders are read from the user's key-value namespace "reminders": each value is
// either JSON {"text": "...", "due": "2026-03-29" | "2026-03-29T09:00" | RFC 3339} or
// a line "2026-03-29 [09:00] text". A reminder is listed on and after its due day.
package briefing

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"github.com/istota/istota/sidecar/internal/calendar"
	"github.com/istota/istota/sidecar/internal/kv"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

// FileName is the briefings file in the user's config folder.
const FileName = "BRIEFINGS.md"

// TasksFileName is the file the todos component reads from the config folder.
const TasksFileName = "TASKS.md"

// RemindersNamespace is the key-value namespace the reminders component reads.
const RemindersNamespace = "reminders"

// User is what the runner needs to know about a user.
type User struct {
	ID       string
	Timezone string // IANA zone; an unknown zone runs the user's briefings in UTC
	IsAdmin  bool
	Email    string // the Nextcloud profile address; "" when none
}

// ConfigSource gives the users and the files of their config folders.
type ConfigSource interface {
	Users(ctx context.Context) ([]User, error)
	// ReadConfig returns a file of the user's config folder ({bot}/config/name); an
	// error matching fs.ErrNotExist means the file does not exist.
	ReadConfig(ctx context.Context, uid, name string) ([]byte, error)
}

// Calendars is what the calendar component reads; *calendar.Client implements it.
// Only calendars the user shared with the bot account are read (calendar.ForUser).
type Calendars interface {
	Calendars(ctx context.Context) ([]calendar.Calendar, error)
	Events(ctx context.Context, cal calendar.Calendar, from, to time.Time) ([]calendar.Event, error)
}

// KV is what the reminders component reads; *kv.Store implements it.
type KV interface {
	List(ctx context.Context, userID, namespace string) ([]kv.Entry, error)
}

// Mail is one message: one the bot received from one of the user's addresses, or one
// in the user's own mailbox.
type Mail struct {
	From    string
	Subject string
	At      time.Time
	Unseen  bool // in the user's own mailbox: not read yet
}

// MailboxDigest is what arrived in a user's own mailbox.
type MailboxDigest struct {
	// Connected is false for a user who has no mailbox connected; the e-mail
	// component then reads MailLog.
	Connected bool
	Account   string // the account, for people: "alice@example.org at imap.example.org:993"
	Mails     []Mail // newest first
	Total     int    // how many arrived, also those not in Mails
}

// UserMailbox reads the users' own mailboxes (package mailbox).
type UserMailbox interface {
	// Recent returns what arrived in uid's inbox since a time, at most limit messages.
	// When the mailbox is connected but cannot be read, the digest says Connected and
	// the error says why.
	Recent(ctx context.Context, uid string, since time.Time, limit int) (MailboxDigest, error)
}

// MailLog lists the mail the bot received from a user's addresses since a time,
// newest first. The e-mail component reads it.
type MailLog interface {
	Received(ctx context.Context, uid string, since time.Time) ([]Mail, error)
}

// Notifier tells a user something about their BRIEFINGS.md inside tx (so it is told
// exactly once); key is a stable identity for the message.
type Notifier func(ctx context.Context, tx *sql.Tx, uid, key, text string) error

// Defaults are the administrator's defaults ([briefings] in the config), merged under
// every user's settings: a briefing without components gets Components, and the
// news component reads Feeds besides the briefing's own.
type Defaults struct {
	Components      []userconfig.Component
	Feeds           []string
	MaxItemsPerFeed int // default 5
}

// Options configure a Runner. Zero values take the documented defaults; a nil
// component source makes that component report itself unavailable.
type Options struct {
	BotName  string // names the e-mail subject; default "Istota"
	Defaults Defaults
	// UserRoot is the local mirror of a user's /Users/{uid}/; the notes component
	// reads its notes/ folder.
	UserRoot  func(uid string) string
	Calendars Calendars
	// CalendarChoice narrows a user's calendars to those they allowed on the settings
	// page; nil reads every calendar they shared.
	CalendarChoice calendar.Choice
	KV             KV
	Mail           MailLog
	// Mailbox reads the user's own mailbox for the e-mail component when they connected
	// one; nil, or a user without one, reads Mail.
	Mailbox UserMailbox
	// News fetches feeds; default NewFetcher(FetcherOptions{}), which refuses every
	// private address.
	News *Fetcher
	// Markets configures the markets component; its zero value makes it unavailable.
	Markets Markets
	// ComponentTimeout bounds the pre-fetch of one component; default 30 s.
	ComponentTimeout time.Duration
	// MaxAttempts of a briefing task; default 2 (one retry).
	MaxAttempts int
	// BeforeRun, if set, runs before a briefing's pre-fetch, e.g. to pull the user's
	// files from Nextcloud; an error is logged and the local copies are used.
	BeforeRun func(ctx context.Context, uid string) error
	// Notify, if set, tells users about problems in their BRIEFINGS.md.
	Notify  Notifier
	OnTask  func() // wake-up hint for the worker pool
	OnReply func() // wake-up hint for the outbox (after Notify)
	Clock   func() time.Time
	Logger  *slog.Logger
}

// Runner keeps the briefings in the database and queues their runs. Run owns its
// loop; the other methods are safe for concurrent use.
type Runner struct {
	db   *store.DB
	q    *queue.Queue
	src  ConfigSource
	opts Options
	wake chan struct{}
}

// New returns a Runner.
func New(db *store.DB, q *queue.Queue, src ConfigSource, opts Options) *Runner {
	if opts.BotName == "" {
		opts.BotName = "Istota"
	}
	if opts.Defaults.MaxItemsPerFeed <= 0 {
		opts.Defaults.MaxItemsPerFeed = 5
	}
	if opts.News == nil {
		opts.News = NewFetcher(FetcherOptions{})
	}
	if opts.ComponentTimeout <= 0 {
		opts.ComponentTimeout = 30 * time.Second
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 2
	}
	if opts.OnTask == nil {
		opts.OnTask = func() {}
	}
	if opts.OnReply == nil {
		opts.OnReply = func() {}
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Runner{db: db, q: q, src: src, opts: opts, wake: make(chan struct{}, 1)}
}
