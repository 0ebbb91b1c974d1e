package transcribe

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSTT answers like OpenAI's /audio/transcriptions and records what it was sent.
type fakeSTT struct {
	model, file, name, mime, auth, format string
}

func (f *fakeSTT) server(t *testing.T, status int, answer string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/audio/transcriptions" {
			http.NotFound(w, r)
			return
		}
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.model, f.format, f.auth = r.FormValue("model"), r.FormValue("response_format"), r.Header.Get("Authorization")
		file, hdr, err := r.FormFile("file")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b, _ := io.ReadAll(file)
		f.file, f.name, f.mime = string(b), hdr.Filename, hdr.Header.Get("Content-Type")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestTranscribeFile(t *testing.T) {
	var f fakeSTT
	srv := f.server(t, 200, `{"text":"  Buy milk on the way home.  "}`)
	c, err := New(Config{BaseURL: srv.URL + "/v1/", Key: func() string { return "sk-stt-secret" }})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "Voice \"note\".ogg")
	os.WriteFile(path, []byte("OggS-fake-audio"), 0o600)
	text, err := c.TranscribeFile(context.Background(), path, "audio/ogg")
	if err != nil || text != "Buy milk on the way home." {
		t.Fatalf("text %q, %v", text, err)
	}
	if f.model != DefaultModel || f.format != "json" || f.auth != "Bearer sk-stt-secret" || f.file != "OggS-fake-audio" || f.mime != "audio/ogg" || f.name != "Voice _note_.ogg" {
		t.Errorf("the service got %+v", f)
	}
}

func TestTranscribeFailures(t *testing.T) {
	var f fakeSTT
	ctx := context.Background()
	dir := t.TempDir()
	audio := filepath.Join(dir, "a.ogg")
	os.WriteFile(audio, []byte("OggS"), 0o600)

	refused := f.server(t, 401, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`)
	c, _ := New(Config{BaseURL: refused.URL + "/v1", Key: func() string { return "sk-wrong-key" }, Model: "large-v3"})
	_, err := c.TranscribeFile(ctx, audio, "audio/ogg")
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "Incorrect API key") || strings.Contains(err.Error(), "sk-wrong-key") {
		t.Errorf("refused: %v", err)
	}
	if f.model != "large-v3" || f.auth != "Bearer sk-wrong-key" {
		t.Errorf("the service got %+v", f)
	}

	noText := f.server(t, 200, `{"segments":[]}`)
	c, _ = New(Config{BaseURL: noText.URL + "/v1"})
	if _, err := c.TranscribeFile(ctx, audio, "audio/ogg"); err == nil || !strings.Contains(err.Error(), "no text") {
		t.Errorf("answer without text: %v", err)
	}
	if f.auth != "" {
		t.Errorf("a key was sent without one configured: %q", f.auth)
	}

	big := filepath.Join(dir, "big.ogg")
	os.WriteFile(big, make([]byte, MaxBytes+1), 0o600)
	if _, err := c.TranscribeFile(ctx, big, "audio/ogg"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized file: %v", err)
	}
	if _, err := c.TranscribeFile(ctx, dir, "audio/ogg"); err == nil {
		t.Error("a folder was sent")
	}
	c, _ = New(Config{BaseURL: "http://127.0.0.1:1/v1"})
	if _, err := c.TranscribeFile(ctx, audio, "audio/ogg"); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("service down: %v", err)
	}
	for _, bad := range []string{"", "ftp://x/v1", "not a url", "https://"} {
		if _, err := New(Config{BaseURL: bad}); err == nil {
			t.Errorf("base URL %q accepted", bad)
		}
	}
}
