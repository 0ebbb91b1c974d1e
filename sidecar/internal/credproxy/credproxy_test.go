package credproxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/kv"
	"github.com/istota/istota/sidecar/internal/sandbox/sandboxtest"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/store"
)

// clientCommand makes the test binary act as "istota skill …", the way the real binary
// does inside the sandbox.
const clientCommand = "skill"

func TestMain(m *testing.M) {
	// The sandbox's init is the real istota-init (sandboxtest).
	if len(os.Args) > 1 && os.Args[1] == clientCommand {
		os.Exit(RunClient(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	code := m.Run()
	sandboxtest.Cleanup()
	os.Exit(code)
}

// upstream is an HTTP service a skill talks to with the user's credential.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string // Authorization headers seen
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.auth = append(u.auth, r.Header.Get("Authorization"))
		u.mu.Unlock()
		io.WriteString(w, "upstream says hello\n")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.auth)
}

// fixture is a Server over a real database with the built-in skills and a few test
// skills, and tokens for alice and bob.
type fixture struct {
	db       *store.DB
	srv      *Server
	audit    *audit.Log
	creds    *skills.Credentials
	up       *upstream
	aliceTok string
	bobTok   string
	extraTok string // a credential alice has that no skill declares
	// slowEntered receives a value each time the slow skill starts.
	slowEntered chan struct{}
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "istota.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f := &fixture{db: db, up: newUpstream(t),
		aliceTok:    "tok-alice-" + randomHex(t, 12),
		bobTok:      "tok-bob-" + randomHex(t, 12),
		extraTok:    "tok-extra-" + randomHex(t, 12),
		slowEntered: make(chan struct{}, 16),
	}
	creds, err := skills.NewCredentials(db, bytes.Repeat([]byte{7}, skills.CredentialKeySize), nil)
	if err != nil {
		t.Fatal(err)
	}
	f.creds = creds
	for _, c := range []struct{ user, name, value string }{
		{"alice", "upstream-token", f.aliceTok},
		{"alice", "unrelated", f.extraTok},
		{"bob", "upstream-token", f.bobTok},
	} {
		if err := f.creds.Set(ctx, c.user, c.name, c.value); err != nil {
			t.Fatal(err)
		}
	}
	reg := skills.NewRegistry()
	if err := skills.RegisterBuiltins(reg, kv.New(db, nil), f.creds); err != nil {
		t.Fatal(err)
	}
	tokenEnv := []skills.EnvVar{
		{Name: "UPSTREAM_TOKEN", Sensitive: true, Credential: "upstream-token"},
		{Name: "UPSTREAM_URL"},
		{Name: "UPSTREAM_USER", Credential: "upstream-user"}, // optional, nobody has it
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// upstream calls the service with the user's token and prints what it answered and
	// which variables it was given.
	must(reg.Register(skills.Skill{
		Manifest: skills.Manifest{Name: "upstream", Summary: "call the upstream", Env: tokenEnv},
		Run: func(ctx context.Context, inv skills.Invocation) skills.Result {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, inv.Env["UPSTREAM_URL"], nil)
			if err != nil {
				return skills.Internal("upstream", err)
			}
			req.Header.Set("Authorization", "Bearer "+inv.Env["UPSTREAM_TOKEN"])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return skills.Internal("upstream", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			keys := make([]string, 0, len(inv.Env))
			for k := range inv.Env {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			return skills.Result{Stdout: fmt.Appendf(body, "env=%s\nargs=%s\nstdin=%s\n", strings.Join(keys, ","), strings.Join(inv.Args, "|"), inv.Stdin)}
		},
	}))
	// leaky prints its token, as a careless skill relaying an error page might.
	must(reg.Register(skills.Skill{
		Manifest: skills.Manifest{Name: "leaky", Summary: "prints its secret", Env: tokenEnv[:1]},
		Run: func(_ context.Context, inv skills.Invocation) skills.Result {
			tok := inv.Env["UPSTREAM_TOKEN"]
			return skills.Result{ExitCode: 3, Stdout: []byte("token is " + tok + "\n"), Stderr: []byte("denied for " + tok + "\n")}
		},
	}))
	must(reg.Register(skills.Skill{
		Manifest: skills.Manifest{Name: "admin-tool", Summary: "for admins", AdminOnly: true},
		Run: func(context.Context, skills.Invocation) skills.Result {
			return skills.Result{Stdout: []byte("admin work done\n")}
		},
	}))
	must(reg.Register(skills.Skill{
		Manifest: skills.Manifest{Name: "slow", Summary: "waits for its deadline"},
		Run: func(ctx context.Context, _ skills.Invocation) skills.Result {
			select {
			case f.slowEntered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return skills.Result{ExitCode: 1}
		},
	}))
	must(reg.Register(skills.Skill{
		Manifest: skills.Manifest{Name: "big", Summary: "prints 100 bytes"},
		Run: func(context.Context, skills.Invocation) skills.Result {
			return skills.Result{Stdout: bytes.Repeat([]byte("o"), 100), Stderr: bytes.Repeat([]byte("e"), 100)}
		},
	}))
	must(reg.Register(skills.Skill{
		Manifest: skills.Manifest{Name: "crash", Summary: "panics"},
		Run:      func(context.Context, skills.Invocation) skills.Result { panic("boom") },
	}))
	opts.Settings = func(_, name string) (string, bool) {
		if name == "UPSTREAM_URL" {
			return f.up.URL, true
		}
		return "", false
	}
	f.audit = audit.New(db, testLogger(t), nil)
	f.srv = New(reg, f.creds, f.audit, testLogger(t), opts)
	return f
}

// serve starts Serve for who on a fresh socket and returns its path. Cleanup stops it
// and checks that Serve returned nil.
func (f *fixture) serve(t *testing.T, who Identity) string {
	t.Helper()
	// Unix socket paths are short (108 bytes); t.TempDir can be longer.
	dir, err := os.MkdirTemp("", "credproxy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "skills.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.srv.Serve(ctx, ln, who) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v", err)
		}
		ln.Close()
	})
	return sock
}

type clientResult struct {
	stdout, stderr string
	code           int
}

func runClient(t *testing.T, sock string, stdin string, args ...string) clientResult {
	t.Helper()
	t.Setenv(SocketEnv, sock)
	var out, errb bytes.Buffer
	code := RunClient(args, strings.NewReader(stdin), &out, &errb)
	return clientResult{out.String(), errb.String(), code}
}

func (f *fixture) lastAudit(t *testing.T, user string) audit.Entry {
	t.Helper()
	es, err := f.audit.Recent(context.Background(), user, false, 1)
	if err != nil || len(es) != 1 {
		t.Fatalf("audit: %+v, %v", es, err)
	}
	return es[0]
}

func TestSkillGetsOnlyItsUsersDeclaredCredentials(t *testing.T) {
	f := newFixture(t, Options{})
	aliceSock := f.serve(t, Identity{UserID: "alice", TaskID: 1})
	bobSock := f.serve(t, Identity{UserID: "bob", TaskID: 2})

	res := runClient(t, aliceSock, "some input", "upstream", "a b", "c")
	if res.code != 0 {
		t.Fatalf("alice: exit %d, stderr %q", res.code, res.stderr)
	}
	want := "upstream says hello\nenv=UPSTREAM_TOKEN,UPSTREAM_URL\nargs=a b|c\nstdin=some input\n"
	if res.stdout != want {
		t.Errorf("alice's stdout = %q, want %q", res.stdout, want)
	}
	res2 := runClient(t, bobSock, "", "upstream")
	if res2.code != 0 {
		t.Fatalf("bob: exit %d, stderr %q", res2.code, res2.stderr)
	}
	// Each call used its own socket's user's token, and nothing else.
	if got := f.up.seen(); !slices.Equal(got, []string{"Bearer " + f.aliceTok, "Bearer " + f.bobTok}) {
		t.Errorf("upstream saw %q", got)
	}
	for _, out := range []string{res.stdout, res.stderr, res2.stdout, res2.stderr} {
		for _, secret := range []string{f.aliceTok, f.bobTok, f.extraTok} {
			if strings.Contains(out, secret) {
				t.Errorf("the client printed a credential: %q", out)
			}
		}
	}
	e := f.lastAudit(t, "alice")
	if !e.Allowed || e.Action != "upstream" || e.TaskID != 1 || !strings.Contains(e.Detail, "credentials=upstream-token") || strings.Contains(e.Detail, f.aliceTok) {
		t.Errorf("alice's audit entry = %+v", e)
	}
}

func TestIdentityIsTheSockets(t *testing.T) {
	f := newFixture(t, Options{})
	sock := f.serve(t, Identity{UserID: "alice", TaskID: 41, IsAdmin: false})
	res := runClient(t, sock, "", "whoami")
	if res.code != 0 || res.stdout != "user_id=alice\ntask_id=41\nadmin=false\n" {
		t.Fatalf("whoami = %+v", res)
	}
	// A request that names another user is not a valid request at all.
	status, body := rawPost(t, sock, "/v1/skills/whoami", `{"args":[],"user_id":"bob"}`)
	if status != http.StatusBadRequest || !strings.Contains(body, `"bad_request"`) {
		t.Errorf("request with a user id: %d %s", status, body)
	}
	if e := f.lastAudit(t, "alice"); e.Allowed || e.Reason != audit.ReasonBadRequest {
		t.Errorf("audit = %+v", e)
	}
	if es, _ := f.audit.Recent(context.Background(), "bob", false, 10); len(es) != 0 {
		t.Errorf("bob has audit entries: %+v", es)
	}
}

func TestRefusals(t *testing.T) {
	f := newFixture(t, Options{})
	carol := f.serve(t, Identity{UserID: "carol", TaskID: 3})                   // no credentials
	alice := f.serve(t, Identity{UserID: "alice", TaskID: 1})                   // not an admin
	admin := f.serve(t, Identity{UserID: "root-ish", TaskID: 4, IsAdmin: true}) // an admin without credentials
	for _, tc := range []struct {
		name   string
		sock   string
		user   string
		args   []string
		reason string
		msg    string
	}{
		{"unknown skill", alice, "alice", []string{"email", "send"}, audit.ReasonUnknownSkill, `no skill "email"`},
		{"invalid skill name", alice, "alice", []string{"../../etc"}, audit.ReasonUnknownSkill, "no skill"},
		{"admin only", alice, "alice", []string{"admin-tool"}, audit.ReasonNotAuthorized, "admin-tool is only available to administrators"},
		{"credential missing", carol, "carol", []string{"upstream"}, audit.ReasonCredentialNotPresent, `upstream needs the credential "upstream-token"`},
		{"credential missing for an admin too", admin, "root-ish", []string{"leaky"}, audit.ReasonCredentialNotPresent, "upstream-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runClient(t, tc.sock, "", tc.args...)
			prefix := fmt.Sprintf("istota skill %s: refused (%s): ", tc.args[0], tc.reason)
			if res.code != ExitRefused || !strings.HasPrefix(res.stderr, prefix) || !strings.Contains(res.stderr, tc.msg) || res.stdout != "" {
				t.Fatalf("got %+v, want exit %d and stderr starting %q containing %q", res, ExitRefused, prefix, tc.msg)
			}
			e := f.lastAudit(t, tc.user)
			if e.Allowed || e.Reason != tc.reason || e.Component != "credproxy" {
				t.Errorf("audit entry = %+v", e)
			}
		})
	}
	if len(f.up.seen()) != 0 {
		t.Errorf("a refused call reached the upstream: %q", f.up.seen())
	}
	if res := runClient(t, admin, "", "admin-tool"); res.code != 0 || res.stdout != "admin work done\n" {
		t.Errorf("admin-tool for an admin: %+v", res)
	}
}

func TestOversizedRequests(t *testing.T) {
	f := newFixture(t, Options{MaxRequestBytes: 64 << 10})
	sock := f.serve(t, Identity{UserID: "alice", TaskID: 1})
	big := `{"args":["` + strings.Repeat("a", 70<<10) + `"]}`
	status, body := rawPost(t, sock, "/v1/skills/whoami", big)
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, `"bad_request"`) {
		t.Errorf("oversized body: %d %s", status, body)
	}
	if e := f.lastAudit(t, "alice"); e.Reason != audit.ReasonBadRequest || e.Detail != "request too large" {
		t.Errorf("audit = %+v", e)
	}

	f2 := newFixture(t, Options{})
	sock2 := f2.serve(t, Identity{UserID: "alice", TaskID: 1})
	text, _ := json.Marshal(strings.Repeat("x", skills.MaxStdin+1))
	status, body = rawPost(t, sock2, "/v1/skills/kv", `{"args":["set","n","k"],"stdin_text":`+string(text)+`}`)
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "standard input is larger") {
		t.Errorf("oversized stdin: %d %s", status, body)
	}
	if e := f2.lastAudit(t, "alice"); e.Reason != audit.ReasonBadRequest || e.Detail != "stdin too large" {
		t.Errorf("audit = %+v", e)
	}
	// The client refuses to send such input in the first place.
	res := runClient(t, sock2, strings.Repeat("x", skills.MaxStdin+1), "kv", "set", "n", "k")
	if res.code != ExitUsage || !strings.Contains(res.stderr, "standard input is larger") {
		t.Errorf("client with oversized stdin: %+v", res)
	}
	for _, tc := range []struct{ name, path, body string }{
		{"malformed JSON", "/v1/skills/whoami", `{"args":`},
		{"trailing data", "/v1/skills/whoami", `{"args":[]} {}`},
		{"wrong endpoint", "/v1/other", `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := rawPost(t, sock2, tc.path, tc.body)
			if status/100 != 4 || !strings.Contains(body, `"bad_request"`) {
				t.Errorf("%d %s", status, body)
			}
		})
	}
}

func TestOutputIsScrubbedAndBounded(t *testing.T) {
	f := newFixture(t, Options{MaxOutputBytes: 40})
	sock := f.serve(t, Identity{UserID: "alice", TaskID: 1})
	res := runClient(t, sock, "", "leaky")
	if res.code != 3 || res.stdout != "token is [redacted]\n" || res.stderr != "denied for [redacted]\n" {
		t.Fatalf("leaky = %+v", res)
	}
	res = runClient(t, sock, "", "big")
	wantErr := strings.Repeat("e", 40) + "\nistota skill big: standard output cut at 40 bytes\n\nistota skill big: standard error cut at 40 bytes\n"
	if res.code != 0 || res.stdout != strings.Repeat("o", 40) || res.stderr != wantErr {
		t.Fatalf("big = %+v", res)
	}
}

func TestTimeoutPanicAndKV(t *testing.T) {
	f := newFixture(t, Options{Timeout: 200 * time.Millisecond})
	sock := f.serve(t, Identity{UserID: "alice", TaskID: 1})
	if res := runClient(t, sock, "", "slow"); res.code != 124 || !strings.Contains(res.stderr, "timed out") {
		t.Errorf("slow = %+v", res)
	}
	if res := runClient(t, sock, "", "crash"); res.code != 1 || !strings.Contains(res.stderr, "unavailable") || strings.Contains(res.stderr, "boom") {
		t.Errorf("crash = %+v", res)
	}
	if res := runClient(t, sock, "remember this\n", "kv", "set", "notes", "k"); res.code != 0 {
		t.Fatalf("kv set = %+v", res)
	}
	if res := runClient(t, sock, "", "kv", "get", "notes", "k"); res.code != 0 || res.stdout != "remember this\n" {
		t.Errorf("kv get = %+v", res)
	}
	if res := runClient(t, sock, "", "kv", "get", "notes", "missing"); res.code != 1 || !strings.Contains(res.stderr, "no such key") {
		t.Errorf("kv get missing = %+v", res)
	}
}

func TestClientErrors(t *testing.T) {
	if res := runClient(t, "/nonexistent/skills.sock", "", "whoami"); res.code != ExitUnavailable || !strings.Contains(res.stderr, "not reachable") {
		t.Errorf("no socket: %+v", res)
	}
	if res := runClient(t, "/nonexistent/skills.sock", ""); res.code != ExitUsage || !strings.Contains(res.stderr, "usage: istota skill <name>") {
		t.Errorf("no name: %+v", res)
	}
	// A server that is not the proxy.
	dir, err := os.MkdirTemp("", "credproxy")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "teapot", http.StatusTeapot)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	if res := runClient(t, ln.Addr().String(), "", "whoami"); res.code != ExitUnavailable || !strings.Contains(res.stderr, "418") {
		t.Errorf("foreign server: %+v", res)
	}
}

func TestServeStopsWithCallsInFlight(t *testing.T) {
	f := newFixture(t, Options{Timeout: time.Hour})
	dir, err := os.MkdirTemp("", "credproxy")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.srv.Serve(ctx, ln, Identity{UserID: "alice", TaskID: 9}) }()

	// A call to "slow" blocks until the task ends; ending it must end the call and Serve.
	t.Setenv(SocketEnv, sock)
	clientDone := make(chan int, 1)
	var out, errb bytes.Buffer
	go func() { clientDone <- RunClient([]string{"slow"}, nil, &out, &errb) }()
	select {
	case <-f.slowEntered:
	case <-time.After(time.Minute):
		t.Fatal("the slow skill was never called")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve = %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve did not return after its context ended")
	}
	if code := <-clientDone; code == 0 {
		t.Errorf("the interrupted call exited 0 (stderr %q)", errb.String())
	}
}

// rawPost sends body to path over the socket and returns the status and body.
func rawPost(t *testing.T, sock, path, body string) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	defer c.CloseIdleConnections()
	resp, err := c.Post("http://istota"+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
