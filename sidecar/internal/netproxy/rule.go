package netproxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// maxHostLen is the longest DNS name (RFC 1035), without the trailing dot.
const maxHostLen = 253

// Rule allows connections to one port of one host, of the subdomains of a domain, or of
// one IP address. Build it with ParseRule; the zero Rule matches nothing.
type Rule struct {
	host     string     // lower case, no trailing dot; for a wildcard the domain after "*."
	wildcard bool       // subdomains of host only, never host itself
	ip       netip.Addr // valid for an IP-literal rule (unmapped, no zone)
	port     uint16
}

// ParseRule parses "host:port", "*.domain:port", "192.0.2.7:port" or "[2001:db8::7]:port".
// The port is required: a rule opens one port, so allowing a host for HTTPS does not
// also open its SSH or database ports. "*.example.com" matches a.example.com and
// a.b.example.com but never example.com itself (list both when both are wanted).
// An IP address is allowed only by a rule naming that address; a name rule never
// matches a request by address.
func ParseRule(s string) (Rule, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Rule{}, errors.New("netproxy: empty allowlist rule")
	}
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) && strings.Contains(ae.Err, "missing port") {
			return Rule{}, fmt.Errorf("netproxy: allowlist rule %q has no port: write host:port, e.g. api.example.com:443", s)
		}
		return Rule{}, fmt.Errorf("netproxy: allowlist rule %q is not host:port (write IPv6 addresses as [2001:db8::1]:443)", s)
	}
	port, err := parsePort(portStr)
	if err != nil {
		return Rule{}, fmt.Errorf("netproxy: allowlist rule %q: %w", s, err)
	}
	r := Rule{port: port}
	switch {
	case strings.HasPrefix(host, "*."):
		base, err := normalizeHost(host[2:])
		if err != nil {
			return Rule{}, fmt.Errorf("netproxy: allowlist rule %q: %w", s, err)
		}
		if _, err := netip.ParseAddr(base); err == nil {
			return Rule{}, fmt.Errorf("netproxy: allowlist rule %q: a wildcard needs a domain name, not an address", s)
		}
		if !strings.Contains(base, ".") {
			return Rule{}, fmt.Errorf("netproxy: allowlist rule %q: a wildcard over a top-level domain is too broad; name a domain such as *.example.com", s)
		}
		r.host, r.wildcard = base, true
	case strings.Contains(host, "*"):
		return Rule{}, fmt.Errorf("netproxy: allowlist rule %q: a wildcard is allowed only as the whole first label (*.example.com)", s)
	default:
		if ip, err := netip.ParseAddr(host); err == nil {
			if ip.Zone() != "" {
				return Rule{}, fmt.Errorf("netproxy: allowlist rule %q: an address with a zone cannot be allowed", s)
			}
			r.ip = ip.Unmap()
			r.host = r.ip.String()
			break
		}
		name, err := normalizeHost(host)
		if err != nil {
			return Rule{}, fmt.Errorf("netproxy: allowlist rule %q: %w", s, err)
		}
		r.host = name
	}
	return r, nil
}

// ParseRules parses every entry with ParseRule; the error names the first bad entry.
func ParseRules(entries []string) ([]Rule, error) {
	out := make([]Rule, 0, len(entries))
	for _, e := range entries {
		r, err := ParseRule(e)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// String returns the rule in the form ParseRule reads.
func (r Rule) String() string {
	switch {
	case r.port == 0:
		return ""
	case r.wildcard:
		return "*." + r.host + ":" + strconv.Itoa(int(r.port))
	}
	return net.JoinHostPort(r.host, strconv.Itoa(int(r.port)))
}

// Wildcard reports whether r matches the subdomains of a domain.
func (r Rule) Wildcard() bool { return r.wildcard }

// match reports whether r allows t.
func (r Rule) match(t target) bool {
	if r.port == 0 || r.port != t.port {
		return false
	}
	if t.ip.IsValid() || r.ip.IsValid() {
		return t.ip.IsValid() && r.ip.IsValid() && t.ip == r.ip
	}
	if r.wildcard {
		return len(t.host) > len(r.host)+1 && strings.HasSuffix(t.host, "."+r.host)
	}
	return t.host == r.host
}

// target is a normalised destination host:port from a request.
type target struct {
	host string     // lower case, no trailing dot; the address's text form for a literal
	ip   netip.Addr // valid when the request named an IP address (unmapped, no zone)
	port uint16
}

// String returns host:port as the audit log and error bodies show it.
func (t target) String() string {
	return net.JoinHostPort(t.host, strconv.Itoa(int(t.port)))
}

// parseTarget checks a request's host and port. Only names made of letters, digits,
// hyphens and underscores, and IP addresses, are accepted: anything else is refused
// before a rule or a resolver ever sees it.
func parseTarget(host, port string) (target, error) {
	p, err := parsePort(port)
	if err != nil {
		return target{}, err
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return target{}, errors.New("an address with a zone is not allowed")
		}
		ip = ip.Unmap()
		return target{host: ip.String(), ip: ip, port: p}, nil
	}
	name, err := normalizeHost(host)
	if err != nil {
		return target{}, err
	}
	return target{host: name, port: p}, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return uint16(n), nil
}

// normalizeHost lower-cases a DNS name, drops one trailing dot and checks its syntax.
// Names whose last label is numeric are refused: URL parsers and inet_aton read
// "127.1" or "0x7f.1" as addresses, so such a name could reach an address no rule
// names.
func normalizeHost(h string) (string, error) {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h == "" {
		return "", errors.New("empty host name")
	}
	if len(h) > maxHostLen {
		return "", errors.New("host name is too long")
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return "", fmt.Errorf("host name %q has an empty or over-long label", h)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("host name %q may contain only letters, digits, '-' and '_' (write international names in their xn-- form)", h)
			}
		}
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return "", fmt.Errorf("host name %q looks like a numeric address but is not a valid IP address", h)
	}
	return h, nil
}

// Allows reports whether one of rules allows a connection to host:port, judged exactly
// as the proxy judges a request (names normalised, an address only by a rule naming
// it). Components that fetch on the agent's behalf from outside the sandbox (the
// browse skill, the markets briefing) use it so that the one allowlist governs them
// too. A host or port the proxy would refuse to parse is never allowed.
func Allows(rules []Rule, host, port string) bool {
	t, err := parseTarget(host, port)
	if err != nil {
		return false
	}
	for _, r := range rules {
		if r.match(t) {
			return true
		}
	}
	return false
}
