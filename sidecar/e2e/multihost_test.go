package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/appcall"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/store/pgtest"
	"github.com/istota/istota/sidecar/internal/talk/talktest"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, to read the shared database
)

// Several `istota serve` processes sharing one real PostgreSQL (issue 15), as hosts
// would: each has its own data directory (its workspace mirrors) and port, all share
// the database, the secrets and one fake Nextcloud (Talk and the app's routes) and one
// OpenAI-compatible model API. The model answers every task with its marker after a
// short think, and notices when two tasks of one user think at once.

// markerRe finds a task's marker in a prompt: T-<user>-<n>, or TICK-<user> for the
// scheduled job.
var markerRe = regexp.MustCompile(`\b(T|TICK)-(u\d+)(?:-(\d+))?\b`)

// thinkingAPI is the fake model API of the multi-host runs.
type thinkingAPI struct {
	think      time.Duration
	mu         sync.Mutex
	inFlight   map[string]int // user → requests being answered
	overlaps   []string
	requests   atomic.Int64
	unreadable atomic.Int64
}

func (a *thinkingAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		a.unreadable.Add(1)
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	a.requests.Add(1)
	var prompt string
	for _, m := range req.Messages {
		if m.Role == "user" {
			var s string
			if json.Unmarshal(m.Content, &s) != nil {
				s = string(m.Content)
			}
			prompt = s
		}
	}
	// The request is the last marker of the prompt (earlier ones are conversation context).
	all := markerRe.FindAllStringSubmatch(prompt, -1)
	answer, user := "I found no marker.", ""
	if len(all) > 0 {
		last := all[len(all)-1]
		answer, user = "done "+last[0], last[2]
	}
	if user != "" {
		a.mu.Lock()
		a.inFlight[user]++
		if a.inFlight[user] > 1 {
			a.overlaps = append(a.overlaps, fmt.Sprintf("%s has %d runs at once (%s)", user, a.inFlight[user], answer))
		}
		a.mu.Unlock()
		time.Sleep(a.think)
		a.mu.Lock()
		a.inFlight[user]--
		a.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"model": req.Model,
		"choices": []any{map[string]any{
			"message":       map[string]any{"role": "assistant", "content": answer},
			"finish_reason": "stop",
		}},
		"usage": map[string]any{"prompt_tokens": 10, "completion_tokens": 5},
	})
}

// multiHostNextcloud is Talk (talktest) plus the app's route the outbox asks before sending
// a message again whose earlier send may have reached Talk.
func multiHostNextcloud(t testing.TB, tk *talktest.Server) *httptest.Server {
	target, _ := url.Parse(tk.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case appcall.PostedPath:
			var req struct {
				Token string   `json:"token"`
				Refs  []string `json:"reference_ids"`
			}
			body, _ := io.ReadAll(r.Body)
			json.Unmarshal(body, &req)
			posted := []string{}
			for _, m := range tk.Messages() {
				for _, ref := range req.Refs {
					if m.Token == req.Token && m.ReferenceID == ref {
						posted = append(posted, ref)
					}
				}
			}
			json.NewEncoder(w).Encode(map[string]any{"ocs": map[string]any{"data": map[string]any{"posted": posted}}})
		case appcall.ReadyPath:
			json.NewEncoder(w).Encode(map[string]any{"ocs": map[string]any{"data": map[string]any{"delivered": 0, "complete": true}}})
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

type multiHostRun struct {
	procs, users, perUser int
	think                 time.Duration
	// killAfter, when > 0, SIGKILLs the leading process once this many answers arrived.
	killAfter int
	// cronUsers get a CRON.md job that runs every minute.
	cronUsers int
}

type multiHostResult struct {
	elapsed time.Duration // first event posted → last answer posted
	api     *thinkingAPI
	talk    *talktest.Server
	db      *sql.DB
	killed  int // index of the killed process, -1 for none
	killAt  time.Time
	hosts   []*sidecar
}

// runMultiHost starts the processes, sends every user's messages through them in turn
// (as a load balancer would), and waits until every message has an answer in Talk.
func runMultiHost(t testing.TB, r multiHostRun) multiHostResult {
	t.Helper()
	if err := pgtest.Available(); err != nil {
		pgtest.Skip(t, err.Error())
	}
	pg, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	dsn, err := pg.CreateDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tk := talktest.New(t)
	bot := tk.AddBot(botSecret)
	tokens := make([]string, r.users)
	for u := range r.users {
		tokens[u] = fmt.Sprintf("room%04d", u)
	}
	bot.EnableIn(tokens...)
	nc := multiHostNextcloud(t, tk)
	api := &thinkingAPI{think: r.think, inFlight: map[string]int{}}
	apiSrv := httptest.NewServer(api)
	t.Cleanup(apiSrv.Close)

	extra := fmt.Sprintf(`
[database]
kind = "postgres"
dsn = %q
[workers]
max = 4
lease = "6s"
`, dsn)
	hosts := make([]*sidecar, r.procs)
	for i := range hosts {
		hosts[i] = newSidecar(t, sidecarOptions{talkURL: nc.URL, apiURL: apiSrv.URL, apiKey: openaiKey, botSecret: botSecret,
			progressInterval: "1h", brainKind: "openai", model: "gpt-multihost", claudePath: "/bin/false", logLevel: "info", extraConfig: extra})
		hosts[i].start()
	}
	for u := range r.cronUsers {
		for _, h := range hosts {
			dir := filepath.Join(h.dir, "data", "users", fmt.Sprintf("u%d", u), "workspace", "istota", "config")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			cron := fmt.Sprintf("```toml\n[[jobs]]\nname = \"tick\"\nschedule = \"* * * * *\"\nprompt = \"TICK-u%d\"\n```\n", u)
			if err := os.WriteFile(filepath.Join(dir, "CRON.md"), []byte(cron), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Read with pgx's own driver: PostgreSQL's $n placeholders.
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })

	res := multiHostResult{api: api, talk: tk, db: db, killed: -1, hosts: hosts}
	var dead atomic.Int64 // bit i set: hosts[i] was killed
	pick := func(n int) *sidecar {
		for k := range len(hosts) {
			i := (n + k) % len(hosts)
			if dead.Load()&(1<<i) == 0 {
				return hosts[i]
			}
		}
		return nil
	}
	answered := func() int {
		n := 0
		for _, m := range tk.Messages() {
			if strings.HasPrefix(m.Message, "done T-") {
				n++
			}
		}
		return n
	}
	total := r.users * r.perUser
	start := time.Now()
	posted := 0
	for n := range r.perUser {
		for u := range r.users {
			id := int64(u*1000 + n + 1)
			text := fmt.Sprintf("Please handle T-u%d-%d", u, n)
			uid := fmt.Sprintf("u%d", u)
			tk.AddUserMessage(tokens[u], id, uid, text)
			h := pick(posted)
			posted++
			if status, ans := h.post("/v1/talk/events", talkEvent(tokens[u], id, uid, text, true)); status != 200 || ans["status"] != "accepted" {
				t.Fatalf("host %s answered %d %v for %s", h.url, status, ans, text)
			}
			if r.killAfter > 0 && res.killed < 0 && answered() >= r.killAfter {
				res.killed, res.killAt = killLeader(t, hosts), time.Now()
				dead.Store(1 << res.killed)
			}
		}
	}
	deadline := time.Now().Add(6 * time.Minute)
	for answered() < total {
		if r.killAfter > 0 && res.killed < 0 && answered() >= r.killAfter {
			res.killed, res.killAt = killLeader(t, hosts), time.Now()
			dead.Store(1 << res.killed)
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for i, h := range hosts {
				fmt.Fprintf(&logs, "--- host %d ---\n%s\n", i, tail(h.logs(), 4000))
			}
			t.Fatalf("%d of %d messages answered after %v\n%s", answered(), total, time.Since(start).Round(time.Second), logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	res.elapsed = time.Since(start)
	return res
}

// killLeader SIGKILLs the process that runs the once-only loops and returns its index.
func killLeader(t testing.TB, hosts []*sidecar) int {
	t.Helper()
	for i, h := range hosts {
		if strings.Contains(h.logs(), "this process leads") {
			h.kill()
			t.Logf("killed host %d, the leader, with SIGKILL", i)
			return i
		}
	}
	t.Fatal("no host says it leads")
	return -1
}

// cronRuns lists the scheduled runs, for a failure message.
func cronRuns(db *sql.DB) string {
	rows, err := db.Query(`SELECT id, user_id, status, attempts, created_at, started_at, finished_at, lease_owner FROM tasks WHERE source = 'cron' ORDER BY id`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, attempts int64
		var uid, status, created, started, finished, owner string
		rows.Scan(&id, &uid, &status, &attempts, &created, &started, &finished, &owner)
		fmt.Fprintf(&b, "task %d %s %s attempts=%d created=%s started=%s finished=%s owner=%s\n", id, uid, status, attempts, created, started, finished, owner)
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestSeveralHostsShareOnePostgresQueue: three processes, 500 tasks of 50 users, the
// leader killed with SIGKILL mid-run. Every message is answered exactly once, no user
// ever has two runs at once, and the scheduled job runs once per minute.
func TestSeveralHostsShareOnePostgresQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("several processes and a PostgreSQL server: not in -short")
	}
	r := runMultiHost(t, multiHostRun{procs: 3, users: 50, perUser: 10, think: 20 * time.Millisecond, killAfter: 150, cronUsers: 3})
	if r.killed < 0 {
		t.Fatal("no process was killed")
	}
	// Every message answered exactly once, in reply to itself.
	replies := map[int64]int{}
	for _, m := range r.talk.Messages() {
		if strings.HasPrefix(m.Message, "done T-") {
			replies[m.ReplyTo]++
			want := fmt.Sprintf("done T-u%d-%d", (m.ReplyTo-1)/1000, (m.ReplyTo-1)%1000)
			if m.Message != want {
				t.Errorf("message %d was answered %q, want %q", m.ReplyTo, m.Message, want)
			}
		}
	}
	for u := range 50 {
		for n := range 10 {
			if id := int64(u*1000 + n + 1); replies[id] != 1 {
				t.Errorf("message %d (u%d, %d) answered %d times", id, u, n, replies[id])
			}
		}
	}
	r.api.mu.Lock()
	for _, o := range r.api.overlaps {
		t.Error(o)
	}
	r.api.mu.Unlock()
	// The database agrees: every Talk task completed once.
	var done, other int
	if err := r.db.QueryRow(`SELECT COUNT(*) FILTER (WHERE status = 'completed'), COUNT(*) FILTER (WHERE status <> 'completed')
		FROM tasks WHERE source = 'talk'`).Scan(&done, &other); err != nil {
		t.Fatal(err)
	}
	if done != 500 || other != 0 {
		t.Errorf("talk tasks: %d completed, %d not", done, other)
	}
	// The scheduled job: it keeps running after the leader died (another process took
	// over the minute ticker), and runs once per user and minute.
	// (A run the killed host held waits out its lease and the retry backoff of one
	// minute, and the job's next run comes after it: allow a few minutes.)
	waitFor(t, "the scheduled job to run after the kill", 4*time.Minute, func() bool {
		var n int
		if err := r.db.QueryRow(`SELECT COUNT(DISTINCT user_id) FROM tasks WHERE source = 'cron' AND status = 'completed' AND created_at > $1`,
			store.FormatTime(r.killAt)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 3
	}, func() string { return cronRuns(r.db) })
	rows, err := r.db.Query(`SELECT user_id, dedupe_key, created_at FROM tasks WHERE source = 'cron' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	perMinute := map[string]int{}
	for rows.Next() {
		var uid, key, created string
		if err := rows.Scan(&uid, &key, &created); err != nil {
			t.Fatal(err)
		}
		at, _ := store.ParseTime(created)
		perMinute[uid+" "+at.Truncate(time.Minute).Format("15:04")]++
	}
	rows.Close()
	if len(perMinute) == 0 {
		t.Error("the scheduled job never ran")
	}
	for k, n := range perMinute {
		if n != 1 {
			t.Errorf("scheduled job of %s ran %d times", k, n)
		}
	}
	t.Logf("500 tasks on 3 processes (one killed) in %v; %d model requests; scheduled runs %v",
		r.elapsed.Round(time.Millisecond), r.api.requests.Load(), perMinute)
}

// TestMultiHostThroughput prints the throughput with one, two and three processes
// sharing one PostgreSQL (make bench runs it with ISTOTA_BENCH_MULTIHOST=1): 300 tasks
// of 50 users, each model call taking 200ms, four workers per process.
func TestMultiHostThroughput(t *testing.T) {
	if os.Getenv("ISTOTA_BENCH_MULTIHOST") == "" {
		t.Skip("a benchmark: set ISTOTA_BENCH_MULTIHOST=1 (make bench does)")
	}
	var one float64
	for procs := 1; procs <= 3; procs++ {
		t.Run(fmt.Sprintf("%d", procs), func(t *testing.T) {
			r := runMultiHost(t, multiHostRun{procs: procs, users: 50, perUser: 6, think: 200 * time.Millisecond})
			rate := float64(50*6) / r.elapsed.Seconds()
			if procs == 1 {
				one = rate
			}
			verdict := ""
			if procs > 1 && one > 0 {
				verdict = fmt.Sprintf("%.2fx one process", rate/one)
			}
			fmt.Printf("figure: multi-host throughput, %d process(es) × 4 workers, 200ms model calls | %.1f tasks/s | grows with processes | %s\n",
				procs, rate, verdict)
		})
	}
}
