package transcribe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/webdav"
)

// ErrNoService means nothing can transcribe: no service is set up, or the one asked has
// no speech-to-text now.
var ErrNoService = errors.New("no speech-to-text service is set up")

// Audio is one recording to transcribe.
type Audio struct {
	UserID   string
	Path     string // relative to the user's workspace: inbox/…
	Local    string // the file on this host
	MimeType string
	// Label names the request in the service's own records (Nextcloud's customId).
	Label string
}

// Service transcribes; ErrNoService passes the recording on to the next one.
type Service interface {
	TranscribeAudio(ctx context.Context, a Audio) (string, error)
}

// Chain asks each service in turn, the Nextcloud admin's own first.
type Chain []Service

// TranscribeAudio returns the first transcript a service gives. A service that fails
// (Nextcloud down) passes the recording on too; when no later one transcribes it, the
// first failure is returned, and ErrNoService only when no service could try.
func (c Chain) TranscribeAudio(ctx context.Context, a Audio) (string, error) {
	var failed error
	for _, s := range c {
		text, err := s.TranscribeAudio(ctx, a)
		switch {
		case err == nil:
			return text, nil
		case errors.Is(err, ErrNoService):
		case ctx.Err() != nil:
			return "", err
		case failed == nil:
			failed = err
		}
	}
	if failed != nil {
		return "", failed
	}
	return "", ErrNoService
}

// TranscribeAudio makes Client a Service: it sends the local file.
func (c *Client) TranscribeAudio(ctx context.Context, a Audio) (string, error) {
	return c.TranscribeFile(ctx, a.Local, a.MimeType)
}

// NextcloudAPI is the part of Nextcloud's OCS API the Nextcloud service uses
// (*webdav.Client, as the bot account).
type NextcloudAPI interface {
	TaskTypes(ctx context.Context) (map[string]bool, error)
	FileID(ctx context.Context, name string) (int64, error)
	ScheduleTask(ctx context.Context, typ string, input map[string]any, appID, customID string) (webdav.ProcessingTask, error)
	ProcessingTaskByID(ctx context.Context, id int64) (webdav.ProcessingTask, error)
}

// AudioToText is Nextcloud's speech-to-text task type (OCP\TaskProcessing\TaskTypes\AudioToText).
const AudioToText = "core:audio2text"

// Nextcloud transcribes through the speech-to-text provider the Nextcloud admin
// installed (TaskProcessing: a Whisper app, an OpenAI or LocalAI integration, …),
// reading the copy of the recording the app left in the bot's files. The task runs in
// Nextcloud's own workers; this waits for it.
type Nextcloud struct {
	API NextcloudAPI
	// Remote is the bot's path of a file of uid's workspace (Users/{uid}/…).
	Remote func(uid, rel string) string
	// Poll is how often the task is looked at (default webdav.DefaultTaskPoll).
	Poll time.Duration
}

// TranscribeAudio schedules a speech-to-text task on Nextcloud and waits for its text.
func (n *Nextcloud) TranscribeAudio(ctx context.Context, a Audio) (string, error) {
	types, err := n.API.TaskTypes(ctx)
	if err != nil {
		return "", fmt.Errorf("transcribe: ask Nextcloud for its AI task types: %w", err)
	}
	if !types[AudioToText] {
		return "", ErrNoService
	}
	id, err := n.API.FileID(ctx, n.Remote(a.UserID, a.Path))
	if err != nil {
		return "", fmt.Errorf("transcribe: find the recording in Nextcloud: %w", err)
	}
	task, err := webdav.AwaitTask(ctx, n.API, AudioToText, map[string]any{"input": id}, "istota", a.Label, n.Poll)
	switch {
	case err != nil && ctx.Err() != nil && task.ID != 0:
		return "", fmt.Errorf("transcribe: Nextcloud's speech-to-text task %d did not finish in time (are Nextcloud's background jobs running?): %w", task.ID, err)
	case err != nil:
		return "", fmt.Errorf("transcribe: Nextcloud's speech-to-text: %w", err)
	case task.Status != webdav.TaskSuccessful:
		return "", fmt.Errorf("transcribe: Nextcloud's speech-to-text task %d ended %s", task.ID, strings.ToLower(strings.TrimPrefix(task.Status, "STATUS_")))
	}
	text, _ := task.Output["output"].(string)
	return strings.TrimSpace(text), nil
}
