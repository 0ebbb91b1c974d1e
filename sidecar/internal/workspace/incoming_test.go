package workspace_test

import (
	"context"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/istota/istota/sidecar/internal/webdav/davtest"
)

func (e *env) sortShares() []string {
	e.t.Helper()
	moved, err := e.ws.SortIncomingShares(context.Background())
	if err != nil {
		e.t.Fatalf("sort incoming shares: %v", err)
	}
	return moved
}

func (e *env) mkdirRemote(rel string) {
	e.t.Helper()
	if err := os.MkdirAll(e.srv.Path(rel), 0o755); err != nil {
		e.t.Fatal(err)
	}
}

func incomingPaths(srv *davtest.Server) map[string]string {
	out := map[string]string{}
	for _, in := range srv.IncomingShares() {
		out[in.ID] = in.Path
	}
	return out
}

func TestIncomingSharesMoveToOwnersSharedFolder(t *testing.T) {
	e := newEnv(t, nil)
	e.provision("alice")
	e.srv.WriteFile("report.pdf", "pdf bytes")
	fileID := e.srv.AddIncomingShare("report.pdf", "alice")
	e.srv.WriteFile("Photos/2026/beach.jpg", "jpg bytes")
	folderID := e.srv.AddIncomingShare("Photos", "bob") // bob was never provisioned
	e.srv.Requests()

	moved := e.sortShares()

	if want := []string{"Users/alice/shared/report.pdf", "Users/bob/shared/Photos"}; !reflect.DeepEqual(sorted(moved), want) {
		t.Fatalf("moved %q, want %q", moved, want)
	}
	if got, ok := remoteFile(e, "alice", "shared/report.pdf"); !ok || got != "pdf bytes" {
		t.Fatalf("alice's shared/report.pdf = %q %v", got, ok)
	}
	if got, ok := remoteFile(e, "bob", "shared/Photos/2026/beach.jpg"); !ok || got != "jpg bytes" {
		t.Fatalf("bob's shared/Photos/2026/beach.jpg = %q %v", got, ok)
	}
	if got := e.srv.Tree(""); slices.Contains(got, "report.pdf") || slices.Contains(got, "Photos/") {
		t.Fatalf("shares still in the bot's root: %q", got)
	}
	want := map[string]string{fileID: "/Users/alice/shared/report.pdf", folderID: "/Users/bob/shared/Photos"}
	if got := incomingPaths(e.srv); !reflect.DeepEqual(got, want) {
		t.Fatalf("shares now at %v, want %v", got, want)
	}

	// bob is provisioned (folders made, istota/ shared with him) before his share moves.
	reqs := e.srv.Requests()
	mkcol := slices.Index(reqs, "MKCOL /remote.php/dav/files/istota/Users/bob/shared")
	move := slices.Index(reqs, "MOVE /remote.php/dav/files/istota/Photos")
	if mkcol < 0 || move < 0 || mkcol > move {
		t.Fatalf("want bob's shared/ created before the move, requests:\n%s", strings.Join(reqs, "\n"))
	}
	for _, d := range skeleton {
		if !slices.Contains(e.remoteTree("bob"), d) {
			t.Fatalf("bob not provisioned: %q missing from %q", d, e.remoteTree("bob"))
		}
	}
	sharedWithBob := false
	for _, s := range e.srv.Shares() {
		sharedWithBob = sharedWithBob || (s.Path == "/Users/bob/istota" && s.ShareWith == "bob")
	}
	if !sharedWithBob {
		t.Fatalf("istota/ not shared with bob: %+v", e.srv.Shares())
	}

	// The owner's mirror picks the share up.
	if _, err := e.ws.Pull(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if got, ok := e.readLocal("alice", "shared/report.pdf"); !ok || got != "pdf bytes" {
		t.Fatalf("alice's mirror shared/report.pdf = %q %v", got, ok)
	}
}

func TestIncomingShareNameCollision(t *testing.T) {
	tests := []struct {
		name     string
		folder   bool
		existing []string
		want     string
	}{
		{"file", false, []string{"report.pdf"}, "report (2).pdf"},
		{"file taken twice", false, []string{"report.pdf", "report (2).pdf"}, "report (3).pdf"},
		{"dotfile", false, []string{".env"}, ".env (2)"},
		{"no extension", false, []string{"README"}, "README (2)"},
		{"folder with a dot", true, []string{"2026.03"}, "2026.03 (2)"},
		{"folder onto a file", true, []string{"Photos"}, "Photos (2)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.provision("alice")
			for i, name := range tt.existing {
				e.srv.WriteFile("Users/alice/shared/"+name, "old "+strings.Repeat("x", i))
			}
			incoming := tt.existing[0]
			if tt.folder {
				e.srv.WriteFile(incoming+"/inside.txt", "new")
			} else {
				e.srv.WriteFile(incoming, "new")
			}
			e.srv.AddIncomingShare(incoming, "alice")

			moved := e.sortShares()

			if want := []string{"Users/alice/shared/" + tt.want}; !reflect.DeepEqual(moved, want) {
				t.Fatalf("moved %q, want %q", moved, want)
			}
			for i, name := range tt.existing {
				if got, _ := remoteFile(e, "alice", "shared/"+name); got != "old "+strings.Repeat("x", i) {
					t.Fatalf("existing %s overwritten: %q", name, got)
				}
			}
			got := "shared/" + tt.want
			if tt.folder {
				got += "/inside.txt"
			}
			if content, ok := remoteFile(e, "alice", got); !ok || content != "new" {
				t.Fatalf("%s = %q %v, want the share's content", got, content, ok)
			}
		})
	}
}

func TestSortedSharesAreLeftAlone(t *testing.T) {
	e := newEnv(t, nil)
	e.provision("alice")
	e.srv.WriteFile("Users/alice/shared/kept.md", "kept")
	e.srv.AddIncomingShare("Users/alice/shared/kept.md", "alice")
	e.srv.WriteFile("notes.md", "notes")
	e.srv.AddIncomingShare("notes.md", "alice")

	if moved := e.sortShares(); !reflect.DeepEqual(moved, []string{"Users/alice/shared/notes.md"}) {
		t.Fatalf("first run moved %q", moved)
	}
	before := e.srv.Snapshot("")
	e.srv.Requests()
	if moved := e.sortShares(); len(moved) != 0 {
		t.Fatalf("second run moved %q", moved)
	}
	if reqs := e.srv.Requests(); !reflect.DeepEqual(reqs, []string{"GET /ocs/v2.php/apps/files_sharing/api/v1/shares"}) {
		t.Fatalf("second run sent %q, want only the listing", reqs)
	}
	if after := e.srv.Snapshot(""); !reflect.DeepEqual(before, after) {
		t.Fatalf("second run changed files:\nbefore %v\nafter  %v", before, after)
	}
}

func TestHostileIncomingSharesAreRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.WriteFile("mine.txt", "the bot's own")
	e.srv.WriteFile("fine.txt", "fine")
	e.mkdirRemote("Channels/abc")
	shares := []struct{ path, owner string }{
		{"mine.txt", "istota"},     // the bot itself
		{"mine.txt", "ISTOTA"},     // user ids compare case-insensitively
		{"fine.txt", ""},           // no owner
		{"fine.txt", "../alice"},   // climbing owner
		{"fine.txt", "al/ice"},     // slash in the owner
		{"../escape.txt", "alice"}, // climbing path
		{"a/../../b", "alice"},
		{"bad\x01name", "alice"},
		{"", "alice"},
		{"Users", "alice"},        // the bot's own trees
		{"Channels/abc", "alice"}, //
	}
	for _, s := range shares {
		e.srv.AddIncomingShare(s.path, s.owner)
	}
	before := e.srv.Snapshot("")
	e.srv.Requests()

	for range 2 {
		if moved := e.sortShares(); len(moved) != 0 {
			t.Fatalf("moved %q", moved)
		}
	}
	for _, r := range e.srv.Requests() {
		if !strings.HasPrefix(r, "GET /ocs/") {
			t.Fatalf("a refused share caused %q", r)
		}
	}
	if after := e.srv.Snapshot(""); !reflect.DeepEqual(before, after) {
		t.Fatalf("files changed:\nbefore %v\nafter  %v", before, after)
	}
}

func TestSortIncomingSharesReportsFailures(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.WriteFile("a.txt", "a")
	e.srv.AddIncomingShare("a.txt", "alice")
	e.srv.Close()
	if _, err := e.ws.SortIncomingShares(context.Background()); err == nil {
		t.Fatal("no error with Nextcloud down")
	}
	e.srv.Restart()
	if moved := e.sortShares(); !reflect.DeepEqual(moved, []string{"Users/alice/shared/a.txt"}) {
		t.Fatalf("after restart moved %q", moved)
	}
}
