package talk

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Header names of the bot → Talk direction (reference §5).
const (
	HeaderBotRandom    = "X-Nextcloud-Talk-Bot-Random"
	HeaderBotSignature = "X-Nextcloud-Talk-Bot-Signature"
)

// Header names of the Talk → bot (webhook) direction.
const (
	HeaderRandom    = "X-Nextcloud-Talk-Random"
	HeaderSignature = "X-Nextcloud-Talk-Signature"
	HeaderBackend   = "X-Nextcloud-Talk-Backend"
)

// APIPath is the base of Talk's bot OCS endpoints.
const APIPath = "/ocs/v2.php/apps/spreed/api/v1/bot/"

// MaxMessageLength is Talk's chat message limit (ChatManager::MAX_CHAT_LENGTH), counted
// like PHP's mb_strlen: in Unicode code points, i.e. Go runes.
const MaxMessageLength = 32000

// maxErrorBody caps how much of an error response is kept in a StatusError.
const maxErrorBody = 512

// tokenPattern is the route requirement Talk puts on conversation tokens.
var tokenPattern = regexp.MustCompile(`^[a-z0-9]{4,30}$`)

// Errors found before anything is sent. Talk would refuse each of them, so IsPermanent
// reports them as permanent.
var (
	ErrInvalidToken   = errors.New("talk: invalid conversation token")
	ErrEmptyMessage   = errors.New("talk: message is empty")
	ErrMessageTooLong = errors.New("talk: message exceeds Talk's length limit")
	ErrEmptyReaction  = errors.New("talk: reaction is empty")
)

// ValidToken reports whether token has the form Talk accepts in bot API paths.
func ValidToken(token string) bool { return tokenPattern.MatchString(token) }

// StatusError is a non-success HTTP answer from Talk.
type StatusError struct {
	// Op says what was attempted, e.g. "send message".
	Op     string
	Status int
	// Body is the start of the response body, for logs.
	Body string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("talk: %s: HTTP %d", e.Op, e.Status)
	if hint := statusHint(e.Status); hint != "" {
		msg += " (" + hint + ")"
	}
	return msg
}

func statusHint(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "signature refused: the bot is not enabled in this conversation, lacks the response feature, or the bot secret is wrong"
	case http.StatusTooManyRequests:
		return "throttled by Nextcloud's brute-force protection"
	case http.StatusRequestEntityTooLarge:
		return "message too long"
	case http.StatusBadRequest:
		return "request refused: empty message, unknown reply target, or invalid parameters"
	case http.StatusNotFound:
		return "not found"
	}
	return ""
}

func statusOf(err error) (int, bool) {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status, true
	}
	return 0, false
}

// IsAuth reports a 401: Talk did not accept the bot's signature for this conversation.
// Each one counts toward Nextcloud's brute-force protection, so never retry it in a loop.
func IsAuth(err error) bool {
	s, ok := statusOf(err)
	return ok && s == http.StatusUnauthorized
}

// IsThrottled reports a 429 from Nextcloud's brute-force protection.
func IsThrottled(err error) bool {
	s, ok := statusOf(err)
	return ok && s == http.StatusTooManyRequests
}

// IsPermanent reports errors that sending the same request again cannot fix: 400, 404,
// 413, and the local validation errors (ErrInvalidToken, ErrEmptyMessage, …).
func IsPermanent(err error) bool {
	if errors.Is(err, ErrInvalidToken) || errors.Is(err, ErrEmptyMessage) ||
		errors.Is(err, ErrMessageTooLong) || errors.Is(err, ErrEmptyReaction) {
		return true
	}
	s, ok := statusOf(err)
	return ok && (s == http.StatusBadRequest || s == http.StatusNotFound || s == http.StatusRequestEntityTooLarge)
}

// IsRetryable reports errors worth retrying with backoff: 5xx, 429, 408 and transport
// failures (connection refused, timeouts, resets). Context cancellation is not one.
func IsRetryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if s, ok := statusOf(err); ok {
		return s >= 500 || s == http.StatusTooManyRequests || s == http.StatusRequestTimeout
	}
	if IsPermanent(err) {
		return false
	}
	var netErr net.Error
	var urlErr *url.Error
	return errors.As(err, &netErr) || errors.As(err, &urlErr) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.EOF) || errors.Is(err, context.DeadlineExceeded)
}

// SendOptions are the optional parameters of a bot message. None of them is covered by
// the signature.
type SendOptions struct {
	// ReplyTo is the id of a message in the same conversation; 0 for none.
	ReplyTo int64
	// ReferenceID lets clients recognise the message (Talk keeps at most 64 characters).
	ReferenceID string
	// Silent posts without notifications.
	Silent bool
}

// Client posts messages and reactions as a bot through Talk's bot OCS API, signing each
// request with the bot secret. It is safe for concurrent use.
type Client struct {
	baseURL string
	secret  []byte
	http    *http.Client
}

// NewClient returns a client for the Nextcloud at baseURL (e.g. "https://cloud.example").
// A nil httpClient gets one with a 30 s timeout. Redirects are not followed: Go would turn
// a redirected POST into a GET, so a redirect is reported as an error naming the target.
func NewClient(baseURL string, secret []byte, httpClient *http.Client) *Client {
	var hc http.Client
	if httpClient != nil {
		hc = *httpClient
	} else {
		hc.Timeout = 30 * time.Second
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{
		baseURL: strings.TrimRight(baseURL, "/"),
		secret:  bytes.Clone(secret),
		http:    &hc,
	}
}

// SendMessage posts message into the conversation token.
func (c *Client) SendMessage(ctx context.Context, token, message string, opts SendOptions) error {
	if !ValidToken(token) {
		return fmt.Errorf("send message: %w %q", ErrInvalidToken, token)
	}
	if strings.TrimSpace(message) == "" {
		return fmt.Errorf("send message to %s: %w", token, ErrEmptyMessage)
	}
	if n := utf8.RuneCountInString(strings.TrimSpace(message)); n > MaxMessageLength {
		return fmt.Errorf("send message to %s: %w (%d > %d characters)", token, ErrMessageTooLong, n, MaxMessageLength)
	}
	body := map[string]any{"message": message}
	if opts.ReplyTo != 0 {
		body["replyTo"] = opts.ReplyTo
	}
	if opts.ReferenceID != "" {
		body["referenceId"] = opts.ReferenceID
	}
	if opts.Silent {
		body["silent"] = true
	}
	return c.do(ctx, "send message", http.MethodPost, token+"/message", nil, body, message)
}

// React adds emoji to message messageID. Talk answers 200 when the reaction exists
// already; that is success too.
func (c *Client) React(ctx context.Context, token string, messageID int64, emoji string) error {
	if err := checkReaction(token, emoji); err != nil {
		return fmt.Errorf("react: %w", err)
	}
	path := token + "/reaction/" + strconv.FormatInt(messageID, 10)
	return c.do(ctx, "react", http.MethodPost, path, nil, map[string]any{"reaction": emoji}, emoji)
}

// DeleteReaction removes the bot's emoji from message messageID.
func (c *Client) DeleteReaction(ctx context.Context, token string, messageID int64, emoji string) error {
	if err := checkReaction(token, emoji); err != nil {
		return fmt.Errorf("delete reaction: %w", err)
	}
	path := token + "/reaction/" + strconv.FormatInt(messageID, 10)
	// The reaction also goes in the query: Nextcloud merges query parameters for every
	// method, while JSON bodies of DELETE requests are not read by every server setup.
	q := url.Values{"reaction": {emoji}}
	return c.do(ctx, "delete reaction", http.MethodDelete, path, q, map[string]any{"reaction": emoji}, emoji)
}

func checkReaction(token, emoji string) error {
	if !ValidToken(token) {
		return fmt.Errorf("%w %q", ErrInvalidToken, token)
	}
	if emoji == "" {
		return ErrEmptyReaction
	}
	return nil
}

// do sends one signed request. signed is the text the signature covers: the message for
// messages, the emoji for reactions.
func (c *Client) do(ctx context.Context, op, method, path string, query url.Values, body map[string]any, signed string) error {
	payload, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("talk: %s: encode body: %w", op, err)
	}
	target := c.baseURL + APIPath + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("talk: %s: build request: %w", op, err)
	}
	random, err := newRandom()
	if err != nil {
		return fmt.Errorf("talk: %s: %w", op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("OCS-APIRequest", "true")
	req.Header.Set(HeaderBotRandom, random)
	req.Header.Set(HeaderBotSignature, Sign(c.secret, random, []byte(signed)))

	resp, err := c.http.Do(req)
	if err != nil {
		// *url.Error names the URL (token included, never the secret) and the cause.
		return fmt.Errorf("talk: %s: %w", op, err)
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	// Drain a little more so the connection can be reused; stop early on huge bodies.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	se := &StatusError{Op: op, Status: resp.StatusCode, Body: strings.ToValidUTF8(string(head), "")}
	if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return fmt.Errorf("%w: redirected to %s; configure the Nextcloud base URL as the final address", se, loc)
	}
	return se
}

// newRandom returns 64 hex characters from crypto/rand; Talk requires at least 32.
func newRandom() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random for signature: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Sign returns lowercase hex HMAC-SHA256(secret, random + data), the signature used in
// both directions: data is the message text or emoji for bot requests, the raw request
// body for webhooks.
func Sign(secret []byte, random string, data []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(random))
	mac.Write(data)
	return hex.EncodeToString(mac.Sum(nil))
}

// VerifyWebhook checks a webhook from Talk: signature must be the HMAC of random followed
// by the raw body bytes. Talk sends 64 random characters; fewer than 32 are refused as the
// server refuses them in the other direction. The comparison is constant-time.
func VerifyWebhook(secret []byte, random, signature string, body []byte) bool {
	if len(secret) == 0 || len(random) < 32 || signature == "" {
		return false
	}
	want := Sign(secret, random, body)
	return hmac.Equal([]byte(want), []byte(strings.ToLower(strings.TrimSpace(signature))))
}
