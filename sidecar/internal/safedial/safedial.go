// Package safedial connects the sidecar to addresses that users or the agent name
// (url-health checks, news feeds, the sandbox's network proxy) without letting those
// names reach what the public internet cannot: the sidecar's own host and its LAN.
//
// Three dangers make a plain net.Dialer unfit for such names
// (reference/sandbox-and-claude.md §8.2 item 9):
//   - DNS rebinding: a name that resolved to a public address when it was checked can
//     resolve to 127.0.0.1 a moment later, when the HTTP client looks it up again to
//     connect. Dialer therefore resolves once, checks every address, and connects to
//     the checked addresses only.
//   - Cloud metadata services: 169.254.169.254 (and its NAT64 and 6to4 disguises)
//     hands out the machine's cloud credentials to anyone who asks.
//   - The server's own addresses: a public address of this host reaches Nextcloud,
//     SSH and the sidecar itself as surely as loopback does, so the addresses of the
//     network interfaces are refused like loopback.
//
// An administrator can allow exact host:port entries (config network.allow_private),
// e.g. an intranet server, to reach such addresses anyway.
package safedial

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// specialRange is a block of addresses that is not the public internet.
type specialRange struct {
	prefix netip.Prefix
	what   string // ends up in messages to users and in the audit log
}

// specialRanges is the table SpecialAddr reads; it is never changed.
var specialRanges = func() []specialRange {
	list := []struct{ cidr, what string }{
		{"0.0.0.0/8", "this-network"},
		{"10.0.0.0/8", "private"},
		{"100.64.0.0/10", "shared (CGNAT)"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.0.0/16", "link-local"},
		{"172.16.0.0/12", "private"},
		{"192.0.0.0/24", "IETF protocol assignments"},
		{"192.168.0.0/16", "private"},
		{"198.18.0.0/15", "benchmarking"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved"}, // includes the broadcast address 255.255.255.255
		{"::/96", "unspecified, loopback or IPv4-compatible"},
		{"100::/64", "discard"},
		{"64:ff9b:1::/48", "local NAT64"},
		{"fc00::/7", "unique local"},
		{"fe80::/10", "link-local"},
		{"fec0::/10", "site-local"},
		{"ff00::/8", "multicast"},
	}
	out := make([]specialRange, len(list))
	for i, e := range list {
		out[i] = specialRange{netip.MustParsePrefix(e.cidr), e.what}
	}
	return out
}()

var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// SpecialAddr returns what kind of non-public address a is ("loopback", "private",
// "link-local", …), or "" for an address on the public internet. IPv6 forms that
// carry an IPv4 address (mapped, NAT64 64:ff9b::/96, 6to4 2002::/16) are judged by
// that address, so 64:ff9b::a9fe:a9fe is the metadata service as much as
// 169.254.169.254 is. A zone is ignored; an invalid address is special.
func SpecialAddr(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if !a.IsValid() {
		return "invalid"
	}
	for _, r := range specialRanges {
		if r.prefix.Contains(a) {
			return r.what
		}
	}
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64Prefix.Contains(a):
			return SpecialAddr(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		case sixToFour.Contains(a):
			return SpecialAddr(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
		}
	}
	return ""
}

// InterfaceAddrs lists this host's own addresses (unmapped, without zones). They are
// read afresh at every call, as addresses come and go.
func InterfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		default:
			continue
		}
		if na, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, na.Unmap())
		}
	}
	return out, nil
}

// Resolver looks up host names; *net.Resolver satisfies it. Tests pass a fake to
// play the DNS server an attacker controls.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// RefusedError is a destination the policy does not allow, as opposed to a network
// error: callers report it as a configuration matter, not as a site being down.
type RefusedError struct {
	// Host is the host as dialled: a name or an address literal.
	Host string
	// Port is the port as dialled.
	Port string
	// Addr is the refused address: the literal itself or one the name resolved to.
	Addr netip.Addr
	// Reason says what Addr is: SpecialAddr's answer, "an address of this server",
	// or "an address with a zone".
	Reason string
}

// reasonZone is the Reason of a literal with a zone (fe80::1%eth0): which interface
// it leaves by cannot be judged, so it is refused even when allowed.
const reasonZone = "an address with a zone"

// reasonOwn is the Reason of an address of this host's network interfaces.
const reasonOwn = "an address of this server"

// Error says what was refused and how an administrator can allow it, if they can.
func (e *RefusedError) Error() string {
	if e.Reason == reasonZone {
		return fmt.Sprintf("%s is an address with a zone, which cannot be checked", e.Host)
	}
	allow := net.JoinHostPort(e.Host, e.Port)
	if a, err := netip.ParseAddr(e.Host); err == nil && a.Unmap() == e.Addr {
		return fmt.Sprintf("%s is not a public address (%s); an administrator can allow %s in network.allow_private",
			e.Host, e.Reason, allow)
	}
	return fmt.Sprintf("%s resolves to %s (%s); an administrator can allow %s in network.allow_private",
		e.Host, e.Addr, e.Reason, allow)
}

// Dialer connects only to public addresses, or to any address for the host:port
// entries in AllowPrivate. Use its DialContext as an http.Transport's DialContext,
// with Transport.Proxy nil: through a proxy the checks would judge the proxy, not the
// site. The zero value is ready to use and allows nothing private. A Dialer is safe
// for concurrent use as long as its fields are not changed.
type Dialer struct {
	// AllowPrivate lists exact host:port entries (config network.allow_private) that
	// may reach special addresses. Names are matched case-insensitively and without
	// a trailing dot, addresses in canonical form. Entries that CheckAllowEntry
	// rejects (a wildcard, no port) are ignored.
	AllowPrivate []string
	// Resolver resolves names; nil means net.DefaultResolver.
	Resolver Resolver
	// HostAddrs lists this host's own addresses, refused like loopback; nil means
	// InterfaceAddrs.
	HostAddrs func() ([]netip.Addr, error)
}

// CheckAllowEntry reports why entry cannot be an AllowPrivate entry, or nil if it
// can, so configuration can be validated (or bad entries logged) where it is loaded.
func CheckAllowEntry(entry string) error {
	_, err := allowKey(entry)
	return err
}

// allowKey normalises an AllowPrivate entry for comparison with dialled addresses.
func allowKey(entry string) (string, error) {
	host, port, err := net.SplitHostPort(strings.TrimSpace(entry))
	if err != nil {
		return "", fmt.Errorf("allow-private entry %q is not host:port: %w", entry, err)
	}
	if host == "" {
		return "", fmt.Errorf("allow-private entry %q has no host", entry)
	}
	if strings.Contains(host, "*") {
		return "", fmt.Errorf("allow-private entry %q: a wildcard cannot be allowed to reach private addresses", entry)
	}
	if strings.Contains(host, "%") {
		return "", fmt.Errorf("allow-private entry %q: an address with a zone cannot be checked", entry)
	}
	p, err := parsePort(port)
	if err != nil {
		return "", fmt.Errorf("allow-private entry %q: %w", entry, err)
	}
	return hostPortKey(host, p), nil
}

func parsePort(port string) (uint16, error) {
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return uint16(p), nil
}

// hostPortKey is host:port in the form allow entries are compared in: lower case,
// no trailing dot, addresses unmapped and canonical, the port a plain number.
func hostPortKey(host string, port uint16) string {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// privateAllowed reports whether host:port is in AllowPrivate.
func (d *Dialer) privateAllowed(host string, port uint16) bool {
	key := hostPortKey(host, port)
	for _, e := range d.AllowPrivate {
		if k, err := allowKey(e); err == nil && k == key {
			return true
		}
	}
	return false
}

// DialContext connects to addr (host:port). It resolves a name once, refuses with a
// *RefusedError when any of its addresses is special or this host's own (a name that
// also resolves to a private address is not the public site it claims to be), and
// then connects to the checked addresses in turn, never to a second lookup's answer.
// Other errors are resolution or network failures.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if host == "" {
		return nil, fmt.Errorf("dial %s: no host", addr)
	}
	p, err := parsePort(port)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Zone() != "" {
		return nil, &RefusedError{Host: host, Port: port, Addr: a, Reason: reasonZone}
	}
	addrs, err := d.resolve(ctx, network, host)
	if err != nil {
		return nil, err
	}
	if !d.privateAllowed(host, p) {
		if err := d.check(host, port, addrs); err != nil {
			return nil, err
		}
	}
	var nd net.Dialer
	var errs []error
	for _, a := range addrs {
		c, err := nd.DialContext(ctx, network, netip.AddrPortFrom(a, p).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// resolve returns host's addresses, unmapped and without duplicates; a literal is
// its own answer.
func (d *Dialer) resolve(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	r := d.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ipNet := "ip"
	switch {
	case strings.HasSuffix(network, "4"):
		ipNet = "ip4"
	case strings.HasSuffix(network, "6"):
		ipNet = "ip6"
	}
	got, err := r.LookupNetIP(ctx, ipNet, host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	var addrs []netip.Addr
	for _, a := range got {
		if a = a.Unmap(); a.IsValid() && !contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no addresses", host)
	}
	return addrs, nil
}

// check refuses addrs when any of them is special or this host's own.
func (d *Dialer) check(host, port string, addrs []netip.Addr) error {
	hostAddrs := d.HostAddrs
	if hostAddrs == nil {
		hostAddrs = InterfaceAddrs
	}
	own, err := hostAddrs()
	if err != nil {
		return fmt.Errorf("list this host's addresses: %w", err)
	}
	for _, a := range addrs {
		what := SpecialAddr(a)
		if what == "" && isOwn(own, a) {
			what = reasonOwn
		}
		if what != "" {
			return &RefusedError{Host: host, Port: port, Addr: a, Reason: what}
		}
	}
	return nil
}

// isOwn reports whether a is one of own, whatever the form or zone of either.
func isOwn(own []netip.Addr, a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	for _, o := range own {
		if o.Unmap().WithZone("") == a {
			return true
		}
	}
	return false
}

func contains(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if b == a {
			return true
		}
	}
	return false
}
