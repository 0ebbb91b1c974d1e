package mailbox

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/mailbox/mailboxtest"
	"github.com/istota/istota/sidecar/internal/safedial"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/store/storetest"
)

var testDBs storetest.DBs

func TestMain(m *testing.M) { os.Exit(storetest.Main(m, &testDBs)) }

// TestOnPostgres runs every test of this package again on a real PostgreSQL.
func TestOnPostgres(t *testing.T) { storetest.RunOnPostgres(t) }

const (
	user     = "alice@example.org"
	password = "correct-horse-battery-staple"
)

type fixture struct {
	db    *store.DB
	creds *skills.Credentials
	svc   *Service
	srv   *mailboxtest.Server
	acc   Account
}

func newFixture(t *testing.T, mode mailboxtest.Mode) *fixture {
	t.Helper()
	srv := mailboxtest.Start(t, mode, user, password)
	db := testDBs.Open(t, filepath.Join(t.TempDir(), "mailbox.db"))
	key := make([]byte, skills.CredentialKeySize)
	rand.Read(key)
	creds, err := skills.NewCredentials(db, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := NewClient(ClientOptions{
		Dialer:    &safedial.Dialer{AllowPrivate: []string{srv.Addr()}},
		TLSConfig: srv.ClientTLS,
		Timeout:   10 * time.Second,
	})
	svc, err := New(db, creds, client, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tls := TLSImplicit
	if mode == mailboxtest.StartTLS {
		tls = TLSStartTLS
	}
	return &fixture{db: db, creds: creds, svc: svc, srv: srv,
		acc: Account{Host: srv.Host, Port: srv.Port, TLS: tls, Username: user}}
}

// stored returns every value the database holds for uid's mailbox, as text.
func (f *fixture) stored(t *testing.T, uid string) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT value FROM user_credentials WHERE user_id = ?`,
		`SELECT value FROM user_settings WHERE user_id = ?`,
	} {
		rows, err := f.db.Read.Query(q, uid)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var v string
			rows.Scan(&v)
			b.WriteString(v + "\n")
		}
		rows.Close()
	}
	return b.String()
}

func TestConnectStatusDisconnect(t *testing.T) {
	for name, mode := range map[string]mailboxtest.Mode{"tls": mailboxtest.TLS, "starttls": mailboxtest.StartTLS} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, mode)
			ctx := context.Background()
			f.srv.Deliver(t, "INBOX", mailboxtest.Message("bob@example.org", "Hello", "hi", time.Now()), time.Time{}, false)
			f.srv.Deliver(t, "INBOX", mailboxtest.Message("bob@example.org", "Old", "hi", time.Now()), time.Time{}, true)

			st, err := f.svc.Status(ctx, "alice")
			if err != nil || st.Connected {
				t.Fatalf("before connecting: %+v %v", st, err)
			}
			st, err = f.svc.Connect(ctx, "alice", f.acc, password)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Connected || !st.OK || st.Username != user || st.Host != "127.0.0.1" || st.Messages != 2 || st.Unseen != 1 || st.CheckedAt == "" {
				t.Errorf("status %+v", st)
			}
			// Sealed, and bound to alice: nothing in the database shows it.
			if got := f.stored(t, "alice"); strings.Contains(got, password) || !strings.Contains(got, "v1:") {
				t.Errorf("the database holds %q", got)
			}
			if pw, err := f.creds.Get(ctx, "alice", CredentialName); err != nil || pw != password {
				t.Errorf("sealed password = %q, %v", pw, err)
			}
			// Bob has nothing.
			if st, err := f.svc.Status(ctx, "bob"); err != nil || st.Connected {
				t.Errorf("bob: %+v %v", st, err)
			}

			// An empty password keeps the stored one for the same server and user...
			if _, err := f.svc.Connect(ctx, "alice", f.acc, ""); err != nil {
				t.Errorf("reconnect without a password: %v", err)
			}
			// ...never for another one, where it would be sent to a stranger.
			other := f.acc
			other.Username = "mallory@example.org"
			_, err = f.svc.Connect(ctx, "alice", other, "")
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Fields["password"] == "" {
				t.Errorf("another user name without a password: %v", err)
			}
			if n := f.srv.Logins(); n != 2 {
				t.Errorf("%d logins, want 2 (the refused change must not log in)", n)
			}

			if err := f.svc.Disconnect(ctx, "alice"); err != nil {
				t.Fatal(err)
			}
			if got := f.stored(t, "alice"); got != "" {
				t.Errorf("after disconnecting the database still holds %q", got)
			}
			if _, err := f.creds.Get(ctx, "alice", CredentialName); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("sealed password after disconnect: %v", err)
			}
			if _, err := f.svc.Test(ctx, "alice"); !errors.Is(err, ErrNotConnected) {
				t.Errorf("test after disconnect: %v", err)
			}
		})
	}
}

func TestConnectErrors(t *testing.T) {
	tlsSrv := newFixture(t, mailboxtest.TLS)
	plain := mailboxtest.Start(t, mailboxtest.Plain, user, password)
	starttls := mailboxtest.Start(t, mailboxtest.StartTLS, user, password)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()

	allow := []string{tlsSrv.srv.Addr(), plain.Addr(), starttls.Addr(), net.JoinHostPort("127.0.0.1", strconv.Itoa(closedPort))}
	client := func(trust bool, allowed []string) *Client {
		o := ClientOptions{Dialer: &safedial.Dialer{AllowPrivate: allowed}, Timeout: 5 * time.Second}
		if trust {
			o.TLSConfig = tlsSrv.srv.ClientTLS
		}
		return NewClient(o)
	}
	at := func(port int, mode string) Account {
		return Account{Host: "127.0.0.1", Port: port, TLS: mode, Username: user}
	}
	for _, tc := range []struct {
		name   string
		c      *Client
		acc    Account
		pw     string
		kind   Kind
		substr string
	}{
		{"wrong password", client(true, allow), at(tlsSrv.srv.Port, TLSImplicit), "wrong-password-123", KindAuth, "refused the user name"},
		{"unreachable", client(true, allow), at(closedPort, TLSImplicit), password, KindUnreachable, "could not connect to 127.0.0.1:"},
		{"untrusted certificate", client(false, allow), at(tlsSrv.srv.Port, TLSImplicit), password, KindTLS, "certificate is not trusted"},
		{"TLS to a plain port", client(true, allow), at(plain.Port, TLSImplicit), password, KindTLS, "does not speak TLS"},
		{"STARTTLS not offered", client(true, allow), at(plain.Port, TLSStartTLS), password, KindTLS, "STARTTLS with"},
		{"loopback not allowed", client(true, nil), at(tlsSrv.srv.Port, TLSImplicit), password, KindRefused, "network.allow_private"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc, err := New(tlsSrv.db, tlsSrv.creds, tc.c, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = svc.Connect(context.Background(), "carol", tc.acc, tc.pw)
			var me *Error
			if !errors.As(err, &me) || me.Kind != tc.kind || !strings.Contains(me.Message, tc.substr) {
				t.Fatalf("got %v (%T), want %s containing %q", err, err, tc.kind, tc.substr)
			}
			if strings.Contains(me.Message, tc.pw) {
				t.Errorf("the message holds the password: %q", me.Message)
			}
			if got := tlsSrv.stored(t, "carol"); got != "" {
				t.Errorf("a failed connect stored %q", got)
			}
		})
	}

	t.Run("fields", func(t *testing.T) {
		_, err := tlsSrv.svc.Connect(context.Background(), "carol", Account{Host: "https://mail.example.org/", Port: 70000, TLS: "none"}, "")
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Fatalf("got %v", err)
		}
		for _, f := range []string{"host", "port", "tls", "username"} {
			if fe.Fields[f] == "" {
				t.Errorf("no problem for %s in %v", f, fe.Fields)
			}
		}
	})
	t.Run("defaults", func(t *testing.T) {
		a, err := Account{Host: " Mail.Example.ORG. ", TLS: "STARTTLS", Username: " a "}.Normalize()
		if err != nil || a != (Account{Host: "mail.example.org", Port: 143, TLS: TLSStartTLS, Username: "a"}) {
			t.Errorf("%+v %v", a, err)
		}
		a, err = Account{Host: "2001:db8::1", Username: "a"}.Normalize()
		if err != nil || a.Port != 993 || a.TLS != TLSImplicit || a.Addr() != "[2001:db8::1]:993" {
			t.Errorf("%+v %v", a, err)
		}
	})
}

func TestTestRecordsTheOutcome(t *testing.T) {
	f := newFixture(t, mailboxtest.TLS)
	ctx := context.Background()
	if _, err := f.svc.Connect(ctx, "alice", f.acc, password); err != nil {
		t.Fatal(err)
	}
	// The server changes the password behind our back: the stored one is refused.
	if err := f.creds.Set(ctx, "alice", CredentialName, "outdated-password"); err != nil {
		t.Fatal(err)
	}
	st, err := f.svc.Test(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Connected || st.OK || !strings.Contains(st.LastError, "refused the user name") || strings.Contains(st.LastError, "outdated-password") {
		t.Errorf("after a refused login: %+v", st)
	}
	f.creds.Set(ctx, "alice", CredentialName, password)
	if st, err = f.svc.Test(ctx, "alice"); err != nil || !st.OK || st.LastError != "" {
		t.Errorf("after a good login: %+v %v", st, err)
	}
	// A check that ends after the user disconnected does not bring the setting back.
	f.svc.Disconnect(ctx, "alice")
	f.svc.Record(ctx, "alice", nil, &Inbox{})
	if ok, _ := f.svc.Connected(ctx, "alice"); ok {
		t.Error("a late record reconnected the mailbox")
	}
}

func TestRecent(t *testing.T) {
	f := newFixture(t, mailboxtest.TLS)
	ctx := context.Background()
	now := time.Now()
	since := now.Add(-10 * time.Hour)
	f.srv.Deliver(t, "INBOX", mailboxtest.Message("old@example.org", "Yesterday", "x", now.Add(-20*time.Hour)), now.Add(-20*time.Hour), false)
	f.srv.Deliver(t, "INBOX", mailboxtest.Message("Bob <bob@example.org>", "Lunch?", "x", now.Add(-2*time.Hour)), now.Add(-2*time.Hour), false)
	f.srv.Deliver(t, "INBOX", mailboxtest.Message("carol@example.org", "Report", "x", now.Add(-time.Hour)), now.Add(-time.Hour), true)
	f.srv.Deliver(t, "INBOX", mailboxtest.Message("dave@example.org", "Newest", "x", now), now, false)

	if _, _, _, err := f.svc.Recent(ctx, "alice", since, 10); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("not connected: %v", err)
	}
	if _, err := f.svc.Connect(ctx, "alice", f.acc, password); err != nil {
		t.Fatal(err)
	}
	_, list, total, err := f.svc.Recent(ctx, "alice", since, 2)
	if err != nil {
		t.Fatal(err)
	}
	if total != 3 || len(list) != 2 || list[0].Subject != "Newest" || list[1].Subject != "Report" || list[1].Unseen || !list[0].Unseen {
		t.Errorf("total %d, list %+v", total, list)
	}
	if f.srv.Unseen(t, "INBOX") != 3 {
		t.Error("reading marked messages seen")
	}
}
