package convlog

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

func TestRecordRecentGet(t *testing.T) {
	ctx := context.Background()
	db, err := testDBs.OpenPath(ctx, filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	base := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for i := int64(1); i <= 5; i++ {
		created, err := Record(ctx, db.Write, Message{Token: "room1", ID: i, ActorType: "users", ActorID: "alice", ActorName: "Alice", Text: "m" + string(rune('0'+i)), At: base.Add(time.Duration(i) * time.Minute)})
		if err != nil || !created {
			t.Fatalf("record %d: created=%v err=%v", i, created, err)
		}
	}
	if created, err := Record(ctx, db.Write, Message{Token: "room1", ID: 3, Text: "changed", At: base}); err != nil || created {
		t.Fatalf("duplicate must be ignored: created=%v err=%v", created, err)
	}
	if err := RecordBotReply(ctx, db.Write, "room1", 9, "Istota", "bot says", 3, base.Add(3*time.Minute+time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := Record(ctx, db.Write, Message{Token: "other", ID: 1, Text: "elsewhere", At: base}); err != nil {
		t.Fatal(err)
	}

	got, err := Recent(ctx, db.Write, "room1", 5, 3)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, m := range got {
		texts = append(texts, m.Text)
	}
	want := []string{"m3", "bot says", "m4"}
	if len(texts) != len(want) {
		t.Fatalf("recent = %v, want %v", texts, want)
	}
	for i := range want {
		if texts[i] != want[i] {
			t.Fatalf("recent = %v, want %v", texts, want)
		}
	}
	if !got[1].FromBot || got[1].ID != -9 {
		t.Errorf("bot reply not marked: %+v", got[1])
	}
	m, err := Get(ctx, db.Write, "room1", 3)
	if err != nil || m.Text != "m3" {
		t.Fatalf("get: %+v %v", m, err)
	}
	if _, err := Get(ctx, db.Write, "room1", 99); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing message: %v", err)
	}
}
