package netproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/audit"
)

// hopByHop are the headers that describe one connection, not the message (RFC 9110
// §7.6.1), plus the proxy's own. They are never forwarded.
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopByHop deletes hop-by-hop headers, including those the Connection header names.
func removeHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
}

// errorResponse is a complete response the proxy gives itself, always closing the
// connection: after any refusal or error the client starts afresh (fail closed).
func errorResponse(status int, code, msg string) string {
	body := "istota network proxy: " + msg + "\n"
	return fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n%s: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), ErrorHeader, code, len(body), body)
}

// fail answers the client with an error and ends the connection.
func (s *session) fail(cc *clientConn, status int, code, msg string) {
	cc.bw.WriteString(errorResponse(status, code, msg))
	if err := cc.bw.Flush(); err != nil {
		return
	}
	// Half-close and drain briefly, so a client still sending a request body reads the
	// answer instead of a reset.
	closeWrite(cc.c)
	cc.c.SetReadDeadline(time.Now().Add(time.Second))
	io.CopyN(io.Discard, cc.br, 256<<10)
}

// block refuses t with 403, records why, and ends the connection.
func (s *session) block(ctx context.Context, cc *clientConn, t target, r refusal) {
	s.refuse(ctx, t.String(), r)
	s.observe(cc, t, OutcomeRefused, r.reason, r.detail)
	msg := "connection to " + t.String() + " blocked by the network allowlist"
	if r.reason == audit.ReasonPrivateAddress {
		msg = "connection to " + t.String() + " blocked: the host resolves to a private or local address"
	}
	s.fail(cc, http.StatusForbidden, ErrorBlocked, msg)
}

// admitHost asks the gate whether the task may reach t (once per host and session); on
// a refusal it has answered the client.
func (s *session) admitHost(ctx context.Context, cc *clientConn, t target) bool {
	if s.p.gate == nil {
		return true
	}
	s.mu.Lock()
	g := s.hostGates[t.host]
	if g == nil {
		g = &sync.Mutex{}
		s.hostGates[t.host] = g
	}
	s.mu.Unlock()
	g.Lock()
	defer g.Unlock()
	s.mu.Lock()
	known := s.admitted[t.host]
	s.mu.Unlock()
	if known {
		return true
	}
	ok, msg, err := s.p.gate.AdmitHost(ctx, s.who, t.host, t.port)
	switch {
	case err != nil && ctx.Err() != nil:
		s.fail(cc, http.StatusServiceUnavailable, "task-ended", "the task ended while it waited for the user's answer")
		return false
	case err != nil:
		s.log.Error("netproxy: approvals check failed", "target", t.String(), "err", err)
		s.fail(cc, http.StatusServiceUnavailable, "approvals-unavailable", "the approvals check is unavailable; try again later")
		return false
	case !ok:
		s.refuse(ctx, t.String(), refusal{reason: audit.ReasonNotApproved, detail: msg})
		s.observe(cc, t, OutcomeRefused, audit.ReasonNotApproved, msg)
		s.fail(cc, http.StatusForbidden, ErrorNotApproved, "connection to "+t.String()+" refused: "+msg)
		return false
	}
	s.mu.Lock()
	s.admitted[t.host] = true
	s.mu.Unlock()
	return true
}

// observe tells Options.Observe about a decision on t for the request cc is serving.
func (s *session) observe(cc *clientConn, t target, outcome, reason, detail string) {
	if s.p.observe == nil {
		return
	}
	d := Decision{Who: s.who, Method: http.MethodConnect, Target: t.String(), Outcome: outcome, Reason: reason, Detail: detail}
	if req := cc.req; req != nil && req.Method != http.MethodConnect {
		d.Method, d.URL = req.Method, req.URL.String()
	}
	s.p.observe(d)
}

// badRequest answers 400, records it, and ends the connection.
func (s *session) badRequest(ctx context.Context, cc *clientConn, action, detail, msg string) {
	s.refuse(ctx, action, refusal{reason: audit.ReasonBadRequest, detail: detail})
	s.fail(cc, http.StatusBadRequest, "bad-request", msg)
}

// handle serves one client connection: any number of plain-HTTP requests, each checked
// on its own, or one CONNECT tunnel.
func (s *session) handle(ctx context.Context, c net.Conn) {
	cc := newClientConn(c, s.p.idleTO)
	var up *upstream
	defer func() {
		if up != nil {
			s.release(up.c)
		}
	}()
	for {
		req, err := s.readRequest(cc)
		if err != nil {
			switch {
			case errors.Is(err, errHeaderTooLarge):
				s.refuse(ctx, "request", refusal{reason: audit.ReasonBadRequest, detail: "request header too large"})
				s.fail(cc, http.StatusRequestHeaderFieldsTooLarge, "header-too-large", "request header too large")
			case errors.Is(err, errQuiet):
				s.log.Debug("proxy connection ended", "err", err)
			default:
				s.badRequest(ctx, cc, "request", "malformed request", "malformed request")
			}
			return
		}
		cc.req = req
		if req.Method == http.MethodConnect {
			if up != nil {
				s.release(up.c)
				up = nil
			}
			s.connect(ctx, cc, req)
			return
		}
		if !s.forward(ctx, cc, req, &up) {
			return
		}
	}
}

// errQuiet marks ends of a connection that need no answer: the client closed it or
// went silent between or inside requests.
var errQuiet = errors.New("connection closed or idle")

// readRequest reads the next request header.
func (s *session) readRequest(cc *clientConn) (*http.Request, error) {
	cc.lim.on, cc.lim.left = true, s.p.maxHeader
	defer func() { cc.lim.on = false }()
	cc.c.SetReadDeadline(time.Now().Add(s.p.keepAliveTO))
	if _, err := cc.br.Peek(1); err != nil {
		if errors.Is(err, errHeaderTooLarge) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errQuiet, err)
	}
	cc.c.SetReadDeadline(time.Now().Add(s.p.headerTO))
	req, err := http.ReadRequest(cc.br)
	switch {
	case err == nil:
	case errors.Is(err, errHeaderTooLarge) || cc.lim.left <= 0:
		return nil, errHeaderTooLarge
	case isTimeout(err), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, new(*net.OpError)):
		// Not a parse error: the client went away or stalled mid-header.
		return nil, fmt.Errorf("%w: %v", errQuiet, err)
	default:
		return nil, err
	}
	cc.c.SetReadDeadline(time.Time{})
	return req, nil
}

// upstream is the origin connection a plain-HTTP client connection currently uses.
type upstream struct {
	c   net.Conn
	key string // target host:port
	lim *limitReader
	br  *bufio.Reader
	bw  *bufio.Writer
}

// forward checks and forwards one absolute-form request; it reports whether the client
// connection stays open for another.
//
// The request body is not closed here: closing a server-side body drains it, which
// could wait on a stalled client. A forwarded body has been read to its end, and any
// other outcome closes the connection.
func (s *session) forward(ctx context.Context, cc *clientConn, req *http.Request, up **upstream) bool {
	if req.URL.Scheme != "http" || req.URL.Host == "" || req.URL.Opaque != "" {
		msg := "only CONNECT host:port and absolute-form http:// requests are served"
		if req.URL.Scheme == "https" {
			msg = "use CONNECT for https"
		}
		s.badRequest(ctx, cc, "request", "not a proxy request: "+req.Method, msg)
		return false
	}
	port := req.URL.Port()
	if port == "" {
		port = "80"
	}
	t, err := parseTarget(req.URL.Hostname(), port)
	if err != nil {
		s.badRequest(ctx, cc, "request", "bad target: "+err.Error(), "bad host or port")
		return false
	}
	// Every request is checked, kept-alive connection or not (finding (c)).
	if !s.p.allowed(t) {
		s.block(ctx, cc, t, refusal{reason: audit.ReasonHostNotAllowed})
		return false
	}
	if *up != nil && (*up).key != t.String() {
		s.release((*up).c)
		*up = nil
	}
	reused := *up != nil
	if !reused {
		// The name was resolved and its address checked when this connection was
		// dialed; a reused connection goes to that same checked address.
		if *up = s.openUpstream(ctx, cc, t); *up == nil {
			return false
		}
	}
	u := *up
	s.log.Debug("proxy request", "method", req.Method, "target", t.String())
	s.observe(cc, t, OutcomeAllowed, "", "")

	out := &http.Request{
		Method:     req.Method,
		URL:        &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery},
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     req.Header.Clone(),
		Host:       req.URL.Host,
	}
	removeHopByHop(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		// An empty value stops Request.Write from adding Go's own User-Agent.
		out.Header["User-Agent"] = []string{""}
	}
	expect := strings.EqualFold(strings.TrimSpace(out.Header.Get("Expect")), "100-continue")
	out.Header.Del("Expect")
	if req.Body != http.NoBody {
		out.ContentLength = req.ContentLength
		out.Body = &streamBody{r: req.Body, src: cc.c, timeout: s.p.idleTO, flush: u.bw}
	}
	if expect && out.Body != nil {
		// The proxy answers the client's Expect itself, so a client that waits for it
		// sends its body without delay.
		cc.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if cc.bw.Flush() != nil {
			return false
		}
	}
	resp, err := s.roundTrip(u, out)
	if err != nil && reused && out.Body == nil && errors.Is(err, errStale) && safeMethod(out.Method) {
		// The origin closed the kept-alive connection while it was idle; a safe request
		// without a body may be sent again on a fresh connection, as browsers do.
		s.log.Debug("kept-alive upstream connection was closed; retrying on a new one", "target", t.String(), "err", err)
		s.release(u.c)
		if *up = s.openUpstream(ctx, cc, t); *up == nil {
			return false
		}
		u = *up
		resp, err = s.roundTrip(u, out)
	}
	if err != nil {
		s.upstreamFailed(cc, t, err)
		return false
	}
	closeClient := req.Close || !req.ProtoAtLeast(1, 1)
	reuseUpstream := !resp.Close
	removeHopByHop(resp.Header)
	resp.Trailer = nil
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
	if !req.ProtoAtLeast(1, 1) {
		// An HTTP/1.0 client cannot read chunked bodies: the body ends with the
		// connection instead.
		resp.Proto, resp.ProtoMinor = "HTTP/1.0", 0
		resp.TransferEncoding = nil
	}
	if resp.ContentLength < 0 && !chunked(resp.TransferEncoding) {
		// Response.Write sends such a body up to a close, so the connection ends.
		closeClient = true
	}
	resp.Close = closeClient
	body := resp.Body
	resp.Body = &streamBody{r: body, src: u.c, timeout: s.p.idleTO, flush: cc.bw}
	err = resp.Write(plainWriter{cc.bw})
	if err == nil {
		err = cc.bw.Flush()
	}
	if err != nil {
		s.log.Debug("proxy response cut short", "target", t.String(), "err", err)
		// Closing the upstream first keeps Close from draining the rest of the body.
		s.release(u.c)
		*up = nil
		body.Close()
		return false
	}
	body.Close()
	if !reuseUpstream {
		s.release(u.c)
		*up = nil
	}
	return !closeClient
}

func chunked(te []string) bool { return len(te) > 0 && te[0] == "chunked" }

// maxResponseHeader bounds an origin's response header, as http.Transport does.
const maxResponseHeader = 1 << 20

// errStale marks a round trip that failed before the origin answered anything.
var errStale = errors.New("the upstream connection failed before any answer")

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// openUpstream checks t, dials it and wraps the connection; on failure it has answered
// the client and returns nil.
func (s *session) openUpstream(ctx context.Context, cc *clientConn, t target) *upstream {
	c, ok := s.open(ctx, cc, t)
	if !ok {
		return nil
	}
	lim := &limitReader{r: c}
	return &upstream{
		c:   c,
		key: t.String(),
		lim: lim,
		br:  bufio.NewReader(lim),
		bw:  bufio.NewWriter(&deadlineWriter{c: c, timeout: s.p.idleTO}),
	}
}

// roundTrip sends out on u and reads the answer, skipping informational responses.
func (s *session) roundTrip(u *upstream, out *http.Request) (*http.Response, error) {
	if err := out.Write(plainWriter{u.bw}); err != nil {
		return nil, fmt.Errorf("%w: send request: %w", errStale, err)
	}
	if err := u.bw.Flush(); err != nil {
		return nil, fmt.Errorf("%w: send request: %w", errStale, err)
	}
	for first := true; ; first = false {
		u.c.SetReadDeadline(time.Now().Add(s.p.idleTO))
		if first {
			if _, err := u.br.Peek(1); err != nil {
				if isTimeout(err) {
					return nil, fmt.Errorf("read response: %w", err)
				}
				return nil, fmt.Errorf("%w: read response: %w", errStale, err)
			}
		}
		u.lim.on, u.lim.left = true, maxResponseHeader
		resp, err := http.ReadResponse(u.br, out)
		u.lim.on = false
		if err != nil {
			return nil, fmt.Errorf("read response: %w", err)
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			resp.Body.Close()
			return nil, errors.New("upstream switched protocols without being asked")
		case resp.StatusCode >= 100 && resp.StatusCode < 200:
			resp.Body.Close()
			continue
		}
		return resp, nil
	}
}

// upstreamFailed answers 502 for a request the upstream did not complete.
func (s *session) upstreamFailed(cc *clientConn, t target, err error) {
	s.log.Debug("upstream failed", "target", t.String(), "err", err)
	s.fail(cc, http.StatusBadGateway, "upstream-failed", "the upstream "+t.String()+" failed")
}

// open checks t's addresses and dials it; on failure it has answered the client.
func (s *session) open(ctx context.Context, cc *clientConn, t target) (net.Conn, bool) {
	addrs, ref, err := s.p.check(ctx, t)
	switch {
	case ref != nil:
		s.block(ctx, cc, t, *ref)
		return nil, false
	case err != nil:
		s.log.Debug("proxy lookup failed", "target", t.String(), "err", err)
		s.observe(cc, t, OutcomeFailed, "", "cannot resolve "+t.host)
		s.fail(cc, http.StatusBadGateway, "dns-failure", "cannot resolve "+t.host)
		return nil, false
	}
	if !s.admitHost(ctx, cc, t) {
		return nil, false
	}
	c, err := s.dial(ctx, addrs, t.port)
	if err != nil {
		s.log.Debug("proxy dial failed", "target", t.String(), "err", err)
		s.observe(cc, t, OutcomeFailed, "", "cannot connect")
		s.fail(cc, http.StatusBadGateway, "upstream-unreachable", "cannot connect to "+t.String())
		return nil, false
	}
	return c, true
}

// connect serves a CONNECT request: check, dial the checked address, answer 200 and
// pass bytes both ways until either side ends.
func (s *session) connect(ctx context.Context, cc *clientConn, req *http.Request) {
	if strings.HasPrefix(req.RequestURI, "/") || req.URL.Host == "" {
		s.badRequest(ctx, cc, "request", "CONNECT without host:port", "CONNECT needs host:port")
		return
	}
	host, port, err := net.SplitHostPort(req.URL.Host)
	if err != nil {
		s.badRequest(ctx, cc, "request", "CONNECT without host:port", "CONNECT needs host:port")
		return
	}
	t, err := parseTarget(host, port)
	if err != nil {
		s.badRequest(ctx, cc, "request", "bad CONNECT target: "+err.Error(), "bad host or port")
		return
	}
	if !s.p.allowed(t) {
		s.block(ctx, cc, t, refusal{reason: audit.ReasonHostNotAllowed})
		return
	}
	up, ok := s.open(ctx, cc, t)
	if !ok {
		return
	}
	defer s.release(up)
	cc.bw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	if err := cc.bw.Flush(); err != nil {
		return
	}
	s.log.Debug("proxy tunnel opened", "target", t.String(), "addr", up.RemoteAddr().String())
	s.observe(cc, t, OutcomeAllowed, "", "")
	s.tunnel(ctx, cc, up, t)
}

// tunnel passes bytes between the client and up. The client's first bytes are checked
// first: a TLS ClientHello must name the CONNECT host.
func (s *session) tunnel(ctx context.Context, cc *clientConn, up net.Conn, t target) {
	act := newActivity()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Upstream to client starts at once: server-first protocols greet before the
		// client says anything.
		if err := pump(cc.c, up, up, act, s.p.idleTO); err != nil {
			cc.c.Close()
			up.Close()
			return
		}
		closeWrite(cc.c)
	}()
	if !s.inspect(ctx, cc, up, t, act) {
		cc.c.Close()
		up.Close()
		return
	}
	if err := pump(up, cc.br, cc.c, act, s.p.idleTO); err != nil {
		cc.c.Close()
		up.Close()
		return
	}
	closeWrite(up)
}

// inspect reads the client's first flight. It passes non-TLS traffic on ports other
// than 443, requires TLS on 443, and requires the ClientHello's server name to be the
// CONNECT host (no domain fronting by SNI) and not hidden by ECH. It forwards what it
// read when the tunnel may go on.
func (s *session) inspect(ctx context.Context, cc *clientConn, up net.Conn, t target, act *activity) bool {
	strict := s.p.strictTLSPorts[t.port]
	var first byte
	for {
		wait := s.p.idleTO
		if strict {
			wait = s.p.headerTO
		}
		cc.c.SetReadDeadline(time.Now().Add(wait))
		b, err := cc.br.Peek(1)
		if err == nil {
			first = b[0]
			break
		}
		if !strict && isTimeout(err) && act.since() < s.p.idleTO {
			continue
		}
		// A client that closes before sending anything ends the tunnel; one that says
		// nothing on a TLS port is cut off.
		return !strict && errors.Is(err, io.EOF)
	}
	if first != recordHandshake {
		if !strict {
			return true
		}
		s.refuse(ctx, t.String(), refusal{reason: audit.ReasonBadRequest, detail: "the tunnel to a TLS port did not start with a TLS handshake"})
		return false
	}
	cc.c.SetReadDeadline(time.Now().Add(s.p.headerTO))
	ch, err := readClientHello(cc.br)
	if err != nil {
		if isTimeout(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
			s.log.Debug("tunnel ended during the TLS ClientHello", "target", t.String(), "err", err)
			return false
		}
		s.refuse(ctx, t.String(), refusal{reason: audit.ReasonBadRequest, detail: "bad TLS ClientHello: " + err.Error()})
		return false
	}
	if problem := sniProblem(ch, t); problem != "" {
		s.refuse(ctx, t.String(), refusal{reason: audit.ReasonSNIMismatch, detail: problem})
		cc.c.SetWriteDeadline(time.Now().Add(s.p.headerTO))
		io.WriteString(cc.c, tlsAlertAccessDenied)
		return false
	}
	act.touch()
	up.SetWriteDeadline(time.Now().Add(s.p.idleTO))
	if _, err := up.Write(ch.raw); err != nil {
		return false
	}
	return true
}

// sniProblem says why a ClientHello may not go to t, or "" when it may.
func sniProblem(ch clientHello, t target) string {
	if ch.ech {
		return "the TLS ClientHello hides the server name (encrypted ClientHello)"
	}
	if !ch.hasSNI {
		if t.ip.IsValid() {
			return "" // clients send no server name to an address
		}
		return "the TLS ClientHello names no server"
	}
	name, err := normalizeHost(ch.sni)
	if err != nil {
		return "the TLS server name is not a valid host name"
	}
	if name != t.host {
		return "the TLS server name " + name + " differs from the CONNECT host " + t.host
	}
	return ""
}

// pump copies src to dst until src ends (nil) or fails. A read waits while either
// direction of the tunnel carried a byte within idle, so a long answer to a quiet
// request keeps both open.
func pump(dst net.Conn, src io.Reader, srcConn net.Conn, act *activity, idle time.Duration) error {
	buf := make([]byte, 32<<10)
	for {
		srcConn.SetReadDeadline(time.Now().Add(idle))
		n, err := src.Read(buf)
		if n > 0 {
			act.touch()
			dst.SetWriteDeadline(time.Now().Add(idle))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return nil
		case isTimeout(err) && act.since() < idle:
		default:
			return err
		}
	}
}
