// Package heartbeat runs the checks of each user's HEARTBEAT.md: small probes that
// need no model (a file changed, a web address stopped answering, calendar events
// overlap, TASKS.md lines are due, the assistant itself is unwell, an administrator's
// command fails) and that tell the user in Talk only when something needs attention.
//
// One Runner loop looks every minute for checks that are due. Each check has its own
// interval; after an alert it stays silent for its cooldown (its state still updates),
// and it never alerts inside its quiet hours, which are read on the wall clock of the
// user's time zone, so windows across midnight and DST changes behave as written. The
// state of every check lives in the database; an alert is recorded and enqueued in the
// Talk outbox in one transaction, with a key derived from the run, so a crash never
// sends it twice.
//
// What each kind does:
//   - file-watch: Path (relative to the user's /Users/{uid}/ folder) is compared with
//     what the user was last told about (or what the first run saw). Any change —
//     edited, created, deleted — is an alert; once told, the new version is the
//     baseline. A change made during the cooldown or quiet hours is told afterwards.
//   - url-health: GET URL with a timeout; a 2xx or 3xx answer (redirects are not
//     followed) is healthy, anything else or no answer is an alert. Private,
//     loopback, link-local and metadata addresses, and this host's own, are refused
//     (status error) unless the host:port is listed in Options.AllowPrivate; the
//     checked address is the one dialled, so DNS rebinding cannot slip past.
//   - calendar-conflicts: overlapping timed events in the next 24 hours in the
//     calendars the user shared with the bot. Each conflict is told once.
//   - task-deadline: open ("[ ]") or running ("[~]") TASKS.md lines carrying
//     "due:YYYY-MM-DD" whose date is today or past in the user's time zone. Each
//     task and date is told once.
//   - self-check: the agent binary and the sandbox (through Options.Probe), the
//     database, and the failure rate of the user's last finished tasks.
//   - shell-command: an administrator's command, run in the user's sandbox through
//     Options.Shell; a non-zero exit or a timeout is an alert with the output's end.
//     It is refused at run time when the user is no longer an administrator.
//
// url-health, self-check and shell-command repeat a lasting fault once per cooldown
// and say when it is over; the other kinds tell each new finding once. A status of
// "error" means the check itself could not run (misconfiguration, a refused address):
// it is recorded and shown by !check and the settings page, not sent.
package heartbeat

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/calendar"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/safedial"
	"github.com/istota/istota/sidecar/internal/store"
)

// ConfigFile is the name of the heartbeat configuration in the user's config folder.
const ConfigFile = "HEARTBEAT.md"

// TasksFile is read by task-deadline checks.
const TasksFile = "TASKS.md"

// Statuses of a check run.
const (
	StatusOK    = "ok"
	StatusAlert = "alert"
	StatusError = "error"
)

// User is someone whose HEARTBEAT.md is run.
type User struct {
	ID       string
	Timezone string // IANA name; empty or unknown means UTC
	IsAdmin  bool
}

// ConfigSource lists the users and reads the files of their {bot}/config folder.
type ConfigSource interface {
	Users(ctx context.Context) ([]User, error)
	// ReadConfig returns the content of name (HEARTBEAT.md, TASKS.md) in the user's
	// config folder. A missing file is an error wrapping fs.ErrNotExist.
	ReadConfig(ctx context.Context, uid, name string) ([]byte, error)
}

// FileState describes a watched file or folder.
type FileState struct {
	Exists  bool
	IsDir   bool
	Version string    // changes whenever the content changes (an ETag or a hash)
	ModTime time.Time // for messages only
}

// Files looks at paths relative to a user's /Users/{uid}/ folder for file-watch.
type Files interface {
	Stat(ctx context.Context, uid, path string) (FileState, error)
}

// Calendars is the CalDAV client as calendar-conflicts uses it; *calendar.Client
// implements it.
type Calendars interface {
	Calendars(ctx context.Context) ([]calendar.Calendar, error)
	Events(ctx context.Context, cal calendar.Calendar, from, to time.Time) ([]calendar.Event, error)
}

// SelfProbe checks the parts of the host that every task needs. Each method returns a
// short description of what works, or an error saying what does not.
type SelfProbe interface {
	AgentBinary(ctx context.Context) (string, error)
	Sandbox(ctx context.Context) (string, error)
}

// ShellResult is the outcome of a shell-command check that ran.
type ShellResult struct {
	ExitCode int
	Output   []byte // stdout and stderr, possibly cut to their end
}

// Shell runs an administrator's command in that user's sandbox. It returns an error
// when the command could not be started or was stopped by ctx; a command that ran and
// failed is a ShellResult with a non-zero ExitCode.
type Shell interface {
	Run(ctx context.Context, uid, command string) (ShellResult, error)
}

// Resolver resolves host names for url-health; *net.Resolver implements it.
type Resolver = safedial.Resolver

// Options configure a Runner. Zero values take the documented defaults; a nil
// dependency makes the kinds that need it report an error.
type Options struct {
	Clock  func() time.Time // default time.Now
	Logger *slog.Logger     // default: discard
	// Tick is how often the loop looks for due checks; default one minute.
	Tick time.Duration
	// Parallel bounds the checks run at the same time; default 4.
	Parallel int
	// CheckTimeout bounds one check run; default one minute.
	CheckTimeout time.Duration
	// URLTimeout bounds one url-health request; default 10 s.
	URLTimeout time.Duration
	// AllowPrivate lists host:port entries (config network.allow_private) that
	// url-health may reach on private, loopback or link-local addresses.
	AllowPrivate []string
	// Resolver resolves url-health host names; default net.DefaultResolver.
	Resolver Resolver
	// HostAddrs lists this host's own addresses, refused like loopback; default: the
	// addresses of the network interfaces.
	HostAddrs func() ([]netip.Addr, error)
	// FailureWindow is how many of the user's last finished tasks self-check looks
	// at (default 20); FailureThreshold the failed share above which it alerts
	// (default 0.5); MinFailureSample the fewest finished tasks that give a rate
	// worth telling (default 5).
	FailureWindow    int
	FailureThreshold float64
	MinFailureSample int

	Files     Files
	Calendars Calendars
	// CalendarChoice narrows a user's calendars to those they allowed on the settings
	// page; nil checks every calendar they shared.
	CalendarChoice calendar.Choice
	Probe          SelfProbe
	Shell          Shell
	// OnNotice is a wake-up hint for the outbox after a message was enqueued.
	OnNotice func()
}

// Runner runs the heartbeat checks of every user.
type Runner struct {
	db   *store.DB
	src  ConfigSource
	ob   *outbox.Outbox
	opts Options
	log  *slog.Logger
	url  *urlChecker
	wake chan struct{}

	// runMu serialises cycles: the loop and RunOnce from tests or the CLI never
	// overlap, so one check never runs twice at once.
	runMu sync.Mutex
}

// New returns a Runner over db that reads users and files from src and tells users
// through ob.
func New(db *store.DB, src ConfigSource, ob *outbox.Outbox, opts Options) *Runner {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Tick <= 0 {
		opts.Tick = time.Minute
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	if opts.CheckTimeout <= 0 {
		opts.CheckTimeout = time.Minute
	}
	if opts.URLTimeout <= 0 {
		opts.URLTimeout = 10 * time.Second
	}
	if opts.FailureWindow <= 0 {
		opts.FailureWindow = 20
	}
	if opts.FailureThreshold <= 0 {
		opts.FailureThreshold = 0.5
	}
	if opts.MinFailureSample <= 0 {
		opts.MinFailureSample = 5
	}
	if opts.OnNotice == nil {
		opts.OnNotice = func() {}
	}
	r := &Runner{db: db, src: src, ob: ob, opts: opts, log: opts.Logger, wake: make(chan struct{}, 1)}
	r.url = newURLChecker(opts, r.log)
	return r
}

// Wake asks the loop to look for due checks now (a !check run request). It never blocks.
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run looks for due checks every Tick, and when woken, until ctx ends. It returns
// after the cycle in progress has finished.
func (r *Runner) Run(ctx context.Context) {
	t := time.NewTicker(r.opts.Tick)
	defer t.Stop()
	for {
		if err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("heartbeat cycle failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.wake:
		}
	}
}
