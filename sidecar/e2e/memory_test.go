package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
	"github.com/istota/istota/sidecar/internal/store"
)

// TestSleepCycleWithTheRealCLI: a conversation happens, then the nightly cycle (run now
// with `istota sleep`) asks the real claude CLI, sandboxed and without tools, to extract
// memories; the dated file, the fact and the USER.md change land where the next prompt
// reads them.
func TestSleepCycleWithTheRealCLI(t *testing.T) {
	const token = "sleep001"
	extraction := `{"memories": ["Alice said she drinks green tea every morning."],
 "facts": [{"subject": "alice", "predicate": "drinks", "object": "green tea", "ephemeral": false}],
 "topics": ["tea"],
 "user_md_ops": [{"op": "add_heading", "heading": "Preferences"}, {"op": "append", "heading": "Preferences", "text": "- Drinks green tea in the morning."}]}`
	f := newFixtureWith(t, fakeapi.Script{fakeapi.Reply("Noted: green tea it is.")}, sidecarOptions{progressInterval: "1h", logLevel: "info"}, token)
	f.api.AddScript("sleep", fakeapi.Marker("user_md_ops"), fakeapi.Script{fakeapi.Reply(extraction), fakeapi.Reply("a second run must not ask")})
	f.sc.start()
	// History retention runs in the same nightly run: two requests finished 200 days
	// ago go (the conversation below makes newer tasks, so neither is the newest).
	rw, err := sql.Open("sqlite3", "file:"+filepath.Join(f.sc.dir, "data", "db", "istota.db")+"?_busy_timeout=5000&_foreign_keys=on")
	if err != nil {
		t.Fatal(err)
	}
	longAgo := store.FormatTime(time.Now().Add(-200 * 24 * time.Hour))
	for range 2 {
		if _, err := rw.Exec(`INSERT INTO tasks (user_id, source, status, prompt, next_attempt_at, created_at, finished_at) VALUES ('alice', 'talk', 'completed', 'an old request', ?, ?, ?)`, longAgo, longAgo, longAgo); err != nil {
			t.Fatal(err)
		}
	}
	rw.Close()
	f.say(t, token, 3, "alice", "I drink green tea every morning")
	f.waitMessages(t, 1, 3*time.Minute)
	f.sc.stop()

	out, stderr, err := runCLI(t, f.sc.cfgPath, "sleep", "-u", "alice")
	if err != nil {
		t.Fatalf("istota sleep: %v\n%s%s", err, out, stderr)
	}
	var sleepReqs int
	for _, r := range f.api.MessageRequests() {
		if r.Conversation == "sleep" {
			sleepReqs++
			if !strings.Contains(r.UserText(), "I drink green tea every morning") {
				t.Errorf("the transcript is not in the extraction prompt")
			}
			if len(r.Tools) != 0 {
				t.Errorf("the extraction call offered %d tools; it must be text only", len(r.Tools))
			}
		}
	}
	if sleepReqs != 1 {
		t.Fatalf("extraction requests = %d\n%s", sleepReqs, stderr)
	}
	var old int
	f.sc.db().QueryRow(`SELECT count(*) FROM tasks WHERE prompt = 'an old request'`).Scan(&old)
	if old != 0 || !strings.Contains(out, "alice: 2 history row(s) older than 180 days deleted") {
		t.Errorf("%d of the two 200-day-old requests stayed:\n%s", old, out)
	}
	mirror := filepath.Join(f.sc.dir, "data", "users", "alice", "workspace")
	// The dated file is named by the user's day (talkEvent sends Europe/Berlin), which
	// differs from the machine's around midnight.
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	day := time.Now().In(berlin).Format("2006-01-02")
	mem, err := os.ReadFile(filepath.Join(mirror, "memories", day+".md"))
	if err != nil || !strings.Contains(string(mem), "green tea every morning") {
		matches, _ := filepath.Glob(filepath.Join(mirror, "memories", "*"))
		t.Fatalf("dated memory file: %v %q (memories: %v)", err, mem, matches)
	}
	userMD, err := os.ReadFile(filepath.Join(mirror, "istota", "config", "USER.md"))
	if err != nil || !strings.Contains(string(userMD), "## Preferences") || !strings.Contains(string(userMD), "Drinks green tea") {
		t.Fatalf("USER.md after curation: %v %q", err, userMD)
	}
	if _, err := os.Stat(filepath.Join(mirror, "istota", "config", "USER.md.audit.jsonl")); err != nil {
		t.Errorf("no curation audit log: %v", err)
	}
	var facts int
	f.sc.db().QueryRow(`SELECT count(*) FROM knowledge_facts WHERE namespace = 'user:alice' AND object = 'green tea' AND valid_until = ''`).Scan(&facts)
	if facts != 1 {
		t.Fatalf("current facts = %d", facts)
	}
	// Nothing new: a second run asks nothing.
	if out, _, err := runCLI(t, f.sc.cfgPath, "sleep", "-u", "alice"); err != nil || !strings.Contains(out, "nothing to do") {
		t.Fatalf("second run: %v %s", err, out)
	}

	// What was remembered is there for the user to see, at once.
	f.sc.start()
	f.say(t, token, 4, "alice", "!memory facts")
	f.say(t, token, 5, "alice", "!memory search tea")
	// The answers by what they reply to: on a loaded machine a notice (a model call
	// retried) may come before them.
	var factsAnswer, search string
	waitFor(t, "the answers to !memory facts and !memory search", time.Minute, func() bool {
		factsAnswer, search = "", ""
		for _, m := range f.talk.Messages() {
			switch m.ReplyTo {
			case 4:
				factsAnswer = m.Message
			case 5:
				search = m.Message
			}
		}
		return factsAnswer != "" && search != ""
	}, f.sc.logs)
	if !strings.Contains(factsAnswer, "alice drinks green tea") {
		t.Errorf("!memory facts = %q", factsAnswer)
	}
	if !strings.Contains(search, "green tea") {
		t.Errorf("!memory search = %q", search)
	}
	var noted int
	for _, m := range f.talk.Messages() {
		if m.Message == "Noted: green tea it is." {
			noted++
		}
	}
	if noted != 1 {
		t.Errorf("the answer was delivered %d times: %+v", noted, f.talk.Messages())
	}
}

// meaningEmbeddings is an OpenAI-compatible embeddings endpoint whose vectors carry
// meaning the way a model's do, in miniature: each word is a direction, and "chai" and
// "tea" are the same one, so a search for chai finds tea by meaning alone.
func meaningEmbeddings(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	const dim = 64
	var texts atomic.Int64
	wordVector := func(w string) []float64 {
		if w == "chai" {
			w = "tea"
		}
		h := fnv.New64a()
		h.Write([]byte(w))
		r := rand.New(rand.NewPCG(h.Sum64(), 1))
		v := make([]float64, dim)
		for i := range v {
			v[i] = r.NormFloat64()
		}
		return v
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if r.URL.Path != "/v1/embeddings" || json.NewDecoder(r.Body).Decode(&req) != nil || req.Model != "e2e-embed" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		texts.Add(int64(len(req.Input)))
		type item struct {
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		}
		var data []item
		for i, text := range req.Input {
			v := make([]float64, dim)
			for _, word := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) }) {
				if len(word) < 3 {
					continue
				}
				for k, x := range wordVector(word) {
					v[k] += x
				}
			}
			v[0] += 1e-3 // no text without a vector
			data = append(data, item{i, v})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": req.Model})
	}))
	t.Cleanup(srv.Close)
	return srv, &texts
}

// TestMemorySearchByMeaning: with an embeddings endpoint configured, what is said in a
// conversation is indexed with vectors, and `!memory search` finds it by a word it does
// not contain. Two faults this once found: the first hybrid search made the vector index
// on the one write connection while the chat command held it in its transaction, and
// the sidecar hung; and once the index existed, its trigger refused every vector stored
// later (storing one is an UPDATE).
func TestMemorySearchByMeaning(t *testing.T) {
	const token = "meaning1"
	emb, texts := meaningEmbeddings(t)
	f := newFixtureWith(t, fakeapi.Script{fakeapi.Reply("Noted: a cup every morning.")}, sidecarOptions{
		extraConfig: fmt.Sprintf("[memory]\nembeddings_url = %q\nembeddings_model = \"e2e-embed\"\n", emb.URL),
	}, token)
	f.sc.start()
	answer := func(id int64) string {
		var got string
		waitFor(t, fmt.Sprintf("the answer to message %d", id), 2*time.Minute, func() bool {
			for _, m := range f.talk.Messages() {
				if m.ReplyTo == id {
					got = m.Message
				}
			}
			return got != ""
		}, f.sc.logs)
		return got
	}
	f.say(t, token, 1, "alice", "!memory search kettle")
	if got := answer(1); !strings.HasPrefix(got, "Nothing found") {
		t.Fatalf("a search in an empty memory found %q", got)
	}
	f.say(t, token, 2, "alice", "I drink green tea every morning")
	answer(2)
	// The exchange is indexed after the answer; wait until its chunks have vectors.
	waitFor(t, "the conversation's chunks with vectors", time.Minute, func() bool {
		var with, without int
		f.sc.db().QueryRow(`SELECT count(*) FILTER (WHERE embedding IS NOT NULL), count(*) FILTER (WHERE embedding IS NULL)
			FROM memory_chunks WHERE namespace = 'user:alice' AND content LIKE '%green tea%'`).Scan(&with, &without)
		return with > 0 && without == 0
	}, f.sc.logs)
	f.say(t, token, 3, "alice", "!memory search chai")
	if got := answer(3); !strings.Contains(got, "green tea") {
		t.Fatalf("!memory search chai = %q\n--- log ---\n%s", got, f.sc.logs())
	}
	if texts.Load() == 0 {
		t.Fatal("the embeddings endpoint was never asked")
	}
	if logs := f.sc.logs(); strings.Contains(logs, "embeddings endpoint failed") {
		t.Fatalf("the embeddings endpoint was marked failing:\n%s", logs)
	}
}
