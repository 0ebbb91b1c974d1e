// Package transcribe turns voice messages into text through an OpenAI-compatible
// speech-to-text API (POST {base}/audio/transcriptions, multipart: file, model; JSON
// answer {"text": …}), the interface of OpenAI, Groq, LocalAI, faster-whisper-server and
// whisper.cpp's server alike. It runs in the sidecar: the API key never reaches a
// sandbox, and nothing is downloaded at run time.
package transcribe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Limits.
const (
	// MaxBytes is the largest audio file sent (OpenAI's own limit is 25 MB).
	MaxBytes = 25 << 20
	// maxAnswer bounds the API's answer.
	maxAnswer = 1 << 20
	// DefaultModel is the model asked for when the admin names none.
	DefaultModel = "whisper-1"
	// DefaultTimeout bounds one transcription.
	DefaultTimeout = 5 * time.Minute
)

// ErrTooLarge: the file is bigger than MaxBytes.
var ErrTooLarge = errors.New("the audio file is larger than 25 MB")

// Config is where and how to transcribe.
type Config struct {
	// BaseURL is the API root, e.g. https://api.openai.com/v1.
	BaseURL string
	// Key returns the API key now (it may change while the sidecar runs); nil or "" sends
	// no Authorization header (local servers).
	Key func() string
	// Model defaults to DefaultModel.
	Model string
	// Client defaults to a client with DefaultTimeout.
	Client *http.Client
}

// Client transcribes files. It is safe for concurrent use.
type Client struct {
	endpoint string
	key      func() string
	model    string
	http     *http.Client
}

// New checks cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(cfg.BaseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("transcribe: base URL %q is not an http(s) URL", cfg.BaseURL)
	}
	c := &Client{endpoint: u.String() + "/audio/transcriptions", key: cfg.Key, model: cfg.Model, http: cfg.Client}
	if c.model == "" {
		c.model = DefaultModel
	}
	if c.key == nil {
		c.key = func() string { return "" }
	}
	if c.http == nil {
		c.http = &http.Client{Timeout: DefaultTimeout}
	}
	return c, nil
}

// TranscribeFile sends the audio file at path and returns its text.
func (c *Client) TranscribeFile(ctx context.Context, path, mimeType string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("transcribe: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("transcribe: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("transcribe: %s is not a file", filepath.Base(path))
	}
	if fi.Size() > MaxBytes {
		return "", ErrTooLarge
	}
	return c.Transcribe(ctx, f, filepath.Base(path), mimeType)
}

// Transcribe sends audio (named name, of mimeType) and returns its text.
func (c *Client) Transcribe(ctx context.Context, audio io.Reader, name, mimeType string) (string, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	if err := mw.WriteField("model", c.model); err != nil {
		return "", fmt.Errorf("transcribe: %w", err)
	}
	if err := mw.WriteField("response_format", "json"); err != nil {
		return "", fmt.Errorf("transcribe: %w", err)
	}
	h := make(map[string][]string)
	h["Content-Disposition"] = []string{fmt.Sprintf(`form-data; name="file"; filename=%q`, safeFileName(name))}
	if mimeType == "" {
		mimeType = "application/octet-stream"
	}
	h["Content-Type"] = []string{mimeType}
	part, err := mw.CreatePart(h)
	if err != nil {
		return "", fmt.Errorf("transcribe: %w", err)
	}
	n, err := io.Copy(part, io.LimitReader(audio, MaxBytes+1))
	if err != nil {
		return "", fmt.Errorf("transcribe: read the audio: %w", err)
	}
	if n > MaxBytes {
		return "", ErrTooLarge
	}
	if err := mw.Close(); err != nil {
		return "", fmt.Errorf("transcribe: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, &body)
	if err != nil {
		return "", fmt.Errorf("transcribe: %w", err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Accept", "application/json")
	if k := c.key(); k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// The URL is the admin's own setting; the error never carries the key.
		return "", fmt.Errorf("transcribe: the speech-to-text service is unreachable: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return "", fmt.Errorf("transcribe: read the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("transcribe: the speech-to-text service answered %s%s", resp.Status, apiMessage(raw))
	}
	var out struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Text == nil {
		return "", fmt.Errorf("transcribe: the speech-to-text service gave no text (%d bytes of %s)", len(raw), resp.Header.Get("Content-Type"))
	}
	return strings.TrimSpace(*out.Text), nil
}

// apiMessage is the error message of an OpenAI-style error body, if there is one.
func apiMessage(raw []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
		msg := e.Error.Message
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		return ": " + msg
	}
	return ""
}

// safeFileName keeps a file name usable in a multipart header.
func safeFileName(name string) string {
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == '"' || r == '\\' || r == 0x7f {
			return '_'
		}
		return r
	}, filepath.Base(name))
	if name == "" || name == "." || name == "/" {
		return "audio"
	}
	return name
}
