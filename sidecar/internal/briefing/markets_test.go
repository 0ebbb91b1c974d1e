package briefing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/netproxy"
	"github.com/istota/istota/sidecar/internal/userconfig"
	"github.com/istota/istota/sidecar/internal/webfetch"
)

// stooq serves quotes in Stooq's CSV format (q/l/?s=…&f=sd2t2ohlcv&h&e=csv).
func stooq(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	lines := map[string]string{
		"es.f": "ES.F,2026-05-04,07:59:12,5012.25,5020.5,5005,5015.5,12345",
		"nq.f": "NQ.F,2026-05-04,07:59:10,18000,18100,17950,17910,2345",
		"^spx": "^SPX,2026-05-04,22:00:00,5000,5030,4990,5025.12,",
		"^dji": "^DJI,2026-05-04,22:05:00,39000,39200,38900,39100,",
		"bad":  "BAD,N/D,N/D,N/D,N/D,N/D,N/D,N/D",
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/q/l/" || r.URL.Query().Get("f") != "sd2t2ohlcv" || r.URL.Query().Get("e") != "csv" {
			http.NotFound(w, r)
			return
		}
		s := r.URL.Query().Get("s")
		line, ok := lines[s]
		if !ok {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "text/csv")
		w.Write([]byte("Symbol,Date,Time,Open,High,Low,Close,Volume\r\n" + line + "\r\n"))
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return srv, u.Host
}

func marketsFor(t *testing.T, srv *httptest.Server, allow, allowPrivate []string) Markets {
	t.Helper()
	rules, err := netproxy.ParseRules(allow)
	if err != nil {
		t.Fatal(err)
	}
	return Markets{
		Fetcher:  webfetch.New(webfetch.Options{Allow: rules, AllowPrivate: allowPrivate, Timeout: 5 * time.Second}),
		QuoteURL: srv.URL + "/q/l/?s={symbol}&f=sd2t2ohlcv&h&e=csv",
		Futures:  []string{"es.f", "nq.f", "bad"},
		Indices:  []string{"^spx", "^dji", "^gone"},
	}
}

func TestMarketsMorningFuturesEveningCloses(t *testing.T) {
	srv, hp := stooq(t)
	e := newEnv(t, utc("2026-05-04T05:00:00Z"), func(o *Options) { o.Markets = marketsFor(t, srv, []string{hp}, []string{hp}) })
	berlin, _ := time.LoadLocation("Europe/Berlin")
	at := func(s string) runContext {
		now := utc(s).In(berlin)
		return runContext{user: User{ID: "alice"}, loc: berlin, now: now, today: startOfDay(now)}
	}

	got, err := e.r.marketsSection(context.Background(), at("2026-05-04T05:30:00Z")) // 07:30 in Berlin
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, got, "Futures (before the markets open):",
		"- ES.F 5015.50 (+0.06% since the open at 5012.25; range 5005.00–5020.50) as of 2026-05-04 07:59:12 (source time)",
		"- NQ.F 17910.00 (-0.50% since the open at 18000.00",
		"- bad: could not be read (the quote source has no price for it (unknown symbol?))")
	mustNotContain(t, got, "SPX")

	got, err = e.r.marketsSection(context.Background(), at("2026-05-04T18:00:00Z")) // 20:00 in Berlin
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, got, "Index closes (latest):", "- ^SPX 5025.12 (+0.50% since the open at 5000.00", "- ^DJI 39100.00", "- ^gone: could not be read (")
	mustContain(t, got, "502 Bad Gateway")
	mustNotContain(t, got, "ES.F")
}

func TestMarketsFailSoft(t *testing.T) {
	srv, hp := stooq(t)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	now := utc("2026-05-04T05:30:00Z").In(berlin)
	rc := runContext{user: User{ID: "alice"}, loc: berlin, now: now, today: startOfDay(now)}

	for _, tc := range []struct {
		name string
		m    func() Markets
		want string
	}{
		{"not set up", func() Markets { return Markets{} }, "not set up on this server"},
		// The source is not in the allowlist: every symbol is refused, the section fails.
		{"not allowlisted", func() Markets { return marketsFor(t, srv, []string{"stooq.com:443"}, []string{hp}) }, hp + " is not in the network allowlist"},
		// Allowlisted but loopback without allow_private: refused like the proxy does.
		{"private", func() Markets { return marketsFor(t, srv, []string{hp}, nil) }, "network.allow_private"},
		{"no symbols", func() Markets { m := marketsFor(t, srv, []string{hp}, []string{hp}); m.Futures = nil; return m }, "no symbols are configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, utc("2026-05-04T05:00:00Z"), func(o *Options) { o.Markets = tc.m() })
			_, err := e.r.marketsSection(context.Background(), rc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}

	// In a briefing the failing markets part is named and the rest still arrives.
	e := newEnv(t, utc("2026-05-04T05:00:00Z"), func(o *Options) { o.Markets = marketsFor(t, srv, []string{"stooq.com:443"}, nil) })
	e.src.write(t, "alice", "istota/config/TASKS.md", "- [ ] Water the plants\n")
	sections := e.r.prefetch(context.Background(), runContext{
		user: User{ID: "alice"}, loc: berlin, now: now, today: startOfDay(now),
		def: definition{Components: []userconfig.Component{userconfig.ComponentTodos, userconfig.ComponentMarkets}},
	})
	if sections[0].Err != nil || !strings.Contains(sections[0].Text, "Water the plants") {
		t.Errorf("todos: %+v", sections[0])
	}
	if sections[1].Err == nil || sections[1].Title != "Markets" {
		t.Errorf("markets: %+v", sections[1])
	}
}

func TestParseQuoteCSV(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{"", "no CSV"},
		{"Symbol,Date\nX,2026-01-01\n", "no Close column"},
		{"Symbol,Close\nA,1\nB,2\n", "no line for it"},
		{"Symbol,Close\nX,abc\n", "no price"},
		{"Symbol,Close\n\"X,1\n", "malformed"},
	} {
		if _, err := parseQuoteCSV([]byte(tc.body), "x"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.body, err, tc.want)
		}
	}
	q, err := parseQuoteCSV([]byte("\ufeffsymbol,close\nY,1\nX,2.5\n"), "x")
	if err != nil || q.Close != 2.5 || q.Symbol != "X" || q.HasOpen {
		t.Errorf("got %+v, %v", q, err)
	}
}
