package safedial

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSpecialAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want string // "" for public
	}{
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"93.184.215.14", ""},
		{"2606:4700:4700::1111", ""},
		{"2606:4700::1111", ""},
		{"172.32.0.1", ""},
		{"100.128.0.1", ""},
		{"169.253.255.255", ""},
		{"64:ff9b::808:808", ""},
		{"64:ff9b::5db8:d70e", ""},
		{"2002:808:808::1", ""},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"10.0.0.1", "private"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.0.1", "private"},
		{"100.64.0.1", "shared (CGNAT)"},
		{"100.100.100.200", "shared (CGNAT)"}, // Alibaba Cloud's metadata service
		{"100.127.255.255", "shared (CGNAT)"},
		{"169.254.169.254", "link-local"},
		{"192.0.0.192", "IETF protocol assignments"},
		{"198.18.0.1", "benchmarking"},
		{"0.0.0.0", "this-network"},
		{"0.1.2.3", "this-network"},
		{"224.0.0.1", "multicast"},
		{"224.0.0.251", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "reserved"},
		{"::", "unspecified, loopback or IPv4-compatible"},
		{"::1", "unspecified, loopback or IPv4-compatible"},
		{"::127.0.0.1", "unspecified, loopback or IPv4-compatible"},
		{"100::1", "discard"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"fc00::1", "unique local"},
		{"fd00:ec2::254", "unique local"}, // AWS's IPv6 metadata service
		{"fec0::1", "site-local"},
		{"ff02::1", "multicast"},
		{"ff01::1", "multicast"},
		{"::ffff:10.0.0.1", "private"},
		{"::ffff:127.0.0.1", "loopback"},
		{"64:ff9b::7f00:1", "loopback"},
		{"64:ff9b::a9fe:a9fe", "link-local"},
		{"64:ff9b:1::1", "local NAT64"},
		{"2002:a9fe:a9fe::1", "link-local"},
		{"2002:7f00:1::", "loopback"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			if got := SpecialAddr(netip.MustParseAddr(tc.addr)); got != tc.want {
				t.Errorf("SpecialAddr(%s) = %q, want %q", tc.addr, got, tc.want)
			}
		})
	}
	t.Run("invalid", func(t *testing.T) {
		if got := SpecialAddr(netip.Addr{}); got == "" {
			t.Error("the zero Addr counts as public")
		}
	})
}

func TestInterfaceAddrs(t *testing.T) {
	got, err := InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	loop := false
	for _, a := range got {
		if a.Is4In6() || a.Zone() != "" {
			t.Errorf("%s is not unmapped and zoneless", a)
		}
		loop = loop || a == netip.MustParseAddr("127.0.0.1")
	}
	if !loop {
		t.Errorf("InterfaceAddrs() = %v, without the loopback interface's 127.0.0.1", got)
	}
}

func TestCheckAllowEntry(t *testing.T) {
	for _, tc := range []struct {
		entry string
		ok    bool
	}{
		{"intranet.example.org:8080", true},
		{" Intranet.Example.Org.:443 ", true},
		{"10.0.0.7:443", true},
		{"[::1]:443", true},
		{"intranet.example.org", false},
		{":443", false},
		{"*.example.org:443", false},
		{"[fe80::1%eth0]:443", false},
		{"example.org:http", false},
		{"example.org:0", false},
		{"example.org:65536", false},
		{"bad entry", false},
	} {
		t.Run(tc.entry, func(t *testing.T) {
			if err := CheckAllowEntry(tc.entry); (err == nil) != tc.ok {
				t.Errorf("CheckAllowEntry(%q) = %v, want ok=%v", tc.entry, err, tc.ok)
			}
		})
	}
}

// fakeResolver answers from a table, as a DNS server under an attacker's control
// may: the name looks public, the address is not.
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

// origin is a loopback HTTP server that counts the requests reaching it.
type origin struct {
	port string
	mu   sync.Mutex
	hits int
}

func newOrigin(t *testing.T) *origin {
	t.Helper()
	o := &origin{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		o.mu.Lock()
		o.hits++
		o.mu.Unlock()
		fmt.Fprintln(w, "hello")
	}))
	t.Cleanup(srv.Close)
	_, o.port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	return o
}

func (o *origin) takeHits() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.hits
	o.hits = 0
	return n
}

// get fetches http://hostport/ through d, the way its callers use it.
func get(t *testing.T, d *Dialer, hostport string) error {
	t.Helper()
	client := &http.Client{
		Transport: &http.Transport{Proxy: nil, DialContext: d.DialContext, DisableKeepAlives: true},
		Timeout:   30 * time.Second,
	}
	// A zone's % is escaped in URLs (RFC 6874).
	resp, err := client.Get("http://" + strings.ReplaceAll(hostport, "%", "%25") + "/")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

func TestDialContext(t *testing.T) {
	o := newOrigin(t)
	p := o.port
	own := netip.MustParseAddr("203.0.113.9")
	resolver := fakeResolver{
		"status.example.org":   addrs("127.0.0.1"),
		"intranet.example.org": addrs("127.0.0.1"),
		"a.example.org":        addrs("127.0.0.1"),
		"mixed.example.org":    addrs("93.184.215.14", "10.0.0.5"),
		"meta.example.org":     addrs("169.254.169.254"),
		"nat64.example.org":    addrs("64:ff9b::a9fe:a9fe"),
		"me.example.org":       addrs("203.0.113.9"),
		"empty.example.org":    nil,
	}
	hostAddrs := func() ([]netip.Addr, error) {
		// Mapped, as a careless source might give it: still this host's address.
		return []netip.Addr{netip.AddrFrom16(own.As16())}, nil
	}
	const (
		reached = "reached"
		refused = "refused"
		failed  = "failed"
	)
	for _, tc := range []struct {
		name   string
		addr   string
		allow  []string
		want   string
		reason string // in the RefusedError's Reason, or in a failure's message
	}{
		{name: "loopback literal", addr: "127.0.0.1:" + p, want: refused, reason: "loopback"},
		{name: "loopback literal allowed", addr: "127.0.0.1:" + p, allow: []string{"127.0.0.1:" + p}, want: reached},
		{name: "another port allowed only", addr: "127.0.0.1:" + p, allow: []string{"127.0.0.1:1"}, want: refused, reason: "loopback"},
		{name: "mapped loopback literal", addr: "[::ffff:127.0.0.1]:" + p, want: refused, reason: "loopback"},
		{name: "mapped literal allowed by its plain form", addr: "[::ffff:127.0.0.1]:" + p, allow: []string{"127.0.0.1:" + p}, want: reached},
		{name: "public name resolving to loopback", addr: "status.example.org:" + p, want: refused, reason: "loopback"},
		{name: "allowed name, any case, trailing dot", addr: "intranet.example.org:" + p, allow: []string{" Intranet.Example.Org.:" + p}, want: reached},
		{name: "allowed name on another port", addr: "intranet.example.org:" + p, allow: []string{"intranet.example.org:1"}, want: refused, reason: "loopback"},
		{name: "a wildcard allows nothing", addr: "a.example.org:" + p, allow: []string{"*.example.org:" + p}, want: refused, reason: "loopback"},
		{name: "one private address among public ones", addr: "mixed.example.org:80", want: refused, reason: "private"},
		{name: "metadata service", addr: "meta.example.org:80", want: refused, reason: "link-local"},
		{name: "metadata literal", addr: "169.254.169.254:80", want: refused, reason: "link-local"},
		{name: "metadata behind NAT64", addr: "nat64.example.org:80", want: refused, reason: "link-local"},
		{name: "metadata literal behind NAT64", addr: "[64:ff9b::a9fe:a9fe]:80", want: refused, reason: "link-local"},
		{name: "this server's public address", addr: "me.example.org:443", want: refused, reason: "an address of this server"},
		{name: "an address with a zone, even allowed", addr: "[fe80::1%lo]:" + p, allow: []string{"[fe80::1%lo]:" + p, "[fe80::1]:" + p}, want: refused, reason: "zone"},
		{name: "unknown name", addr: "gone.example.org:80", want: failed, reason: "no such host"},
		{name: "name without addresses", addr: "empty.example.org:80", want: failed, reason: "no addresses"},
		{name: "no port", addr: "status.example.org", want: failed, reason: "port"},
		{name: "port out of range", addr: "status.example.org:70000", want: failed, reason: "port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Dialer{AllowPrivate: tc.allow, Resolver: resolver, HostAddrs: hostAddrs}
			c, err := d.DialContext(context.Background(), "tcp", tc.addr)
			if c != nil {
				c.Close()
			}
			var ref *RefusedError
			switch tc.want {
			case reached:
				if err != nil {
					t.Fatalf("dial %s: %v", tc.addr, err)
				}
				// The same through an http.Transport, counted by the server.
				o.takeHits()
				if err := get(t, d, tc.addr); err != nil {
					t.Fatalf("GET %s: %v", tc.addr, err)
				}
				if o.takeHits() != 1 {
					t.Fatal("the request did not reach the server")
				}
			case refused:
				if !errors.As(err, &ref) {
					t.Fatalf("dial %s = %v, want a *RefusedError", tc.addr, err)
				}
				if !strings.Contains(ref.Reason, tc.reason) {
					t.Errorf("reason %q, want %q in it", ref.Reason, tc.reason)
				}
				if err := get(t, d, tc.addr); !errors.As(err, &ref) {
					t.Errorf("GET %s = %v, want a *RefusedError through the transport", tc.addr, err)
				}
				if n := o.takeHits(); n != 0 {
					t.Errorf("a refused address reached the server %d times", n)
				}
			case failed:
				if err == nil || errors.As(err, &ref) || !strings.Contains(err.Error(), tc.reason) {
					t.Fatalf("dial %s = %v, want a failure (not a refusal) mentioning %q", tc.addr, err, tc.reason)
				}
			}
		})
	}
}

func TestRefusedErrorMessage(t *testing.T) {
	for _, tc := range []struct {
		err  RefusedError
		want string
	}{
		{RefusedError{Host: "status.example.org", Port: "8080", Addr: netip.MustParseAddr("127.0.0.1"), Reason: "loopback"},
			"status.example.org resolves to 127.0.0.1 (loopback); an administrator can allow status.example.org:8080 in network.allow_private"},
		{RefusedError{Host: "::ffff:10.0.0.1", Port: "80", Addr: netip.MustParseAddr("10.0.0.1"), Reason: "private"},
			"::ffff:10.0.0.1 is not a public address (private); an administrator can allow [::ffff:10.0.0.1]:80 in network.allow_private"},
		{RefusedError{Host: "fe80::1%eth0", Port: "80", Addr: netip.MustParseAddr("fe80::1%eth0"), Reason: reasonZone},
			"fe80::1%eth0 is an address with a zone, which cannot be checked"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
	}
}

func TestDialContextZeroValue(t *testing.T) {
	o := newOrigin(t)
	var d Dialer
	for _, addr := range []string{"127.0.0.1:" + o.port, "localhost:" + o.port, "[::1]:" + o.port} {
		_, err := d.DialContext(context.Background(), "tcp", addr)
		var ref *RefusedError
		if !errors.As(err, &ref) {
			t.Errorf("dial %s with the zero Dialer = %v, want a *RefusedError", addr, err)
		}
	}
	if o.takeHits() != 0 {
		t.Error("the zero Dialer reached the server")
	}
}

func TestDialContextLetsPublicAddressesThrough(t *testing.T) {
	// Nothing public can be reached from here: the dial is started with a context
	// that is already over, so passing the policy shows as a cancelled dial.
	d := &Dialer{Resolver: fakeResolver{"www.example.org": addrs("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c")}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, addr := range []string{"www.example.org:443", "93.184.215.14:443"} {
		_, err := d.DialContext(ctx, "tcp", addr)
		var ref *RefusedError
		if errors.As(err, &ref) || !errors.Is(err, context.Canceled) {
			t.Errorf("dial %s = %v, want the policy passed and the dial cancelled", addr, err)
		}
	}
}

func TestDialContextHostAddrsFailure(t *testing.T) {
	d := &Dialer{
		Resolver:  fakeResolver{"www.example.org": addrs("93.184.215.14")},
		HostAddrs: func() ([]netip.Addr, error) { return nil, errors.New("netlink unavailable") },
	}
	_, err := d.DialContext(context.Background(), "tcp", "www.example.org:443")
	var ref *RefusedError
	if err == nil || errors.As(err, &ref) || !strings.Contains(err.Error(), "netlink unavailable") {
		t.Fatalf("dial = %v, want it to fail closed on the host's addresses", err)
	}
}

// rebindResolver answers its first lookup with first and every later one with later,
// as a DNS server rebinding a name does; it counts the lookups.
type rebindResolver struct {
	mu           sync.Mutex
	lookups      int
	first, later netip.Addr
}

func (r *rebindResolver) LookupNetIP(_ context.Context, _, _ string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups++
	if r.lookups == 1 {
		return []netip.Addr{r.first}, nil
	}
	return []netip.Addr{r.later}, nil
}

func TestDialContextConnectsToTheCheckedAddress(t *testing.T) {
	t.Run("no second lookup between check and connect", func(t *testing.T) {
		// The first answer is allowed (an intranet name on loopback); any later answer
		// leads nowhere. Reaching the server proves the checked address was dialled.
		o := newOrigin(t)
		r := &rebindResolver{first: netip.MustParseAddr("127.0.0.1"), later: netip.MustParseAddr("10.255.255.1")}
		d := &Dialer{AllowPrivate: []string{"rebind.example.org:" + o.port}, Resolver: r}
		if err := get(t, d, "rebind.example.org:"+o.port); err != nil {
			t.Fatal(err)
		}
		if o.takeHits() != 1 || r.lookups != 1 {
			t.Fatalf("hits and lookups: want one of each, got lookups=%d", r.lookups)
		}
	})
	t.Run("every dial checks afresh", func(t *testing.T) {
		// A name that was fine once is refused as soon as it rebinds to loopback.
		r := &rebindResolver{first: netip.MustParseAddr("93.184.215.14"), later: netip.MustParseAddr("127.0.0.1")}
		d := &Dialer{Resolver: r, HostAddrs: func() ([]netip.Addr, error) { return nil, nil }}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var ref *RefusedError
		if _, err := d.DialContext(ctx, "tcp", "rebind.example.org:80"); errors.As(err, &ref) {
			t.Fatalf("first dial refused: %v", err)
		}
		if _, err := d.DialContext(context.Background(), "tcp", "rebind.example.org:80"); !errors.As(err, &ref) || ref.Reason != "loopback" {
			t.Fatalf("second dial = %v, want a loopback refusal", err)
		}
	})
}
