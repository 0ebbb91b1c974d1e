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

// MinSecretBytes is the shortest shared secret the scheme accepts. An HMAC key shorter
// than SHA-256's output weakens it, and an empty key (a secret that was never filled in)
// would let anyone sign: Sign, Verify and the WebSocket tokens refuse such keys whatever
// their caller passes.
const MinSecretBytes = 32

// Errors returned by Verify; each maps to a stable error code in the HTTP API.
var (
	ErrWeakSecret = errors.New("the shared secret is missing or shorter than 32 bytes")
	ErrMissing    = errors.New("signature headers missing")
	ErrMalformed  = errors.New("signature headers malformed")
	ErrStale      = errors.New("request timestamp outside the allowed window")
	ErrBad        = errors.New("signature does not match")
)

// Canonical is the string that is signed: version, method, path with query, timestamp,
// nonce and the hex SHA-256 of the raw body, joined by newlines.
func Canonical(method, pathAndQuery, timestamp, nonce string, body []byte) string {
	sum := sha256.Sum256(body)
	return strings.Join([]string{Version, strings.ToUpper(method), pathAndQuery, timestamp, nonce, hex.EncodeToString(sum[:])}, "\n")
}

// CheckSecret returns ErrWeakSecret for a secret too short to sign with.
func CheckSecret(secret []byte) error {
	if len(secret) < MinSecretBytes {
		return ErrWeakSecret
	}
	return nil
}

// Sign returns the signature header value for a request. It refuses a weak secret.
func Sign(secret []byte, method, pathAndQuery, timestamp, nonce string, body []byte) (string, error) {
	if err := CheckSecret(secret); err != nil {
		return "", err
	}
	return sign(secret, method, pathAndQuery, timestamp, nonce, body), nil
}

func sign(secret []byte, method, pathAndQuery, timestamp, nonce string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(Canonical(method, pathAndQuery, timestamp, nonce, body)))
	return Version + "=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks the headers of one request against secret at time now. It does not check
// replays: callers record the nonce (see Nonces) after Verify succeeds. With a weak
// secret every request is refused with ErrWeakSecret.
func Verify(secret []byte, method, pathAndQuery, timestamp, nonce, signature string, body []byte, now time.Time) error {
	if err := CheckSecret(secret); err != nil {
		return err
	}
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
	want := sign(secret, method, pathAndQuery, timestamp, nonce, body)
	if !hmac.Equal([]byte(want), []byte(strings.ToLower(signature))) {
		return ErrBad
	}
	return nil
}
