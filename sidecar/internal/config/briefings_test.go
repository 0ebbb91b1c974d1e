package config

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestBriefingsSection(t *testing.T) {
	path := writeFile(t, t.TempDir(), "istota.toml", `
[briefings]
default_components = ["calendar", "news"]
default_feeds = ["https://news.example/rss"]
`)
	cfg, err := Load(path, []string{"ISTOTA_BRIEFINGS_MAX_ITEMS_PER_FEED=8"})
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.Briefings
	if !reflect.DeepEqual(b.DefaultComponents, []string{"calendar", "news"}) || !reflect.DeepEqual(b.DefaultFeeds, []string{"https://news.example/rss"}) ||
		b.MaxItemsPerFeed != 8 || b.ComponentTimeout.Duration != 30*time.Second {
		t.Fatalf("briefings = %+v", b)
	}
	if b.Markets.QuoteURL == "" || len(b.Markets.Futures) == 0 || len(b.Markets.Indices) == 0 {
		t.Errorf("markets defaults = %+v", b.Markets)
	}

	path = writeFile(t, t.TempDir(), "istota.toml", `
[briefings]
default_components = ["markets"]
[briefings.markets]
quote_url = "https://quotes.example/csv?s={symbol}"
futures = ["fdax.f"]
indices = []
`)
	if cfg, err = Load(path, nil); err != nil {
		t.Fatal(err)
	}
	if m := cfg.Briefings.Markets; m.QuoteURL != "https://quotes.example/csv?s={symbol}" || !reflect.DeepEqual(m.Futures, []string{"fdax.f"}) || len(m.Indices) != 0 {
		t.Errorf("markets = %+v", m)
	}
}

func TestBriefingsValidation(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Briefings)
		field  string
	}{
		{"unknown component", func(b *Briefings) { b.DefaultComponents = []string{"weather"} }, "briefings.default_components"},
		{"component twice", func(b *Briefings) { b.DefaultComponents = []string{"todos", "todos"} }, "briefings.default_components"},
		{"news without feeds", func(b *Briefings) { b.DefaultComponents = []string{"news"} }, "briefings.default_feeds"},
		{"feed not http", func(b *Briefings) { b.DefaultFeeds = []string{"file:///etc/passwd"} }, "briefings.default_feeds"},
		{"feed with credentials", func(b *Briefings) { b.DefaultFeeds = []string{"https://u:p@news.example/rss"} }, "briefings.default_feeds"},
		{"items", func(b *Briefings) { b.MaxItemsPerFeed = 0 }, "briefings.max_items_per_feed"},
		{"timeout", func(b *Briefings) { b.ComponentTimeout = Duration{time.Millisecond} }, "briefings.component_timeout"},
		{"quote url not http", func(b *Briefings) { b.Markets.QuoteURL = "ftp://quotes.example/{symbol}" }, "briefings.markets.quote_url"},
		{"quote url without symbol", func(b *Briefings) { b.Markets.QuoteURL = "https://quotes.example/q" }, "briefings.markets.quote_url"},
		{"bad future", func(b *Briefings) { b.Markets.Futures = []string{"es.f&x=1"} }, "briefings.markets.futures"},
		{"bad index", func(b *Briefings) { b.Markets.Indices = []string{""} }, "briefings.markets.indices"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mutate(&c.Briefings)
			err := c.Validate()
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("got %v, want an error on %s", err, tt.field)
			}
		})
	}
}
