package netproxy

import (
	"net/netip"
	"testing"
)

func TestSpecialAddr(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		special bool
	}{
		{"8.8.8.8", false},
		{"1.1.1.1", false},
		{"2606:4700:4700::1111", false},
		{"172.32.0.1", false},
		{"100.128.0.1", false},
		{"169.253.255.255", false},
		{"64:ff9b::808:808", false},
		{"2002:808:808::1", false},
		{"127.0.0.1", true},
		{"127.255.255.254", true},
		{"10.0.0.1", true},
		{"172.16.0.1", true},
		{"172.31.255.255", true},
		{"192.168.0.1", true},
		{"100.64.0.1", true},
		{"100.127.255.255", true},
		{"169.254.169.254", true},
		{"192.0.0.192", true},
		{"0.0.0.0", true},
		{"0.1.2.3", true},
		{"224.0.0.251", true},
		{"255.255.255.255", true},
		{"::", true},
		{"::1", true},
		{"::127.0.0.1", true},
		{"fe80::1", true},
		{"fe80::1%eth0", true},
		{"fc00::1", true},
		{"fd00:ec2::254", true},
		{"ff02::1", true},
		{"::ffff:10.0.0.1", true},
		{"64:ff9b::7f00:1", true},
		{"64:ff9b:1::1", true},
		{"2002:a9fe:a9fe::1", true},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			got := specialAddr(netip.MustParseAddr(tc.addr))
			if (got != "") != tc.special {
				t.Errorf("specialAddr = %q, want special %v", got, tc.special)
			}
		})
	}
}
