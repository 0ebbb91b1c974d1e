package audit

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

func TestRecordAndRecent(t *testing.T) {
	ctx := context.Background()
	db, err := testDBs.OpenPath(ctx, filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var buf bytes.Buffer
	l := New(db, slog.New(slog.NewTextHandler(&buf, nil)), nil)
	l.Record(ctx, Entry{UserID: "alice", TaskID: 1, Component: "credproxy", Action: "email", Allowed: true})
	l.Record(ctx, Entry{UserID: "alice", TaskID: 1, Component: "credproxy", Action: "calendar", Reason: ReasonNotAuthorized})
	l.Record(ctx, Entry{UserID: "bob", TaskID: 2, Component: "netproxy", Action: "evil.example:443", Reason: ReasonHostNotAllowed})
	all, err := l.Recent(ctx, "", false, 10)
	if err != nil || len(all) != 3 || all[0].UserID != "bob" {
		t.Fatalf("recent = %+v %v", all, err)
	}
	refused, _ := l.Recent(ctx, "alice", true, 10)
	if len(refused) != 1 || refused[0].Reason != ReasonNotAuthorized {
		t.Fatalf("alice's refusals = %+v", refused)
	}
	if !strings.Contains(buf.String(), "reason=host_not_allowed") {
		t.Errorf("refusal not logged: %s", buf.String())
	}
}
