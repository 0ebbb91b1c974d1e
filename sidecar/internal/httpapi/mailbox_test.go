package httpapi

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/mailbox"
	"github.com/istota/istota/sidecar/internal/mailbox/mailboxtest"
	"github.com/istota/istota/sidecar/internal/portal"
	"github.com/istota/istota/sidecar/internal/safedial"
	"github.com/istota/istota/sidecar/internal/skills"
)

// TestMailboxAPI connects, tests and disconnects a user's mailbox through the signed
// API against a real IMAP server, and checks that the password never comes back and
// that each user reaches only their own mailbox.
func TestMailboxAPI(t *testing.T) {
	const pw = "alice-imap-pass-9876"
	srv := mailboxtest.Start(t, mailboxtest.TLS, "alice@example.org", pw)
	srv.Deliver(t, "INBOX", mailboxtest.Message("bob@example.org", "Hi", "x", time.Now()), time.Time{}, false)
	var creds *skills.Credentials
	e := newPagesEnvWith(t, nil, func(e *pagesEnv, o *portal.Options) {
		var err error
		creds, err = skills.NewCredentials(e.db, bytes.Repeat([]byte{3}, skills.CredentialKeySize), nil)
		if err != nil {
			t.Fatal(err)
		}
		client := mailbox.NewClient(mailbox.ClientOptions{Dialer: &safedial.Dialer{AllowPrivate: []string{srv.Addr()}},
			TLSConfig: srv.ClientTLS, Timeout: 5 * time.Second})
		if o.Mailbox, err = mailbox.New(e.db, creds, client, nil, nil); err != nil {
			t.Fatal(err)
		}
	})
	e.session(t, "alice", nil, false)
	e.session(t, "bob", nil, false)
	account := map[string]any{"host": "127.0.0.1", "port": srv.Port, "tls": "tls", "username": "alice@example.org"}
	with := func(pw string) map[string]any {
		m := map[string]any{"password": pw}
		for k, v := range account {
			m[k] = v
		}
		return m
	}
	noSecret := func(what string, out map[string]any) {
		t.Helper()
		if s := strings.Join(strings.Fields(strings.TrimSpace(jsonString(out))), " "); strings.Contains(s, pw) || strings.Contains(s, "wrong-pass") {
			t.Errorf("%s carries the password: %s", what, s)
		}
	}

	st, out := e.call(t, "GET", "/v1/users/alice/mailbox", nil)
	if st != 200 || out["connected"] != false {
		t.Fatalf("before: %d %v", st, out)
	}
	st, out = e.call(t, "PUT", "/v1/users/alice/mailbox", with("wrong-pass-1234"))
	noSecret("a refused connect", out)
	if st != 422 || !strings.Contains(jsonString(out["error"]), "invalid_settings") || !strings.Contains(jsonString(out["error"]), "refused the user name") {
		t.Fatalf("wrong password: %d %v", st, out)
	}
	st, out = e.call(t, "PUT", "/v1/users/alice/mailbox", map[string]any{"host": "", "tls": "none"})
	if st != 422 || !strings.Contains(jsonString(out["error"]), "host") || !strings.Contains(jsonString(out["error"]), "tls") {
		t.Fatalf("bad fields: %d %v", st, out)
	}
	st, out = e.call(t, "PUT", "/v1/users/alice/mailbox", with(pw))
	noSecret("connect", out)
	if st != 200 || out["connected"] != true || out["ok"] != true || out["username"] != "alice@example.org" || out["messages"] != float64(1) {
		t.Fatalf("connect: %d %v", st, out)
	}
	if _, has := out["password"]; has {
		t.Error("the answer has a password field")
	}
	st, out = e.call(t, "POST", "/v1/users/alice/mailbox/test", nil)
	noSecret("test", out)
	if st != 200 || out["ok"] != true || out["checked_at"] == "" {
		t.Fatalf("test: %d %v", st, out)
	}

	// Bob sees, tests and removes only his own (none).
	if st, out = e.call(t, "GET", "/v1/users/bob/mailbox", nil); st != 200 || out["connected"] != false {
		t.Errorf("bob sees %d %v", st, out)
	}
	if st, out = e.call(t, "POST", "/v1/users/bob/mailbox/test", nil); st != 404 {
		t.Errorf("bob tests %d %v", st, out)
	}
	// Without a password, bob cannot borrow alice's stored one for the same account.
	if st, out = e.call(t, "PUT", "/v1/users/bob/mailbox", account); st != 422 || !strings.Contains(jsonString(out["error"]), "password") {
		t.Errorf("bob connects without a password: %d %v", st, out)
	}
	if st, _ = e.call(t, "DELETE", "/v1/users/bob/mailbox", nil); st != 200 {
		t.Errorf("bob disconnects: %d", st)
	}
	if st, out = e.call(t, "GET", "/v1/users/alice/mailbox", nil); out["connected"] != true {
		t.Errorf("bob's disconnect touched alice's mailbox: %d %v", st, out)
	}

	if st, out = e.call(t, "DELETE", "/v1/users/alice/mailbox", nil); st != 200 || out["connected"] != false {
		t.Fatalf("disconnect: %d %v", st, out)
	}
	var n int
	e.db.Read.QueryRow(`SELECT COUNT(*) FROM user_credentials WHERE user_id = 'alice'`).Scan(&n)
	if n != 0 {
		t.Errorf("%d credentials left after disconnecting", n)
	}
	// An unknown user is not found, as everywhere on the pages.
	if st, _ = e.call(t, "GET", "/v1/users/mallory/mailbox", nil); st != 404 {
		t.Errorf("unknown user: %d", st)
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
