package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultsValidate(t *testing.T) {
	cfg, err := Load("", nil)
	if err != nil {
		t.Fatalf("defaults must load: %v", err)
	}
	if got, want := cfg.Database.Path, filepath.Join("var", "db", "istota.db"); got != want {
		t.Errorf("database path = %q, want %q", got, want)
	}
}

func TestLoadFileEnvAndSecretFile(t *testing.T) {
	dir := t.TempDir()
	secretFile := writeFile(t, dir, "bot.secret", strings.Repeat("b", 64)+"\n")
	path := writeFile(t, dir, "istota.toml", `
data_dir = "state"
[server]
listen = "127.0.0.1:9999"
[nextcloud]
url = "https://cloud.example.com"
shared_secret = "`+strings.Repeat("s", 40)+`"
[talk]
bot_secret_file = "`+secretFile+`"
[brain]
task_timeout = "90s"
`)
	cfg, err := Load(path, []string{"ISTOTA_WORKERS=7", "ISTOTA_MODEL=claude-test", "UNRELATED=1"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != filepath.Join(dir, "state") {
		t.Errorf("data_dir not made relative to the file: %q", cfg.DataDir)
	}
	if cfg.Server.Listen != "127.0.0.1:9999" || cfg.Workers.Max != 7 || cfg.Brain.Model != "claude-test" {
		t.Errorf("file or env not applied: %+v", cfg)
	}
	if cfg.Talk.BotSecret != strings.Repeat("b", 64) {
		t.Errorf("bot secret file not read")
	}
	if cfg.Brain.TaskTimeout.Duration != 90*time.Second {
		t.Errorf("task timeout = %v", cfg.Brain.TaskTimeout)
	}
	red := cfg.Redacted()
	if strings.Contains(red, strings.Repeat("s", 40)) || strings.Contains(red, strings.Repeat("b", 64)) {
		t.Fatalf("Redacted leaks a secret:\n%s", red)
	}
	if !strings.Contains(red, "<redacted>") {
		t.Errorf("Redacted shows no redaction marker:\n%s", red)
	}
}

func TestValidationNamesFields(t *testing.T) {
	cases := []struct {
		name  string
		toml  string
		env   []string
		field string
	}{
		{"bad listen", "[server]\nlisten = \"nope\"\n", nil, "server.listen"},
		{"bad url", "[nextcloud]\nurl = \"ftp://x\"\n", nil, "nextcloud.url"},
		{"short shared secret", "[nextcloud]\nshared_secret = \"short\"\n", nil, "nextcloud.shared_secret"},
		{"short bot secret", "[talk]\nbot_secret = \"short\"\n", nil, "talk.bot_secret"},
		{"unknown brain", "[brain]\nkind = \"magic\"\n", nil, "brain.kind"},
		{"zero workers", "", []string{"ISTOTA_WORKERS=0"}, "workers.max"},
		{"reserved too many", "[workers]\nmax = 2\nreserved_interactive = 2\n", nil, "workers.reserved_interactive"},
		{"bad level", "[log]\nlevel = \"loud\"\n", nil, "log.level"},
		{"unknown database", "[database]\nkind = \"mysql\"\n", nil, "database.kind"},
		{"postgres without dsn", "[database]\nkind = \"postgres\"\n", nil, "database.dsn"},
		{"short lease", "[workers]\nlease = \"1s\"\n", nil, "workers.lease"},
		{"render timeout", "[browse]\nrender = true\nrender_timeout = \"1s\"\n", nil, "browse.render_timeout"},
		{"chromium outside /usr", "[browse]\nrender = true\nchromium_path = \"/opt/chrome/chrome\"\n", nil, "browse.chromium_path"},
		{"render without sandbox", "[browse]\nrender = true\n[sandbox]\nunsandboxed = true\n", nil, "browse.render"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "c.toml", c.toml)
			_, err := Load(path, c.env)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("want a FieldError, got %v", err)
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Fatalf("error %q does not name %s", err, c.field)
			}
		})
	}
}

func TestLoadRejects(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, toml string
		env        []string
		want       string
	}{
		{"unknown key", "[server]\nlisten_port = 1\n", nil, "unknown keys: server.listen_port"},
		{"broken toml", "[server\n", nil, "c.toml"},
		{"env not int", "", []string{"ISTOTA_WORKERS=many"}, "ISTOTA_WORKERS"},
		{"secret twice", "[brain]\napi_key = \"x\"\napi_key_file = \"/etc/hostname\"\n", nil, "brain.api_key"},
		{"secret file missing", "[brain]\napi_key_file = \"/nonexistent/key\"\n", nil, "brain.api_key_file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, dir, "c.toml", c.toml)
			_, err := Load(path, c.env)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want error containing %q", err, c.want)
			}
		})
	}
}

// TestExampleConfigLoads keeps deploy/istota.example.toml in step with the code: every key
// it shows must exist and its values must validate.
func TestExampleConfigLoads(t *testing.T) {
	if _, err := Load("../../../deploy/istota.example.toml", nil); err != nil {
		t.Fatalf("the annotated example config does not load: %v", err)
	}
}
