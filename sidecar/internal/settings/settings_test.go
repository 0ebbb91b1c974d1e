package settings

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/config"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/usage"
)

func openDB(t *testing.T) *store.DB {
	t.Helper()
	db, err := testDBs.OpenPath(context.Background(), filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func base(dataDir string) config.Config {
	c := config.Default()
	c.DataDir = dataDir
	return c
}

func TestStoredSettingsSurviveARestartAndLayerOverTheFile(t *testing.T) {
	ctx := context.Background()
	db, data := openDB(t), t.TempDir()
	s, err := Open(ctx, db, base(data), Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	if _, rr, err := s.Update(ctx, []byte(`{"workers":{"max":8},"limits":{"task_timeout_seconds":120,"retention_days":30},"brain":{"api_key":"sk-panel"},"sandbox":{"enabled":false}}`)); err != nil {
		t.Fatal(err)
	} else if strings.Join(rr, ",") != "sandbox.enabled,workers.max,limits.task_timeout_seconds,limits.retention_days" {
		t.Fatalf("restart_required = %v", rr)
	}
	if got := s.APIKey(); got != "sk-panel" {
		t.Fatalf("the key applies at once (live), got %q", got)
	}
	// The next start runs with them, and nothing waits for a restart any more.
	s2, err := Open(ctx, db, base(data), Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	eff := s2.Effective()
	if eff.Workers.Max != 8 || eff.Brain.TaskTimeout.Duration != 2*time.Minute || eff.Memory.RetentionDays != 30 ||
		!eff.Sandbox.Unsandboxed || eff.Brain.APIKey != "sk-panel" {
		t.Fatalf("effective = %+v", eff)
	}
	if v, rr := s2.Get(); len(rr) != 0 || !v.Brain.APIKeySet || v.Sandbox.Enabled {
		t.Fatalf("after restart: %+v %v", v, rr)
	}
	// Clearing the key removes the file; the config file's key (none here) applies.
	if v, _, err := s2.Update(ctx, []byte(`{"brain":{"api_key":""}}`)); err != nil || v.Brain.APIKeySet {
		t.Fatalf("clear: %+v %v", v, err)
	}
	if _, err := os.Stat(filepath.Join(data, APIKeyFile)); !os.IsNotExist(err) {
		t.Fatalf("key file still there: %v", err)
	}
}

func TestStoredValuesTheFileBrokeAreIgnored(t *testing.T) {
	ctx := context.Background()
	db, data := openDB(t), t.TempDir()
	s, _ := Open(ctx, db, base(data), Options{DataDir: data})
	if _, _, err := s.Update(ctx, []byte(`{"workers":{"reserved_interactive":3,"max":6}}`)); err != nil {
		t.Fatal(err)
	}
	// Only reserved_interactive breaks nothing alone; a stored bad value is dropped at start.
	db.Write.Exec(`UPDATE settings SET value = '0' WHERE key = 'admin.workers.max'`)
	s2, err := Open(ctx, db, base(data), Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	if eff := s2.Effective(); eff.Validate() != nil {
		t.Fatalf("started with an invalid configuration: %v", eff.Validate())
	}
}

func TestUpdateRefusals(t *testing.T) {
	ctx := context.Background()
	db, data := openDB(t), t.TempDir()
	s, _ := Open(ctx, db, base(data), Options{DataDir: data})
	cases := []struct {
		name, body string
		field      string
	}{
		{"unknown brain", `{"brain":{"kind":"openai"}}`, "brain.kind"},
		{"reserved not below max", `{"workers":{"max":2,"reserved_interactive":2}}`, "workers.reserved_interactive"},
		{"too short timeout", `{"limits":{"task_timeout_seconds":1}}`, "limits.task_timeout_seconds"},
		{"negative retention", `{"limits":{"retention_days":-1}}`, "limits.retention_days"},
		{"bad host", `{"network":{"allowed_hosts":["*"]}}`, "network.allowed_hosts"},
		{"wrong type", `{"sandbox":{"memory_mb":"lots"}}`, "sandbox.memory_mb"},
		{"small memory", `{"sandbox":{"memory_mb":10}}`, "sandbox.memory_mb"},
		{"negative budget", `{"brain":{"daily_token_budget":-5}}`, "brain.daily_token_budget"},
		{"unknown key", `{"workers":{"min":1}}`, "workers.min"},
		{"control characters in a user", "{\"access\":{\"users\":[\"a\\u0000b\"]}}", "access.users"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := s.Update(ctx, []byte(c.body))
			var fe FieldErrors
			if !errors.As(err, &fe) || fe[c.field] == "" {
				t.Fatalf("err = %v, want a problem with %s", err, c.field)
			}
		})
	}
	if _, _, err := s.Update(ctx, []byte(`[1,2]`)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("malformed: %v", err)
	}
	var n int
	db.Read.QueryRow(`SELECT COUNT(*) FROM settings`).Scan(&n)
	if n != 0 {
		t.Fatalf("refused updates stored %d rows", n)
	}
}

func TestDecide(t *testing.T) {
	ctx := context.Background()
	db, data := openDB(t), t.TempDir()
	s, _ := Open(ctx, db, base(data), Options{DataDir: data})
	check := func(uid string, groups []string, nc, wantAllowed, wantAdmin bool) {
		t.Helper()
		if a, ad := s.Decide(uid, groups, nc); a != wantAllowed || ad != wantAdmin {
			t.Fatalf("Decide(%s, %v, %t) = %t, %t", uid, groups, nc, a, ad)
		}
	}
	check("anyone", nil, false, true, false) // empty lists: everyone
	if _, _, err := s.Update(ctx, []byte(`{"access":{"users":["ann"],"groups":["staff"],"admin_users":["root2"],"admin_groups":["ops"]}}`)); err != nil {
		t.Fatal(err)
	}
	check("anyone", nil, false, false, false)
	check("ann", nil, false, true, false)
	check("bo", []string{"x", "staff"}, false, true, false)
	check("root2", nil, false, true, true)
	check("op", []string{"ops"}, false, true, true)
	check("ncadmin", nil, true, true, true)
}

type fixedUsage struct{ t usage.Totals }

func (f fixedUsage) Since(context.Context, string, time.Time) (usage.Totals, error) { return f.t, nil }

func TestBudget(t *testing.T) {
	ctx := context.Background()
	db, data := openDB(t), t.TempDir()
	s, _ := Open(ctx, db, base(data), Options{DataDir: data})
	u := fixedUsage{usage.Totals{InputTokens: 300, CacheRead: 100, OutputTokens: 100}}
	b := NewBudget(s, u, nil)
	if msg, err := b.Refusal(ctx, "ann", "Europe/Berlin"); err != nil || msg != "" {
		t.Fatalf("no budget: %q %v", msg, err)
	}
	s.Update(ctx, []byte(`{"brain":{"daily_token_budget":500}}`))
	if msg, _ := b.Refusal(ctx, "ann", "Europe/Berlin"); !strings.Contains(msg, "500") || !strings.Contains(msg, "Europe/Berlin") {
		t.Fatalf("at the budget: %q", msg)
	}
	s.Update(ctx, []byte(`{"brain":{"daily_token_budget":501}}`))
	if msg, _ := b.Refusal(ctx, "ann", "Europe/Berlin"); msg != "" {
		t.Fatalf("under the budget: %q", msg)
	}
}

// A Claude subscription token is write-only like the key, wins over the key for the
// claude brain, and a refusal by the model API is reported only while the refused token
// is in effect.
func TestSubscriptionToken(t *testing.T) {
	ctx := context.Background()
	db, data := openDB(t), t.TempDir()
	file := base(data)
	file.Brain.APIKey = "sk-from-file"
	s, err := Open(ctx, db, file, Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Get(); v.Brain.Login != LoginAPIKey || v.Brain.OAuthTokenSet {
		t.Fatalf("before: %+v", v.Brain)
	}
	v, _, err := s.Update(ctx, []byte(`{"brain":{"oauth_token":" sk-ant-oat01-secret ","oauth_token_set":false,"login":"api_key"}}`))
	if err != nil || v.Brain.Login != LoginSubscription || !v.Brain.OAuthTokenSet || !v.Brain.APIKeySet {
		t.Fatalf("set: %+v %v", v.Brain, err)
	}
	if l := s.Login(); l.Kind != LoginSubscription || l.Secret != "sk-ant-oat01-secret" {
		t.Fatalf("login = %+v", l)
	}
	if st, err := os.Stat(filepath.Join(data, OAuthTokenFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", st, err)
	}
	var stored int
	db.Read.QueryRow(`SELECT count(*) FROM settings WHERE value LIKE '%oat01%'`).Scan(&stored)
	if stored != 0 {
		t.Fatal("the token is in the database")
	}
	// A restart keeps it; the openai brain never uses it.
	s2, err := Open(ctx, db, file, Options{DataDir: data})
	if err != nil || s2.Login().Kind != LoginSubscription {
		t.Fatalf("after restart: %+v %v", s2.Login(), err)
	}
	other := s2.Effective()
	other.Brain.Kind = "openai"
	if l := LoginOf(other); l.Kind != LoginAPIKey || l.Secret != "sk-from-file" {
		t.Fatalf("openai brain login = %+v", l)
	}

	if _, ok, _ := s.LoginRefused(ctx); ok {
		t.Fatal("refused before any refusal")
	}
	if err := s.RecordLoginRefused(ctx, 401); err != nil {
		t.Fatal(err)
	}
	r, ok, err := s2.LoginRefused(ctx) // another process (doctor) sees it too
	if err != nil || !ok || r.Status != 401 || r.Kind != LoginSubscription || !strings.Contains(r.Advice(), "claude setup-token") {
		t.Fatalf("refusal = %+v %t %v", r, ok, err)
	}
	if strings.Contains(r.Advice(), "secret") {
		t.Fatal("the advice shows the token")
	}
	// A new token clears the warning; removing it falls back to the key.
	if _, _, err := s.Update(ctx, []byte(`{"brain":{"oauth_token":"sk-ant-oat01-new"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.LoginRefused(ctx); ok {
		t.Fatal("a new token is still reported as refused")
	}
	if v, _, err := s.Update(ctx, []byte(`{"brain":{"oauth_token":""}}`)); err != nil || v.Brain.Login != LoginAPIKey || v.Brain.OAuthTokenSet {
		t.Fatalf("cleared: %+v %v", v.Brain, err)
	}
}
