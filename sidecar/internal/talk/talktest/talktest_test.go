package talktest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

const (
	secret = "0123456789012345678901234567890123456789abcd"
	token  = "abcd1234"
	random = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
)

// sign is written out here, independently of package talk, so the fake is checked
// against the reference's formula rather than against the client it will test.
func sign(key, rnd, data string) string {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(rnd + data))
	return hex.EncodeToString(mac.Sum(nil))
}

type request struct {
	method, path string
	body         any // marshalled to JSON unless it is a string
	contentType  string
	header       map[string]string
	omit         []string // default headers to leave out
}

// send makes a request with the headers a correct bot sends, adjusted by r.
func send(t *testing.T, s *Server, r request) (int, string, http.Header) {
	t.Helper()
	var body []byte
	switch b := r.body.(type) {
	case nil:
	case string:
		body = []byte(b)
	default:
		var err error
		if body, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(r.method, s.URL+r.path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	ct := r.contentType
	if ct == "" {
		ct = "application/json"
	}
	h := map[string]string{
		"Content-Type":                   ct,
		"Accept":                         "application/json",
		"OCS-APIRequest":                 "true",
		"X-Nextcloud-Talk-Bot-Random":    random,
		"X-Nextcloud-Talk-Bot-Signature": "",
	}
	for k, v := range r.header {
		h[k] = v
	}
	for _, k := range r.omit {
		delete(h, k)
	}
	for k, v := range h {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func msgPath(tok string) string { return "/ocs/v2.php/apps/spreed/api/v1/bot/" + tok + "/message" }

func signed(msg string) map[string]string {
	return map[string]string{"X-Nextcloud-Talk-Bot-Signature": sign(secret, random, msg)}
}

func TestSendMessageChecks(t *testing.T) {
	long := strings.Repeat("ä", MaxChatLength)
	cases := []struct {
		name       string
		req        request
		wantStatus int
		wantPosted bool
	}{
		{"success", request{body: map[string]any{"message": "hello"}, header: signed("hello")}, 201, true},
		{"uppercase signature accepted", request{body: map[string]any{"message": "hello"},
			header: map[string]string{"X-Nextcloud-Talk-Bot-Signature": strings.ToUpper(sign(secret, random, "hello"))}}, 201, true},
		{"reply to a message of this conversation", request{body: map[string]any{"message": "re", "replyTo": 17}, header: signed("re")}, 201, true},
		{"form encoded body", request{body: "message=hi+there&silent=1", contentType: "application/x-www-form-urlencoded", header: signed("hi there")}, 201, true},
		{"exactly the limit, surrounding whitespace trimmed", request{body: map[string]any{"message": " " + long + "\n"}, header: signed(" " + long + "\n")}, 201, true},
		{"no OCS-APIRequest header", request{body: map[string]any{"message": "hello"}, header: signed("hello"), omit: []string{"OCS-APIRequest"}}, 412, false},
		{"empty message before any auth", request{body: map[string]any{"message": "  \n\t"}}, 400, false},
		{"missing message", request{body: map[string]any{"replyTo": 1}, header: signed("")}, 400, false},
		{"random shorter than 32", request{body: map[string]any{"message": "hello"},
			header: map[string]string{"X-Nextcloud-Talk-Bot-Random": random[:31], "X-Nextcloud-Talk-Bot-Signature": sign(secret, random[:31], "hello")}}, 400, false},
		{"random under the webhook header name", request{body: map[string]any{"message": "hello"},
			header: map[string]string{"X-Nextcloud-Talk-Random": random, "X-Nextcloud-Talk-Bot-Signature": sign(secret, random, "hello")},
			omit:   []string{"X-Nextcloud-Talk-Bot-Random"}}, 400, false},
		{"signature missing", request{body: map[string]any{"message": "hello"}}, 400, false},
		{"wrong secret", request{body: map[string]any{"message": "hello"}, header: map[string]string{"X-Nextcloud-Talk-Bot-Signature": sign("other-secret-other-secret-other-secret-xx", random, "hello")}}, 401, false},
		{"HMAC over the JSON body", request{body: map[string]any{"message": "hello"}, header: signed(`{"message":"hello"}`)}, 401, false},
		{"reply target in another conversation", request{body: map[string]any{"message": "re", "replyTo": 99}, header: signed("re")}, 400, false},
		{"reply target unknown", request{body: map[string]any{"message": "re", "replyTo": 12345}, header: signed("re")}, 400, false},
		{"too long", request{body: map[string]any{"message": long + "x"}, header: signed(long + "x")}, 413, false},
		{"token not matching the route", request{path: msgPath("ABC!"), body: map[string]any{"message": "hello"}, header: signed("hello")}, 404, false},
		{"wrong method", request{method: http.MethodGet, body: map[string]any{"message": "hello"}, header: signed("hello")}, 404, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := New(t)
			s.SetBruteForceLimit(0)
			s.AddBot(secret).EnableIn(token)
			s.AddUserMessage(token, 17, "users/alice", "question")
			s.AddUserMessage("other123", 99, "users/bob", "elsewhere")
			if c.req.method == "" {
				c.req.method = http.MethodPost
			}
			if c.req.path == "" {
				c.req.path = msgPath(token)
			}
			got, body, _ := send(t, s, c.req)
			if got != c.wantStatus {
				t.Fatalf("status %d, want %d (body %s)", got, c.wantStatus, body)
			}
			if n := len(s.Messages()); (n == 1) != c.wantPosted {
				t.Fatalf("%d messages recorded, want posted=%v", n, c.wantPosted)
			}
			if s.Count(c.wantStatus) != 1 || s.Requests() != 1 {
				t.Fatalf("counters: %v, requests %d", s.Counts(), s.Requests())
			}
		})
	}
}

func TestSuccessBodyAndRecord(t *testing.T) {
	s := New(t)
	s.AddBot(secret).EnableIn(token)
	s.AddUserMessage(token, 41, "users/alice", "hi")
	ref := "  " + strings.Repeat("r", 70)
	status, body, hdr := send(t, s, request{method: http.MethodPost, path: msgPath(token),
		body: map[string]any{"message": "answer", "replyTo": 41, "referenceId": ref, "silent": true}, header: signed("answer")})
	if status != 201 {
		t.Fatalf("status %d", status)
	}
	if want := `{"ocs":{"meta":{"status":"ok","statuscode":201,"message":"OK"},"data":null}}`; strings.TrimSpace(body) != want {
		t.Fatalf("body %s, want %s", body, want)
	}
	if !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("content type %q", hdr.Get("Content-Type"))
	}
	msgs := s.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages", len(msgs))
	}
	m := msgs[0]
	if m.ID != 42 || m.Token != token || m.Message != "answer" || m.ReplyTo != 41 || !m.Silent || m.ReferenceID != strings.Repeat("r", 64) {
		t.Fatalf("recorded %+v", m)
	}
	if m.Header.Get("X-Nextcloud-Talk-Bot-Random") != random {
		t.Fatal("headers not recorded")
	}
	// The bot's own message can be replied to, as in Talk.
	status, _, _ = send(t, s, request{method: http.MethodPost, path: msgPath(token), body: map[string]any{"message": "more", "replyTo": 42}, header: signed("more")})
	if status != 201 {
		t.Fatalf("reply to the bot's message: %d", status)
	}
}

func TestXMLWithoutAcceptJSON(t *testing.T) {
	s := New(t)
	s.AddBot(secret).EnableIn(token)
	status, body, hdr := send(t, s, request{method: http.MethodPost, path: msgPath(token), body: map[string]any{"message": "x"}, header: signed("x"), omit: []string{"Accept"}})
	if status != 201 || !strings.HasPrefix(body, "<?xml") || strings.Contains(hdr.Get("Content-Type"), "json") {
		t.Fatalf("status %d, content type %q, body %s", status, hdr.Get("Content-Type"), body)
	}
	if !strings.Contains(body, "<statuscode>201</statuscode>") {
		t.Fatalf("body %s", body)
	}
}

func TestBotMustBeEnabledWithResponseFeature(t *testing.T) {
	cases := []struct {
		name  string
		setup func(b *Bot)
		want  int
	}{
		{"enabled", func(b *Bot) { b.EnableIn(token) }, 201},
		{"enabled elsewhere only", func(b *Bot) { b.EnableIn("zzzz9999") }, 401},
		{"disabled again", func(b *Bot) { b.EnableIn(token); b.DisableIn(token) }, 401},
		{"no response feature", func(b *Bot) { b.EnableIn(token); b.SetFeatures(FeatureEvent) }, 401},
		{"server state disabled", func(b *Bot) { b.EnableIn(token); b.SetState(0) }, 401},
		{"no-setup state still works", func(b *Bot) { b.EnableIn(token); b.SetState(2) }, 201},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := New(t)
			c.setup(s.AddBot(secret))
			if got, _, _ := send(t, s, request{method: http.MethodPost, path: msgPath(token), body: map[string]any{"message": "x"}, header: signed("x")}); got != c.want {
				t.Fatalf("status %d, want %d", got, c.want)
			}
		})
	}
}

func TestSecondBotInTheSameConversation(t *testing.T) {
	s := New(t)
	s.AddBot("another-bot-secret-another-bot-secret-1234").EnableIn(token)
	b := s.AddBot(secret)
	b.EnableIn(token)
	if got, _, _ := send(t, s, request{method: http.MethodPost, path: msgPath(token), body: map[string]any{"message": "x"}, header: signed("x")}); got != 201 {
		t.Fatalf("status %d", got)
	}
	if m := s.Messages(); m[0].BotID != b.ID() {
		t.Fatalf("posted as bot %d, want %d", m[0].BotID, b.ID())
	}
}

func TestReactions(t *testing.T) {
	s := New(t)
	s.AddBot(secret).EnableIn(token)
	s.AddUserMessage(token, 5, "users/alice", "hi")
	path := "/ocs/v2.php/apps/spreed/api/v1/bot/" + token + "/reaction/5"
	react := func(method, p, emoji string, sig map[string]string) int {
		st, _, _ := send(t, s, request{method: method, path: p, body: map[string]any{"reaction": emoji}, header: sig})
		return st
	}
	steps := []struct {
		name         string
		method, path string
		emoji        string
		sig          map[string]string
		want         int
		reactions    int
	}{
		{"add", http.MethodPost, path, "👀", signed("👀"), 201, 1},
		{"duplicate", http.MethodPost, path, "👀", signed("👀"), 200, 1},
		{"second emoji", http.MethodPost, path, "👍", signed("👍"), 201, 2},
		{"signature over another emoji", http.MethodPost, path, "🎉", signed("👍"), 401, 2},
		{"unknown message", http.MethodPost, strings.Replace(path, "/5", "/6", 1), "👀", signed("👀"), 404, 2},
		{"delete", http.MethodDelete, path, "👀", signed("👀"), 200, 1},
		{"delete again", http.MethodDelete, path, "👀", signed("👀"), 404, 1},
	}
	for _, st := range steps {
		if got := react(st.method, st.path, st.emoji, st.sig); got != st.want {
			t.Fatalf("%s: status %d, want %d", st.name, got, st.want)
		}
		if n := len(s.Reactions()); n != st.reactions {
			t.Fatalf("%s: %d reactions, want %d", st.name, n, st.reactions)
		}
	}
	if r := s.Reactions()[0]; r.Emoji != "👍" || r.MessageID != 5 || r.Token != token {
		t.Fatalf("reaction %+v", r)
	}
	// DELETE with the reaction in the query, as Nextcloud clients send it.
	q := "?reaction=%F0%9F%91%8D"
	if got, _, _ := send(t, s, request{method: http.MethodDelete, path: path + q, header: signed("👍")}); got != 200 {
		t.Fatalf("delete via query: %d", got)
	}
}

func TestBruteForceThrottling(t *testing.T) {
	s := New(t)
	s.AddBot(secret).EnableIn(token)
	s.SetBruteForceLimit(3)
	bad := request{method: http.MethodPost, path: msgPath(token), body: map[string]any{"message": "x"}, header: signed("y")}
	good := request{method: http.MethodPost, path: msgPath(token), body: map[string]any{"message": "x"}, header: signed("x")}
	for i := range 3 {
		if got, _, _ := send(t, s, bad); got != 401 {
			t.Fatalf("attempt %d: %d, want 401", i+1, got)
		}
	}
	if got, _, _ := send(t, s, bad); got != 429 {
		t.Fatalf("after the limit: %d, want 429", got)
	}
	if got, _, _ := send(t, s, good); got != 429 {
		t.Fatalf("a correct request while throttled: %d, want 429", got)
	}
	s.ResetBruteForce()
	if got, _, _ := send(t, s, good); got != 201 {
		t.Fatalf("after reset: %d, want 201", got)
	}
	if c := s.Counts(); c[401] != 3 || c[429] != 2 || c[201] != 1 {
		t.Fatalf("counts %v", c)
	}
}

func TestOutages(t *testing.T) {
	s := New(t)
	s.AddBot(secret).EnableIn(token)
	good := request{method: http.MethodPost, path: msgPath(token), body: map[string]any{"message": "x"}, header: signed("x")}

	s.FailNext(503, 2)
	for i := range 2 {
		if got, _, _ := send(t, s, good); got != 503 {
			t.Fatalf("fail %d: %d", i, got)
		}
	}
	if got, _, _ := send(t, s, good); got != 201 {
		t.Fatalf("after FailNext: %d", got)
	}

	s.SetDown(502)
	if got, _, _ := send(t, s, good); got != 502 {
		t.Fatalf("down: %d", got)
	}
	s.SetDown(0) // connection dropped
	req, _ := http.NewRequest(http.MethodPost, s.URL+msgPath(token), strings.NewReader(`{"message":"x"}`))
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("a dropped connection gave an answer")
	}
	s.SetUp()
	if got, _, _ := send(t, s, good); got != 201 {
		t.Fatalf("up again: %d", got)
	}
	if c := s.Counts(); c[503] != 2 || c[502] != 1 || c[0] < 1 || c[201] != 2 {
		t.Fatalf("counts %v", c)
	}
	if len(s.Messages()) != 2 {
		t.Fatalf("%d messages", len(s.Messages()))
	}
}

func TestWaitMessages(t *testing.T) {
	s := New(t)
	s.AddBot(secret).EnableIn(token)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan []Posted, 1)
	go func() {
		m, err := s.WaitMessages(ctx, 2)
		if err != nil {
			t.Error(err)
		}
		done <- m
	}()
	for _, m := range []string{"one", "two"} {
		send(t, s, request{method: http.MethodPost, path: msgPath(token), body: map[string]any{"message": m}, header: signed(m)})
	}
	if m := <-done; len(m) != 2 || m[0].Message != "one" || m[1].Message != "two" {
		t.Fatalf("got %+v", m)
	}

	short, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := s.WaitMessages(short, 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}
