package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/config"
	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/intake"
	"github.com/istota/istota/sidecar/internal/knowledge"
	"github.com/istota/istota/sidecar/internal/memory"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/portal"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/schedule"
	"github.com/istota/istota/sidecar/internal/settings"
	"github.com/istota/istota/sidecar/internal/signing"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/usage"
	"github.com/istota/istota/sidecar/internal/webdav"
	"github.com/istota/istota/sidecar/internal/webdav/davtest"
	"github.com/istota/istota/sidecar/internal/workspace"
)

// pagesEnv is the API with the settings pages wired to real parts: SQLite, the
// workspace over a WebDAV server, the knowledge graph, the memory index, the scheduler.
type pagesEnv struct {
	srv      *httptest.Server
	db       *store.DB
	q        *queue.Queue
	st       *settings.Store
	dav      *davtest.Server
	ws       *workspace.Workspace
	graph    *knowledge.Graph
	mem      *memory.Memory
	sched    *schedule.Scheduler
	usage    *usage.Store
	data     string
	canceled []int64
	mu       sync.Mutex
}

type recordingCanceller struct{ e *pagesEnv }

func (c recordingCanceller) Cancel(id int64) bool {
	c.e.mu.Lock()
	defer c.e.mu.Unlock()
	c.e.canceled = append(c.e.canceled, id)
	return true
}

func newPagesEnv(t *testing.T, base func(*config.Config)) *pagesEnv {
	t.Helper()
	return newPagesEnvWith(t, base, nil)
}

// newPagesEnvWith is newPagesEnv with a last word on the portal's options.
func newPagesEnvWith(t *testing.T, base func(*config.Config), mod func(*pagesEnv, *portal.Options)) *pagesEnv {
	t.Helper()
	ctx := context.Background()
	e := &pagesEnv{data: t.TempDir()}
	var err error
	e.db, err = testDBs.OpenPath(ctx, filepath.Join(t.TempDir(), "pages.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.db.Close() })
	e.dav = davtest.New(t, davtest.Options{Users: []string{"alice", "bob", "carol"}})
	client, err := webdav.New(webdav.Options{URL: e.dav.URL, User: "istota", Password: "bot-app-password", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.ws, err = workspace.New(e.db, client, workspace.Options{
		UserMirror:    func(uid string) string { return filepath.Join(e.data, "users", uid, "workspace") },
		ChannelMirror: func(token string) string { return filepath.Join(e.data, "channels", token) },
		BotDir:        "istota", Host: "testhost",
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.DataDir = e.data
	if base != nil {
		base(&cfg)
	}
	e.st, err = settings.Open(ctx, e.db, cfg, settings.Options{DataDir: e.data})
	if err != nil {
		t.Fatal(err)
	}
	e.q = queue.New(e.db, queue.Options{})
	e.graph = knowledge.New(e.db, knowledge.Options{})
	e.mem = memory.New(e.db, memory.Options{})
	e.sched = schedule.New(e.db, schedule.Options{})
	e.usage = usage.New(e.db)
	ob := outbox.New(e.db, nopSender{}, outbox.Options{})
	popts := portal.Options{
		DB: e.db, Queue: e.q, Access: e.st, Canceller: recordingCanceller{e}, Usage: e.usage, Graph: e.graph,
		Memory: e.mem, Scheduler: e.sched, Files: e.ws, Settings: e.st, Poster: ob,
		UserRoot: e.ws.UserRoot, ChannelRoot: e.ws.ChannelRoot, BotName: "Istota", BotDir: "istota", Version: "test",
	}
	if mod != nil {
		mod(e, &popts)
	}
	p, err := portal.New(popts)
	if err != nil {
		t.Fatal(err)
	}
	in := intake.New(e.db, e.q, ob, intake.Options{
		BotName: "Istota", Access: e.st, Budget: settings.NewBudget(e.st, e.usage, nil)})
	api := New(in, signing.NewNonces(e.db), Options{Secret: secret, MaxBodyBytes: 1 << 20, Version: "test", Schema: 1, Portal: p})
	e.srv = httptest.NewServer(api)
	t.Cleanup(e.srv.Close)
	return e
}

// call sends a signed request and decodes the JSON answer.
func (e *pagesEnv) call(t *testing.T, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	default:
		raw, _ = json.Marshal(b)
	}
	return do(t, e.srv, req{method: method, path: path, body: raw, ts: time.Now(), sign: true})
}

func (e *pagesEnv) session(t *testing.T, uid string, groups []string, admin bool) map[string]any {
	t.Helper()
	st, out := e.call(t, "POST", "/v1/users/"+url.PathEscape(uid)+"/session",
		map[string]any{"display_name": uid, "email": uid + "@example.org", "timezone": "Europe/Berlin", "language": "en", "groups": groups, "is_admin": admin})
	if st != 200 {
		t.Fatalf("session %s: %d %v", uid, st, out)
	}
	return out
}

func errCode(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func TestSessionAndAccess(t *testing.T) {
	e := newPagesEnv(t, func(c *config.Config) {
		c.Access = config.Access{Users: []string{"alice"}, Groups: []string{"staff"}, AdminGroups: []string{"ops"}}
	})
	cases := []struct {
		uid            string
		groups         []string
		ncAdmin        bool
		allowed, admin bool
	}{
		{"alice", nil, false, true, false},
		{"bob", []string{"staff"}, false, true, false},
		{"carol", []string{"guests"}, false, false, false},
		{"dave", []string{"ops"}, false, true, true},
		{"erin", nil, true, true, true},
	}
	for _, c := range cases {
		t.Run(c.uid, func(t *testing.T) {
			out := e.session(t, c.uid, c.groups, c.ncAdmin)
			if out["allowed"] != c.allowed || out["istota_admin"] != c.admin || out["bot_name"] != "Istota" || out["files_path"] != "/istota" {
				t.Fatalf("session = %v", out)
			}
			st, body := e.call(t, "GET", "/v1/users/"+c.uid+"/status", nil)
			want := 200
			if !c.allowed {
				want = 403
			}
			if st != want || (!c.allowed && errCode(body) != "not_allowed") {
				t.Fatalf("status: %d %v, want %d", st, body, want)
			}
			var isAdmin bool
			e.db.Read.QueryRow(`SELECT is_admin FROM users WHERE id = ?`, c.uid).Scan(&isAdmin)
			if isAdmin != c.admin {
				t.Fatalf("users.is_admin = %t, want %t", isAdmin, c.admin)
			}
		})
	}
	// Access changes in the panel take effect at once, is_admin included.
	if st, out := e.call(t, "PUT", "/v1/admin/settings", map[string]any{"access": map[string]any{"groups": []string{"staff", "guests"}, "admin_users": []string{"bob"}}}); st != 200 {
		t.Fatalf("put settings: %d %v", st, out)
	} else if rr := out["restart_required"].([]any); len(rr) != 0 {
		t.Fatalf("access needs no restart: %v", rr)
	}
	if st, out := e.call(t, "GET", "/v1/users/carol/status", nil); st != 200 {
		t.Fatalf("carol after the change: %d %v", st, out)
	}
	var bobAdmin bool
	e.db.Read.QueryRow(`SELECT is_admin FROM users WHERE id = 'bob'`).Scan(&bobAdmin)
	if !bobAdmin {
		t.Fatal("bob named in admin_users is not an admin yet")
	}
	if st, out := e.call(t, "GET", "/v1/users/nobody/status", nil); st != 404 || errCode(out) != "not_found" {
		t.Fatalf("unknown user: %d %v", st, out)
	}
}

// userRoutes is every per-user route with a harmless body.
func userRoutes(uid string, task, fact int64, job string) []struct {
	method, path string
	body         any
} {
	u := "/v1/users/" + uid
	return []struct {
		method, path string
		body         any
	}{
		{"GET", u + "/status", nil},
		{"GET", u + "/tasks/" + strconv.FormatInt(task, 10) + "/events?after=0", nil},
		{"POST", u + "/stop", nil},
		{"GET", u + "/memory/user", nil},
		{"PUT", u + "/memory/user", map[string]any{"content": "x", "etag": portal.ETag(nil)}},
		{"GET", u + "/memory/audit?limit=5", nil},
		{"GET", u + "/memory/channels", nil},
		{"GET", u + "/memory/dated?days=3", nil},
		{"GET", u + "/memory/facts", nil},
		{"POST", u + "/memory/facts/" + strconv.FormatInt(fact, 10) + "/invalidate", nil},
		{"DELETE", u + "/memory/facts/" + strconv.FormatInt(fact, 10), nil},
		{"GET", u + "/memory/search?q=garden", nil},
		{"GET", u + "/schedule", nil},
		{"POST", u + "/schedule/jobs/" + url.PathEscape(job) + "/run", nil},
		{"GET", u + "/settings", nil},
		{"PUT", u + "/settings", map[string]any{"timezone": "Europe/Paris"}},
		{"POST", u + "/conversation", map[string]any{"token": "home" + uid}},
	}
}

func TestUsersNeverReachEachOther(t *testing.T) {
	e := newPagesEnv(t, nil)
	ctx := context.Background()
	e.session(t, "alice", nil, false)
	e.session(t, "bob", nil, false)
	// Bob's things: a task with events, a fact, a job, a memory, a USER.md.
	bobTask, _, err := e.q.Enqueue(ctx, queue.NewTask{UserID: "bob", Source: "talk", Prompt: "bob's secret plan"})
	if err != nil {
		t.Fatal(err)
	}
	e.q.AddEvent(ctx, bobTask.ID, queue.EventTool, "bob's tool call")
	bobFact, _, err := e.graph.Add(ctx, memory.UserNamespace("bob"), knowledge.Fact{Subject: "bob", Predicate: "likes", Object: "gardening"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.sched.Sync(ctx, "bob", false, []byte("[[jobs]]\nname = \"bob job\"\nschedule = \"0 9 * * *\"\nprompt = \"hi\"\n"), "UTC", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mem.Index(ctx, memory.Doc{Namespace: memory.UserNamespace("bob"), Source: "conversation", SourceRef: "task:1", Text: "bob talked about his garden and tomatoes"}); err != nil {
		t.Fatal(err)
	}
	e.dav.WriteFile("Users/bob/istota/config/USER.md", "# Bob\n- bob's private note\n")

	// Alice names Bob's ids in her own paths: not found, and nothing of Bob's changes.
	for _, r := range userRoutes("alice", bobTask.ID, bobFact.ID, "bob job") {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			st, out := e.call(t, r.method, r.path, r.body)
			raw, _ := json.Marshal(out)
			for _, leak := range []string{"secret plan", "tool call", "gardening", "bob job", "tomatoes", "private note"} {
				if strings.Contains(string(raw), leak) {
					t.Fatalf("alice sees bob's %q: %s", leak, raw)
				}
			}
			if strings.Contains(r.path, strconv.FormatInt(bobTask.ID, 10)+"/events") ||
				strings.Contains(r.path, "/facts/") || strings.Contains(r.path, "/jobs/") {
				if st != 404 || errCode(out) != "not_found" {
					t.Fatalf("%d %v, want 404 not_found", st, out)
				}
			}
		})
	}
	if facts, _ := e.graph.Current(ctx, memory.UserNamespace("bob"), ""); len(facts) != 1 {
		t.Fatalf("bob's facts changed: %v", facts)
	}
	if j, _ := e.sched.Get(ctx, "bob", "bob job"); !j.RunRequestedAt.IsZero() {
		t.Fatal("alice ran bob's job")
	}
	if got, _ := e.q.Get(ctx, bobTask.ID); got.Status != queue.Pending {
		t.Fatalf("alice's stop touched bob's task: %s", got.Status)
	}
	// Bob sees his own.
	if st, out := e.call(t, "GET", fmt.Sprintf("/v1/users/bob/tasks/%d/events", bobTask.ID), nil); st != 200 || len(out["events"].([]any)) != 1 {
		t.Fatalf("bob's events: %d %v", st, out)
	}
	if st, out := e.call(t, "GET", "/v1/users/bob/memory/search?q=garden", nil); st != 200 || len(out["results"].([]any)) == 0 {
		t.Fatalf("bob's search: %d %v", st, out)
	}
}

func TestRefusedCallersTouchNothing(t *testing.T) {
	e := newPagesEnv(t, func(c *config.Config) { c.Access.Users = []string{"alice"} })
	e.session(t, "alice", nil, false)
	e.session(t, "mallory", nil, false) // known, not allowed
	for _, r := range userRoutes("alice", 1, 1, "job") {
		t.Run("unsigned "+r.method+" "+r.path, func(t *testing.T) {
			raw, _ := json.Marshal(r.body)
			if r.body == nil {
				raw = nil
			}
			st, out := do(t, e.srv, req{method: r.method, path: r.path, body: raw})
			if st != 401 || errCode(out) != "missing_signature" {
				t.Fatalf("%d %v", st, out)
			}
		})
	}
	for _, r := range userRoutes("mallory", 1, 1, "job") {
		t.Run("not allowed "+r.method+" "+r.path, func(t *testing.T) {
			if st, out := e.call(t, r.method, r.path, r.body); st != 403 || errCode(out) != "not_allowed" {
				t.Fatalf("%d %v", st, out)
			}
		})
	}
	for _, r := range userRoutes("stranger", 1, 1, "job") {
		t.Run("unknown "+r.method+" "+r.path, func(t *testing.T) {
			if st, out := e.call(t, r.method, r.path, r.body); st != 404 || errCode(out) != "not_found" {
				t.Fatalf("%d %v", st, out)
			}
		})
	}
	for _, p := range []string{"/v1/admin/health", "/v1/admin/settings"} {
		if st, _ := do(t, e.srv, req{method: "GET", path: p}); st != 401 {
			t.Fatalf("unsigned %s: %d", p, st)
		}
	}
	var n int
	e.db.Read.QueryRow(`SELECT COUNT(*) FROM user_settings`).Scan(&n)
	if n != 0 {
		t.Fatalf("refused calls stored %d settings", n)
	}
}

func TestUserMDEditing(t *testing.T) {
	e := newPagesEnv(t, nil)
	e.session(t, "alice", nil, false)
	e.dav.WriteFile("Users/alice/istota/config/USER.md", "# Alice\n- likes tea\n")

	st, out := e.call(t, "GET", "/v1/users/alice/memory/user", nil)
	if st != 200 || out["content"] != "# Alice\n- likes tea\n" || out["etag"] != portal.ETag([]byte("# Alice\n- likes tea\n")) {
		t.Fatalf("get: %d %v", st, out)
	}
	tag := out["etag"].(string)

	st, out = e.call(t, "PUT", "/v1/users/alice/memory/user", map[string]any{"content": "# Alice\n- likes green tea\n", "etag": tag})
	if st != 200 || out["etag"] != portal.ETag([]byte("# Alice\n- likes green tea\n")) {
		t.Fatalf("put: %d %v", st, out)
	}
	if got, _ := e.dav.ReadFile("Users/alice/istota/config/USER.md"); got != "# Alice\n- likes green tea\n" {
		t.Fatalf("Nextcloud has %q", got)
	}
	newTag := out["etag"].(string)

	// A save based on the old version is refused with the current ETag.
	st, out = e.call(t, "PUT", "/v1/users/alice/memory/user", map[string]any{"content": "stale", "etag": tag})
	if st != 409 || errCode(out) != "conflict" || out["error"].(map[string]any)["current_etag"] != newTag {
		t.Fatalf("stale put: %d %v", st, out)
	}

	// An edit made in Files is seen (pulled) before comparing.
	e.dav.WriteFile("Users/alice/istota/config/USER.md", "# Alice\n- edited in Files\n")
	st, out = e.call(t, "PUT", "/v1/users/alice/memory/user", map[string]any{"content": "# Alice\n- from the page\n", "etag": newTag})
	if st != 409 || out["error"].(map[string]any)["current_etag"] != portal.ETag([]byte("# Alice\n- edited in Files\n")) {
		t.Fatalf("put over a Files edit: %d %v", st, out)
	}
	filesTag := portal.ETag([]byte("# Alice\n- edited in Files\n"))

	// The page waits for the curation lock.
	root, _ := e.ws.UserRoot("alice")
	lock, err := os.OpenFile(filepath.Join(root, "istota/config/USER.md.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		st, _ := e.call(t, "PUT", "/v1/users/alice/memory/user", map[string]any{"content": "# Alice\n- after the lock\n", "etag": filesTag})
		done <- st
	}()
	select {
	case st := <-done:
		t.Fatalf("the save did not wait for the curation lock (status %d)", st)
	case <-time.After(300 * time.Millisecond):
	}
	syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	lock.Close()
	if st := <-done; st != 200 {
		t.Fatalf("save after the lock: %d", st)
	}
	afterTag := portal.ETag([]byte("# Alice\n- after the lock\n"))

	// Nextcloud down: the edit is kept and pushed later.
	e.dav.Close()
	st, out = e.call(t, "PUT", "/v1/users/alice/memory/user", map[string]any{"content": "# Alice\n- offline edit\n", "etag": afterTag})
	if st != 503 || errCode(out) != "unavailable" || !strings.Contains(out["error"].(map[string]any)["message"].(string), "synced") {
		t.Fatalf("put while Nextcloud is down: %d %v", st, out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "istota/config/USER.md")); string(b) != "# Alice\n- offline edit\n" {
		t.Fatalf("the offline edit was not kept: %q", b)
	}
	e.dav.Restart()
	if err := e.ws.RetryFailed(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.dav.ReadFile("Users/alice/istota/config/USER.md"); got != "# Alice\n- offline edit\n" {
		t.Fatalf("after the retry Nextcloud has %q", got)
	}

	// The page's edits are in the audit log, newest first, next to curation's.
	st, out = e.call(t, "GET", "/v1/users/alice/memory/audit?limit=2", nil)
	entries, _ := out["entries"].([]any)
	if st != 200 || len(entries) != 2 || entries[0].(map[string]any)["source"] != "settings_page" {
		t.Fatalf("audit: %d %v", st, out)
	}

	// Limits.
	if st, out := e.call(t, "PUT", "/v1/users/alice/memory/user", map[string]any{"content": strings.Repeat("x", 65<<10), "etag": afterTag}); st != 400 {
		t.Fatalf("oversized: %d %v", st, out)
	}
	if st, out := e.call(t, "PUT", "/v1/users/alice/memory/user", map[string]any{"content": "x"}); st != 400 {
		t.Fatalf("no etag: %d %v", st, out)
	}
}

func TestStatusStopAndEvents(t *testing.T) {
	e := newPagesEnv(t, nil)
	ctx := context.Background()
	e.session(t, "alice", nil, false)
	running, _, _ := e.q.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: "talk", Interactive: true, Prompt: strings.Repeat("long prompt ", 40)})
	if _, err := e.q.ClaimID(ctx, running.ID, "w1"); err != nil {
		t.Fatal(err)
	}
	if err := e.q.Start(ctx, running.ID, "w1"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		e.q.AddEvent(ctx, running.ID, queue.EventTool, fmt.Sprintf("step %d", i))
	}
	queued, _, _ := e.q.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: "talk", Prompt: "next"})
	e.usage.Record(ctx, usage.Entry{At: time.Now(), UserID: "alice", TaskID: running.ID, InputTokens: 100, OutputTokens: 20, CostUSD: 0.01})

	st, out := e.call(t, "GET", "/v1/users/alice/status", nil)
	if st != 200 {
		t.Fatalf("status: %d %v", st, out)
	}
	run := out["running"].(map[string]any)
	if run["id"].(float64) != float64(running.ID) || run["status"] != "running" || len([]rune(run["prompt"].(string))) != 200 {
		t.Fatalf("running = %v", run)
	}
	if q := out["queued"].([]any); len(q) != 1 || q[0].(map[string]any)["id"].(float64) != float64(queued.ID) {
		t.Fatalf("queued = %v", q)
	}
	today := out["usage"].(map[string]any)["today"].(map[string]any)
	if today["input_tokens"].(float64) != 100 || today["output_tokens"].(float64) != 20 || today["tasks"].(float64) != 2 || out["timezone"] != "Europe/Berlin" {
		t.Fatalf("usage = %v", out["usage"])
	}
	st, out = e.call(t, "GET", fmt.Sprintf("/v1/users/alice/tasks/%d/events?after=1", running.ID), nil)
	if evs := out["events"].([]any); st != 200 || len(evs) != 2 || evs[0].(map[string]any)["text"] != "step 1" || out["status"] != "running" {
		t.Fatalf("events: %d %v", st, out)
	}
	st, out = e.call(t, "POST", "/v1/users/alice/stop", nil)
	if st != 200 || out["stopped"].(float64) != 1 || out["dropped"].(float64) != 1 {
		t.Fatalf("stop: %d %v", st, out)
	}
	if len(e.canceled) != 1 || e.canceled[0] != running.ID {
		t.Fatalf("the running process was not stopped: %v", e.canceled)
	}
	st, out = e.call(t, "GET", "/v1/users/alice/status", nil)
	if recent := out["recent"].([]any); st != 200 || out["running"] != nil || len(recent) != 2 || recent[0].(map[string]any)["error"] != "stopped" {
		t.Fatalf("after stop: %d %v", st, out)
	}
}

func TestPersonalSettings(t *testing.T) {
	e := newPagesEnv(t, nil)
	e.session(t, "alice", nil, false)
	e.session(t, "bob", nil, false)
	if st, out := e.call(t, "PUT", "/v1/users/bob/settings", map[string]any{"emails": []string{"bob@home.example"}}); st != 200 {
		t.Fatalf("bob: %d %v", st, out)
	}
	// Every bad field at once; nothing stored.
	st, out := e.call(t, "PUT", "/v1/users/alice/settings", map[string]any{
		"timezone": "Mars/Olympus", "emails": []string{"alice@example.org", "BOB@home.example"},
		"persona": strings.Repeat("p", 17<<10), "calendars": []string{"/remote.php/dav/calendars/istota/other/"}})
	fields, _ := out["error"].(map[string]any)["fields"].(map[string]any)
	if st != 422 || errCode(out) != "invalid_settings" || len(fields) != 4 {
		t.Fatalf("bad settings: %d %v", st, out)
	}
	if st, out := e.call(t, "GET", "/v1/users/alice/settings", nil); st != 200 || out["timezone"] != "Europe/Berlin" || len(out["emails"].([]any)) != 0 {
		t.Fatalf("stored after refusal: %d %v", st, out)
	}
	st, out = e.call(t, "PUT", "/v1/users/alice/settings", map[string]any{
		"timezone": "America/New_York", "emails": []string{" Alice@Work.example ", "alice@home.example"}, "persona": "Be brief.", "calendars": []string{}})
	if st != 200 || out["timezone"] != "America/New_York" || out["persona"] != "Be brief." || out["files_path"] != "/istota" {
		t.Fatalf("save: %d %v", st, out)
	}
	if em := out["emails"].([]any); len(em) != 2 || em[0] != "alice@home.example" || em[1] != "alice@work.example" {
		t.Fatalf("emails = %v", em)
	}
	if got, _ := e.dav.ReadFile("Users/alice/istota/config/PERSONA.md"); got != "Be brief." {
		t.Fatalf("PERSONA.md in Nextcloud = %q", got)
	}
	// Her own choice of timezone outlives the next session with Nextcloud's.
	e.session(t, "alice", nil, false)
	if _, out := e.call(t, "GET", "/v1/users/alice/settings", nil); out["timezone"] != "America/New_York" {
		t.Fatalf("timezone after a new session: %v", out["timezone"])
	}
}

func TestAdminSettingsAndHealth(t *testing.T) {
	e := newPagesEnv(t, func(c *config.Config) { c.Brain.APIKey = "sk-from-config-file" })
	st, out := e.call(t, "GET", "/v1/admin/settings", nil)
	s := out["settings"].(map[string]any)
	if st != 200 || s["workers"].(map[string]any)["max"].(float64) != 4 || s["brain"].(map[string]any)["api_key_set"] != true {
		t.Fatalf("get: %d %v", st, out)
	}
	// Every bad field is reported at once and nothing is stored.
	st, out = e.call(t, "PUT", "/v1/admin/settings", map[string]any{
		"workers": map[string]any{"max": 0}, "brain": map[string]any{"kind": "openai", "api_key": "sk-new-secret-key"},
		"network": map[string]any{"allowed_hosts": []string{"no port here"}}, "limits": map[string]any{"bogus": 1}})
	fields := out["error"].(map[string]any)["fields"].(map[string]any)
	for _, k := range []string{"workers.max", "brain.kind", "network.allowed_hosts", "limits.bogus"} {
		if fields[k] == nil {
			t.Errorf("no error for %s: %v", k, fields)
		}
	}
	if st != 422 || !strings.Contains(fields["brain.kind"].(string), "claude") {
		t.Fatalf("bad put: %d %v", st, out)
	}
	var n int
	e.db.Read.QueryRow(`SELECT COUNT(*) FROM settings`).Scan(&n)
	if _, err := os.Stat(filepath.Join(e.data, settings.APIKeyFile)); n != 0 || err == nil {
		t.Fatalf("a refused update stored something (%d rows, key file %v)", n, err)
	}
	// A good update: the key goes to a 0600 file, never to the database or an answer.
	st, out = e.call(t, "PUT", "/v1/admin/settings", map[string]any{
		"workers": map[string]any{"max": 6, "reserved_interactive": 2}, "brain": map[string]any{"api_key": "sk-new-secret-key", "daily_token_budget": 1000}})
	raw, _ := json.Marshal(out)
	if st != 200 || bytes.Contains(raw, []byte("sk-new")) {
		t.Fatalf("put: %d %s", st, raw)
	}
	rr := fmt.Sprint(out["restart_required"])
	if !strings.Contains(rr, "workers.max") || strings.Contains(rr, "brain.api_key") || strings.Contains(rr, "daily_token_budget") {
		t.Fatalf("restart_required = %s", rr)
	}
	fi, err := os.Stat(filepath.Join(e.data, settings.APIKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	var dump strings.Builder
	rows, _ := e.db.Read.Query(`SELECT key, value FROM settings`)
	for rows.Next() {
		var k, v string
		rows.Scan(&k, &v)
		dump.WriteString(k + "=" + v + "\n")
	}
	rows.Close()
	if strings.Contains(dump.String(), "sk-") || !strings.Contains(dump.String(), "admin.workers.max=6") {
		t.Fatalf("settings rows:\n%s", dump.String())
	}
	if e.st.Effective().Brain.APIKey != "sk-new-secret-key" || e.st.DailyTokenBudget() != 1000 {
		t.Fatal("the new key and budget are not in effect")
	}

	ctx := context.Background()
	failed, _, _ := e.q.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: "talk", Prompt: "x", MaxAttempts: 1})
	e.q.ClaimID(ctx, failed.ID, "w")
	e.q.Start(ctx, failed.ID, "w")
	if _, _, err := e.q.Fail(ctx, failed.ID, "w", "agent error: /srv/internal/path exploded", false, nil); err != nil {
		t.Fatal(err)
	}
	st, out = e.call(t, "GET", "/v1/admin/health", nil)
	last := out["last_errors"].([]any)
	if st != 200 || out["version"] != "test" || len(last) != 1 || !strings.Contains(last[0].(map[string]any)["error"].(string), "exploded") ||
		out["queue"].(map[string]any)["failed_24h"].(float64) != 1 {
		t.Fatalf("health: %d %v", st, out)
	}
}

func TestTalkAccessAndTokenBudget(t *testing.T) {
	e := newPagesEnv(t, func(c *config.Config) {
		c.Access.Groups = []string{"staff"}
		c.Brain.DailyTokenBudget = 500
	})
	ctx := context.Background()
	event := func(id int, uid string, groups []string, allowedFlag bool) map[string]any {
		content, _ := json.Marshal(map[string]any{"message": "hello", "parameters": []any{}})
		b, _ := json.Marshal(map[string]any{
			"event": map[string]any{"type": "Create",
				"actor":  map[string]any{"type": "Person", "id": "users/" + uid, "name": uid},
				"object": map[string]any{"type": "Note", "id": strconv.Itoa(id), "name": "message", "content": string(content)},
				"target": map[string]any{"type": "Collection", "id": "room" + uid, "name": uid}},
			"sender":       map[string]any{"uid": uid, "display_name": uid, "timezone": "UTC", "groups": groups, "allowed": allowedFlag},
			"conversation": map[string]any{"token": "room" + uid, "type": 6, "user_count": 1, "private": true},
		})
		st, out := e.call(t, "POST", "/v1/talk/events", b)
		if st != 200 {
			t.Fatalf("event: %d %v", st, out)
		}
		return out
	}
	// The payload's allowed flag no longer decides: the groups and the settings do.
	if out := event(1, "zed", []string{"guests"}, true); out["task_id"] != nil {
		t.Fatalf("a user outside the allowed groups got a task: %v", out)
	}
	if out := event(2, "amy", []string{"staff"}, false); out["task_id"] == nil {
		t.Fatalf("a staff member was refused: %v", out)
	}
	// Over the daily budget: a clear answer instead of a task.
	e.usage.Record(ctx, usage.Entry{At: time.Now(), UserID: "amy", InputTokens: 400, OutputTokens: 150})
	out := event(3, "amy", []string{"staff"}, true)
	if out["task_id"] != nil || out["addressed"] != true {
		t.Fatalf("over budget: %v", out)
	}
	var notice string
	e.db.Read.QueryRow(`SELECT message FROM talk_outbox WHERE message LIKE '%budget%'`).Scan(&notice)
	if !strings.Contains(notice, "daily budget of 500") {
		t.Fatalf("budget notice = %q", notice)
	}
	// Raising the budget in the panel lets her go on at once.
	if st, out := e.call(t, "PUT", "/v1/admin/settings", map[string]any{"brain": map[string]any{"daily_token_budget": 0}}); st != 200 {
		t.Fatalf("raise budget: %d %v", st, out)
	}
	if out := event(4, "amy", []string{"staff"}, true); out["task_id"] == nil {
		t.Fatalf("after lifting the budget: %v", out)
	}
}

// The conversation the app makes for a user: recorded as where their notices go, welcomed
// once, and refused for anyone the access settings keep out.
func TestHomeConversation(t *testing.T) {
	e := newPagesEnv(t, func(c *config.Config) { c.Access = config.Access{Users: []string{"alice"}} })
	e.session(t, "alice", nil, false)
	e.session(t, "carol", nil, false)
	welcomes := func(token string) []string {
		rows, err := e.db.Read.Query(`SELECT message FROM talk_outbox WHERE token = ? ORDER BY id`, token)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var m string
			rows.Scan(&m)
			out = append(out, m)
		}
		return out
	}
	if _, ok, _ := convlog.PrivateConversation(context.Background(), e.db.Read, "alice"); ok {
		t.Fatal("alice has a private conversation before any was made")
	}
	st, out := e.call(t, "POST", "/v1/users/alice/conversation", map[string]any{"token": "abcd1234"})
	if st != 200 || out["welcomed"] != true || out["token"] != "abcd1234" {
		t.Fatalf("first call: %d %v", st, out)
	}
	got := welcomes("abcd1234")
	if len(got) != 1 || !strings.Contains(got[0], "Hello alice!") || !strings.Contains(got[0], "!help") {
		t.Fatalf("welcome: %q", got)
	}
	// Again, and after the app made a new one: recorded, never welcomed twice.
	for _, token := range []string{"abcd1234", "efgh5678"} {
		if st, out := e.call(t, "POST", "/v1/users/alice/conversation", map[string]any{"token": token}); st != 200 || out["welcomed"] != false {
			t.Fatalf("call with %s: %d %v", token, st, out)
		}
	}
	if n := len(welcomes("abcd1234")) + len(welcomes("efgh5678")); n != 1 {
		t.Fatalf("%d welcome(s), want 1", n)
	}
	if token, ok, err := convlog.PrivateConversation(context.Background(), e.db.Read, "alice"); err != nil || !ok || token != "efgh5678" {
		t.Fatalf("alice's private conversation = %q %t %v", token, ok, err)
	}
	for _, c := range []struct {
		uid, token string
		status     int
		code       string
	}{
		{"carol", "ijkl9012", 403, "not_allowed"},
		{"nobody", "ijkl9012", 404, "not_found"},
		{"alice", "not a token!", 400, "invalid_request"},
	} {
		if st, out := e.call(t, "POST", "/v1/users/"+url.PathEscape(c.uid)+"/conversation", map[string]any{"token": c.token}); st != c.status || errCode(out) != c.code {
			t.Errorf("%s with %q: %d %v, want %d %s", c.uid, c.token, st, out, c.status, c.code)
		}
	}
	if got := welcomes("ijkl9012"); len(got) != 0 {
		t.Fatalf("a refused user was welcomed: %q", got)
	}
	if _, ok, _ := convlog.PrivateConversation(context.Background(), e.db.Read, "carol"); ok {
		t.Fatal("a refused user got a private conversation recorded")
	}
}
