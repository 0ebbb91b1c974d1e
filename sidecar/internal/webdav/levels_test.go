package webdav_test

import (
	"context"
	"errors"
	"testing"

	"github.com/istota/istota/sidecar/internal/webdav"
)

// ListLevel gives folders their ETags, and a folder's ETag changes when anything below
// it changes (as Nextcloud propagates them).
func TestListLevelGivesFolderETags(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, "")
	c := newClient(t, srv, nil)
	for _, d := range []string{"Users/alice/a/b", "Users/alice/x"} {
		if err := c.MkdirAll(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	put(t, c, "Users/alice/a/b/c.md", "one", webdav.PutOptions{})
	put(t, c, "Users/alice/x/y.md", "two", webdav.PutOptions{})

	etags := func() map[string]string {
		all, err := c.ListLevel(ctx, "Users/alice", webdav.DepthMembers)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, fi := range all {
			if !fi.IsDir || fi.ETag == "" {
				t.Fatalf("folder without an ETag: %+v", fi)
			}
			out[fi.Path] = fi.ETag
		}
		return out
	}
	before := etags()
	if len(before) != 3 { // the folder itself, a and x
		t.Fatalf("listing: %v", before)
	}
	put(t, c, "Users/alice/a/b/c.md", "changed", webdav.PutOptions{})
	after := etags()
	if after["Users/alice/a"] == before["Users/alice/a"] || after["Users/alice"] == before["Users/alice"] {
		t.Errorf("the ETags above a changed file did not change: %v → %v", before, after)
	}
	if after["Users/alice/x"] != before["Users/alice/x"] {
		t.Errorf("an unrelated folder's ETag changed")
	}
	self, err := c.ListLevel(ctx, "Users/alice/a/b/c.md", webdav.DepthSelf)
	if err != nil || len(self) != 1 || self[0].IsDir || self[0].Size != 7 || self[0].ETag == "" {
		t.Fatalf("a file at depth 0: %+v %v", self, err)
	}
	if _, err := c.ListLevel(ctx, "Users/nobody", webdav.DepthSelf); !errors.Is(err, webdav.ErrNotFound) {
		t.Fatalf("a missing folder: %v", err)
	}
	if _, err := c.ListLevel(ctx, "Users/alice", "2"); err == nil {
		t.Fatal("depth 2 was accepted")
	}
}
