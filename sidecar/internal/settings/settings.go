// Package settings holds the admin settings made in Nextcloud's admin panel: stored in the
// sidecar database, layered over the config file at start, validated with the config's
// own rules and reported field by field. Access lists and the token budget take effect at
// once (this package decides who may use the bot and refuses work over budget); the rest
// is applied at the next start and reported as restart_required until then.
//
// The brain API key is write-only and never stored in the database, which admins'
// sandboxes may read: it is a 0600 file under data_dir/secrets/.
package settings

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/istota/istota/sidecar/internal/config"
	"github.com/istota/istota/sidecar/internal/netproxy"
	"github.com/istota/istota/sidecar/internal/store"
)

// Admin is the admin panel's view of the settings (docs/user-api.md, AdminSettings).
type Admin struct {
	Access  Access  `json:"access"`
	Sandbox Sandbox `json:"sandbox"`
	Network Network `json:"network"`
	Brain   Brain   `json:"brain"`
	Workers Workers `json:"workers"`
	Limits  Limits  `json:"limits"`
	// Approvals are the default policies per risk tier (users may only tighten them).
	Approvals Approvals `json:"approvals"`
}

// Approvals mirrors config.Approvals.
type Approvals struct {
	Read           string `json:"read"`
	WriteOwn       string `json:"write_own"`
	External       string `json:"external"`
	Admin          string `json:"admin"`
	TimeoutSeconds int    `json:"timeout_seconds"`
}

// Access says who may use the bot and who is an Istota admin. Empty Users and Groups
// mean every Nextcloud user.
type Access struct {
	Users       []string `json:"users"`
	Groups      []string `json:"groups"`
	AdminUsers  []string `json:"admin_users"`
	AdminGroups []string `json:"admin_groups"`
}

// Sandbox mirrors config.Sandbox; Enabled is the inverse of sandbox.unsandboxed.
type Sandbox struct {
	Enabled      bool `json:"enabled"`
	AdminDBWrite bool `json:"admin_db_write"`
	MemoryMB     int  `json:"memory_mb"`
	MaxProcesses int  `json:"max_processes"`
	MaxOpenFiles int  `json:"max_open_files"`
	CPUSeconds   int  `json:"cpu_seconds"`
}

// Network mirrors config.Network.AllowedHosts.
type Network struct {
	AllowedHosts []string `json:"allowed_hosts"`
}

// Brain mirrors config.Brain; the key itself is never shown, only whether one is set.
type Brain struct {
	Kind          string `json:"kind"`
	Model         string `json:"model"`
	APIBaseURL    string `json:"api_base_url"`
	APIKeySet     bool   `json:"api_key_set"`
	OAuthTokenSet bool   `json:"oauth_token_set"`
	// Login is what the model requests are authenticated with now: LoginSubscription,
	// LoginAPIKey or LoginNone.
	Login            string `json:"login"`
	DailyTokenBudget int64  `json:"daily_token_budget"`
}

// Workers mirrors config.Workers.
type Workers struct {
	Max                 int `json:"max"`
	ReservedInteractive int `json:"reserved_interactive"`
}

// Limits gathers brain.task_timeout, memory.retention_days and memory.history_days.
type Limits struct {
	TaskTimeoutSeconds int `json:"task_timeout_seconds"`
	RetentionDays      int `json:"retention_days"`
	HistoryDays        int `json:"history_days"`
}

// ErrMalformed is an update that is not a JSON object of sections.
var ErrMalformed = errors.New("malformed settings update")

// FieldErrors are the refused fields of one update, keyed by setting name
// ("workers.max"); nothing was stored.
type FieldErrors map[string]string

func (f FieldErrors) Error() string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ": " + f[k]
	}
	return "invalid settings: " + strings.Join(parts, "; ")
}

// Options configure a Store.
type Options struct {
	// DataDir holds secrets/ (the brain API key).
	DataDir string
	// Brains are the brain kinds this binary can run (default: claude).
	Brains []string
	Clock  func() time.Time
	Logger *slog.Logger
}

// Store is the admin settings over one database. It is safe for concurrent use.
type Store struct {
	db   *store.DB
	base config.Config // the config file (and environment) alone
	opts Options

	defs []key // the settings table, fixed at Open

	mu      sync.RWMutex
	current config.Config // base + stored values + key file: what the next start uses
	startup config.Config // what this process was built with
}

// storedPrefix keeps admin settings apart from other rows of the settings table.
const storedPrefix = "admin."

// APIKeyFile is where the brain API key set in the admin panel is kept, relative to
// the data directory.
const APIKeyFile = "secrets/brain_api_key"

// OAuthTokenFile is where the Claude subscription token set in the admin panel is kept.
const OAuthTokenFile = "secrets/brain_oauth_token"

// Login kinds: what authenticates the model requests.
const (
	LoginSubscription = "subscription_token" // brain.oauth_token, claude brain only
	LoginAPIKey       = "api_key"
	LoginNone         = "none"
)

// Login is the model credential in effect: its kind and the secret itself.
type Login struct {
	Kind   string
	Secret string
}

// LoginOf is the credential c authenticates with: a subscription token wins over an API
// key for the claude brain (the admin set it to avoid per-token billing); the openai
// brain only knows keys.
func LoginOf(c config.Config) Login {
	switch {
	case c.Brain.Kind == "claude" && c.Brain.OAuthToken != "":
		return Login{Kind: LoginSubscription, Secret: c.Brain.OAuthToken}
	case c.Brain.APIKey != "":
		return Login{Kind: LoginAPIKey, Secret: c.Brain.APIKey}
	}
	return Login{Kind: LoginNone}
}

// Open loads the stored settings and layers them over base. Stored values that no
// longer validate (the config file changed under them) are ignored with a warning, so a
// setting made in the panel can never keep the sidecar from starting.
func Open(ctx context.Context, db *store.DB, base config.Config, opts Options) (*Store, error) {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{db: db, base: base, opts: opts}
	stored, err := s.load(ctx)
	if err != nil {
		return nil, err
	}
	if len(opts.Brains) == 0 {
		s.opts.Brains = []string{"claude"}
	}
	s.defs = definitions(s.opts.Brains)
	eff, bad := s.layer(stored)
	if len(bad) > 0 {
		keys := make([]string, 0, len(bad))
		for k := range bad {
			keys = append(keys, k)
			delete(stored, k)
		}
		sort.Strings(keys)
		s.opts.Logger.Warn("ignoring stored admin settings that are not valid over the config file", "keys", strings.Join(keys, ","))
		eff, _ = s.layer(stored)
	}
	key, err := s.readSecret(APIKeyFile)
	if err != nil {
		return nil, err
	}
	if key != "" {
		eff.Brain.APIKey = key
	}
	tok, err := s.readSecret(OAuthTokenFile)
	if err != nil {
		return nil, err
	}
	if tok != "" {
		eff.Brain.OAuthToken = tok
	}
	s.current, s.startup = eff, eff
	return s, nil
}

// Effective is the configuration this process should run with: the config file with
// the admin's stored settings and API key over it.
func (s *Store) Effective() config.Config {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.current
}

// APIKey is the model API key in effect now. It applies live: the model gateway and the
// openai brain ask for it on every request, so a key pasted into the admin panel is
// used by the next task without a restart.
func (s *Store) APIKey() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.current.Brain.APIKey
}

// Login is the model credential in effect now, applied live like APIKey.
func (s *Store) Login() Login {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return LoginOf(s.current)
}

// Get returns the settings as the panel shows them and the keys whose new value only
// takes effect at the next start.
func (s *Store) Get() (Admin, []string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return view(s.current), s.restartRequired()
}

// restartRequired lists the keys whose value differs from the one in effect since
// start and that are not applied live. Callers hold mu.
func (s *Store) restartRequired() []string {
	out := []string{}
	for _, k := range s.defs {
		if k.live {
			continue
		}
		a, _ := json.Marshal(k.get(&s.current))
		b, _ := json.Marshal(k.get(&s.startup))
		if !bytes.Equal(a, b) {
			out = append(out, k.name)
		}
	}
	return out
}

// Update applies a partial Admin (as JSON, possibly with the write-only
// "brain.api_key") and returns the new view. Every problem is reported at once as
// FieldErrors and then nothing is stored.
func (s *Store) Update(ctx context.Context, patch []byte) (Admin, []string, error) {
	var sections map[string]map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(patch))
	if err := dec.Decode(&sections); err != nil {
		return Admin{}, nil, fmt.Errorf("%w: the body must be a JSON object of sections such as {\"workers\": {\"max\": 4}}", ErrMalformed)
	}
	s.mu.Lock()
	defer s.mu.Unlock()

	bad := FieldErrors{}
	values := map[string]json.RawMessage{}
	var apiKey, oauthToken *string
	for section, fields := range sections {
		for field, raw := range fields {
			name := section + "." + field
			switch name {
			case "brain.api_key", "brain.oauth_token":
				var k string
				if err := json.Unmarshal(raw, &k); err != nil {
					bad[name] = "must be a string"
					continue
				}
				k = strings.TrimSpace(k)
				if strings.IndexFunc(k, unicode.IsControl) >= 0 || len(k) > 4096 {
					bad[name] = "must be one line of at most 4096 characters"
					continue
				}
				if name == "brain.api_key" {
					apiKey = &k
				} else {
					oauthToken = &k
				}
				continue
			case "brain.api_key_set", "brain.oauth_token_set", "brain.login":
				continue // shown, never set: the panel may send its whole form back
			}
			if s.byName(name) == nil {
				bad[name] = "unknown setting"
				continue
			}
			values[name] = raw
		}
	}
	stored, err := s.load(ctx)
	if err != nil {
		return Admin{}, nil, err
	}
	next := maps(stored)
	for name, raw := range values {
		k := s.byName(name)
		probe := s.current
		if err := k.set(&probe, raw); err != nil {
			bad[name] = err.Error()
			continue
		}
		if msg := k.check(&probe); msg != "" {
			bad[name] = msg
			continue
		}
		canon, _ := json.Marshal(k.get(&probe))
		next[name] = canon
	}
	// Cross-field rules (workers.reserved_interactive below workers.max, …) are checked
	// on the whole layered configuration, so every problem is reported at once.
	eff, layered := s.layer(next)
	for k, v := range layered {
		if _, ok := bad[k]; !ok {
			bad[k] = v
		}
	}
	if len(bad) > 0 {
		return Admin{}, nil, bad
	}
	if err := s.save(ctx, values, next); err != nil {
		return Admin{}, nil, err
	}
	eff.Brain.APIKey = s.current.Brain.APIKey
	eff.Brain.OAuthToken = s.current.Brain.OAuthToken
	if apiKey != nil {
		if err := s.writeSecret(APIKeyFile, *apiKey); err != nil {
			return Admin{}, nil, err
		}
		eff.Brain.APIKey = *apiKey
		if *apiKey == "" {
			eff.Brain.APIKey = s.base.Brain.APIKey
		}
	}
	if oauthToken != nil {
		if err := s.writeSecret(OAuthTokenFile, *oauthToken); err != nil {
			return Admin{}, nil, err
		}
		eff.Brain.OAuthToken = *oauthToken
		if *oauthToken == "" {
			eff.Brain.OAuthToken = s.base.Brain.OAuthToken
		}
	}
	s.current = eff
	return view(s.current), s.restartRequired(), nil
}

func maps(in map[string]json.RawMessage) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// layer applies stored values over base and validates the result, returning the
// problems keyed by setting name.
func (s *Store) layer(stored map[string]json.RawMessage) (config.Config, FieldErrors) {
	cfg := s.base
	cfg.Network.AllowedHosts = slices.Clone(s.base.Network.AllowedHosts)
	bad := FieldErrors{}
	for name, raw := range stored {
		k := s.byName(name)
		if k == nil {
			continue // a key of a newer or older version: harmless
		}
		if err := k.set(&cfg, raw); err != nil {
			bad[name] = err.Error()
		}
	}
	for _, k := range s.defs {
		if msg := k.check(&cfg); msg != "" {
			bad[k.name] = msg
		}
	}
	if err := cfg.Validate(); err != nil {
		var fes []*config.FieldError
		collectFieldErrors(err, &fes)
		for _, fe := range fes {
			for _, name := range fieldKeys(fe.Field) {
				if _, ok := bad[name]; !ok {
					bad[name] = fe.Message
				}
			}
		}
	}
	return cfg, bad
}

func collectFieldErrors(err error, out *[]*config.FieldError) {
	var fe *config.FieldError
	if errors.As(err, &fe) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				collectFieldErrors(e, out)
			}
			return
		}
		*out = append(*out, fe)
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			collectFieldErrors(e, out)
		}
	}
}

// fieldKeys maps a config.FieldError field to the settings keys it concerns. Config
// fields the panel does not show are reported under their own name.
func fieldKeys(field string) []string {
	switch field {
	case "brain.task_timeout":
		return []string{"limits.task_timeout_seconds"}
	case "memory":
		return []string{"limits.retention_days"}
	case "memory.history_days":
		return []string{"limits.history_days"}
	case "sandbox.max_open_files":
		return []string{"sandbox.max_open_files", "sandbox.cpu_seconds"}
	case "sandbox.unsandboxed":
		return []string{"sandbox.enabled"}
	}
	return []string{field}
}

func (s *Store) load(ctx context.Context) (map[string]json.RawMessage, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT key, value FROM settings WHERE key LIKE 'admin.%'`)
	if err != nil {
		return nil, fmt.Errorf("settings: load: %w", err)
	}
	defer rows.Close()
	out := map[string]json.RawMessage{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, fmt.Errorf("settings: load: %w", err)
		}
		out[strings.TrimPrefix(k, storedPrefix)] = json.RawMessage(v)
	}
	return out, rows.Err()
}

func (s *Store) save(ctx context.Context, changed map[string]json.RawMessage, next map[string]json.RawMessage) error {
	tx, err := s.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("settings: save: %w", err)
	}
	defer tx.Rollback()
	now := store.FormatTime(s.opts.Clock())
	for name := range changed {
		_, err := tx.ExecContext(ctx, `INSERT INTO settings (key, value, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
			storedPrefix+name, string(next[name]), now)
		if err != nil {
			return fmt.Errorf("settings: save %s: %w", name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("settings: save: %w", err)
	}
	return nil
}

// readSecret reads a secret file (rel to the data directory, e.g. APIKeyFile); "" when
// there is none.
func (s *Store) readSecret(rel string) (string, error) {
	if s.opts.DataDir == "" {
		return "", nil
	}
	b, err := os.ReadFile(filepath.Join(s.opts.DataDir, rel))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("settings: read %s: %w", rel, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// writeSecret replaces a secret file atomically (0600 in a 0700 folder); "" removes it.
func (s *Store) writeSecret(rel, key string) error {
	if s.opts.DataDir == "" {
		return errors.New("settings: no data directory for " + rel)
	}
	path := filepath.Join(s.opts.DataDir, rel)
	if key == "" {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("settings: remove %s: %w", rel, err)
		}
		return nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("settings: create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("settings: secure %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(rel)+"-*")
	if err != nil {
		return fmt.Errorf("settings: write %s: %w", rel, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("settings: write %s: %w", rel, err)
	}
	if _, err := f.WriteString(key + "\n"); err != nil {
		return fmt.Errorf("settings: write %s: %w", rel, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("settings: write %s: %w", rel, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("settings: write %s: %w", rel, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("settings: write %s: %w", rel, err)
	}
	ok = true
	return nil
}

// view renders a configuration as the panel shows it.
func view(c config.Config) Admin {
	list := func(l []string) []string {
		if l == nil {
			return []string{}
		}
		return slices.Clone(l)
	}
	return Admin{
		Access: Access{Users: list(c.Access.Users), Groups: list(c.Access.Groups),
			AdminUsers: list(c.Access.AdminUsers), AdminGroups: list(c.Access.AdminGroups)},
		Sandbox: Sandbox{Enabled: !c.Sandbox.Unsandboxed, AdminDBWrite: c.Sandbox.AdminDBWrite, MemoryMB: c.Sandbox.MemoryMB,
			MaxProcesses: c.Sandbox.MaxProcesses, MaxOpenFiles: c.Sandbox.MaxOpenFiles, CPUSeconds: c.Sandbox.CPUSeconds},
		Network: Network{AllowedHosts: list(c.Network.AllowedHosts)},
		Brain: Brain{Kind: c.Brain.Kind, Model: c.Brain.Model, APIBaseURL: c.Brain.APIBaseURL,
			APIKeySet: c.Brain.APIKey != "", OAuthTokenSet: c.Brain.OAuthToken != "", Login: LoginOf(c).Kind,
			DailyTokenBudget: c.Brain.DailyTokenBudget},
		Workers: Workers{Max: c.Workers.Max, ReservedInteractive: c.Workers.ReservedInteractive},
		Limits: Limits{TaskTimeoutSeconds: int(c.Brain.TaskTimeout.Duration / time.Second),
			RetentionDays: c.Memory.RetentionDays, HistoryDays: c.Memory.HistoryDays},
		Approvals: Approvals{Read: c.Approvals.Read, WriteOwn: c.Approvals.WriteOwn, External: c.Approvals.External,
			Admin: c.Approvals.Admin, TimeoutSeconds: int(c.Approvals.Timeout.Duration / time.Second)},
	}
}

// key is one setting: how it reads and writes the configuration, its own checks beyond
// config.Validate, and whether the running sidecar applies it at once.
type key struct {
	name  string
	live  bool
	get   func(c *config.Config) any
	set   func(c *config.Config, raw json.RawMessage) error
	check func(c *config.Config) string
}

func (s *Store) byName(name string) *key {
	for i := range s.defs {
		if s.defs[i].name == name {
			return &s.defs[i]
		}
	}
	return nil
}

func setInt(dst *int) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var v int
		if err := json.Unmarshal(raw, &v); err != nil {
			return errors.New("must be a whole number")
		}
		*dst = v
		return nil
	}
}

func setBool(dst *bool) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var v bool
		if err := json.Unmarshal(raw, &v); err != nil {
			return errors.New("must be true or false")
		}
		*dst = v
		return nil
	}
}

func setString(dst *string) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return errors.New("must be a string")
		}
		*dst = strings.TrimSpace(v)
		return nil
	}
}

func setList(dst *[]string) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		var v []string
		if err := json.Unmarshal(raw, &v); err != nil {
			return errors.New("must be a list of strings")
		}
		out := []string{}
		for _, s := range v {
			s = strings.TrimSpace(s)
			if s != "" && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
		*dst = out
		return nil
	}
}

// checkNames refuses entries that cannot be Nextcloud user or group ids.
func checkNames(l []string) string {
	if len(l) > 1000 {
		return "at most 1000 entries"
	}
	for _, s := range l {
		if len(s) > 255 || strings.IndexFunc(s, unicode.IsControl) >= 0 {
			return fmt.Sprintf("%q is not a user or group id", s)
		}
	}
	return ""
}

func noCheck(*config.Config) string { return "" }

// approvalKey is the policy of one risk tier; the panel's change applies to the next
// action at once.
func approvalKey(name string, field func(c *config.Config) *string) key {
	return key{name: name, live: true,
		get:   func(c *config.Config) any { return *field(c) },
		set:   func(c *config.Config, r json.RawMessage) error { return setString(field(c))(r) },
		check: noCheck}
}

// definitions is every setting the panel shows, in the panel's order.
func definitions(brains []string) []key {
	return []key{
		{name: "access.users", live: true,
			get:   func(c *config.Config) any { return c.Access.Users },
			set:   func(c *config.Config, r json.RawMessage) error { return setList(&c.Access.Users)(r) },
			check: func(c *config.Config) string { return checkNames(c.Access.Users) }},
		{name: "access.groups", live: true,
			get:   func(c *config.Config) any { return c.Access.Groups },
			set:   func(c *config.Config, r json.RawMessage) error { return setList(&c.Access.Groups)(r) },
			check: func(c *config.Config) string { return checkNames(c.Access.Groups) }},
		{name: "access.admin_users", live: true,
			get:   func(c *config.Config) any { return c.Access.AdminUsers },
			set:   func(c *config.Config, r json.RawMessage) error { return setList(&c.Access.AdminUsers)(r) },
			check: func(c *config.Config) string { return checkNames(c.Access.AdminUsers) }},
		{name: "access.admin_groups", live: true,
			get:   func(c *config.Config) any { return c.Access.AdminGroups },
			set:   func(c *config.Config, r json.RawMessage) error { return setList(&c.Access.AdminGroups)(r) },
			check: func(c *config.Config) string { return checkNames(c.Access.AdminGroups) }},
		{name: "sandbox.enabled",
			get: func(c *config.Config) any { return !c.Sandbox.Unsandboxed },
			set: func(c *config.Config, r json.RawMessage) error {
				var on bool
				if err := setBool(&on)(r); err != nil {
					return err
				}
				c.Sandbox.Unsandboxed = !on
				return nil
			},
			check: noCheck},
		{name: "sandbox.admin_db_write",
			get:   func(c *config.Config) any { return c.Sandbox.AdminDBWrite },
			set:   func(c *config.Config, r json.RawMessage) error { return setBool(&c.Sandbox.AdminDBWrite)(r) },
			check: noCheck},
		{name: "sandbox.memory_mb",
			get:   func(c *config.Config) any { return c.Sandbox.MemoryMB },
			set:   func(c *config.Config, r json.RawMessage) error { return setInt(&c.Sandbox.MemoryMB)(r) },
			check: noCheck},
		{name: "sandbox.max_processes",
			get:   func(c *config.Config) any { return c.Sandbox.MaxProcesses },
			set:   func(c *config.Config, r json.RawMessage) error { return setInt(&c.Sandbox.MaxProcesses)(r) },
			check: noCheck},
		{name: "sandbox.max_open_files",
			get: func(c *config.Config) any { return c.Sandbox.MaxOpenFiles },
			set: func(c *config.Config, r json.RawMessage) error { return setInt(&c.Sandbox.MaxOpenFiles)(r) },
			check: func(c *config.Config) string {
				if c.Sandbox.MaxOpenFiles < 0 {
					return "must be 0 (unlimited) or more"
				}
				return ""
			}},
		{name: "sandbox.cpu_seconds",
			get: func(c *config.Config) any { return c.Sandbox.CPUSeconds },
			set: func(c *config.Config, r json.RawMessage) error { return setInt(&c.Sandbox.CPUSeconds)(r) },
			check: func(c *config.Config) string {
				if c.Sandbox.CPUSeconds < 0 {
					return "must be 0 (unlimited) or more"
				}
				return ""
			}},
		{name: "network.allowed_hosts",
			get: func(c *config.Config) any { return c.Network.AllowedHosts },
			set: func(c *config.Config, r json.RawMessage) error { return setList(&c.Network.AllowedHosts)(r) },
			check: func(c *config.Config) string {
				if _, err := netproxy.ParseRules(c.Network.AllowedHosts); err != nil {
					return err.Error()
				}
				return ""
			}},
		{name: "brain.kind",
			get: func(c *config.Config) any { return c.Brain.Kind },
			set: func(c *config.Config, r json.RawMessage) error { return setString(&c.Brain.Kind)(r) },
			check: func(c *config.Config) string {
				if !slices.Contains(brains, c.Brain.Kind) {
					return fmt.Sprintf("the %q brain is not available in this version (supported: %s)", c.Brain.Kind, strings.Join(brains, ", "))
				}
				return ""
			}},
		{name: "brain.model",
			get: func(c *config.Config) any { return c.Brain.Model },
			set: func(c *config.Config, r json.RawMessage) error { return setString(&c.Brain.Model)(r) },
			check: func(c *config.Config) string {
				if len(c.Brain.Model) > 200 || strings.IndexFunc(c.Brain.Model, unicode.IsSpace) >= 0 {
					return "must be a model name without spaces"
				}
				return ""
			}},
		{name: "brain.api_base_url",
			get:   func(c *config.Config) any { return c.Brain.APIBaseURL },
			set:   func(c *config.Config, r json.RawMessage) error { return setString(&c.Brain.APIBaseURL)(r) },
			check: noCheck},
		{name: "brain.daily_token_budget", live: true,
			get: func(c *config.Config) any { return c.Brain.DailyTokenBudget },
			set: func(c *config.Config, r json.RawMessage) error {
				var v int64
				if err := json.Unmarshal(r, &v); err != nil {
					return errors.New("must be a whole number")
				}
				c.Brain.DailyTokenBudget = v
				return nil
			},
			check: func(c *config.Config) string {
				if c.Brain.DailyTokenBudget < 0 {
					return "must be 0 (no budget) or more"
				}
				return ""
			}},
		{name: "workers.max",
			get:   func(c *config.Config) any { return c.Workers.Max },
			set:   func(c *config.Config, r json.RawMessage) error { return setInt(&c.Workers.Max)(r) },
			check: noCheck},
		{name: "workers.reserved_interactive",
			get:   func(c *config.Config) any { return c.Workers.ReservedInteractive },
			set:   func(c *config.Config, r json.RawMessage) error { return setInt(&c.Workers.ReservedInteractive)(r) },
			check: noCheck},
		{name: "limits.task_timeout_seconds",
			get: func(c *config.Config) any { return int(c.Brain.TaskTimeout.Duration / time.Second) },
			set: func(c *config.Config, r json.RawMessage) error {
				var v int
				if err := setInt(&v)(r); err != nil {
					return err
				}
				c.Brain.TaskTimeout = config.Duration{Duration: time.Duration(v) * time.Second}
				return nil
			},
			check: func(c *config.Config) string {
				if c.Brain.TaskTimeout.Duration < 10*time.Second || c.Brain.TaskTimeout.Duration > 24*time.Hour {
					return "must be between 10 and 86400 seconds"
				}
				return ""
			}},
		approvalKey("approvals.read", func(c *config.Config) *string { return &c.Approvals.Read }),
		approvalKey("approvals.write_own", func(c *config.Config) *string { return &c.Approvals.WriteOwn }),
		approvalKey("approvals.external", func(c *config.Config) *string { return &c.Approvals.External }),
		approvalKey("approvals.admin", func(c *config.Config) *string { return &c.Approvals.Admin }),
		{name: "approvals.timeout_seconds", live: true,
			get: func(c *config.Config) any { return int(c.Approvals.Timeout.Duration / time.Second) },
			set: func(c *config.Config, r json.RawMessage) error {
				var v int
				if err := setInt(&v)(r); err != nil {
					return err
				}
				c.Approvals.Timeout = config.Duration{Duration: time.Duration(v) * time.Second}
				return nil
			},
			check: noCheck},
		{name: "limits.retention_days",
			get: func(c *config.Config) any { return c.Memory.RetentionDays },
			set: func(c *config.Config, r json.RawMessage) error { return setInt(&c.Memory.RetentionDays)(r) },
			check: func(c *config.Config) string {
				if c.Memory.RetentionDays < 0 {
					return "must be 0 (keep everything) or more"
				}
				return ""
			}},
		// Live: the nightly run reads it each time.
		{name: "limits.history_days", live: true,
			get: func(c *config.Config) any { return c.Memory.HistoryDays },
			set: func(c *config.Config, r json.RawMessage) error { return setInt(&c.Memory.HistoryDays)(r) },
			check: func(c *config.Config) string {
				if c.Memory.HistoryDays < 0 {
					return "must be 0 (keep everything) or more"
				}
				return ""
			}},
	}
}
