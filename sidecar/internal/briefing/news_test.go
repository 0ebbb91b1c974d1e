package briefing

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
)

const rssFeed = `<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0" xmlns:dc="http://purl.org/dc/elements/1.1/"><channel>
<title>Local &amp; World</title>
<item><title>Old news</title><link>https://news.example/old</link><pubDate>Mon, 04 May 2026 01:00:00 +0000</pubDate></item>
<item><title>Fresh   news&nbsp;today</title><link>https://news.example/fresh</link><pubDate>Mon, 04 May 2026 04:00:00 +0000</pubDate></item>
<item><title>Middle</title><guid>https://news.example/middle</guid><dc:date>2026-05-04T02:00:00Z</dc:date></item>
<item><title>Sneaky</title><link>javascript:alert(1)</link></item>
</channel></rss>`

const atomFeed = `<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom">
<title type="html">Dev &lt;b&gt;Blog&lt;/b&gt;</title>
<entry><title>Second post</title><link rel="alternate" href="https://blog.example/2"/><updated>2026-05-03T10:00:00Z</updated></entry>
<entry><title>Third post</title><link rel="self" href="https://blog.example/3.atom"/><link href="https://blog.example/3"/><published>2026-05-04T10:00:00+02:00</published></entry>
<entry><title>First post</title><link href="https://blog.example/1"/><updated>2026-05-01T10:00:00Z</updated></entry>
</feed>`

const rdfFeed = `<?xml version="1.0" encoding="ISO-8859-1"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns="http://purl.org/rss/1.0/">
<channel><title>Caf` + "\xe9" + ` news</title></channel>
<item><title>Cr` + "\xe8" + `me br` + "\xfb" + `l` + "\xe9" + `e</title><link>https://cafe.example/1</link></item>
<item><title>Second</title><link>https://cafe.example/2</link></item>
</rdf:RDF>`

func TestParseFeed(t *testing.T) {
	tests := []struct {
		name  string
		data  string
		max   int
		title string
		items []string // "title|link"
		err   string
	}{
		{"rss newest first", rssFeed, 3, "Local & World", []string{
			"Fresh news today|https://news.example/fresh", "Middle|https://news.example/middle", "Old news|https://news.example/old"}, ""},
		{"rss all, undated last, bad link dropped", rssFeed, 0, "Local & World", []string{
			"Fresh news today|https://news.example/fresh", "Middle|https://news.example/middle", "Old news|https://news.example/old", "Sneaky|"}, ""},
		{"atom", atomFeed, 2, "Dev Blog", []string{"Third post|https://blog.example/3", "Second post|https://blog.example/2"}, ""},
		{"rss 1.0 in latin-1", rdfFeed, 5, "Café news", []string{"Crème brûlée|https://cafe.example/1", "Second|https://cafe.example/2"}, ""},
		{"html page", "<html><body>hi</body></html>", 5, "", nil, "not an RSS or Atom feed"},
		{"garbage", "\x00\x01 not xml", 5, "", nil, "not a readable"},
		{"unknown charset", `<?xml version="1.0" encoding="koi8-r"?><rss/>`, 5, "", nil, "charset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ParseFeed([]byte(tt.data), tt.max)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range f.Items {
				got = append(got, it.Title+"|"+it.Link)
			}
			if f.Title != tt.title || strings.Join(got, "\n") != strings.Join(tt.items, "\n") {
				t.Fatalf("title %q items\n%s\nwant %q\n%s", f.Title, strings.Join(got, "\n"), tt.title, strings.Join(tt.items, "\n"))
			}
		})
	}
}

func FuzzParseFeed(f *testing.F) {
	for _, s := range []string{rssFeed, atomFeed, rdfFeed, "<rss><channel><item><title><![CDATA[x]]></title></item></channel></rss>"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		feed, err := ParseFeed(data, 5)
		if err != nil {
			return
		}
		if len(feed.Items) > 5 {
			t.Fatalf("%d items, want at most 5", len(feed.Items))
		}
		for _, it := range feed.Items {
			if it.Link != "" && !strings.HasPrefix(it.Link, "http") {
				t.Fatalf("link %q is not http(s)", it.Link)
			}
		}
	})
}

func feedServer(t *testing.T, body string) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/rss+xml")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return srv, u.Host
}

// staticResolver answers from a table, as a DNS server controlled by an attacker
// would: the name is public, the address is not.
type staticResolver map[string][]netip.Addr

func (r staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestFetchRefusesPrivateAddresses(t *testing.T) {
	srv, hostPort := feedServer(t, rssFeed)
	_, port, _ := net.SplitHostPort(hostPort)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, srv.URL+"/feed", http.StatusFound)
	}))
	t.Cleanup(redirect.Close)
	redirectHost := strings.TrimPrefix(redirect.URL, "http://")
	public := func() ([]netip.Addr, error) { return nil, nil }
	resolver := staticResolver{
		"feed.example":  {netip.MustParseAddr("127.0.0.1")},
		"mixed.example": {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("10.0.0.7")},
		"meta.example":  {netip.MustParseAddr("169.254.169.254")},
	}
	tests := []struct {
		name    string
		allow   []string
		url     string
		refused bool
	}{
		{"loopback address", nil, srv.URL + "/feed", true},
		{"a public name resolving to loopback (rebinding)", nil, "http://feed.example:" + port + "/feed", true},
		{"a name resolving to public and private", nil, "http://mixed.example:" + port + "/feed", true},
		{"the metadata service", nil, "http://meta.example/latest", true},
		{"allowed by the admin", []string{hostPort}, srv.URL + "/feed", false},
		{"allowed by name, resolving to loopback", []string{"Feed.Example.:" + port}, "http://feed.example:" + port + "/feed", false},
		{"allowed on another port only", []string{"127.0.0.1:1"}, srv.URL + "/feed", true},
		{"redirect from an allowed host to a refused one", []string{redirectHost}, redirect.URL + "/", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFetcher(FetcherOptions{AllowPrivate: tt.allow, Resolver: resolver, HostAddrs: public, Timeout: 30 * time.Second})
			feed, err := f.Fetch(context.Background(), tt.url, 5)
			if tt.refused {
				if !errors.Is(err, ErrPrivateAddress) {
					t.Fatalf("err %v, want ErrPrivateAddress", err)
				}
				if !strings.Contains(err.Error(), "network.allow_private") {
					t.Errorf("error %q does not say how to allow it", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(feed.Items) != 4 || feed.Items[0].Title != "Fresh news today" {
				t.Fatalf("feed %+v", feed)
			}
		})
	}
}

func TestFetchLimits(t *testing.T) {
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("<rss><channel>" + strings.Repeat("<item><title>x</title></item>", 2000) + "</channel></rss>"))
	}))
	t.Cleanup(big.Close)
	missing := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(missing.Close)
	allow := []string{strings.TrimPrefix(big.URL, "http://"), strings.TrimPrefix(missing.URL, "http://")}
	f := NewFetcher(FetcherOptions{AllowPrivate: allow, MaxBytes: 4096})
	if _, err := f.Fetch(context.Background(), big.URL, 5); err == nil || !strings.Contains(err.Error(), "larger than 4 KiB") {
		t.Errorf("big feed: %v", err)
	}
	if _, err := f.Fetch(context.Background(), missing.URL, 5); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing feed: %v", err)
	}
	for _, bad := range []string{"file:///etc/passwd", "http://user:pw@example.org/feed", "gopher://x"} {
		if _, err := f.Fetch(context.Background(), bad, 5); err == nil {
			t.Errorf("%s: fetched", bad)
		}
	}
}
