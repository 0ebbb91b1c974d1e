package briefing

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/safedial"
	"github.com/istota/istota/sidecar/internal/webfetch"
)

// ErrPrivateAddress means a feed's host is, or resolves to, an address that is not
// the public internet (loopback, private, link-local and metadata services, this
// host's own addresses) and the administrator did not allow it.
var ErrPrivateAddress = errors.New("the feed's address is not on the public internet")

// Resolver resolves host names; *net.Resolver implements it.
type Resolver = safedial.Resolver

// FetcherOptions configure a Fetcher. Zero values take the documented defaults.
type FetcherOptions struct {
	// AllowPrivate lists host:port entries (network.allow_private) whose feeds may be
	// on private or loopback addresses, e.g. an intranet server.
	AllowPrivate []string
	// Timeout bounds fetching one feed, redirects included; default 15 s.
	Timeout time.Duration
	// MaxBytes caps a feed's body; default 2 MiB.
	MaxBytes int64
	// Resolver defaults to net.DefaultResolver.
	Resolver Resolver
	// HostAddrs lists this host's own addresses, refused like loopback; nil lists the
	// addresses of the network interfaces.
	HostAddrs func() ([]netip.Addr, error)
	// UserAgent is sent with every request.
	UserAgent string
}

// Fetcher reads RSS and Atom feeds from the public internet only, through a
// webfetch.Client without allowlist: every address is checked when connecting (and the
// checked one dialled), so neither a redirect nor DNS rebinding reaches a private one.
type Fetcher struct {
	opts FetcherOptions
	web  *webfetch.Client
}

// NewFetcher returns a Fetcher.
func NewFetcher(opts FetcherOptions) *Fetcher {
	if opts.Timeout <= 0 {
		opts.Timeout = 15 * time.Second
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 2 << 20
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "Istota-briefing/1"
	}
	return &Fetcher{opts: opts, web: webfetch.New(webfetch.Options{
		AnyPublicHost: true,
		AllowPrivate:  opts.AllowPrivate,
		Timeout:       opts.Timeout,
		MaxBytes:      opts.MaxBytes,
		Resolver:      opts.Resolver,
		HostAddrs:     opts.HostAddrs,
		UserAgent:     opts.UserAgent,
	})}
}

// Feed is what a briefing shows of a feed.
type Feed struct {
	Title string
	Items []Item // newest first
}

// Item is one headline.
type Item struct {
	Title     string
	Link      string // http(s) only; "" otherwise
	Published time.Time
}

// Fetch reads the feed at rawURL and returns its newest max items. A refused address
// is marked ErrPrivateAddress, so callers can tell it from a feed that is down.
func (f *Fetcher) Fetch(ctx context.Context, rawURL string, max int) (Feed, error) {
	resp, err := f.web.Get(ctx, rawURL, "application/rss+xml, application/atom+xml, application/xml;q=0.9, text/xml;q=0.8, */*;q=0.1")
	var ref *safedial.RefusedError
	var status *webfetch.StatusError
	switch {
	case errors.Is(err, webfetch.ErrBadURL):
		return Feed{}, errors.New("not an http(s) URL without credentials")
	case errors.As(err, &ref):
		return Feed{}, fmt.Errorf("%w: %w", ErrPrivateAddress, ref)
	case errors.As(err, &status):
		return Feed{}, fmt.Errorf("the server answered %s", status.Status)
	case err != nil:
		return Feed{}, err
	case resp.Truncated:
		return Feed{}, fmt.Errorf("the feed is larger than %d KiB", f.opts.MaxBytes>>10)
	}
	return ParseFeed(resp.Body, max)
}

// xmlFeed decodes RSS 2.0 (<rss><channel><item>), RSS 1.0 (<rdf:RDF><item>) and Atom
// (<feed><entry>) alike; the root element says which fields apply.
type xmlFeed struct {
	XMLName xml.Name
	Channel struct {
		Title string    `xml:"title"`
		Items []rssItem `xml:"item"`
	} `xml:"channel"`
	Items   []rssItem   `xml:"item"`
	Title   string      `xml:"title"`
	Entries []atomEntry `xml:"entry"`
}

type rssItem struct {
	Title   string `xml:"title"`
	Link    string `xml:"link"`
	GUID    string `xml:"guid"`
	PubDate string `xml:"pubDate"`
	DCDate  string `xml:"http://purl.org/dc/elements/1.1/ date"`
}

type atomEntry struct {
	Title string `xml:"title"`
	Links []struct {
		Href string `xml:"href,attr"`
		Rel  string `xml:"rel,attr"`
	} `xml:"link"`
	Updated   string `xml:"updated"`
	Published string `xml:"published"`
}

// ParseFeed reads an RSS or Atom document and returns its newest max items (max ≤ 0
// means all); items without a date keep their place after the dated ones.
func ParseFeed(data []byte, max int) (Feed, error) {
	var doc xmlFeed
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.CharsetReader = charsetReader
	// Feeds in the wild use HTML entities (&nbsp;) that XML does not define.
	dec.Strict = false
	dec.Entity = xml.HTMLEntity
	if err := dec.Decode(&doc); err != nil {
		return Feed{}, fmt.Errorf("not a readable RSS or Atom feed: %v", err)
	}
	var out Feed
	switch strings.ToLower(doc.XMLName.Local) {
	case "rss":
		out.Title = doc.Channel.Title
		for _, it := range doc.Channel.Items {
			out.Items = append(out.Items, it.item())
		}
	case "rdf":
		out.Title = doc.Channel.Title
		for _, it := range doc.Items {
			out.Items = append(out.Items, it.item())
		}
	case "feed":
		out.Title = doc.Title
		for _, e := range doc.Entries {
			it := Item{Title: e.Title, Published: parseDate(e.Published)}
			if it.Published.IsZero() {
				it.Published = parseDate(e.Updated)
			}
			for _, l := range e.Links {
				if (l.Rel == "" || l.Rel == "alternate") && it.Link == "" {
					it.Link = l.Href
				}
			}
			out.Items = append(out.Items, it)
		}
	default:
		return Feed{}, fmt.Errorf("not an RSS or Atom feed (the document is <%s>)", clip(doc.XMLName.Local, 40))
	}
	out.Title = oneLine(stripTags(out.Title), 120)
	kept := out.Items[:0]
	for _, it := range out.Items {
		it.Title = oneLine(stripTags(it.Title), 200)
		it.Link = webLink(it.Link)
		if it.Title == "" && it.Link == "" {
			continue
		}
		if it.Title == "" {
			it.Title = "(untitled)"
		}
		kept = append(kept, it)
	}
	out.Items = kept
	sort.SliceStable(out.Items, func(i, j int) bool {
		a, b := out.Items[i].Published, out.Items[j].Published
		return !a.IsZero() && (b.IsZero() || a.After(b))
	})
	if max > 0 && len(out.Items) > max {
		out.Items = out.Items[:max]
	}
	return out, nil
}

func (it rssItem) item() Item {
	link := strings.TrimSpace(it.Link)
	if link == "" && strings.HasPrefix(strings.TrimSpace(it.GUID), "http") {
		link = strings.TrimSpace(it.GUID)
	}
	d := parseDate(it.PubDate)
	if d.IsZero() {
		d = parseDate(it.DCDate)
	}
	return Item{Title: it.Title, Link: link, Published: d}
}

// webLink keeps only http(s) links, so a feed cannot hand the model a javascript: or
// file: URL to pass on.
func webLink(s string) string {
	s = strings.TrimSpace(s)
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(s) > 500 {
		return ""
	}
	return u.String()
}

var dateLayouts = []string{
	time.RFC1123Z, time.RFC1123, time.RFC3339, time.RFC3339Nano,
	"Mon, 2 Jan 2006 15:04:05 -0700", "Mon, 2 Jan 2006 15:04:05 MST", "2 Jan 2006 15:04:05 -0700",
	"Mon, 02 Jan 2006 15:04 -0700", "2006-01-02T15:04:05", "2006-01-02",
}

func parseDate(s string) time.Time {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}
	}
	for _, l := range dateLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC()
		}
	}
	return time.Time{}
}

// charsetReader decodes the single-byte charsets feeds still use; UTF-8 needs none.
func charsetReader(charset string, in io.Reader) (io.Reader, error) {
	switch strings.ToLower(strings.TrimSpace(charset)) {
	case "utf-8", "utf8", "us-ascii", "ascii":
		return in, nil
	case "iso-8859-1", "iso8859-1", "latin1", "latin-1", "windows-1252", "cp1252":
		// Windows-1252 differs from Latin-1 only in 0x80-0x9F, which are
		// punctuation; reading them as Latin-1 keeps every headline legible.
		b, err := io.ReadAll(in)
		if err != nil {
			return nil, err
		}
		out := make([]byte, 0, len(b)+len(b)/4)
		for _, c := range b {
			out = utf8.AppendRune(out, rune(c))
		}
		return bytes.NewReader(out), nil
	}
	return nil, fmt.Errorf("unsupported charset %q", clip(charset, 40))
}

// stripTags removes markup from titles that carry HTML (Atom type="html").
func stripTags(s string) string {
	var b strings.Builder
	in := false
	for _, r := range s {
		switch {
		case r == '<':
			in = true
		case r == '>' && in:
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return b.String()
}
