package nextcloud

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/appcall"
	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/credproxy"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/signing"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/talk"
	"github.com/istota/istota/sidecar/internal/talk/talktest"
)

const (
	sharedSecret = "nextcloud-skill-test-secret-0123456789abcdef"
	botSecret    = "nextcloud-skill-test-bot-secret-0123456789abcdefghij"
)

// fakeApp is the Istota app's delegate routes as lib/Service/NextcloudDelegate.php
// answers them: signed requests only, the user from the signed body, the user's own
// files only, Talk participation and the bot's presence checked.
type fakeApp struct {
	t      *testing.T
	mu     sync.Mutex
	owner  map[string]string // "uid:path" => owner of that file or folder in uid's home
	shares []appcall.Share
	sharer map[string]string // share id => who made it
	member map[string][]string
	botIn  map[string]bool
	calls  []map[string]string // every accepted request body
}

func newFakeApp(t *testing.T) (*fakeApp, *appcall.Client) {
	a := &fakeApp{t: t,
		owner: map[string]string{
			"alice:Documents": "alice", "alice:Documents/report.txt": "alice", "alice:FromBob": "bob", "alice:FromBob/plan.txt": "bob",
			"bob:Private": "bob", "bob:Private/diary.txt": "bob",
		},
		sharer: map[string]string{},
		member: map[string][]string{"team1234": {"alice", "bob"}, "bobs5678": {"bob"}, "nobot123": {"alice"}},
		botIn:  map[string]bool{"team1234": true, "bobs5678": true},
	}
	srv := httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(srv.Close)
	c, err := appcall.New(srv.URL, []byte(sharedSecret), nil)
	if err != nil {
		t.Fatal(err)
	}
	return a, c
}

func (a *fakeApp) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	if signing.Verify([]byte(sharedSecret), r.Method, r.URL.RequestURI(), r.Header.Get(signing.HeaderTimestamp),
		r.Header.Get(signing.HeaderNonce), r.Header.Get(signing.HeaderSignature), raw, time.Now()) != nil {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var in map[string]string
	if err := json.Unmarshal(raw, &in); err != nil {
		refuse(w, 400, "invalid_request", "the request body is not a JSON object")
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, in)
	uid := in["user"]
	own := func(path string) bool {
		p := strings.Trim(path, "/")
		o, ok := a.owner[uid+":"+p]
		if !ok {
			refuse(w, 400, "invalid_request", fmt.Sprintf("there is no file or folder %q in your files", p))
			return false
		}
		if o != uid {
			refuse(w, 403, "not_owner", fmt.Sprintf("%q belongs to %s and is only shared with you; the bot acts only on your own files", p, o))
			return false
		}
		return true
	}
	switch strings.TrimPrefix(r.URL.Path, "/ocs/v2.php/apps/istota/api/v1/sidecar/nextcloud/") {
	case "share":
		if !own(in["path"]) {
			return
		}
		sh := appcall.Share{ID: fmt.Sprint(len(a.shares) + 1), Type: in["type"], Path: strings.Trim(in["path"], "/"), With: in["with"],
			Permissions: in["permissions"], Expires: in["expires"], Password: in["password"] != "", Note: in["note"]}
		if sh.Type == "link" {
			sh.URL = "https://cloud.example.com/s/token" + sh.ID
		}
		a.shares = append(a.shares, sh)
		a.sharer[sh.ID] = uid
		ok(w, sh)
	case "shares":
		if in["path"] != "" && !own(in["path"]) {
			return
		}
		out := []appcall.Share{}
		for _, sh := range a.shares {
			if a.sharer[sh.ID] == uid && (in["path"] == "" || sh.Path == strings.Trim(in["path"], "/")) {
				out = append(out, sh)
			}
		}
		ok(w, map[string]any{"shares": out})
	case "mkdir":
		p := strings.Trim(in["path"], "/")
		if _, exists := a.owner[uid+":"+p]; exists {
			ok(w, appcall.Folder{Path: p})
			return
		}
		if parent := filepath.Dir(p); parent != "." && !own(parent) {
			return
		}
		a.owner[uid+":"+p] = uid
		ok(w, appcall.Folder{Path: p, Created: true})
	case "conversations":
		out := []appcall.Conversation{}
		for _, tok := range slices.Sorted(func(yield func(string) bool) {
			for k := range a.member {
				if !yield(k) {
					return
				}
			}
		}) {
			if slices.Contains(a.member[tok], uid) {
				out = append(out, appcall.Conversation{Token: tok, Name: "Room " + tok, Type: 2, BotEnabled: a.botIn[tok]})
			}
		}
		ok(w, map[string]any{"conversations": out})
	case "post-target":
		tok := in["token"]
		switch {
		case !slices.Contains(a.member[tok], uid):
			refuse(w, 403, "not_participant", fmt.Sprintf("you are not in a conversation %q; the bot posts only where you are a participant", tok))
		case !a.botIn[tok]:
			refuse(w, 403, "bot_not_enabled", "the bot is not added to the conversation; a moderator can add it in the conversation settings under Bots")
		default:
			ok(w, appcall.Conversation{Token: tok, Name: "Room " + tok, Type: 2})
		}
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func ok(w http.ResponseWriter, data any) {
	json.NewEncoder(w).Encode(map[string]any{"ocs": map[string]any{"meta": map[string]any{"status": "ok"}, "data": data}})
}

func refuse(w http.ResponseWriter, status int, code, message string) {
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"ocs": map[string]any{"meta": map[string]any{"status": "failure"}, "data": map[string]string{"code": code, "message": message}}})
}

func (a *fakeApp) callCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

type env struct {
	app    *fakeApp
	talk   *talktest.Server
	outbox *outbox.Outbox
	audit  *audit.Log
	queue  *queue.Queue
	task   int64 // the task the calls belong to
	skill  skills.Skill
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{}
	var client *appcall.Client
	e.app, client = newFakeApp(t)
	db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "istota.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e.talk = talktest.New(t)
	e.talk.AddBot(botSecret).EnableIn("team1234", "bobs5678")
	e.outbox = outbox.New(db, talk.NewClient(e.talk.URL, []byte(botSecret), nil), outbox.Options{})
	e.audit = audit.New(db, nil, nil)
	e.queue = queue.New(db, queue.Options{})
	task, _, err := e.queue.Enqueue(context.Background(), queue.NewTask{UserID: "alice", Source: queue.SourceTalk, Prompt: "share my report", ConversationToken: "team1234"})
	if err != nil {
		t.Fatal(err)
	}
	e.task = task.ID
	e.skill, err = Skill(Options{App: client, Poster: e.outbox, Events: e.queue, Audit: e.audit})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) run(t *testing.T, user string, stdin string, args ...string) skills.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return e.skill.Run(ctx, skills.Invocation{Args: args, Stdin: []byte(stdin), UserID: user, TaskID: e.task})
}

// events is the task's events, one "kind text" a line.
func (e *env) events(t *testing.T) string {
	t.Helper()
	evs, err := e.queue.Events(context.Background(), e.task)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, ev := range evs {
		lines = append(lines, ev.Kind+" "+ev.Text)
	}
	return strings.Join(lines, "\n")
}

func (e *env) auditLines(t *testing.T, user string) []audit.Entry {
	t.Helper()
	es, err := e.audit.Recent(context.Background(), user, false, 100)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func TestShareWithAUserIsDoneByTheAppForTheTasksUser(t *testing.T) {
	e := newEnv(t)
	res := e.run(t, "alice", "", "share", "/Documents/report.txt", "--user", "bob", "--note=for Monday")
	if res.ExitCode != 0 || res.Err != nil {
		t.Fatalf("share: %d %s %v", res.ExitCode, res.Stderr, res.Err)
	}
	if got := string(res.Stdout); got != "shared Documents/report.txt with the user bob (read, share id 1)\n" {
		t.Fatalf("stdout %q", got)
	}
	call := e.app.calls[0]
	if call["user"] != "alice" || call["path"] != "/Documents/report.txt" || call["type"] != "user" || call["with"] != "bob" ||
		call["permissions"] != "read" || call["note"] != "for Monday" {
		t.Fatalf("the app was asked %v", call)
	}
	es := e.auditLines(t, "alice")
	if len(es) != 1 || es[0].Component != "nextcloud" || es[0].Action != "share" || !es[0].Allowed ||
		!strings.Contains(es[0].Detail, `Share "Documents/report.txt" with the user bob (read-only)`) {
		t.Fatalf("audit %+v", es)
	}
	if ev := e.events(t); !strings.Contains(ev, `nextcloud Share "Documents/report.txt" with the user bob (read-only): share 1`) {
		t.Fatalf("events %q", ev)
	}
}

func TestLinkWithPasswordAndExpiryNeverEchoesThePassword(t *testing.T) {
	e := newEnv(t)
	const password = "Correct-Horse-Battery-77"
	res := e.run(t, "alice", "", "share", "Documents", "--link", "--edit", "--expires", "2099-12-01", "--password", password, "--json")
	if res.ExitCode != 0 {
		t.Fatalf("share: %d %s", res.ExitCode, res.Stderr)
	}
	var sh appcall.Share
	if err := json.Unmarshal(res.Stdout, &sh); err != nil || sh.URL == "" || !sh.Password || sh.Expires != "2099-12-01" || sh.Permissions != "edit" {
		t.Fatalf("json %s %v", res.Stdout, err)
	}
	if e.app.calls[0]["password"] != password || e.app.calls[0]["type"] != "link" || e.app.calls[0]["with"] != "" {
		t.Fatalf("the app was asked %v", e.app.calls[0])
	}
	a := classify(context.Background(), skills.Invocation{Args: []string{"share", "Documents", "--link", "--password", password}})
	for what, s := range map[string]string{"stdout": string(res.Stdout), "events": e.events(t), "audit": fmt.Sprint(e.auditLines(t, "alice")), "approval": a.Summary} {
		if strings.Contains(s, password) {
			t.Errorf("the password is in the %s: %s", what, s)
		}
	}
	if a.Summary != `Make a public link to "Documents" (read-only, password protected)` {
		t.Errorf("summary %q", a.Summary)
	}
}

func TestAGeneratedPasswordIsShownOnceAndNowhereElse(t *testing.T) {
	e := newEnv(t)
	res := e.run(t, "alice", "", "share", "Documents/report.txt", "--link", "--generate-password")
	if res.ExitCode != 0 {
		t.Fatalf("share: %d %s", res.ExitCode, res.Stderr)
	}
	password := e.app.calls[0]["password"]
	if len(password) != 23 || strings.Count(password, "-") != 3 {
		t.Fatalf("generated password %q", password)
	}
	if !strings.Contains(string(res.Stdout), "password: "+password+"\n") || !strings.Contains(string(res.Stdout), "password protected") {
		t.Fatalf("stdout %q", res.Stdout)
	}
	if strings.Contains(e.events(t)+fmt.Sprint(e.auditLines(t, "alice")), password) {
		t.Fatal("the generated password is in the events or the audit log")
	}
	res = e.run(t, "alice", "", "share", "Documents/report.txt", "--link", "--generate-password", "--json")
	var out struct {
		URL               string `json:"url"`
		GeneratedPassword string `json:"generated_password"`
	}
	if err := json.Unmarshal(res.Stdout, &out); err != nil || out.URL == "" || out.GeneratedPassword != e.app.calls[1]["password"] || out.GeneratedPassword == password {
		t.Fatalf("json %s: %v", res.Stdout, err)
	}
}

func TestAnotherUsersFileIsRefusedAndAudited(t *testing.T) {
	e := newEnv(t)
	res := e.run(t, "alice", "", "share", "FromBob/plan.txt", "--user", "carol")
	if res.ExitCode != 1 || !strings.Contains(string(res.Stderr), "not done:") || !strings.Contains(string(res.Stderr), "belongs to bob") {
		t.Fatalf("share of bob's file: %d %q", res.ExitCode, res.Stderr)
	}
	res = e.run(t, "alice", "", "share", "Private/diary.txt", "--link")
	if res.ExitCode != 2 || !strings.Contains(string(res.Stderr), "no file or folder") {
		t.Fatalf("share of a path in bob's home: %d %q", res.ExitCode, res.Stderr)
	}
	es := e.auditLines(t, "alice")
	if len(es) != 2 || es[1].Allowed || es[1].Reason != audit.ReasonNotAuthorized || !strings.Contains(es[1].Detail, "not_owner") ||
		es[0].Reason != audit.ReasonBadRequest {
		t.Fatalf("audit %+v", es)
	}
	if ev := e.events(t); !strings.Contains(ev, "refused to share") || !strings.Contains(ev, "belongs to bob") {
		t.Fatalf("events %q", ev)
	}
	if len(e.app.shares) != 0 {
		t.Fatalf("shares were made: %v", e.app.shares)
	}
}

func TestBadInputIsRefusedBeforeNextcloud(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "give a subcommand"},
		{[]string{"delete", "x"}, `unknown subcommand "delete"`},
		{[]string{"share", "../bob/files/x", "--link"}, `".." part`},
		{[]string{"share", "Documents/./x", "--link"}, `"." part`},
		{[]string{"share", "/", "--link"}, "not the home folder itself"},
		{[]string{"share", "Documents"}, "exactly one of --user UID, --group GID or --link"},
		{[]string{"share", "Documents", "--user", "bob", "--link"}, "exactly one of"},
		{[]string{"share", "Documents", "--user", "bob", "--password", "x"}, "are for --link shares only"},
		{[]string{"share", "Documents", "--group", "staff", "--generate-password"}, "are for --link shares only"},
		{[]string{"share", "Documents", "--link", "--generate-password", "--password", "x"}, "not both"},
		{[]string{"share", "Documents", "--link", "--expires", "next week"}, "must be a date YYYY-MM-DD"},
		{[]string{"share", "Documents", "--link", "--expires", "2099-02-30"}, "must be a date YYYY-MM-DD"},
		{[]string{"share", "Documents", "--link", "--forever"}, `unknown option "--forever"`},
		{[]string{"share", "Documents", "Other", "--link"}, "exactly one PATH"},
		{[]string{"share", "Docu\x00ments", "--link"}, "control characters"},
		{[]string{"share", "Documents", "--user"}, "--user needs a value"},
		{[]string{"mkdir"}, "exactly one PATH"},
		{[]string{"mkdir", "a/../../b"}, `".." part`},
		{[]string{"post", "team1234"}, "the message is empty"},
		{[]string{"post", "../x", "hi"}, "is not a conversation token"},
		{[]string{"post", "team1234", strings.Repeat("x", talk.MaxMessageLength+1)}, "longer than Talk's"},
		{[]string{"conversations", "x"}, "takes no arguments"},
	} {
		res := e.run(t, "alice", "", tc.args...)
		if res.ExitCode != 2 || !strings.Contains(string(res.Stderr), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 with %q", tc.args, res.ExitCode, res.Stderr, tc.want)
		}
	}
	if n := e.app.callCount(); n != 0 {
		t.Fatalf("the app was called %d times for bad input", n)
	}
}

func TestMkdirAndListing(t *testing.T) {
	e := newEnv(t)
	if res := e.run(t, "alice", "", "mkdir", "Documents/Projects"); string(res.Stdout) != "created the folder Documents/Projects\n" {
		t.Fatalf("mkdir: %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if res := e.run(t, "alice", "", "mkdir", "Documents/Projects/"); string(res.Stdout) != "the folder Documents/Projects already exists\n" {
		t.Fatalf("mkdir again: %q", res.Stdout)
	}
	if res := e.run(t, "alice", "", "mkdir", "FromBob/mine"); res.ExitCode != 1 || !strings.Contains(string(res.Stderr), "belongs to bob") {
		t.Fatalf("mkdir in bob's folder: %d %q", res.ExitCode, res.Stderr)
	}
	e.run(t, "alice", "", "share", "Documents/report.txt", "--group", "staff", "--expires=2099-01-01")
	e.run(t, "bob", "", "share", "Private/diary.txt", "--user", "carol")
	res := e.run(t, "alice", "", "shares")
	if got := string(res.Stdout); got != "Documents/report.txt with the group staff (read, expires 2099-01-01, share id 1)\n" {
		t.Fatalf("alice's shares: %q", got)
	}
	res = e.run(t, "alice", "", "shares", "Documents", "--json")
	if strings.TrimSpace(string(res.Stdout)) != "[]" {
		t.Fatalf("shares of Documents: %q", res.Stdout)
	}
	res = e.run(t, "alice", "", "conversations")
	if got := string(res.Stdout); got != "nobot123\tRoom nobot123\tbot not added (cannot post)\nteam1234\tRoom team1234\tbot added\n" {
		t.Fatalf("conversations: %q", got)
	}
	es := e.auditLines(t, "alice")
	actions := []string{}
	for _, a := range es {
		actions = append(actions, fmt.Sprintf("%s:%t", a.Action, a.Allowed))
	}
	// Newest first: the share, the refused folder, the one created (the folder that
	// existed already and the lists are no actions).
	if !slices.Equal(actions, []string{"share:true", "mkdir:false", "mkdir:true"}) {
		t.Fatalf("audit %v", actions)
	}
}

func TestPostGoesOutAsTheBotOnlyWhereTheUserIs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	res := e.run(t, "alice", "The report is ready.\n", "post", "team1234")
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), `posted in "Room team1234"`) {
		t.Fatalf("post: %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	// The same post again in the same task is the same message.
	e.run(t, "alice", "", "post", "team1234", "The report is ready.")
	if _, err := e.outbox.DeliverDue(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := e.talk.Messages()
	if len(msgs) != 1 || msgs[0].Token != "team1234" || msgs[0].Message != "The report is ready." {
		t.Fatalf("Talk got %+v", msgs)
	}

	for _, tc := range []struct{ token, want string }{
		{"bobs5678", "you are not in a conversation"},
		{"nobot123", "the bot is not added"},
		{"nothere1", "you are not in a conversation"},
	} {
		res := e.run(t, "alice", "", "post", tc.token, "hello from alice")
		if res.ExitCode != 1 || !strings.Contains(string(res.Stderr), tc.want) {
			t.Errorf("post to %s: %d %q", tc.token, res.ExitCode, res.Stderr)
		}
	}
	if _, err := e.outbox.DeliverDue(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(e.talk.Messages()); n != 1 {
		t.Fatalf("Talk got %d messages", n)
	}
	es := e.auditLines(t, "alice")
	// Both calls are recorded; Talk got the message once.
	if len(es) != 5 || es[3].Action != "post" || !es[3].Allowed || es[0].Allowed || es[0].Reason != audit.ReasonNotAuthorized {
		t.Fatalf("audit %+v", es)
	}
}

func TestTiers(t *testing.T) {
	for _, tc := range []struct {
		args []string
		tier approval.Tier
	}{
		{[]string{"share", "Documents", "--user", "bob"}, approval.TierExternal},
		{[]string{"share", "Documents", "--link"}, approval.TierExternal},
		{[]string{"post", "team1234", "hi"}, approval.TierExternal},
		{[]string{"mkdir", "New"}, approval.TierWriteOwn},
		{[]string{"shares"}, approval.TierRead},
		{[]string{"conversations"}, approval.TierRead},
		{[]string{"share", "../x", "--link"}, approval.TierRead}, // refused as usage anyway
	} {
		s, _ := Skill(Options{App: &appcall.Client{}, Poster: &outbox.Outbox{}})
		a := s.Action(context.Background(), skills.Invocation{Args: tc.args})
		if a.Tier != tc.tier {
			t.Errorf("%q: tier %s, want %s", tc.args, a.Tier, tc.tier)
		}
	}
}

// gate is an approvals policy per tier, without questions.
type gate struct {
	mu   sync.Mutex
	deny map[approval.Tier]bool
	seen []approval.Action
}

func (g *gate) Check(_ context.Context, _ approval.Who, a approval.Action) (approval.Outcome, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seen = append(g.seen, a)
	if g.deny[a.Tier] {
		return approval.Outcome{Message: "not done: actions of the tier " + string(a.Tier) + " are set to deny"}, nil
	}
	return approval.Outcome{Allowed: true}, nil
}

// Through the credential proxy: the skill runs as the socket's user, the tiers gate it,
// and bad input comes back as a usage error.
func TestThroughTheCredentialProxy(t *testing.T) {
	e := newEnv(t)
	reg := skills.NewRegistry()
	if err := reg.Register(e.skill); err != nil {
		t.Fatal(err)
	}
	g := &gate{deny: map[approval.Tier]bool{approval.TierExternal: true}}
	srv := httptest.NewServer(credproxy.New(reg, nil, e.audit, nil, credproxy.Options{Gate: g}).Handler(credproxy.Identity{UserID: "alice", TaskID: 7}))
	defer srv.Close()
	call := func(args ...string) (int, map[string]any) {
		body, _ := json.Marshal(map[string]any{"args": args})
		resp, err := http.Post(srv.URL+"/v1/skills/nextcloud", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}

	st, out := call("share", "Documents/report.txt", "--user", "bob")
	if st != http.StatusForbidden || out["error"].(map[string]any)["code"] != audit.ReasonNotApproved {
		t.Fatalf("share with external denied: %d %v", st, out)
	}
	if len(e.app.calls) != 0 {
		t.Fatalf("the app was called although the tier is denied: %v", e.app.calls)
	}
	st, out = call("mkdir", "Documents/New")
	if st != http.StatusOK || out["exit_code"].(float64) != 0 || e.app.calls[0]["user"] != "alice" {
		t.Fatalf("mkdir: %d %v %v", st, out, e.app.calls)
	}
	st, out = call("share", "../../bob", "--link")
	if st != http.StatusOK || out["exit_code"].(float64) != 2 {
		t.Fatalf("bad input: %d %v", st, out)
	}
	// A post the app refuses is refused as such, without asking; one it allows is asked
	// about (and here denied by the policy).
	st, out = call("post", "bobs5678", "hello")
	stderr, _ := base64.StdEncoding.DecodeString(fmt.Sprint(out["stderr"]))
	if st != http.StatusOK || out["exit_code"].(float64) != 1 || !strings.Contains(string(stderr), "you are not in a conversation") {
		t.Fatalf("post where alice is not: %d %v", st, out)
	}
	st, out = call("post", "team1234", "hello")
	if st != http.StatusForbidden || out["error"].(map[string]any)["code"] != audit.ReasonNotApproved {
		t.Fatalf("post where alice is, external denied: %d %v", st, out)
	}
	if len(g.seen) != 5 || g.seen[0].Tier != approval.TierExternal || g.seen[1].Tier != approval.TierWriteOwn || g.seen[0].Name != "nextcloud share" ||
		g.seen[3].Tier != approval.TierRead || !strings.Contains(g.seen[3].Summary, "refused: you are not in a conversation") || g.seen[4].Tier != approval.TierExternal {
		t.Fatalf("gate saw %+v", g.seen)
	}
	if _, err := e.outbox.DeliverDue(context.Background()); err != nil || len(e.talk.Messages()) != 0 {
		t.Fatalf("something was posted: %v %v", e.talk.Messages(), err)
	}
}

// The skill is described in the prompt only when the request is about sharing, folders
// or conversations.
func TestLoadedIntoThePromptSelectively(t *testing.T) {
	e := newEnv(t)
	reg := skills.NewRegistry()
	if err := reg.Register(e.skill); err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]bool{
		"Share my Q3 report with Bob":            true,
		"make a link to the slides for the team": true,
		"Create a folder Projects/2026":          true,
		"Tell the team conversation I am late":   true,
		"What is the weather in Ljubljana?":      false,
		"Remind me to call mum":                  false,
	} {
		described, _ := reg.ForPrompt(skills.Request{Text: text})
		if got := len(described) == 1; got != want {
			t.Errorf("%q: described %t, want %t", text, got, want)
		}
	}
}
