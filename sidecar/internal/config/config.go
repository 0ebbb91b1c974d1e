// Package config holds the sidecar's configuration: one struct with defaults, parsed from
// TOML, overridden by ISTOTA_* environment variables, with *_file indirection for secrets
// and validation errors that name the field.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/istota/istota/sidecar/internal/userconfig"
)

// Duration is a time.Duration that reads "15m" style strings from TOML.
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalText renders the duration as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.Duration.String()), nil }

// Config is the whole sidecar configuration. Fields tagged secret:"true" are never
// printed by Redacted and may be given through a matching *_file key.
type Config struct {
	// DataDir holds the database, the workspace mirrors and generated secrets.
	DataDir string `toml:"data_dir" env:"ISTOTA_DATA_DIR"`

	Server    Server    `toml:"server"`
	Database  Database  `toml:"database"`
	Nextcloud Nextcloud `toml:"nextcloud"`
	Talk      Talk      `toml:"talk"`
	Brain     Brain     `toml:"brain"`
	Workers   Workers   `toml:"workers"`
	Sandbox   Sandbox   `toml:"sandbox"`
	Network   Network   `toml:"network"`
	Workspace Workspace `toml:"workspace"`
	Memory    Memory    `toml:"memory"`
	Log       Log       `toml:"log"`
	// Access is who may use the bot; the admin panel's settings are layered over it.
	Access Access `toml:"access"`
	// Mail is the e-mail channel: the bot's own mailbox (off unless enabled).
	Mail Mail `toml:"mail"`
	// Briefings are the admin's defaults under every user's BRIEFINGS.md.
	Briefings Briefings `toml:"briefings"`
	// Approvals are the admin's policies per risk tier; users may only tighten them.
	Approvals Approvals `toml:"approvals"`
	// Transcription turns Talk voice messages into text before the agent starts.
	Transcription Transcription `toml:"transcription"`
	// Browse configures the browse skill's rendering of pages with their scripts.
	Browse Browse `toml:"browse"`
}

// Browse is the browse skill's headless browser. Off by default: a page's scripts then
// never run, and pages that only show text through them read empty.
type Browse struct {
	// Render lets the skill load pages in Debian's headless Chromium, in a sandbox whose
	// only way out is the network allowlist: when the agent asks (--render) and by
	// itself for pages with scripts and next to no text.
	Render bool `toml:"render" env:"ISTOTA_BROWSE_RENDER"`
	// ChromiumPath is the Chromium binary, under /usr (all of the system the sandbox
	// shows); default Debian's /usr/lib/chromium/chromium.
	ChromiumPath string `toml:"chromium_path" env:"ISTOTA_CHROMIUM_PATH"`
	// RenderTimeout bounds one render; the sandbox is killed after it.
	RenderTimeout Duration `toml:"render_timeout" env:"ISTOTA_BROWSE_RENDER_TIMEOUT"`
}

// Transcription is an OpenAI-compatible speech-to-text API (POST
// {base_url}/audio/transcriptions): OpenAI, Groq, LocalAI, faster-whisper-server,
// whisper.cpp's server. Empty BaseURL: voice messages are not transcribed, and users
// are told so.
type Transcription struct {
	BaseURL    string `toml:"base_url" env:"ISTOTA_TRANSCRIPTION_URL"`
	APIKey     string `toml:"api_key" env:"ISTOTA_TRANSCRIPTION_KEY" secret:"true"`
	APIKeyFile string `toml:"api_key_file" env:"ISTOTA_TRANSCRIPTION_KEY_FILE"`
	// Model defaults to whisper-1.
	Model string `toml:"model" env:"ISTOTA_TRANSCRIPTION_MODEL"`
}

// Approvals says, per risk tier of an agent's action, whether it runs ("allow"), waits
// for the user's yes ("ask") or is refused ("deny"), and how long a question waits
// (no answer means no).
type Approvals struct {
	Read     string   `toml:"read"`
	WriteOwn string   `toml:"write_own"`
	External string   `toml:"external"`
	Admin    string   `toml:"admin"`
	Timeout  Duration `toml:"timeout"`
}

// Access says who may use the bot and who is an Istota admin (besides Nextcloud admins).
// Empty Users and Groups let every Nextcloud user in.
type Access struct {
	Users       []string `toml:"users"`
	Groups      []string `toml:"groups"`
	AdminUsers  []string `toml:"admin_users"`
	AdminGroups []string `toml:"admin_groups"`
}

// Server is the HTTP API the Nextcloud app calls.
type Server struct {
	Listen string `toml:"listen" env:"ISTOTA_LISTEN"`
	// MaxBodyBytes bounds every request body.
	MaxBodyBytes int64 `toml:"max_body_bytes" env:"ISTOTA_MAX_BODY_BYTES"`
	// PublicOrigins are extra browser origins ("https://cloud.example.com") whose
	// settings pages may open the live-progress WebSocket, for when nextcloud.url is
	// an internal address the browser never sees.
	PublicOrigins []string `toml:"public_origins"`
}

// Database is the store: the embedded SQLite file (the default, one process), or a
// PostgreSQL database that several `istota serve` processes on several hosts share.
type Database struct {
	// Kind is "sqlite" (default) or "postgres".
	Kind string `toml:"kind" env:"ISTOTA_DATABASE_KIND"`
	// Path is the SQLite file.
	Path string `toml:"path" env:"ISTOTA_DATABASE_PATH"`
	// DSN is the PostgreSQL connection string (postgres://user:password@host:5432/istota).
	DSN string `toml:"dsn" env:"ISTOTA_DATABASE_DSN" secret:"true"`
	// MaxConns bounds this process's PostgreSQL connections; default 16 (and half as many
	// again for claiming tasks).
	MaxConns int `toml:"max_conns" env:"ISTOTA_DATABASE_MAX_CONNS"`
}

// Postgres reports whether the store is a shared PostgreSQL database.
func (d Database) Postgres() bool { return d.Kind == "postgres" }

// Nextcloud is how the sidecar reaches Nextcloud and how the app reaches the sidecar.
type Nextcloud struct {
	URL              string `toml:"url" env:"ISTOTA_NEXTCLOUD_URL"`
	SharedSecret     string `toml:"shared_secret" env:"ISTOTA_SHARED_SECRET" secret:"true"`
	SharedSecretFile string `toml:"shared_secret_file" env:"ISTOTA_SHARED_SECRET_FILE"`
	// BotUser and BotPassword are the bot account through which the sidecar reaches
	// files (WebDAV) and calendars (CalDAV); `occ istota:setup` creates the account.
	BotUser         string `toml:"bot_user" env:"ISTOTA_BOT_USER"`
	BotPassword     string `toml:"bot_password" env:"ISTOTA_BOT_PASSWORD" secret:"true"`
	BotPasswordFile string `toml:"bot_password_file" env:"ISTOTA_BOT_PASSWORD_FILE"`
	// RequestTimeout bounds each call to Nextcloud.
	RequestTimeout Duration `toml:"request_timeout" env:"ISTOTA_NEXTCLOUD_REQUEST_TIMEOUT"`
}

// Talk is the bot identity in Nextcloud Talk.
type Talk struct {
	BotName       string `toml:"bot_name" env:"ISTOTA_BOT_NAME"`
	BotSecret     string `toml:"bot_secret" env:"ISTOTA_BOT_SECRET" secret:"true"`
	BotSecretFile string `toml:"bot_secret_file" env:"ISTOTA_BOT_SECRET_FILE"`
	// ProgressInterval is the minimum gap between progress messages of one task.
	ProgressInterval Duration `toml:"progress_interval" env:"ISTOTA_PROGRESS_INTERVAL"`
	// MaxProgressMessages caps progress messages per task.
	MaxProgressMessages int `toml:"max_progress_messages" env:"ISTOTA_MAX_PROGRESS_MESSAGES"`
	// ContextMessages is how many recent messages of a conversation go into the prompt.
	ContextMessages int `toml:"context_messages" env:"ISTOTA_CONTEXT_MESSAGES"`
}

// Brain selects and configures the agent.
type Brain struct {
	Kind       string `toml:"kind" env:"ISTOTA_BRAIN"`
	ClaudePath string `toml:"claude_path" env:"ISTOTA_CLAUDE_PATH"`
	Model      string `toml:"model" env:"ISTOTA_MODEL"`
	APIBaseURL string `toml:"api_base_url" env:"ISTOTA_API_BASE_URL"`
	APIKey     string `toml:"api_key" env:"ISTOTA_API_KEY" secret:"true"`
	APIKeyFile string `toml:"api_key_file" env:"ISTOTA_API_KEY_FILE"`
	// OAuthToken is a Claude subscription token (`claude setup-token`), used instead of
	// APIKey by the claude brain when set. Like the key it stays outside the sandbox.
	OAuthToken     string   `toml:"oauth_token" env:"ISTOTA_OAUTH_TOKEN" secret:"true"`
	OAuthTokenFile string   `toml:"oauth_token_file" env:"ISTOTA_OAUTH_TOKEN_FILE"`
	MaxTurns       int      `toml:"max_turns" env:"ISTOTA_MAX_TURNS"`
	TaskTimeout    Duration `toml:"task_timeout" env:"ISTOTA_TASK_TIMEOUT"`
	// DailyTokenBudget caps each user's model tokens per day (their midnight); 0 is none.
	DailyTokenBudget int64 `toml:"daily_token_budget" env:"ISTOTA_DAILY_TOKEN_BUDGET"`
}

// Workers sizes the worker pool.
type Workers struct {
	Max                 int `toml:"max" env:"ISTOTA_WORKERS"`
	ReservedInteractive int `toml:"reserved_interactive" env:"ISTOTA_RESERVED_INTERACTIVE"`
	// Lease is how long a claimed task stays this process's without renewal (renewed
	// every third of it): after a crash, its tasks run again this long later (at once
	// on SQLite, where a restart takes them back). Default 2m.
	Lease Duration `toml:"lease" env:"ISTOTA_WORKERS_LEASE"`
}

// Sandbox configures the per-task bubblewrap sandbox.
type Sandbox struct {
	// Unsandboxed runs agents without bwrap. Development only: refused for more than
	// one user unless AllowUnsandboxedMultiUser is also set.
	Unsandboxed bool   `toml:"unsandboxed" env:"ISTOTA_UNSANDBOXED"`
	BwrapPath   string `toml:"bwrap_path" env:"ISTOTA_BWRAP_PATH"`
	// AgentUser is the unprivileged account agents run as when the sidecar itself runs
	// as root (it should not; the systemd unit uses its own user).
	AgentUser string `toml:"agent_user" env:"ISTOTA_AGENT_USER"`
	// AdminDBWrite lets admins' agents write the database, not only read it.
	AdminDBWrite bool `toml:"admin_db_write" env:"ISTOTA_ADMIN_DB_WRITE"`
	// Resource limits of one agent run (rlimits, so one runaway task cannot take the
	// host down); 0 leaves a limit unset. Wall time is brain.task_timeout.
	MemoryMB     int `toml:"memory_mb" env:"ISTOTA_SANDBOX_MEMORY_MB"`         // address space
	MaxProcesses int `toml:"max_processes" env:"ISTOTA_SANDBOX_MAX_PROCESSES"` // processes and threads
	MaxOpenFiles int `toml:"max_open_files" env:"ISTOTA_SANDBOX_MAX_OPEN_FILES"`
	CPUSeconds   int `toml:"cpu_seconds" env:"ISTOTA_SANDBOX_CPU_SECONDS"`
}

// Network is what agents may reach through the allowlist proxy. The model API needs no
// entry: the per-task gateway reaches it from outside the sandbox.
type Network struct {
	// AllowedHosts are host:port entries ("api.github.com:443", "*.example.com:443").
	AllowedHosts []string `toml:"allowed_hosts"`
	// AllowPrivate are entries of AllowedHosts that may resolve to private or loopback
	// addresses (an intranet service). Everything else resolving there is refused.
	AllowPrivate []string `toml:"allow_private"`
}

// Workspace configures the local mirror of each user's files.
type Workspace struct {
	// Mode "sync" mirrors /Users/{uid} over WebDAV (pull before a task, push after);
	// "mount" uses MountPath, where the bot's storage is already mounted locally.
	Mode      string `toml:"mode" env:"ISTOTA_WORKSPACE_MODE"`
	MountPath string `toml:"mount_path" env:"ISTOTA_WORKSPACE_MOUNT_PATH"`
	// MaxFileMB bounds one synced file.
	MaxFileMB int `toml:"max_file_mb" env:"ISTOTA_WORKSPACE_MAX_FILE_MB"`
}

// Memory configures what the assistant remembers.
type Memory struct {
	// MaxMemoryChars caps facts and dated/recalled memories in a prompt.
	MaxMemoryChars int `toml:"max_memory_chars" env:"ISTOTA_MAX_MEMORY_CHARS"`
	// DatedDays is how many days of memories/YYYY-MM-DD.md go into a prompt.
	DatedDays int `toml:"dated_days" env:"ISTOTA_MEMORY_DATED_DAYS"`
	// Recall adds memories found by search to prompts (off by default).
	Recall bool `toml:"recall" env:"ISTOTA_MEMORY_RECALL"`
	// RetentionDays deletes dated files and ephemeral index chunks older than this.
	RetentionDays int `toml:"retention_days" env:"ISTOTA_MEMORY_RETENTION_DAYS"`
	// HistoryDays deletes finished tasks with their events, the conversation log and
	// audit entries older than this, in each user's and conversation's nightly run; 0
	// keeps them forever.
	HistoryDays int `toml:"history_days" env:"ISTOTA_HISTORY_DAYS"`
	// SleepCron is when the nightly sleep cycle runs, in each user's timezone.
	SleepCron string `toml:"sleep_cron" env:"ISTOTA_SLEEP_CRON"`
	// Embeddings: an OpenAI-compatible endpoint for vector search; empty disables it.
	EmbeddingsURL     string `toml:"embeddings_url" env:"ISTOTA_EMBEDDINGS_URL"`
	EmbeddingsModel   string `toml:"embeddings_model" env:"ISTOTA_EMBEDDINGS_MODEL"`
	EmbeddingsKey     string `toml:"embeddings_key" env:"ISTOTA_EMBEDDINGS_KEY" secret:"true"`
	EmbeddingsKeyFile string `toml:"embeddings_key_file" env:"ISTOTA_EMBEDDINGS_KEY_FILE"`
	// VectorCacheMB bounds the memory that keeps the vectors of the namespaces searched
	// lately for fast vector search; 0 keeps none (every search asks the index).
	VectorCacheMB int `toml:"vector_cache_mb" env:"ISTOTA_MEMORY_VECTOR_CACHE_MB"`
}

// Mail is the e-mail channel: mail from users' registered addresses to the bot's own
// mailbox becomes tasks, answered by threaded replies; the email skill sends through it.
// SPF/DKIM checking is the job of the mail server that delivers to the mailbox.
type Mail struct {
	Enabled bool `toml:"enabled" env:"ISTOTA_MAIL_ENABLED"`
	// IMAP: host:port, login, and tls = implicit (993) | starttls (143) | none (loopback only).
	IMAPAddr         string `toml:"imap_addr" env:"ISTOTA_MAIL_IMAP_ADDR"`
	IMAPUser         string `toml:"imap_user" env:"ISTOTA_MAIL_IMAP_USER"`
	IMAPPassword     string `toml:"imap_password" env:"ISTOTA_MAIL_IMAP_PASSWORD" secret:"true"`
	IMAPPasswordFile string `toml:"imap_password_file" env:"ISTOTA_MAIL_IMAP_PASSWORD_FILE"`
	IMAPTLS          string `toml:"imap_tls" env:"ISTOTA_MAIL_IMAP_TLS"`
	// Mailbox is the folder polled for unseen mail.
	Mailbox string `toml:"mailbox" env:"ISTOTA_MAIL_MAILBOX"`
	// SMTP submission: host:port, login (empty user: no AUTH, a local relay), and tls =
	// implicit (465) | starttls (587) | none (loopback only).
	SMTPAddr         string `toml:"smtp_addr" env:"ISTOTA_MAIL_SMTP_ADDR"`
	SMTPUser         string `toml:"smtp_user" env:"ISTOTA_MAIL_SMTP_USER"`
	SMTPPassword     string `toml:"smtp_password" env:"ISTOTA_MAIL_SMTP_PASSWORD" secret:"true"`
	SMTPPasswordFile string `toml:"smtp_password_file" env:"ISTOTA_MAIL_SMTP_PASSWORD_FILE"`
	SMTPTLS          string `toml:"smtp_tls" env:"ISTOTA_MAIL_SMTP_TLS"`
	// From is the bot's address, optionally with a name: "Istota <istota@example.org>".
	From string `toml:"from" env:"ISTOTA_MAIL_FROM"`
	// PollInterval is how often the mailbox is checked.
	PollInterval Duration `toml:"poll_interval" env:"ISTOTA_MAIL_POLL_INTERVAL"`
	// MaxMessageMB: larger messages are not downloaded; the sender is told.
	MaxMessageMB int `toml:"max_message_mb" env:"ISTOTA_MAIL_MAX_MESSAGE_MB"`
	// AllowedRecipientDomains: besides the user's own addresses, the email skill may
	// write to these domains ("example.org"; "*.example.org" for its subdomains).
	AllowedRecipientDomains []string `toml:"allowed_recipient_domains"`
	// MaxSendsPerHour caps the email skill's messages per user and hour; 0 disables it.
	MaxSendsPerHour int `toml:"max_sends_per_hour" env:"ISTOTA_MAIL_MAX_SENDS_PER_HOUR"`
}

// Briefings are the administrator's defaults for the briefings users define in
// BRIEFINGS.md. They are merged under each user's settings: a briefing that names no
// components gets DefaultComponents, and its news component reads DefaultFeeds besides
// its own feeds.
type Briefings struct {
	DefaultComponents []string `toml:"default_components"`
	DefaultFeeds      []string `toml:"default_feeds"`
	// MaxItemsPerFeed is how many of each feed's newest headlines a briefing shows.
	MaxItemsPerFeed int `toml:"max_items_per_feed" env:"ISTOTA_BRIEFINGS_MAX_ITEMS_PER_FEED"`
	// ComponentTimeout bounds fetching one component (all its feeds, all calendars).
	ComponentTimeout Duration `toml:"component_timeout" env:"ISTOTA_BRIEFINGS_COMPONENT_TIMEOUT"`
	// Markets is the quote source of the markets component.
	Markets Markets `toml:"markets"`
}

// Markets is where the markets briefing component reads quotes: a CSV source with a
// header line (Symbol, Date, Time, Open, High, Low, Close), one request per symbol.
// Its host:port must be in network.allowed_hosts, or the component reports that.
type Markets struct {
	// QuoteURL contains {symbol}; empty switches the component off.
	QuoteURL string `toml:"quote_url" env:"ISTOTA_BRIEFINGS_MARKETS_QUOTE_URL"`
	// Futures are shown in briefings before noon (the user's time), Indices from noon.
	Futures []string `toml:"futures"`
	Indices []string `toml:"indices"`
}

// Log configures slog output.
type Log struct {
	Level  string `toml:"level" env:"ISTOTA_LOG_LEVEL"`
	Format string `toml:"format" env:"ISTOTA_LOG_FORMAT"`
}

// Default returns a configuration that runs out of the box on one machine.
func Default() Config {
	return Config{
		DataDir: "var",
		Server:  Server{Listen: "127.0.0.1:8765", MaxBodyBytes: 1 << 20},
		Nextcloud: Nextcloud{
			URL:            "http://127.0.0.1",
			RequestTimeout: Duration{15 * time.Second},
		},
		Talk: Talk{
			BotName:             "Istota",
			ProgressInterval:    Duration{8 * time.Second},
			MaxProgressMessages: 5,
			ContextMessages:     20,
		},
		Brain: Brain{
			Kind:        "claude",
			ClaudePath:  "claude",
			APIBaseURL:  "https://api.anthropic.com",
			MaxTurns:    30,
			TaskTimeout: Duration{15 * time.Minute},
		},
		Workers:   Workers{Max: 4, ReservedInteractive: 1},
		Workspace: Workspace{Mode: "sync", MaxFileMB: 100},
		Memory:    Memory{MaxMemoryChars: 8000, DatedDays: 3, RetentionDays: 180, HistoryDays: 180, SleepCron: "0 3 * * *", VectorCacheMB: 256},
		Sandbox: Sandbox{BwrapPath: "bwrap", AgentUser: "istota-agent",
			MemoryMB: 4096, MaxProcesses: 512, MaxOpenFiles: 4096, CPUSeconds: 1800},
		Log: Log{Level: "info", Format: "text"},
		Mail: Mail{IMAPTLS: "implicit", SMTPTLS: "starttls", Mailbox: "INBOX",
			PollInterval: Duration{time.Minute}, MaxMessageMB: 25, MaxSendsPerHour: 10},
		Briefings: Briefings{MaxItemsPerFeed: 5, ComponentTimeout: Duration{30 * time.Second},
			Markets: Markets{
				QuoteURL: "https://stooq.com/q/l/?s={symbol}&f=sd2t2ohlcv&h&e=csv",
				Futures:  []string{"es.f", "nq.f", "ym.f"},
				Indices:  []string{"^spx", "^ndq", "^dji"},
			}},
		Approvals: Approvals{Read: "allow", WriteOwn: "allow", External: "ask", Admin: "ask", Timeout: Duration{30 * time.Minute}},
		Browse:    Browse{ChromiumPath: "/usr/lib/chromium/chromium", RenderTimeout: Duration{30 * time.Second}},
	}
}

// Load reads the TOML file at path (an empty path means defaults only), applies the
// environment, resolves *_file secrets and validates. env is usually os.Environ().
func Load(path string, env []string) (Config, error) {
	cfg := Default()
	if path != "" {
		md, err := toml.DecodeFile(path, &cfg)
		if err != nil {
			return Config{}, fmt.Errorf("config %s: %w", path, err)
		}
		if undecoded := md.Undecoded(); len(undecoded) > 0 {
			keys := make([]string, len(undecoded))
			for i, k := range undecoded {
				keys[i] = k.String()
			}
			return Config{}, fmt.Errorf("config %s: unknown keys: %s", path, strings.Join(keys, ", "))
		}
		// Relative paths in the file are relative to the file, not to the working directory.
		if cfg.DataDir != "" && !filepath.IsAbs(cfg.DataDir) {
			cfg.DataDir = filepath.Join(filepath.Dir(path), cfg.DataDir)
		}
	}
	if err := applyEnv(&cfg, env); err != nil {
		return Config{}, err
	}
	if err := cfg.resolveSecretFiles(); err != nil {
		return Config{}, err
	}
	if cfg.Database.Path == "" {
		// Its own directory, so admins' sandboxes can be shown the database (and its WAL
		// files) without anything else of the data directory.
		cfg.Database.Path = filepath.Join(cfg.DataDir, "db", "istota.db")
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// FieldError names the configuration key that is wrong.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return "config: " + e.Field + ": " + e.Message }

// Validate checks every field and returns all problems at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if c.DataDir == "" {
		bad("data_dir", "must not be empty")
	}
	if _, _, err := net.SplitHostPort(c.Server.Listen); err != nil {
		bad("server.listen", "want host:port, got %q", c.Server.Listen)
	}
	if c.Server.MaxBodyBytes < 1024 {
		bad("server.max_body_bytes", "must be at least 1024")
	}
	for _, o := range c.Server.PublicOrigins {
		if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			bad("server.public_origins", "want origins like https://cloud.example.com (scheme and host only), got %q", o)
		}
	}
	if u, err := url.Parse(c.Nextcloud.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("nextcloud.url", "want an http(s) URL, got %q", c.Nextcloud.URL)
	}
	if s := c.Nextcloud.SharedSecret; s != "" && len(s) < 32 {
		bad("nextcloud.shared_secret", "must be at least 32 characters")
	}
	if s := c.Talk.BotSecret; s != "" && (len(s) < 40 || len(s) > 128) {
		bad("talk.bot_secret", "must be 40 to 128 characters (Talk's limit)")
	}
	if n := len(c.Talk.BotName); n < 1 || n > 64 {
		bad("talk.bot_name", "must be 1 to 64 bytes")
	}
	if b := c.Transcription.BaseURL; b != "" {
		if u, err := url.Parse(b); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("transcription.base_url", "want an http(s) URL such as https://api.openai.com/v1, got %q", b)
		} else if u.User != nil {
			bad("transcription.base_url", "must not carry credentials; set transcription.api_key")
		}
	}
	if c.Talk.ProgressInterval.Duration < 0 {
		bad("talk.progress_interval", "must not be negative")
	}
	if c.Talk.MaxProgressMessages < 0 {
		bad("talk.max_progress_messages", "must not be negative")
	}
	if c.Talk.ContextMessages < 0 || c.Talk.ContextMessages > 500 {
		bad("talk.context_messages", "must be 0 to 500")
	}
	switch c.Brain.Kind {
	case "claude":
		// The Claude Code CLI runs in the sandbox; the gateway adds the key.
		if c.Brain.ClaudePath == "" {
			bad("brain.claude_path", "must not be empty: the claude brain runs the Claude Code CLI")
		}
	case "openai":
		// The agent loop runs in the sidecar against a Chat Completions endpoint, which
		// needs a model name and is never Anthropic's own API.
		if c.Brain.Model == "" {
			bad("brain.model", "the openai brain needs a model name (e.g. gpt-4.1)")
		}
		if u, err := url.Parse(c.Brain.APIBaseURL); err == nil && u.User != nil {
			bad("brain.api_base_url", "must not carry credentials; set brain.api_key")
		} else if err == nil && strings.EqualFold(u.Host, "api.anthropic.com") {
			bad("brain.api_base_url", "the openai brain needs an OpenAI-compatible endpoint such as https://api.openai.com/v1, not Anthropic's API")
		}
	default:
		bad("brain.kind", "unknown brain %q (supported: claude, openai)", c.Brain.Kind)
	}
	if u, err := url.Parse(c.Brain.APIBaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("brain.api_base_url", "want an http(s) URL, got %q", c.Brain.APIBaseURL)
	}
	if c.Brain.MaxTurns < 1 {
		bad("brain.max_turns", "must be at least 1")
	}
	for _, p := range []struct{ name, v string }{{"approvals.read", c.Approvals.Read}, {"approvals.write_own", c.Approvals.WriteOwn},
		{"approvals.external", c.Approvals.External}, {"approvals.admin", c.Approvals.Admin}} {
		if p.v != "allow" && p.v != "ask" && p.v != "deny" {
			bad(p.name, "want allow, ask or deny, got %q", p.v)
		}
	}
	if c.Approvals.Timeout.Duration < time.Second || c.Approvals.Timeout.Duration > 24*time.Hour {
		bad("approvals.timeout", "must be between 1s and 24h")
	}
	if c.Brain.TaskTimeout.Duration < time.Second {
		bad("brain.task_timeout", "must be at least 1s")
	}
	if c.Brain.DailyTokenBudget < 0 {
		bad("brain.daily_token_budget", "must be 0 (no budget) or more")
	}
	if c.Browse.Render {
		if c.Browse.RenderTimeout.Duration < 5*time.Second || c.Browse.RenderTimeout.Duration > 5*time.Minute {
			bad("browse.render_timeout", "must be between 5s and 5m")
		}
		if p := c.Browse.ChromiumPath; !filepath.IsAbs(p) || !strings.HasPrefix(filepath.Clean(p), "/usr/") {
			bad("browse.chromium_path", "must be an absolute path under /usr (the sandbox shows only /usr of the system), got %q", p)
		}
		if c.Sandbox.Unsandboxed {
			bad("browse.render", "needs the sandbox: pages are rendered only inside it, and sandbox.unsandboxed is set")
		}
	}
	if c.Sandbox.MemoryMB != 0 && c.Sandbox.MemoryMB < 1024 {
		bad("sandbox.memory_mb", "must be 0 (unlimited) or at least 1024: the agent reserves much address space")
	}
	if c.Sandbox.MaxProcesses != 0 && c.Sandbox.MaxProcesses < 100 {
		bad("sandbox.max_processes", "must be 0 (unlimited) or at least 100: threads count too")
	}
	if c.Sandbox.MaxOpenFiles < 0 || c.Sandbox.CPUSeconds < 0 {
		bad("sandbox.max_open_files", "limits must not be negative")
	}
	switch c.Workspace.Mode {
	case "sync":
	case "mount":
		if !filepath.IsAbs(c.Workspace.MountPath) {
			bad("workspace.mount_path", "mode mount needs an absolute path, got %q", c.Workspace.MountPath)
		}
	default:
		bad("workspace.mode", "want sync or mount, got %q", c.Workspace.Mode)
	}
	if c.Workspace.MaxFileMB < 1 {
		bad("workspace.max_file_mb", "must be at least 1")
	}
	if c.Memory.MaxMemoryChars < 0 || c.Memory.DatedDays < 0 || c.Memory.RetentionDays < 0 {
		bad("memory", "max_memory_chars, dated_days and retention_days must not be negative")
	}
	if c.Memory.VectorCacheMB < 0 || c.Memory.VectorCacheMB > 1<<20 {
		bad("memory.vector_cache_mb", "want 0 (off) to %d, got %d", 1<<20, c.Memory.VectorCacheMB)
	}
	if c.Memory.HistoryDays < 0 {
		bad("memory.history_days", "must be 0 (keep everything) or more")
	}
	if c.Memory.EmbeddingsURL != "" {
		if u, err := url.Parse(c.Memory.EmbeddingsURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			bad("memory.embeddings_url", "want an http(s) URL, got %q", c.Memory.EmbeddingsURL)
		}
	}
	if c.Workers.Max < 1 {
		bad("workers.max", "must be at least 1")
	}
	if l := c.Workers.Lease.Duration; l != 0 && l < 3*time.Second {
		bad("workers.lease", "must be at least 3s, got %v", l)
	}
	switch c.Database.Kind {
	case "", "sqlite":
	case "postgres":
		if c.Database.DSN == "" {
			bad("database.dsn", "is required with kind = \"postgres\"")
		}
	default:
		bad("database.kind", "want sqlite or postgres, got %q", c.Database.Kind)
	}
	if c.Workers.ReservedInteractive < 0 || c.Workers.ReservedInteractive >= c.Workers.Max && c.Workers.Max > 1 {
		bad("workers.reserved_interactive", "must be between 0 and workers.max-1")
	}
	c.validateMail(bad)
	c.validateBriefings(bad)
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "want debug, info, warn or error, got %q", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format", "want text or json, got %q", c.Log.Format)
	}
	return errors.Join(errs...)
}

// validateMail checks the [mail] section; a disabled channel is not checked.
func (c Config) validateMail(bad func(field, format string, args ...any)) {
	m := c.Mail
	if !m.Enabled {
		return
	}
	for _, e := range []struct{ field, addr, tls string }{
		{"mail.imap", m.IMAPAddr, m.IMAPTLS}, {"mail.smtp", m.SMTPAddr, m.SMTPTLS},
	} {
		host, port, err := net.SplitHostPort(e.addr)
		if err != nil || host == "" || port == "" {
			bad(e.field+"_addr", "want host:port, got %q", e.addr)
			continue
		}
		switch e.tls {
		case "implicit", "starttls":
		case "none":
			// A password in clear text may only travel over loopback.
			if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
				bad(e.field+"_tls", "none is only allowed for a loopback address, not %q", host)
			}
		default:
			bad(e.field+"_tls", "want implicit, starttls or none, got %q", e.tls)
		}
	}
	if m.IMAPUser == "" {
		bad("mail.imap_user", "must not be empty when mail is enabled")
	}
	if m.IMAPPassword == "" {
		bad("mail.imap_password", "must not be empty when mail is enabled (or use imap_password_file)")
	}
	if m.SMTPUser != "" && m.SMTPPassword == "" {
		bad("mail.smtp_password", "must not be empty when smtp_user is set (or use smtp_password_file)")
	}
	if strings.TrimSpace(m.Mailbox) == "" {
		bad("mail.mailbox", "must not be empty")
	}
	if a, err := mail.ParseAddress(m.From); err != nil || !strings.Contains(a.Address, "@") || strings.ContainsAny(m.From, "\r\n") {
		bad("mail.from", "want the bot's address, e.g. \"Istota <istota@example.org>\", got %q", m.From)
	}
	if m.PollInterval.Duration < 10*time.Second {
		bad("mail.poll_interval", "must be at least 10s")
	}
	if m.MaxMessageMB < 1 || m.MaxMessageMB > 100 {
		bad("mail.max_message_mb", "must be 1 to 100")
	}
	if m.MaxSendsPerHour < 0 {
		bad("mail.max_sends_per_hour", "must be 0 (no sending) or more")
	}
	for _, d := range m.AllowedRecipientDomains {
		name := strings.TrimPrefix(strings.TrimSpace(d), "*.")
		if name == "" || strings.ContainsAny(name, "@/:* \t") || !strings.Contains(name, ".") && name != "localhost" {
			bad("mail.allowed_recipient_domains", "%q is not a domain (use example.org or *.example.org)", d)
		}
	}
}

// validateBriefings checks the [briefings] defaults.
func (c Config) validateBriefings(bad func(field, format string, args ...any)) {
	b := c.Briefings
	known := map[string]bool{}
	var names []string
	for _, k := range userconfig.Components() {
		known[string(k)] = true
		names = append(names, string(k))
	}
	seen, news := map[string]bool{}, false
	for _, comp := range b.DefaultComponents {
		switch {
		case !known[comp]:
			bad("briefings.default_components", "%q is not a component (%s)", comp, strings.Join(names, ", "))
		case seen[comp]:
			bad("briefings.default_components", "%q is listed twice", comp)
		}
		seen[comp], news = true, news || comp == string(userconfig.ComponentNews)
	}
	for _, f := range b.DefaultFeeds {
		u, err := url.Parse(f)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
			bad("briefings.default_feeds", "%q is not an http(s) URL without credentials", f)
		}
	}
	if news && len(b.DefaultFeeds) == 0 {
		bad("briefings.default_feeds", "default_components has news, which needs at least one default feed")
	}
	if b.MaxItemsPerFeed < 1 || b.MaxItemsPerFeed > 50 {
		bad("briefings.max_items_per_feed", "must be 1 to 50")
	}
	if b.ComponentTimeout.Duration < time.Second || b.ComponentTimeout.Duration > 5*time.Minute {
		bad("briefings.component_timeout", "must be 1s to 5m")
	}
	m := b.Markets
	if m.QuoteURL != "" {
		u, err := url.Parse(strings.ReplaceAll(m.QuoteURL, "{symbol}", "x"))
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil:
			bad("briefings.markets.quote_url", "%q is not an http(s) URL without credentials", m.QuoteURL)
		case !strings.Contains(m.QuoteURL, "{symbol}"):
			bad("briefings.markets.quote_url", "%q has no {symbol} to put each symbol in", m.QuoteURL)
		}
	}
	for _, f := range []struct {
		field string
		list  []string
	}{{"briefings.markets.futures", m.Futures}, {"briefings.markets.indices", m.Indices}} {
		field, list := f.field, f.list
		if len(list) > 20 {
			bad(field, "lists more than 20 symbols")
		}
		for _, s := range list {
			if !marketSymbolRE.MatchString(s) {
				bad(field, "%q is not a symbol (letters, digits and ^ . _ = - up to 32 characters)", s)
			}
		}
	}
}

// marketSymbolRE is what a quote symbol may look like (Stooq: es.f, ^spx, eurusd).
var marketSymbolRE = regexp.MustCompile(`^[A-Za-z0-9^._=-]{1,32}$`)

// resolveSecretFiles reads secrets given as *_file. A secret given both ways is an error,
// so an admin never wonders which one is in effect.
func (c *Config) resolveSecretFiles() error {
	pairs := []struct {
		field string
		value *string
		file  string
	}{
		{"nextcloud.shared_secret", &c.Nextcloud.SharedSecret, c.Nextcloud.SharedSecretFile},
		{"talk.bot_secret", &c.Talk.BotSecret, c.Talk.BotSecretFile},
		{"brain.api_key", &c.Brain.APIKey, c.Brain.APIKeyFile},
		{"brain.oauth_token", &c.Brain.OAuthToken, c.Brain.OAuthTokenFile},
		{"nextcloud.bot_password", &c.Nextcloud.BotPassword, c.Nextcloud.BotPasswordFile},
		{"memory.embeddings_key", &c.Memory.EmbeddingsKey, c.Memory.EmbeddingsKeyFile},
		{"mail.imap_password", &c.Mail.IMAPPassword, c.Mail.IMAPPasswordFile},
		{"mail.smtp_password", &c.Mail.SMTPPassword, c.Mail.SMTPPasswordFile},
		{"transcription.api_key", &c.Transcription.APIKey, c.Transcription.APIKeyFile},
	}
	for _, p := range pairs {
		if p.file == "" {
			continue
		}
		if *p.value != "" {
			return &FieldError{Field: p.field, Message: "set both directly and through " + p.field + "_file; keep one"}
		}
		b, err := os.ReadFile(p.file)
		if err != nil {
			return &FieldError{Field: p.field + "_file", Message: fmt.Sprintf("cannot read: %v", errors.Unwrap(err))}
		}
		*p.value = strings.TrimSpace(string(b))
	}
	return nil
}

// applyEnv walks the struct and sets every field whose env tag is present in env.
func applyEnv(cfg *Config, env []string) error {
	vars := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	return walk(reflect.ValueOf(cfg).Elem(), func(f reflect.StructField, v reflect.Value) error {
		name := f.Tag.Get("env")
		raw, ok := vars[name]
		if name == "" || !ok {
			return nil
		}
		switch v.Interface().(type) {
		case string:
			v.SetString(raw)
		case int, int64:
			n, err := strconv.ParseInt(raw, 10, 64)
			if err != nil {
				return fmt.Errorf("config: %s: want an integer, got %q", name, raw)
			}
			v.SetInt(n)
		case bool:
			b, err := strconv.ParseBool(raw)
			if err != nil {
				return fmt.Errorf("config: %s: want true or false, got %q", name, raw)
			}
			v.SetBool(b)
		case Duration:
			d, err := time.ParseDuration(raw)
			if err != nil {
				return fmt.Errorf("config: %s: want a duration like 30s, got %q", name, raw)
			}
			v.Set(reflect.ValueOf(Duration{d}))
		default:
			return fmt.Errorf("config: %s: unsupported field type %s", name, v.Type())
		}
		return nil
	})
}

func walk(v reflect.Value, fn func(reflect.StructField, reflect.Value) error) error {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f, fv := t.Field(i), v.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(Duration{}) {
			if err := walk(fv, fn); err != nil {
				return err
			}
			continue
		}
		if err := fn(f, fv); err != nil {
			return err
		}
	}
	return nil
}

// Redacted renders the configuration as TOML with every secret replaced, for
// `istota config` and support requests.
func (c Config) Redacted() string {
	cp := c
	_ = walk(reflect.ValueOf(&cp).Elem(), func(f reflect.StructField, v reflect.Value) error {
		if f.Tag.Get("secret") == "true" && v.String() != "" {
			v.SetString("<redacted>")
		}
		return nil
	})
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(cp); err != nil {
		return "config: " + err.Error()
	}
	return buf.String()
}
