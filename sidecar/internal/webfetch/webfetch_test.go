package webfetch

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/netproxy"
	"github.com/istota/istota/sidecar/internal/safedial"
)

// loopback starts a server on 127.0.0.1 and returns it with its host:port.
func loopback(t *testing.T, h http.Handler) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return srv, u.Host
}

func rules(t *testing.T, entries ...string) []netproxy.Rule {
	t.Helper()
	r, err := netproxy.ParseRules(entries)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestGetAllowedLoopback(t *testing.T) {
	srv, hp := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("User-Agent") != "test-agent" {
			t.Errorf("User-Agent = %q", r.Header.Get("User-Agent"))
		}
		w.Header().Set("Content-Type", "text/html; charset=ISO-8859-1")
		w.Write([]byte("<p>hello</p>"))
	}))
	c := New(Options{Allow: rules(t, hp), AllowPrivate: []string{hp}, UserAgent: "test-agent"})
	got, err := c.Get(context.Background(), srv.URL+"/page#frag", "text/html")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != 200 || got.ContentType != "text/html" || got.Charset != "ISO-8859-1" || string(got.Body) != "<p>hello</p>" || got.Truncated {
		t.Errorf("got %+v", got)
	}
	if got.URL != srv.URL+"/page" {
		t.Errorf("URL = %q", got.URL)
	}
}

func TestGetRefusesPrivateWithoutAllowPrivate(t *testing.T) {
	hits := 0
	srv, hp := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	c := New(Options{Allow: rules(t, hp)}) // allowlisted, but loopback is not public
	_, err := c.Get(context.Background(), srv.URL, "")
	var ref *safedial.RefusedError
	if !errors.As(err, &ref) || !Refused(err) {
		t.Fatalf("err = %v, want a safedial refusal", err)
	}
	if !strings.Contains(err.Error(), "network.allow_private") {
		t.Errorf("the message does not say how to allow it: %v", err)
	}
	if hits != 0 {
		t.Errorf("the server was reached %d times", hits)
	}
}

func TestGetRefusesHostsOutsideTheAllowlist(t *testing.T) {
	srv, hp := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, allow := range [][]string{nil, {"127.0.0.1:1"}, {"example.org:443"}} {
		c := New(Options{Allow: rules(t, allow...), AllowPrivate: []string{hp}})
		_, err := c.Get(context.Background(), srv.URL, "")
		var na *NotAllowedError
		if !errors.As(err, &na) || na.HostPort != hp || !Refused(err) {
			t.Errorf("allow %v: err = %v, want NotAllowedError for %s", allow, err, hp)
		}
	}
}

func TestGetRedirectIsCheckedAgain(t *testing.T) {
	other, otherHP := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the redirect target outside the allowlist was reached")
	}))
	srv, hp := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/secret", http.StatusFound)
	}))
	c := New(Options{Allow: rules(t, hp), AllowPrivate: []string{hp, otherHP}})
	_, err := c.Get(context.Background(), srv.URL, "")
	var na *NotAllowedError
	if !errors.As(err, &na) || na.HostPort != otherHP {
		t.Fatalf("err = %v, want NotAllowedError for %s", err, otherHP)
	}

	// A redirect to a metadata address is refused by the dialer even when the host
	// is allowlisted (its name resolves there).
	res := fakeResolver{"meta.test": {netip.MustParseAddr("169.254.169.254")}}
	srv2, hp2 := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://meta.test/latest/meta-data/", http.StatusFound)
	}))
	c = New(Options{Allow: rules(t, hp2, "meta.test:80"), AllowPrivate: []string{hp2}, Resolver: res})
	_, err = c.Get(context.Background(), srv2.URL, "")
	var ref *safedial.RefusedError
	if !errors.As(err, &ref) || ref.Reason != "link-local" {
		t.Fatalf("err = %v, want a link-local refusal", err)
	}
}

type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestGetLimits(t *testing.T) {
	srv, hp := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Write([]byte(strings.Repeat("x", 5000)))
		case "/slow":
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		case "/missing":
			http.NotFound(w, r)
		}
	}))
	c := New(Options{Allow: rules(t, hp), AllowPrivate: []string{hp}, MaxBytes: 1000, Timeout: 300 * time.Millisecond})
	got, err := c.Get(context.Background(), srv.URL+"/big", "")
	if err != nil || len(got.Body) != 1000 || !got.Truncated {
		t.Errorf("big: %d bytes, truncated %v, err %v", len(got.Body), got.Truncated, err)
	}
	start := time.Now()
	if _, err := c.Get(context.Background(), srv.URL+"/slow", ""); err == nil || !strings.Contains(err.Error(), "within") {
		t.Errorf("slow: err = %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("slow took %s", d)
	}
	var se *StatusError
	if _, err := c.Get(context.Background(), srv.URL+"/missing", ""); !errors.As(err, &se) || se.Code != 404 {
		t.Errorf("missing: err = %v", err)
	}
}

func TestGetBadURLs(t *testing.T) {
	c := New(Options{Allow: rules(t, "example.org:443")})
	for _, u := range []string{"ftp://example.org/", "file:///etc/passwd", "https://user:pw@example.org/", "https:///x", "javascript:alert(1)", "%zz"} {
		_, err := c.Get(context.Background(), u, "")
		if !errors.Is(err, ErrBadURL) {
			t.Errorf("%s: err = %v, want ErrBadURL", u, err)
		}
	}
}
