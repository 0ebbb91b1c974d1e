package workspace_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/webdav/davtest"
	"github.com/istota/istota/sidecar/internal/workspace"
)

// propfinds returns the paths of the PROPFIND requests since the last call (Requests
// forgets what it returned).
func propfinds(srv *davtest.Server) []string {
	var out []string
	for _, r := range srv.Requests() {
		if strings.HasPrefix(r, "PROPFIND ") {
			out = append(out, strings.TrimPrefix(r, "PROPFIND /remote.php/dav/files/istota/"))
		}
	}
	return out
}

// A tree nobody changed costs one depth-0 PROPFIND; an edit deep in it costs listings of
// the folders on its path only, and is still pulled; an edit on both sides is still
// kept as a conflict copy.
func TestSyncListsOnlyChangedFolders(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	for d := 0; d < 20; d++ {
		for f := 0; f < 10; f++ {
			e.srv.WriteFile(fmt.Sprintf("Users/alice/notes/d%02d/f%02d.md", d, f), fmt.Sprintf("note %d/%d", d, f))
		}
	}
	if _, err := e.ws.Pull(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if got, ok := e.readLocal("alice", "notes/d07/f03.md"); !ok || got != "note 7/3" {
		t.Fatalf("first pull: %q %v", got, ok)
	}

	propfinds(e.srv)
	rep, err := e.ws.Pull(ctx, "alice")
	if err != nil || rep.Changed() {
		t.Fatalf("second pull: %+v %v", rep, err)
	}
	if got := propfinds(e.srv); len(got) != 1 || got[0] != "Users/alice/ depth=0" {
		t.Fatalf("an unchanged tree asked %d PROPFINDs: %v", len(got), got)
	}

	e.srv.WriteFile("Users/alice/notes/d07/f03.md", "edited in Nextcloud")
	propfinds(e.srv)
	rep, err = e.ws.Pull(ctx, "alice")
	if err != nil || len(rep.Downloaded) != 1 || rep.Downloaded[0] != "notes/d07/f03.md" {
		t.Fatalf("pull after an edit: %+v %v", rep, err)
	}
	if got, _ := e.readLocal("alice", "notes/d07/f03.md"); got != "edited in Nextcloud" {
		t.Fatalf("the edit did not arrive: %q", got)
	}
	listed := propfinds(e.srv)
	for _, p := range listed {
		if strings.Contains(p, "infinity") || (strings.Contains(p, "/d") && !strings.Contains(p, "/d07")) {
			t.Errorf("listed an unchanged folder: %s", p)
		}
	}
	if len(listed) > 5 {
		t.Errorf("an edit three folders deep cost %d PROPFINDs: %v", len(listed), listed)
	}

	// Both sides edit the same file: both versions stay.
	e.srv.WriteFile("Users/alice/notes/d11/f01.md", "server side")
	e.writeLocal("alice", "notes/d11/f01.md", "local side")
	rep, err = e.ws.Push(ctx, "alice")
	if err != nil || len(rep.Conflicts) != 1 {
		t.Fatalf("conflict: %+v %v", rep, err)
	}
	if got, _ := e.srv.ReadFile("Users/alice/notes/d11/f01.md"); got != "server side" {
		t.Errorf("the Nextcloud version was not kept: %q", got)
	}
	if got, ok := e.srv.ReadFile("Users/alice/" + rep.Conflicts[0].Copy); !ok || got != "local side" {
		t.Errorf("the local version was not kept as %s: %q", rep.Conflicts[0].Copy, got)
	}

	// A restarted sidecar trusts the remembered listing too.
	e.ws = e.newWorkspace()
	propfinds(e.srv)
	if rep, err := e.ws.Pull(ctx, "alice"); err != nil || rep.Changed() {
		t.Fatalf("pull after restart: %+v %v", rep, err)
	}
	if got := propfinds(e.srv); len(got) != 1 {
		t.Errorf("after a restart an unchanged tree asked %d PROPFINDs: %v", len(got), got)
	}
}

// A server without folder ETags is listed in full every time, and nothing is missed.
func TestSyncWithoutFolderETagsListsEverything(t *testing.T) {
	ctx := context.Background()
	e := newEnvWith(t, davtest.Options{NoFolderETags: true}, nil)
	e.srv.WriteFile("Users/alice/notes/a/b.md", "one")
	if _, err := e.ws.Pull(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	e.srv.WriteFile("Users/alice/notes/a/b.md", "two")
	if rep, err := e.ws.Pull(ctx, "alice"); err != nil || len(rep.Downloaded) != 1 {
		t.Fatalf("pull: %+v %v", rep, err)
	}
	if got, _ := e.readLocal("alice", "notes/a/b.md"); got != "two" {
		t.Fatalf("got %q", got)
	}
}

// A local edit that keeps the size is noticed (the time changed), and an unchanged
// mirror is not read again.
func TestLocalEditsAreSeenWithoutRereadingEverything(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, func(o *workspace.Options) {})
	e.writeLocal("alice", "notes/a.md", "aaaa")
	if _, err := e.ws.Push(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	backdate(t, e.mirror("alice")+"/notes/a.md", 10)
	if _, err := e.ws.Push(ctx, "alice"); err != nil { // records the hash by size and time
		t.Fatal(err)
	}
	e.writeLocal("alice", "notes/a.md", "bbbb") // same size, new time
	rep, err := e.ws.Push(ctx, "alice")
	if err != nil || len(rep.Uploaded) != 1 {
		t.Fatalf("same-size edit: %+v %v", rep, err)
	}
	if got, _ := e.srv.ReadFile("Users/alice/notes/a.md"); got != "bbbb" {
		t.Fatalf("server has %q", got)
	}
}

// backdate moves a file's time back by seconds, out of the window in which a hash is
// never trusted.
func backdate(t *testing.T, p string, seconds int) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	old := fi.ModTime().Add(-time.Duration(seconds) * time.Second)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
}

// A new user's first task asks Nextcloud one small question before it runs (is there a
// folder already?): the seed files are in the mirror, and the folders, seeds and share
// are made after the answer (Finish). After a restart a provisioned user is not
// provisioned again.
func TestNewUserIsProvisionedAfterTheFirstTask(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.srv.Requests()
	if _, err := e.ws.Prepare(ctx, "alice", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if reqs := e.srv.Requests(); len(reqs) != 1 || reqs[0] != "PROPFIND /remote.php/dav/files/istota/Users/alice/ depth=0" {
		t.Fatalf("preparing a new user asked Nextcloud: %v", reqs)
	}
	if got, ok := e.readLocal("alice", "istota/config/USER.md"); !ok || !strings.Contains(got, "USER.md") {
		t.Fatalf("no seeded USER.md in the mirror: %q", got)
	}
	e.writeLocal("alice", "istota/exports/answer.md", "written by the first task")
	if _, err := e.ws.Finish(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if got, ok := e.srv.ReadFile("Users/alice/istota/exports/answer.md"); !ok || got != "written by the first task" {
		t.Fatalf("the first task's file is not in Nextcloud: %q %v", got, ok)
	}
	if got, ok := e.srv.ReadFile("Users/alice/istota/config/USER.md"); !ok || !strings.Contains(got, "USER.md") {
		t.Fatalf("the seeds are not in Nextcloud: %v", ok)
	}
	if shares := e.srv.Shares(); len(shares) != 1 || shares[0].ShareWith != "alice" {
		t.Fatalf("shares: %+v", shares)
	}

	e.ws = e.newWorkspace() // a restart
	e.srv.Requests()
	if _, err := e.ws.Prepare(ctx, "alice", time.Time{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range e.srv.Requests() {
		if !strings.HasPrefix(r, "PROPFIND ") {
			t.Errorf("a provisioned user was provisioned again after a restart: %s", r)
		}
	}
}

// A provisioned user whose share is gone (an admin removed it, or they left it) gets it
// back from the background refresh: once per process, then at most once an hour. A
// share that is there costs one request and changes nothing.
func TestEnsureSharedSharesAgain(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	e := newEnv(t, func(o *workspace.Options) { o.Clock = func() time.Time { return now } })
	if err := e.ws.EnsureShared(ctx, "alice"); err != nil || len(e.srv.Shares()) != 0 {
		t.Fatalf("a user never provisioned: %v, shares %+v", err, e.srv.Shares())
	}
	if err := e.ws.Provision(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	e.srv.Requests()
	if err := e.ws.EnsureShared(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if reqs := e.srv.Requests(); len(reqs) != 0 {
		t.Errorf("right after Provision, EnsureShared asked Nextcloud: %v", reqs)
	}

	e.srv.RemoveSharesWith("alice")
	e.ws = e.newWorkspace() // a restart: the database says alice is provisioned
	if err := e.ws.Provision(ctx, "alice"); err != nil || len(e.srv.Shares()) != 0 {
		t.Fatalf("Provision of a provisioned user: %v, shares %+v", err, e.srv.Shares())
	}
	if err := e.ws.EnsureShared(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if shares := e.srv.Shares(); len(shares) != 1 || shares[0].ShareWith != "alice" || shares[0].Path != "/Users/alice/istota" {
		t.Fatalf("the share was not made again: %+v", shares)
	}

	e.srv.RemoveSharesWith("alice")
	e.srv.Requests()
	if err := e.ws.EnsureShared(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if reqs := e.srv.Requests(); len(reqs) != 0 || len(e.srv.Shares()) != 0 {
		t.Fatalf("asked again within the hour: %v", reqs)
	}
	now = now.Add(time.Hour)
	if err := e.ws.EnsureShared(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if len(e.srv.Shares()) != 1 {
		t.Fatal("the share was not made again an hour later")
	}
	now = now.Add(time.Hour)
	e.srv.Requests()
	if err := e.ws.EnsureShared(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if reqs := e.srv.Requests(); len(reqs) != 1 || len(e.srv.Shares()) != 1 {
		t.Fatalf("a check with the share there: %v, shares %+v", reqs, e.srv.Shares())
	}
}

// TestProvisionCompletesAHalfMadeShare: Nextcloud stored the bot folder's share and
// failed before accepting it for the user (403, "database is locked"), so the user
// would never see it although the bot lists it. Provision posts it again until it is
// complete; when Nextcloud keeps failing, Provision fails and the next call, in this
// process or after a restart, completes the share it finds instead of trusting it.
func TestProvisionCompletesAHalfMadeShare(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	pending := func() bool {
		for _, s := range e.srv.Shares() {
			if s.ShareWith == "alice" {
				return s.Pending
			}
		}
		t.Fatalf("no share with alice: %+v", e.srv.Shares())
		return false
	}

	e.srv.HalfMakeShares(1)
	if err := e.ws.Provision(ctx, "alice"); err != nil {
		t.Fatalf("Provision with one half-made post: %v", err)
	}
	if pending() || len(e.srv.Shares()) != 1 {
		t.Fatalf("Provision succeeded with the share still pending, or not one share: %+v", e.srv.Shares())
	}

	e.srv.HalfMakeShares(100)
	if err := e.ws.Provision(ctx, "bob"); err == nil || !strings.Contains(err.Error(), "did not complete it") {
		t.Fatalf("Provision while every post is half made: %v, want the error", err)
	}
	e.ws = e.newWorkspace() // a restart
	e.srv.HalfMakeShares(0)
	if err := e.ws.Provision(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	for _, s := range e.srv.Shares() {
		if s.Pending {
			t.Fatalf("a share is still pending after Provision: %+v", s)
		}
	}

	// A user provisioned by an earlier version (layout 1), which trusted a share it
	// found: after the upgrade her share is completed once, and only once.
	if _, err := e.db.Write.Exec(`UPDATE workspace_provisioned SET layout = 1 WHERE tree = 'alice'`); err != nil {
		t.Fatal(err)
	}
	e.srv.LeaveSharePending("alice")
	e.ws = e.newWorkspace()
	if err := e.ws.Provision(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if pending() {
		t.Fatal("the share of a user provisioned by layout 1 is still pending")
	}
	e.ws = e.newWorkspace()
	e.srv.Requests()
	if err := e.ws.Provision(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if reqs := e.srv.Requests(); len(reqs) != 0 {
		t.Fatalf("provisioned again after the upgrade's once: %v", reqs)
	}
}

// A user who has files in Nextcloud but whom this database never provisioned (an
// earlier version's database) is pulled before the task, not treated as new.
func TestSyncedUserIsPulledEvenIfNotRecordedAsProvisioned(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	if err := e.ws.Provision(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ws.Pull(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Write.Exec(`DELETE FROM workspace_provisioned`); err != nil {
		t.Fatal(err)
	}
	e.ws = e.newWorkspace()
	e.srv.WriteFile("Users/alice/notes/new.md", "edited in Nextcloud")
	if rep, err := e.ws.Prepare(ctx, "alice", time.Time{}); err != nil || len(rep.Downloaded) != 1 {
		t.Fatalf("prepare: %+v %v", rep, err)
	}
}

// After a task that wrote nothing, Finish asks Nextcloud nothing; after one that wrote a
// file, it sends it.
func TestFinishAsksNothingWhenTheTaskWroteNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	if _, err := e.ws.Prepare(ctx, "alice", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ws.Finish(ctx, "alice"); err != nil { // the new user's provisioning
		t.Fatal(err)
	}
	if _, err := e.ws.Prepare(ctx, "alice", time.Time{}); err != nil {
		t.Fatal(err)
	}
	e.srv.Requests()
	if rep, err := e.ws.Finish(ctx, "alice"); err != nil || rep.Changed() {
		t.Fatalf("finish: %+v %v", rep, err)
	}
	if reqs := e.srv.Requests(); len(reqs) != 0 {
		t.Fatalf("a task that wrote nothing cost %d request(s): %v", len(reqs), reqs)
	}
	e.writeLocal("alice", "istota/exports/report.md", "new")
	if rep, err := e.ws.Finish(ctx, "alice"); err != nil || len(rep.Uploaded) != 1 {
		t.Fatalf("finish after a write: %+v %v", rep, err)
	}
	if got, _ := e.srv.ReadFile("Users/alice/istota/exports/report.md"); got != "new" {
		t.Fatalf("server has %q", got)
	}
}

// A task queued after a prefetch began needs no pull of its own; a task made after the
// last check pulls; and an edit in Nextcloud made before the message is always seen.
func TestPrefetchSparesTheTaskItsPull(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	e := newEnv(t, func(o *workspace.Options) { o.Clock = func() time.Time { return now } })
	if err := e.ws.Provision(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ws.Pull(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	// The user edits a file, then sends a message: the task is made, the prefetch runs.
	e.srv.WriteFile("Users/alice/notes/plan.md", "edited before asking")
	now = now.Add(time.Second)
	taskMade := now
	e.ws.Prefetch("alice", "")
	e.ws.Settle()
	e.srv.Requests()
	if _, err := e.ws.Prepare(ctx, "alice", taskMade); err != nil {
		t.Fatal(err)
	}
	if reqs := e.srv.Requests(); len(reqs) != 0 {
		t.Fatalf("the task pulled again after its prefetch: %v", reqs)
	}
	if got, _ := e.readLocal("alice", "notes/plan.md"); got != "edited before asking" {
		t.Fatalf("the edit made before the message is not in the mirror: %q", got)
	}
	// A later task pulls itself.
	now = now.Add(time.Minute)
	e.srv.WriteFile("Users/alice/notes/plan.md", "edited again")
	if _, err := e.ws.Prepare(ctx, "alice", now); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.readLocal("alice", "notes/plan.md"); got != "edited again" {
		t.Fatalf("a later task missed the edit: %q", got)
	}
}

// A user this database never saw but who has files in Nextcloud (an earlier
// installation, or the settings page) gets them before the first task, not seeds.
func TestUnseenUserWithFilesIsPulledFirst(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.srv.WriteFile("Users/alice/istota/config/USER.md", "# Alice\n- prefers short answers\n")
	if _, err := e.ws.Prepare(ctx, "alice", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.readLocal("alice", "istota/config/USER.md"); !strings.Contains(got, "prefers short answers") {
		t.Fatalf("USER.md in the mirror: %q", got)
	}
	if _, err := e.ws.Finish(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	for _, p := range e.srv.Tree("Users/alice") {
		if strings.Contains(p, "conflict") {
			t.Fatalf("a conflict copy appeared: %s", p)
		}
	}
}
