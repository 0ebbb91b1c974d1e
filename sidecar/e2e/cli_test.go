package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/istota/istota/sidecar/internal/config"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

func runCLI(t *testing.T, cfg string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(binary, append(args, "-c", cfg)...)
	cmd.Env = os.Environ()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func TestCommandLine(t *testing.T) {
	api := fakeapi.New(t, fakeapi.Script{fakeapi.Reply("Paris.")})
	sc := newSidecar(t, sidecarOptions{talkURL: "http://127.0.0.1:9", apiURL: api.URL(), apiKey: apiKey, botSecret: botSecret, logLevel: "warn"})

	out, stderr, err := runCLI(t, sc.cfgPath, "task", "What is the capital of France?", "-u", "erin", "--dry-run")
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, stderr)
	}
	if !strings.Contains(out, "## Request from erin") || !strings.Contains(out, "What is the capital of France?") {
		t.Fatalf("dry run printed:\n%s", out)
	}
	if len(api.MessageRequests()) != 0 {
		t.Fatal("a dry run called the model")
	}

	out, stderr, err = runCLI(t, sc.cfgPath, "task", "What is the capital of France?", "-u", "erin")
	if err != nil || strings.TrimSpace(out) != "Paris." {
		t.Fatalf("task: %v, stdout %q\n%s", err, out, stderr)
	}

	out, _, err = runCLI(t, sc.cfgPath, "list")
	if err != nil || !strings.Contains(out, "completed") || !strings.Contains(out, "erin") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, sc.cfgPath, "show", "1")
	if err != nil || !strings.Contains(out, "Task #1  completed") || !strings.Contains(out, "Paris.") {
		t.Fatalf("show: %v\n%s", err, out)
	}
	if _, stderr, err = runCLI(t, sc.cfgPath, "show", "99"); err == nil || !strings.Contains(stderr, "no task #99") {
		t.Fatalf("show of a missing task: %v %s", err, stderr)
	}
	out, _, err = runCLI(t, sc.cfgPath, "config")
	if err != nil || strings.Contains(out, apiKey) || strings.Contains(out, botSecret) || !strings.Contains(out, "<redacted>") {
		t.Fatalf("config printed secrets or nothing: %v\n%s", err, out)
	}
	if _, stderr, err = runCLI(t, sc.cfgPath, "task", "no user"); err == nil || !strings.Contains(stderr, "usage") {
		t.Fatalf("task without -u: %v %s", err, stderr)
	}
}

// TestSetupOutputIsReadBySidecar renders the configuration exactly as `occ istota:setup`
// does (the app's PHP class) and loads it with the sidecar, with awkward characters in
// every value, so the two halves cannot drift apart.
func TestSetupOutputIsReadBySidecar(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	php := filepath.Join(filepath.Dir(file), "../../lib/Service/SidecarConfig.php")
	const script = `require $argv[1];
echo (new OCA\Istota\Service\SidecarConfig($argv[2], $argv[3], $argv[4], $argv[5], $argv[6]))->toToml();`
	shared := `shared"secret\with-quotes-and-backslash-0123456789`
	bot := "bot-secret-Ünïcödé-" + strings.Repeat("x", 40)
	cmd := exec.Command("php", "-r", script, "--", php, "https://cloud.example.com/nc", shared, `Isto"ta`, bot, "127.0.0.1:9876")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("php: %v\n%s", err, out)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "istota.toml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatalf("the sidecar cannot read what setup writes: %v\n%s", err, out)
	}
	if cfg.Nextcloud.URL != "https://cloud.example.com/nc" || cfg.Nextcloud.SharedSecret != shared ||
		cfg.Talk.BotName != `Isto"ta` || cfg.Talk.BotSecret != bot || cfg.Server.Listen != "127.0.0.1:9876" {
		t.Fatalf("values changed on the way: %+v", cfg)
	}
}

func TestDoctor(t *testing.T) {
	f := newFixture(t, fakeapi.Script{}, "doct0001")
	out, _, err := runCLI(t, f.sc.cfgPath, "doctor")
	if err == nil || !strings.Contains(out, "✗ signed round trip") || !strings.Contains(out, "✗ database") {
		t.Fatalf("doctor before serve should fail the database and round trip:\n%s", out)
	}
	f.sc.start()
	out, stderr, err := runCLI(t, f.sc.cfgPath, "doctor")
	if err != nil {
		t.Fatalf("doctor: %v\n%s%s", err, out, stderr)
	}
	for _, want := range []string{"✓ configuration", "✓ database", "✓ agent binary", "✓ sandbox", "✓ sandbox init: ", "✓ model login", "✓ Nextcloud reachable: Nextcloud 31.0.2", "✓ Talk bot secret", "✓ signed round trip"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, apiKey) || strings.Contains(out, botSecret) {
		t.Fatal("doctor printed a secret")
	}
}
