package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/istota/istota/sidecar/internal/sandbox"
	"github.com/istota/istota/sidecar/internal/signing"
)

// installedBinary lays istota out as `make build` does: the binary with the sandbox
// init beside it and the claude CLI linked beside it, so the default brain.claude_path
// ("claude") is found without any configuration or environment, by serve and doctor
// alike.
func installedBinary(t *testing.T) string {
	t.Helper()
	dir := reachableDir(t)
	bin := filepath.Join(dir, "istota")
	for _, f := range [][2]string{{binary, bin}, {filepath.Join(filepath.Dir(binary), sandbox.InitFile), filepath.Join(dir, sandbox.InitFile)}} {
		if err := os.Link(f[0], f[1]); err != nil {
			raw, err := os.ReadFile(f[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f[1], raw, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Symlink(claudeBinary(t), filepath.Join(dir, "claude")); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("istota-agent"); err != nil {
			t.Fatal("the default agent account istota-agent does not exist; run `make deps`")
		}
	}
	return bin
}

// reachableDir is a temporary directory the agent account can pass through (t.TempDir's
// parent is 0700), as a real install's data directory is.
func reachableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "istota-firstrun-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// firstRun is one `istota serve` started the way an admin might: from a working
// directory, with a configuration file or none, and an environment.
type firstRun struct {
	t      *testing.T
	bin    string
	dir    string // working directory
	env    []string
	url    string
	cmd    *exec.Cmd
	logMu  sync.Mutex
	log    bytes.Buffer
	exited chan struct{}
}

// baseEnv is a clean environment: nothing of the test's own ISTOTA_* variables leaks in,
// only the listen address (the default port may be taken on a developer's machine).
func baseEnv(listen string) []string {
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + os.Getenv("HOME"), "ISTOTA_LISTEN=" + listen}
}

func startFirstRun(t *testing.T, bin, dir string, env []string, args ...string) *firstRun {
	t.Helper()
	f := &firstRun{t: t, bin: bin, dir: dir, env: env}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "ISTOTA_LISTEN="); ok {
			f.url = "http://" + v
		}
	}
	f.cmd = exec.Command(bin, append([]string{"serve"}, args...)...)
	f.cmd.Dir, f.cmd.Env = dir, env
	f.cmd.Stdout = &lockedWriter{mu: &f.logMu, w: &f.log}
	f.cmd.Stderr = f.cmd.Stdout
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.exited = make(chan struct{})
	go func() { f.cmd.Wait(); close(f.exited) }()
	t.Cleanup(f.stop)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-f.exited:
			t.Fatalf("istota serve exited at start:\n%s", f.logs())
		default:
		}
		if resp, err := http.Get(f.url + "/v1/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return f
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("istota serve did not become healthy:\n%s", f.logs())
	return nil
}

func (f *firstRun) logs() string {
	f.logMu.Lock()
	defer f.logMu.Unlock()
	return f.log.String()
}

func (f *firstRun) stop() {
	select {
	case <-f.exited:
		return
	default:
	}
	syscall.Kill(-f.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-f.exited:
	case <-time.After(30 * time.Second):
		syscall.Kill(-f.cmd.Process.Pid, syscall.SIGKILL)
		<-f.exited
	}
}

// hmacSign computes a request signature with any key, as an attacker would: it does not
// go through the signing package, which refuses weak keys.
func hmacSign(key []byte, method, path, ts, nonce string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(signing.Canonical(method, path, ts, nonce, body)))
	return signing.Version + "=" + hex.EncodeToString(mac.Sum(nil))
}

var nonceSeq struct {
	sync.Mutex
	n int
}

func freshNonce() string {
	nonceSeq.Lock()
	defer nonceSeq.Unlock()
	nonceSeq.n++
	return fmt.Sprintf("%016x%016x", time.Now().UnixNano(), nonceSeq.n)
}

// signedCall sends method path with body, signed with key (any length).
func signedCall(t *testing.T, base string, key []byte, method, path string, body []byte) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	nonce := freshNonce()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(signing.HeaderTimestamp, ts)
	req.Header.Set(signing.HeaderNonce, nonce)
	req.Header.Set(signing.HeaderSignature, hmacSign(key, method, path, ts, nonce, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

// assertOnlySecretSigns proves that the running server verifies with secret and with
// nothing weaker: requests signed with an empty or a short key are refused on every kind
// of signed route and for the WebSocket, and the right secret is accepted.
func assertOnlySecretSigns(t *testing.T, base string, secret []byte) {
	t.Helper()
	ping := func(key []byte) (int, map[string]any) {
		nonce := freshNonce()
		body, _ := json.Marshal(map[string]string{"nonce_echo": nonce})
		st, out := signedCall(t, base, key, "POST", "/v1/ping", body)
		if st == 200 && out["pong"] != nonce {
			t.Fatalf("ping answered without echoing the nonce: %v", out)
		}
		return st, out
	}
	weak := map[string][]byte{"empty": {}, "one byte": []byte("x"), "31 bytes": []byte(strings.Repeat("a", 31)), "secret minus its last byte": secret[:len(secret)-1]}
	for name, key := range weak {
		if st, out := ping(key); st != 401 {
			t.Errorf("ping signed with the %s key: %d %v, want 401", name, st, out)
		}
		event := talkEvent("room1", time.Now().UnixNano(), "mallory", "@Istota hello", true)
		if st, out := signedCall(t, base, key, "POST", "/v1/talk/events", event); st != 401 {
			t.Errorf("talk event signed with the %s key: %d %v, want 401", name, st, out)
		}
		if st, out := signedCall(t, base, key, "GET", "/v1/admin/settings", nil); st != 401 {
			t.Errorf("admin settings signed with the %s key: %d %v, want 401", name, st, out)
		}
		claims, _ := json.Marshal(signing.WSClaims{UID: "alice", Exp: time.Now().Add(time.Minute).Unix(), Nonce: freshNonce()})
		payload := base64URL(claims)
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(signing.WSTokenLabel + "\n" + payload))
		token := "v1." + payload + "." + base64URL(mac.Sum(nil))
		_, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(base, "http")+"/v1/ws?token="+token, http.Header{"Origin": {"http://127.0.0.1"}})
		if err == nil || resp == nil || resp.StatusCode != 401 {
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			t.Errorf("WebSocket token made with the %s key: status %d, err %v; want 401", name, status, err)
		}
	}
	if st, out := ping(secret); st != 200 {
		t.Fatalf("ping signed with the server's secret: %d %v", st, out)
	}
}

// TestSignedAPINeverAcceptsAWeakKey starts the server with its shared secret given each
// way an admin can give it, and proves in each that only that secret signs.
func TestSignedAPINeverAcceptsAWeakKey(t *testing.T) {
	bin := installedBinary(t)
	secret := "first-run-secret-0123456789abcdef-0123456789"
	modes := []struct {
		name  string
		setup func(dir string) (args, env []string)
		// secret returns the secret the server should verify with.
		secret func(dir string) string
	}{
		{"config secret", func(dir string) ([]string, []string) {
			cfg := filepath.Join(dir, "istota.toml")
			os.WriteFile(cfg, []byte(fmt.Sprintf("[nextcloud]\nshared_secret = %q\n", secret)), 0o600)
			return []string{"-c", cfg}, nil
		}, func(string) string { return secret }},
		{"secret file", func(dir string) ([]string, []string) {
			file := filepath.Join(dir, "secret")
			os.WriteFile(file, []byte(secret+"\n"), 0o600)
			cfg := filepath.Join(dir, "istota.toml")
			os.WriteFile(cfg, []byte(fmt.Sprintf("[nextcloud]\nshared_secret_file = %q\n", file)), 0o600)
			return []string{"-c", cfg}, nil
		}, func(string) string { return secret }},
		{"generated secret", func(string) ([]string, []string) { return nil, nil }, func(dir string) string {
			b, err := os.ReadFile(filepath.Join(dir, "var", "shared_secret"))
			if err != nil {
				t.Fatalf("the generated secret: %v", err)
			}
			return strings.TrimSpace(string(b))
		}},
		{"environment", func(string) ([]string, []string) {
			return nil, []string{"ISTOTA_SHARED_SECRET=" + secret}
		}, func(string) string { return secret }},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := reachableDir(t)
			args, extra := m.setup(dir)
			f := startFirstRun(t, bin, dir, append(baseEnv(fmt.Sprintf("127.0.0.1:%d", freePort(t))), extra...), args...)
			got := m.secret(dir)
			if len(got) < signing.MinSecretBytes {
				t.Fatalf("the server runs with a %d-byte secret", len(got))
			}
			assertOnlySecretSigns(t, f.url, []byte(got))
		})
	}
}

// TestFirstRunThenDoctor is the README's flow on a fresh machine: `istota serve` with no
// configuration (what `make run` starts), then `istota doctor` in the same folder. The
// doctor must see what serve uses: the agent beside the binary and the generated secret.
func TestFirstRunThenDoctor(t *testing.T) {
	bin := installedBinary(t)
	dir := reachableDir(t)
	env := baseEnv(fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	f := startFirstRun(t, bin, dir, env)
	if !strings.Contains(f.logs(), "generated a shared secret") {
		t.Errorf("serve did not say it generated a secret:\n%s", f.logs())
	}

	cmd := exec.Command(bin, "doctor")
	cmd.Dir, cmd.Env = dir, env
	out, _ := cmd.CombinedOutput() // no Nextcloud and no API key here: doctor exits 1
	for _, want := range []string{"✓ configuration", "✓ database", "✓ agent binary", "✓ sandbox",
		"✓ sandbox init: " + filepath.Join(filepath.Dir(bin), sandbox.InitFile) + " (protocol", "✓ signed round trip"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("doctor did not print %q:\n%s", want, out)
		}
	}
	if strings.Contains(f.logs(), sandbox.InitFile+" is missing") {
		t.Errorf("serve warned of a missing init that is there:\n%s", f.logs())
	}
	if !strings.Contains(string(out), "✗ model login") {
		t.Errorf("doctor should name the missing API key:\n%s", out)
	}

	// The dry run needs no agent binary: a build without the claude CLI beside it.
	noAgent := filepath.Join(reachableDir(t), "istota")
	raw, _ := os.ReadFile(bin)
	os.WriteFile(noAgent, raw, 0o755)
	f.stop() // --dry-run needs the data directory to itself
	dry := exec.Command(noAgent, "task", "What is on my list?", "-u", "alice", "--dry-run")
	dry.Dir, dry.Env = dir, env
	out, err := dry.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "What is on my list?") {
		t.Fatalf("dry run without an agent binary: %v\n%s", err, out)
	}
	// Nor istota-init beside it, as an install from before it shipped: the istota
	// binary is the init, with one warning that says so and the doctor naming it.
	if n := strings.Count(string(out), sandbox.InitFile+" is missing beside the istota binary"); n != 1 {
		t.Errorf("a binary without %s beside it warned %d times, want once:\n%s", sandbox.InitFile, n, out)
	}
	doc := exec.Command(noAgent, "doctor")
	doc.Dir, doc.Env = dir, env
	out, _ = doc.CombinedOutput()
	if want := "✓ sandbox init: " + noAgent + " " + sandbox.InitCommand + " (the istota binary itself"; !strings.Contains(string(out), want) ||
		!strings.Contains(string(out), "✓ sandbox: bwrap works") {
		t.Errorf("doctor of a binary without %s did not print %q and a working sandbox:\n%s", sandbox.InitFile, want, out)
	}
	run := exec.Command(noAgent, "task", "What is on my list?", "-u", "alice")
	run.Dir, run.Env = dir, env
	if out, err := run.CombinedOutput(); err == nil || !strings.Contains(string(out), "claude CLI") {
		t.Fatalf("a real run without an agent binary should say the CLI is missing: %v\n%s", err, out)
	}
}

func base64URL(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
