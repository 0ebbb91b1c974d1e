package workspace_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/webdav"
	"github.com/istota/istota/sidecar/internal/webdav/davtest"
	"github.com/istota/istota/sidecar/internal/workspace"
)

const botPassword = "bot-app-password-for-tests"

type env struct {
	t      *testing.T
	srv    *davtest.Server
	client *webdav.Client
	db     *store.DB
	data   string
	ws     *workspace.Workspace
	opts   workspace.Options
}

func newEnv(t *testing.T, mod func(*workspace.Options)) *env {
	t.Helper()
	return newEnvWith(t, davtest.Options{}, mod)
}

func newEnvWith(t *testing.T, so davtest.Options, mod func(*workspace.Options)) *env {
	t.Helper()
	so.BotPassword, so.Users = botPassword, []string{"alice", "bob"}
	srv := davtest.New(t, so)
	client, err := webdav.New(webdav.Options{URL: srv.URL, User: "istota", Password: botPassword, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	db, err := testDBs.OpenPath(context.Background(), filepath.Join(t.TempDir(), "istota.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	data := t.TempDir()
	e := &env{t: t, srv: srv, client: client, db: db, data: data}
	e.opts = workspace.Options{
		UserMirror:    func(uid string) string { return filepath.Join(data, "users", uid, "workspace") },
		ChannelMirror: func(token string) string { return filepath.Join(data, "channels", token) },
		BotDir:        "istota",
		Host:          "testhost",
		Clock:         func() time.Time { return time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC) },
	}
	if mod != nil {
		mod(&e.opts)
	}
	e.ws = e.newWorkspace()
	return e
}

// newWorkspace is what a restarted sidecar gets: same database, same files, no memory.
func (e *env) newWorkspace() *workspace.Workspace { return e.newWorkspaceWith(nil) }

func (e *env) newWorkspaceWith(mod func(*workspace.Options)) *workspace.Workspace {
	e.t.Helper()
	opts := e.opts
	if mod != nil {
		mod(&opts)
	}
	ws, err := workspace.New(e.db, e.client, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return ws
}

func (e *env) mirror(uid string) string {
	e.t.Helper()
	root, err := e.ws.UserRoot(uid)
	if err != nil {
		e.t.Fatal(err)
	}
	return root
}

func (e *env) writeLocal(uid, rel, content string) {
	e.t.Helper()
	p := filepath.Join(e.mirror(uid), filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) readLocal(uid, rel string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(e.mirror(uid), filepath.FromSlash(rel)))
	if err != nil {
		return "", false
	}
	return string(b), true
}

func (e *env) removeLocal(uid, rel string) {
	e.t.Helper()
	if err := os.RemoveAll(filepath.Join(e.mirror(uid), filepath.FromSlash(rel))); err != nil {
		e.t.Fatal(err)
	}
}

// localTree lists the mirror like davtest's Tree lists the server.
func (e *env) localTree(uid string) []string {
	e.t.Helper()
	base := e.mirror(uid)
	var out []string
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(base, p)
		if r == "." {
			return nil
		}
		r = filepath.ToSlash(r)
		if d.IsDir() {
			r += "/"
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func (e *env) state(key string) map[string]string {
	e.t.Helper()
	rows, err := e.db.Read.Query(`SELECT path, etag, local_hash, size FROM sync_state WHERE user_id = ?`, key)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var p, etag, hash string
		var size int64
		if err := rows.Scan(&p, &etag, &hash, &size); err != nil {
			e.t.Fatal(err)
		}
		out[p] = etag + "|" + hash
	}
	return out
}

func (e *env) sync(uid string) workspace.Report {
	e.t.Helper()
	rep, err := e.ws.Push(context.Background(), uid)
	if err != nil {
		e.t.Fatalf("sync %s: %v", uid, err)
	}
	return rep
}

func (e *env) provision(uid string) {
	e.t.Helper()
	if err := e.ws.Provision(context.Background(), uid); err != nil {
		e.t.Fatalf("provision %s: %v", uid, err)
	}
}

// remoteTree is the server's tree below /Users/{uid}.
func (e *env) remoteTree(uid string) []string { return e.srv.Tree("Users/" + uid) }

func remoteFile(e *env, uid, rel string) (string, bool) {
	return e.srv.ReadFile("Users/" + uid + "/" + rel)
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

func assertNoChange(t *testing.T, rep workspace.Report) {
	t.Helper()
	if rep.Changed() {
		t.Fatalf("sync changed something: %+v", rep)
	}
}

var skeleton = []string{
	"inbox/", "istota/", "istota/config/", "istota/config/BRIEFINGS.md", "istota/config/CRON.md",
	"istota/config/HEARTBEAT.md", "istota/config/PERSONA.md", "istota/config/TASKS.md", "istota/config/USER.md",
	"istota/exports/", "memories/", "scripts/", "shared/",
}

func TestProvisionIsIdempotentAndKeepsEdits(t *testing.T) {
	e := newEnv(t, nil)
	e.provision("alice")

	if got := e.remoteTree("alice"); !reflect.DeepEqual(got, skeleton) {
		t.Fatalf("remote tree after provisioning:\n got %q\nwant %q", got, skeleton)
	}
	persona, _ := remoteFile(e, "alice", "istota/config/PERSONA.md")
	if !strings.Contains(persona, "helpful, precise assistant") {
		t.Fatalf("PERSONA.md not seeded with the default persona: %q", persona)
	}
	shares := e.srv.Shares()
	if len(shares) != 1 || shares[0].Path != "/Users/alice/istota" || shares[0].ShareWith != "alice" || shares[0].Permissions != webdav.PermEdit {
		t.Fatalf("shares = %+v, want {bot}/ shared with alice, edit rights", shares)
	}

	// The user edits a seeded file and deletes another; a restarted sidecar provisions
	// again on first contact.
	e.srv.WriteFile("Users/alice/istota/config/USER.md", "# Me\nI like tea.\n")
	before := e.srv.Snapshot("Users/alice")
	e.srv.Requests()
	e.ws = e.newWorkspace()
	e.provision("alice")
	if after := e.srv.Snapshot("Users/alice"); !reflect.DeepEqual(before, after) {
		t.Fatalf("second provisioning changed files:\nbefore %v\nafter  %v", before, after)
	}
	if n := len(e.srv.Shares()); n != 1 {
		t.Fatalf("%d shares after provisioning twice, want 1", n)
	}
	var posts int
	for _, r := range e.srv.Requests() {
		if strings.HasPrefix(r, "POST ") {
			posts++
		}
	}
	if posts != 0 {
		t.Fatalf("second provisioning created %d shares", posts)
	}

	// Within one process, a provisioned user costs nothing.
	e.provision("alice")
	if reqs := e.srv.Requests(); len(reqs) != 0 {
		t.Fatalf("provisioning a known user sent requests: %q", reqs)
	}

	// A second user gets their own tree and share.
	e.provision("bob")
	if n := len(e.srv.Shares()); n != 2 {
		t.Fatalf("%d shares, want 2", n)
	}
}

func TestProvisionChannel(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if err := e.ws.ProvisionChannel(ctx, "abc123xy"); err != nil {
		t.Fatal(err)
	}
	e.srv.WriteFile("Channels/abc123xy/CHANNEL.md", "We plan the trip here.\n")
	e.ws = e.newWorkspace()
	if err := e.ws.ProvisionChannel(ctx, "abc123xy"); err != nil {
		t.Fatal(err)
	}
	if got := e.srv.Tree("Channels/abc123xy"); !reflect.DeepEqual(got, []string{"CHANNEL.md", "memories/"}) {
		t.Fatalf("channel tree = %q", got)
	}
	if got, _ := e.srv.ReadFile("Channels/abc123xy/CHANNEL.md"); got != "We plan the trip here.\n" {
		t.Fatalf("CHANNEL.md overwritten: %q", got)
	}
	if len(e.srv.Shares()) != 0 {
		t.Fatal("a channel folder was shared")
	}
	// The channel mirror syncs like a user's.
	rep, err := e.ws.PullChannel(ctx, "abc123xy")
	if err != nil {
		t.Fatal(err)
	}
	root, _ := e.ws.ChannelRoot("abc123xy")
	if b, err := os.ReadFile(filepath.Join(root, "CHANNEL.md")); err != nil || string(b) != "We plan the trip here.\n" {
		t.Fatalf("channel mirror CHANNEL.md = %q, %v (report %+v)", b, err, rep)
	}
	if err := os.WriteFile(filepath.Join(root, "memories", "2026-03-04.md"), []byte("- decided on Lisbon\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ws.PushChannel(ctx, "abc123xy"); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.srv.ReadFile("Channels/abc123xy/memories/2026-03-04.md"); got != "- decided on Lisbon\n" {
		t.Fatalf("channel memory not pushed: %q", got)
	}
}

func TestRefusesBadIDs(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	for _, id := range []string{"", ".", "..", "a/b", "../alice", "x\ny"} {
		if err := e.ws.Provision(ctx, id); err == nil {
			t.Errorf("Provision(%q) accepted", id)
		}
		if _, err := e.ws.Pull(ctx, id); err == nil {
			t.Errorf("Pull(%q) accepted", id)
		}
		if err := e.ws.ProvisionChannel(ctx, id); err == nil {
			t.Errorf("ProvisionChannel(%q) accepted", id)
		}
	}
	if reqs := e.srv.Requests(); len(reqs) != 0 {
		t.Fatalf("bad ids sent requests: %q", reqs)
	}
}

func TestPullAndPushBothWays(t *testing.T) {
	e := newEnv(t, nil)
	e.provision("alice")

	rep, err := e.ws.Pull(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Downloaded) != 6 {
		t.Fatalf("first pull downloaded %q, want the six seeds", rep.Downloaded)
	}
	if got := e.localTree("alice"); !reflect.DeepEqual(got, skeleton) {
		t.Fatalf("mirror after first pull:\n got %q\nwant %q", got, skeleton)
	}
	assertNoChange(t, e.sync("alice"))

	// The agent works in the mirror.
	e.writeLocal("alice", "istota/exports/report.md", "# Report\n")
	e.writeLocal("alice", "istota/config/USER.md", "Prefers short answers.\n")
	e.writeLocal("alice", "scripts/tools/run.sh", "echo hi\n")
	rep = e.sync("alice")
	if want := []string{"istota/config/USER.md", "istota/exports/report.md", "scripts/tools/run.sh"}; !reflect.DeepEqual(sorted(rep.Uploaded), want) {
		t.Fatalf("uploaded %q, want %q", rep.Uploaded, want)
	}
	for rel, want := range map[string]string{
		"istota/exports/report.md": "# Report\n",
		"istota/config/USER.md":    "Prefers short answers.\n",
		"scripts/tools/run.sh":     "echo hi\n",
	} {
		if got, ok := remoteFile(e, "alice", rel); !ok || got != want {
			t.Errorf("remote %s = %q %v, want %q", rel, got, ok, want)
		}
	}
	e.srv.Requests()
	assertNoChange(t, e.sync("alice"))
	for _, r := range e.srv.Requests() {
		if !strings.HasPrefix(r, "PROPFIND ") {
			t.Fatalf("an unchanged tree cost more than a listing: %s", r)
		}
	}

	// The user edits in Nextcloud.
	e.srv.WriteFile("Users/alice/istota/config/PERSONA.md", "Be terse.\n")
	e.srv.WriteFile("Users/alice/inbox/letter.txt", "Dear Alice")
	rep, err = e.ws.Pull(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"inbox/letter.txt", "istota/config/PERSONA.md"}; !reflect.DeepEqual(sorted(rep.Downloaded), want) {
		t.Fatalf("downloaded %q, want %q", rep.Downloaded, want)
	}
	if got, _ := e.readLocal("alice", "istota/config/PERSONA.md"); got != "Be terse.\n" {
		t.Fatalf("local PERSONA.md = %q", got)
	}
	if got, _ := e.readLocal("alice", "inbox/letter.txt"); got != "Dear Alice" {
		t.Fatalf("local letter = %q", got)
	}
	if !reflect.DeepEqual(e.localTree("alice"), e.remoteTree("alice")) {
		t.Fatalf("trees differ:\nlocal  %q\nremote %q", e.localTree("alice"), e.remoteTree("alice"))
	}
	// Everything the trees hold is recorded, and nothing else.
	st := e.state("alice")
	for _, p := range e.remoteTree("alice") {
		if _, ok := st[p]; !ok {
			t.Errorf("no sync state for %s", p)
		}
	}
	if len(st) != len(e.remoteTree("alice")) {
		t.Errorf("%d state rows for %d paths", len(st), len(e.remoteTree("alice")))
	}
}

func TestDeletesBothWays(t *testing.T) {
	e := newEnv(t, nil)
	e.provision("alice")
	e.writeLocal("alice", "scripts/old/a.sh", "a")
	e.writeLocal("alice", "scripts/old/deep/b.sh", "b")
	e.writeLocal("alice", "memories/2026-01-01.md", "old memory")
	e.writeLocal("alice", "shared/doc.txt", "doc")
	e.sync("alice")

	// Deleted here, unchanged there: deleted there.
	e.removeLocal("alice", "memories/2026-01-01.md")
	e.removeLocal("alice", "scripts/old")
	rep := e.sync("alice")
	if want := []string{"memories/2026-01-01.md", "scripts/old/", "scripts/old/a.sh", "scripts/old/deep/", "scripts/old/deep/b.sh"}; !reflect.DeepEqual(sorted(rep.DeletedRemote), want) {
		t.Fatalf("deleted remotely %q, want %q", rep.DeletedRemote, want)
	}
	if _, ok := e.srv.ReadFile("Users/alice/scripts/old/a.sh"); ok {
		t.Fatal("remote file survived its local deletion")
	}

	// Deleted there, unchanged here: deleted here.
	e.srv.Remove("Users/alice/shared/doc.txt")
	e.srv.Remove("Users/alice/istota/exports")
	rep = e.sync("alice")
	if want := []string{"shared/doc.txt"}; !reflect.DeepEqual(rep.DeletedLocal, want) {
		t.Fatalf("deleted locally %q, want %q", rep.DeletedLocal, want)
	}
	// exports/ is part of every user's layout: recreated, not deleted.
	if !reflect.DeepEqual(e.localTree("alice"), e.remoteTree("alice")) || !contains(e.remoteTree("alice"), "istota/exports/") {
		t.Fatalf("trees after deletes:\nlocal  %q\nremote %q", e.localTree("alice"), e.remoteTree("alice"))
	}
	for p := range e.state("alice") {
		if strings.HasPrefix(p, "scripts/old") || p == "shared/doc.txt" || p == "memories/2026-01-01.md" {
			t.Errorf("state kept for deleted %s", p)
		}
	}

	// An edit beats a deletion, both ways.
	e.writeLocal("alice", "shared/keep-local.md", "v1")
	e.srv.WriteFile("Users/alice/shared/keep-remote.md", "v1")
	e.sync("alice")
	e.writeLocal("alice", "shared/keep-local.md", "v2 local edit")
	e.srv.Remove("Users/alice/shared/keep-local.md")
	e.srv.WriteFile("Users/alice/shared/keep-remote.md", "v2 remote edit")
	e.removeLocal("alice", "shared/keep-remote.md")
	e.sync("alice")
	if got, _ := remoteFile(e, "alice", "shared/keep-local.md"); got != "v2 local edit" {
		t.Fatalf("local edit of a remotely deleted file lost: remote has %q", got)
	}
	if got, _ := e.readLocal("alice", "shared/keep-remote.md"); got != "v2 remote edit" {
		t.Fatalf("remote edit of a locally deleted file lost: local has %q", got)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestConflictKeepsBothCopiesOnBothSides(t *testing.T) {
	e := newEnv(t, nil)
	e.provision("alice")
	e.writeLocal("alice", "shared/plan.md", "base\n")
	e.writeLocal("alice", "shared/.notes", "base\n")
	e.sync("alice")

	e.srv.WriteFile("Users/alice/shared/plan.md", "edited in Nextcloud\n")
	e.writeLocal("alice", "shared/plan.md", "edited by the agent\n")
	e.srv.WriteFile("Users/alice/shared/.notes", "remote\n")
	e.writeLocal("alice", "shared/.notes", "local\n")
	// The same new file on both sides with different content is a conflict too.
	e.srv.WriteFile("Users/alice/inbox/new.txt", "theirs")
	e.writeLocal("alice", "inbox/new.txt", "ours")
	// Both sides made the same edit: no conflict.
	e.srv.WriteFile("Users/alice/istota/config/TASKS.md", "- [ ] same\n")
	e.writeLocal("alice", "istota/config/TASKS.md", "- [ ] same\n")

	rep := e.sync("alice")
	want := []workspace.Conflict{
		{Path: "inbox/new.txt", Copy: "inbox/new (conflict testhost 2026-03-04 0506).txt"},
		{Path: "shared/.notes", Copy: "shared/.notes (conflict testhost 2026-03-04 0506)"},
		{Path: "shared/plan.md", Copy: "shared/plan (conflict testhost 2026-03-04 0506).md"},
	}
	if !reflect.DeepEqual(rep.Conflicts, want) {
		t.Fatalf("conflicts:\n got %+v\nwant %+v", rep.Conflicts, want)
	}
	for _, c := range []struct{ path, remote, local string }{
		{"shared/plan.md", "edited in Nextcloud\n", "edited by the agent\n"},
		{"shared/.notes", "remote\n", "local\n"},
		{"inbox/new.txt", "theirs", "ours"},
	} {
		var cp string
		for _, w := range want {
			if w.Path == c.path {
				cp = w.Copy
			}
		}
		for side, read := range map[string]func(string) (string, bool){
			"local":  func(p string) (string, bool) { return e.readLocal("alice", p) },
			"remote": func(p string) (string, bool) { return remoteFile(e, "alice", p) },
		} {
			if got, _ := read(c.path); got != c.remote {
				t.Errorf("%s %s = %q, want Nextcloud's %q", side, c.path, got, c.remote)
			}
			if got, _ := read(cp); got != c.local {
				t.Errorf("%s %s = %q, want the local edit %q", side, cp, got, c.local)
			}
		}
	}
	if got, _ := remoteFile(e, "alice", "istota/config/TASKS.md"); got != "- [ ] same\n" {
		t.Fatalf("TASKS.md = %q", got)
	}
	if contains(e.remoteTree("alice"), "istota/config/TASKS (conflict testhost 2026-03-04 0506).md") {
		t.Fatal("identical edits made a conflict copy")
	}
	// Settled: the next sync has nothing to do.
	assertNoChange(t, e.sync("alice"))
	if !reflect.DeepEqual(e.localTree("alice"), e.remoteTree("alice")) {
		t.Fatalf("trees differ after a conflict:\nlocal  %q\nremote %q", e.localTree("alice"), e.remoteTree("alice"))
	}

	// A second conflict on the same path in the same minute gets its own name.
	e.srv.WriteFile("Users/alice/shared/plan.md", "again remote\n")
	e.writeLocal("alice", "shared/plan.md", "again local\n")
	rep = e.sync("alice")
	if len(rep.Conflicts) != 1 || rep.Conflicts[0].Copy != "shared/plan (conflict testhost 2026-03-04 0506 2).md" {
		t.Fatalf("second conflict = %+v", rep.Conflicts)
	}
	if got, _ := remoteFile(e, "alice", "shared/plan (conflict testhost 2026-03-04 0506).md"); got != "edited by the agent\n" {
		t.Fatalf("first conflict copy overwritten: %q", got)
	}
}

func TestConditionalUploadRefusedBecomesConflict(t *testing.T) {
	e := newEnv(t, nil)
	e.provision("alice")
	e.writeLocal("alice", "istota/exports/draft.md", "v1\n")
	e.sync("alice")

	e.writeLocal("alice", "istota/exports/draft.md", "v2 by the agent\n")
	// The user saves in Nextcloud after the listing, just before the upload lands.
	e.srv.BeforeRequest(func(r *http.Request) {
		if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/istota/exports/draft.md") {
			e.srv.BeforeRequest(nil)
			e.srv.WriteFile("Users/alice/istota/exports/draft.md", "v2 by the user\n")
		}
	})
	rep := e.sync("alice")
	if len(rep.Conflicts) != 1 || rep.Conflicts[0].Path != "istota/exports/draft.md" {
		t.Fatalf("conflicts = %+v, want one for draft.md", rep.Conflicts)
	}
	cp := rep.Conflicts[0].Copy
	for side, read := range map[string]func(string) (string, bool){
		"local":  func(p string) (string, bool) { return e.readLocal("alice", p) },
		"remote": func(p string) (string, bool) { return remoteFile(e, "alice", p) },
	} {
		if got, _ := read("istota/exports/draft.md"); got != "v2 by the user\n" {
			t.Errorf("%s draft.md = %q, want the user's edit", side, got)
		}
		if got, _ := read(cp); got != "v2 by the agent\n" {
			t.Errorf("%s %s = %q, want the agent's edit", side, cp, got)
		}
	}
	assertNoChange(t, e.sync("alice"))
}

func TestOnlyETagMovedIsNotAConflict(t *testing.T) {
	e := newEnv(t, nil)
	e.provision("alice")
	e.writeLocal("alice", "shared/a.md", "v1")
	e.sync("alice")
	// Nextcloud re-tags files without a content change (a rescan, a metadata edit);
	// the recorded ETag no longer matches although the content is the same.
	if _, err := e.db.Write.Exec(`UPDATE sync_state SET etag = 'retagged' WHERE user_id = 'alice' AND path = 'shared/a.md'`); err != nil {
		t.Fatal(err)
	}
	e.writeLocal("alice", "shared/a.md", "v2 local")
	rep := e.sync("alice")
	if len(rep.Conflicts) != 0 || !reflect.DeepEqual(rep.Uploaded, []string{"shared/a.md"}) {
		t.Fatalf("report = %+v, want a plain upload", rep)
	}
	if got, _ := remoteFile(e, "alice", "shared/a.md"); got != "v2 local" {
		t.Fatalf("remote = %q", got)
	}
}

func TestUnreachableNextcloudLosesNothing(t *testing.T) {
	e := newEnv(t, nil)
	e.provision("alice")
	e.sync("alice")
	e.writeLocal("alice", "istota/exports/result.md", "work done while Nextcloud was down\n")
	e.writeLocal("alice", "istota/config/USER.md", "edited\n")
	e.removeLocal("alice", "istota/config/TASKS.md")
	stateBefore := e.state("alice")
	treeBefore := e.localTree("alice")

	e.srv.Close()
	for name, call := range map[string]func() (workspace.Report, error){
		"pull": func() (workspace.Report, error) { return e.ws.Pull(context.Background(), "alice") },
		"push": func() (workspace.Report, error) { return e.ws.Push(context.Background(), "alice") },
	} {
		rep, err := call()
		if !errors.Is(err, webdav.ErrUnavailable) {
			t.Fatalf("%s: err = %v, want ErrUnavailable", name, err)
		}
		if rep.Changed() {
			t.Fatalf("%s changed something while Nextcloud was down: %+v", name, rep)
		}
		if strings.Contains(err.Error(), botPassword) {
			t.Fatalf("%s: error leaks the password: %v", name, err)
		}
	}
	if got := e.localTree("alice"); !reflect.DeepEqual(got, treeBefore) {
		t.Fatalf("mirror changed while Nextcloud was down:\nbefore %q\nafter  %q", treeBefore, got)
	}
	if got, _ := e.readLocal("alice", "istota/exports/result.md"); got != "work done while Nextcloud was down\n" {
		t.Fatalf("local work lost: %q", got)
	}
	if got := e.state("alice"); !reflect.DeepEqual(got, stateBefore) {
		t.Fatalf("sync state changed while Nextcloud was down")
	}

	if got := e.ws.Unsynced(); !reflect.DeepEqual(got, []string{"alice"}) {
		t.Fatalf("Unsynced = %q, want alice", got)
	}
	// Still down: the retry fails the same way and keeps alice pending.
	if err := e.ws.RetryFailed(context.Background()); !errors.Is(err, webdav.ErrUnavailable) {
		t.Fatalf("retry while down: %v", err)
	}

	e.srv.Restart()
	if err := e.ws.RetryFailed(context.Background()); err != nil {
		t.Fatalf("retry after recovery: %v", err)
	}
	if got := e.ws.Unsynced(); len(got) != 0 {
		t.Fatalf("Unsynced after recovery = %q", got)
	}
	for rel, want := range map[string]string{
		"istota/exports/result.md": "work done while Nextcloud was down\n",
		"istota/config/USER.md":    "edited\n",
	} {
		if got, _ := remoteFile(e, "alice", rel); got != want {
			t.Fatalf("remote %s after recovery = %q, want %q", rel, got, want)
		}
	}
	if _, ok := remoteFile(e, "alice", "istota/config/TASKS.md"); ok {
		t.Fatal("local deletion not applied after recovery")
	}
	assertNoChange(t, e.sync("alice"))
}

func TestFailedPathsAreListedAndRetried(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		// With an outage every later remote operation is held back too; a refusal
		// concerns one path only.
		wantFailed   []string
		wantUploaded []string
	}{
		{"outage", http.StatusServiceUnavailable, []string{"shared/b.md", "shared/c.md"}, []string{"shared/a.md"}},
		{"refused", http.StatusForbidden, []string{"shared/b.md"}, []string{"shared/a.md", "shared/c.md"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.provision("alice")
			e.sync("alice")
			for _, f := range []string{"a", "b", "c"} {
				e.writeLocal("alice", "shared/"+f+".md", f)
			}
			e.srv.FailWith(func(r *http.Request) int {
				if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/shared/b.md") {
					return tc.status
				}
				return 0
			})
			rep, err := e.ws.Push(context.Background(), "alice")
			var se *workspace.SyncError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want *SyncError", err)
			}
			if got := se.Paths(); !reflect.DeepEqual(got, tc.wantFailed) {
				t.Fatalf("failed paths %q, want %q (%v)", got, tc.wantFailed, err)
			}
			if !strings.Contains(err.Error(), "shared/b.md") {
				t.Fatalf("error does not name the path: %v", err)
			}
			if !reflect.DeepEqual(sorted(rep.Uploaded), tc.wantUploaded) {
				t.Fatalf("uploaded %q, want %q", rep.Uploaded, tc.wantUploaded)
			}
			st := e.state("alice")
			for _, p := range tc.wantFailed {
				if _, ok := st[p]; ok {
					t.Errorf("state advanced for failed %s", p)
				}
			}
			if got, _ := e.readLocal("alice", "shared/b.md"); got != "b" {
				t.Fatalf("local b.md = %q", got)
			}

			e.srv.FailWith(nil)
			rep = e.sync("alice")
			if !reflect.DeepEqual(sorted(rep.Uploaded), tc.wantFailed) {
				t.Fatalf("retry uploaded %q, want %q", rep.Uploaded, tc.wantFailed)
			}
			if got, _ := remoteFile(e, "alice", "shared/b.md"); got != "b" {
				t.Fatalf("remote b.md after retry = %q", got)
			}
		})
	}
}

func TestHostileRemoteNamesAreRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.provision("alice")
	// A real file whose name holds a newline, and entries no file system could hold.
	e.srv.WriteFile("Users/alice/inbox/evil\nname.md", "x")
	entry := func(href string) string {
		return `<response><href>` + href + `</href><propstat><prop><resourcetype></resourcetype><getcontentlength>4</getcontentlength><getetag>"e"</getetag></prop><status>HTTP/1.1 200 OK</status></propstat></response>`
	}
	e.srv.InjectPropfind(
		entry("/remote.php/dav/files/istota/Users/alice/../../../../../../tmp/istota-escape"),
		entry("/remote.php/dav/files/istota/Users/alice/inbox/..%2F..%2F..%2Fescape.md"),
		entry("/etc/passwd"),
		entry("/remote.php/dav/files/istota/Users/bob/secret.md"),
		entry("/remote.php/dav/files/istota/Users/alice/inbox/"+strings.Repeat("L", 300)+".md"),
		entry("/remote.php/dav/files/istota/Users/alice/inbox/tab%09name.md"),
		entry("/remote.php/dav/files/istota/Users/alice/inbox/back%5Cslash.md"),
	)
	rep, err := e.ws.Pull(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Skipped) < 7 {
		t.Fatalf("skipped %+v, want every hostile entry", rep.Skipped)
	}
	for _, s := range rep.Skipped {
		if !strings.Contains(s.Reason, "refused name") {
			t.Errorf("skip %q: %s", s.Path, s.Reason)
		}
	}
	for _, r := range e.srv.Requests() {
		if strings.HasPrefix(r, "GET /remote.php/") && !strings.Contains(r, "/istota/config/") {
			t.Fatalf("downloaded a refused entry: %s", r)
		}
	}
	// Nothing but the seeded layout reached the disk, inside or outside the mirror.
	if got := e.localTree("alice"); !reflect.DeepEqual(got, skeleton) {
		t.Fatalf("mirror = %q", got)
	}
	if _, err := os.Stat("/tmp/istota-escape"); err == nil {
		t.Fatal("a file was written outside the mirror")
	}
	var outside []string
	filepath.WalkDir(e.data, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(p, e.mirror("alice")+string(filepath.Separator)) {
			outside = append(outside, p)
		}
		return nil
	})
	if len(outside) != 0 {
		t.Fatalf("files outside the mirror: %q", outside)
	}
	// The refused real file is never deleted for being refused.
	e.sync("alice")
	if _, ok := e.srv.ReadFile("Users/alice/inbox/evil\nname.md"); !ok {
		t.Fatal("a refused remote file was deleted")
	}
}

func TestLimitsAndLocalSpecialFiles(t *testing.T) {
	e := newEnv(t, func(o *workspace.Options) { o.MaxFileBytes = 1000 })
	e.provision("alice")
	e.sync("alice")
	big := strings.Repeat("x", 1500)
	e.srv.WriteFile("Users/alice/inbox/big-remote.bin", big)
	e.writeLocal("alice", "istota/exports/big-local.bin", big)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("sidecar secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(e.mirror("alice"), "istota", "exports", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(e.mirror("alice"), "scripts", "etc")); err != nil {
		t.Fatal(err)
	}
	e.writeLocal("alice", "inbox/bad\nname.txt", "a name Nextcloud would refuse")
	rep := e.sync("alice")
	if rep.Changed() {
		t.Fatalf("limits: sync changed %+v", rep)
	}
	skipped := map[string]string{}
	for _, s := range rep.Skipped {
		skipped[s.Path] = s.Reason
	}
	for p, want := range map[string]string{
		"inbox/big-remote.bin":         "limit",
		"istota/exports/big-local.bin": "limit",
		"istota/exports/link":          "symbolic link",
		"scripts/etc":                  "symbolic link",
		"inbox/bad\nname.txt":          "name cannot be synced",
	} {
		if !strings.Contains(skipped[p], want) {
			t.Errorf("skip reason for %s = %q, want %q", p, skipped[p], want)
		}
	}
	if _, ok := e.readLocal("alice", "inbox/big-remote.bin"); ok {
		t.Error("oversized remote file downloaded")
	}
	for _, p := range []string{"istota/exports/big-local.bin", "istota/exports/link", "scripts/etc", "inbox/bad\nname.txt"} {
		if _, ok := remoteFile(e, "alice", p); ok {
			t.Errorf("%s uploaded", p)
		}
	}
	if _, ok := e.srv.ReadFile("Users/alice/inbox/big-remote.bin"); !ok {
		t.Error("oversized remote file deleted")
	}
}

func TestTypeClashIsLeftAlone(t *testing.T) {
	e := newEnv(t, nil)
	e.provision("alice")
	e.sync("alice")
	e.srv.WriteFile("Users/alice/shared/notes/a.md", "remote folder")
	e.writeLocal("alice", "shared/notes", "local file")
	rep := e.sync("alice")
	if len(rep.Skipped) != 1 || rep.Skipped[0].Path != "shared/notes" {
		t.Fatalf("skipped %+v", rep.Skipped)
	}
	if got, _ := e.readLocal("alice", "shared/notes"); got != "local file" {
		t.Fatalf("local file = %q", got)
	}
	if got, _ := remoteFile(e, "alice", "shared/notes/a.md"); got != "remote folder" {
		t.Fatalf("remote file = %q", got)
	}
}

func TestWipedMirrorIsRestoredNotPropagated(t *testing.T) {
	e := newEnv(t, nil)
	e.provision("alice")
	e.writeLocal("alice", "memories/2026-01-01.md", "memory")
	e.sync("alice")
	before := e.srv.Snapshot("Users/alice")

	if err := os.RemoveAll(e.mirror("alice")); err != nil {
		t.Fatal(err)
	}
	rep, err := e.ws.Pull(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.DeletedRemote) != 0 {
		t.Fatalf("a wiped mirror deleted files in Nextcloud: %q", rep.DeletedRemote)
	}
	if after := e.srv.Snapshot("Users/alice"); !reflect.DeepEqual(before, after) {
		t.Fatal("remote changed after the mirror was wiped")
	}
	if got, _ := e.readLocal("alice", "memories/2026-01-01.md"); got != "memory" {
		t.Fatalf("mirror not restored: %q", got)
	}
	assertNoChange(t, e.sync("alice"))
}

// host is another sidecar sharing the database and Nextcloud, with its own mirrors.
type host struct {
	ws   *workspace.Workspace
	data string
}

func (e *env) otherHost(mirror string) *host {
	e.t.Helper()
	h := &host{data: e.t.TempDir()}
	opts := e.opts
	opts.Mirror = mirror
	opts.UserMirror = func(uid string) string { return filepath.Join(h.data, "users", uid, "workspace") }
	opts.ChannelMirror = func(token string) string { return filepath.Join(h.data, "channels", token) }
	ws, err := workspace.New(e.db, e.client, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	h.ws = ws
	return h
}

func (h *host) file(uid, rel string) string {
	return filepath.Join(h.data, "users", uid, "workspace", filepath.FromSlash(rel))
}

func (h *host) write(t *testing.T, uid, rel, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(h.file(uid, rel)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.file(uid, rel), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (h *host) pull(t *testing.T, uid string) workspace.Report {
	t.Helper()
	rep, err := h.ws.Pull(context.Background(), uid)
	if err != nil {
		t.Fatalf("pull %s: %v", uid, err)
	}
	return rep
}

func (h *host) push(t *testing.T, uid string) workspace.Report {
	t.Helper()
	rep, err := h.ws.Push(context.Background(), uid)
	if err != nil {
		t.Fatalf("push %s: %v", uid, err)
	}
	return rep
}

// Two hosts sharing one database each keep their own mirror: what one agreed with
// Nextcloud must not be read as the other's. Host B, whose copy is older, once took host
// A's records for its own: it uploaded its old a.md over A's edit and deleted the file A
// made.
func TestHostsSharingTheDatabaseKeepTheirOwnRecords(t *testing.T) {
	e := newEnv(t, nil)
	e.provision("alice")
	e.srv.WriteFile("Users/alice/notes/a.md", "v1")
	e.srv.WriteFile("Users/alice/notes/gone.md", "delete me")
	a, b := e.otherHost("host-a"), e.otherHost("host-b")
	b.pull(t, "alice")
	a.pull(t, "alice")

	// A task on host A edits a.md, makes c.md and deletes gone.md.
	a.write(t, "alice", "notes/a.md", "v2 by host A")
	a.write(t, "alice", "notes/c.md", "made by host A")
	if err := os.Remove(a.file("alice", "notes/gone.md")); err != nil {
		t.Fatal(err)
	}
	if rep := a.push(t, "alice"); len(rep.Uploaded) != 2 || len(rep.DeletedRemote) != 1 {
		t.Fatalf("host A's push: %+v", rep)
	}

	// The next task runs on host B: it gets all of that.
	rep := b.pull(t, "alice")
	if len(rep.Uploaded) != 0 || len(rep.DeletedRemote) != 0 || len(rep.Conflicts) != 0 {
		t.Fatalf("host B's pull changed Nextcloud: %+v", rep)
	}
	if got, _ := remoteFile(e, "alice", "notes/a.md"); got != "v2 by host A" {
		t.Fatalf("remote a.md = %q: host B undid host A's edit", got)
	}
	if _, ok := remoteFile(e, "alice", "notes/c.md"); !ok {
		t.Fatal("host B deleted the file host A made")
	}
	for rel, want := range map[string]string{"notes/a.md": "v2 by host A", "notes/c.md": "made by host A"} {
		if got, err := os.ReadFile(b.file("alice", rel)); err != nil || string(got) != want {
			t.Fatalf("host B's %s = %q (%v), want %q", rel, got, err, want)
		}
	}
	if _, err := os.Stat(b.file("alice", "notes/gone.md")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("host B kept the file host A deleted: %v", err)
	}

	// And back: host B edits, host A pulls it without sending anything.
	b.write(t, "alice", "notes/a.md", "v3 by host B")
	b.push(t, "alice")
	if rep := a.pull(t, "alice"); len(rep.Uploaded) != 0 || len(rep.Downloaded) != 1 {
		t.Fatalf("host A's pull: %+v", rep)
	}
	if got, _ := remoteFile(e, "alice", "notes/a.md"); got != "v3 by host B" {
		t.Fatalf("remote a.md = %q", got)
	}
}

// Records kept before each mirror had its own (mirror "") are taken over by a named
// mirror only where they hold for it: a host whose mirror is exactly as recorded (one
// PostgreSQL host upgrading) sends and fetches nothing, and a host with other copies
// loses none of them.
func TestSharedRecordsAreTakenOverOnlyWhereTheyHold(t *testing.T) {
	e := newEnv(t, nil)
	e.provision("alice")
	e.srv.WriteFile("Users/alice/notes/a.md", "v1")
	e.srv.WriteFile("Users/alice/notes/b.md", "b")
	e.sync("alice") // records under mirror '', as before the upgrade

	// The same mirror, now named: nothing to do.
	same := e.newWorkspaceWith(func(o *workspace.Options) { o.Mirror = "upgraded" })
	rep, err := same.Pull(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	assertNoChange(t, rep)
	var taken int
	if err := e.db.Read.QueryRow(`SELECT count(*) FROM sync_state WHERE mirror = 'upgraded' AND user_id = 'alice'`).Scan(&taken); err != nil || taken == 0 {
		t.Fatalf("records taken over: %d (%v)", taken, err)
	}
	assertNoChange(t, e.sync("alice")) // the unnamed mirror's records are still its own

	// Another host with an older a.md, no b.md and a file of its own.
	other := e.otherHost("other")
	other.write(t, "alice", "notes/a.md", "old")
	other.write(t, "alice", "notes/mine.md", "mine")
	rep = other.pull(t, "alice")
	if len(rep.DeletedRemote) != 0 || len(rep.DeletedLocal) != 0 {
		t.Fatalf("a pull with records that do not hold deleted files: %+v", rep)
	}
	if got, _ := remoteFile(e, "alice", "notes/a.md"); got != "v1" {
		t.Fatalf("remote a.md = %q, want v1 kept", got)
	}
	if got, _ := remoteFile(e, "alice", "notes/b.md"); got != "b" {
		t.Fatalf("remote b.md = %q", got)
	}
	if len(rep.Conflicts) != 1 || rep.Conflicts[0].Path != "notes/a.md" {
		t.Fatalf("conflicts = %+v, want the older a.md kept as a copy", rep.Conflicts)
	}
	copyOf, ok := remoteFile(e, "alice", rep.Conflicts[0].Copy)
	if !ok || copyOf != "old" {
		t.Fatalf("conflict copy in Nextcloud = %q (%v)", copyOf, ok)
	}
	if got, _ := remoteFile(e, "alice", "notes/mine.md"); got != "mine" {
		t.Fatalf("the other host's own file was not sent: %q", got)
	}
	if got, err := os.ReadFile(other.file("alice", "notes/b.md")); err != nil || string(got) != "b" {
		t.Fatalf("b.md on the other host = %q (%v)", got, err)
	}
}

// After a sync the next ones read the tree's records from memory, and what they write
// still reaches the database: with the read handle closed, a task's edit is sent, and a
// restarted sidecar, reading the database, finds nothing left to do.
func TestSyncRecordsAreKeptInMemoryAndWrittenThrough(t *testing.T) {
	e := newEnv(t, nil)
	e.provision("alice")
	e.srv.WriteFile("Users/alice/notes/a.md", "v1")
	e.sync("alice")
	ctx := context.Background()

	read := e.db.Read
	closed, err := sql.Open("sqlite3", "file:"+filepath.Join(t.TempDir(), "closed.db"))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	e.db.Read = closed
	defer func() { e.db.Read = read }()

	if rep, err := e.ws.Finish(ctx, "alice"); err != nil {
		t.Fatalf("after a task that changed nothing: %v", err)
	} else {
		assertNoChange(t, rep)
	}
	e.writeLocal("alice", "notes/a.md", "v2")
	e.writeLocal("alice", "notes/b.md", "new")
	rep, err := e.ws.Finish(ctx, "alice")
	if err != nil {
		t.Fatalf("after a task that edited: %v", err)
	}
	if len(rep.Uploaded) != 2 {
		t.Fatalf("uploaded %q, want a.md and b.md", rep.Uploaded)
	}
	e.srv.WriteFile("Users/alice/notes/c.md", "from Nextcloud")
	if rep, err := e.ws.Pull(ctx, "alice"); err != nil || len(rep.Downloaded) != 1 {
		t.Fatalf("pull: %+v, %v", rep, err)
	}

	e.db.Read = read
	assertNoChange(t, e.sync("alice"))
	restarted := e.newWorkspace()
	rep, err = restarted.Push(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	assertNoChange(t, rep)
}

func TestMountModeSkipsSync(t *testing.T) {
	e := newEnv(t, nil)
	e.opts.Mode = workspace.ModeMount
	e.opts.MountPath = e.srv.Root // the bot's storage, as Nextcloud keeps it on disk
	e.ws = e.newWorkspace()
	e.provision("alice")
	root, err := e.ws.UserRoot("alice")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(e.srv.Root, "Users", "alice"); root != want {
		t.Fatalf("UserRoot = %q, want %q", root, want)
	}
	if _, err := os.Stat(filepath.Join(root, "istota", "config", "PERSONA.md")); err != nil {
		t.Fatalf("provisioned files not visible in the mounted storage: %v", err)
	}
	e.srv.Requests()
	for _, call := range []func(context.Context, string) (workspace.Report, error){e.ws.Pull, e.ws.Push} {
		rep, err := call(context.Background(), "alice")
		if err != nil || rep.Changed() {
			t.Fatalf("mount mode sync: %+v %v", rep, err)
		}
	}
	if reqs := e.srv.Requests(); len(reqs) != 0 {
		t.Fatalf("mount mode sync sent requests: %q", reqs)
	}
	if len(e.state("alice")) != 0 {
		t.Fatal("mount mode recorded sync state")
	}
}

func TestNewValidatesOptions(t *testing.T) {
	e := newEnv(t, nil)
	for name, mod := range map[string]func(*workspace.Options){
		"unknown mode":       func(o *workspace.Options) { o.Mode = "rsync" },
		"relative mount":     func(o *workspace.Options) { o.Mode = workspace.ModeMount; o.MountPath = "data" },
		"no mirror function": func(o *workspace.Options) { o.UserMirror = nil },
		"bad bot folder":     func(o *workspace.Options) { o.BotDir = "../x" },
		"empty bot folder":   func(o *workspace.Options) { o.BotDir = "" },
	} {
		t.Run(name, func(t *testing.T) {
			o := e.opts
			mod(&o)
			if _, err := workspace.New(e.db, e.client, o); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
