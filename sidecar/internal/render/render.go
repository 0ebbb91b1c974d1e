// Package render loads a web page in Debian's headless Chromium, for pages whose text
// only scripts write, and returns the document as it stands once the scripts ran.
//
// Chromium runs in a bubblewrap sandbox of its own (package sandbox) with no user's
// files (an empty tmpfs workspace and home, a throwaway profile in /tmp), no secret and
// no network: its only way out is the network allowlist proxy (package netproxy),
// served on the sandbox's loopback and named by --proxy-server, with loopback itself
// sent through the proxy too. So every connection the page makes, its own and its
// scripts', images' and styles', meets the same allowlist, private-address and approval
// checks as an agent's, and each is reported to the caller (Page.Requests) to be shown
// in the task's events. A run is bounded in time (Chromium is asked to stop loading
// first, then the whole sandbox is killed: bwrap's pid namespace ends with its init) and
// in output.
//
// Chromium's own sandbox cannot run here: it needs user namespaces, which the
// bubblewrap sandbox forbids inside itself (--disable-userns; Chromium then stops with
// "No usable sandbox!", zygote_host_impl_linux.cc), or its setuid helper, which
// no_new_privs disables. Chromium is therefore started with --no-sandbox and the
// bubblewrap sandbox, its seccomp filter and the missing network are the boundary: a
// page that took over the renderer finds an empty, read-only system with nothing of
// any user in it and no way out but the proxy.
package render

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/netproxy"
	"github.com/istota/istota/sidecar/internal/sandbox"
)

// DefaultChromium is Debian's Chromium binary (the /usr/bin/chromium wrapper script
// only adds desktop flags and Google's API keys, which a headless render needs neither
// of).
const DefaultChromium = "/usr/lib/chromium/chromium"

// Defaults of Options.
const (
	DefaultTimeout  = 30 * time.Second
	DefaultMaxBytes = 5 << 20
	// DefaultMaxConcurrent is how many pages are rendered at once by default.
	DefaultMaxConcurrent = 2
	// maxRequests bounds the decisions one render reports; the rest are counted.
	maxRequests = 200
	// maxStderr bounds what is kept of Chromium's own messages.
	maxStderr = 16 << 10
	// jsHeapMB bounds a page's JavaScript heap. The sandbox cannot bound Chromium's
	// address space as it does an agent's: V8 and PartitionAlloc reserve terabytes of
	// it up front.
	jsHeapMB = 512
	// profileDir is Chromium's throwaway profile, on the sandbox's own /tmp (a tmpfs
	// that dies with the sandbox).
	profileDir = "/tmp/chromium-profile"
)

// Options configure a Renderer.
type Options struct {
	// Runner starts the sandboxes. Required, and it must sandbox: a Runner in the
	// unsandboxed development mode is refused.
	Runner *sandbox.Runner
	// Chromium is the host path of the Chromium (or Chrome) binary; "" is
	// DefaultChromium. It must be under /usr, which is all the sandbox sees of the
	// system.
	Chromium string
	// Proxy holds the network policy: the allowlist, allow_private, the resolver and the
	// audit log. Its Gate and Observe are set per render.
	Proxy netproxy.Options
	// Gate decides hosts other than the page's own (Job.PageHosts), which the caller's
	// approval covers. It must answer at once, without asking the user: a question
	// would outlast the render. Nil admits every host the allowlist allows.
	Gate netproxy.HostGate
	// Timeout bounds one render; 0 is DefaultTimeout.
	Timeout time.Duration
	// MaxBytes bounds the document kept; 0 is DefaultMaxBytes.
	MaxBytes int
	// MaxConcurrent bounds the Chromiums running at once (each takes a few hundred MB);
	// more renders wait for a turn within their own time. 0 is DefaultMaxConcurrent.
	MaxConcurrent int
	Logger        *slog.Logger
}

// Renderer renders pages. It is safe for concurrent use.
type Renderer struct {
	opts  Options
	log   *slog.Logger
	turns chan struct{} // one token per render running
}

// New checks opts and returns a Renderer.
func New(opts Options) (*Renderer, error) {
	if opts.Runner == nil {
		return nil, errors.New("render: no sandbox runner")
	}
	if opts.Runner.Unsandboxed() {
		return nil, errors.New("render: pages are rendered only inside the sandbox, which is disabled (sandbox.unsandboxed)")
	}
	if opts.Chromium == "" {
		opts.Chromium = DefaultChromium
	}
	if !strings.HasPrefix(opts.Chromium, "/usr/") {
		return nil, fmt.Errorf("render: the Chromium binary %s must be under /usr, the only part of the system the sandbox shows", opts.Chromium)
	}
	fi, err := os.Stat(opts.Chromium)
	if err != nil {
		return nil, fmt.Errorf("render: Chromium: %w (apt install chromium)", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("render: Chromium: %s is not an executable file", opts.Chromium)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = DefaultMaxConcurrent
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Renderer{opts: opts, log: opts.Logger.With("component", "render"), turns: make(chan struct{}, opts.MaxConcurrent)}, nil
}

// Job is one page to render.
type Job struct {
	UserID string
	TaskID int64
	// URL is the page, an absolute http(s) URL.
	URL string
	// PageHosts are the hosts the caller's own approval covers (the page's host and
	// those its redirects led to): connections to them are not put to Options.Gate.
	PageHosts []string
}

// Page is a rendered document.
type Page struct {
	// DOM is the document, serialised, after its scripts ran.
	DOM       []byte
	Truncated bool // the document was longer than MaxBytes and was cut
	// Requests are the proxy's decisions on the connections and plain-HTTP requests
	// Chromium made, in order; MoreRequests counts those left out.
	Requests     []netproxy.Decision
	MoreRequests int
}

// ErrTimeout is a render that did not finish in time; the sandbox was killed.
var ErrTimeout = errors.New("the page did not finish rendering in time")

// Render loads job.URL in Chromium and returns the document.
func (r *Renderer) Render(ctx context.Context, job Job) (Page, error) {
	u, err := url.Parse(job.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return Page{}, fmt.Errorf("render: %q is not an http(s) URL", job.URL)
	}
	return r.run(ctx, job, u.String())
}

// Check renders a page of its own, with a script and no network, and reports whether
// Chromium runs in the sandbox: for `istota doctor`.
func (r *Renderer) Check(ctx context.Context) error {
	const want = "istota-render-check"
	page, err := r.run(ctx, Job{UserID: "doctor"}, `data:text/html,<body><script>document.body.textContent="`+want+`"</script></body>`)
	if err != nil {
		return err
	}
	if !bytes.Contains(page.DOM, []byte(want)) {
		return fmt.Errorf("render: Chromium ran but the page's script did not (%d bytes of document)", len(page.DOM))
	}
	return nil
}

// run renders target (already checked) in a fresh sandbox.
func (r *Renderer) run(ctx context.Context, job Job, target string) (Page, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	select {
	case r.turns <- struct{}{}:
		defer func() { <-r.turns }()
	case <-ctx.Done():
		return Page{}, fmt.Errorf("render: %w: other pages were being rendered all the while", ErrTimeout)
	}

	var rec recorder
	popts := r.opts.Proxy
	popts.Observe = rec.add
	popts.Gate = pageGate{hosts: job.PageHosts, next: r.opts.Gate}
	proxy := netproxy.New(popts)
	who := netproxy.Identity{UserID: job.UserID, TaskID: job.TaskID}

	run, err := r.opts.Runner.Prepare(ctx, sandbox.Spec{
		TaskID: job.TaskID,
		UserID: job.UserID,
		// No Workspace, Home or Tmp: empty tmpfs mounts, gone with the sandbox.
		Argv:     r.argv(target),
		Dir:      "/tmp",
		Services: []sandbox.Service{proxy.Service(who)},
	})
	if err != nil {
		return Page{}, fmt.Errorf("render: %w", err)
	}
	defer run.Close()
	out := &capped{max: r.opts.MaxBytes}
	errs := &capped{max: maxStderr, tail: true}
	run.Cmd.Stdout, run.Cmd.Stderr = out, errs
	start := time.Now()
	err = run.Cmd.Run()
	// Close stops the proxy, so no decision is recorded after the copy below.
	if cerr := run.Close(); cerr != nil {
		r.log.Warn("closing the render sandbox", "task_id", job.TaskID, "err", cerr)
	}
	page := Page{DOM: out.buf.Bytes(), Truncated: out.cut > 0}
	page.Requests, page.MoreRequests = rec.result()
	r.log.Debug("page rendered", "task_id", job.TaskID, "bytes", len(page.DOM), "requests", len(page.Requests)+page.MoreRequests,
		"took", time.Since(start), "err", err)
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return page, fmt.Errorf("render: %w (%s)", ErrTimeout, r.opts.Timeout)
	case err != nil && ctx.Err() != nil:
		return page, fmt.Errorf("render: %w", ctx.Err())
	case err != nil:
		return page, fmt.Errorf("render: Chromium failed (%v)%s", err, lastMessage(errs.buf.String()))
	case len(page.DOM) == 0:
		return page, fmt.Errorf("render: Chromium printed no document%s", lastMessage(errs.buf.String()))
	}
	return page, nil
}

// argv is Chromium's command line. Loading stops (and the document is printed) at half
// the hard timeout, so a page with a request that never ends still gives what it has
// (Chromium takes a few seconds more to print it); scripts' timers run on virtual time,
// so content a page writes after a delay is there without waiting for it.
func (r *Renderer) argv(target string) []string {
	stop := r.opts.Timeout / 2
	budget := min(stop/2, 10*time.Second)
	return []string{
		r.opts.Chromium,
		"--headless",
		// See the package comment: the bubblewrap sandbox is the boundary.
		"--no-sandbox",
		"--user-data-dir=" + profileDir,
		"--proxy-server=http://127.0.0.1:" + strconv.Itoa(netproxy.Port),
		// Chromium sends loopback addresses past a proxy unless told not to; inside the
		// sandbox they lead nowhere, and through the proxy they are judged like any host.
		// The one exception is the discard port, where Chromium's component updater is
		// sent: it calls update.googleapis.com despite --disable-component-update, and
		// would fill the task's events and the audit log with refusals. Nothing listens
		// there in the sandbox's own network namespace.
		"--proxy-bypass-list=<-loopback>;127.0.0.1:9",
		"--component-updater=url-source=http://127.0.0.1:9/",
		"--disable-gpu",
		"--disable-dev-shm-usage",
		"--no-first-run",
		"--no-default-browser-check",
		"--disable-background-networking",
		"--disable-component-update",
		"--disable-features=NetworkTimeServiceQuerying,OptimizationHints,Translate,MediaRouter,AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions",
		"--disable-sync",
		"--disable-field-trial-config",
		"--disable-client-side-phishing-detection",
		"--disable-component-extensions-with-background-pages",
		"--disable-domain-reliability",
		"--metrics-recording-only",
		"--disable-extensions",
		"--disable-default-apps",
		"--disable-breakpad",
		"--no-pings",
		"--mute-audio",
		"--js-flags=--max-old-space-size=" + strconv.Itoa(jsHeapMB),
		"--window-size=1280,2000",
		"--timeout=" + strconv.FormatInt(stop.Milliseconds(), 10),
		"--virtual-time-budget=" + strconv.FormatInt(budget.Milliseconds(), 10),
		"--dump-dom",
		target,
	}
}

// pageGate admits the page's own hosts, which the caller's approval covers, and puts
// every other host to next.
type pageGate struct {
	hosts []string
	next  netproxy.HostGate
}

func (g pageGate) AdmitHost(ctx context.Context, who netproxy.Identity, host string, port uint16) (bool, string, error) {
	h := normalizeHost(host)
	if slices.ContainsFunc(g.hosts, func(p string) bool { return normalizeHost(p) == h }) || g.next == nil {
		return true, "", nil
	}
	return g.next.AdmitHost(ctx, who, host, port)
}

// normalizeHost is the form hosts are compared in: lower case, no trailing dot, no
// IPv6 brackets.
func normalizeHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}

// recorder collects the proxy's decisions of one render.
type recorder struct {
	mu   sync.Mutex
	list []netproxy.Decision
	more int
}

func (r *recorder) add(d netproxy.Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.list) >= maxRequests {
		r.more++
		return
	}
	r.list = append(r.list, d)
}

func (r *recorder) result() ([]netproxy.Decision, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.list), r.more
}

// capped keeps at most max bytes written to it: the first ones, or with tail the last
// ones. It never fails a write, so Chromium is never blocked or broken by a full pipe.
type capped struct {
	max  int
	tail bool
	buf  bytes.Buffer
	cut  int
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if c.tail {
		c.buf.Write(p)
		if over := c.buf.Len() - c.max; over > 0 {
			c.buf.Next(over)
			c.cut += over
		}
		return n, nil
	}
	room := c.max - c.buf.Len()
	if room < len(p) {
		c.cut += len(p) - max(room, 0)
		p = p[:max(room, 0)]
	}
	c.buf.Write(p)
	return n, nil
}

// lastMessage is Chromium's last error line worth showing, for an error message; the
// D-Bus and font complaints of a desktop-less sandbox are left out.
func lastMessage(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.Contains(l, "dbus") || strings.Contains(l, "Fontconfig") {
			continue
		}
		if len(l) > 300 {
			l = l[:300] + "…"
		}
		return ": " + l
	}
	return ""
}
