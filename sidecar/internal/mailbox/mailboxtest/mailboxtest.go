// Package mailboxtest serves a user's mailbox for tests: go-imap's real IMAP server
// (imapserver with the in-memory imapmemserver backend) on a loopback port, over TLS
// or STARTTLS with a fresh self-signed certificate for 127.0.0.1, logging one user in.
package mailboxtest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapserver"
	"github.com/emersion/go-imap/v2/imapserver/imapmemserver"
)

// Mode says how the server secures connections.
type Mode int

const (
	// TLS wraps the listener in TLS (IMAPS).
	TLS Mode = iota
	// StartTLS offers STARTTLS on a plain listener.
	StartTLS
	// Plain offers neither: a client that wants TLS must fail.
	Plain
)

// Server is a running test server.
type Server struct {
	Host     string // 127.0.0.1
	Port     int
	User     string
	Password string
	// ClientTLS trusts exactly the server's certificate.
	ClientTLS *tls.Config

	// CAPEM is the server's certificate in PEM, for clients outside the process
	// (SSL_CERT_FILE).
	CAPEM []byte

	user      *imapmemserver.User
	stop      func()
	closeOnce sync.Once
	mu        sync.Mutex
	// logins counts LOGIN attempts, good and bad.
	logins int
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// Logins is how many logins were attempted.
func (s *Server) Logins() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logins
}

// Start serves a mailbox for user/password with an empty INBOX until the test ends.
func Start(t testing.TB, mode Mode, user, password string) *Server {
	t.Helper()
	s, err := New(mode, user, password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// New serves a mailbox for user/password with an empty INBOX until Close, for programs
// that are not tests (the browser tests' IMAP server, cmd imapd).
func New(mode Mode, user, password string) (*Server, error) {
	serverTLS, clientTLS, caPEM, err := certs()
	if err != nil {
		return nil, err
	}
	mem := imapmemserver.New()
	u := imapmemserver.NewUser(user, password)
	if err := u.Create("INBOX", nil); err != nil {
		return nil, err
	}
	mem.AddUser(u)
	s := &Server{Host: "127.0.0.1", User: user, Password: password, ClientTLS: clientTLS, CAPEM: caPEM, user: u}
	opts := &imapserver.Options{
		NewSession: func(*imapserver.Conn) (imapserver.Session, *imapserver.GreetingData, error) {
			return &countingSession{Session: mem.NewSession(), srv: s}, nil, nil
		},
		Caps:   imap.CapSet{imap.CapIMAP4rev1: {}},
		Logger: log.New(io.Discard, "", 0),
	}
	switch mode {
	case StartTLS:
		opts.TLSConfig = serverTLS
	case Plain:
		opts.InsecureAuth = true
	}
	srv := imapserver.New(opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if mode == TLS {
		ln = tls.NewListener(ln, serverTLS)
	}
	s.Port = ln.Addr().(*net.TCPAddr).Port
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	s.stop = func() {
		srv.Close()
		// The server closes only listeners Serve registered; a caller that stops first
		// would otherwise wait forever.
		ln.Close()
		<-done
	}
	return s, nil
}

// Close stops the server and waits for it; a second Close does nothing.
func (s *Server) Close() { s.closeOnce.Do(s.stop) }

// countingSession counts logins.
type countingSession struct {
	imapserver.Session
	srv *Server
}

func (c *countingSession) Login(user, pass string) error {
	c.srv.mu.Lock()
	c.srv.logins++
	c.srv.mu.Unlock()
	return c.Session.Login(user, pass)
}

// Folder creates a folder.
func (s *Server) Folder(t testing.TB, name string) {
	t.Helper()
	if err := s.user.Create(name, nil); err != nil {
		t.Fatal(err)
	}
}

// Deliver appends a raw message to folder, received at when (zero: now), read or not.
func (s *Server) Deliver(t testing.TB, folder, raw string, when time.Time, seen bool) {
	t.Helper()
	if err := s.Append(folder, raw, when, seen); err != nil {
		t.Fatal(err)
	}
}

// Append is Deliver for programs that are not tests.
func (s *Server) Append(folder, raw string, when time.Time, seen bool) error {
	opts := &imap.AppendOptions{Time: when}
	if seen {
		opts.Flags = []imap.Flag{imap.FlagSeen}
	}
	if when.IsZero() {
		opts.Time = time.Now()
	}
	_, err := s.user.Append(folder, bytes.NewReader([]byte(raw)), opts)
	return err
}

// Unseen is how many messages of folder are not \Seen.
func (s *Server) Unseen(t testing.TB, folder string) int {
	t.Helper()
	st, err := s.user.Status(folder, &imap.StatusOptions{NumUnseen: true})
	if err != nil {
		t.Fatal(err)
	}
	return int(*st.NumUnseen)
}

// Message builds a small RFC 5322 message.
func Message(from, subject, body string, date time.Time) string {
	return "From: " + from + "\r\nTo: alice@example.org\r\nSubject: " + subject +
		"\r\nDate: " + date.Format(time.RFC1123Z) + "\r\nMessage-ID: <" + strconv.FormatInt(date.UnixNano(), 36) + "@example.org>" +
		"\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n" + body + "\r\n"
}

// certs makes a self-signed certificate for 127.0.0.1: the server's config, a client
// config that trusts exactly it, and the certificate in PEM.
func certs() (server, client *tls.Config, caPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
