package signing

import (
	"errors"
	"strconv"
	"testing"
	"time"
)

func TestVerifyRejects(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	nonce := "6f1c2a9b8e7d6c5b4a39281706f5e4d3"
	body := []byte(`{"x":1}`)
	good := Sign(secret, "POST", "/v1/talk/events", ts, nonce, body)

	cases := []struct {
		name                     string
		method, path, ts, n, sig string
		body                     []byte
		at                       time.Time
		want                     error
	}{
		{"ok", "POST", "/v1/talk/events", ts, nonce, good, body, now, nil},
		{"lowercase method still canonical", "post", "/v1/talk/events", ts, nonce, good, body, now, nil},
		{"missing signature", "POST", "/v1/talk/events", ts, nonce, "", body, now, ErrMissing},
		{"missing timestamp", "POST", "/v1/talk/events", "", nonce, good, body, now, ErrMissing},
		{"non-numeric timestamp", "POST", "/v1/talk/events", "yesterday", nonce, good, body, now, ErrMalformed},
		{"short nonce", "POST", "/v1/talk/events", ts, "abc", good, body, now, ErrMalformed},
		{"unknown version", "POST", "/v1/talk/events", ts, nonce, "v0=" + good[3:], body, now, ErrMalformed},
		{"stale", "POST", "/v1/talk/events", ts, nonce, good, body, now.Add(6 * time.Minute), ErrStale},
		{"future", "POST", "/v1/talk/events", ts, nonce, good, body, now.Add(-6 * time.Minute), ErrStale},
		{"body changed", "POST", "/v1/talk/events", ts, nonce, good, []byte(`{"x":2}`), now, ErrBad},
		{"path changed", "POST", "/v1/tasks", ts, nonce, good, body, now, ErrBad},
		{"method changed", "PUT", "/v1/talk/events", ts, nonce, good, body, now, ErrBad},
		{"nonce changed", "POST", "/v1/talk/events", ts, nonce + "00", good, body, now, ErrBad},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Verify(secret, c.method, c.path, c.ts, c.n, c.sig, c.body, c.at)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}
