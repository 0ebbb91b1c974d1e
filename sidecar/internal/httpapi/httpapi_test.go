package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/benchfig"

	"github.com/istota/istota/sidecar/internal/intake"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/signing"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/talk"
)

var secret = []byte("test-shared-secret-0123456789abcdef")

type nopSender struct{}

func (nopSender) SendMessage(context.Context, string, string, talk.SendOptions) error { return nil }

func newServer(t testing.TB, now time.Time) (*httptest.Server, *store.DB) {
	t.Helper()
	db, err := testDBs.OpenPath(context.Background(), filepath.Join(t.TempDir(), "api.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	q := queue.New(db, queue.Options{})
	in := intake.New(db, q, outbox.New(db, nopSender{}, outbox.Options{}), intake.Options{BotName: "Istota"})
	api := New(in, signing.NewNonces(db), Options{Secret: secret, MaxBodyBytes: 64 << 10, Version: "test", Schema: 1,
		Clock: func() time.Time { return now }})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return srv, db
}

type req struct {
	method, path string
	body         []byte
	ts           time.Time
	nonce        string
	sign         bool
	secret       []byte
}

var nonceSeq int

func do(t testing.TB, srv *httptest.Server, r req) (int, map[string]any) {
	t.Helper()
	hr, err := http.NewRequest(r.method, srv.URL+r.path, bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.sign {
		if r.nonce == "" {
			nonceSeq++
			r.nonce = fmt.Sprintf("%032x", nonceSeq)
		}
		key := secret
		if r.secret != nil {
			key = r.secret
		}
		ts := strconv.FormatInt(r.ts.Unix(), 10)
		hr.Header.Set(signing.HeaderTimestamp, ts)
		hr.Header.Set(signing.HeaderNonce, r.nonce)
		sig, err := signing.Sign(key, r.method, r.path, ts, r.nonce, r.body)
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set(signing.HeaderSignature, sig)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func eventBody(id int, text string) []byte {
	content, _ := json.Marshal(map[string]any{"message": text, "parameters": []any{}})
	b, _ := json.Marshal(map[string]any{
		"bot_url": "nextcloudapp://istota",
		"event": map[string]any{"type": "Create",
			"actor":  map[string]any{"type": "Person", "id": "users/alice", "name": "Alice", "talkParticipantType": "1"},
			"object": map[string]any{"type": "Note", "id": strconv.Itoa(id), "name": "message", "content": string(content), "mediaType": "text/markdown"},
			"target": map[string]any{"type": "Collection", "id": "abcd1234", "name": "Alice"}},
		"sender":       map[string]any{"uid": "alice", "display_name": "Alice", "allowed": true},
		"conversation": map[string]any{"token": "abcd1234", "type": 6, "user_count": 1, "private": true},
	})
	return b
}

func TestSignedEventAccepted(t *testing.T) {
	now := time.Now()
	srv, db := newServer(t, now)
	status, body := do(t, srv, req{method: "POST", path: "/v1/talk/events", body: eventBody(1, "hello"), ts: now, sign: true})
	if status != 200 || body["status"] != "accepted" || body["addressed"] != true {
		t.Fatalf("status %d body %v", status, body)
	}
	var n int
	db.Read.QueryRow(`SELECT count(*) FROM tasks`).Scan(&n)
	if n != 1 {
		t.Fatalf("tasks = %d", n)
	}
}

func TestBadRequestsAreRefusedAndLeaveNoTrace(t *testing.T) {
	now := time.Now()
	srv, db := newServer(t, now)
	body := eventBody(2, "hello")
	// A legitimately signed request, then replayed byte for byte.
	replayNonce := "0123456789abcdef0123456789abcdef"
	if st, _ := do(t, srv, req{method: "POST", path: "/v1/ping", body: []byte(`{"nonce_echo":"x"}`), ts: now, sign: true, nonce: replayNonce}); st != 200 {
		t.Fatalf("ping: %d", st)
	}
	cases := []struct {
		name   string
		r      req
		status int
		code   string
	}{
		{"unsigned", req{method: "POST", path: "/v1/talk/events", body: body}, 401, "missing_signature"},
		{"wrong secret", req{method: "POST", path: "/v1/talk/events", body: body, ts: now, sign: true, secret: []byte("another-secret-0123456789abcdefgh")}, 401, "bad_signature"},
		{"stale", req{method: "POST", path: "/v1/talk/events", body: body, ts: now.Add(-10 * time.Minute), sign: true}, 401, "stale_request"},
		{"from the future", req{method: "POST", path: "/v1/talk/events", body: body, ts: now.Add(10 * time.Minute), sign: true}, 401, "stale_request"},
		{"replayed nonce", req{method: "POST", path: "/v1/talk/events", body: body, ts: now, sign: true, nonce: replayNonce}, 401, "replayed_request"},
		{"malformed json", req{method: "POST", path: "/v1/talk/events", body: []byte(`{"event": {`), ts: now, sign: true}, 400, "invalid_event"},
		{"trailing data", req{method: "POST", path: "/v1/talk/events", body: append(append([]byte{}, body...), []byte(` {}`)...), ts: now, sign: true}, 400, "invalid_event"},
		{"not an event", req{method: "POST", path: "/v1/talk/events", body: []byte(`{"event":{"type":"Create"}}`), ts: now, sign: true}, 400, "invalid_event"},
		{"oversized", req{method: "POST", path: "/v1/talk/events", body: bytes.Repeat([]byte("x"), 65<<10), ts: now, sign: true}, 413, "body_too_large"},
		{"wrong method", req{method: "GET", path: "/v1/talk/events", ts: now, sign: true}, 405, "method_not_allowed"},
		{"unknown path", req{method: "POST", path: "/v1/nothing", ts: now, sign: true}, 404, "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, out := do(t, srv, c.r)
			if status != c.status {
				t.Fatalf("status = %d, want %d (%v)", status, c.status, out)
			}
			if c.code != "" {
				e, _ := out["error"].(map[string]any)
				if e["code"] != c.code || e["message"] == "" {
					t.Fatalf("error = %v, want code %s", out, c.code)
				}
			}
		})
	}
	for _, table := range []string{"tasks", "conversation_messages", "users", "talk_outbox"} {
		var n int
		db.Read.QueryRow("SELECT count(*) FROM " + table).Scan(&n)
		if n != 0 {
			t.Errorf("%s has %d rows after refused requests", table, n)
		}
	}
}

func TestHealthAndPing(t *testing.T) {
	now := time.Now()
	srv, _ := newServer(t, now)
	status, body := do(t, srv, req{method: "GET", path: "/v1/health"})
	if status != 200 || body["status"] != "ok" || body["version"] != "test" {
		t.Fatalf("health: %d %v", status, body)
	}
	if strings.Contains(fmt.Sprint(body), string(secret)) {
		t.Fatal("health leaks the secret")
	}
	status, body = do(t, srv, req{method: "POST", path: "/v1/ping", body: []byte(`{"nonce_echo":"abc"}`), ts: now, sign: true})
	if status != 200 || body["pong"] != "abc" {
		t.Fatalf("ping: %d %v", status, body)
	}
}

// BenchmarkIntake reports how many signed Talk events per second the HTTP API accepts
// into the queue (signature check, replay check, conversation log, enqueue), over
// loopback HTTP with a real SQLite database.
func BenchmarkIntake(b *testing.B) {
	now := time.Now()
	srv, _ := newServer(b, now)
	bodies := make([][]byte, b.N)
	for i := range bodies {
		bodies[i] = eventBody(1000+i, "bench message "+strconv.Itoa(i))
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if st, out := do(b, srv, req{method: "POST", path: "/v1/talk/events", body: bodies[i], ts: now, sign: true}); st != 200 {
			b.Fatalf("status %d: %v", st, out)
		}
	}
	rate := float64(b.N) / time.Since(start).Seconds()
	b.ReportMetric(rate, "events/s")
	benchfig.Report(b, "intake: signed Talk events accepted per second (loopback, real SQLite)", fmt.Sprintf("%.0f/s", rate), "", nil)
}
