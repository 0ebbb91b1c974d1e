package mail

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapserver"
	"github.com/emersion/go-imap/v2/imapserver/imapmemserver"
	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

const (
	testUser     = "bot@bot.example.org"
	testPassword = "s3cret-pa55"
)

// testTLS returns a server config with a fresh self-signed certificate for
// 127.0.0.1 and a client config that trusts exactly that certificate.
func testTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	client = &tls.Config{RootCAs: pool}
	return server, client
}

// imapTestServer is go-imap's in-memory server on a loopback listener.
type imapTestServer struct {
	addr string
	user *imapmemserver.User
}

// startIMAP serves the in-memory backend; with implicitTLS the listener is
// wrapped in TLS using serverTLS.
func startIMAP(t *testing.T, serverTLS *tls.Config) *imapTestServer {
	t.Helper()
	mem := imapmemserver.New()
	user := imapmemserver.NewUser(testUser, testPassword)
	if err := user.Create("INBOX", nil); err != nil {
		t.Fatal(err)
	}
	mem.AddUser(user)
	srv := imapserver.New(&imapserver.Options{
		NewSession: func(*imapserver.Conn) (imapserver.Session, *imapserver.GreetingData, error) {
			return mem.NewSession(), nil, nil
		},
		Caps:         imap.CapSet{imap.CapIMAP4rev1: {}},
		InsecureAuth: true,
		Logger:       log.New(io.Discard, "", 0),
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if serverTLS != nil {
		ln = tls.NewListener(ln, serverTLS)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		// The server only closes listeners Serve has registered: a test that
		// ends before the goroutine got there would wait forever.
		ln.Close()
		<-done
	})
	return &imapTestServer{addr: ln.Addr().String(), user: user}
}

func (s *imapTestServer) deliver(t *testing.T, raw string) {
	t.Helper()
	if _, err := s.user.Append("INBOX", bytes.NewReader([]byte(raw)), &imap.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
}

// received is one message accepted by the SMTP test server.
type received struct {
	AuthUser string
	From     string
	To       []string
	Data     []byte
}

// smtpTestServer is go-smtp's server on loopback with a backend that
// requires AUTH PLAIN and records what it accepts.
type smtpTestServer struct {
	addr string
	mu   sync.Mutex
	msgs []received
	// reject, while set, is returned for DATA instead of accepting.
	reject *smtp.SMTPError
}

// setReject makes the server refuse messages with e (nil accepts again).
func (s *smtpTestServer) setReject(e *smtp.SMTPError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reject = e
}

func (s *smtpTestServer) messages() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.msgs...)
}

type smtpTestSession struct {
	srv      *smtpTestServer
	authUser string
	from     string
	to       []string
}

func (s *smtpTestSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *smtpTestSession) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(identity, username, password string) error {
		if username != testUser || password != testPassword {
			return errors.New("invalid credentials")
		}
		s.authUser = username
		return nil
	}), nil
}

func (s *smtpTestSession) Mail(from string, _ *smtp.MailOptions) error {
	if s.authUser == "" {
		return smtp.ErrAuthRequired
	}
	s.from = from
	return nil
}

func (s *smtpTestSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.to = append(s.to, to)
	return nil
}

func (s *smtpTestSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.srv.mu.Lock()
	defer s.srv.mu.Unlock()
	if s.srv.reject != nil {
		return s.srv.reject
	}
	s.srv.msgs = append(s.srv.msgs, received{AuthUser: s.authUser, From: s.from, To: s.to, Data: data})
	return nil
}

func (s *smtpTestSession) Reset()        { s.from, s.to = "", nil }
func (s *smtpTestSession) Logout() error { return nil }

// startSMTP serves on loopback; a non-nil serverTLS enables STARTTLS.
func startSMTP(t *testing.T, serverTLS *tls.Config) *smtpTestServer {
	t.Helper()
	return startSMTPAt(t, serverTLS, "127.0.0.1:0")
}

// startSMTPAt serves on addr, e.g. a port a test first left closed to play a
// mail server that is down.
func startSMTPAt(t *testing.T, serverTLS *tls.Config, addr string) *smtpTestServer {
	t.Helper()
	ts := &smtpTestServer{}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) {
		return &smtpTestSession{srv: ts}, nil
	}))
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = serverTLS == nil
	srv.TLSConfig = serverTLS
	srv.ErrorLog = log.New(io.Discard, "", 0)
	srv.ReadTimeout = time.Minute
	srv.WriteTimeout = time.Minute
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		// The server only closes listeners Serve has registered: a test that
		// ends before the goroutine got there would wait forever.
		ln.Close()
		<-done
	})
	ts.addr = ln.Addr().String()
	return ts
}
