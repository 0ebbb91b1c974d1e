package signing

import (
	"encoding/base64"
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
	good, err := Sign(secret, "POST", "/v1/talk/events", ts, nonce, body)
	if err != nil {
		t.Fatal(err)
	}

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

// A secret that was never filled in, or one too short, must never sign or verify: an
// empty HMAC key would let anyone act as Nextcloud.
func TestWeakSecretsAreRefused(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	nonce := "6f1c2a9b8e7d6c5b4a39281706f5e4d3"
	body := []byte(`{}`)
	for _, secret := range [][]byte{nil, {}, []byte("short"), []byte("0123456789abcdef0123456789abcde")} {
		if sig, err := Sign(secret, "POST", "/v1/ping", ts, nonce, body); !errors.Is(err, ErrWeakSecret) || sig != "" {
			t.Errorf("Sign with a %d-byte secret = %q, %v; want ErrWeakSecret", len(secret), sig, err)
		}
		// The signature an attacker computes with the same weak key is still refused.
		forged := sign(secret, "POST", "/v1/ping", ts, nonce, body)
		if err := Verify(secret, "POST", "/v1/ping", ts, nonce, forged, body, now); !errors.Is(err, ErrWeakSecret) {
			t.Errorf("Verify with a %d-byte secret = %v; want ErrWeakSecret", len(secret), err)
		}
		if tok, err := MintWSToken(secret, []byte(`{"uid":"alice"}`)); !errors.Is(err, ErrWeakSecret) || tok != "" {
			t.Errorf("MintWSToken with a %d-byte secret = %q, %v", len(secret), tok, err)
		}
		payload := base64.RawURLEncoding.EncodeToString([]byte(`{"uid":"alice","exp":1800000060,"nonce":"0123456789abcdef0123456789abcdef"}`))
		if _, err := VerifyWSToken(secret, "v1."+payload+"."+wsMAC(secret, payload), now); !errors.Is(err, ErrWeakSecret) {
			t.Errorf("VerifyWSToken with a %d-byte secret = %v", len(secret), err)
		}
	}
	if _, err := Sign([]byte("0123456789abcdef0123456789abcdef"), "POST", "/v1/ping", ts, nonce, body); err != nil {
		t.Errorf("a 32-byte secret is enough: %v", err)
	}
}
