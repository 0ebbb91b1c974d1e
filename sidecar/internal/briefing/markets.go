package briefing

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/istota/istota/sidecar/internal/webfetch"
)

// SymbolPlaceholder is replaced by each (query-escaped) symbol in Markets.QuoteURL.
const SymbolPlaceholder = "{symbol}"

// maxSymbols bounds the quotes one markets section fetches.
const maxSymbols = 20

// Markets configures the markets component: futures in briefings before noon (in the
// user's time zone), index closes from noon on. Quotes come from a CSV source with a
// header line naming at least Symbol and Close (Stooq's
// "https://stooq.com/q/l/?s={symbol}&f=sd2t2ohlcv&h&e=csv" and its format:
// Symbol,Date,Time,Open,High,Low,Close,Volume, "N/D" for no data). The source's host
// must be in the network allowlist: Fetcher applies it.
type Markets struct {
	// Fetcher fetches under the network policy; nil makes the component unavailable.
	Fetcher  *webfetch.Client
	QuoteURL string   // with SymbolPlaceholder
	Futures  []string // shown before noon
	Indices  []string // shown from noon
}

// quote is one line of the source.
type quote struct {
	Symbol, Date, Time      string
	Open, High, Low, Close  float64
	HasOpen, HasHigh, HasLo bool
}

// marketsSection fetches the quotes of the time of day; a symbol that fails is named
// and the others still shown. Only when every symbol fails does the section fail.
func (r *Runner) marketsSection(ctx context.Context, rc runContext) (string, error) {
	m := r.opts.Markets
	if m.Fetcher == nil || m.QuoteURL == "" {
		return "", errors.New("market quotes are not set up on this server (an administrator configures [briefings.markets])")
	}
	title, symbols := "Futures (before the markets open)", m.Futures
	if rc.now.Hour() >= 12 {
		title, symbols = "Index closes (latest)", m.Indices
	}
	if len(symbols) == 0 {
		return "", fmt.Errorf("no symbols are configured for %s", strings.ToLower(title))
	}
	if len(symbols) > maxSymbols {
		symbols = symbols[:maxSymbols]
	}
	type result struct {
		q   quote
		err error
	}
	results := make([]result, len(symbols))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, s := range symbols {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i].q, results[i].err = fetchQuote(ctx, m, s)
		}()
	}
	wg.Wait()
	var b strings.Builder
	b.WriteString(title + ":\n")
	var errs []error
	for i, s := range symbols {
		res := results[i]
		if res.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s, res.err))
			fmt.Fprintf(&b, "- %s: could not be read (%s)\n", oneLine(s, 32), oneLine(res.err.Error(), 200))
			continue
		}
		b.WriteString("- " + formatQuote(res.q) + "\n")
	}
	if len(errs) == len(symbols) {
		return b.String(), errors.Join(errs...)
	}
	return b.String(), nil
}

func formatQuote(q quote) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", oneLine(q.Symbol, 32), num(q.Close))
	if q.HasOpen && q.Open != 0 {
		ch := (q.Close - q.Open) / q.Open * 100
		fmt.Fprintf(&b, " (%+.2f%% since the open at %s", ch, num(q.Open))
		if q.HasHigh && q.HasLo {
			fmt.Fprintf(&b, "; range %s–%s", num(q.Low), num(q.High))
		}
		b.WriteString(")")
	}
	if q.Date != "" {
		fmt.Fprintf(&b, " as of %s", oneLine(q.Date, 12))
		if q.Time != "" {
			fmt.Fprintf(&b, " %s", oneLine(q.Time, 10))
		}
		b.WriteString(" (source time)")
	}
	return b.String()
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }

// fetchQuote fetches and parses one symbol's line.
func fetchQuote(ctx context.Context, m Markets, symbol string) (quote, error) {
	u := strings.ReplaceAll(m.QuoteURL, SymbolPlaceholder, url.QueryEscape(symbol))
	resp, err := m.Fetcher.Get(ctx, u, "text/csv,text/plain;q=0.9,*/*;q=0.1")
	if err != nil {
		return quote{}, err
	}
	return parseQuoteCSV(resp.Body, symbol)
}

// parseQuoteCSV reads a CSV answer with a header line and returns the line of symbol
// (or the only line).
func parseQuoteCSV(body []byte, symbol string) (quote, error) {
	rd := csv.NewReader(bytes.NewReader(body))
	rd.FieldsPerRecord = -1
	rd.TrimLeadingSpace = true
	header, err := rd.Read()
	if err != nil {
		return quote{}, errors.New("the quote source answered no CSV")
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))] = i
	}
	if _, ok := col["close"]; !ok {
		return quote{}, errors.New("the quote source's CSV has no Close column")
	}
	field := func(rec []string, name string) string {
		if i, ok := col[name]; ok && i < len(rec) {
			return strings.TrimSpace(rec[i])
		}
		return ""
	}
	var rows [][]string
	for {
		rec, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return quote{}, fmt.Errorf("the quote source's CSV is malformed: %w", err)
		}
		rows = append(rows, rec)
	}
	var rec []string
	for _, r := range rows {
		if strings.EqualFold(field(r, "symbol"), symbol) || len(rows) == 1 {
			rec = r
			break
		}
	}
	if rec == nil {
		return quote{}, errors.New("the quote source has no line for it")
	}
	q := quote{Symbol: field(rec, "symbol"), Date: field(rec, "date"), Time: field(rec, "time")}
	if q.Symbol == "" {
		q.Symbol = symbol
	}
	if q.Date == "N/D" {
		q.Date = ""
	}
	if q.Time == "N/D" {
		q.Time = ""
	}
	c, err := strconv.ParseFloat(field(rec, "close"), 64)
	if err != nil {
		return quote{}, errors.New("the quote source has no price for it (unknown symbol?)")
	}
	q.Close = c
	q.Open, q.HasOpen = parseNum(field(rec, "open"))
	q.High, q.HasHigh = parseNum(field(rec, "high"))
	q.Low, q.HasLo = parseNum(field(rec, "low"))
	return q, nil
}

func parseNum(s string) (float64, bool) {
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}
