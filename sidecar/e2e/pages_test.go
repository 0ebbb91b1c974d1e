package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
	"github.com/istota/istota/sidecar/internal/live"
	"github.com/istota/istota/sidecar/internal/signing"
)

// call sends any signed request as the Nextcloud app does.
func (s *sidecar) call(method, path string, body []byte) (int, map[string]any) {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.url+path, bytes.NewReader(body))
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	nonce := fmt.Sprintf("%016x%016x", time.Now().UnixNano(), os.Getpid())
	req.Header.Set(signing.HeaderTimestamp, ts)
	req.Header.Set(signing.HeaderNonce, nonce)
	req.Header.Set(signing.HeaderSignature, mustSign(s.t, s.secret, method, path, ts, nonce, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

// TestSettingsPagesAgainstTheRunningSidecar drives the settings pages' API of a real
// `istota serve`: a session, the live WebSocket receiving a task's progress while the
// real CLI runs it, the status panel, and the admin settings with a write-only key.
func TestSettingsPagesAgainstTheRunningSidecar(t *testing.T) {
	const token = "pages001"
	f := newFixture(t, fakeapi.Script{
		fakeapi.ToolCall("Checking.", "Bash", map[string]any{"command": "echo pages-tool-ran", "description": "Say hi"}),
		fakeapi.Reply("All done."),
	}, token)
	f.sc.start()
	sc := f.sc

	body, _ := json.Marshal(map[string]any{"display_name": "Alice", "email": "alice@example.com", "timezone": "Europe/Berlin",
		"language": "en", "groups": []string{"staff"}, "is_admin": false})
	if st, out := sc.call("POST", "/v1/users/alice/session", body); st != 200 || out["allowed"] != true || out["files_path"] != "/istota" {
		t.Fatalf("session: %d %v", st, out)
	}

	// The browser connects with a token the app minted, from the Nextcloud origin.
	claims, _ := json.Marshal(signing.WSClaims{UID: "alice", Exp: time.Now().Add(2 * time.Minute).Unix(), Nonce: "0123456789abcdef0123456789abcdef"})
	wsURL := "ws" + strings.TrimPrefix(sc.url, "http") + "/v1/ws?token=" + mustMintWSToken(t, sc.secret, claims)
	if _, resp, err := websocket.DefaultDialer.Dial(wsURL, http.Header{"Origin": {"https://evil.example"}}); err == nil || resp == nil || resp.StatusCode != 403 {
		t.Fatalf("a foreign origin was not refused: %v", err)
	}
	conn, _, err := websocket.DefaultDialer.Dial(wsURL, http.Header{"Origin": {live.Origin(f.talk.URL)}})
	if err != nil {
		t.Fatalf("websocket: %v\n%s", err, sc.logs())
	}
	defer conn.Close()
	time.Sleep(200 * time.Millisecond) // the hub primes its poller on the first connection

	f.say(t, token, 7, "alice", "run the tool please")
	var sawTool, sawDone bool
	var taskID float64
	for !sawTool || !sawDone {
		conn.SetReadDeadline(time.Now().Add(3 * time.Minute))
		var fr map[string]any
		if err := conn.ReadJSON(&fr); err != nil {
			t.Fatalf("reading the live stream: %v\n%s", err, sc.logs())
		}
		switch fr["type"] {
		case "event":
			if fr["kind"] == "tool" && strings.Contains(fmt.Sprint(fr["text"]), "echo pages-tool-ran") {
				sawTool = true
			}
		case "task":
			task := fr["task"].(map[string]any)
			taskID = task["id"].(float64)
			if task["status"] == "completed" {
				sawDone = true
			}
		}
	}

	st, out := sc.call("GET", "/v1/users/alice/status", nil)
	recent, _ := out["recent"].([]any)
	if st != 200 || len(recent) != 1 || recent[0].(map[string]any)["id"].(float64) != taskID ||
		recent[0].(map[string]any)["result"] != "All done." {
		t.Fatalf("status: %d %v", st, out)
	}
	st, out = sc.call("GET", fmt.Sprintf("/v1/users/alice/tasks/%d/events?after=0", int64(taskID)), nil)
	if evs, _ := out["events"].([]any); st != 200 || len(evs) == 0 || out["status"] != "completed" {
		t.Fatalf("events: %d %v", st, out)
	}
	if st, out := sc.call("GET", fmt.Sprintf("/v1/users/bob/tasks/%d/events", int64(taskID)), nil); st != 404 {
		t.Fatalf("an unknown user saw the task: %d %v", st, out)
	}

	// Admin: the key is write-only and applies to the next task at once (the admin pastes
	// it after installing); workers.max waits for a restart.
	st, out = sc.call("PUT", "/v1/admin/settings", []byte(`{"brain":{"api_key":"sk-set-in-the-panel-0001"},"workers":{"max":3}}`))
	raw, _ := json.Marshal(out)
	if st != 200 || bytes.Contains(raw, []byte("sk-set-in-the-panel")) || strings.Contains(string(raw), "brain.api_key") ||
		!strings.Contains(string(raw), "workers.max") {
		t.Fatalf("admin put: %d %s", st, raw)
	}
	before := len(f.talk.Messages())
	f.say(t, token, 8, "alice", "and now?")
	f.waitMessages(t, before+1, 3*time.Minute)
	reqs := f.api.MessageRequests()
	if got := reqs[len(reqs)-1].Header.Get("X-Api-Key"); got != "sk-set-in-the-panel-0001" {
		t.Fatalf("the next task reached the model API with key %q, not the one set in the panel", got)
	}
	if st, out := sc.call("GET", "/v1/admin/health", nil); st != 200 || out["sandbox"].(map[string]any)["mode"] != "bwrap" {
		t.Fatalf("health: %d %v", st, out)
	}
	if strings.Contains(sc.logs(), "sk-set-in-the-panel") {
		t.Fatal("the API key reached the log")
	}
	// After a restart the stored settings are in effect and nothing waits any more.
	sc.stop()
	sc.start()
	st, out = sc.call("GET", "/v1/admin/settings", nil)
	if st != 200 || out["settings"].(map[string]any)["workers"].(map[string]any)["max"].(float64) != 3 || len(out["restart_required"].([]any)) != 0 {
		t.Fatalf("after restart: %d %v", st, out)
	}
}
