// Package appcall makes the sidecar's calls to the Istota app in Nextcloud. They are
// signed with the shared secret exactly as the app signs its calls to the sidecar
// (docs/app-sidecar-protocol.md), because the app's route for them has no Nextcloud
// login.
package appcall

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/signing"
)

// ReadyPath is the app's route for Ready, below Nextcloud's URL.
const ReadyPath = "/ocs/v2.php/apps/istota/api/v1/sidecar/ready"

// ErrRefused means the app answered that it does not accept the call as it is: a
// different shared secret (401), or an app without the route (404). Retrying does not help.
var ErrRefused = errors.New("the Nextcloud app refused the call")

// RejectedError is the app's refusal of one request for what it asks (400: the input is
// wrong; 403: the user may not do it). Code is stable (e.g. "not_owner"), Message is
// plain language meant for the user or the agent: it holds no internals.
type RejectedError struct {
	Status  int
	Code    string
	Message string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("the Nextcloud app refused (%d %s): %s", e.Status, e.Code, e.Message)
}

// Client calls the app.
type Client struct {
	base   *url.URL
	secret []byte
	hc     *http.Client
	clock  func() time.Time
}

// New returns a client for the app in the Nextcloud at nextcloudURL.
func New(nextcloudURL string, secret []byte, hc *http.Client) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(nextcloudURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("appcall: want Nextcloud's http(s) URL, got %q", nextcloudURL)
	}
	if err := signing.CheckSecret(secret); err != nil {
		return nil, fmt.Errorf("appcall: %w", err)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{base: u, secret: secret, hc: hc, clock: time.Now}, nil
}

// ReadyResult is what the app did on Ready.
type ReadyResult struct {
	// Delivered is how many waiting Talk events it handed over.
	Delivered int `json:"delivered"`
	// Complete is false when some are still waiting (its time budget ran out, or a
	// delivery failed); the next message or Nextcloud's background job sends them.
	Complete bool `json:"complete"`
}

// Ready tells the app the sidecar is serving, so it hands over the Talk events that
// waited in its outbox while the sidecar was down.
func (c *Client) Ready(ctx context.Context) (ReadyResult, error) {
	var out ReadyResult
	return out, c.call(ctx, ReadyPath, nil, &out)
}

// PostedPath is the app's route for Posted.
const PostedPath = "/ocs/v2.php/apps/istota/api/v1/sidecar/posted"

// Posted asks which of the bot messages with these referenceIds are in conversation
// token: the outbox asks before sending again a message whose earlier send may have
// reached Talk (the process died during it, or the connection broke after the request
// left), because Talk would post it twice.
func (c *Client) Posted(ctx context.Context, token string, referenceIDs []string) ([]string, error) {
	body, err := json.Marshal(map[string]any{"token": token, "reference_ids": referenceIDs})
	if err != nil {
		return nil, err
	}
	var out struct {
		Posted []string `json:"posted"`
	}
	return out.Posted, c.call(ctx, PostedPath, body, &out)
}

// call POSTs body, signed, to the app's route and decodes the OCS data into out.
func (c *Client) call(ctx context.Context, route string, body []byte, out any) error {
	path := c.base.Path + route
	ts := strconv.FormatInt(c.clock().Unix(), 10)
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	nonce := hex.EncodeToString(raw)
	sig, err := signing.Sign(c.secret, http.MethodPost, path, ts, nonce, body)
	if err != nil {
		return err
	}
	target := *c.base
	target.Path = path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("appcall: %w", err)
	}
	req.Header.Set("OCS-APIRequest", "true")
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set(signing.HeaderTimestamp, ts)
	req.Header.Set(signing.HeaderNonce, nonce)
	req.Header.Set(signing.HeaderSignature, sig)
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("appcall: POST %s: %w", route, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: POST %s answered %s", ErrRefused, route, resp.Status)
	case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusForbidden:
		// The app's own refusal of this request: {code, message} for whoever asked.
		var env struct {
			OCS struct {
				Data struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"data"`
			} `json:"ocs"`
		}
		if json.Unmarshal(answer, &env) == nil && env.OCS.Data.Code != "" {
			return &RejectedError{Status: resp.StatusCode, Code: env.OCS.Data.Code, Message: env.OCS.Data.Message}
		}
		return fmt.Errorf("appcall: POST %s answered %s", route, resp.Status)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("appcall: POST %s answered %s", route, resp.Status)
	}
	env := struct {
		OCS struct {
			Data any `json:"data"`
		} `json:"ocs"`
	}{}
	env.OCS.Data = out
	if err := json.Unmarshal(answer, &env); err != nil {
		return fmt.Errorf("appcall: POST %s: unreadable answer: %w", route, err)
	}
	return nil
}
