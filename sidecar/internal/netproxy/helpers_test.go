package netproxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/sandbox/sandboxtest"
	"github.com/istota/istota/sidecar/internal/store"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the istota binary inside the sandbox, as the client the
	// sandbox runs; the init is the real istota-init (sandboxtest).
	if len(os.Args) > 1 && os.Args[1] == helperCommand {
		os.Exit(runHelper(os.Args[2:]))
	}
	code := m.Run()
	sandboxtest.Cleanup()
	os.Exit(code)
}

// waitLong bounds every wait in these tests; nothing passes or fails on a duration.
const waitLong = 30 * time.Second

// fakeResolver maps test names to addresses; other names do not exist.
type fakeResolver map[string][]netip.Addr

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func mustRules(t testing.TB, s ...string) []Rule {
	t.Helper()
	r, err := ParseRules(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// testAudit is an audit log on a real database.
func testAudit(t testing.TB) *audit.Log {
	t.Helper()
	db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "istota.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return audit.New(db, testLogger(t), nil)
}

// refusals returns the audit log's refusals, oldest first.
func refusals(t testing.TB, l *audit.Log) []audit.Entry {
	t.Helper()
	got, err := l.Recent(context.Background(), "", true, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(got)-1; i < j; i, j = i+1, j-1 {
		got[i], got[j] = got[j], got[i]
	}
	return got
}

// wantRefusal fails unless the audit log has a refusal of action for reason, made for
// the test identity.
func wantRefusal(t testing.TB, l *audit.Log, action, reason string) {
	t.Helper()
	for _, e := range refusals(t, l) {
		if e.Action == action && e.Reason == reason {
			if e.UserID != testWho.UserID || e.TaskID != testWho.TaskID || e.Component != Component || e.Allowed {
				t.Errorf("refusal recorded as %+v", e)
			}
			return
		}
	}
	t.Errorf("no audit refusal %s for %s; have %+v", reason, action, refusals(t, l))
}

var testWho = Identity{UserID: "alice", TaskID: 42}

// proxyUnderTest is a Proxy serving one listener on loopback.
type proxyUnderTest struct {
	p      *Proxy
	addr   string
	cancel context.CancelFunc
	done   chan error
}

// startProxy serves p on a fresh loopback listener until the test ends.
func startProxy(t testing.TB, p *Proxy) *proxyUnderTest {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pt := &proxyUnderTest{p: p, addr: ln.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { pt.done <- p.Serve(ctx, ln, testWho) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-pt.done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(waitLong):
			t.Errorf("Serve did not return after its context ended")
		}
	})
	return pt
}

// stop cancels Serve and returns its result.
func (pt *proxyUnderTest) stop(t testing.TB) {
	t.Helper()
	pt.cancel()
	select {
	case err := <-pt.done:
		if err != nil {
			t.Fatalf("Serve returned %v", err)
		}
		pt.done <- nil // for the cleanup
	case <-time.After(waitLong):
		t.Fatal("Serve did not return after its context ended")
	}
}

// client returns an HTTP client that uses the proxy and trusts roots.
func (pt *proxyUnderTest) client(roots *x509.CertPool) *http.Client {
	proxyURL := must(url.Parse("http://" + pt.addr))
	tr := &http.Transport{
		Proxy:           http.ProxyURL(proxyURL),
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}
	return &http.Client{Transport: tr, Timeout: waitLong}
}

// dial opens a raw connection to the proxy.
func (pt *proxyUnderTest) dial(t testing.TB) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", pt.addr, waitLong)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(waitLong))
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

// rawConn speaks HTTP by hand to the proxy.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *rawConn) send(t testing.TB, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

// response reads one response to method and its whole body.
func (c *rawConn) response(t testing.TB, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	if method == http.MethodConnect && resp.StatusCode == http.StatusOK {
		return resp, ""
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(body)
}

// wantClosed fails unless the proxy has closed the connection.
func (c *rawConn) wantClosed(t testing.TB) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(waitLong))
	n, err := io.Copy(io.Discard, c.br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the proxy kept the connection open (%d more bytes)", n)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// testCert is a self-signed certificate for names, usable as its own root.
type testCert struct {
	tls   tls.Certificate
	pool  *x509.CertPool
	pemCA []byte
}

func newCert(t testing.TB, names ...string) *testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: names[0]},
		DNSNames:              names,
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &testCert{
		tls:   tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
		pool:  pool,
		pemCA: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
	}
}

// origin is a loopback origin server that records what reached it.
type origin struct {
	srv  *httptest.Server
	port string
	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	host, uri, remote string
	header            http.Header
}

// newOrigin starts an origin answering "hello from NAME" (TLS when cert is set).
func newOrigin(t testing.TB, name string, cert *testCert) *origin {
	t.Helper()
	u := &origin{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, seenRequest{host: r.Host, uri: r.RequestURI, remote: r.RemoteAddr, header: r.Header.Clone()})
		u.mu.Unlock()
		if r.URL.Path == "/echo" {
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "got %d bytes", len(b))
			return
		}
		fmt.Fprintf(w, "hello from %s", name)
	})
	if cert != nil {
		u.srv = httptest.NewUnstartedServer(h)
		u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert.tls}}
		u.srv.StartTLS()
	} else {
		u.srv = httptest.NewServer(h)
	}
	t.Cleanup(u.srv.Close)
	_, u.port, _ = net.SplitHostPort(u.srv.Listener.Addr().String())
	return u
}

func (u *origin) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

// httptestServer serves h on loopback until the test ends.
func httptestServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// hostPort joins a test name and port.
func hostPort(host, port string) string { return net.JoinHostPort(host, port) }

func portNum(t testing.TB, port string) int {
	t.Helper()
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// tcpServer accepts connections and runs serve on each until the test ends.
func tcpServer(t testing.TB, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(waitLong))
				serve(c)
			}()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
