package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/store"
)

// fakeFacts is a small in-memory FactStore that records the namespaces it is asked
// about, so the tests can see which namespace the skill chose.
type fakeFacts struct {
	mu     sync.Mutex
	facts  map[string][]Fact // by namespace
	nextID int64
	calls  []string // "method ns"
	fail   error
}

func (f *fakeFacts) record(method, ns string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, method+" "+ns)
	return f.fail
}

func (f *fakeFacts) Current(_ context.Context, ns, subject string) ([]Fact, error) {
	if err := f.record("current", ns); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Fact
	for _, x := range f.facts[ns] {
		if x.ValidUntil.IsZero() && (subject == "" || x.Subject == subject) {
			out = append(out, x)
		}
	}
	return out, nil
}

func (f *fakeFacts) Timeline(_ context.Context, ns, subject string) ([]Fact, error) {
	if err := f.record("timeline", ns); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Fact
	for _, x := range f.facts[ns] {
		if x.Subject == subject {
			out = append(out, x)
		}
	}
	return out, nil
}

func (f *fakeFacts) Add(_ context.Context, ns string, x Fact) (Fact, error) {
	if err := f.record("add", ns); err != nil {
		return Fact{}, err
	}
	if x.Predicate == "forbidden" {
		return Fact{}, fmt.Errorf("%w fact: predicate not allowed", ErrInvalid)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	x.ID = f.nextID
	f.facts[ns] = append(f.facts[ns], x)
	return x, nil
}

func (f *fakeFacts) find(ns string, id int64) (*Fact, error) {
	for i := range f.facts[ns] {
		if f.facts[ns][i].ID == id {
			return &f.facts[ns][i], nil
		}
	}
	return nil, fmt.Errorf("fact %d: %w", id, store.ErrNotFound)
}

func (f *fakeFacts) Invalidate(_ context.Context, ns string, id int64, at time.Time) error {
	if err := f.record("invalidate", ns); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	x, err := f.find(ns, id)
	if err != nil {
		return err
	}
	x.ValidUntil = at
	return nil
}

func (f *fakeFacts) Delete(_ context.Context, ns string, id int64) error {
	if err := f.record("delete", ns); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.find(ns, id); err != nil {
		return err
	}
	list := f.facts[ns]
	for i := range list {
		if list[i].ID == id {
			f.facts[ns] = append(list[:i], list[i+1:]...)
			break
		}
	}
	return nil
}

// convs maps task ids to conversation tokens.
type convs map[int64]string

func (c convs) ConversationToken(_ context.Context, taskID int64) (string, error) {
	tok, ok := c[taskID]
	if !ok {
		return "", fmt.Errorf("task %d: %w", taskID, store.ErrNotFound)
	}
	return tok, nil
}

type skillEnv struct {
	m     *Memory
	facts *fakeFacts
	reg   *skills.Registry
}

func newSkillEnv(t *testing.T) skillEnv {
	t.Helper()
	m, _, _ := newMemory(t, Options{})
	facts := &fakeFacts{facts: map[string][]Fact{}}
	reg := skills.NewRegistry()
	if err := RegisterSkill(reg, m, facts, convs{1: "room-alice-bob", 2: "", 3: "room-other"}); err != nil {
		t.Fatal(err)
	}
	if err := RegisterSkill(reg, m, facts, nil); err == nil {
		t.Fatal("the skill registered twice")
	}
	mustIndex(t, m, Doc{Namespace: "user:alice", Source: SourceNote, SourceRef: "a", Text: "Alice's secret: the spare key is under the blue pot.", Ephemeral: true})
	mustIndex(t, m, Doc{Namespace: "user:bob", Source: SourceNote, SourceRef: "b", Text: "Bob's secret: the spare key is in the mailbox.", Ephemeral: true})
	mustIndex(t, m, Doc{Namespace: "channel:room-alice-bob", Source: SourceConversation, SourceRef: "task:9", Text: "Team secret: the spare key for the office is at reception.", Ephemeral: true})
	mustIndex(t, m, Doc{Namespace: "channel:room-other", Source: SourceConversation, SourceRef: "task:10", Text: "Other team's secret: spare key with the porter.", Ephemeral: true})
	return skillEnv{m: m, facts: facts, reg: reg}
}

func (e skillEnv) run(t *testing.T, user string, task int64, stdin string, args ...string) skills.Result {
	t.Helper()
	sk, ok := e.reg.Lookup(SkillName)
	if !ok {
		t.Fatal("skill not registered")
	}
	return sk.Run(context.Background(), skills.Invocation{Args: args, UserID: user, TaskID: task, Stdin: []byte(stdin)})
}

func TestSkillSearch(t *testing.T) {
	e := newSkillEnv(t)
	for _, tc := range []struct {
		name     string
		user     string
		task     int64
		args     []string
		code     int
		want     []string // substrings of the output
		wantNot  []string
		stderrIs string
	}{
		{name: "own memory only", user: "alice", task: 1, args: []string{"search", "spare", "key"},
			want: []string{"blue pot"}, wantNot: []string{"mailbox", "reception", "porter"}},
		{name: "bob sees his", user: "bob", task: 1, args: []string{"search", "spare key"},
			want: []string{"mailbox"}, wantNot: []string{"blue pot", "reception"}},
		{name: "a namespace in the query is just words", user: "alice", task: 1, args: []string{"search", "user:bob", "mailbox"},
			code: 0, want: []string{"No memories found."}},
		{name: "no namespace option", user: "alice", task: 1, args: []string{"search", "--namespace", "user:bob", "key"},
			code: 2, stderrIs: "unknown option"},
		{name: "channel of the task", user: "alice", task: 1, args: []string{"search", "--channel", "room-alice-bob", "spare", "key"},
			want: []string{"blue pot", "reception", "(channel:room-alice-bob)"}, wantNot: []string{"porter", "mailbox"}},
		{name: "channel flag after the query", user: "alice", task: 1, args: []string{"search", "spare", "key", "--channel=room-alice-bob", "--limit", "5"},
			want: []string{"reception"}},
		{name: "another channel", user: "alice", task: 1, args: []string{"search", "--channel", "room-other", "key"},
			code: 1, stderrIs: "only read the memory of the conversation this task belongs to"},
		{name: "a task without conversation", user: "alice", task: 2, args: []string{"search", "--channel", "", "key"},
			code: 1, stderrIs: "only read the memory"},
		{name: "unknown task", user: "alice", task: 77, args: []string{"search", "--channel", "room-alice-bob", "key"},
			code: 1, stderrIs: "unavailable"},
		{name: "no words", user: "alice", task: 1, args: []string{"search"}, code: 2, stderrIs: "give the words"},
		{name: "punctuation only", user: "alice", task: 1, args: []string{"search", "***"}, want: []string{"No memories found."}},
		{name: "bad limit", user: "alice", task: 1, args: []string{"search", "--limit", "0", "key"}, code: 2, stderrIs: "--limit"},
		{name: "bad date", user: "alice", task: 1, args: []string{"search", "--since", "last week", "key"}, code: 2, stderrIs: "not a date"},
		{name: "since filters", user: "alice", task: 1, args: []string{"search", "--since", "2027-01-01", "key"}, want: []string{"No memories found."}},
		{name: "bad source", user: "alice", task: 1, args: []string{"search", "--source", "USER.md", "key"}, code: 2, stderrIs: "source"},
		{name: "missing option value", user: "alice", task: 1, args: []string{"search", "key", "--limit"}, code: 2, stderrIs: "needs a value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := e.run(t, tc.user, tc.task, "", tc.args...)
			out, errOut := string(res.Stdout), string(res.Stderr)
			if res.ExitCode != tc.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", res.ExitCode, tc.code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
			if tc.stderrIs != "" && !strings.Contains(errOut, tc.stderrIs) {
				t.Errorf("stderr %q lacks %q", errOut, tc.stderrIs)
			}
		})
	}

	res := e.run(t, "alice", 1, "", "search", "--json", "spare", "key")
	var hits []struct {
		Namespace string `json:"namespace"`
		Ref       string `json:"ref"`
		Text      string `json:"text"`
	}
	if err := json.Unmarshal(res.Stdout, &hits); err != nil || len(hits) != 1 || hits[0].Namespace != "user:alice" || hits[0].Ref != "a" {
		t.Errorf("--json = %s (%v)", res.Stdout, err)
	}

	// Without a TaskConversations, --channel is refused outright.
	reg := skills.NewRegistry()
	RegisterSkill(reg, e.m, nil, nil)
	sk, _ := reg.Lookup(SkillName)
	if r := sk.Run(context.Background(), skills.Invocation{UserID: "alice", TaskID: 1, Args: []string{"search", "--channel", "room-alice-bob", "key"}}); r.ExitCode != 1 || !strings.Contains(string(r.Stderr), "not available") {
		t.Errorf("--channel without conversations: %d %s", r.ExitCode, r.Stderr)
	}
}

func TestSkillIndexStatsReindex(t *testing.T) {
	e := newSkillEnv(t)
	res := e.run(t, "alice", 1, "Alice's bike lock code is 3141.", "index", "bike")
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "1 chunks added") {
		t.Fatalf("index: %d %s %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if res := e.run(t, "alice", 1, "", "search", "bike", "lock"); !strings.Contains(string(res.Stdout), "3141") {
		t.Errorf("indexed note not found: %s", res.Stdout)
	}
	if res := e.run(t, "bob", 1, "", "search", "bike", "lock"); strings.Contains(string(res.Stdout), "3141") {
		t.Errorf("bob found alice's note: %s", res.Stdout)
	}
	// Re-indexing the same reference replaces the note.
	res = e.run(t, "alice", 1, "Alice's bike lock code is now 2718.", "index", "--source", "note", "bike")
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "1 chunks added, 1 removed") {
		t.Errorf("re-index: %d %s %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
	}{
		{"no text", "  ", []string{"index", "x"}},
		{"no ref", "text", []string{"index"}},
		{"two refs", "text", []string{"index", "a", "b"}},
		{"USER.md source", "text", []string{"index", "--source", "user_md", "x"}},
		{"conversation source", "text", []string{"index", "--source", "conversation", "x"}},
		{"not UTF-8", "\xff\xfe", []string{"index", "x"}},
		{"reindex with arguments", "", []string{"reindex", "now"}},
		{"stats with arguments", "", []string{"stats", "everything"}},
		{"no subcommand", "", nil},
		{"unknown subcommand", "", []string{"forget-everything"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if res := e.run(t, "alice", 1, tc.stdin, tc.args...); res.ExitCode != 2 {
				t.Errorf("exit %d, want 2; stderr %s", res.ExitCode, res.Stderr)
			}
		})
	}

	res = e.run(t, "alice", 1, "", "stats")
	if out := string(res.Stdout); res.ExitCode != 0 || !strings.Contains(out, "user:alice: 2 chunks from 2 documents") ||
		!strings.Contains(out, "note: 2") || !strings.Contains(out, "keyword search only") || strings.Contains(out, "channel") {
		t.Errorf("stats: %s %s", res.Stdout, res.Stderr)
	}
	res = e.run(t, "alice", 1, "", "stats", "--json", "--channel", "room-alice-bob")
	var st []Stats
	if err := json.Unmarshal(res.Stdout, &st); err != nil || len(st) != 2 || st[1].Namespace != "channel:room-alice-bob" || st[1].Chunks != 1 {
		t.Errorf("stats --json --channel: %s (%v)", res.Stdout, err)
	}
	if res := e.run(t, "alice", 1, "", "reindex"); res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "no embeddings endpoint") {
		t.Errorf("reindex: %d %s %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if res := e.run(t, "", 1, "", "stats"); res.ExitCode == 0 || res.Err == nil {
		t.Errorf("a call without a user: %d, %v", res.ExitCode, res.Err)
	}
}

func TestSkillFacts(t *testing.T) {
	e := newSkillEnv(t)
	e.facts.facts["channel:room-alice-bob"] = []Fact{{ID: 100, Subject: "office", Predicate: "located_in", Object: "Lisbon", ValidFrom: testNow}}
	e.facts.nextID = 100
	steps := []struct {
		name   string
		user   string
		args   []string
		code   int
		want   string
		called string // the fact-store calls it must make, "method namespace", comma-separated
	}{
		{"add", "alice", []string{"add-fact", "Alice", "likes", "green", "tea"}, 0, "added #101 Alice likes green tea (from 2026-03-01 12:00)", "add user:alice"},
		{"add ephemeral with a date", "alice", []string{"add-fact", "--ephemeral", "--from", "2026-02-20", "Alice", "located_in", "Porto"}, 0,
			"added #102 Alice located_in Porto (from 2026-02-20) [ephemeral]", "add user:alice"},
		{"bob adds his own", "bob", []string{"add-fact", "Bob", "likes", "coffee"}, 0, "added #103", "add user:bob"},
		{"facts", "alice", []string{"facts"}, 0, "#101 Alice likes green tea", "current user:alice"},
		{"facts about a subject", "alice", []string{"facts", "Alice"}, 0, "#102 Alice located_in Porto", "current user:alice"},
		{"channel facts", "alice", []string{"facts", "--channel", "room-alice-bob"}, 0, "#100 office located_in Lisbon", "current user:alice,current channel:room-alice-bob"},
		{"invalidate", "alice", []string{"invalidate", "102", "--at", "2026-02-25"}, 0, "fact #102 no longer holds from 2026-02-25", "invalidate user:alice"},
		{"timeline", "alice", []string{"timeline", "Alice"}, 0, "#102 Alice located_in Porto (from 2026-02-20 until 2026-02-25) [ephemeral]", "timeline user:alice"},
		{"bob cannot invalidate alice's fact", "bob", []string{"invalidate", "101"}, 1, "fact #101: not found", "invalidate user:bob"},
		{"bob cannot delete alice's fact", "bob", []string{"delete-fact", "#101"}, 1, "not found", "delete user:bob"},
		{"delete", "alice", []string{"delete-fact", "#101"}, 0, "deleted fact #101", "delete user:alice"},
		{"refused by the store", "alice", []string{"add-fact", "Alice", "forbidden", "x"}, 2, "predicate not allowed", "add user:alice"},
		{"timeline without subject", "alice", []string{"timeline"}, 2, "usage", ""},
		{"add with two words", "alice", []string{"add-fact", "Alice", "likes"}, 2, "usage", ""},
		{"add with an empty part", "alice", []string{"add-fact", "Alice", " ", "tea"}, 2, "predicate is empty", ""},
		{"bad id", "alice", []string{"delete-fact", "abc"}, 2, "not a fact id", ""},
		{"negative id", "alice", []string{"invalidate", "-5"}, 2, "", ""},
		{"bad date", "alice", []string{"invalidate", "--at", "soon", "5"}, 2, "not a date", ""},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			e.facts.mu.Lock()
			e.facts.calls = nil
			e.facts.mu.Unlock()
			res := e.run(t, s.user, 1, "", s.args...)
			out := string(res.Stdout) + string(res.Stderr)
			if res.ExitCode != s.code || !strings.Contains(out, s.want) {
				t.Fatalf("exit %d, output %q; want exit %d and %q", res.ExitCode, out, s.code, s.want)
			}
			e.facts.mu.Lock()
			defer e.facts.mu.Unlock()
			if s.called == "" && len(e.facts.calls) != 0 {
				t.Errorf("a refused call reached the store: %v", e.facts.calls)
			}
			if s.called != "" && strings.Join(e.facts.calls, ",") != s.called {
				t.Errorf("store calls %v, want [%s]", e.facts.calls, s.called)
			}
		})
	}
	if got, _ := e.facts.Current(context.Background(), "user:alice", "Alice"); len(got) != 0 {
		t.Errorf("alice's current facts after invalidate and delete: %+v", got)
	}

	// Internal failures are reported without their details.
	e.facts.fail = errors.New("database is locked at /var/lib/istota/secret.db")
	res := e.run(t, "alice", 1, "", "facts")
	if res.ExitCode != 1 || res.Err == nil || strings.Contains(string(res.Stderr), "secret.db") {
		t.Errorf("internal failure: %d %q %v", res.ExitCode, res.Stderr, res.Err)
	}

	// Without a knowledge graph the fact subcommands say so.
	reg := skills.NewRegistry()
	RegisterSkill(reg, e.m, nil, nil)
	sk, _ := reg.Lookup(SkillName)
	for _, args := range [][]string{{"facts"}, {"timeline", "x"}, {"add-fact", "a", "b", "c"}, {"invalidate", "1"}, {"delete-fact", "1"}} {
		r := sk.Run(context.Background(), skills.Invocation{UserID: "alice", TaskID: 1, Args: args})
		if r.ExitCode != 1 || !strings.Contains(string(r.Stderr), "knowledge graph is not available") {
			t.Errorf("%v without facts: %d %s", args, r.ExitCode, r.Stderr)
		}
	}
}

func TestParseFlags(t *testing.T) {
	spec := map[string]bool{"limit": true, "json": false, "source": true}
	for _, tc := range []struct {
		args    []string
		pos     string
		flags   string
		wantErr bool
	}{
		{args: []string{"a", "--limit", "3", "b"}, pos: "a b", flags: "limit=3"},
		{args: []string{"--limit=3", "-json", "a"}, pos: "a", flags: "json= limit=3"},
		{args: []string{"--source", "x", "--source", "y"}, flags: "source=x,y"},
		{args: []string{"a", "--", "--limit", "-x"}, pos: "a --limit -x"},
		{args: []string{"-5", "degrees"}, pos: "-5 degrees"},
		{args: []string{"-"}, pos: "-"},
		{args: []string{"--json=yes"}, wantErr: true},
		{args: []string{"--bogus"}, wantErr: true},
		{args: []string{"--limit"}, wantErr: true},
	} {
		fl, pos, err := parseFlags(tc.args, spec)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseFlags(%q): %v", tc.args, err)
			continue
		}
		if err != nil {
			continue
		}
		var got []string
		for _, k := range []string{"json", "limit", "source"} {
			if v, ok := fl[k]; ok {
				got = append(got, k+"="+strings.Join(v, ","))
			}
		}
		if strings.Join(pos, " ") != tc.pos || strings.Join(got, " ") != tc.flags {
			t.Errorf("parseFlags(%q) = %q %q, want %q %q", tc.args, pos, got, tc.pos, tc.flags)
		}
	}
}
