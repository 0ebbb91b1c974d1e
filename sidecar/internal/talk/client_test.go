package talk_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/talk"
	"github.com/istota/istota/sidecar/internal/talk/talktest"
)

const (
	secret = "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t-0042"
	token  = "room1234"
)

func setup(t *testing.T) (*talktest.Server, *talk.Client) {
	t.Helper()
	s := talktest.New(t)
	s.AddBot(secret).EnableIn(token)
	s.AddUserMessage(token, 10, "users/alice", "question")
	return s, talk.NewClient(s.URL+"/", []byte(secret), &http.Client{Timeout: 30 * time.Second})
}

func TestSendMessageSignedAsTalkExpects(t *testing.T) {
	s, c := setup(t)
	ctx := context.Background()
	text := "Antwort mit Ümlauts, \"quotes\", / slashes and 🎉"
	ref := strings.Repeat("ab", 32)
	if err := c.SendMessage(ctx, token, text, talk.SendOptions{ReplyTo: 10, ReferenceID: ref, Silent: true}); err != nil {
		t.Fatal(err)
	}
	msgs := s.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages", len(msgs))
	}
	m := msgs[0]
	if m.Message != text || m.ReplyTo != 10 || m.ReferenceID != ref || !m.Silent || m.Token != token {
		t.Fatalf("posted %+v", m)
	}
	random := m.Header.Get(talk.HeaderBotRandom)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(random) {
		t.Fatalf("random %q is not 64 hex characters", random)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(random + text))
	if got, want := m.Header.Get(talk.HeaderBotSignature), hex.EncodeToString(mac.Sum(nil)); got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
	for k, want := range map[string]string{"OCS-APIRequest": "true", "Accept": "application/json", "Content-Type": "application/json"} {
		if got := m.Header.Get(k); got != want {
			t.Fatalf("header %s = %q, want %q", k, got, want)
		}
	}

	// A second message gets a fresh random.
	if err := c.SendMessage(ctx, token, "plain", talk.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	m2 := s.Messages()[1]
	if m2.Header.Get(talk.HeaderBotRandom) == random {
		t.Fatal("random reused")
	}
	if m2.ReplyTo != 0 || m2.Silent || m2.ReferenceID != "" {
		t.Fatalf("defaults not kept: %+v", m2)
	}
}

func TestSendMessageErrors(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name        string
		prepare     func(s *talktest.Server)
		tok, text   string
		opts        talk.SendOptions
		check       func(error) bool
		wantRequest bool
	}{
		{"bot not enabled in the conversation", func(s *talktest.Server) {}, "zzzz0000", "hi", talk.SendOptions{}, talk.IsAuth, true},
		{"reply target not in this conversation", func(s *talktest.Server) {}, token, "hi", talk.SendOptions{ReplyTo: 999}, talk.IsPermanent, true},
		{"server error", func(s *talktest.Server) { s.FailNext(503, 1) }, token, "hi", talk.SendOptions{}, talk.IsRetryable, true},
		{"connection dropped", func(s *talktest.Server) { s.FailNext(0, 1) }, token, "hi", talk.SendOptions{}, talk.IsRetryable, true},
		{"invalid token is refused before sending", func(s *talktest.Server) {}, "Room-1", "hi", talk.SendOptions{}, talk.IsPermanent, false},
		{"empty message is refused before sending", func(s *talktest.Server) {}, token, " \n ", talk.SendOptions{}, talk.IsPermanent, false},
		{"too long is refused before sending", func(s *talktest.Server) {}, token, strings.Repeat("é", talk.MaxMessageLength+1), talk.SendOptions{}, talk.IsPermanent, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, c := setup(t)
			tc.prepare(s)
			err := c.SendMessage(ctx, tc.tok, tc.text, tc.opts)
			if err == nil || !tc.check(err) {
				t.Fatalf("got %v", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error leaks the secret: %v", err)
			}
			if (s.Requests() > 0) != tc.wantRequest {
				t.Fatalf("requests %d, want a request: %v", s.Requests(), tc.wantRequest)
			}
		})
	}
}

func TestWrongSecret(t *testing.T) {
	s, _ := setup(t)
	c := talk.NewClient(s.URL, []byte("wrong-"+secret), nil)
	err := c.SendMessage(context.Background(), token, "hi", talk.SendOptions{})
	if !talk.IsAuth(err) || talk.IsRetryable(err) || talk.IsPermanent(err) {
		t.Fatalf("got %v, want a 401", err)
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatalf("error leaks the secret: %v", err)
	}
	if s.Count(401) != 1 || len(s.Messages()) != 0 {
		t.Fatalf("counts %v", s.Counts())
	}
}

func TestThrottledAfterRepeatedAuthFailures(t *testing.T) {
	s, c := setup(t)
	s.SetBruteForceLimit(2)
	ctx := context.Background()
	for range 2 {
		if err := c.SendMessage(ctx, "nope0000", "hi", talk.SendOptions{}); !talk.IsAuth(err) {
			t.Fatalf("got %v, want 401", err)
		}
	}
	err := c.SendMessage(ctx, token, "hi", talk.SendOptions{})
	if !talk.IsThrottled(err) || !talk.IsRetryable(err) || talk.IsAuth(err) || talk.IsPermanent(err) {
		t.Fatalf("got %v, want a retryable 429", err)
	}
	var se *talk.StatusError
	if !errors.As(err, &se) || se.Status != 429 || se.Body == "" {
		t.Fatalf("status error %+v", se)
	}
}

func TestExactlyMaxLengthIsAccepted(t *testing.T) {
	s, c := setup(t)
	text := strings.Repeat("€", talk.MaxMessageLength)
	if err := c.SendMessage(context.Background(), token, text, talk.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if s.Count(201) != 1 {
		t.Fatalf("counts %v", s.Counts())
	}
}

func TestReactAndDelete(t *testing.T) {
	s, c := setup(t)
	ctx := context.Background()
	if err := c.React(ctx, token, 10, "👀"); err != nil {
		t.Fatal(err)
	}
	if err := c.React(ctx, token, 10, "👀"); err != nil {
		t.Fatalf("duplicate reaction (200) should succeed: %v", err)
	}
	if got := s.Reactions(); len(got) != 1 || got[0].Emoji != "👀" || got[0].MessageID != 10 {
		t.Fatalf("reactions %+v", got)
	}
	if err := c.DeleteReaction(ctx, token, 10, "👀"); err != nil {
		t.Fatal(err)
	}
	if got := s.Reactions(); len(got) != 0 {
		t.Fatalf("reactions %+v", got)
	}
	if err := c.DeleteReaction(ctx, token, 10, "👀"); !talk.IsPermanent(err) {
		t.Fatalf("deleting a missing reaction: %v, want a permanent 404", err)
	}
	if err := c.React(ctx, token, 11, "👀"); !talk.IsPermanent(err) {
		t.Fatalf("unknown message: %v", err)
	}
	if err := c.React(ctx, token, 10, ""); !errors.Is(err, talk.ErrEmptyReaction) {
		t.Fatalf("empty reaction: %v", err)
	}
	if c := s.Counts(); c[201] != 1 || c[200] != 2 || c[404] != 2 {
		t.Fatalf("counts %v", c)
	}
}

func TestRedirectIsReportedNotFollowed(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://cloud.example"+r.URL.Path, http.StatusMovedPermanently)
	}))
	defer target.Close()
	c := talk.NewClient(target.URL, []byte(secret), nil)
	err := c.SendMessage(context.Background(), token, "hi", talk.SendOptions{})
	if err == nil || !strings.Contains(err.Error(), "https://cloud.example") {
		t.Fatalf("got %v", err)
	}
}

func TestCanceledContextIsNotRetryable(t *testing.T) {
	_, c := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.SendMessage(ctx, token, "hi", talk.SendOptions{})
	if err == nil || talk.IsRetryable(err) {
		t.Fatalf("got %v", err)
	}
}

func TestVerifyWebhook(t *testing.T) {
	body := []byte(`{"type":"Create","actor":{"type":"Person","id":"users\/alice"}}`)
	random := strings.Repeat("Ab+/", 16) // 64 characters of Talk's base64 alphabet
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(random))
	mac.Write(body)
	sig := hex.EncodeToString(mac.Sum(nil))

	cases := []struct {
		name                string
		secret, random, sig string
		body                []byte
		want                bool
	}{
		{"valid", secret, random, sig, body, true},
		{"uppercase signature", secret, random, strings.ToUpper(sig), body, true},
		{"body re-serialised without escaping", secret, random, sig, []byte(strings.ReplaceAll(string(body), `\/`, `/`)), false},
		{"wrong secret", "other", random, sig, body, false},
		{"other random", secret, strings.Repeat("x", 64), sig, body, false},
		{"short random", secret, random[:31], sig, body, false},
		{"empty signature", secret, random, "", body, false},
		{"empty secret", "", random, sig, body, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := talk.VerifyWebhook([]byte(c.secret), c.random, c.sig, c.body); got != c.want {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestErrorClassification(t *testing.T) {
	cases := []struct {
		status                           int
		auth, throttled, perm, retryable bool
	}{
		{400, false, false, true, false},
		{401, true, false, false, false},
		{404, false, false, true, false},
		{413, false, false, true, false},
		{429, false, true, false, true},
		{500, false, false, false, true},
		{503, false, false, false, true},
		{412, false, false, false, false},
	}
	for _, c := range cases {
		err := error(&talk.StatusError{Op: "send message", Status: c.status})
		wrapped := errors.Join(errors.New("context"), err)
		for _, e := range []error{err, wrapped} {
			if talk.IsAuth(e) != c.auth || talk.IsThrottled(e) != c.throttled || talk.IsPermanent(e) != c.perm || talk.IsRetryable(e) != c.retryable {
				t.Errorf("status %d: auth=%v throttled=%v permanent=%v retryable=%v", c.status,
					talk.IsAuth(e), talk.IsThrottled(e), talk.IsPermanent(e), talk.IsRetryable(e))
			}
		}
	}
}
