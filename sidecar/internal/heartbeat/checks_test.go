package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/store"
)

func TestFileWatch(t *testing.T) {
	start := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	files := t.TempDir()
	h := newHarness(t, start, Options{Files: LocalFiles{Root: func(uid string) string { return filepath.Join(files, uid) }}})
	h.src.setUsers(User{ID: "alice", Timezone: "UTC"})
	h.privateConversation("alice", "privdm1")
	h.src.write(t, "alice", ConfigFile, heartbeatFile(
		check("name", `"Plan"`, "kind", `"file-watch"`, "path", `"Documents/plan.md"`, "interval", `"1m"`, "cooldown", `"10m"`),
		check("name", `"Reports"`, "kind", `"file-watch"`, "path", `"Reports"`, "interval", `"1m"`, "cooldown", `"0s"`),
	))
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(files, "alice", rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("Documents/plan.md", "v1")
	if err := os.MkdirAll(filepath.Join(files, "alice", "Reports"), 0o700); err != nil {
		t.Fatal(err)
	}
	step := func() { h.clock.Set(h.clock.Now().Add(time.Minute)); h.runOnce() }
	texts := func() []string {
		var out []string
		for _, m := range h.messages() {
			out = append(out, m.Text)
		}
		return out
	}

	h.runOnce() // baseline
	if st := h.state("alice", "Plan"); st.Status != StatusOK || len(h.messages()) != 0 {
		t.Fatalf("first run: %+v, messages %v; want a silent baseline", st, texts())
	}
	step()
	if len(h.messages()) != 0 {
		t.Fatalf("unchanged files alerted: %v", texts())
	}

	write("Documents/plan.md", "v2")
	step()
	if got := texts(); len(got) != 1 || !strings.Contains(got[0], "Documents/plan.md was changed") {
		t.Fatalf("after an edit: %v", got)
	}
	step()
	if st := h.state("alice", "Plan"); st.Status != StatusOK || len(h.messages()) != 1 {
		t.Fatalf("the told version is the new baseline: %+v, %v", st, texts())
	}

	// An edit inside the cooldown is recorded, and told once the cooldown is over.
	write("Documents/plan.md", "v3")
	step()
	if st := h.state("alice", "Plan"); st.Status != StatusAlert || len(h.messages()) != 1 {
		t.Fatalf("edit in cooldown: %+v, %v", st, texts())
	}
	h.stepTo(start.Add(12 * time.Minute))
	if got := texts(); len(got) != 2 || !strings.Contains(got[1], "plan.md was changed") {
		t.Fatalf("edit in cooldown is told after it: %v", got)
	}

	// Deleted, then created again.
	if err := os.Remove(filepath.Join(files, "alice", "Documents/plan.md")); err != nil {
		t.Fatal(err)
	}
	h.stepTo(start.Add(25 * time.Minute))
	write("Documents/plan.md", "v4")
	h.stepTo(start.Add(40 * time.Minute))
	got := texts()
	if len(got) != 4 || !strings.Contains(got[2], "was deleted") || !strings.Contains(got[3], "was created") {
		t.Fatalf("delete and create: %v", got)
	}

	// Something new in a watched folder.
	write("Reports/q3.pdf", "pdf")
	step()
	got = texts()
	if len(got) != 5 || !strings.Contains(got[4], "something in folder Reports changed") {
		t.Fatalf("folder change: %v", got)
	}
}

func TestLocalFilesStaysInsideTheUsersFolder(t *testing.T) {
	base := t.TempDir()
	lf := LocalFiles{Root: func(uid string) string { return filepath.Join(base, uid) }}
	if err := os.MkdirAll(filepath.Join(base, "alice"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "bob-secret.txt"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "bob-secret.txt"), filepath.Join(base, "alice", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(base, filepath.Join(base, "alice", "up")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path    string
		wantErr bool
	}{
		{"../bob-secret.txt", true},
		{"/etc/passwd", true},
		{"up/bob-secret.txt", true}, // through a link to a folder outside
		{"link", false},             // the link itself is looked at, not followed
		{"missing.md", false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			st, err := lf.Stat(context.Background(), "alice", tt.path)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Stat(%q) = %+v, %v; want error %v", tt.path, st, err, tt.wantErr)
			}
			if st.Version != "" && strings.Contains(st.Version, "secret") {
				t.Fatalf("version leaks content: %q", st.Version)
			}
		})
	}
	st, err := lf.Stat(context.Background(), "alice", "link")
	if err != nil || !st.Exists || st.Version == "" || st.IsDir {
		t.Fatalf("a symlink is watched as a link: %+v, %v", st, err)
	}
}

// publicResolver answers every name with the given addresses, as a DNS server under an
// attacker's control may.
type publicResolver map[string][]netip.Addr

func (p publicResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := p[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestURLHealth(t *testing.T) {
	status := http.StatusOK
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		if status == http.StatusFound {
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", status)
			return
		}
		w.WriteHeader(status)
		fmt.Fprintln(w, "hello")
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	tests := []struct {
		name         string
		url          string
		allow        []string
		resolver     Resolver
		status       int
		wantStatus   string
		wantContains string
		wantHit      bool
	}{
		{name: "loopback address refused", url: srv.URL + "/", wantStatus: StatusError, wantContains: "loopback"},
		{name: "localhost refused", url: "http://localhost:" + port + "/", wantStatus: StatusError, wantContains: "loopback"},
		{name: "a public name resolving to loopback refused", url: "http://status.example.org:" + port + "/",
			resolver:   publicResolver{"status.example.org": {netip.MustParseAddr("127.0.0.1")}},
			wantStatus: StatusError, wantContains: "status.example.org resolves to 127.0.0.1"},
		{name: "one private address among public ones refused", url: "http://mixed.example.org:" + port + "/",
			resolver:   publicResolver{"mixed.example.org": {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("10.0.0.5")}},
			wantStatus: StatusError, wantContains: "private"},
		{name: "metadata address refused", url: "http://169.254.169.254/latest/", wantStatus: StatusError, wantContains: "link-local"},
		{name: "NAT64 form of the metadata address refused", url: "http://[64:ff9b::a9fe:a9fe]/", wantStatus: StatusError, wantContains: "link-local"},
		{name: "allowed by the admin", url: srv.URL + "/", allow: []string{"127.0.0.1:" + port},
			wantStatus: StatusOK, wantContains: "200 OK", wantHit: true},
		{name: "allowed name", url: "http://intranet.example.org:" + port + "/", allow: []string{"Intranet.example.org:" + port},
			resolver:   publicResolver{"intranet.example.org": {netip.MustParseAddr("127.0.0.1")}},
			wantStatus: StatusOK, wantHit: true},
		{name: "allowing another port does not allow this one", url: srv.URL + "/", allow: []string{"127.0.0.1:1"},
			wantStatus: StatusError},
		{name: "server error alerts", url: srv.URL + "/", allow: []string{"127.0.0.1:" + port}, status: 503,
			wantStatus: StatusAlert, wantContains: "503 Service Unavailable", wantHit: true},
		{name: "a redirect is an answer and is not followed", url: srv.URL + "/", allow: []string{"127.0.0.1:" + port},
			status: http.StatusFound, wantStatus: StatusOK, wantContains: "302", wantHit: true},
		{name: "nothing listening alerts", url: "http://" + closedAddr + "/", allow: []string{closedAddr},
			wantStatus: StatusAlert, wantContains: "could not be reached"},
		{name: "unknown name alerts", url: "http://gone.example.org/", resolver: publicResolver{},
			wantStatus: StatusAlert, wantContains: "could not be reached"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, hits = http.StatusOK, 0
			if tt.status != 0 {
				status = tt.status
			}
			u := newURLChecker(Options{AllowPrivate: tt.allow, Resolver: tt.resolver, URLTimeout: 10 * time.Second}, discard())
			out := u.check(context.Background(), tt.url)
			if out.status != tt.wantStatus || !strings.Contains(out.message, tt.wantContains) {
				t.Fatalf("check(%s) = %s %q; want %s containing %q", tt.url, out.status, out.message, tt.wantStatus, tt.wantContains)
			}
			if (hits > 0) != tt.wantHit {
				t.Fatalf("server hits %d, want reached=%v", hits, tt.wantHit)
			}
		})
	}
}

func TestURLHealthRefusesThisHostsOwnAddress(t *testing.T) {
	own := netip.MustParseAddr("203.0.113.9")
	u := newURLChecker(Options{
		Resolver:  publicResolver{"me.example.org": {own}},
		HostAddrs: func() ([]netip.Addr, error) { return []netip.Addr{own}, nil },
	}, discard())
	out := u.check(context.Background(), "https://me.example.org/")
	if out.status != StatusError || !strings.Contains(out.message, "an address of this server") {
		t.Fatalf("got %s %q", out.status, out.message)
	}
}

func TestURLHealthCheckThroughTheRunner(t *testing.T) {
	up := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	t.Cleanup(srv.Close)
	start := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	h := newHarness(t, start, Options{AllowPrivate: []string{srv.Listener.Addr().String()}})
	h.src.setUsers(User{ID: "alice"})
	h.privateConversation("alice", "privdm1")
	h.src.write(t, "alice", ConfigFile, heartbeatFile(
		check("name", `"Site"`, "kind", `"url-health"`, "url", `"`+srv.URL+`/health"`, "interval", `"5m"`, "cooldown", `"1h"`),
		check("name", `"Forbidden"`, "kind", `"url-health"`, "url", `"http://127.0.0.2:9/"`, "interval", `"5m"`),
	))
	h.runOnce()
	up = false
	h.stepTo(start.Add(90 * time.Minute))
	up = true
	h.stepTo(start.Add(100 * time.Minute))
	var got []string
	for _, m := range h.messages() {
		got = append(got, m.At.Format("15:04")+" "+m.Text[:strings.Index(m.Text, ":")])
	}
	want := []string{"09:05 ⚠️ **Site** (url-health)", "10:05 ⚠️ **Site** (url-health)", "10:35 ✅ **Site** (url-health) is fine again"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("messages\n%v\nwant\n%v", got, want)
	}
	if st := h.state("alice", "Forbidden"); st.Status != StatusError || !strings.Contains(st.Message, "network.allow_private") {
		t.Fatalf("a refused address is an error, not an alert: %+v", st)
	}
}

func TestTaskDeadline(t *testing.T) {
	// 23:30 UTC on 29 November is already 30 November in Berlin.
	start := time.Date(2026, 11, 29, 23, 30, 0, 0, time.UTC)
	h := newHarness(t, start, Options{})
	h.src.setUsers(User{ID: "alice", Timezone: "Europe/Berlin"}, User{ID: "bob", Timezone: "UTC"})
	h.privateConversation("alice", "privdm1")
	h.privateConversation("bob", "privdm2")
	tasks := `# Tasks
- [ ] Send the invoice due:2026-11-30
- [~] File the tax return due:2026-11-20
- [x] Book flights due:2026-11-01
- [!] Renew passport due:2026-11-02
- [ ] Plan the party due:2026-12-24
- [ ] No date here
- [ ] Nonsense date due:2026-13-45
  - [ ] an indented note due:2026-11-01
<!-- - [ ] commented out due:2026-11-01 -->
`
	cfg := heartbeatFile(check("name", `"Deadlines"`, "kind", `"task-deadline"`, "interval", `"1h"`, "cooldown", `"0s"`))
	for _, uid := range []string{"alice", "bob"} {
		h.src.write(t, uid, TasksFile, tasks)
		h.src.write(t, uid, ConfigFile, cfg)
	}
	h.runOnce()
	ms := h.messages()
	if len(ms) != 2 {
		t.Fatalf("messages %+v", ms)
	}
	alice, bob := ms[0].Text, ms[1].Text
	if ms[0].Token != "privdm1" {
		alice, bob = bob, alice
	}
	for _, want := range []string{"2 task(s)", "due today (line 2): Send the invoice", "overdue since Fri 20 Nov 2026 (line 3): File the tax return"} {
		if !strings.Contains(alice, want) {
			t.Errorf("alice's alert lacks %q:\n%s", want, alice)
		}
	}
	for _, unwanted := range []string{"Book flights", "Renew passport", "party", "indented", "commented", "Nonsense"} {
		if strings.Contains(alice, unwanted) {
			t.Errorf("alice's alert names %q:\n%s", unwanted, alice)
		}
	}
	if !strings.Contains(bob, "1 task(s)") || strings.Contains(bob, "invoice") {
		t.Errorf("in UTC the invoice is not due yet:\n%s", bob)
	}

	// Told once: the next run with the same tasks is silent; a new due task is told.
	h.clock.Set(start.Add(time.Hour))
	h.runOnce()
	if n := len(h.messages()); n != 3 { // bob's invoice became due at midnight UTC
		t.Fatalf("after an hour: %d messages, want 3: %+v", n, h.messages())
	}
	h.src.write(t, "alice", TasksFile, tasks+"- [ ] Call the bank due:2026-11-29\n")
	h.clock.Set(start.Add(2 * time.Hour))
	h.runOnce()
	ms = h.messages()
	if len(ms) != 4 || !strings.Contains(ms[3].Text, "Call the bank") {
		t.Fatalf("a new due task: %+v", ms)
	}
}

// fakeProbe reports what its fields say.
type fakeProbe struct{ agentErr, sandboxErr error }

func (p fakeProbe) AgentBinary(context.Context) (string, error) { return "claude 2.0", p.agentErr }
func (p fakeProbe) Sandbox(context.Context) (string, error)     { return "bwrap works", p.sandboxErr }

func TestSelfCheck(t *testing.T) {
	tests := []struct {
		name       string
		probe      fakeProbe
		failed, ok int
		wantStatus string
		want       string
	}{
		{name: "healthy", ok: 10, failed: 2, wantStatus: StatusOK, want: "✓ recent tasks: 2 of the last 12 failed"},
		{name: "too few tasks to judge", failed: 3, wantStatus: StatusOK, want: "3 of the last 3 failed"},
		{name: "failure rate", ok: 2, failed: 30, wantStatus: StatusAlert, want: "✗ recent tasks: 20 of your last 20 tasks failed"},
		{name: "sandbox", probe: fakeProbe{sandboxErr: errors.New("user namespaces are disabled")}, wantStatus: StatusAlert,
			want: "✗ sandbox: user namespaces are disabled"},
		{name: "agent", probe: fakeProbe{agentErr: errors.New("claude not found")}, wantStatus: StatusAlert, want: "✗ agent: claude not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC), Options{Probe: tt.probe})
			now := store.FormatTime(h.clock.Now())
			// Failures first, then successes would hide them; interleave newest-last so
			// that the window of 20 sees the newest tasks.
			for i := 0; i < tt.ok; i++ {
				h.exec(`INSERT INTO tasks (user_id, source, status, prompt, next_attempt_at, created_at) VALUES ('alice', 'talk', 'completed', 'x', ?, ?)`, now, now)
			}
			for i := 0; i < tt.failed; i++ {
				h.exec(`INSERT INTO tasks (user_id, source, status, prompt, next_attempt_at, created_at) VALUES ('alice', 'talk', 'failed', 'x', ?, ?)`, now, now)
			}
			h.exec(`INSERT INTO tasks (user_id, source, status, prompt, next_attempt_at, created_at) VALUES ('alice', 'talk', 'cancelled', 'x', ?, ?)`, now, now)
			h.exec(`INSERT INTO tasks (user_id, source, status, prompt, next_attempt_at, created_at) VALUES ('bob', 'talk', 'failed', 'x', ?, ?)`, now, now)
			out := h.r.selfCheck(context.Background(), User{ID: "alice"})
			if out.status != tt.wantStatus || !strings.Contains(out.message, tt.want) {
				t.Fatalf("got %s:\n%s\nwant %s containing %q", out.status, out.message, tt.wantStatus, tt.want)
			}
			if !strings.Contains(out.message, "✓ database") {
				t.Fatalf("database not reported:\n%s", out.message)
			}
		})
	}
}

func TestShellCommandIsRefusedOnceTheUserIsNoLongerAdmin(t *testing.T) {
	start := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	h := newHarness(t, start, Options{})
	h.src.setUsers(User{ID: "root", IsAdmin: true})
	h.privateConversation("root", "privdm1")
	h.src.write(t, "root", ConfigFile, heartbeatFile(check("name", `"Backup"`, "kind", `"shell-command"`,
		"command", `"echo backup ok"`, "interval", `"1m"`)))
	h.runOnce()
	if st := h.state("root", "Backup"); st.Status != StatusOK || !strings.Contains(st.Message, "backup ok") || h.shell.calls.Load() != 1 {
		t.Fatalf("admin's command: %+v, calls %d", st, h.shell.calls.Load())
	}
	// The admin loses the role; the file is unchanged. The parser now refuses the only
	// check, so the last good set stays stored, and the run refuses it again.
	h.src.setUsers(User{ID: "root", IsAdmin: false})
	h.clock.Set(start.Add(time.Minute))
	h.runOnce()
	st := h.state("root", "Backup")
	if st.Status != StatusError || !strings.Contains(st.Message, "administrators only") {
		t.Fatalf("after losing admin: %+v", st)
	}
	if n := h.shell.calls.Load(); n != 1 {
		t.Fatalf("the command ran %d times, want only while admin", n)
	}
	fs, err := h.r.FileStatus(context.Background(), "root")
	if err != nil || !fs.KeptLastGood || len(fs.Problems) != 1 || !strings.Contains(fs.Problems[0].Message, "administrators only") {
		t.Fatalf("file status %+v, %v", fs, err)
	}
	ms := h.messages()
	if len(ms) != 1 || !strings.Contains(ms[0].Text, "HEARTBEAT.md has problems") || !strings.Contains(ms[0].Text, "line 6: kind:") {
		t.Fatalf("the user is told about the problem once: %+v", ms)
	}
}

func TestShellCommandTimeout(t *testing.T) {
	h := newHarness(t, time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC), Options{CheckTimeout: 500 * time.Millisecond})
	h.src.setUsers(User{ID: "root", IsAdmin: true})
	h.src.write(t, "root", ConfigFile, heartbeatFile(check("name", `"Slow"`, "kind", `"shell-command"`, "command", `"sleep 30"`)))
	h.runOnce()
	if st := h.state("root", "Slow"); st.Status != StatusAlert || !strings.Contains(st.Message, "did not finish") {
		t.Fatalf("%+v", st)
	}
}

func TestBrokenFileKeepsTheLastGoodChecksAndTellsOnce(t *testing.T) {
	start := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	h := newHarness(t, start, Options{})
	h.src.setUsers(User{ID: "alice"})
	h.src.write(t, "alice", ConfigFile, heartbeatFile(check("name", `"Deadlines"`, "kind", `"task-deadline"`, "interval", `"1m"`)))
	h.runOnce()
	h.src.write(t, "alice", ConfigFile, "```toml\n[[checks]]\nname = \"Deadlines\nkind = 3\n```\n")
	h.clock.Set(start.Add(time.Minute))
	h.runOnce()
	if st := h.state("alice", "Deadlines"); !st.LastRunAt.Equal(start.Add(time.Minute)) {
		t.Fatalf("the last good check stopped running: %+v", st)
	}
	states, problems, err := h.r.Status(context.Background(), "alice")
	if err != nil || len(states) != 1 || len(problems) == 0 {
		t.Fatalf("status %+v, problems %v, err %v", states, problems, err)
	}
	if n := len(h.messages()); n != 0 {
		t.Fatalf("told without a private conversation: %d", n)
	}
	// Once the user writes to the bot in private, the problems are told, once.
	h.privateConversation("alice", "privdm1")
	h.stepTo(start.Add(5 * time.Minute))
	ms := h.messages()
	if len(ms) != 1 || !strings.Contains(ms[0].Text, "previous checks keep running") || !strings.Contains(ms[0].Text, "line 3") {
		t.Fatalf("problems told %+v", ms)
	}
	// Fixed with another check: the old one is gone, the new one runs.
	h.src.write(t, "alice", ConfigFile, heartbeatFile(check("name", `"Self"`, "kind", `"self-check"`)))
	h.stepTo(start.Add(6 * time.Minute))
	states, problems, err = h.r.Status(context.Background(), "alice")
	if err != nil || len(states) != 1 || states[0].Name != "Self" || states[0].Status != StatusOK || len(problems) != 0 {
		t.Fatalf("after the fix: %+v, %v, %v", states, problems, err)
	}
	// A missing file removes every check.
	if err := os.Remove(filepath.Join(h.src.root, "alice", ConfigFile)); err != nil {
		t.Fatal(err)
	}
	h.stepTo(start.Add(7 * time.Minute))
	if states, _, _ := h.r.Status(context.Background(), "alice"); len(states) != 0 {
		t.Fatalf("checks of a deleted file: %+v", states)
	}
}

func TestRequestRun(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	start := time.Date(2026, 6, 1, 23, 0, 0, 0, berlin) // inside quiet hours
	h := newHarness(t, start, Options{})
	h.src.setUsers(User{ID: "root", Timezone: "Europe/Berlin", IsAdmin: true}, User{ID: "bob"})
	h.privateConversation("root", "privdm1")
	h.src.write(t, "root", ConfigFile, heartbeatFile(
		check("name", `"Disk Space"`, "kind", `"shell-command"`, "command", failingCommand, "quiet_hours", `"22:00-07:00"`, "enabled", "false"),
		check("name", `"Other"`, "kind", `"self-check"`),
	))
	h.setFailing("root", true)
	h.runOnce()
	if st := h.state("root", "Disk Space"); st.Enabled || !st.LastRunAt.IsZero() || !st.NextRunAt.IsZero() || !st.InQuietHours {
		t.Fatalf("a disabled check does not run: %+v", st)
	}

	ctx := context.Background()
	tx, err := h.db.Write.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	name, err := h.r.RequestRunTx(ctx, tx, "root", "disk space", "grouproom1", 42)
	if err != nil || name != "Disk Space" {
		t.Fatalf("RequestRunTx = %q, %v", name, err)
	}
	if _, err := h.r.RequestRunTx(ctx, tx, "root", "nope", "grouproom1", 43); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown check: %v", err)
	}
	if _, err := h.r.RequestRunTx(ctx, tx, "bob", "Disk Space", "grouproom1", 44); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another user's check: %v", err)
	}
	// The loop runs while the request's transaction is still open: it must wait for
	// the commit rather than miss the request.
	done := make(chan error, 1)
	go func() { done <- h.r.RunOnce(ctx) }()
	time.Sleep(50 * time.Millisecond)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ms := h.messages()
	if len(ms) != 1 || ms[0].Token != "grouproom1" || ms[0].ReplyTo != 42 || !strings.Contains(ms[0].Text, "alert") ||
		!strings.Contains(ms[0].Text, "exit status 3") {
		t.Fatalf("the requested run answers where it was asked, in quiet hours, though disabled: %+v", ms)
	}
	st := h.state("root", "Disk Space")
	if st.RunRequested || st.Status != StatusAlert {
		t.Fatalf("after the run: %+v", st)
	}
	h.clock.Set(start.Add(time.Minute))
	h.runOnce()
	if n := len(h.messages()); n != 1 {
		t.Fatalf("ran again without a request: %d messages", n)
	}
	// RequestRun without a conversation answers in private.
	if _, err := h.r.RequestRun(ctx, "root", "Other"); err != nil {
		t.Fatal(err)
	}
	h.runOnce()
	ms = h.messages()
	if len(ms) != 2 || ms[1].Token != "privdm1" || ms[1].ReplyTo != 0 || !strings.Contains(ms[1].Text, "**Other** (self-check): ok") {
		t.Fatalf("run from the settings page: %+v", ms)
	}
}

func TestStatus(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	start := time.Date(2026, 6, 1, 12, 0, 0, 0, berlin)
	h := newHarness(t, start, Options{})
	h.src.setUsers(User{ID: "alice", Timezone: "Europe/Berlin"})
	h.src.write(t, "alice", ConfigFile, heartbeatFile(
		check("name", `"Lunch"`, "kind", `"self-check"`, "interval", `"30m"`, "cooldown", `"3h"`, "quiet_hours", `"11:30-13:00"`),
		check("name", `"Off"`, "kind", `"self-check"`, "enabled", "false"),
		check("name", `"Bad"`, "kind", `"nope"`),
	))
	h.runOnce()
	states, problems, err := h.r.Status(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 2 || len(problems) != 1 || problems[0].Field != "kind" {
		t.Fatalf("states %+v problems %+v", states, problems)
	}
	l := states[0]
	if l.Name != "Lunch" || l.IntervalSeconds != 1800 || l.CooldownSeconds != 10800 || l.QuietHours != "11:30-13:00" ||
		!l.InQuietHours || !l.LastRunAt.Equal(start) || !l.NextRunAt.Equal(start.Add(30*time.Minute)) || l.Status != StatusOK || l.Line == 0 {
		t.Fatalf("Lunch: %+v", l)
	}
	if o := states[1]; o.Name != "Off" || o.Enabled || !o.NextRunAt.IsZero() || o.Status != "" {
		t.Fatalf("Off: %+v", o)
	}
	if states, problems, err := h.r.Status(context.Background(), "nobody"); err != nil || len(states) != 0 || len(problems) != 0 {
		t.Fatalf("unknown user: %v %v %v", states, problems, err)
	}
}

// A HEARTBEAT.md the agent changed in a conversation is judged there.
func TestRefusedAgentEditIsToldWhereItWasAsked(t *testing.T) {
	start := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	h := newHarness(t, start, Options{})
	h.src.setUsers(User{ID: "alice"})
	h.privateConversation("alice", "privdm1")
	if err := convlog.RecordEdit(context.Background(), h.db.Write, "alice", ConfigFile, "family42", 9, start); err != nil {
		t.Fatal(err)
	}
	h.src.write(t, "alice", ConfigFile, heartbeatFile(check("name", `"Site"`, "kind", `"url-health"`, "interval", `"10s"`)))
	h.runOnce()
	ms := h.messages()
	if len(ms) != 1 || ms[0].Token != "family42" || !strings.Contains(ms[0].Text, "HEARTBEAT.md made here") {
		t.Fatalf("told %+v, want one notice in family42", ms)
	}
}
