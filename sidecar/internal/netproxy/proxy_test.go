package netproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/safedial"
)

// testResolver maps every test name; only some are allowed, and only some may be
// private, so the address guard is exercised while real servers run on loopback.
var testResolver = fakeResolver{
	"allowed.test":   addrs("127.0.0.1"),
	"evil.test":      addrs("127.0.0.1"),
	"wild.test":      addrs("127.0.0.1"),
	"a.wild.test":    addrs("127.0.0.1"),
	"a.b.wild.test":  addrs("127.0.0.1"),
	"evil-wild.test": addrs("127.0.0.1"),
	"loop.test":      addrs("127.0.0.1"),
	"meta.test":      addrs("169.254.169.254"),
	"lan.test":       addrs("10.1.2.3"),
	"lan172.test":    addrs("172.20.0.5"),
	"lan192.test":    addrs("192.168.1.10"),
	"cgnat.test":     addrs("100.64.1.1"),
	"ula.test":       addrs("fd00:ec2::254"),
	"v6loop.test":    addrs("::1"),
	"v6link.test":    addrs("fe80::1"),
	"zero.test":      addrs("0.0.0.0"),
	"mcast.test":     addrs("224.0.0.1"),
	"nat64.test":     addrs("64:ff9b::a9fe:a9fe"),
	"mapped.test":    addrs("::ffff:127.0.0.1"),
	"mixed.test":     addrs("8.8.8.8", "127.0.0.1"),
}

// fixture is a proxy with a TLS and a plain-HTTP origin on loopback, both reachable
// only as allowed.test (and the TLS one as subdomains of wild.test).
type fixture struct {
	tls, plain *origin
	cert       *testCert
	audit      *audit.Log
	pt         *proxyUnderTest
}

func newFixture(t *testing.T, tweak func(*Options), tweakProxy ...func(*fixture, *Proxy)) *fixture {
	t.Helper()
	f := &fixture{cert: newCert(t, "allowed.test", "*.wild.test", "a.b.wild.test")}
	f.tls = newOrigin(t, "tls", f.cert)
	f.plain = newOrigin(t, "plain", nil)
	f.audit = testAudit(t)
	tp, pp := f.tls.port, f.plain.port
	opts := Options{
		Allow: mustRules(t,
			hostPort("allowed.test", tp), hostPort("allowed.test", pp),
			hostPort("*.wild.test", tp),
			hostPort("loop.test", tp), "meta.test:443", "lan.test:443", "lan172.test:443", "lan192.test:443",
			"cgnat.test:443", "ula.test:443", "v6loop.test:443", "v6link.test:443", "zero.test:443",
			"mcast.test:443", "nat64.test:443", "mapped.test:443", "mixed.test:443", "127.0.0.2:443"),
		AllowPrivate: []string{
			hostPort("allowed.test", tp), hostPort("allowed.test", pp),
			hostPort("a.wild.test", tp), hostPort("a.b.wild.test", tp),
			"evil.test:443", // grants nothing: evil.test is not in Allow
		},
		Resolver: testResolver,
		Audit:    f.audit,
		Logger:   testLogger(t),
	}
	if tweak != nil {
		tweak(&opts)
	}
	p := New(opts)
	for _, fn := range tweakProxy {
		fn(f, p)
	}
	f.pt = startProxy(t, p)
	return f
}

func TestAllowedThroughProxy(t *testing.T) {
	f := newFixture(t, nil)
	c := f.pt.client(f.cert.pool)
	for _, tc := range []struct{ url, want string }{
		{"https://allowed.test:" + f.tls.port + "/", "hello from tls"},
		{"https://a.wild.test:" + f.tls.port + "/", "hello from tls"},
		{"https://a.b.wild.test:" + f.tls.port + "/", "hello from tls"},
		{"http://allowed.test:" + f.plain.port + "/path?q=1", "hello from plain"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			resp, err := c.Get(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(body) != tc.want {
				t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, body, tc.want)
			}
		})
	}
	reqs := f.plain.requests()
	if len(reqs) != 1 || reqs[0].uri != "/path?q=1" || reqs[0].host != "allowed.test:"+f.plain.port {
		t.Errorf("plain origin saw %+v", reqs)
	}
	if rs := refusals(t, f.audit); len(rs) != 0 {
		t.Errorf("allowed requests were recorded as refusals: %+v", rs)
	}
}

func TestNamesAreNormalised(t *testing.T) {
	f := newFixture(t, nil)
	c := f.pt.dial(t)
	c.send(t, "CONNECT ALLOWED.Test.:"+f.tls.port+" HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, _ := c.response(t, http.MethodConnect); resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT to an upper-case name with a trailing dot: %s", resp.Status)
	}
}

func TestHopByHopHeadersRemoved(t *testing.T) {
	f := newFixture(t, nil)
	c := f.pt.dial(t)
	c.send(t, "GET http://allowed.test:"+f.plain.port+"/h HTTP/1.1\r\nHost: other.example\r\n"+
		"Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive, X-Hop\r\n"+
		"X-Hop: 1\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nX-End: kept\r\n\r\n")
	resp, body := c.response(t, http.MethodGet)
	if resp.StatusCode != http.StatusOK || body != "hello from plain" {
		t.Fatalf("got %s %q", resp.Status, body)
	}
	reqs := f.plain.requests()
	if len(reqs) != 1 {
		t.Fatalf("origin saw %d requests", len(reqs))
	}
	h := reqs[0].header
	for _, name := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Hop", "Keep-Alive", "Te"} {
		if v := h.Get(name); v != "" {
			t.Errorf("origin saw %s: %s", name, v)
		}
	}
	if h.Get("X-End") != "kept" {
		t.Errorf("an end-to-end header was dropped: %v", h)
	}
	if reqs[0].host != "allowed.test:"+f.plain.port {
		t.Errorf("origin saw Host %q; the checked URL host must win over the client's Host header", reqs[0].host)
	}
	if ua := h.Get("User-Agent"); ua != "" {
		t.Errorf("the proxy added User-Agent %q", ua)
	}
}

func TestRefused(t *testing.T) {
	f := newFixture(t, nil)
	tp, pp := f.tls.port, f.plain.port
	type tc struct {
		name, method, target, reason string
	}
	cases := []tc{
		{"host not listed", "CONNECT", hostPort("evil.test", tp), audit.ReasonHostNotAllowed},
		{"host not listed, plain http", "GET", hostPort("evil.test", pp), audit.ReasonHostNotAllowed},
		{"IP literal", "CONNECT", hostPort("127.0.0.1", tp), audit.ReasonHostNotAllowed},
		{"IP literal, plain http", "GET", hostPort("127.0.0.1", pp), audit.ReasonHostNotAllowed},
		{"IPv6 literal", "CONNECT", hostPort("::1", tp), audit.ReasonHostNotAllowed},
		{"allowed host, other port", "CONNECT", "allowed.test:1", audit.ReasonHostNotAllowed},
		{"allowed host, port 443", "CONNECT", "allowed.test:443", audit.ReasonHostNotAllowed},
		{"wildcard apex", "CONNECT", hostPort("wild.test", tp), audit.ReasonHostNotAllowed},
		{"wildcard look-alike", "CONNECT", hostPort("evil-wild.test", tp), audit.ReasonHostNotAllowed},
		{"wildcard as a prefix", "CONNECT", hostPort("a.wild.test.evil.test", tp), audit.ReasonHostNotAllowed},
		{"allow-private alone grants nothing", "CONNECT", "evil.test:443", audit.ReasonHostNotAllowed},
		{"allowed name on loopback", "CONNECT", hostPort("loop.test", tp), audit.ReasonPrivateAddress},
		{"IP rule for loopback without allow-private", "CONNECT", "127.0.0.2:443", audit.ReasonPrivateAddress},
	}
	for _, name := range []string{"meta", "lan", "lan172", "lan192", "cgnat", "ula", "v6loop", "v6link", "zero", "mcast", "nat64", "mapped", "mixed"} {
		cases = append(cases, tc{"allowed name on " + name, "CONNECT", name + ".test:443", audit.ReasonPrivateAddress})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := f.pt.dial(t)
			if tc.method == "CONNECT" {
				c.send(t, "CONNECT "+tc.target+" HTTP/1.1\r\nHost: "+tc.target+"\r\n\r\n")
			} else {
				c.send(t, "GET http://"+tc.target+"/ HTTP/1.1\r\nHost: "+tc.target+"\r\n\r\n")
			}
			resp, body := c.response(t, tc.method)
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get(ErrorHeader) != ErrorBlocked {
				t.Fatalf("got %s with %s %q, want 403 %s", resp.Status, ErrorHeader, resp.Header.Get(ErrorHeader), ErrorBlocked)
			}
			if !strings.Contains(body, tc.target) {
				t.Errorf("body %q does not name %s", body, tc.target)
			}
			c.wantClosed(t)
			wantRefusal(t, f.audit, tc.target, tc.reason)
		})
	}
	if n := len(f.tls.requests()) + len(f.plain.requests()); n != 0 {
		t.Errorf("refused requests reached an origin %d times", n)
	}
}

func TestRefusalRecordedOnce(t *testing.T) {
	f := newFixture(t, nil)
	target := hostPort("evil.test", f.tls.port)
	for range 3 {
		c := f.pt.dial(t)
		c.send(t, "CONNECT "+target+" HTTP/1.1\r\n\r\n")
		if resp, _ := c.response(t, http.MethodConnect); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("got %s", resp.Status)
		}
	}
	if rs := refusals(t, f.audit); len(rs) != 1 {
		t.Errorf("three identical refusals gave %d audit rows, want 1: %+v", len(rs), rs)
	}
}

// TestEveryKeptAliveRequestChecked is finding (c): a proxy that checked only the first
// request of a connection let later ones through.
func TestEveryKeptAliveRequestChecked(t *testing.T) {
	f := newFixture(t, nil)
	pp := f.plain.port
	c := f.pt.dial(t)
	for i := range 2 {
		c.send(t, "GET http://allowed.test:"+pp+"/r"+fmt.Sprint(i)+" HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
		resp, body := c.response(t, http.MethodGet)
		if resp.StatusCode != http.StatusOK || body != "hello from plain" {
			t.Fatalf("request %d: %s %q", i, resp.Status, body)
		}
	}
	reqs := f.plain.requests()
	if len(reqs) != 2 || reqs[0].remote != reqs[1].remote {
		t.Errorf("two requests to one host did not share the origin connection: %+v", reqs)
	}
	// evil.test resolves to the very server the open origin connection reaches; a
	// proxy that reused the connection unchecked would deliver this request.
	c.send(t, "GET http://evil.test:"+pp+"/stolen HTTP/1.1\r\nHost: evil.test\r\n\r\n")
	resp, _ := c.response(t, http.MethodGet)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(ErrorHeader) != ErrorBlocked {
		t.Fatalf("second host on a kept-alive connection: %s", resp.Status)
	}
	c.wantClosed(t)
	if reqs := f.plain.requests(); len(reqs) != 2 {
		t.Errorf("the refused request reached the origin: %+v", reqs)
	}
	wantRefusal(t, f.audit, hostPort("evil.test", pp), audit.ReasonHostNotAllowed)
}

func TestMalformedRequestsCloseTheConnection(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxHeaderBytes = 4096 })
	big := "GET http://allowed.test:" + f.plain.port + "/ HTTP/1.1\r\nX-Big: " + strings.Repeat("a", 8192) + "\r\n\r\n"
	for _, tc := range []struct {
		name, send string
		status     int
	}{
		{"garbage", "\x16\x03\x01\x00\x05hello\r\n\r\n", http.StatusBadRequest},
		{"not http", "HELLO THERE\r\n\r\n", http.StatusBadRequest},
		{"origin form", "GET / HTTP/1.1\r\nHost: allowed.test:" + f.plain.port + "\r\n\r\n", http.StatusBadRequest},
		{"https absolute form", "GET https://allowed.test:" + f.tls.port + "/ HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusBadRequest},
		{"ftp absolute form", "GET ftp://allowed.test:" + f.plain.port + "/ HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusBadRequest},
		{"CONNECT without port", "CONNECT allowed.test HTTP/1.1\r\n\r\n", http.StatusBadRequest},
		{"CONNECT with a path", "CONNECT /x HTTP/1.1\r\nHost: allowed.test:" + f.tls.port + "\r\n\r\n", http.StatusBadRequest},
		{"CONNECT with port 0", "CONNECT allowed.test:0 HTTP/1.1\r\n\r\n", http.StatusBadRequest},
		{"CONNECT to a bad name", "CONNECT evil%2etest:443 HTTP/1.1\r\n\r\n", http.StatusBadRequest},
		{"numeric name", "CONNECT 127.1:443 HTTP/1.1\r\n\r\n", http.StatusBadRequest},
		{"bad header line", "GET http://allowed.test:" + f.plain.port + "/ HTTP/1.1\r\nno colon here\r\n\r\n", http.StatusBadRequest},
		{"header too large", big, http.StatusRequestHeaderFieldsTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := f.pt.dial(t)
			c.send(t, tc.send)
			resp, _ := c.response(t, http.MethodGet)
			if resp.StatusCode != tc.status {
				t.Fatalf("got %s, want %d", resp.Status, tc.status)
			}
			c.wantClosed(t)
		})
	}
	if n := len(f.plain.requests()) + len(f.tls.requests()); n != 0 {
		t.Errorf("malformed requests reached an origin %d times", n)
	}
	wantRefusal(t, f.audit, "request", audit.ReasonBadRequest)
}

func TestClosedKeptAliveUpstreamIsRedialed(t *testing.T) {
	// This origin answers one request per connection and then hangs up, as an origin
	// does when its own keep-alive timeout ends between two requests.
	var conns atomic.Int32
	oneShot := tcpServer(t, func(c net.Conn) {
		conns.Add(1)
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	f := newFixture(t, func(o *Options) {
		o.Allow = append(o.Allow, mustRules(t, hostPort("allowed.test", oneShot))...)
		o.AllowPrivate = append(o.AllowPrivate, hostPort("allowed.test", oneShot))
	})
	c := f.pt.dial(t)
	for i := range 3 {
		c.send(t, "GET http://allowed.test:"+oneShot+"/ HTTP/1.1\r\n\r\n")
		if resp, body := c.response(t, http.MethodGet); resp.StatusCode != http.StatusOK || body != "ok" {
			t.Fatalf("request %d: %s %q", i, resp.Status, body)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("the origin saw %d connections, want one per request", n)
	}
}

func TestMalformedAfterGoodRequestCloses(t *testing.T) {
	f := newFixture(t, nil)
	c := f.pt.dial(t)
	c.send(t, "GET http://allowed.test:"+f.plain.port+"/ HTTP/1.1\r\n\r\n")
	if resp, _ := c.response(t, http.MethodGet); resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %s", resp.Status)
	}
	c.send(t, "\x00\x01garbage\r\n\r\n")
	if resp, _ := c.response(t, http.MethodGet); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("garbage after a good request: %s", resp.Status)
	}
	c.wantClosed(t)
}

// connectTLS opens a tunnel to target and runs a TLS handshake for serverName in it.
func connectTLS(t *testing.T, f *fixture, target, serverName string) error {
	t.Helper()
	c := f.pt.dial(t)
	c.send(t, "CONNECT "+target+" HTTP/1.1\r\n\r\n")
	if resp, _ := c.response(t, http.MethodConnect); resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %s", target, resp.Status)
	}
	tc := tls.Client(&bufferedConn{Conn: c.Conn, r: c.br}, &tls.Config{ServerName: serverName, RootCAs: f.cert.pool, InsecureSkipVerify: serverName == ""})
	defer tc.Close()
	if err := tc.Handshake(); err != nil {
		return err
	}
	if _, err := io.WriteString(tc, "GET / HTTP/1.1\r\nHost: "+serverName+"\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// bufferedConn reads through a bufio.Reader that may already hold bytes.
type bufferedConn struct {
	net.Conn
	r io.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func TestSNIMustMatchConnectHost(t *testing.T) {
	f := newFixture(t, nil)
	target := hostPort("allowed.test", f.tls.port)
	if err := connectTLS(t, f, target, "allowed.test"); err != nil {
		t.Fatalf("matching SNI: %v", err)
	}
	for _, tc := range []struct{ name, sni string }{
		{"other host", "evil.test"},
		{"wildcard sibling", "a.wild.test"},
		{"no SNI", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.tls.requests())
			err := connectTLS(t, f, target, tc.sni)
			if err == nil {
				t.Fatal("the TLS handshake through the tunnel succeeded")
			}
			if tc.sni != "" && !strings.Contains(err.Error(), "access denied") {
				t.Errorf("handshake error %q; want the proxy's access_denied alert", err)
			}
			if len(f.tls.requests()) != before {
				t.Error("the fronted request reached the origin")
			}
		})
	}
	wantRefusal(t, f.audit, target, audit.ReasonSNIMismatch)
}

func TestStrictTLSPortNeedsTLS(t *testing.T) {
	f := newFixture(t, nil, func(f *fixture, p *Proxy) {
		// The plain origin's port stands for 443, which a test cannot always bind.
		p.strictTLSPorts = map[uint16]bool{uint16(portNum(t, f.plain.port)): true}
	})
	c := f.pt.dial(t)
	c.send(t, "CONNECT allowed.test:"+f.plain.port+" HTTP/1.1\r\n\r\n")
	if resp, _ := c.response(t, http.MethodConnect); resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	c.send(t, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	c.wantClosed(t)
	if n := len(f.plain.requests()); n != 0 {
		t.Errorf("plain text through a tunnel to a TLS port reached the origin %d times", n)
	}
	wantRefusal(t, f.audit, hostPort("allowed.test", f.plain.port), audit.ReasonBadRequest)
}

func TestTunnelToOtherPortsCarriesAnyProtocol(t *testing.T) {
	// A server-first protocol: the origin greets before the client says anything.
	greeter := tcpServer(t, func(c net.Conn) {
		io.WriteString(c, "220 hello\r\n")
		line, _ := bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "echo "+line)
	})
	f := newFixture(t, func(o *Options) {
		o.Allow = append(o.Allow, mustRules(t, hostPort("allowed.test", greeter))...)
		o.AllowPrivate = append(o.AllowPrivate, hostPort("allowed.test", greeter))
	})
	c := f.pt.dial(t)
	c.send(t, "CONNECT allowed.test:"+greeter+" HTTP/1.1\r\n\r\n")
	if resp, _ := c.response(t, http.MethodConnect); resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	greeting, err := c.br.ReadString('\n')
	if err != nil || greeting != "220 hello\r\n" {
		t.Fatalf("greeting %q, %v", greeting, err)
	}
	c.send(t, "ping\n")
	if got, err := c.br.ReadString('\n'); got != "echo ping\n" {
		t.Fatalf("got %q, %v", got, err)
	}
}

// rebindResolver answers the first lookup with first and every later one with later,
// as a DNS rebinding attacker's name server would.
type rebindResolver struct {
	first, later netip.Addr
	calls        atomic.Int32
}

func (r *rebindResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host != "rebind.test" {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	if r.calls.Add(1) == 1 {
		return []netip.Addr{r.first}, nil
	}
	return []netip.Addr{r.later}, nil
}

func TestCheckedAddressIsDialed(t *testing.T) {
	echo := tcpServer(t, func(c net.Conn) { io.Copy(c, c) })
	// Later answers point at an unroutable documentation address: dialing by name, or
	// resolving again after the check, would not reach the echo server.
	res := &rebindResolver{first: netip.MustParseAddr("127.0.0.1"), later: netip.MustParseAddr("192.0.2.1")}
	f := newFixture(t, func(o *Options) {
		o.Resolver = res
		o.Allow = mustRules(t, hostPort("rebind.test", echo))
		o.AllowPrivate = []string{hostPort("rebind.test", echo)}
	})
	c := f.pt.dial(t)
	c.send(t, "CONNECT rebind.test:"+echo+" HTTP/1.1\r\n\r\n")
	if resp, _ := c.response(t, http.MethodConnect); resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	c.send(t, "ping\n")
	if got, err := c.br.ReadString('\n'); got != "ping\n" {
		t.Fatalf("echo %q, %v", got, err)
	}
	if n := res.calls.Load(); n != 1 {
		t.Errorf("the name was looked up %d times for one CONNECT, want once", n)
	}
}

func TestCheck(t *testing.T) {
	own := addrs("203.0.113.9", "2001:db8::9")
	res := fakeResolver{
		"pub.test":   addrs("8.8.8.8", "2001:4860:4860::8888"),
		"own.test":   addrs("203.0.113.9"),
		"own6.test":  addrs("2001:db8::9"),
		"meta.test":  addrs("169.254.169.254"),
		"nat64.test": addrs("64:ff9b::a00:1"),
		"6to4.test":  addrs("2002:7f00:1::1"),
		"mixed.test": addrs("8.8.8.8", "10.0.0.1"),
		"lan.test":   addrs("10.0.0.1"),
	}
	p := New(Options{
		Allow: mustRules(t, "pub.test:443", "own.test:443", "own6.test:443", "meta.test:80", "nat64.test:443",
			"6to4.test:443", "mixed.test:443", "lan.test:443", "gone.test:443", "10.0.0.7:443", "8.8.4.4:53"),
		AllowPrivate: []string{"lan.test:443", "10.0.0.7:443", "*.lan.test:443", "bad entry"},
		Resolver:     res,
		HostAddrs:    func() ([]netip.Addr, error) { return own, nil },
		Logger:       testLogger(t),
	})
	for _, tc := range []struct {
		target string
		reason string // "" allowed; "error" a lookup failure
		want   string // the addresses to dial, when allowed
	}{
		{"pub.test:443", "", "[8.8.8.8 2001:4860:4860::8888]"},
		{"8.8.4.4:53", "", "[8.8.4.4]"},
		{"[::ffff:8.8.4.4]:53", "", "[8.8.4.4]"},
		{"pub.test:80", audit.ReasonHostNotAllowed, ""},
		{"own.test:443", audit.ReasonPrivateAddress, ""},
		{"own6.test:443", audit.ReasonPrivateAddress, ""},
		{"meta.test:80", audit.ReasonPrivateAddress, ""},
		{"nat64.test:443", audit.ReasonPrivateAddress, ""},
		{"6to4.test:443", audit.ReasonPrivateAddress, ""},
		{"mixed.test:443", audit.ReasonPrivateAddress, ""},
		{"lan.test:443", "", "[10.0.0.1]"},
		{"10.0.0.7:443", "", "[10.0.0.7]"},
		{"gone.test:443", "error", ""},
	} {
		t.Run(tc.target, func(t *testing.T) {
			host, port, _ := net.SplitHostPort(tc.target)
			tg, err := parseTarget(host, port)
			if err != nil {
				t.Fatal(err)
			}
			got, ref, err := p.check(context.Background(), tg)
			switch {
			case tc.reason == "error":
				if err == nil || ref != nil {
					t.Fatalf("got %v %v %v, want a lookup error", got, ref, err)
				}
			case tc.reason != "":
				if ref == nil || ref.reason != tc.reason {
					t.Fatalf("got %v %+v %v, want refusal %s", got, ref, err, tc.reason)
				}
			default:
				if ref != nil || err != nil || fmt.Sprint(got) != tc.want {
					t.Fatalf("got %v %+v %v, want %s", got, ref, err, tc.want)
				}
			}
		})
	}
	if len(p.allowPrivate) != 2 {
		t.Errorf("allow-private kept %v; a wildcard and a malformed entry must be ignored", p.allowPrivate)
	}

	t.Run("this host's interface address", func(t *testing.T) {
		ifaces, err := safedial.InterfaceAddrs()
		if err != nil {
			t.Fatal(err)
		}
		var mine netip.Addr
		for _, a := range ifaces {
			if !a.IsLoopback() && !a.IsLinkLocalUnicast() {
				mine = a
				break
			}
		}
		if !mine.IsValid() {
			t.Skip("this host has no address besides loopback")
		}
		p := New(Options{Allow: mustRules(t, "me.test:443"), Resolver: fakeResolver{"me.test": {mine}}})
		_, ref, err := p.check(context.Background(), target{host: "me.test", port: 443})
		if ref == nil || ref.reason != audit.ReasonPrivateAddress {
			t.Fatalf("a name resolving to this host's %s: %+v %v", mine, ref, err)
		}
	})
}

func TestServeStopsOnCancel(t *testing.T) {
	echo := tcpServer(t, func(c net.Conn) { io.Copy(c, c) })
	f := newFixture(t, func(o *Options) {
		o.Allow = append(o.Allow, mustRules(t, hostPort("allowed.test", echo))...)
		o.AllowPrivate = append(o.AllowPrivate, hostPort("allowed.test", echo))
	})
	tunnel := f.pt.dial(t)
	tunnel.send(t, "CONNECT allowed.test:"+echo+" HTTP/1.1\r\n\r\n")
	if resp, _ := tunnel.response(t, http.MethodConnect); resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	tunnel.send(t, "x\n")
	if got, _ := tunnel.br.ReadString('\n'); got != "x\n" {
		t.Fatalf("tunnel echo %q", got)
	}
	keptAlive := f.pt.dial(t)
	keptAlive.send(t, "GET http://allowed.test:"+f.plain.port+"/ HTTP/1.1\r\n\r\n")
	if resp, _ := keptAlive.response(t, http.MethodGet); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %s", resp.Status)
	}
	halfHeader := f.pt.dial(t)
	halfHeader.send(t, "GET http://allowed.test:"+f.plain.port+"/ HTTP/1.1\r\nX-Partial: ")

	f.pt.stop(t)
	for name, c := range map[string]*rawConn{"tunnel": tunnel, "kept-alive": keptAlive, "half header": halfHeader} {
		t.Run(name, func(t *testing.T) { c.wantClosed(t) })
	}
	if _, err := net.DialTimeout("tcp", f.pt.addr, waitLong); err == nil {
		t.Error("the listener still accepts after Serve returned")
	}
}

func TestServeReturnsErrorWhenListenerFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- New(Options{}).Serve(context.Background(), ln, testWho) }()
	ln.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Serve returned %v, want net.ErrClosed", err)
		}
	case <-time.After(waitLong):
		t.Fatal("Serve did not return")
	}
}

func TestMaxConns(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxConns = 1 })
	first := f.pt.dial(t)
	first.send(t, "GET http://allowed.test:"+f.plain.port+"/ HTTP/1.1\r\n\r\n")
	if resp, _ := first.response(t, http.MethodGet); resp.StatusCode != http.StatusOK {
		t.Fatalf("first connection: %s", resp.Status)
	}
	second := f.pt.dial(t)
	resp, _ := second.response(t, http.MethodGet)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second connection: %s", resp.Status)
	}
	second.wantClosed(t)
	first.Close()
	// The slot frees once the proxy has seen the first connection end.
	deadline := time.Now().Add(waitLong)
	for {
		c := f.pt.dial(t)
		c.send(t, "GET http://allowed.test:"+f.plain.port+"/ HTTP/1.1\r\n\r\n")
		resp, _ := c.response(t, http.MethodGet)
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot never freed: %s", resp.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestIdleConnectionsEnd(t *testing.T) {
	echo := tcpServer(t, func(c net.Conn) { io.Copy(c, c) })
	f := newFixture(t, func(o *Options) {
		o.IdleTimeout = 200 * time.Millisecond
		o.KeepAliveTimeout = 200 * time.Millisecond
		o.Allow = append(o.Allow, mustRules(t, hostPort("allowed.test", echo))...)
		o.AllowPrivate = append(o.AllowPrivate, hostPort("allowed.test", echo))
	})
	t.Run("tunnel", func(t *testing.T) {
		c := f.pt.dial(t)
		c.send(t, "CONNECT allowed.test:"+echo+" HTTP/1.1\r\n\r\n")
		if resp, _ := c.response(t, http.MethodConnect); resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %s", resp.Status)
		}
		c.wantClosed(t)
	})
	t.Run("keep-alive", func(t *testing.T) {
		c := f.pt.dial(t)
		c.send(t, "GET http://allowed.test:"+f.plain.port+"/ HTTP/1.1\r\n\r\n")
		if resp, _ := c.response(t, http.MethodGet); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: %s", resp.Status)
		}
		c.wantClosed(t)
	})
	t.Run("silent client", func(t *testing.T) {
		f.pt.dial(t).wantClosed(t)
	})
}

func TestExpectContinue(t *testing.T) {
	f := newFixture(t, nil)
	c := f.pt.dial(t)
	c.send(t, "POST http://allowed.test:"+f.plain.port+"/echo HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	line, err := c.br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("got %q %v, want 100 Continue", line, err)
	}
	if blank, _ := c.br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("got %q after 100 Continue", blank)
	}
	c.send(t, "hello")
	resp, body := c.response(t, http.MethodPost)
	if resp.StatusCode != http.StatusOK || body != "got 5 bytes" {
		t.Fatalf("got %s %q", resp.Status, body)
	}
	if reqs := f.plain.requests(); len(reqs) != 1 || reqs[0].header.Get("Expect") != "" {
		t.Errorf("origin saw %+v", reqs)
	}
}

func TestChunkedUploadAndStreamedResponse(t *testing.T) {
	release := make(chan struct{})
	streamer := newOriginHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "data: first %d\n\n", len(b))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: second\n\n")
	}))
	f := newFixture(t, func(o *Options) {
		o.Allow = append(o.Allow, mustRules(t, hostPort("allowed.test", streamer))...)
		o.AllowPrivate = append(o.AllowPrivate, hostPort("allowed.test", streamer))
	})
	c := f.pt.dial(t)
	c.send(t, "POST http://allowed.test:"+streamer+"/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n")
	resp, err := http.ReadResponse(c.br, &http.Request{Method: http.MethodPost})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	// The first event must arrive while the origin still holds the second back: a
	// proxy that buffered the body would block here until the test times out.
	if line, err := br.ReadString('\n'); line != "data: first 7\n" {
		t.Fatalf("first event %q, %v", line, err)
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if string(rest) != "\ndata: second\n\n" {
		t.Fatalf("rest %q", rest)
	}
}

// newOriginHandler serves h on loopback and returns its port.
func newOriginHandler(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptestServer(t, h)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return port
}

func TestHTTP10Client(t *testing.T) {
	f := newFixture(t, nil)
	c := f.pt.dial(t)
	c.send(t, "GET http://allowed.test:"+f.plain.port+"/ HTTP/1.0\r\n\r\n")
	resp, body := c.response(t, http.MethodGet)
	if resp.StatusCode != http.StatusOK || body != "hello from plain" || resp.ProtoMinor != 0 {
		t.Fatalf("got %s %s %q", resp.Proto, resp.Status, body)
	}
	c.wantClosed(t)
}

func TestProxyEnv(t *testing.T) {
	env := ProxyEnv(Port)
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		if env[k] != "http://127.0.0.1:3128" {
			t.Errorf("%s = %q", k, env[k])
		}
	}
	for _, k := range []string{"NO_PROXY", "no_proxy"} {
		if env[k] != "127.0.0.1,localhost" {
			t.Errorf("%s = %q", k, env[k])
		}
	}
	if len(env) != 6 {
		t.Errorf("unexpected keys: %v", env)
	}
}

func TestService(t *testing.T) {
	f := newFixture(t, nil)
	svc := f.pt.p.Service(Identity{UserID: "bob", TaskID: 9})
	if svc.Name != ServiceName || svc.Port != Port || svc.Serve == nil {
		t.Fatalf("service %+v", svc)
	}
	ln, err := net.Listen("unix", t.TempDir()+"/proxy.sock")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Serve(ctx, ln) }()
	c, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "CONNECT evil.test:443 HTTP/1.1\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("got %v %v", resp, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	var found bool
	for _, e := range refusals(t, f.audit) {
		found = found || (e.UserID == "bob" && e.TaskID == 9 && e.Action == "evil.test:443")
	}
	if !found {
		t.Errorf("the refusal was not recorded for the service's identity: %+v", refusals(t, f.audit))
	}
}

// TestObserve: every decision is reported — an allowed tunnel by its host, plain-HTTP
// requests by their URL (each one on a kept-alive connection), refusals with their
// reason code — and for the identity the listener serves.
func TestObserve(t *testing.T) {
	var mu sync.Mutex
	var got []Decision
	f := newFixture(t, func(o *Options) {
		o.Observe = func(d Decision) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, d)
		}
	})
	c := f.pt.client(f.cert.pool)
	for _, u := range []string{
		"https://allowed.test:" + f.tls.port + "/secret-path",
		"http://allowed.test:" + f.plain.port + "/a?q=1",
		"http://allowed.test:" + f.plain.port + "/b",
	} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	raw := f.pt.dial(t)
	raw.send(t, "CONNECT "+hostPort("evil.test", f.tls.port)+" HTTP/1.1\r\n\r\n")
	raw.response(t, http.MethodConnect)
	raw = f.pt.dial(t)
	raw.send(t, "GET http://loop.test:"+f.tls.port+"/x HTTP/1.1\r\nHost: loop.test\r\n\r\n")
	raw.response(t, http.MethodGet)

	mu.Lock()
	defer mu.Unlock()
	var lines []string
	for _, d := range got {
		if d.Who != testWho {
			t.Errorf("decision for %+v, want %+v", d.Who, testWho)
		}
		lines = append(lines, strings.TrimSpace(fmt.Sprintf("%s %s %s %s %s", d.Outcome, d.Method, d.Target, d.URL, d.Reason)))
	}
	want := []string{
		"allowed CONNECT allowed.test:" + f.tls.port,
		"allowed GET allowed.test:" + f.plain.port + " http://allowed.test:" + f.plain.port + "/a?q=1",
		"allowed GET allowed.test:" + f.plain.port + " http://allowed.test:" + f.plain.port + "/b",
		"refused CONNECT evil.test:" + f.tls.port + "  " + audit.ReasonHostNotAllowed,
		"refused GET loop.test:" + f.tls.port + " http://loop.test:" + f.tls.port + "/x " + audit.ReasonPrivateAddress,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("decisions:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
