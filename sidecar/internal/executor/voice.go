package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/transcribe"
)

// Transcriber turns a recording into text (transcribe.Chain: Nextcloud's own
// speech-to-text, then the admin's OpenAI-compatible service).
type Transcriber interface {
	TranscribeAudio(ctx context.Context, a transcribe.Audio) (string, error)
}

// voiceTimeout bounds the transcription of one task's voice messages.
const voiceTimeout = 5 * time.Minute

// EventTranscript is the task event kind of a transcription.
const EventTranscript = "transcript"

// noTranscriber is what the user is told when a voice message arrives and nothing can
// transcribe it.
const noTranscriber = "🎙️ I cannot listen to voice messages here: no speech-to-text service is set up. " +
	"Please type your message, or ask your Nextcloud admin to enable a speech-to-text provider in Nextcloud or set [transcription] in the Istota configuration."

// transcribeVoice transcribes the audio files shared with t's request before the agent
// starts and returns what to add to the request: each transcript, or why there is none.
// When nothing can transcribe, the user is also told in the conversation, once per task.
func (e *Executor) transcribeVoice(ctx context.Context, t queue.Task, ws Workspace, log *slog.Logger) string {
	atts, err := e.queue.Attachments(ctx, t.ID)
	if err != nil {
		log.Warn("reading the task's attachments failed", "err", err)
		return ""
	}
	var b strings.Builder
	vctx, cancel := context.WithTimeout(ctx, voiceTimeout)
	defer cancel()
	told := false
	for _, a := range atts {
		if !strings.HasPrefix(strings.ToLower(a.MimeType), "audio/") {
			continue
		}
		local, ok := insideWorkspace(ws.Root, a.Path)
		if !ok {
			log.Warn("an attachment path leaves the workspace", "path", a.Path)
			continue
		}
		text, err := "", transcribe.ErrNoService
		if e.opts.Transcriber != nil {
			text, err = e.opts.Transcriber.TranscribeAudio(vctx, transcribe.Audio{UserID: t.UserID, Path: a.Path, Local: local,
				MimeType: a.MimeType, Label: fmt.Sprintf("istota-task-%d", t.ID)})
		}
		switch {
		case errors.Is(err, transcribe.ErrNoService):
			e.event(ctx, t.ID, "voice message "+a.Path+" not transcribed: no speech-to-text service is set up", log)
			fmt.Fprintf(&b, "\n\n[The voice message %s could not be transcribed: no speech-to-text service is set up. The user has been told.]", a.Path)
			if !told && t.ConversationToken != "" {
				told = true
				if err := e.outbox.Enqueue(ctx, outbox.Message{Token: t.ConversationToken, ReplyTo: t.ReplyToMessageID, TaskID: t.ID,
					Kind: outbox.KindNotice, Text: noTranscriber, Key: fmt.Sprintf("task:%d:no-transcriber", t.ID)}); err != nil {
					log.Warn("telling the user no transcription is available failed", "err", err)
				}
			}
		case err != nil:
			log.Warn("transcription failed", "path", a.Path, "err", err)
			e.event(ctx, t.ID, fmt.Sprintf("transcription of %s failed: %v", a.Path, err), log)
			fmt.Fprintf(&b, "\n\n[The voice message %s could not be transcribed (%v). Tell the user.]", a.Path, err)
		case text == "":
			e.event(ctx, t.ID, "transcribed "+a.Path+": no speech", log)
			fmt.Fprintf(&b, "\n\n[The voice message %s holds no recognisable speech.]", a.Path)
		default:
			e.event(ctx, t.ID, fmt.Sprintf("transcribed %s (%d characters)", a.Path, len(text)), log)
			fmt.Fprintf(&b, "\n\nTranscript of the voice message %s:\n%s", a.Path, text)
		}
	}
	return b.String()
}

// insideWorkspace resolves rel below root, refusing anything that leaves it.
func insideWorkspace(root, rel string) (string, bool) {
	if rel == "" || filepath.IsAbs(rel) {
		return "", false
	}
	clean := filepath.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", false
	}
	return filepath.Join(root, clean), true
}

// event records a task event, logging a failure.
func (e *Executor) event(ctx context.Context, taskID int64, text string, log *slog.Logger) {
	if err := e.queue.AddEvent(ctx, taskID, EventTranscript, text); err != nil {
		log.Warn("recording a task event failed", "err", err)
	}
}
