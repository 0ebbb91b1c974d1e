package signing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// WSTokenLabel separates WebSocket token MACs from every other use of the shared secret.
const WSTokenLabel = "istota-ws-v1"

// WSTokenMaxAhead is how far in the future a token's expiry may be; the app mints
// tokens that expire within 120 s.
const WSTokenMaxAhead = 300 * time.Second

// ErrBadToken is any WebSocket token that is malformed, forged or expired.
var ErrBadToken = errors.New("invalid or expired WebSocket token")

// WSClaims is the payload of a WebSocket token minted by the app for the browser.
type WSClaims struct {
	UID   string `json:"uid"`
	Exp   int64  `json:"exp"`
	Nonce string `json:"nonce"`
}

func wsMAC(secret []byte, payload string) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(WSTokenLabel + "\n" + payload))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// MintWSToken builds "v1.<payload>.<mac>" from the JSON of the claims, as the app does
// (docs/user-api.md). The sidecar uses it in tests; the app mints in PHP. It refuses a
// weak secret.
func MintWSToken(secret []byte, payloadJSON []byte) (string, error) {
	if err := CheckSecret(secret); err != nil {
		return "", err
	}
	payload := base64.RawURLEncoding.EncodeToString(payloadJSON)
	return "v1." + payload + "." + wsMAC(secret, payload), nil
}

// VerifyWSToken checks a token's MAC and expiry at now and returns its claims. It does
// not check single use: callers record the nonce. A weak secret refuses every token
// with ErrWeakSecret.
func VerifyWSToken(secret []byte, token string, now time.Time) (WSClaims, error) {
	if err := CheckSecret(secret); err != nil {
		return WSClaims{}, err
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] != "v1" || parts[1] == "" || len(token) > 2048 {
		return WSClaims{}, ErrBadToken
	}
	if !hmac.Equal([]byte(wsMAC(secret, parts[1])), []byte(parts[2])) {
		return WSClaims{}, ErrBadToken
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return WSClaims{}, ErrBadToken
	}
	var c WSClaims
	if err := json.Unmarshal(raw, &c); err != nil || c.UID == "" || len(c.Nonce) < 16 || len(c.Nonce) > 128 {
		return WSClaims{}, ErrBadToken
	}
	exp := time.Unix(c.Exp, 0)
	if !exp.After(now) || exp.Sub(now) > WSTokenMaxAhead {
		return WSClaims{}, ErrBadToken
	}
	return c, nil
}
