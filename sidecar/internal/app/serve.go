package app

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/appcall"
	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/brain"
	"github.com/istota/istota/sidecar/internal/brain/claude"
	"github.com/istota/istota/sidecar/internal/brain/command"
	"github.com/istota/istota/sidecar/internal/brain/openai"
	"github.com/istota/istota/sidecar/internal/briefing"
	"github.com/istota/istota/sidecar/internal/calendar"
	"github.com/istota/istota/sidecar/internal/config"
	"github.com/istota/istota/sidecar/internal/contacts"
	"github.com/istota/istota/sidecar/internal/credproxy"
	"github.com/istota/istota/sidecar/internal/deferred"
	"github.com/istota/istota/sidecar/internal/executor"
	"github.com/istota/istota/sidecar/internal/heartbeat"
	"github.com/istota/istota/sidecar/internal/httpapi"
	"github.com/istota/istota/sidecar/internal/intake"
	"github.com/istota/istota/sidecar/internal/invoice"
	"github.com/istota/istota/sidecar/internal/jobs"
	"github.com/istota/istota/sidecar/internal/knowledge"
	"github.com/istota/istota/sidecar/internal/kv"
	"github.com/istota/istota/sidecar/internal/leader"
	"github.com/istota/istota/sidecar/internal/mailbox"
	"github.com/istota/istota/sidecar/internal/memory"
	"github.com/istota/istota/sidecar/internal/netproxy"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/render"
	"github.com/istota/istota/sidecar/internal/schedule"
	"github.com/istota/istota/sidecar/internal/signing"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/sleep"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/talk"
	"github.com/istota/istota/sidecar/internal/transcribe"
	"github.com/istota/istota/sidecar/internal/usage"
	"github.com/istota/istota/sidecar/internal/webdav"
	"github.com/istota/istota/sidecar/internal/webfetch"
	"github.com/istota/istota/sidecar/internal/worker"
	"github.com/istota/istota/sidecar/internal/workspace"
)

// sidecar is every long-lived component of `istota serve`, in start order.
type sidecar struct {
	files *workspace.Workspace // nil without a bot account
	graph *knowledge.Graph
	mem   *memory.Memory
	// approvals asks the user before risky actions (skills, the agent's own tools).
	approvals *approval.Service
	// transcriber turns voice messages into text; nil when none is set up.
	transcriber *transcribe.Client
	// botDAV is the bot account's WebDAV and OCS client; nil without a bot account.
	botDAV *webdav.Client
	cfg    config.Config
	log    *slog.Logger
	lock   *processLock
	db     *store.DB
	// elector decides whether this process runs the once-only loops (always, on SQLite).
	elector  *leader.Elector
	queue    *queue.Queue
	outbox   *outbox.Outbox
	pool     *worker.Pool
	exec     *executor.Executor
	intake   *intake.Intake
	api      *httpapi.API
	owner    string
	launcher *sandboxLaunchers
	mail     *mailChannel // nil unless [mail] is enabled
	sched    *schedule.Scheduler
	// calendars reads the calendars users shared with the bot; nil without a bot account.
	calendars *calendar.Client
	jobs      *jobs.Runner      // CRON.md jobs and TASKS.md lines
	checks    *heartbeat.Runner // HEARTBEAT.md checks
	brief     *briefing.Runner  // BRIEFINGS.md briefings
	invoices  *invoice.Runner   // monthly invoicing, reminders, overdue notices
	pages     pages             // settings pages: admin settings, their API, live progress
	bot       botHTTP           // the connections and session the bot account reaches Nextcloud with
	app       *appcall.Client   // the sidecar's calls to the app; nil when a CLI command has no secret
	web       *webfetch.Client  // fetches for users under the network allowlist (browse, markets)
	mailbox   *mailbox.Service  // the users' own mailboxes (skill, briefings, settings pages)
	renderer  *render.Renderer  // renders pages with their scripts for browse; nil unless [browse] render
}

// botHTTP is what every client that logs in to Nextcloud as the bot account shares: one
// pool of kept-alive connections and one cookie jar, so the session Nextcloud opens on
// the first request serves the next ones (WebDAV, CalDAV, shares) without the password
// being checked again each time.
type botHTTP struct {
	transport *http.Transport
	jar       http.CookieJar
}

func newBotHTTP(cfg config.Config) botHTTP {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = cfg.Nextcloud.RequestTimeout.Duration
	// Every worker may talk to Nextcloud at once, plus the outbox and the runners.
	t.MaxIdleConnsPerHost = cfg.Workers.Max*2 + 4
	jar, _ := cookiejar.New(nil) // never fails without options
	return botHTTP{transport: t, jar: jar}
}

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	load := commonFlags(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	cfg, err := load()
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	s, err := openSidecar(ctx, cfg, log, toServe)
	if err != nil {
		return err
	}
	defer s.close()
	return s.serve(ctx)
}

// purpose says what a command opens the sidecar for, and so what it must find at start.
type purpose int

const (
	// toServe is `istota serve`: a missing shared secret is generated, and the agent and
	// the sandbox must work.
	toServe purpose = iota
	// toRun is a command that runs agents in this process (`istota task`, `sleep`).
	toRun
	// toPrompt only builds prompts (`istota task --dry-run`): it runs no agent, so it
	// needs neither the agent binary nor a working sandbox.
	toPrompt
)

// openSidecar builds every component for the given purpose.
func openSidecar(ctx context.Context, cfg config.Config, log *slog.Logger, why purpose) (*sidecar, error) {
	s := &sidecar{log: log}
	ok := false
	defer func() {
		if !ok {
			s.close()
		}
	}()
	lock, err := acquireLock(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	s.lock = lock
	// The configuration is completed first (runconfig.go); s.cfg is set once, below, and
	// every component gets the finished value.
	if cfg, err = resolvePaths(cfg); err != nil {
		return nil, err
	}
	if cfg, err = withSharedSecret(cfg, why == toServe, log); err != nil {
		return nil, err
	}
	if why == toServe && cfg.Talk.BotSecret == "" {
		log.Warn("talk.bot_secret is not set: answers wait in the outbox until it is (run `occ istota:setup`)")
	}
	s.db, err = openDatabase(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// With a shared PostgreSQL database one process, elected, runs the once-only loops.
	s.elector = leader.New(s.db, leader.Options{Logger: log.With("component", "leader")})
	// The admin panel's settings, layered over the config file, shape everything below.
	if cfg, err = s.openSettings(ctx, cfg); err != nil {
		return nil, err
	}
	s.cfg = cfg
	host, _ := os.Hostname()
	s.owner = fmt.Sprintf("%s:%d:%d", host, os.Getpid(), time.Now().UnixNano())
	// The executor is built below; the closure only runs once serving has started.
	s.queue = queue.New(s.db, queue.Options{Lease: cfg.Workers.Lease.Duration,
		OnReclaimFailed: func(tx *sql.Tx, t queue.Task) error { return s.exec.NotifyFailure(tx, t) }})

	s.bot = newBotHTTP(cfg)
	sender := talk.NewClient(cfg.Nextcloud.URL, []byte(cfg.Talk.BotSecret), &http.Client{Timeout: cfg.Nextcloud.RequestTimeout.Duration, Transport: s.bot.transport})
	outboxOpts := outbox.Options{Logger: log.With("component", "outbox")}
	if s.db.Dialect() == store.Postgres && why == toServe {
		// Only the leader delivers; answers of tasks other hosts ran wake no one there,
		// so it looks for them often.
		outboxOpts.Active = s.elector.Leading
		outboxOpts.PollInterval = time.Second
	}
	// The app answers whether an interrupted send reached Talk, so none is posted twice.
	if s.app, err = appcall.New(cfg.Nextcloud.URL, []byte(cfg.Nextcloud.SharedSecret), &http.Client{Timeout: 40 * time.Second, Transport: s.bot.transport}); err == nil {
		outboxOpts.Posted = func(ctx context.Context, token string, refs []string) ([]string, error) {
			got, err := s.app.Posted(ctx, token, refs)
			if errors.Is(err, appcall.ErrRefused) {
				return nil, outbox.ErrCannotTell // an older app: send again, as before
			}
			return got, err
		}
	} else if why == toServe {
		return nil, err
	}
	s.outbox = outbox.New(s.db, sender, outboxOpts)

	s.launcher, err = newSandboxLaunchers(ctx, cfg, why != toPrompt, log.With("component", "sandbox"))
	if err != nil {
		return nil, err
	}
	auditLog := audit.New(s.db, log.With("component", "audit"), nil)
	allowed, err := netproxy.ParseRules(cfg.Network.AllowedHosts)
	if err != nil {
		return nil, fmt.Errorf("network.allowed_hosts: %w", err)
	}
	for _, e := range cfg.Network.AllowPrivate {
		if r, err := netproxy.ParseRule(e); err != nil || r.Wildcard() {
			return nil, fmt.Errorf("network.allow_private: %q must be one host:port of network.allowed_hosts, without a wildcard", e)
		}
	}
	registry := skills.NewRegistry()
	kvs := kv.New(s.db, nil)
	creds, err := s.openCredentials(ctx)
	if err != nil {
		return nil, err
	}
	if err := skills.RegisterBuiltins(registry, kvs, creds); err != nil {
		return nil, err
	}
	s.approvals = approval.New(s.db, s.queue, s.outbox, approval.Options{
		Defaults: func() approval.Policies { return approvalPolicies(s.pages.settings.Effective().Approvals) },
		Timeout:  s.approvalTimeout,
		Audit:    auditLog,
		OnNotice: s.outbox.Wake,
		// The pool is made later; a question is only ever asked by a running task.
		OnWait: func(taskID int64, waiting bool) {
			if s.pool == nil {
				return
			}
			if waiting {
				s.pool.Park(taskID)
			} else {
				s.pool.Unpark(taskID)
			}
		},
		Logger: log.With("component", "approval"),
	})
	s.launcher.network = netproxy.New(netproxy.Options{Allow: allowed, AllowPrivate: cfg.Network.AllowPrivate,
		Gate: hostApprovals{s.approvals}, Audit: auditLog, Logger: log})
	s.openWeb(allowed)
	if cfg.Browse.Render && why != toPrompt {
		if s.renderer, err = newRenderer(cfg, netproxy.Options{Allow: allowed, AllowPrivate: cfg.Network.AllowPrivate, Audit: auditLog, Logger: log},
			renderGate{s.approvals}, log); err != nil {
			return nil, err
		}
	}
	if s.transcriber, err = newTranscriber(cfg.Transcription); err != nil {
		return nil, err
	}
	if err := s.registerContentSkills(registry, kvs, auditLog); err != nil {
		return nil, err
	}
	if err := s.openMailbox(registry, creds); err != nil {
		return nil, err
	}
	s.launcher.skills = credproxy.New(registry, creds, auditLog, log.With("component", "credproxy"), credproxy.Options{Gate: s.approvals})
	s.launcher.usage = usage.New(s.db)
	s.launcher.login = s.pages.settings.Login
	s.launcher.onRefused = func(status int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.pages.settings.RecordLoginRefused(ctx, status); err != nil {
			log.Warn("could not record the model API's refusal", "err", err)
		}
		log.Error("the model API refused the credential", "status", status, "login", s.pages.settings.Login().Kind)
	}
	agent, err := s.newBrain(cfg, log)
	if err != nil {
		return nil, err
	}
	files, err := s.openFiles()
	if err != nil {
		return nil, err
	}
	s.graph = knowledge.New(s.db, knowledge.Options{})
	if s.mem, err = s.openMemory(); err != nil {
		return nil, err
	}
	if err := memory.RegisterSkill(registry, s.mem, factStore{s.graph}, taskConversations{s.queue}); err != nil {
		return nil, err
	}
	if err := s.registerOCR(registry); err != nil {
		return nil, err
	}
	if nc := cfg.Nextcloud; nc.BotUser != "" && nc.BotPassword != "" {
		// Calendars the users shared with the bot account: one client for the skill,
		// heartbeats, briefings and the settings pages.
		if s.calendars, err = calendar.New(calendar.Config{
			Endpoint: strings.TrimRight(nc.URL, "/") + "/remote.php/dav/",
			Username: nc.BotUser, Password: nc.BotPassword,
			HTTPClient: &http.Client{Timeout: nc.RequestTimeout.Duration, Transport: s.bot.transport, Jar: s.bot.jar},
			Logger:     log.With("component", "calendar"),
		}); err != nil {
			return nil, fmt.Errorf("calendar: %w", err)
		}
		if err := calendar.RegisterSkill(registry, s.calendars, s.calendarChoice); err != nil {
			return nil, err
		}
		// To-do lists live in the same calendar home: the tasks skill shares the client.
		if err := calendar.RegisterTasksSkill(registry, s.calendars); err != nil {
			return nil, err
		}
		// Address books users shared with the bot, read by the contacts skill.
		book, err := contacts.New(contacts.Config{
			Endpoint: strings.TrimRight(nc.URL, "/") + "/remote.php/dav/",
			Username: nc.BotUser, Password: nc.BotPassword,
			HTTPClient: &http.Client{Timeout: nc.RequestTimeout.Duration, Transport: s.bot.transport, Jar: s.bot.jar},
			Logger:     log.With("component", "contacts"),
		})
		if err != nil {
			return nil, fmt.Errorf("contacts: %w", err)
		}
		if err := contacts.RegisterSkill(registry, book); err != nil {
			return nil, err
		}
	}
	// E-mail channel: attachments go to the user's mirror, which the executor syncs.
	mailRoot := func(uid string) (string, error) { return executor.UserMirror(cfg.DataDir, uid), nil }
	if s.files != nil {
		mailRoot = s.files.UserRoot
	}
	if s.mail, err = openMail(cfg, s.db, s.queue, registry, mailRoot, s.mayUse, func() { s.pool.Wake() }, log); err != nil {
		return nil, err
	}
	// Voice messages: Nextcloud's own speech-to-text first (through the bot account),
	// then the admin's OpenAI-compatible service.
	var voice transcribe.Chain
	if s.botDAV != nil {
		voice = append(voice, &transcribe.Nextcloud{API: s.botDAV,
			Remote: func(uid, rel string) string { return path.Join("Users", uid, rel) }})
	}
	if s.transcriber != nil {
		voice = append(voice, s.transcriber)
	}
	s.exec = executor.New(s.db, s.queue, s.outbox, agent, s.launcher, executor.Options{
		Transcriber:         voice,
		OCR:                 ocrInstalled(),
		Files:               files,
		Mailer:              s.mail.mailer(),
		Facts:               s.graph,
		Memory:              s.mem,
		Usage:               s.launcher.usage,
		Recall:              cfg.Memory.Recall,
		DatedDays:           cfg.Memory.DatedDays,
		MaxMemoryChars:      cfg.Memory.MaxMemoryChars,
		BotName:             cfg.Talk.BotName,
		DataDir:             cfg.DataDir,
		Model:               cfg.Brain.Model,
		MaxTurns:            cfg.Brain.MaxTurns,
		TaskTimeout:         cfg.Brain.TaskTimeout.Duration,
		ProgressInterval:    cfg.Talk.ProgressInterval.Duration,
		MaxProgressMessages: cfg.Talk.MaxProgressMessages,
		ContextMessages:     cfg.Talk.ContextMessages,
		Owner:               s.owner,
		Logger:              log.With("component", "executor"),
		OnReply:             func() { s.outbox.Wake(); s.mail.wake() },
		// The runners are made after the executor; by the time a task completes they exist.
		OnConfigEdit: func() {
			if s.jobs != nil {
				s.jobs.Wake()
			}
			if s.checks != nil {
				s.checks.Wake()
			}
			if s.brief != nil {
				s.brief.Wake()
			}
		},
		Commands:      command.Shell{},
		Budget:        s.budget(),
		Approvals:     s.approvals,
		Skills:        registry,
		UserResources: s.userResources,
		Deferred: deferred.New(kvs, s.queue, auditLog, log.With("component", "deferred"),
			deferred.Options{SubtaskSource: queue.SourceSubtask}),
	})
	reserved := cfg.Workers.ReservedInteractive
	if reserved == 0 {
		reserved = -1 // the pool reads 0 as "default"; the admin asked for none
	}
	s.pool = worker.New(s.queue, s.exec.Handle, worker.Options{
		Max:                 cfg.Workers.Max,
		ReservedInteractive: reserved,
		FailNotice: func(tx *sql.Tx, t queue.Task, final bool) error {
			if !final {
				return nil
			}
			return s.exec.NotifyFailure(tx, t)
		},
		Owner:  s.owner,
		Logger: log.With("component", "worker"),
	})
	s.sched = schedule.New(s.db, schedule.Options{Logger: log.With("component", "schedule")})
	// The users' config folders, as the job, heartbeat and briefing runners read them.
	configFiles := &userConfigFiles{db: s.db, dataDir: s.cfg.DataDir, botDir: strings.ToLower(cfg.Talk.BotName), ws: s.files}
	s.jobs = jobs.New(s.db, s.sched, s.queue, s.outbox,
		configFiles,
		jobs.Options{BotName: cfg.Talk.BotName, Logger: log.With("component", "jobs"), OnTask: s.pool.Wake, OnReply: s.outbox.Wake})
	if s.invoices, err = s.openInvoicing(registry, configFiles); err != nil {
		return nil, err
	}
	s.checks, err = s.openHeartbeat(configFiles)
	if err != nil {
		return nil, err
	}
	s.brief, err = s.openBriefings(configFiles)
	if err != nil {
		return nil, err
	}
	s.intake = intake.New(s.db, s.queue, s.outbox, intake.Options{
		BotName:   cfg.Talk.BotName,
		Logger:    log.With("component", "intake"),
		Canceller: s.pool,
		Usage:     s.launcher.usage,
		Cron:      cronCommands{Scheduler: s.sched, runner: s.jobs},
		Checks:    s.checks,
		Memory:    memoryView{dataDir: s.cfg.DataDir, botDir: strings.ToLower(cfg.Talk.BotName), graph: s.graph, mem: s.mem},
		OnTask:    s.pool.Wake,
		OnReply:   s.outbox.Wake,
		Prefetch:  s.prefetch,
		Access:    s.pages.settings,
		Budget:    s.budget(),
		Approvals: s.approvals,
	})
	if err := s.openPages(heartbeatStatus{s.checks}, briefingStatus{s.brief}); err != nil {
		return nil, err
	}
	s.api = httpapi.New(s.intake, signing.NewNonces(s.db), httpapi.Options{
		Secret:       []byte(cfg.Nextcloud.SharedSecret),
		MaxBodyBytes: cfg.Server.MaxBodyBytes,
		Version:      Version,
		Schema:       store.SchemaVersion(),
		Logger:       log.With("component", "http"),
		Portal:       s.pages.portal,
		Live:         s.pages.hub,
	})
	ok = true
	return s, nil
}

// approvalPolicies reads the admin's policies from the configuration (validated there).
// ocrInstalled reports whether Debian's tesseract-ocr (with pdftoppm for scans) is
// installed; the sandbox sees /usr, so agents can run them.
func ocrInstalled() bool {
	for _, p := range []string{"/usr/bin/tesseract", "/usr/bin/pdftoppm"} {
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// newTranscriber is the speech-to-text client of the configuration, nil when none is
// set up.
func newTranscriber(c config.Transcription) (*transcribe.Client, error) {
	if c.BaseURL == "" {
		return nil, nil
	}
	key := c.APIKey
	t, err := transcribe.New(transcribe.Config{BaseURL: c.BaseURL, Model: c.Model, Key: func() string { return key }})
	if err != nil {
		return nil, fmt.Errorf("transcription: %w", err)
	}
	return t, nil
}

// approvalTimeout is how long a question waits for its answer now (the admin may change
// it while the sidecar runs).
func (s *sidecar) approvalTimeout() time.Duration {
	if d := s.pages.settings.Effective().Approvals.Timeout.Duration; d > 0 {
		return d
	}
	return approval.DefaultTimeout
}

// hostApprovals lets the network proxy ask the approvals about a connection: reaching
// a host the user has not approved before is an external action.
type hostApprovals struct{ svc *approval.Service }

func (h hostApprovals) AdmitHost(ctx context.Context, who netproxy.Identity, host string, port uint16) (bool, string, error) {
	out, err := h.svc.CheckHost(ctx, approval.Who{UserID: who.UserID, TaskID: who.TaskID}, host, port)
	return out.Allowed, out.Message, err
}

// renderGate lets a page being rendered reach hosts other than its own only where the
// user's approvals already allow it: the render cannot wait for a question.
type renderGate struct{ svc *approval.Service }

func (g renderGate) AdmitHost(ctx context.Context, who netproxy.Identity, host string, _ uint16) (bool, string, error) {
	return g.svc.HostAllowedNow(ctx, who.UserID, host)
}

func approvalPolicies(c config.Approvals) approval.Policies {
	return approval.Policies{Read: approval.Policy(c.Read), WriteOwn: approval.Policy(c.WriteOwn),
		External: approval.Policy(c.External), Admin: approval.Policy(c.Admin)}
}

// newBrain builds the agent brain.kind names. The openai brain runs its loop here, in
// the sidecar, so the key stays outside the sandbox and its token usage is recorded per
// model response from here (the sandbox gateway records the claude brain's).
func (s *sidecar) newBrain(cfg config.Config, log *slog.Logger) (brain.Brain, error) {
	if cfg.Brain.Kind != "openai" {
		hook, err := s.launcher.hookCommand()
		if err != nil {
			return nil, err
		}
		return claude.New(claude.Config{Binary: s.launcher.agentPath(), Model: cfg.Brain.Model, MaxTurns: cfg.Brain.MaxTurns,
			Hook: hook, ApprovalWait: s.approvalTimeout}, log.With("component", "claude")), nil
	}
	usageLog := log.With("component", "openai")
	b, err := openai.New(openai.Config{
		BaseURL: cfg.Brain.APIBaseURL, KeySource: s.pages.settings.APIKey, Model: cfg.Brain.Model, MaxTurns: cfg.Brain.MaxTurns,
		OnUsage: func(req brain.Request, u openai.Usage) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := s.launcher.usage.Record(ctx, usage.Entry{At: time.Now(), UserID: req.UserID, TaskID: req.TaskID, Model: u.Model,
				InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheRead: u.CacheReadTokens, Requests: 1})
			if err != nil {
				usageLog.Warn("recording model usage failed", "task_id", req.TaskID, "err", err)
			}
		},
	}, usageLog)
	if err != nil {
		return nil, fmt.Errorf("brain: %w", err)
	}
	return b, nil
}

// openFiles connects the workspace mirrors to the bot account's storage. Without a bot
// account the sidecar still answers, on local mirrors only, and says so.
func (s *sidecar) openFiles() (executor.Files, error) {
	nc := s.cfg.Nextcloud
	if nc.BotUser == "" || nc.BotPassword == "" {
		s.log.Warn("nextcloud.bot_user / bot_password are not set: users' files are not synced with Nextcloud (run `occ istota:setup`)")
		return nil, nil
	}
	client, err := webdav.New(webdav.Options{URL: nc.URL, User: nc.BotUser, Password: nc.BotPassword, Timeout: nc.RequestTimeout.Duration,
		Transport: s.bot.transport, Jar: s.bot.jar})
	if err != nil {
		return nil, fmt.Errorf("nextcloud: %w", err)
	}
	dataDir := s.cfg.DataDir
	hostname, _ := os.Hostname()
	mirror, err := mirrorName(s.db.Dialect(), dataDir, hostname)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	ws, err := workspace.New(s.db, client, workspace.Options{
		Mirror:        mirror,
		Mode:          s.cfg.Workspace.Mode,
		MountPath:     s.cfg.Workspace.MountPath,
		UserMirror:    func(uid string) string { return executor.UserMirror(dataDir, uid) },
		ChannelMirror: func(token string) string { return executor.ChannelMirror(dataDir, token) },
		BotDir:        strings.ToLower(s.cfg.Talk.BotName),
		MaxFileBytes:  int64(s.cfg.Workspace.MaxFileMB) << 20,
		Logger:        s.log.With("component", "workspace"),
	})
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	s.files, s.botDAV = ws, client
	return ws, nil
}

// mirrorName names this host's mirrors of users' files in the database, where each
// sync records what it agreed with Nextcloud. On SQLite the database is this host's
// alone and the name is empty. Hosts sharing a PostgreSQL database each keep their own
// mirrors, so each needs its own name: the host name and a random id kept in the data
// directory, beside the mirrors (a data directory copied to another machine, or
// restored on a renamed host, gets a new name there, and its first syncs compare both
// sides instead of trusting records made for other files).
func mirrorName(dialect store.Dialect, dataDir, hostname string) (string, error) {
	if dialect != store.Postgres {
		return "", nil
	}
	id, _, err := loadOrCreateSecret(dataDir, "mirror_id")
	if err != nil {
		return "", err
	}
	return hostname + "/" + id[:16], nil
}

// retryPushes keeps trying the pushes that failed (Nextcloud was down) until they land,
// so an edit reaches Nextcloud even when no new task comes. On the same tick it moves
// files users shared with the bot into their shared/ folders.
func (s *sidecar) retryPushes(ctx context.Context) {
	t := time.NewTicker(2 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		moved, err := s.files.SortIncomingShares(ctx)
		for _, p := range moved {
			s.log.Info("moved a file shared with the bot", "path", p)
		}
		if err != nil && ctx.Err() == nil {
			s.log.Warn("could not sort files shared with the bot", "err", err)
		}
		if len(s.files.Unsynced()) == 0 {
			continue
		}
		if err := s.files.RetryFailed(ctx); err != nil {
			s.log.Warn("files still not pushed to Nextcloud", "err", err, "paths", len(s.files.Unsynced()))
		}
	}
}

func (s *sidecar) serve(ctx context.Context) error {
	if err := s.reclaimAtStart(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Server.Listen, err)
	}
	srv := &http.Server{
		Handler:           s.api,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	// The outbox outlives runCtx: Close (last, below) lets a send in progress finish and
	// record that Talk has it. Cut off with the agents, a delivered answer stayed "in
	// flight" and was sent again after the restart.
	s.outbox.Start(context.WithoutCancel(ctx))
	s.pool.Start(runCtx)
	s.pages.hub.Start(runCtx)
	var loops sync.WaitGroup
	cycle, err := s.newSleepCycle()
	if err != nil {
		cancel()
		return fmt.Errorf("sleep cycle: %w", err)
	}
	loops.Add(1)
	go func() {
		defer loops.Done()
		s.elector.Run(runCtx, func(ctx context.Context) { s.runOnceLoops(ctx, cycle) })
	}()
	if s.files != nil {
		loops.Add(1)
		go func() { defer loops.Done(); s.retryPushes(runCtx) }()
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	loops.Add(1)
	go func() { defer loops.Done(); s.announceReady(runCtx) }()
	s.log.Info("istota is serving", "listen", ln.Addr().String(), "version", Version, "database", s.db.Path(), "dialect", s.db.Dialect().String(),
		"workers", s.cfg.Workers.Max, "sandbox", s.launcher.describe())

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	s.log.Info("shutting down")
	shutdownCtx, stop := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		s.log.Warn("http shutdown", "err", err)
	}
	// Shutdown does not wait for WebSocket connections: the hub closes and awaits them.
	if err := s.pages.hub.Close(shutdownCtx); err != nil {
		s.log.Warn("live progress shutdown", "err", err)
	}
	// Running agents are stopped; their tasks keep their lease and run again after restart.
	cancel()
	loops.Wait()
	if err := s.pool.Close(shutdownCtx); err != nil {
		s.log.Warn("worker shutdown", "err", err)
	}
	if err := s.exec.Wait(shutdownCtx); err != nil {
		s.log.Warn("executor shutdown", "err", err)
	}
	if s.files != nil {
		s.files.Close()
	}
	if err := s.outbox.Close(shutdownCtx); err != nil {
		s.log.Warn("outbox shutdown", "err", err)
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("http server: %w", serveErr)
	}
	return nil
}

// reclaimAtStart gives back the tasks a previous run left locked or running. On SQLite
// the data directory's lock proves that every such task belongs to a process that is
// gone, so all of them run again at once. On a shared PostgreSQL database other hosts'
// tasks are alive: only expired leases are taken back (as every worker pool does
// regularly), so a crashed host loses nothing but its leases.
func (s *sidecar) reclaimAtStart(ctx context.Context) error {
	reclaim, what := s.queue.ReclaimAll, "re-queued tasks interrupted by the previous run"
	if s.db.Dialect() == store.Postgres {
		reclaim, what = s.queue.ReclaimExpired, "re-queued tasks whose lease expired"
	}
	n, err := reclaim(ctx)
	if err != nil {
		return fmt.Errorf("reclaim tasks of the previous run: %w", err)
	}
	if n > 0 {
		s.log.Info(what, "count", n)
	}
	return nil
}

// runOnceLoops runs, until ctx ends, everything that must happen once across the
// processes sharing the database: the CRON.md minute ticker and TASKS.md, heartbeats,
// briefings, invoicing, the nightly sleep cycle (with retention), and the mail poller
// and outbox. (The Talk outbox runs everywhere but delivers only while Leading.) It
// runs while this process leads (always, on SQLite) and returns when every loop has.
func (s *sidecar) runOnceLoops(ctx context.Context, cycle *sleep.Cycle) {
	var loops sync.WaitGroup
	for _, run := range []func(context.Context){
		func(ctx context.Context) { s.sleepLoop(ctx, cycle) },
		s.jobs.Run, s.checks.Run, s.brief.Run, s.invoices.Run,
	} {
		loops.Add(1)
		go func() { defer loops.Done(); run(ctx) }()
	}
	s.mail.start(ctx, &loops)
	s.outbox.Wake() // deliver what waited while another process led
	loops.Wait()
}

// prefetch starts fetching the files a new Talk task needs while it waits.
func (s *sidecar) prefetch(uid, token string) {
	if s.files != nil {
		s.files.Prefetch(uid, token)
	}
}

// announceReady tells the Nextcloud app that the sidecar serves, so the Talk events that
// waited in the app's outbox while it was down are handed over now rather than with the
// next message or Nextcloud's next cron run. Nextcloud may still be starting too: it
// is tried again, less and less often, for ten minutes.
func (s *sidecar) announceReady(ctx context.Context) {
	log := s.log.With("component", "appcall")
	client := s.app
	wait := time.Second
	deadline := time.Now().Add(10 * time.Minute)
	for {
		res, err := client.Ready(ctx)
		switch {
		case err == nil:
			log.Info("told the Nextcloud app the sidecar is back", "events_handed_over", res.Delivered, "all_handed_over", res.Complete)
			return
		case errors.Is(err, appcall.ErrRefused):
			log.Warn("the Nextcloud app refused the sidecar's hello; events waiting there arrive with the next message or cron (is the app current, and the shared secret the same?)", "err", err)
			return
		case ctx.Err() != nil:
			return
		case time.Now().After(deadline):
			log.Warn("could not tell the Nextcloud app the sidecar is back; events waiting there arrive with the next message or cron", "err", err)
			return
		}
		log.Debug("Nextcloud app not reached yet", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(wait*2, time.Minute)
	}
}

func (s *sidecar) close() {
	if s.launcher != nil {
		s.launcher.close()
	}
	if s.db != nil {
		if err := s.db.Close(); err != nil {
			s.log.Warn("closing the database", "err", err)
		}
	}
	if s.lock != nil {
		s.lock.Release()
	}
}
