package realnc

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/mailbox/mailboxtest"
)

// testMailbox connects alice's own mailbox through Nextcloud's real personal settings
// API (her session, the app's OCS route, the signed call to the sidecar), which logs in
// to a real IMAP server over TLS before it seals the password. Bob sees no mailbox and
// can neither test nor remove hers; no answer and no log holds the password.
func testMailbox(t *testing.T, e *env) {
	nc := e.nc
	const pw = "realnc-imap-pass-8080"
	const wrong = "realnc-wrong-pass-4242"
	srv := mailboxtest.Start(t, mailboxtest.TLS, "alice@example.org", pw)
	now := time.Now()
	srv.Deliver(t, "INBOX", mailboxtest.Message("Bob <bob@example.org>", "Offsite plan", "Lisbon", now), now, false)
	ca := filepath.Join(e.root, "imap-ca.pem")
	if err := os.WriteFile(ca, srv.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	// The admin allows this intranet (loopback) server; the sidecar trusts its certificate.
	cfg, err := os.OpenFile(e.cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(cfg, "\n[network]\nallow_private = [%q]\n", srv.Addr())
	cfg.Close()
	env := e.sc.env
	e.sc.env = append(slices.Clone(env), "SSL_CERT_FILE="+ca)
	e.sc.stop(t)
	e.sc.start(t)
	defer func() {
		e.sc.env = env
		e.sc.stop(t)
		e.sc.start(t)
	}()

	const path = istotaAPI + "/me/mailbox"
	account := func(password string) map[string]any {
		return map[string]any{"host": "127.0.0.1", "port": srv.Port, "tls": "tls", "username": "alice@example.org", "password": password}
	}
	var answers []string
	call := func(user, method string, body any) (int, map[string]any) {
		t.Helper()
		r := nc.ocs(t, user, method, path+map[bool]string{true: "/test"}[method == "POST"], body)
		answers = append(answers, string(r.Raw))
		var data map[string]any
		json.Unmarshal(r.Data, &data)
		return r.Status, data
	}

	if st, data := call("alice", "PUT", account(wrong)); st != 422 || data["code"] != "invalid_settings" ||
		!strings.Contains(fmt.Sprint(data["fields"]), "refused the user name") {
		t.Fatalf("a wrong password: %d %v", st, data)
	}
	if n := e.sc.count(t, `SELECT COUNT(*) FROM user_credentials WHERE user_id = 'alice'`); n != 0 {
		t.Errorf("a refused login stored %d credential(s)", n)
	}
	st, data := call("alice", "PUT", account(pw))
	if st != 200 || data["connected"] != true || data["username"] != "alice@example.org" || data["unseen"] != float64(1) {
		t.Fatalf("connect: %d %v", st, data)
	}
	if n := e.sc.count(t, `SELECT COUNT(*) FROM user_credentials WHERE user_id = 'alice' AND name = 'mailbox.password' AND value LIKE 'v1:%'`); n != 1 {
		t.Errorf("the password is not sealed in the credential store (%d rows)", n)
	}

	t.Run("bob cannot see, test or remove it", func(t *testing.T) {
		if st, data := call("bob", "GET", nil); st != 200 || data["connected"] != false {
			t.Errorf("bob sees %d %v", st, data)
		}
		if st, data := call("bob", "POST", nil); st != 404 {
			t.Errorf("bob tests: %d %v", st, data)
		}
		if st, _ := call("bob", "DELETE", nil); st != 200 {
			t.Errorf("bob disconnects: %d", st)
		}
		if st, data := call("alice", "GET", nil); st != 200 || data["connected"] != true {
			t.Errorf("after bob's calls alice has %d %v", st, data)
		}
	})
	if st, data := call("alice", "POST", nil); st != 200 || data["ok"] != true || data["checked_at"] == "" {
		t.Errorf("test connection: %d %v", st, data)
	}
	if st, data := call("alice", "DELETE", nil); st != 200 || data["connected"] != false {
		t.Errorf("disconnect: %d %v", st, data)
	}
	if n := e.sc.count(t, `SELECT COUNT(*) FROM user_credentials WHERE user_id = 'alice'`); n != 0 {
		t.Errorf("%d credential(s) left after disconnecting", n)
	}

	// Nextcloud's own log and its web server's (either may not exist when nothing was
	// logged: that is fine too).
	var ncLog []byte
	for _, p := range []string{filepath.Join(e.root, "nc", "data", "nextcloud.log"), filepath.Join(e.root, "nc", "server.log")} {
		b, _ := os.ReadFile(p)
		ncLog = append(ncLog, b...)
	}
	for _, secret := range []string{pw, wrong} {
		for _, a := range answers {
			if strings.Contains(a, secret) {
				t.Errorf("an answer holds a password: %s", a)
			}
		}
		if strings.Contains(e.sc.logs(), secret) || strings.Contains(string(ncLog), secret) {
			t.Errorf("a password is in the sidecar's or Nextcloud's log")
		}
	}
}
