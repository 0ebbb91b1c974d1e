package signing

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"
)

// wsVectors is testdata/ws_vectors.json, shared with the PHP minter's tests: for every
// valid case the app must produce token from payload_json byte for byte.
type wsVectors struct {
	Secret string `json:"secret"`
	Label  string `json:"label"`
	Cases  []struct {
		Name        string `json:"name"`
		PayloadJSON string `json:"payload_json"`
		Token       string `json:"token"`
		Now         int64  `json:"now"`
		Valid       bool   `json:"valid"`
		UID         string `json:"uid"`
	} `json:"cases"`
}

func TestWSTokenVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/ws_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v wsVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if v.Label != WSTokenLabel || len(v.Cases) < 6 {
		t.Fatalf("unexpected vectors file: label %q, %d cases", v.Label, len(v.Cases))
	}
	valid, invalid := 0, 0
	for _, c := range v.Cases {
		t.Run(c.Name, func(t *testing.T) {
			now := time.Unix(c.Now, 0)
			claims, err := VerifyWSToken([]byte(v.Secret), c.Token, now)
			if !c.Valid {
				invalid++
				if !errors.Is(err, ErrBadToken) {
					t.Fatalf("accepted an invalid token: %+v, %v", claims, err)
				}
				return
			}
			valid++
			if got, _ := MintWSToken([]byte(v.Secret), []byte(c.PayloadJSON)); got != c.Token {
				t.Fatalf("mint = %s, want %s", got, c.Token)
			}
			if err != nil || claims.UID != c.UID {
				t.Fatalf("verify = %+v, %v; want uid %q", claims, err, c.UID)
			}
		})
	}
	if valid == 0 || invalid == 0 {
		t.Fatalf("vectors need valid and invalid cases (got %d / %d)", valid, invalid)
	}
}

func TestWSTokenRejects(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	mint := func(v any) string {
		b, _ := json.Marshal(v)
		tok, err := MintWSToken(secret, b)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	nonce := "0123456789abcdef0123456789abcdef"
	good := mint(WSClaims{UID: "alice", Exp: now.Unix() + 60, Nonce: nonce})
	cases := []struct {
		name  string
		token string
		ok    bool
	}{
		{"good", good, true},
		{"empty", "", false},
		{"two parts", "v1.abc", false},
		{"no uid", mint(WSClaims{Exp: now.Unix() + 60, Nonce: nonce}), false},
		{"short nonce", mint(WSClaims{UID: "alice", Exp: now.Unix() + 60, Nonce: "abc"}), false},
		{"expired a second ago", mint(WSClaims{UID: "alice", Exp: now.Unix() - 1, Nonce: nonce}), false},
		{"five minutes ahead is the limit", mint(WSClaims{UID: "alice", Exp: now.Unix() + 300, Nonce: nonce}), true},
		{"beyond five minutes", mint(WSClaims{UID: "alice", Exp: now.Unix() + 301, Nonce: nonce}), false},
		{"payload not json", "v1." + base64.RawURLEncoding.EncodeToString([]byte("not json")) + "." + wsMAC(secret, base64.RawURLEncoding.EncodeToString([]byte("not json"))), false},
		{"truncated mac", good[:len(good)-2], false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := VerifyWSToken(secret, c.token, now)
			if (err == nil) != c.ok {
				t.Fatalf("err = %v, want ok=%t", err, c.ok)
			}
		})
	}
}
