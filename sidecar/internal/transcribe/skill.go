package transcribe

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/skills"
)

// SkillName is the skill's name.
const SkillName = "transcribe"

const skillUsage = `transcribe FILE     print the speech in an audio (or video) file of your workspace as text
FILE is a path in your workspace such as inbox/voice.ogg (or /workspace/inbox/voice.ogg); at most 25 MB.`

// SkillOptions configure the skill.
type SkillOptions struct {
	// Client transcribes; nil means no service is set up, which the skill says.
	Client *Client
	// Root returns the local copy of a user's /Users/{uid}/ folder (the workspace).
	Root func(uid string) (string, error)
}

// RegisterSkill adds the transcribe skill to reg.
func RegisterSkill(reg *skills.Registry, opts SkillOptions) error {
	if opts.Root == nil {
		return errors.New("transcribe: no workspace root")
	}
	return reg.Register(skills.Skill{
		Manifest: skills.Manifest{
			Name:    SkillName,
			Summary: "turn the speech in an audio file of your workspace into text",
			Usage:   skillUsage,
			Load:    skills.Load{Keywords: []string{"transcri", "audio", "voice", "recording", "sprachnachricht", "podcast", "ogg", "mp3", "m4a", "wav", "opus"}},
			// The admin's own speech-to-text service, the one voice messages go to
			// before every task: reading the user's file, not acting outside.
			Classify: func(context.Context, skills.Invocation) approval.Action {
				return approval.Action{Tier: approval.TierRead}
			},
		},
		Run: func(ctx context.Context, inv skills.Invocation) skills.Result { return runSkill(ctx, opts, inv) },
	})
}

func runSkill(ctx context.Context, opts SkillOptions, inv skills.Invocation) skills.Result {
	if len(inv.Args) != 1 {
		return skills.Usagef("usage: istota skill %s", skillUsage)
	}
	if inv.UserID == "" {
		return skills.Failf("transcribe: no user for this task")
	}
	name, err := workspacePath(inv.Args[0])
	if err != nil {
		return skills.Usagef("transcribe: %v", err)
	}
	mimeType, ok := mediaType(name)
	if !ok {
		return skills.Usagef("transcribe: %s is not an audio or video file (by its extension)", name)
	}
	if opts.Client == nil {
		return skills.Failf("transcribe: no speech-to-text service is set up on this server; tell the user an administrator can set [transcription] in the Istota configuration")
	}
	dir, err := opts.Root(inv.UserID)
	if err != nil {
		return skills.Internal("your files", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return skills.Internal("your files", err)
	}
	defer root.Close()
	f, err := root.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return skills.Failf("transcribe: %s does not exist in your workspace", name)
	} else if err != nil {
		return skills.Failf("transcribe: %s cannot be opened: %v", name, errors.Unwrap(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return skills.Internal("your files", err)
	}
	if !fi.Mode().IsRegular() {
		return skills.Failf("transcribe: %s is not a file", name)
	}
	if fi.Size() > MaxBytes {
		return skills.Failf("transcribe: %s is %d MB; at most 25 MB can be transcribed", name, fi.Size()>>20)
	}
	text, err := opts.Client.Transcribe(ctx, f, path.Base(name), mimeType)
	if err != nil {
		r := skills.Failf("transcribe: %s could not be transcribed: the speech-to-text service failed", name)
		r.Err = err
		return r
	}
	if text == "" {
		return skills.Result{Stdout: []byte("(no speech recognised)\n")}
	}
	return skills.Result{Stdout: []byte(text + "\n")}
}

// mediaTypes are the formats speech-to-text services take, by extension; the system's
// table (when it has one) covers the rest.
var mediaTypes = map[string]string{
	".ogg": "audio/ogg", ".oga": "audio/ogg", ".opus": "audio/ogg", ".mp3": "audio/mpeg", ".mpga": "audio/mpeg",
	".m4a": "audio/mp4", ".aac": "audio/aac", ".wav": "audio/wav", ".flac": "audio/flac", ".amr": "audio/amr",
	".weba": "audio/webm", ".webm": "video/webm", ".mp4": "video/mp4", ".mpeg": "video/mpeg", ".3gp": "video/3gpp",
}

// mediaType is the audio or video type of name, by its extension.
func mediaType(name string) (string, bool) {
	ext := strings.ToLower(path.Ext(name))
	t, ok := mediaTypes[ext]
	if !ok {
		t, _, _ = strings.Cut(mime.TypeByExtension(ext), ";")
	}
	return t, strings.HasPrefix(t, "audio/") || strings.HasPrefix(t, "video/")
}

// workspacePath turns the argument into a clean path relative to the workspace.
func workspacePath(arg string) (string, error) {
	p := strings.TrimPrefix(arg, "/workspace/")
	if p == "" || strings.ContainsAny(p, "\x00\\") || filepath.IsAbs(p) {
		return "", fmt.Errorf("%q is not a path in your workspace", arg)
	}
	clean := path.Clean(p)
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%q is not a path in your workspace", arg)
	}
	return clean, nil
}
