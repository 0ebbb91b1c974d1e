package realnc

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"
)

// apiKey is the model API key the scripted API expects; it must never reach a sandbox.
const apiKey = "sk-ant-realnc-test-key-0123456789"

// sidecar is the tarball's `istota serve`, run with the configuration occ wrote.
type sidecar struct {
	binary  string
	cfgPath string
	env     []string
	url     string
	dataDir string
	cmd     *exec.Cmd
	logMu   sync.Mutex
	log     bytes.Buffer
	exited  chan struct{}
}

// claudeBinary is the Claude Code CLI `make deps` installed from npm.
func claudeBinary(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	for _, c := range []string{
		os.Getenv("ISTOTA_CLAUDE_BIN"),
		filepath.Join(root, "nextcloud-app/node_modules/@anthropic-ai/claude-code/bin/claude.exe"),
	} {
		if c == "" {
			continue
		}
		if p, err := filepath.EvalSymlinks(c); err == nil {
			return p
		}
	}
	t.Fatal("the claude CLI is not installed; run `make deps`")
	return ""
}

// writeSidecarConfig completes the file `occ istota:setup --write` made with what a
// test installation needs beside it: the data folder, the agent and the model API.
func writeSidecarConfig(t testing.TB, setupFile, dataDir, apiURL string) string {
	t.Helper()
	written, err := os.ReadFile(setupFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("data_dir = %q\n\n%s\n[brain]\nclaude_path = %q\napi_base_url = %q\napi_key = %q\ntask_timeout = \"3m\"\n\n[log]\nlevel = \"debug\"\n",
		dataDir, written, claudeBinary(t), apiURL, apiKey)
	path := filepath.Join(filepath.Dir(setupFile), "istota-test.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newSidecar(binary, cfgPath, listen, dataDir string, env ...string) *sidecar {
	return &sidecar{binary: binary, cfgPath: cfgPath, url: "http://" + listen, dataDir: dataDir, env: env}
}

// start runs `istota serve` and waits until it answers /v1/health.
func (s *sidecar) start(t testing.TB) {
	t.Helper()
	s.cmd = exec.Command(s.binary, "serve", "-c", s.cfgPath)
	s.cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + os.Getenv("HOME")}, s.env...)
	s.cmd.Stdout = &lockedWriter{mu: &s.logMu, w: &s.log}
	s.cmd.Stderr = s.cmd.Stdout
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	s.exited = exited
	go func(cmd *exec.Cmd) { cmd.Wait(); close(exited) }(s.cmd)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("istota serve exited at start:\n%s", s.logs())
		default:
		}
		if resp, err := http.Get(s.url + "/v1/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("istota serve did not become healthy:\n%s", s.logs())
}

func (s *sidecar) running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// kill ends it abruptly, as a crash would.
func (s *sidecar) kill() {
	if !s.running() {
		return
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
}

// stop ends it with SIGTERM.
func (s *sidecar) stop(t testing.TB) {
	if !s.running() {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Errorf("istota serve did not stop on SIGTERM")
		s.kill()
	}
}

func (s *sidecar) logs() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.log.String()
}

// cli runs another istota command against the same configuration.
func (s *sidecar) cli(args ...string) (string, error) {
	cmd := exec.Command(s.binary, append(args, "-c", s.cfgPath)...)
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + os.Getenv("HOME")}, s.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// db opens the sidecar's database read-only for assertions.
func (s *sidecar) db(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(s.dataDir, "db", "istota.db")+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// dbRW opens the sidecar's database for writing test fixtures (WAL lets it beside the
// running sidecar).
func (s *sidecar) dbRW(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(s.dataDir, "db", "istota.db")+"?_busy_timeout=10000&_foreign_keys=on")
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// count runs a COUNT query on the sidecar's database.
// userRecords says what the sidecar's database holds about user's provisioning: the
// users row and the provisioned tree, for the message of a failing test.
func (s *sidecar) userRecords(user string) string {
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(s.dataDir, "db", "istota.db")+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer db.Close()
	var users, tasks int
	var provisioned []string
	if err := db.QueryRow(`SELECT count(*) FROM users WHERE id = ?`, user).Scan(&users); err != nil {
		return "(" + err.Error() + ")"
	}
	if err := db.QueryRow(`SELECT count(*) FROM tasks WHERE user_id = ?`, user).Scan(&tasks); err != nil {
		return "(" + err.Error() + ")"
	}
	rows, err := db.Query(`SELECT tree || ' layout ' || layout || ' at ' || at FROM workspace_provisioned WHERE tree = ?`, user)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer rows.Close()
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			return "(" + err.Error() + ")"
		}
		provisioned = append(provisioned, r)
	}
	return fmt.Sprintf("users row %d, tasks %d, provisioned %q", users, tasks, provisioned)
}

func (s *sidecar) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	db := s.db(t)
	defer db.Close()
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
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

// hasLine reports whether out has a line starting with prefix.
func hasLine(out, prefix string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) {
			return true
		}
	}
	return false
}
