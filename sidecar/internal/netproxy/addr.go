package netproxy

import (
	"net"
	"net/netip"
)

// specialRange is a block of addresses that is not the public internet.
type specialRange struct {
	prefix netip.Prefix
	what   string
}

// specialRanges are refused as destinations unless the admin allowed the host:port in
// Options.AllowPrivate: an allowlisted name that resolves here reaches the sidecar's
// own host, its LAN or a cloud metadata service instead of the site the admin meant
// (reference/sandbox-and-claude.md §8.2 item 9).
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
		{"240.0.0.0/4", "reserved"},
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

// specialAddr returns what kind of non-public address a is, or "" for a public one.
// IPv6 forms that carry an IPv4 address (mapped, NAT64, 6to4) are judged by that
// address, so 64:ff9b::a9fe:a9fe is the metadata service as much as 169.254.169.254.
func specialAddr(a netip.Addr) string {
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
			return specialAddr(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		case sixToFour.Contains(a):
			return specialAddr(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
		}
	}
	return ""
}

// interfaceAddrs lists the host's own addresses. A public address of the sidecar's
// host reaches the services listening on it (Nextcloud itself, SSH), so it is refused
// like loopback.
func interfaceAddrs() ([]netip.Addr, error) {
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
