package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/signing"
	"github.com/istota/istota/sidecar/internal/store"
)

var secret = []byte("live-test-secret-0123456789abcdef")

const origin = "https://cloud.example.org"

type env struct {
	db  *store.DB
	q   *queue.Queue
	hub *Hub
	srv *httptest.Server
}

func newEnv(t *testing.T, mod func(*Options)) *env {
	t.Helper()
	db, err := testDBs.OpenPath(context.Background(), filepath.Join(t.TempDir(), "live.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	q := queue.New(db, queue.Options{})
	opts := Options{
		Secret: secret, Origins: []string{Origin(origin + "/index.php")}, Nonces: signing.NewNonces(db),
		Authorize: func(_ context.Context, uid string) error {
			if uid == "mallory" {
				return errors.New("not allowed")
			}
			return nil
		},
		PollInterval: 20 * time.Millisecond,
	}
	if mod != nil {
		mod(&opts)
	}
	hub := New(db, q, opts)
	ctx, cancel := context.WithCancel(context.Background())
	hub.Start(ctx)
	srv := httptest.NewServer(hub)
	t.Cleanup(func() {
		cancel()
		srv.Close()
		hub.Close(context.Background())
	})
	return &env{db: db, q: q, hub: hub, srv: srv}
}

var nonceN int

func token(uid string, exp time.Time) string {
	nonceN++
	b, _ := json.Marshal(signing.WSClaims{UID: uid, Exp: exp.Unix(), Nonce: fmt.Sprintf("%032x", nonceN)})
	tok, err := signing.MintWSToken(secret, b)
	if err != nil {
		panic(err)
	}
	return tok
}

func (e *env) dial(tok, from string) (*websocket.Conn, int, error) {
	h := http.Header{}
	if from != "" {
		h.Set("Origin", from)
	}
	c, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(e.srv.URL, "http")+"/?token="+tok, h)
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	return c, status, err
}

func (e *env) connect(t *testing.T, uid string) *websocket.Conn {
	t.Helper()
	c, status, err := e.dial(token(uid, time.Now().Add(time.Minute)), origin)
	if err != nil {
		t.Fatalf("connect %s: %d %v", uid, status, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitConnected waits until the hub has registered n connections.
func (e *env) waitConnected(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.hub.Connected() != n {
		if time.Now().After(deadline) {
			t.Fatalf("connected = %d, want %d", e.hub.Connected(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type frame struct {
	Type   string `json:"type"`
	TaskID int64  `json:"task_id"`
	Kind   string `json:"kind"`
	Text   string `json:"text"`
	Task   struct {
		ID     int64  `json:"id"`
		Status string `json:"status"`
		Prompt string `json:"prompt"`
	} `json:"task"`
}

func read(t *testing.T, c *websocket.Conn) frame {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	var f frame
	if err := c.ReadJSON(&f); err != nil {
		t.Fatalf("read: %v", err)
	}
	return f
}

func TestRefusedConnections(t *testing.T) {
	e := newEnv(t, nil)
	used := token("alice", time.Now().Add(time.Minute))
	if c, _, err := e.dial(used, origin); err != nil {
		t.Fatal(err)
	} else {
		c.Close()
	}
	cases := []struct {
		name   string
		token  string
		origin string
		status int
	}{
		{"no token", "", origin, 401},
		{"forged", strings.Replace(token("alice", time.Now().Add(time.Minute)), "v1.", "v1.x", 1), origin, 401},
		{"expired", token("alice", time.Now().Add(-time.Second)), origin, 401},
		{"replayed", used, origin, 401},
		{"other origin", token("alice", time.Now().Add(time.Minute)), "https://evil.example", 403},
		{"no origin", token("alice", time.Now().Add(time.Minute)), "", 403},
		{"not allowed", token("mallory", time.Now().Add(time.Minute)), origin, 403},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, status, err := e.dial(c.token, c.origin)
			if err == nil {
				conn.Close()
				t.Fatal("the upgrade was accepted")
			}
			if status != c.status {
				t.Fatalf("status %d, want %d", status, c.status)
			}
		})
	}
}

func TestFramesReachOnlyTheirUser(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	alice, bob := e.connect(t, "alice"), e.connect(t, "bob")
	e.waitConnected(t, 2)
	// Let the poller prime on the state before the tasks exist.
	time.Sleep(100 * time.Millisecond)

	bobTask, _, _ := e.q.Enqueue(ctx, queue.NewTask{UserID: "bob", Source: "talk", Prompt: "bob's plan"})
	e.q.AddEvent(ctx, bobTask.ID, queue.EventTool, "bob's tool")
	aliceTask, _, _ := e.q.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: "talk", Prompt: "alice's question"})
	if _, err := e.q.ClaimID(ctx, aliceTask.ID, "w"); err != nil {
		t.Fatal(err)
	}
	if err := e.q.Start(ctx, aliceTask.ID, "w"); err != nil {
		t.Fatal(err)
	}
	e.q.AddEvent(ctx, aliceTask.ID, queue.EventTool, "reading files")
	e.q.AddEvent(ctx, aliceTask.ID, queue.EventProgress, "done soon")

	var got []frame
	for {
		f := read(t, alice)
		got = append(got, f)
		if f.Type == "event" && f.Text == "done soon" {
			break
		}
	}
	sawTask := false
	for _, f := range got {
		if f.TaskID == bobTask.ID || f.Task.ID == bobTask.ID || strings.Contains(f.Text+f.Task.Prompt, "bob") {
			t.Fatalf("alice received bob's frame: %+v", f)
		}
		if f.Type == "task" && f.Task.ID == aliceTask.ID {
			sawTask = true
		}
	}
	if !sawTask {
		t.Fatalf("no task frame for alice's task: %+v", got)
	}
	// Bob's stream has his task and his event.
	var bobGot []frame
	for len(bobGot) < 2 {
		bobGot = append(bobGot, read(t, bob))
	}
	for _, f := range bobGot {
		if f.TaskID == aliceTask.ID || f.Task.ID == aliceTask.ID {
			t.Fatalf("bob received alice's frame: %+v", f)
		}
	}
	// A finished task sends its final state.
	e.q.Complete(ctx, aliceTask.ID, "w", queue.Outcome{Result: "the answer"}, nil)
	for {
		f := read(t, alice)
		if f.Type == "task" && f.Task.ID == aliceTask.ID && f.Task.Status == "completed" {
			break
		}
	}
}

func TestSlowClientIsDroppedOthersContinue(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	// The slow client never reads, and its socket takes almost nothing in.
	d := websocket.Dialer{NetDialContext: (&net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return serr
	}}).DialContext}
	slow, _, err := d.Dial("ws"+strings.TrimPrefix(e.srv.URL, "http")+"/?token="+token("alice", time.Now().Add(time.Minute)), http.Header{"Origin": {origin}})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fast := e.connect(t, "alice")
	e.waitConnected(t, 2)
	time.Sleep(100 * time.Millisecond)
	task, _, _ := e.q.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: "talk", Prompt: "flood"})
	big := strings.Repeat("x", 16<<10)
	const n = 1000 // 16 MB: more than the socket buffers and the send buffer of a client that does not read
	// The fast client is never far behind: the producer waits for it, so only the
	// slow one can fill its buffer, whatever the machine's speed.
	var seen atomic.Int64
	done := make(chan error, 1)
	go func() {
		for seen.Load() < n {
			fast.SetReadDeadline(time.Now().Add(30 * time.Second))
			var f frame
			if err := fast.ReadJSON(&f); err != nil {
				done <- err
				return
			}
			if f.Type == "event" {
				seen.Add(1)
			}
		}
		done <- nil
	}()
	for i := 0; i < n; i++ {
		if err := e.q.AddEvent(ctx, task.ID, queue.EventTool, fmt.Sprintf("%d %s", i, big)); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); int64(i)-seen.Load() > 32; {
			if time.Now().After(deadline) {
				t.Fatalf("the fast client is stuck at %d of %d", seen.Load(), i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("the fast client missed events: %v", err)
	}
	e.waitConnected(t, 1)
}

func TestCloseEndsConnections(t *testing.T) {
	e := newEnv(t, nil)
	c := e.connect(t, "alice")
	e.waitConnected(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.hub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err := c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
		t.Fatalf("read after Close: %v", err)
	}
	if _, status, err := e.dial(token("alice", time.Now().Add(time.Minute)), origin); err == nil || status == http.StatusSwitchingProtocols {
		t.Fatalf("a closed hub accepted a connection (%d)", status)
	}
}
