package app

import "testing"

func TestSocketDir(t *testing.T) {
	for _, tc := range []struct{ runtime, want string }{
		{"", "/var/lib/istota/run"},
		{"/run/istota", "/run/istota/sandbox"},
		{"/run/istota:/run/other", "/run/istota/sandbox"},
		{"relative", "/var/lib/istota/run"},
	} {
		if got := socketDir("/var/lib/istota", tc.runtime); got != tc.want {
			t.Errorf("socketDir(%q) = %q, want %q", tc.runtime, got, tc.want)
		}
	}
}
