package netproxy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"api.example.com:443", "api.example.com:443"},
		{"  API.Example.COM.:443 ", "api.example.com:443"},
		{"*.example.com:443", "*.example.com:443"},
		{"*.Example.com:8443", "*.example.com:8443"},
		{"under_score.example.com:80", "under_score.example.com:80"},
		{"192.0.2.7:443", "192.0.2.7:443"},
		{"[192.0.2.7]:443", "192.0.2.7:443"},
		{"[2001:db8::7]:8443", "[2001:db8::7]:8443"},
		{"[::ffff:192.0.2.7]:443", "192.0.2.7:443"},
		{"localhost:8080", "localhost:8080"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			r, err := ParseRule(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseRuleErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "empty"},
		{"api.example.com", "has no port"},
		{"[2001:db8::7]", "has no port"},
		{"api.example.com:*", "not a number"},
		{"api.example.com:0", "not a number"},
		{"api.example.com:65536", "not a number"},
		{"api.example.com:-1", "not a number"},
		{":443", "empty host"},
		{"::1:443", "not host:port"},
		{"*:443", "whole first label"},
		{"*example.com:443", "whole first label"},
		{"a.*.example.com:443", "whole first label"},
		{"*.com:443", "too broad"},
		{"*.*.example.com:443", "letters, digits"},
		{"*.192.0.2.1:443", "numeric address"},
		{"ex ample.com:443", "letters, digits"},
		{"bücher.de:443", "xn--"},
		{"a..b:443", "empty or over-long label"},
		{strings.Repeat("a", 64) + ".test:443", "empty or over-long label"},
		{strings.Repeat("abcdefg.", 32) + "test:443", "too long"},
		{"127.1:443", "numeric address"},
		{"0x7f.1:443", "numeric address"},
		{"[fe80::1%eth0]:443", "zone"},
		{"http://api.example.com:443", "not host:port"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := ParseRule(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := ParseRules([]string{"ok.test:443", "bad"}); err == nil || !strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("ParseRules error %v does not name the bad entry", err)
	}
}

func TestRuleMatch(t *testing.T) {
	for _, tc := range []struct {
		rule, host string
		port       uint16
		want       bool
	}{
		{"*.x.test:443", "a.x.test", 443, true},
		{"*.x.test:443", "a.b.x.test", 443, true},
		{"*.x.test:443", "x.test", 443, false},
		{"*.x.test:443", "evil-x.test", 443, false},
		{"*.x.test:443", "ax.test", 443, false},
		{"*.x.test:443", "a.x.test.evil", 443, false},
		{"*.x.test:443", "a.x.test", 444, false},
		{"api.test:443", "api.test", 443, true},
		{"api.test:443", "sub.api.test", 443, false},
		{"api.test:443", "api.test", 80, false},
		{"api.test:443", "192.0.2.7", 443, false},
		{"192.0.2.7:443", "192.0.2.7", 443, true},
		{"192.0.2.7:443", "::ffff:192.0.2.7", 443, true},
		{"192.0.2.7:443", "192.0.2.8", 443, false},
		{"[2001:db8::7]:443", "2001:db8:0::7", 443, true},
	} {
		t.Run(tc.rule+" "+tc.host, func(t *testing.T) {
			r, err := ParseRule(tc.rule)
			if err != nil {
				t.Fatal(err)
			}
			tg := target{host: tc.host, port: tc.port}
			if a, err := netip.ParseAddr(tc.host); err == nil {
				tg = target{host: a.Unmap().String(), ip: a.Unmap(), port: tc.port}
			}
			if got := r.match(tg); got != tc.want {
				t.Errorf("match = %v, want %v", got, tc.want)
			}
		})
	}
	if (Rule{}).match(target{host: "", port: 0}) {
		t.Error("the zero Rule matched")
	}
}

func TestAllows(t *testing.T) {
	rules, err := ParseRules([]string{"stooq.com:443", "*.example.org:443", "127.0.0.1:8080"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, port string
		want       bool
	}{
		{"stooq.com", "443", true},
		{"STOOQ.com.", "443", true},
		{"stooq.com", "80", false},
		{"www.example.org", "443", true},
		{"example.org", "443", false},
		{"127.0.0.1", "8080", true},
		{"::ffff:127.0.0.1", "8080", true},
		{"localhost", "8080", false},
		{"127.1", "8080", false},
		{"stooq.com", "x", false},
		{"", "443", false},
	} {
		if got := Allows(rules, tc.host, tc.port); got != tc.want {
			t.Errorf("Allows(%q, %q) = %v, want %v", tc.host, tc.port, got, tc.want)
		}
	}
	if Allows(nil, "stooq.com", "443") {
		t.Error("an empty allowlist allowed a host")
	}
}
