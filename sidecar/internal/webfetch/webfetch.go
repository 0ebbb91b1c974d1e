// Package webfetch fetches http(s) URLs for the sidecar on behalf of users and the
// agent (the browse skill, the markets briefing) under the same policy as the
// sandbox's network proxy: the destination host:port must be in the network allowlist
// (netproxy rules, config network.allowed_hosts), and its addresses must be public
// unless the exact host:port is listed in network.allow_private (safedial). Every
// redirect hop is judged again, and the connection goes to the address that was
// checked, so neither a redirect nor DNS rebinding can lead a fetch elsewhere. Bodies
// and time are bounded.
package webfetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/netproxy"
	"github.com/istota/istota/sidecar/internal/safedial"
)

// Defaults of Options.
const (
	DefaultTimeout      = 20 * time.Second
	DefaultMaxBytes     = 2 << 20
	DefaultMaxRedirects = 5
)

// NotAllowedError is a destination that is not in the allowlist.
type NotAllowedError struct {
	HostPort string // host:port as the URL names it
}

func (e *NotAllowedError) Error() string {
	return fmt.Sprintf("%s is not in the network allowlist; an administrator can add it to network.allowed_hosts", e.HostPort)
}

// StatusError is an answer outside 2xx.
type StatusError struct {
	URL    string
	Status string // "404 Not Found"
	Code   int
}

func (e *StatusError) Error() string { return fmt.Sprintf("%s answered %s", e.URL, e.Status) }

// ErrBadURL marks a URL that cannot be fetched at all (not http(s), credentials in it,
// no host); the message says which.
var ErrBadURL = errors.New("bad URL")

// Refused reports whether err is a policy refusal (allowlist or private address),
// as opposed to a site that is down or a bad URL.
func Refused(err error) bool {
	var na *NotAllowedError
	var ref *safedial.RefusedError
	return errors.As(err, &na) || errors.As(err, &ref)
}

// Options configure a Client. Zero values take the defaults.
type Options struct {
	// Allow is the allowlist (network.allowed_hosts). Empty allows nothing, unless
	// AnyPublicHost.
	Allow []netproxy.Rule
	// AnyPublicHost lifts the allowlist: every host may be fetched whose addresses are
	// public (the feeds a user names in BRIEFINGS.md). Private addresses still need
	// AllowPrivate.
	AnyPublicHost bool
	// AllowPrivate lists exact host:port entries (network.allow_private) that may
	// resolve to private, loopback or this host's own addresses.
	AllowPrivate []string
	// Timeout bounds one Get: redirects, headers and body.
	Timeout time.Duration
	// MaxBytes caps a body; a longer one is cut and Response.Truncated set.
	MaxBytes int64
	// MaxRedirects bounds the redirects followed.
	MaxRedirects int
	// Resolver resolves names; nil means net.DefaultResolver.
	Resolver safedial.Resolver
	// HostAddrs lists this host's own addresses; nil lists the network interfaces'.
	HostAddrs func() ([]netip.Addr, error)
	// UserAgent is sent with every request.
	UserAgent string
}

// Client fetches under the policy above. It is safe for concurrent use.
type Client struct {
	opts   Options
	dialer *safedial.Dialer
	client *http.Client
}

// New returns a Client for opts.
func New(opts Options) *Client {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxRedirects <= 0 {
		opts.MaxRedirects = DefaultMaxRedirects
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "Istota/1"
	}
	opts.Allow = slices.Clone(opts.Allow)
	c := &Client{opts: opts, dialer: &safedial.Dialer{
		AllowPrivate: slices.Clone(opts.AllowPrivate),
		Resolver:     opts.Resolver,
		HostAddrs:    opts.HostAddrs,
	}}
	c.client = &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil, // through a proxy the checks would judge the proxy
			DialContext:           c.dial,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: opts.Timeout,
			MaxIdleConns:          8,
			IdleConnTimeout:       30 * time.Second,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > opts.MaxRedirects {
				return fmt.Errorf("more than %d redirects", opts.MaxRedirects)
			}
			return c.check(req.URL)
		},
	}
	return c
}

// Allowed reports whether u may be fetched as far as the URL and the allowlist can
// tell; the address checks happen when connecting. The error says why not.
func (c *Client) Allowed(u *url.URL) error { return c.check(u) }

func (c *Client) check(u *url.URL) error {
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%w: only http and https URLs can be fetched, not %q", ErrBadURL, u.Scheme)
	case u.User != nil:
		return fmt.Errorf("%w: a URL with a user name or password is not fetched", ErrBadURL)
	case u.Hostname() == "":
		return fmt.Errorf("%w: the URL has no host", ErrBadURL)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if !c.allows(host, port) {
		return &NotAllowedError{HostPort: net.JoinHostPort(host, port)}
	}
	return nil
}

func (c *Client) allows(host, port string) bool {
	return c.opts.AnyPublicHost || netproxy.Allows(c.opts.Allow, host, port)
}

// dial is the transport's only way out: the allowlist is checked once more on the
// address actually dialled, then safedial resolves, checks and connects.
func (c *Client) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if !c.allows(host, port) {
		return nil, &NotAllowedError{HostPort: addr}
	}
	return c.dialer.DialContext(ctx, network, addr)
}

// Response is a fetched page.
type Response struct {
	URL         string // the final URL, after redirects
	Status      int
	ContentType string // the media type, lower case, without parameters
	Charset     string // the charset parameter, if any
	Body        []byte
	Truncated   bool // the body was longer than MaxBytes and was cut
}

// Get fetches rawURL. accept is the Accept header ("" sends none). A 2xx answer is a
// Response; anything else an error: *StatusError, *NotAllowedError,
// *safedial.RefusedError (wrapped), ErrBadURL, or a network error.
func (c *Client) Get(ctx context.Context, rawURL, accept string) (Response, error) {
	u, err := url.Parse(strings.TrimSpace(rawURL))
	if err != nil {
		return Response{}, fmt.Errorf("%w: %v", ErrBadURL, err)
	}
	if err := c.check(u); err != nil {
		return Response{}, err
	}
	u.Fragment = ""
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Response{}, fmt.Errorf("%w: %v", ErrBadURL, err)
	}
	req.Header.Set("User-Agent", c.opts.UserAgent)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is the caller's; keep the reason
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Response{}, fmt.Errorf("fetch %s: no answer within %s", u.Redacted(), c.opts.Timeout)
		}
		return Response{}, fmt.Errorf("fetch %s: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	final := resp.Request.URL.String()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Response{}, &StatusError{URL: final, Status: resp.Status, Code: resp.StatusCode}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.opts.MaxBytes+1))
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Response{}, fmt.Errorf("fetch %s: the body did not arrive within %s", final, c.opts.Timeout)
		}
		return Response{}, fmt.Errorf("fetch %s: read body: %w", final, err)
	}
	out := Response{URL: final, Status: resp.StatusCode, Body: body}
	if int64(len(body)) > c.opts.MaxBytes {
		out.Body, out.Truncated = body[:c.opts.MaxBytes], true
	}
	if mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil {
		out.ContentType, out.Charset = strings.ToLower(mt), params["charset"]
	}
	return out, nil
}
