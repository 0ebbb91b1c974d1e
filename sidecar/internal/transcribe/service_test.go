package transcribe

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/webdav"
)

// fakeNextcloud plays Nextcloud's TaskProcessing API: the task runs through states.
type fakeNextcloud struct {
	types     map[string]bool
	states    []string // status of each read after scheduling
	output    string
	scheduled []map[string]any
	file      string
	reads     int
}

func (f *fakeNextcloud) TaskTypes(context.Context) (map[string]bool, error) { return f.types, nil }
func (f *fakeNextcloud) FileID(_ context.Context, name string) (int64, error) {
	f.file = name
	return 4711, nil
}
func (f *fakeNextcloud) ScheduleTask(_ context.Context, typ string, input map[string]any, appID, customID string) (webdav.ProcessingTask, error) {
	f.scheduled = append(f.scheduled, map[string]any{"type": typ, "input": input["input"], "app": appID, "custom": customID})
	return webdav.ProcessingTask{ID: 9, Type: typ, Status: webdav.TaskScheduled}, nil
}
func (f *fakeNextcloud) ProcessingTaskByID(_ context.Context, id int64) (webdav.ProcessingTask, error) {
	st := f.states[min(f.reads, len(f.states)-1)]
	f.reads++
	t := webdav.ProcessingTask{ID: id, Status: st}
	if st == webdav.TaskSuccessful {
		t.Output = map[string]any{"output": f.output}
	}
	return t, nil
}

type staticService struct {
	text  string
	err   error
	calls int
}

func (s *staticService) TranscribeAudio(context.Context, Audio) (string, error) {
	s.calls++
	return s.text, s.err
}

func TestNextcloudFirstThenTheAdminsService(t *testing.T) {
	ctx := context.Background()
	a := Audio{UserID: "alice", Path: "inbox/voice.ogg", Local: "/nonexistent", MimeType: "audio/ogg", Label: "istota-task-3"}
	remote := func(uid, rel string) string { return "Users/" + uid + "/" + rel }

	nc := &fakeNextcloud{types: map[string]bool{AudioToText: true}, states: []string{webdav.TaskRunning, webdav.TaskSuccessful}, output: " Call mum. "}
	fallback := &staticService{text: "from the fallback"}
	chain := Chain{&Nextcloud{API: nc, Remote: remote, Poll: time.Millisecond}, fallback}
	text, err := chain.TranscribeAudio(ctx, a)
	if err != nil || text != "Call mum." || fallback.calls != 0 {
		t.Fatalf("Nextcloud's speech-to-text: %q %v (fallback called %d times)", text, err, fallback.calls)
	}
	if nc.file != "Users/alice/inbox/voice.ogg" || len(nc.scheduled) != 1 || nc.scheduled[0]["input"] != int64(4711) || nc.scheduled[0]["type"] != AudioToText || nc.scheduled[0]["app"] != "istota" || nc.scheduled[0]["custom"] != "istota-task-3" {
		t.Errorf("scheduled %+v for %s", nc.scheduled, nc.file)
	}

	// Without a provider in Nextcloud the admin's service answers.
	nc = &fakeNextcloud{types: map[string]bool{"core:text2text": true}}
	chain = Chain{&Nextcloud{API: nc, Remote: remote}, fallback}
	if text, err := chain.TranscribeAudio(ctx, a); err != nil || text != "from the fallback" || len(nc.scheduled) != 0 {
		t.Fatalf("fallback: %q %v", text, err)
	}
	// Nothing at all.
	if _, err := (Chain{&Nextcloud{API: nc, Remote: remote}}).TranscribeAudio(ctx, a); !errors.Is(err, ErrNoService) {
		t.Fatalf("no service: %v", err)
	}
	if _, err := (Chain{}).TranscribeAudio(ctx, a); !errors.Is(err, ErrNoService) {
		t.Fatalf("empty chain: %v", err)
	}

	// A Nextcloud that fails passes the recording on; with nobody else its failure is
	// the answer.
	broken := &staticService{err: errors.New("Nextcloud is down")}
	if text, err := (Chain{broken, fallback}).TranscribeAudio(ctx, a); err != nil || text != "from the fallback" {
		t.Fatalf("failure then fallback: %q %v", text, err)
	}
	if _, err := (Chain{broken, &staticService{err: ErrNoService}}).TranscribeAudio(ctx, a); err == nil || errors.Is(err, ErrNoService) || !strings.Contains(err.Error(), "down") {
		t.Fatalf("failure alone: %v", err)
	}

	// A failed task is an error, and a task that never ends is bounded by the context.
	nc = &fakeNextcloud{types: map[string]bool{AudioToText: true}, states: []string{webdav.TaskFailed}}
	if _, err := (&Nextcloud{API: nc, Remote: remote, Poll: time.Millisecond}).TranscribeAudio(ctx, a); err == nil || !strings.Contains(err.Error(), "ended failed") {
		t.Fatalf("failed task: %v", err)
	}
	nc = &fakeNextcloud{types: map[string]bool{AudioToText: true}, states: []string{webdav.TaskScheduled}}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := (&Nextcloud{API: nc, Remote: remote, Poll: time.Millisecond}).TranscribeAudio(short, a); err == nil || !strings.Contains(err.Error(), "background jobs") {
		t.Fatalf("task never done: %v", err)
	}
}
