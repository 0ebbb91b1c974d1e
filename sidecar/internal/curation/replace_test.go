package curation

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReplaceChecksWritesAndAudits(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	c := New(Options{})
	name := "istota/config/USER.md"
	accept := func([]byte) error { return nil }
	if changed, err := c.Replace(ctx, root, name, []byte("# Me\n- tea\n"), accept, AuditMeta{Source: "settings_page"}); err != nil || !changed {
		t.Fatalf("first write: %v %v", changed, err)
	}
	stale := errors.New("stale")
	var seen string
	_, err := c.Replace(ctx, root, name, []byte("lost edit"), func(cur []byte) error { seen = string(cur); return stale }, AuditMeta{Source: "settings_page"})
	if !errors.Is(err, stale) || seen != "# Me\n- tea\n" {
		t.Fatalf("a refused check: err %v, saw %q", err, seen)
	}
	if changed, err := c.Replace(ctx, root, name, []byte("# Me\n- tea\n"), accept, AuditMeta{Source: "settings_page"}); err != nil || changed {
		t.Fatalf("an unchanged file was rewritten: %v %v", changed, err)
	}
	got, _ := os.ReadFile(filepath.Join(root, name))
	if string(got) != "# Me\n- tea\n" {
		t.Fatalf("file = %q", got)
	}
	audit, _ := os.ReadFile(filepath.Join(root, name+AuditSuffix))
	if lines := strings.Split(strings.TrimSpace(string(audit)), "\n"); len(lines) != 1 ||
		!strings.Contains(lines[0], `"op":"edit"`) || !strings.Contains(lines[0], `"source":"settings_page"`) {
		t.Fatalf("audit = %q", audit)
	}
	if _, err := c.Replace(ctx, root, "../escape", []byte("x"), accept, AuditMeta{}); err == nil {
		t.Fatal("a name outside the root was accepted")
	}
}
