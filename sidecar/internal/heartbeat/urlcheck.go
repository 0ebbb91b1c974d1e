package heartbeat

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/istota/istota/sidecar/internal/safedial"
)

// urlChecker probes web addresses for url-health. Its transport dials through a
// safedial.Dialer, so a name that resolves (or re-resolves) to a private, loopback,
// link-local or metadata address, or to this host, is never reached unless the admin
// allowed that host:port.
type urlChecker struct {
	client *http.Client
}

func newURLChecker(opts Options, log *slog.Logger) *urlChecker {
	d := &safedial.Dialer{Resolver: opts.Resolver, HostAddrs: opts.HostAddrs}
	for _, e := range opts.AllowPrivate {
		if err := safedial.CheckAllowEntry(e); err != nil {
			log.Warn("ignoring an invalid allow-private entry for url-health", "entry", e, "err", err)
			continue
		}
		d.AllowPrivate = append(d.AllowPrivate, e)
	}
	tr := &http.Transport{
		Proxy:                  nil, // the check is about the site, never about a proxy from the environment
		DialContext:            d.DialContext,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    opts.URLTimeout,
		ResponseHeaderTimeout:  opts.URLTimeout,
		DisableKeepAlives:      true,
		ForceAttemptHTTP2:      true,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &urlChecker{client: &http.Client{
		Transport: tr,
		Timeout:   opts.URLTimeout,
		// A redirect is an answer: 3xx counts as up, and its target is not fetched.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// check fetches raw (an http(s) URL without credentials, as the parser ensures).
func (u *urlChecker) check(ctx context.Context, raw string) outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return errorf("%s is not a usable address: %v", raw, err)
	}
	req.Header.Set("User-Agent", "istota-heartbeat")
	start := time.Now()
	resp, err := u.client.Do(req)
	if err != nil {
		var ref *safedial.RefusedError
		if errors.As(err, &ref) {
			return errorf("not checked: %s", ref)
		}
		return outcome{status: StatusAlert, message: fmt.Sprintf("%s could not be reached: %s", raw, describeNetErr(err))}
	}
	// A little of the body proves the server really answers; the rest is not needed.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	took := time.Since(start).Round(time.Millisecond)
	if resp.StatusCode >= 200 && resp.StatusCode < 400 {
		return outcome{status: StatusOK, message: fmt.Sprintf("%s answered %s in %s", raw, resp.Status, took)}
	}
	return outcome{status: StatusAlert, message: fmt.Sprintf("%s answered %s", raw, resp.Status)}
}

// describeNetErr drops the request line Go puts in front of transport errors.
func describeNetErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer in time"
	}
	return err.Error()
}
