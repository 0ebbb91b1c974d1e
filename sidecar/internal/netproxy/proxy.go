// Package netproxy is the network allowlist proxy every sandbox's egress goes through.
//
// A sandbox has its own network namespace with nothing but loopback. Its agent reaches
// the outside only through HTTPS_PROXY / HTTP_PROXY = http://127.0.0.1:3128, which the
// sandbox's init passes to a per-task Unix socket served here (sandbox.Service). The
// proxy speaks HTTP/1.1 proxy semantics: CONNECT host:port opens a byte tunnel (no TLS
// interception), and absolute-form http:// requests are forwarded one by one. Every
// request is checked against the allowlist, including each one on a kept-alive
// connection (reference/sandbox-and-claude.md finding (c)); an allowed name is resolved
// once, refused when it resolves to a private, loopback, link-local or own-host
// address, and the checked address is the one dialed, so DNS rebinding cannot move the
// connection elsewhere (§8.2 item 9). Inside an allowed CONNECT the TLS ClientHello's
// server name must be the CONNECT host (no domain fronting by SNI). Refusals answer
// 403 with "X-Proxy-Error: blocked-by-allowlist" and are written to the audit log with a
// stable reason code. Anything the proxy cannot parse closes the connection.
package netproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/safedial"
	"github.com/istota/istota/sidecar/internal/sandbox"
)

const (
	// ServiceName is the name of the proxy's socket in the sandbox
	// (sandbox.SocketMountDir/proxy.sock).
	ServiceName = "proxy"
	// Port is where the sandbox's init serves the proxy, on 127.0.0.1 inside the
	// sandbox's own network namespace.
	Port = 3128
	// Component names the proxy in audit entries.
	Component = "netproxy"

	// ErrorHeader names the response header that says why the proxy answered itself.
	ErrorHeader = "X-Proxy-Error"
	// ErrorBlocked is ErrorHeader's value on every policy refusal (403).
	ErrorBlocked = "blocked-by-allowlist"
	// ErrorNotApproved is ErrorHeader's value when the host is allowed but the user did
	// not approve reaching it (403).
	ErrorNotApproved = "not-approved"
)

// Defaults for the zero fields of Options.
const (
	DefaultDialTimeout      = 15 * time.Second
	DefaultHeaderTimeout    = 30 * time.Second
	DefaultKeepAliveTimeout = 2 * time.Minute
	DefaultIdleTimeout      = 10 * time.Minute
	DefaultMaxHeaderBytes   = 64 << 10
	DefaultMaxConns         = 128
)

// maxAuditKeys bounds the distinct refusals one Serve writes to the audit log, so an
// agent looping over refused hosts cannot flood the database.
const maxAuditKeys = 256

// maxDetail bounds the detail text of an audit entry.
const maxDetail = 200

// Resolver looks up host names; *net.Resolver satisfies it.
type Resolver = safedial.Resolver

// Identity is the user and task a proxy listener serves. It is bound to the listener
// (one socket per task), never read from a request.
type Identity struct {
	UserID string
	TaskID int64
}

// Options configure a Proxy. Only Allow matters for policy; zero values elsewhere take
// the defaults above.
type Options struct {
	// Allow lists what may be reached. Empty allows nothing (fail closed).
	Allow []Rule
	// AllowPrivate lists exact host:port entries (the ParseRule syntax, no wildcard)
	// that may resolve to private, loopback, link-local or this host's own addresses,
	// e.g. a Nextcloud on the LAN. An entry grants nothing by itself: the host:port
	// must also be in Allow. Invalid entries are logged and ignored; validate them
	// with ParseRule when loading the configuration.
	AllowPrivate []string
	// Resolver resolves allowed names; nil means net.DefaultResolver.
	Resolver Resolver
	// HostAddrs lists this host's own addresses, refused like loopback; nil lists the
	// addresses of the network interfaces (at every check, as they can change).
	HostAddrs func() ([]netip.Addr, error)
	// DialTimeout bounds name resolution and, separately, connecting upstream.
	DialTimeout time.Duration
	// HeaderTimeout bounds reading one request header, and the TLS ClientHello of a
	// tunnel to port 443.
	HeaderTimeout time.Duration
	// KeepAliveTimeout is how long a client connection may wait between requests.
	KeepAliveTimeout time.Duration
	// IdleTimeout ends a tunnel, or a request or response in flight, that carried no
	// byte in either direction for this long. It must outlast the longest silence of a
	// streamed model answer.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request header.
	MaxHeaderBytes int
	// MaxConns bounds the open client connections of one Serve (one task); more are
	// answered 503 and closed.
	MaxConns int
	// Gate decides, after the allowlist and the address checks, whether the task may
	// open a connection to the host now: reaching a host is an external action of the
	// approvals (a new host is asked about). It may wait for the user's answer. Nil
	// admits every allowed host.
	Gate HostGate
	// Observe, when set, is told of every request the proxy decides (each CONNECT and
	// each plain-HTTP request, allowed, refused or failed), so that a caller serving one
	// job (a page rendered for the browse skill) can show what it reached. It is called
	// from the connection's goroutine and must not block.
	Observe func(Decision)
	// Audit records refusals; nil records them in the log only.
	Audit  *audit.Log
	Logger *slog.Logger
	// Clock is the time source of the audit log made when Audit is nil. Connection
	// deadlines always use the real clock, as the kernel does.
	Clock func() time.Time
}

// Decision is one request as the proxy decided it, for Options.Observe.
type Decision struct {
	Who    Identity
	Method string // CONNECT, or the plain-HTTP request's method
	Target string // host:port
	// URL is the plain-HTTP request's URL; empty for a CONNECT tunnel, whose requests
	// travel encrypted.
	URL string
	// Outcome is OutcomeAllowed, OutcomeRefused or OutcomeFailed.
	Outcome string
	// Reason is the audit reason code of a refusal; Detail says more (a failure's
	// cause, an approval's answer).
	Reason string
	Detail string
}

// Outcomes of a Decision.
const (
	OutcomeAllowed = "allowed"
	OutcomeRefused = "refused"
	OutcomeFailed  = "failed" // allowed, but the host could not be resolved or reached
)

// HostGate is the approvals check of a connection (the app wires *approval.Service).
type HostGate interface {
	// AdmitHost reports whether who may connect to host:port; when not, message says
	// why, in words for the agent.
	AdmitHost(ctx context.Context, who Identity, host string, port uint16) (ok bool, message string, err error)
}

// Proxy is the allowlist proxy. One Proxy serves every task; each task's listener runs
// its own Serve. It is safe for concurrent use.
type Proxy struct {
	allow        []Rule
	allowPrivate []Rule
	resolver     Resolver
	hostAddrs    func() ([]netip.Addr, error)
	dialTimeout  time.Duration
	headerTO     time.Duration
	keepAliveTO  time.Duration
	idleTO       time.Duration
	maxHeader    int
	maxConns     int
	gate         HostGate
	observe      func(Decision)
	audit        *audit.Log
	logger       *slog.Logger
	// strictTLSPorts are the ports whose tunnels must start with a TLS ClientHello.
	// Other ports may carry any protocol (and server-first ones such as SSH), and are
	// checked only when the client's first byte starts a TLS handshake.
	strictTLSPorts map[uint16]bool
}

// New returns a Proxy for opts.
func New(opts Options) *Proxy {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", Component)
	p := &Proxy{
		allow:          append([]Rule(nil), opts.Allow...),
		resolver:       opts.Resolver,
		hostAddrs:      opts.HostAddrs,
		dialTimeout:    orDefault(opts.DialTimeout, DefaultDialTimeout),
		headerTO:       orDefault(opts.HeaderTimeout, DefaultHeaderTimeout),
		keepAliveTO:    orDefault(opts.KeepAliveTimeout, DefaultKeepAliveTimeout),
		idleTO:         orDefault(opts.IdleTimeout, DefaultIdleTimeout),
		maxHeader:      orDefault(opts.MaxHeaderBytes, DefaultMaxHeaderBytes),
		maxConns:       orDefault(opts.MaxConns, DefaultMaxConns),
		gate:           opts.Gate,
		observe:        opts.Observe,
		audit:          opts.Audit,
		logger:         logger,
		strictTLSPorts: map[uint16]bool{443: true},
	}
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	if p.hostAddrs == nil {
		p.hostAddrs = safedial.InterfaceAddrs
	}
	if p.audit == nil {
		p.audit = audit.New(nil, logger, opts.Clock)
	}
	for _, e := range opts.AllowPrivate {
		r, err := ParseRule(e)
		if err == nil && r.wildcard {
			err = errors.New("a wildcard cannot be allowed to reach private addresses")
		}
		if err != nil {
			logger.Warn("ignoring an invalid allow-private entry", "entry", e, "err", err)
			continue
		}
		p.allowPrivate = append(p.allowPrivate, r)
	}
	if len(p.allow) == 0 {
		logger.Info("the network allowlist is empty: sandboxes reach nothing but the model gateway")
	}
	return p
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Service returns the sandbox service that serves the proxy for who: add it to
// sandbox.Spec.Services and ProxyEnv(Port) to Spec.Env.
func (p *Proxy) Service(who Identity) sandbox.Service {
	return sandbox.Service{
		Name: ServiceName,
		Port: Port,
		Serve: func(ctx context.Context, ln net.Listener) error {
			return p.Serve(ctx, ln, who)
		},
	}
}

// ProxyEnv returns the environment that points HTTP clients inside the sandbox at the
// proxy on 127.0.0.1:port. Loopback stays direct: the model API is reached through the
// separate LLM gateway on 127.0.0.1.
func ProxyEnv(port int) map[string]string {
	u := "http://127.0.0.1:" + strconv.Itoa(port)
	const noProxy = "127.0.0.1,localhost"
	return map[string]string{
		"HTTPS_PROXY": u, "https_proxy": u,
		"HTTP_PROXY": u, "http_proxy": u,
		"NO_PROXY": noProxy, "no_proxy": noProxy,
	}
}

// Serve answers proxy requests on ln for who until ctx ends; then it closes ln and
// every connection it opened, waits for its goroutines and returns nil. It returns an
// error only when ln fails for another reason.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener, who Identity) error {
	ctx, cancel := context.WithCancel(ctx)
	s := &session{
		p:         p,
		who:       who,
		log:       p.logger.With("user_id", who.UserID, "task_id", who.TaskID),
		conns:     map[net.Conn]bool{},
		audited:   map[string]bool{},
		admitted:  map[string]bool{},
		hostGates: map[string]*sync.Mutex{},
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		<-ctx.Done()
		ln.Close()
		s.closeAll()
	}()
	defer func() {
		cancel()
		s.wg.Wait()
	}()

	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !temporaryAccept(err) {
				return fmt.Errorf("netproxy: accept: %w", err)
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accepting a proxy connection failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		if !s.admit(c) {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.release(c)
			s.handle(ctx, c)
		}()
	}
}

// temporaryAccept reports whether an Accept error is worth retrying.
func temporaryAccept(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// session is one Serve: one task's listener and everything opened for it.
type session struct {
	p   *Proxy
	who Identity
	log *slog.Logger
	wg  sync.WaitGroup

	mu         sync.Mutex
	closed     bool
	conns      map[net.Conn]bool // open connections; true for client connections
	clients    int
	warnedFull bool

	auditMu   sync.Mutex
	audited   map[string]bool
	auditFull bool

	// hostGates serialises the gate's questions per host, so that parallel connections
	// to one new host ask once while other hosts go on; admitted holds the hosts the gate
	// let this task reach. Both under mu.
	hostGates map[string]*sync.Mutex
	admitted  map[string]bool
}

// admit registers a new client connection, or turns it away when the session is closing
// or full.
func (s *session) admit(c net.Conn) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return false
	}
	if s.clients >= s.p.maxConns {
		warn := !s.warnedFull
		s.warnedFull = true
		s.mu.Unlock()
		if warn {
			s.log.Warn("too many proxy connections for this task; refusing more", "max_conns", s.p.maxConns)
		}
		// A fresh socket's send buffer is empty, so this write does not block.
		c.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(c, errorResponse(http.StatusServiceUnavailable, "too-many-connections", "too many open connections for this task"))
		c.Close()
		return false
	}
	s.conns[c] = true
	s.clients++
	s.mu.Unlock()
	return true
}

// track registers an upstream connection so that closing the session ends it.
func (s *session) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conns[c] = false
	return true
}

// release forgets c and closes it.
func (s *session) release(c net.Conn) {
	s.mu.Lock()
	if client, ok := s.conns[c]; ok {
		delete(s.conns, c)
		if client {
			s.clients--
		}
	}
	s.mu.Unlock()
	c.Close()
}

// closeAll ends every connection; those opened later are closed at once.
func (s *session) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
}

// refusal is a policy decision against a request.
type refusal struct {
	reason string // an audit reason code
	detail string // for the audit log; never sent to the client
}

// refuse records a refusal in the audit log, once per reason and action in a session.
func (s *session) refuse(ctx context.Context, action string, r refusal) {
	key := r.reason + " " + action
	s.auditMu.Lock()
	seen, full := s.audited[key], len(s.audited) >= maxAuditKeys
	warnFull := full && !s.auditFull
	if full {
		s.auditFull = true
	} else if !seen {
		s.audited[key] = true
	}
	s.auditMu.Unlock()
	switch {
	case seen:
		s.log.Debug("refused again", "action", action, "reason", r.reason)
		return
	case warnFull:
		s.log.Warn("too many distinct refusals for this task; no longer recording them in the audit log", "max", maxAuditKeys)
		return
	case full:
		return
	}
	// Details can quote what the client sent; keep them short.
	if len(r.detail) > maxDetail {
		r.detail = r.detail[:maxDetail] + "…"
	}
	// The refusal is recorded even when the task ends at the same moment.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := s.p.audit.Record(rctx, audit.Entry{
		UserID:    s.who.UserID,
		TaskID:    s.who.TaskID,
		Component: Component,
		Action:    action,
		Reason:    r.reason,
		Detail:    r.detail,
	})
	if err != nil {
		s.log.Warn("recording a proxy refusal failed", "err", err)
	}
}

// allowed reports whether a rule in Allow matches t.
func (p *Proxy) allowed(t target) bool {
	for _, r := range p.allow {
		if r.match(t) {
			return true
		}
	}
	return false
}

// privateAllowed reports whether t may reach non-public addresses.
func (p *Proxy) privateAllowed(t target) bool {
	for _, r := range p.allowPrivate {
		if r.match(t) {
			return true
		}
	}
	return false
}

// check decides t. On success it returns the addresses to dial, already checked; a
// refusal is a policy decision, an error a failure to find out (DNS).
func (p *Proxy) check(ctx context.Context, t target) ([]netip.Addr, *refusal, error) {
	if !p.allowed(t) {
		return nil, &refusal{reason: audit.ReasonHostNotAllowed}, nil
	}
	var addrs []netip.Addr
	if t.ip.IsValid() {
		addrs = []netip.Addr{t.ip}
	} else {
		rctx, cancel := context.WithTimeout(ctx, p.dialTimeout)
		got, err := p.resolver.LookupNetIP(rctx, "ip", t.host)
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("resolve %s: %w", t.host, err)
		}
		for _, a := range got {
			a = a.Unmap()
			if a.IsValid() && !containsAddr(addrs, a) {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) == 0 {
			return nil, nil, fmt.Errorf("resolve %s: no addresses", t.host)
		}
	}
	if p.privateAllowed(t) {
		return addrs, nil, nil
	}
	own, err := p.hostAddrs()
	if err != nil {
		return nil, nil, fmt.Errorf("list this host's addresses: %w", err)
	}
	// Every address must pass: a name that also resolves to a private address is not
	// the public service the rule meant.
	for _, a := range addrs {
		what := safedial.SpecialAddr(a)
		if what == "" && containsAddr(own, a.WithZone("")) {
			what = "an address of this host"
		}
		if what != "" {
			return nil, &refusal{reason: audit.ReasonPrivateAddress, detail: fmt.Sprintf("%s resolves to %s (%s)", t.host, a, what)}, nil
		}
	}
	return addrs, nil, nil
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if b == a {
			return true
		}
	}
	return false
}

// dial connects to the first of addrs that answers, within the dial timeout, and
// registers the connection with the session.
func (s *session) dial(ctx context.Context, addrs []netip.Addr, port uint16) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, s.p.dialTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	var d net.Dialer
	var errs []error
	for i, a := range addrs {
		// Leave the later addresses their share of the time.
		per := time.Until(deadline) / time.Duration(len(addrs)-i)
		actx, acancel := context.WithTimeout(ctx, per)
		c, err := d.DialContext(actx, "tcp", netip.AddrPortFrom(a, port).String())
		acancel()
		if err == nil {
			if !s.track(c) {
				return nil, net.ErrClosed
			}
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// clientConn is a connection from the sandbox.
type clientConn struct {
	req *http.Request // the request being served, for Options.Observe
	c   net.Conn
	lim *limitReader
	br  *bufio.Reader
	bw  *bufio.Writer
}

func newClientConn(c net.Conn, writeTimeout time.Duration) *clientConn {
	lim := &limitReader{r: c}
	return &clientConn{
		c:   c,
		lim: lim,
		br:  bufio.NewReader(lim),
		bw:  bufio.NewWriter(&deadlineWriter{c: c, timeout: writeTimeout}),
	}
}

// errHeaderTooLarge ends a request header longer than MaxHeaderBytes.
var errHeaderTooLarge = errors.New("request header too large")

// limitReader caps the bytes read while a request header is being parsed.
type limitReader struct {
	r    io.Reader
	on   bool
	left int
}

func (l *limitReader) Read(b []byte) (int, error) {
	if !l.on {
		return l.r.Read(b)
	}
	if l.left <= 0 {
		return 0, errHeaderTooLarge
	}
	if len(b) > l.left {
		b = b[:l.left]
	}
	n, err := l.r.Read(b)
	l.left -= n
	return n, err
}

// deadlineWriter bounds every write: a client or upstream that stops reading cannot hold
// the proxy forever.
type deadlineWriter struct {
	c       net.Conn
	timeout time.Duration
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	w.c.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.c.Write(b)
}

// streamBody reads a message body from src with an idle deadline, and first flushes
// what is buffered towards the other side, so streamed bodies (server-sent events) pass
// as they arrive and nothing waits in a buffer while the proxy blocks.
type streamBody struct {
	r       io.ReadCloser
	src     net.Conn
	timeout time.Duration
	flush   *bufio.Writer
}

func (b *streamBody) Read(p []byte) (int, error) {
	if b.flush.Buffered() > 0 {
		if err := b.flush.Flush(); err != nil {
			return 0, err
		}
	}
	b.src.SetReadDeadline(time.Now().Add(b.timeout))
	return b.r.Read(p)
}

func (b *streamBody) Close() error { return b.r.Close() }

// plainWriter hands a bufio.Writer to Request.Write and Response.Write without its
// ReadFrom: ReadFrom reads the body straight into the buffer, and streamBody's flush of
// that same buffer in the middle of it would corrupt what was written. WriteByte keeps
// Request.Write from stacking a second buffer on top.
type plainWriter struct{ bw *bufio.Writer }

func (w plainWriter) Write(p []byte) (int, error) { return w.bw.Write(p) }
func (w plainWriter) WriteByte(c byte) error      { return w.bw.WriteByte(c) }

// activity is the time of the last byte through a tunnel, in either direction.
type activity struct{ last atomic.Int64 }

func newActivity() *activity {
	a := &activity{}
	a.touch()
	return a
}

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

func (a *activity) since() time.Duration {
	return time.Since(time.Unix(0, a.last.Load()))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// closeWrite half-closes c, so the peer sees the end of the stream while the other
// direction keeps flowing.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
