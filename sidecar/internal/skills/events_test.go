package skills_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/skills/skillstest"
)

type failingLog struct{ ctxErr error }

func (f *failingLog) AddEvent(ctx context.Context, _ int64, _, _ string) error {
	f.ctxErr = ctx.Err()
	return errors.New("database is locked")
}

func TestRecordEvent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a call that ended still leaves its record
	ev := &skillstest.Events{}
	skills.RecordEvent(ctx, ev, slog.New(slog.DiscardHandler), skills.Invocation{TaskID: 7}, "fetch", "browse GET /a")
	skills.RecordEvent(ctx, ev, slog.New(slog.DiscardHandler), skills.Invocation{}, "fetch", "outside a task")
	skills.RecordEvent(ctx, nil, slog.New(slog.DiscardHandler), skills.Invocation{TaskID: 7}, "fetch", "no log")
	if got := ev.All(); got != "fetch: browse GET /a" {
		t.Errorf("events = %q, want only the task's call", got)
	}

	var logs bytes.Buffer
	failing := &failingLog{}
	skills.RecordEvent(ctx, failing, slog.New(slog.NewTextHandler(&logs, nil)), skills.Invocation{TaskID: 7}, "mailbox", "read")
	if failing.ctxErr != nil {
		t.Errorf("the write got a cancelled context: %v", failing.ctxErr)
	}
	if !strings.Contains(logs.String(), "database is locked") || !strings.Contains(logs.String(), "task_id=7") {
		t.Errorf("the failed write is not logged with its task: %q", logs.String())
	}
}
