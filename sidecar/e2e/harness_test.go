// Package e2e drives the whole sidecar binary the way production does: a signed Talk
// event from the app in, the real Claude Code CLI in the real bwrap sandbox against a
// scripted model API on loopback, and the answer out to a fake Talk that checks every
// signature. Nextcloud itself is the only part faked.
package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/sandbox"
	"github.com/istota/istota/sidecar/internal/sandbox/sandboxtest"
	"github.com/istota/istota/sidecar/internal/signing"
	"github.com/istota/istota/sidecar/internal/store"
)

// binary is the istota executable built once for the whole package, with istota-init
// beside it.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "istota-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The sandbox runs the binary as an unprivileged user: it must be reachable.
	os.Chmod(dir, 0o755)
	binary = filepath.Join(dir, "istota")
	build := exec.Command("go", "build", "-tags", "sqlite_fts5", "-o", binary, "github.com/istota/istota/sidecar/cmd/istota")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building istota:", err)
		os.Exit(1)
	}
	// The sandbox init ships beside istota, and istota finds it there.
	if err := sandboxtest.Build(filepath.Join(dir, sandbox.InitFile)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// claudeBinary finds the Claude Code CLI installed from npm by `make deps`.
func claudeBinary(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	candidates := []string{
		os.Getenv("ISTOTA_CLAUDE_BIN"),
		filepath.Join(root, "nextcloud-app/node_modules/@anthropic-ai/claude-code/bin/claude.exe"),
		filepath.Join(root, "nextcloud-app/node_modules/.bin/claude"),
	}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if p, err := filepath.EvalSymlinks(c); err == nil {
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				return p
			}
		}
	}
	t.Fatalf("the claude CLI is not installed (looked at %v); run `make deps`", candidates)
	return ""
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// sidecar is one `istota serve` process and its configuration.
type sidecar struct {
	t       testing.TB
	dir     string
	cfgPath string
	url     string
	secret  []byte
	cmd     *exec.Cmd
	logMu   sync.Mutex
	log     bytes.Buffer
	exited  chan struct{}
	env     []string // more environment for istota serve
}

type sidecarOptions struct {
	talkURL, apiURL, apiKey, botSecret string
	progressInterval                   string
	logLevel                           string
	allowedHosts, allowPrivate         []string
	botUser, botPassword               string
	// brainKind is brain.kind ("" is claude); model is brain.model.
	brainKind, model string
	// claudePath is brain.claude_path; empty finds the npm CLI (claudeBinary).
	claudePath string
	// extraConfig is appended to the configuration file (whole TOML tables).
	extraConfig string
	// env is more environment for istota serve (NAME=value), e.g. SSL_CERT_FILE.
	env []string
}

func newSidecar(t testing.TB, o sidecarOptions) *sidecar {
	t.Helper()
	dir, err := os.MkdirTemp("", "istota-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	if o.progressInterval == "" {
		o.progressInterval = "8s"
	}
	if o.logLevel == "" {
		o.logLevel = "debug"
	}
	if o.brainKind == "" {
		o.brainKind = "claude"
	}
	if o.claudePath == "" {
		o.claudePath = claudeBinary(t)
	}
	s := &sidecar{t: t, dir: dir, secret: []byte("e2e-shared-secret-0123456789abcdef0123"), env: o.env}
	port := freePort(t)
	s.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := fmt.Sprintf(`data_dir = %q
[server]
listen = "127.0.0.1:%d"
[nextcloud]
url = %q
shared_secret = %q
bot_user = %q
bot_password = %q
[talk]
bot_name = "Istota"
bot_secret = %q
progress_interval = %q
[brain]
kind = %q
model = %q
claude_path = %q
api_base_url = %q
api_key = %q
task_timeout = "2m"
[sandbox]
agent_user = "nobody"
[log]
level = %q
[network]
allowed_hosts = %s
allow_private = %s
`, filepath.Join(dir, "data"), port, o.talkURL, s.secret, o.botUser, o.botPassword, o.botSecret, o.progressInterval, o.brainKind, o.model, o.claudePath, o.apiURL, o.apiKey, o.logLevel,
		tomlList(o.allowedHosts), tomlList(o.allowPrivate)) + o.extraConfig
	s.cfgPath = filepath.Join(dir, "istota.toml")
	if err := os.WriteFile(s.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// appendConfig adds TOML (whole tables) to the configuration file before start.
func (s *sidecar) appendConfig(t testing.TB, text string) {
	t.Helper()
	f, err := os.OpenFile(s.cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.WriteString(f, "\n"+text); err != nil {
		t.Fatal(err)
	}
}

// start runs `istota serve` and waits until it answers /v1/health.
func (s *sidecar) start() {
	s.t.Helper()
	s.cmd = exec.Command(binary, "serve", "-c", s.cfgPath)
	s.cmd.Env = append(append(os.Environ(), "ISTOTA_E2E_CANARY=canary-secret-in-sidecar-env"), s.env...)
	s.cmd.Stdout = &lockedWriter{mu: &s.logMu, w: &s.log}
	s.cmd.Stderr = s.cmd.Stdout
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(s.cmd, s.exited)
	s.t.Cleanup(func() { s.kill() })
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			s.t.Fatalf("istota serve exited at start:\n%s", s.logs())
		default:
		}
		resp, err := http.Get(s.url + "/v1/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("istota serve did not become healthy:\n%s", s.logs())
}

// kill ends the sidecar abruptly (SIGKILL to its process group, as a crash or OOM would).
func (s *sidecar) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
}

// stop ends the sidecar gracefully with SIGTERM.
func (s *sidecar) stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.t.Errorf("istota serve did not stop on SIGTERM")
		s.kill()
	}
}

func (s *sidecar) logs() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.log.String()
}

// post sends a signed request as the Nextcloud app does.
func (s *sidecar) post(path string, body []byte) (int, map[string]any) {
	s.t.Helper()
	req, _ := http.NewRequest("POST", s.url+path, bytes.NewReader(body))
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	nonce := fmt.Sprintf("%016x%016x", time.Now().UnixNano(), os.Getpid())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(signing.HeaderTimestamp, ts)
	req.Header.Set(signing.HeaderNonce, nonce)
	req.Header.Set(signing.HeaderSignature, mustSign(s.t, s.secret, "POST", path, ts, nonce, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("post %s: %v", path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

// db opens the sidecar's database read-only for assertions.
func (s *sidecar) db() *sql.DB {
	s.t.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(s.dir, "data", "db", "istota.db")+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { db.Close() })
	return db
}

// task is one row of the tasks table with its phase timestamps.
type task struct {
	ID                         int64
	Source                     string
	Status, Result, Error      string
	Attempts                   int
	Created, Started, Finished time.Time
}

func (s *sidecar) tasks() []task {
	s.t.Helper()
	rows, err := s.db().Query(`SELECT id, source, status, result, error, attempts, created_at, started_at, finished_at FROM tasks ORDER BY id`)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	var out []task
	for rows.Next() {
		var tk task
		var c, st, f string
		if err := rows.Scan(&tk.ID, &tk.Source, &tk.Status, &tk.Result, &tk.Error, &tk.Attempts, &c, &st, &f); err != nil {
			s.t.Fatal(err)
		}
		tk.Created, _ = store.ParseTime(c)
		tk.Started, _ = store.ParseTime(st)
		tk.Finished, _ = store.ParseTime(f)
		out = append(out, tk)
	}
	return out
}

// talkEvent is the body the app's listener forwards for a chat message.
func talkEvent(token string, id int64, uid, text string, private bool) []byte {
	content, _ := json.Marshal(map[string]any{"message": text, "parameters": []any{}})
	typ := 2
	if private {
		typ = 6
	}
	b, _ := json.Marshal(map[string]any{
		"bot_url": "nextcloudapp://istota",
		"event": map[string]any{
			"type":   "Create",
			"actor":  map[string]any{"type": "Person", "id": "users/" + uid, "name": strings.ToUpper(uid[:1]) + uid[1:], "talkParticipantType": "1"},
			"object": map[string]any{"type": "Note", "id": strconv.FormatInt(id, 10), "name": "message", "content": string(content), "mediaType": "text/markdown"},
			"target": map[string]any{"type": "Collection", "id": token, "name": "Notes"},
		},
		"sender":       map[string]any{"uid": uid, "display_name": strings.ToUpper(uid[:1]) + uid[1:], "email": uid + "@example.com", "timezone": "Europe/Berlin", "language": "en", "is_admin": false, "allowed": true},
		"conversation": map[string]any{"token": token, "name": "Notes", "type": typ, "user_count": 1, "private": private},
		"received_at":  time.Now().UTC().Format(time.RFC3339),
	})
	return b
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool, logs func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		if cond() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s\n--- sidecar log ---\n%s", what, logs())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func tomlList(items []string) string {
	quoted := make([]string, len(items))
	for i, it := range items {
		quoted[i] = strconv.Quote(it)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// audit returns the refusals the sidecar recorded for component, one per line.
func (s *sidecar) audit(t testing.TB, component string) string {
	t.Helper()
	rows, err := s.db().Query(`SELECT user_id, action, reason FROM audit_log WHERE component = ? AND allowed = 0`, component)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var u, a, r string
		rows.Scan(&u, &a, &r)
		fmt.Fprintf(&b, "%s %s %s\n", u, a, r)
	}
	return b.String()
}

// kv reads one key of a user's key-value store ("" when absent).
func (s *sidecar) kv(t testing.TB, user, ns, key string) string {
	t.Helper()
	var v string
	s.db().QueryRow(`SELECT value FROM kv_store WHERE user_id = ? AND namespace = ? AND key = ?`, user, ns, key).Scan(&v)
	return v
}

func davDirExists(dav interface{ Path(string) string }, rel string) bool {
	fi, err := os.Stat(dav.Path(rel))
	return err == nil && fi.IsDir()
}

func mustSign(t testing.TB, secret []byte, method, path, ts, nonce string, body []byte) string {
	t.Helper()
	sig, err := signing.Sign(secret, method, path, ts, nonce, body)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

func mustMintWSToken(t testing.TB, secret, claims []byte) string {
	t.Helper()
	tok, err := signing.MintWSToken(secret, claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
