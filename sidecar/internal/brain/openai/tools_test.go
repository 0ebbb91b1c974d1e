package openai

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHeadTail(t *testing.T) {
	for _, tc := range []struct {
		name     string
		limit    int
		headOnly bool
		writes   []string
		want     string
	}{
		{"fits", 10, false, []string{"abc", "def\n"}, "abcdef"},
		{"exactly the limit", 6, false, []string{"abcdef"}, "abcdef"},
		{"keeps both ends", 6, false, []string{"abc", "XXXXXXXX", "def"}, "abc\n[… 8 bytes of output left out …]\ndef"},
		{"many small writes", 4, false, strings.Split("0123456789", ""), "01\n[… 6 bytes of output left out …]\n89"},
		{"head only", 4, true, []string{"012", "3456"}, "0123"},
		{"no cut character at the seams", 6, false, []string{"ééé", "-", "ééé"}, "é\n[… 7 bytes of output left out …]\né"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &headTail{limit: tc.limit, headOnly: tc.headOnly}
			for _, w := range tc.writes {
				if n, err := h.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := h.String(); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if !utf8.ValidString(h.String()) {
				t.Fatal("invalid UTF-8")
			}
		})
	}
}

func TestValidPrefixDropsACutCharacter(t *testing.T) {
	for in, want := range map[string]string{
		"abc":          "abc",
		"ab\xc3":       "ab",
		"a\xe2\x82":    "a",
		"a€":           "a€",
		"\xf0\x9f\x98": "",
		"é\xff":        "é\uFFFD",
	} {
		if got := validPrefix([]byte(in)); got != want {
			t.Errorf("validPrefix(%q) = %q, want %q", in, got, want)
		}
	}
}
