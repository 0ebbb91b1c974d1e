package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// isolationEnv runs shell commands as the agent would: through the whole sidecar, the
// real claude CLI and its Bash tool, in the real sandbox of the given user.
type isolationEnv struct {
	*fixture
	next int64
}

func newIsolationEnv(t *testing.T, o sidecarOptions) *isolationEnv {
	t.Helper()
	o.progressInterval, o.logLevel = "1h", "info"
	// The cases probe the sandbox and the allowlist; a connection to an allowed host
	// would otherwise wait for the user's yes (TestNewHostIsAskedAbout covers that).
	o.extraConfig += "\n[approvals]\nexternal = \"allow\"\n"
	f := newFixtureWith(t, nil, o, "isolate1")
	f.sc.start()
	return &isolationEnv{fixture: f, next: 100}
}

// run makes uid's agent run cmd with the Bash tool and returns the tool's output.
func (e *isolationEnv) run(t *testing.T, uid string, admin bool, cmd string) string {
	t.Helper()
	out, _ := e.runAsked(t, uid, admin, cmd, "")
	return out
}

// runAsked is run for a request that says more than the case's marker (words that
// choose skills for the prompt); it also returns the model request that ran the tool.
func (e *isolationEnv) runAsked(t *testing.T, uid string, admin bool, cmd, request string) (string, fakeapi.Recorded) {
	t.Helper()
	e.next++
	marker := fmt.Sprintf("isolation-case-%d", e.next)
	text := strings.TrimSpace(request + " " + marker)
	e.api.AddScript(marker, fakeapi.Marker(marker), fakeapi.Script{
		fakeapi.ToolCall("", "Bash", map[string]any{"command": cmd, "description": "isolation probe"}),
		fakeapi.Reply("done " + marker),
	})
	// A conversation per case, so no case sees another's marker in its context.
	token := fmt.Sprintf("iso%d", e.next)
	e.bot.EnableIn(token)
	e.talk.AddUserMessage(token, e.next, uid, text)
	body := talkEventAs(token, e.next, uid, text, admin)
	if status, ans := e.sc.post("/v1/talk/events", body); status != 200 || ans["status"] != "accepted" {
		t.Fatalf("intake: %d %v", status, ans)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for {
		for _, r := range e.api.MessageRequests() {
			if r.Conversation != marker {
				continue
			}
			for _, b := range r.ToolResults() {
				return b.Content, r
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no tool result for %s\n%s", marker, e.sc.logs())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func talkEventAs(token string, id int64, uid, text string, admin bool) []byte {
	var m map[string]any
	json.Unmarshal(talkEvent(token, id, uid, text, true), &m)
	m["sender"].(map[string]any)["is_admin"] = admin
	b, _ := json.Marshal(m)
	return b
}

func mustNotContain(t *testing.T, out string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(out, s) {
			t.Fatalf("the sandbox saw %q:\n%s", s, out)
		}
	}
}

// TestIsolation tries, through the real agent path, everything a sandboxed agent must not
// be able to do. Every case must fail for the attacker; a case that "passes" for the
// agent fails the test.
func TestIsolation(t *testing.T) {
	// One service on the host's loopback the admin allowed (an intranet service), and
	// one that was not allowed.
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "allowed-service-says-hi") }))
	defer allowed.Close()
	forbidden := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "forbidden-service-leaked") }))
	defer forbidden.Close()
	allowedHost := strings.TrimPrefix(allowed.URL, "http://")
	forbiddenHost := strings.TrimPrefix(forbidden.URL, "http://")
	e := newIsolationEnv(t, sidecarOptions{allowedHosts: []string{allowedHost}, allowPrivate: []string{allowedHost}})
	data := filepath.Join(e.sc.dir, "data")
	// Bob has a private file; Alice (not an admin) goes looking for it.
	e.run(t, "bob", false, "echo bob-private-2f9c > /workspace/secret.txt && echo written")
	bobFile := filepath.Join(data, "users", "bob", "workspace", "secret.txt")
	if b, err := os.ReadFile(bobFile); err != nil || strings.TrimSpace(string(b)) != "bob-private-2f9c" {
		t.Fatalf("bob's file was not written to his workspace on the host: %q %v", b, err)
	}
	secrets := []string{apiKey, botSecret, string(e.sc.secret), "canary-secret-in-sidecar-env"}

	t.Run("read_other_users_workspace", func(t *testing.T) {
		out := e.run(t, "alice", false, `cat `+bobFile+` 2>&1; cat /srv/istota/users/bob/workspace/secret.txt 2>&1; find / \( -path /proc -o -path /sys -o -path /usr \) -prune -o -name secret.txt -print 2>/dev/null; grep -rs "bob-private-""2f9c" /workspace /home /tmp /srv /run /opt /var 2>/dev/null; echo end`)
		mustNotContain(t, out, "bob-private-2f9c")
		if !strings.Contains(out, "No such file") {
			t.Fatalf("expected the host path to be absent:\n%s", out)
		}
	})
	t.Run("read_database", func(t *testing.T) {
		out := e.run(t, "alice", false, `find / \( -path /proc -o -path /sys -o -path /usr \) -prune -o \( -name 'istota.db*' -o -name istota.lock -o -name shared_secret \) -print 2>/dev/null; ls /srv 2>&1; echo end`)
		if strings.Contains(out, "istota.db") || strings.Contains(out, "shared_secret") || !strings.Contains(out, "No such file") {
			t.Fatalf("the database or data directory is visible:\n%s", out)
		}
	})
	t.Run("read_config", func(t *testing.T) {
		out := e.run(t, "alice", false, `cat `+e.sc.cfgPath+` 2>&1; find / \( -path /proc -o -path /sys -o -path /usr \) -prune -o -name '*.toml' -print 2>/dev/null; echo end`)
		mustNotContain(t, out, secrets...)
		if !strings.Contains(out, "No such file") {
			t.Fatalf("the config path resolved:\n%s", out)
		}
	})
	t.Run("sidecar_environ_and_processes", func(t *testing.T) {
		out := e.run(t, "alice", false, `for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null | tr '\0' '\n'; done; echo; echo procs=$(ls -d /proc/[0-9]* | wc -l)`)
		mustNotContain(t, out, secrets...)
		mustNotContain(t, out, "serve -c", e.sc.cfgPath)
		var n int
		fmt.Sscanf(out[strings.LastIndex(out, "procs=")+6:], "%d", &n)
		if n == 0 || n > 15 {
			t.Fatalf("the sandbox sees %d processes (host processes leak?):\n%s", n, out)
		}
	})
	t.Run("no_secret_in_environment_or_files", func(t *testing.T) {
		out := e.run(t, "alice", false, `env; echo; grep -rsl -e 'sk-ant-e2e''-real' -e 'e2e-bot''-secret' -e 'e2e-shared''-secret' -e 'canary-secret''-in' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr 2>/dev/null; echo end`)
		mustNotContain(t, out, secrets...)
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "/") {
				t.Fatalf("a file inside holds a secret: %s", l)
			}
		}
		if !strings.Contains(out, "ANTHROPIC_API_KEY=") || !strings.Contains(out, "ANTHROPIC_BASE_URL=http://127.0.0.1:") {
			t.Fatalf("the agent should see only the per-task placeholder key and the local gateway:\n%s", out)
		}
	})
	t.Run("write_outside_allowed_paths", func(t *testing.T) {
		out := e.run(t, "alice", false, `for p in /usr/pwned /etc/pwned /opt/istota/pwned /pwned /home/pwned /run/istota/pwned; do touch $p 2>/dev/null && echo "WROTE $p"; done; echo ok > /workspace/mine.txt && echo workspace-ok; echo ok > /tmp/t && echo tmp-ok`)
		if strings.Contains(out, "WROTE") || !strings.Contains(out, "workspace-ok") || !strings.Contains(out, "tmp-ok") {
			t.Fatalf("write policy broken:\n%s", out)
		}
		fi, err := os.Stat(filepath.Join(data, "users", "alice", "workspace", "mine.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if uid := fileUID(fi); uid == 0 {
			t.Fatal("a file the agent wrote is owned by root on the host")
		}
	})
	t.Run("reach_loopback_services_outside", func(t *testing.T) {
		port := strings.TrimPrefix(e.sc.url, "http://127.0.0.1:")
		talkPort := e.talk.URL[strings.LastIndex(e.talk.URL, ":")+1:]
		out := e.run(t, "alice", false, `for p in `+port+` `+talkPort+`; do (echo > /dev/tcp/127.0.0.1/$p) 2>/dev/null && echo "OPEN $p"; done; (echo > /dev/tcp/192.0.2.1/80) 2>/dev/null && echo "OPEN remote"; cut -d: -f1 /proc/net/dev | tail -n +3; echo end`)
		if strings.Contains(out, "OPEN") {
			t.Fatalf("a network service outside the sandbox is reachable:\n%s", out)
		}
		if strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(out), "end")) != "lo" {
			t.Fatalf("network devices other than lo:\n%s", out)
		}
	})
	t.Run("controlling_terminal", func(t *testing.T) {
		out := e.run(t, "alice", false, `(exec 3</dev/tty) 2>&1 && echo "TTY OPEN"; echo end`)
		if strings.Contains(out, "TTY OPEN") {
			t.Fatalf("the sandbox has a controlling terminal to inject into:\n%s", out)
		}
	})
	t.Run("ptrace_pid1", func(t *testing.T) {
		out := e.run(t, "alice", false, `strace -p 1 -e trace=none 2>&1 | head -3; cat /proc/1/environ 2>/dev/null | tr '\0' '\n'; echo end`)
		mustNotContain(t, out, secrets...)
		if !strings.Contains(out, "Operation not permitted") {
			t.Fatalf("ptrace of pid 1 was not refused:\n%s", out)
		}
	})
	t.Run("admin_sees_workspaces_and_database_read_only", func(t *testing.T) {
		out := e.run(t, "root-admin", true, `cat /srv/istota/users/bob/workspace/secret.txt; sqlite3 'file:/srv/istota/db/istota.db?mode=ro' 'select count(*) > 0 from tasks' 2>&1; touch /srv/istota/db/x 2>/dev/null && echo "DB WRITABLE"; echo end`)
		if !strings.Contains(out, "bob-private-2f9c") || !strings.Contains(out, "\n1\n") || strings.Contains(out, "DB WRITABLE") {
			t.Fatalf("admin view wrong:\n%s", out)
		}
		mustNotContain(t, out, secrets...)
	})
	proxyGet := func(hostport string) string {
		return `exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'GET http://` + hostport + `/ HTTP/1.1\r\nHost: ` + hostport + `\r\nConnection: close\r\n\r\n' >&3 && cat <&3; echo`
	}
	t.Run("network_only_through_the_allowlist", func(t *testing.T) {
		out := e.run(t, "alice", false, proxyGet(allowedHost)+"; "+proxyGet(forbiddenHost)+"; (echo > /dev/tcp/"+strings.Replace(forbiddenHost, ":", "/", 1)+") 2>/dev/null && echo DIRECT-OPEN; echo end")
		if !strings.Contains(out, "allowed-service-says-hi") {
			t.Fatalf("the allowlisted service is not reachable through the proxy:\n%s", out)
		}
		if strings.Contains(out, "forbidden-service-leaked") || strings.Contains(out, "DIRECT-OPEN") || !strings.Contains(out, "403") {
			t.Fatalf("a service outside the allowlist was reachable:\n%s", out)
		}
		refused := e.sc.audit(t, "netproxy")
		if !strings.Contains(refused, forbiddenHost) || !strings.Contains(refused, "alice") {
			t.Fatalf("the refusal was not audited for alice: %s", refused)
		}
	})
	t.Run("skills_through_the_credential_proxy", func(t *testing.T) {
		out := e.run(t, "alice", false, `istota skill whoami; istota skill no-such-skill; echo "exit=$?"; istota skill kv set notes colour blue && istota skill kv get notes colour`)
		if !strings.Contains(out, "alice") || !strings.Contains(out, "unknown_skill") || !strings.Contains(out, "exit=126") || !strings.Contains(out, "blue") {
			t.Fatalf("skills:\n%s", out)
		}
		if refused := e.sc.audit(t, "credproxy"); !strings.Contains(refused, "unknown_skill") {
			t.Fatalf("the refused skill was not audited: %s", refused)
		}
		bob := e.run(t, "bob", false, `istota skill kv get notes colour; echo "exit=$?"`)
		if strings.Contains(bob, "blue") {
			t.Fatalf("bob read alice's key-value store:\n%s", bob)
		}
	})
	t.Run("deferred_operations_use_the_task_identity", func(t *testing.T) {
		e.run(t, "alice", false, `mkdir -p /tmp/deferred && printf '{"op":"kv_set","namespace":"prefs","key":"tea","value":"green","user_id":"bob"}' > /tmp/deferred/1.json && echo queued`)
		waitFor(t, "the deferred operation", time.Minute, func() bool { return e.sc.kv(t, "alice", "prefs", "tea") == "green" }, e.sc.logs)
		if got := e.sc.kv(t, "bob", "prefs", "tea"); got != "" {
			t.Fatalf("a deferred file wrote into bob's store: %q", got)
		}
	})
	if n := e.talk.Count(401); n != 0 {
		t.Errorf("Talk refused %d replies", n)
	}
}
