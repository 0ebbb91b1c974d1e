package app

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/mailbox"
	"github.com/istota/istota/sidecar/internal/mailbox/mailboxtest"
	"github.com/istota/istota/sidecar/internal/safedial"
	"github.com/istota/istota/sidecar/internal/skills"
)

// TestBriefingMailbox reads a real IMAP server through the adapter the briefings use:
// nothing for a user without a mailbox, the new mail for one with it, and the account
// named with the error when the server cannot be reached.
func TestBriefingMailbox(t *testing.T) {
	ctx := context.Background()
	db := openBriefingTestDB(t)
	srv := mailboxtest.Start(t, mailboxtest.TLS, "alice@example.org", "pw-for-briefing")
	now := time.Now()
	srv.Deliver(t, "INBOX", mailboxtest.Message("old@example.org", "Last week", "x", now.Add(-7*24*time.Hour)), now.Add(-7*24*time.Hour), true)
	srv.Deliver(t, "INBOX", mailboxtest.Message("Bob <bob@example.org>", "Offsite", "x", now.Add(-time.Hour)), now.Add(-time.Hour), false)
	creds, err := skills.NewCredentials(db, bytes.Repeat([]byte{5}, skills.CredentialKeySize), nil)
	if err != nil {
		t.Fatal(err)
	}
	allow := &safedial.Dialer{AllowPrivate: []string{srv.Addr()}}
	svc, err := mailbox.New(db, creds, mailbox.NewClient(mailbox.ClientOptions{Dialer: allow, TLSConfig: srv.ClientTLS, Timeout: 5 * time.Second}), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := briefingMailbox{svc}

	d, err := b.Recent(ctx, "alice", now.Add(-24*time.Hour), 10)
	if err != nil || d.Connected {
		t.Fatalf("without a mailbox: %+v %v", d, err)
	}
	acc := mailbox.Account{Host: "127.0.0.1", Port: srv.Port, TLS: mailbox.TLSImplicit, Username: "alice@example.org"}
	if _, err := svc.Connect(ctx, "alice", acc, "pw-for-briefing"); err != nil {
		t.Fatal(err)
	}
	d, err = b.Recent(ctx, "alice", now.Add(-24*time.Hour), 10)
	if err != nil || !d.Connected || d.Total != 1 || len(d.Mails) != 1 || d.Mails[0].Subject != "Offsite" || !d.Mails[0].Unseen ||
		d.Account != "alice@example.org at "+srv.Addr() {
		t.Fatalf("with a mailbox: %+v %v", d, err)
	}

	srv.Close()
	d, err = b.Recent(ctx, "alice", now.Add(-24*time.Hour), 10)
	if err == nil || !d.Connected || d.Account == "" || !strings.Contains(err.Error(), "could not connect to "+srv.Addr()) {
		t.Fatalf("unreachable: %+v %v", d, err)
	}
	if st, _ := svc.Status(ctx, "alice"); st.OK || st.LastError == "" {
		t.Errorf("the page does not show that the briefing could not log in: %+v", st)
	}
}
