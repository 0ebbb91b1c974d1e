package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/store"
)

// SkillName is the name the agent calls: istota skill memory_search ….
const SkillName = "memory_search"

// skillSearchLimit and skillHitRunes keep a search's output to a few thousand
// characters of the agent's context unless it asks for more with --limit.
const (
	skillSearchLimit = 5
	skillHitRunes    = 1200
)

// Fact is a knowledge-graph triple as the skill shows and adds it. The wiring adapts
// the knowledge package's own type to this one.
type Fact struct {
	ID         int64     `json:"id"`
	Subject    string    `json:"subject"`
	Predicate  string    `json:"predicate"`
	Object     string    `json:"object"`
	ValidFrom  time.Time `json:"valid_from"`
	ValidUntil time.Time `json:"valid_until,omitzero"` // zero while current
	Ephemeral  bool      `json:"ephemeral"`
	Source     string    `json:"source"` // sleep_cycle | agent | user
}

// FactStore is the knowledge graph as the skill needs it. Every method acts on one
// namespace, which the skill derives from the calling task, never from its arguments.
// Methods return an error wrapping store.ErrNotFound for an id that does not exist in
// the namespace, and one wrapping ErrInvalid for a fact they refuse (its message is
// shown to the agent).
type FactStore interface {
	// Current returns the facts valid now; subject "" means all of them.
	Current(ctx context.Context, ns, subject string) ([]Fact, error)
	// Timeline returns every fact about subject, past and current, oldest first.
	Timeline(ctx context.Context, ns, subject string) ([]Fact, error)
	// Add stores f (superseding, deduplicating as the knowledge graph does) and returns
	// the fact as stored.
	Add(ctx context.Context, ns string, f Fact) (Fact, error)
	// Invalidate ends fact id's validity at at.
	Invalidate(ctx context.Context, ns string, id int64, at time.Time) error
	// Delete removes fact id.
	Delete(ctx context.Context, ns string, id int64) error
}

// TaskConversations tells the skill which Talk conversation a task belongs to, so that
// --channel opens a channel's memory only to tasks of that very conversation.
type TaskConversations interface {
	// ConversationToken returns the task's conversation token, "" when it has none.
	ConversationToken(ctx context.Context, taskID int64) (string, error)
}

const skillUsage = `memory_search search [--limit N] [--since DATE] [--until DATE] [--source S]... [--channel TOKEN] [--json] QUERY...
memory_search index [--source note|memory_file] REF     index standard input as document REF (replacing an earlier REF)
memory_search reindex                      give every chunk a vector (when an embeddings endpoint is configured)
memory_search stats [--channel TOKEN] [--json]
memory_search facts [--channel TOKEN] [--json] [SUBJECT]
memory_search timeline [--channel TOKEN] [--json] SUBJECT
memory_search add-fact [--ephemeral] [--from DATE] SUBJECT PREDICATE OBJECT...
memory_search invalidate [--at DATE] ID
memory_search delete-fact ID
Search shows the best 5 hits unless --limit says otherwise. Searches and changes only your own memory. --channel TOKEN adds the memory of the Talk conversation this task belongs to (read-only; no other conversation).
DATE is YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS][Z|±HH:MM], UTC unless it says otherwise. --source filters by conversation, memory_file, user_md, channel_md, fact or note.`

// Skill returns the memory_search skill. facts may be nil (the fact subcommands then
// say the knowledge graph is unavailable); convs may be nil (--channel is then refused).
func Skill(m *Memory, facts FactStore, convs TaskConversations) skills.Skill {
	return skills.Skill{
		Manifest: skills.Manifest{
			Name:    SkillName,
			Summary: "search what you remember about the user and manage known facts",
			Usage:   skillUsage,
			Load: skills.Load{Keywords: []string{
				"remember", "recall", "memor", "forget", "earlier", "last time", "before", "previous", "we talked", "discuss", "fact",
			}},
		},
		Run: func(ctx context.Context, inv skills.Invocation) skills.Result {
			r := skillRun{m: m, facts: facts, convs: convs, inv: inv}
			return r.run(ctx)
		},
	}
}

// RegisterSkill registers the memory_search skill in reg.
func RegisterSkill(reg *skills.Registry, m *Memory, facts FactStore, convs TaskConversations) error {
	return reg.Register(Skill(m, facts, convs))
}

type skillRun struct {
	m     *Memory
	facts FactStore
	convs TaskConversations
	inv   skills.Invocation
}

func usage() skills.Result { return skills.Usagef("usage:\n%s", skillUsage) }

func (r skillRun) run(ctx context.Context) skills.Result {
	if r.inv.UserID == "" {
		return skills.Internal("memory", errors.New("memory skill called without a user"))
	}
	if len(r.inv.Args) == 0 {
		return usage()
	}
	args := r.inv.Args[1:]
	switch r.inv.Args[0] {
	case "search":
		return r.search(ctx, args)
	case "index":
		return r.index(ctx, args)
	case "reindex":
		return r.reindex(ctx, args)
	case "stats":
		return r.stats(ctx, args)
	case "facts":
		return r.listFacts(ctx, args, false)
	case "timeline":
		return r.listFacts(ctx, args, true)
	case "add-fact":
		return r.addFact(ctx, args)
	case "invalidate":
		return r.invalidate(ctx, args)
	case "delete-fact":
		return r.deleteFact(ctx, args)
	}
	return skills.Usagef("memory_search: unknown subcommand %q\nusage:\n%s", excerpt(r.inv.Args[0], 40), skillUsage)
}

func (r skillRun) userNS() string { return UserNamespace(r.inv.UserID) }

// namespaces is the user's namespace, plus the channel's when --channel names the
// conversation of the calling task.
func (r skillRun) namespaces(ctx context.Context, fl flags, cmd string) ([]string, *skills.Result) {
	ns := []string{r.userNS()}
	token, ok := fl.value("channel")
	if !ok {
		return ns, nil
	}
	refuse := skills.Failf("%s: --channel: you can only read the memory of the conversation this task belongs to", cmd)
	if r.convs == nil {
		res := skills.Failf("%s: --channel is not available here", cmd)
		return nil, &res
	}
	own, err := r.convs.ConversationToken(ctx, r.inv.TaskID)
	if err != nil {
		res := skills.Internal("memory", fmt.Errorf("memory skill: conversation of task %d: %w", r.inv.TaskID, err))
		return nil, &res
	}
	if own == "" || token != own {
		return nil, &refuse
	}
	return append(ns, ChannelNamespace(own)), nil
}

// fail maps an error of this package or the fact store to a result.
func fail(what string, err error) skills.Result {
	switch {
	case errors.Is(err, ErrInvalid):
		return skills.Usagef("%v", err)
	case errors.Is(err, store.ErrNotFound):
		return skills.Failf("%s: not found", what)
	}
	return skills.Internal(what, err)
}

func (r skillRun) search(ctx context.Context, args []string) skills.Result {
	fl, pos, err := parseFlags(args, map[string]bool{"limit": true, "since": true, "until": true, "source": true, "channel": true, "json": false})
	if err != nil {
		return skills.Usagef("search: %v\nusage:\n%s", err, skillUsage)
	}
	text := strings.TrimSpace(strings.Join(pos, " "))
	if text == "" {
		return skills.Usagef("search: give the words to look for, e.g. istota skill memory_search search flight Lisbon")
	}
	q := Query{Text: text, Sources: fl.all("source"), Limit: skillSearchLimit}
	if v, ok := fl.value("limit"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return skills.Usagef("search: --limit must be a number from 1 to %d", MaxLimit)
		}
		q.Limit = n
	}
	for _, d := range []struct {
		name string
		dst  *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		if v, ok := fl.value(d.name); ok {
			t, err := parseDate(v)
			if err != nil {
				return skills.Usagef("search: --%s: %v", d.name, err)
			}
			*d.dst = t
		}
	}
	ns, res := r.namespaces(ctx, fl, "search")
	if res != nil {
		return *res
	}
	q.Namespaces = ns
	hits, err := r.m.Search(ctx, q)
	if err != nil {
		return fail("memory search", err)
	}
	if fl.has("json") {
		type jsonHit struct {
			Namespace string    `json:"namespace"`
			Source    string    `json:"source"`
			Ref       string    `json:"ref"`
			Snippet   string    `json:"snippet"`
			Text      string    `json:"text"`
			Score     float64   `json:"score"`
			CreatedAt time.Time `json:"created_at"`
		}
		out := make([]jsonHit, 0, len(hits))
		for _, h := range hits {
			out = append(out, jsonHit{h.Namespace, h.Source, h.SourceRef, h.Snippet, h.Text, h.Score, h.CreatedAt.UTC()})
		}
		return jsonResult(out)
	}
	return skills.Result{Stdout: []byte(FormatHits(hits, skillHitRunes))}
}

func (r skillRun) index(ctx context.Context, args []string) skills.Result {
	fl, pos, err := parseFlags(args, map[string]bool{"source": true})
	if err != nil || len(pos) != 1 {
		return skills.Usagef("usage: istota skill memory_search index [--source note|memory_file] REF < text")
	}
	source := SourceNote
	if v, ok := fl.value("source"); ok {
		// The agent may not write USER.md's or CHANNEL.md's chunks (those never expire,
		// or belong to a channel), nor pose as a conversation.
		if v != SourceNote && v != SourceMemoryFile {
			return skills.Usagef("index: --source must be note or memory_file")
		}
		source = v
	}
	if len(bytes.TrimSpace(r.inv.Stdin)) == 0 {
		return skills.Usagef("index: give the text to index on standard input")
	}
	if !utf8.Valid(r.inv.Stdin) {
		return skills.Usagef("index: the text must be UTF-8")
	}
	added, removed, err := r.m.ReplaceSource(ctx, Doc{
		Namespace: r.userNS(), Source: source, SourceRef: pos[0],
		Text: string(r.inv.Stdin), Ephemeral: true,
	})
	if err != nil {
		return fail("memory index", err)
	}
	return skills.Result{Stdout: fmt.Appendf(nil, "indexed %s %q: %d chunks added, %d removed\n", source, pos[0], added, removed)}
}

func (r skillRun) reindex(ctx context.Context, args []string) skills.Result {
	if len(args) != 0 {
		return skills.Usagef("usage: istota skill memory_search reindex")
	}
	res, err := r.m.Reindex(ctx, r.userNS())
	switch {
	case errors.Is(err, ErrNoEmbedder):
		return skills.Result{Stdout: []byte("no embeddings endpoint is configured: search is by keywords, nothing to reindex\n")}
	case err != nil && res.Embedded == 0 && res.Remaining == 0:
		return fail("memory reindex", err)
	case err != nil:
		r := skills.Failf("reindex: %d chunks received vectors, %d still lack them: the embeddings service failed; try again later", res.Embedded, res.Remaining)
		r.Err = err
		return r
	}
	return skills.Result{Stdout: fmt.Appendf(nil, "reindexed: %d chunks received vectors, %d still lack them\n", res.Embedded, res.Remaining)}
}

func (r skillRun) stats(ctx context.Context, args []string) skills.Result {
	fl, pos, err := parseFlags(args, map[string]bool{"channel": true, "json": false})
	if err != nil || len(pos) != 0 {
		return skills.Usagef("usage: istota skill memory_search stats [--channel TOKEN] [--json]")
	}
	nss, res := r.namespaces(ctx, fl, "stats")
	if res != nil {
		return *res
	}
	var all []Stats
	for _, ns := range nss {
		st, err := r.m.Stats(ctx, ns)
		if err != nil {
			return fail("memory stats", err)
		}
		all = append(all, st)
	}
	if fl.has("json") {
		return jsonResult(all)
	}
	var b strings.Builder
	for _, st := range all {
		fmt.Fprintf(&b, "%s: %d chunks from %d documents", st.Namespace, st.Chunks, st.Sources)
		if st.Chunks > 0 {
			fmt.Fprintf(&b, ", %s to %s", st.Oldest.UTC().Format("2006-01-02"), st.Newest.UTC().Format("2006-01-02"))
		}
		b.WriteString("\n")
		for _, src := range sortedKeys(st.BySource) {
			fmt.Fprintf(&b, "  %s: %d\n", src, st.BySource[src])
		}
		if st.EmbedModel != "" {
			fmt.Fprintf(&b, "  vectors (%s): %d with, %d without\n", st.EmbedModel, st.Embedded, st.NotEmbedded)
		} else {
			b.WriteString("  vectors: none (keyword search only)\n")
		}
	}
	return skills.Result{Stdout: []byte(b.String())}
}

func (r skillRun) listFacts(ctx context.Context, args []string, timeline bool) skills.Result {
	cmd := "facts"
	if timeline {
		cmd = "timeline"
	}
	if r.facts == nil {
		return skills.Failf("%s: the knowledge graph is not available", cmd)
	}
	fl, pos, err := parseFlags(args, map[string]bool{"channel": true, "json": false})
	if err != nil || len(pos) > 1 || (timeline && len(pos) != 1) {
		if timeline {
			return skills.Usagef("usage: istota skill memory_search timeline [--channel TOKEN] [--json] SUBJECT")
		}
		return skills.Usagef("usage: istota skill memory_search facts [--channel TOKEN] [--json] [SUBJECT]")
	}
	subject := ""
	if len(pos) == 1 {
		if subject, err = checkFactField("subject", pos[0]); err != nil {
			return skills.Usagef("%s: %v", cmd, err)
		}
	}
	nss, res := r.namespaces(ctx, fl, cmd)
	if res != nil {
		return *res
	}
	type nsFacts struct {
		Namespace string `json:"namespace"`
		Facts     []Fact `json:"facts"`
	}
	var all []nsFacts
	for _, ns := range nss {
		var fs []Fact
		if timeline {
			fs, err = r.facts.Timeline(ctx, ns, subject)
		} else {
			fs, err = r.facts.Current(ctx, ns, subject)
		}
		if err != nil {
			return fail("the knowledge graph", err)
		}
		all = append(all, nsFacts{ns, fs})
	}
	if fl.has("json") {
		return jsonResult(all)
	}
	var b strings.Builder
	for _, group := range all {
		if len(all) > 1 {
			b.WriteString(group.Namespace + ":\n")
		}
		if len(group.Facts) == 0 {
			b.WriteString("no facts\n")
		}
		for _, f := range group.Facts {
			b.WriteString(formatFact(f) + "\n")
		}
	}
	return skills.Result{Stdout: []byte(b.String())}
}

func formatFact(f Fact) string {
	s := fmt.Sprintf("#%d %s %s %s (from %s", f.ID, f.Subject, f.Predicate, f.Object, formatDate(f.ValidFrom))
	if !f.ValidUntil.IsZero() {
		s += " until " + formatDate(f.ValidUntil)
	}
	s += ")"
	if f.Ephemeral {
		s += " [ephemeral]"
	}
	return s
}

func formatDate(t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	t = t.UTC()
	if t.Hour() == 0 && t.Minute() == 0 && t.Second() == 0 {
		return t.Format("2006-01-02")
	}
	return t.Format("2006-01-02 15:04")
}

func (r skillRun) addFact(ctx context.Context, args []string) skills.Result {
	if r.facts == nil {
		return skills.Failf("add-fact: the knowledge graph is not available")
	}
	fl, pos, err := parseFlags(args, map[string]bool{"ephemeral": false, "from": true})
	if err != nil || len(pos) < 3 {
		return skills.Usagef("usage: istota skill memory_search add-fact [--ephemeral] [--from DATE] SUBJECT PREDICATE OBJECT...")
	}
	f := Fact{Ephemeral: fl.has("ephemeral"), Source: "agent", ValidFrom: r.m.clock().UTC()}
	for _, field := range []struct {
		name, value string
		dst         *string
	}{
		{"subject", pos[0], &f.Subject},
		{"predicate", pos[1], &f.Predicate},
		{"object", strings.Join(pos[2:], " "), &f.Object},
	} {
		if *field.dst, err = checkFactField(field.name, field.value); err != nil {
			return skills.Usagef("add-fact: %v", err)
		}
	}
	if v, ok := fl.value("from"); ok {
		if f.ValidFrom, err = parseDate(v); err != nil {
			return skills.Usagef("add-fact: --from: %v", err)
		}
	}
	got, err := r.facts.Add(ctx, r.userNS(), f)
	if err != nil {
		return fail("the knowledge graph", err)
	}
	return skills.Result{Stdout: []byte("added " + formatFact(got) + "\n")}
}

func (r skillRun) invalidate(ctx context.Context, args []string) skills.Result {
	if r.facts == nil {
		return skills.Failf("invalidate: the knowledge graph is not available")
	}
	fl, pos, err := parseFlags(args, map[string]bool{"at": true})
	if err != nil || len(pos) != 1 {
		return skills.Usagef("usage: istota skill memory_search invalidate [--at DATE] ID")
	}
	id, err := parseID(pos[0])
	if err != nil {
		return skills.Usagef("invalidate: %v", err)
	}
	at := r.m.clock().UTC()
	if v, ok := fl.value("at"); ok {
		if at, err = parseDate(v); err != nil {
			return skills.Usagef("invalidate: --at: %v", err)
		}
	}
	if err := r.facts.Invalidate(ctx, r.userNS(), id, at); err != nil {
		return fail(fmt.Sprintf("fact #%d", id), err)
	}
	return skills.Result{Stdout: fmt.Appendf(nil, "fact #%d no longer holds from %s\n", id, formatDate(at))}
}

func (r skillRun) deleteFact(ctx context.Context, args []string) skills.Result {
	if r.facts == nil {
		return skills.Failf("delete-fact: the knowledge graph is not available")
	}
	if len(args) != 1 {
		return skills.Usagef("usage: istota skill memory_search delete-fact ID")
	}
	id, err := parseID(args[0])
	if err != nil {
		return skills.Usagef("delete-fact: %v", err)
	}
	if err := r.facts.Delete(ctx, r.userNS(), id); err != nil {
		return fail(fmt.Sprintf("fact #%d", id), err)
	}
	return skills.Result{Stdout: fmt.Appendf(nil, "deleted fact #%d\n", id)}
}

func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(s, "#"), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%q is not a fact id (a positive number, as facts lists it)", excerpt(s, 40))
	}
	return id, nil
}

// maxFactField bounds each part of a fact.
const maxFactField = 500

func checkFactField(name, v string) (string, error) {
	v = normalize(v)
	if v == "" {
		return "", fmt.Errorf("the %s is empty", name)
	}
	if utf8.RuneCountInString(v) > maxFactField || strings.IndexFunc(v, unicode.IsControl) >= 0 {
		return "", fmt.Errorf("the %s must be at most %d characters of text", name, maxFactField)
	}
	return v, nil
}

// parseDate reads YYYY-MM-DD (midnight UTC) or an RFC 3339 time, seconds and zone
// optional (UTC without one).
func parseDate(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02", time.RFC3339, "2006-01-02T15:04Z07:00", "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a date: use YYYY-MM-DD or YYYY-MM-DDTHH:MM", excerpt(s, 40))
}

func jsonResult(v any) skills.Result { return skills.JSON(v) }

// flags holds parsed options: name → values (booleans hold one empty value).
type flags map[string][]string

func (f flags) has(name string) bool { _, ok := f[name]; return ok }

func (f flags) value(name string) (string, bool) {
	v, ok := f[name]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

func (f flags) all(name string) []string { return f[name] }

// parseFlags accepts --name VALUE, --name=VALUE and -name anywhere among the
// arguments (the agent does not always put them first); "--" ends the options. spec
// maps each known name to whether it takes a value.
func parseFlags(args []string, spec map[string]bool) (flags, []string, error) {
	fl := flags{}
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' || (a[1] >= '0' && a[1] <= '9') {
			pos = append(pos, a)
			continue
		}
		name := strings.TrimLeft(a, "-")
		name, val, hasVal := strings.Cut(name, "=")
		takes, known := spec[name]
		switch {
		case !known:
			return nil, nil, fmt.Errorf("unknown option %q", excerpt(a, 40))
		case takes && !hasVal:
			if i+1 >= len(args) {
				return nil, nil, fmt.Errorf("option --%s needs a value", name)
			}
			i++
			val = args[i]
		case !takes && hasVal:
			return nil, nil, fmt.Errorf("option --%s takes no value", name)
		}
		fl[name] = append(fl[name], val)
	}
	return fl, pos, nil
}

func sortedKeys(m map[string]int) []string { return slices.Sorted(maps.Keys(m)) }
