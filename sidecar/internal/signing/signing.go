// Package signing implements the HMAC scheme the Nextcloud app and the sidecar use for
// every request between them (docs/app-sidecar-protocol.md). The same canonical string is
// built in PHP (lib/Service/RequestSigner.php); testdata/vectors.json proves they agree.
package signing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Header names carried by every signed request.
const (
	HeaderTimestamp = "X-Istota-Timestamp"
	HeaderNonce     = "X-Istota-Nonce"
	HeaderSignature = "X-Istota-Signature"
)

// Version prefixes the signature header value and the canonical string.
const Version = "v1"

// MaxSkew is how far a request's timestamp may be from the sidecar's clock.
const MaxSkew = 5 * time.Minute

// Errors returned by Verify; each maps to a stable error code in the HTTP API.
var (
	ErrMissing   = errors.New("signature headers missing")
	ErrMalformed = errors.New("signature headers malformed")
	ErrStale     = errors.New("request timestamp outside the allowed window")
	ErrBad       = errors.New("signature does not match")
)

// Canonical is the string that is signed: version, method, path with query, timestamp,
// nonce and the hex SHA-256 of the raw body, joined by newlines.
func Canonical(method, pathAndQuery, timestamp, nonce string, body []byte) string {
	sum := sha256.Sum256(body)
	return strings.Join([]string{Version, strings.ToUpper(method), pathAndQuery, timestamp, nonce, hex.EncodeToString(sum[:])}, "\n")
}

// Sign returns the signature header value for a request.
func Sign(secret []byte, method, pathAndQuery, timestamp, nonce string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(Canonical(method, pathAndQuery, timestamp, nonce, body)))
	return Version + "=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks the headers of one request against secret at time now. It does not check
// replays: callers record the nonce (see Nonces) after Verify succeeds.
func Verify(secret []byte, method, pathAndQuery, timestamp, nonce, signature string, body []byte, now time.Time) error {
	if timestamp == "" || nonce == "" || signature == "" {
		return ErrMissing
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || len(nonce) < 16 || len(nonce) > 128 || !strings.HasPrefix(signature, Version+"=") {
		return ErrMalformed
	}
	if d := now.Sub(time.Unix(ts, 0)); d > MaxSkew || d < -MaxSkew {
		return ErrStale
	}
	want := Sign(secret, method, pathAndQuery, timestamp, nonce, body)
	if !hmac.Equal([]byte(want), []byte(strings.ToLower(signature))) {
		return ErrBad
	}
	return nil
}
