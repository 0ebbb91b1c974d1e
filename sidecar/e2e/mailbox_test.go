package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/mailbox/mailboxtest"
)

// TestMailboxSkillInTheSandbox connects alice's own mailbox (a real IMAP server over
// TLS) through the signed settings API of a running sidecar, then has her agent search
// it with "istota skill mailbox" from inside the real sandbox: the results arrive, the
// password is nowhere the sandbox can look (environment, files, the skill's output),
// nor in the sidecar's log; the call is in the task's events; the prompt describes the
// skill to alice, who connected a mailbox, and not to bob, who did not.
func TestMailboxSkillInTheSandbox(t *testing.T) {
	const pw = "e2e-imap-pass-5150"
	srv := mailboxtest.Start(t, mailboxtest.TLS, "alice@example.org", pw)
	now := time.Now()
	srv.Deliver(t, "INBOX", mailboxtest.Message("Bob <bob@example.org>", "Offsite plan", "Lisbon in May", now.Add(-time.Hour)), now.Add(-time.Hour), false)
	srv.Deliver(t, "INBOX", mailboxtest.Message("carol@example.org", "Lunch", "noon", now), now, true)
	ca := filepath.Join(t.TempDir(), "imap-ca.pem")
	if err := os.WriteFile(ca, srv.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	e := newIsolationEnv(t, sidecarOptions{allowPrivate: []string{srv.Addr()}, env: []string{"SSL_CERT_FILE=" + ca}})

	for _, uid := range []string{"alice", "bob"} {
		body, _ := json.Marshal(map[string]any{"display_name": uid, "email": uid + "@example.org", "timezone": "UTC", "language": "en", "groups": []string{}, "is_admin": false})
		if st, out := e.sc.call("POST", "/v1/users/"+uid+"/session", body); st != 200 {
			t.Fatalf("session %s: %d %v", uid, st, out)
		}
	}
	body, _ := json.Marshal(map[string]any{"host": "127.0.0.1", "port": srv.Port, "tls": "tls", "username": "alice@example.org", "password": pw})
	st, out := e.sc.call("PUT", "/v1/users/alice/mailbox", body)
	if st != 200 || out["connected"] != true || out["unseen"] != float64(1) {
		t.Fatalf("connect: %d %v\n%s", st, out, e.sc.logs())
	}

	probe := `istota skill mailbox search --from bob; echo "exit=$?"; env; grep -rsl -e 'e2e-imap''-pass' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr 2>/dev/null; echo end`
	got, req := e.runAsked(t, "alice", false, probe, "Did Bob mail me about the offsite?")
	if !strings.Contains(got, "Offsite plan") || !strings.Contains(got, "Bob <bob@example.org>") || !strings.Contains(got, "exit=0") || strings.Contains(got, "Lunch") {
		t.Fatalf("the search from the sandbox:\n%s", got)
	}
	mustNotContain(t, got, pw)
	if !strings.Contains(req.System+req.UserText(), "istota skill mailbox search") {
		t.Errorf("alice's prompt does not describe the mailbox skill")
	}

	// Bob has no mailbox: the skill is only named, and a call is refused by the proxy.
	got, req = e.runAsked(t, "bob", false, `istota skill mailbox search; echo "exit=$?"`, "Did Bob mail me about the offsite?")
	if !strings.Contains(got, "mailbox.password") || strings.Contains(got, "Offsite plan") {
		t.Errorf("bob's call:\n%s", got)
	}
	if strings.Contains(req.System+req.UserText(), "istota skill mailbox search") {
		t.Errorf("bob's prompt describes the mailbox skill though he has no mailbox")
	}

	var events string
	rows, err := e.sc.db().Query(`SELECT text FROM task_events WHERE kind = 'mailbox'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		rows.Scan(&s)
		events += s + "\n"
	}
	rows.Close()
	if !strings.Contains(events, `mailbox search "INBOX" from="bob" → 1 match(es)`) {
		t.Errorf("the task's events:\n%s", events)
	}
	if strings.Contains(e.sc.logs(), pw) {
		t.Error("the sidecar's log holds the mailbox password")
	}
}
