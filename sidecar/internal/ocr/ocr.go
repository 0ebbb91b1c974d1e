// Package ocr reads the text in photos, scans and PDFs of a user's workspace. It asks
// the OCR provider the Nextcloud admin installed first (TaskProcessing
// core:image2text:ocr, a task type of Nextcloud 33 and newer, listed only when a
// provider app offers it), and otherwise runs Debian's tesseract-ocr (with pdftoppm for
// PDFs) in a bubblewrap sandbox that sees the one file, read-only, and has no network.
// Nothing is downloaded at run time: tesseract's language data are Debian packages.
package ocr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/sandbox"
	"github.com/istota/istota/sidecar/internal/webdav"
)

// ImageToText is Nextcloud's OCR task type (OCP\TaskProcessing\TaskTypes\
// ImageToTextOpticalCharacterRecognition, Nextcloud 33): input "input", one image file
// id; output "output", the text.
const ImageToText = "core:image2text:ocr"

// ErrNoProvider means Nextcloud offers no OCR now.
var ErrNoProvider = errors.New("Nextcloud offers no OCR provider")

// Kind is what a file holds, by its extension.
type Kind int

// Kinds of files read.
const (
	Unknown Kind = iota
	Image
	PDF
)

// KindOf is the kind of the file name.
func KindOf(name string) Kind {
	switch strings.ToLower(path.Ext(name)) {
	case ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp", ".pnm", ".pbm", ".pgm", ".ppm":
		return Image
	case ".pdf":
		return PDF
	}
	return Unknown
}

// NextcloudAPI is the part of Nextcloud's OCS API the Nextcloud reader uses
// (*webdav.Client, as the bot account).
type NextcloudAPI interface {
	webdav.TaskAPI
	TaskTypes(ctx context.Context) (map[string]bool, error)
	FileID(ctx context.Context, name string) (int64, error)
}

// Nextcloud reads images through the OCR provider of the Nextcloud admin, on the copy
// of the file in the bot's storage. The task runs in Nextcloud's own workers.
type Nextcloud struct {
	API NextcloudAPI
	// Remote is the bot's path of a file of uid's workspace (Users/{uid}/…).
	Remote func(uid, rel string) string
	// Poll is how often the task is looked at (0: webdav.DefaultTaskPoll).
	Poll time.Duration
}

// Read returns the text Nextcloud's OCR finds in the image rel of uid's workspace;
// ErrNoProvider when Nextcloud has none. label names the request in Nextcloud's
// records (customId).
func (n *Nextcloud) Read(ctx context.Context, uid, rel, label string) (string, error) {
	types, err := n.API.TaskTypes(ctx)
	if err != nil {
		return "", fmt.Errorf("ocr: ask Nextcloud for its AI task types: %w", err)
	}
	if !types[ImageToText] {
		return "", ErrNoProvider
	}
	id, err := n.API.FileID(ctx, n.Remote(uid, rel))
	if err != nil {
		return "", fmt.Errorf("ocr: find %s in Nextcloud: %w", rel, err)
	}
	task, err := webdav.AwaitTask(ctx, n.API, ImageToText, map[string]any{"input": id}, "istota", label, n.Poll)
	switch {
	case err != nil && ctx.Err() != nil && task.ID != 0:
		return "", fmt.Errorf("ocr: Nextcloud's OCR task %d did not finish in time (are Nextcloud's background jobs running?): %w", task.ID, err)
	case err != nil:
		return "", fmt.Errorf("ocr: Nextcloud's OCR: %w", err)
	case task.Status != webdav.TaskSuccessful:
		return "", fmt.Errorf("ocr: Nextcloud's OCR task %d ended %s", task.ID, strings.ToLower(strings.TrimPrefix(task.Status, "STATUS_")))
	}
	text, ok := task.Output["output"].(string)
	if !ok {
		return "", fmt.Errorf("ocr: Nextcloud's OCR task %d gave no text", task.ID)
	}
	return strings.TrimSpace(text), nil
}

// Tesseract binaries, as Debian installs them; the sandbox shows the host's /usr.
const (
	TesseractPath = "/usr/bin/tesseract"
	PdftoppmPath  = "/usr/bin/pdftoppm"
)

// Limits of the local reader.
const (
	DefaultTimeout  = 2 * time.Minute
	DefaultMaxBytes = 1 << 20
	// MaxPages is how many pages of a PDF are read.
	MaxPages = 20
	// inputDir holds the file in the sandbox.
	inputDir = "/input"
)

// langRE is tesseract's -l argument: language codes joined by "+".
var langRE = regexp.MustCompile(`^[A-Za-z_]{3,16}(\+[A-Za-z_]{3,16}){0,7}$`)

// ValidLanguages reports whether langs is a tesseract language list such as eng+deu.
func ValidLanguages(langs string) bool { return langRE.MatchString(langs) }

// Tesseract reads files with tesseract in a sandbox of their own: no workspace, no
// home, no network; the file alone is bound read-only.
type Tesseract struct {
	Runner *sandbox.Runner
	// Timeout bounds one read (0: DefaultTimeout); the sandbox is killed after it.
	Timeout time.Duration
	// MaxBytes bounds the text kept (0: DefaultMaxBytes).
	MaxBytes int
}

// Job is one file for Tesseract.
type Job struct {
	UserID string
	TaskID int64
	// File is the host path of the file: absolute, with no symbolic link on it (the
	// sandbox refuses one).
	File  string
	Kind  Kind
	Langs string // tesseract's -l; "" is eng
}

// Read returns the text tesseract finds in job.File (every page of a PDF, up to
// MaxPages, separated by form feeds).
func (t *Tesseract) Read(ctx context.Context, job Job) (string, error) {
	langs := job.Langs
	if langs == "" {
		langs = "eng"
	}
	if !ValidLanguages(langs) {
		return "", fmt.Errorf("ocr: %q is not a list of tesseract languages such as eng+deu", langs)
	}
	ext := strings.ToLower(path.Ext(job.File))
	in := inputDir + "/file" + ext
	var argv []string
	switch job.Kind {
	case Image:
		argv = []string{TesseractPath, in, "-", "-l", langs}
	case PDF:
		// pdftoppm numbers pages with as many digits as the last one has, so the glob
		// lists them in order.
		argv = []string{"/bin/sh", "-c", `set -e
` + PdftoppmPath + ` -r 200 -l ` + strconv.Itoa(MaxPages) + ` -png "$1" /tmp/page
for p in /tmp/page-*.png; do
  ` + TesseractPath + ` "$p" - -l "$2"
  printf '\f'
done`, "ocr", in, langs}
	default:
		return "", errors.New("ocr: only images and PDFs are read")
	}
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	run, err := t.Runner.Prepare(ctx, sandbox.Spec{
		TaskID:      job.TaskID,
		UserID:      job.UserID,
		ExtraMounts: []sandbox.Mount{{Source: job.File, Dest: in}},
		Argv:        argv,
		Dir:         "/tmp",
	})
	if err != nil {
		return "", fmt.Errorf("ocr: %w", err)
	}
	defer run.Close()
	limit := t.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	out := &capped{max: limit}
	var stderr bytes.Buffer
	run.Cmd.Stdout, run.Cmd.Stderr = out, &limited{w: &stderr, left: 16 << 10}
	err = run.Cmd.Run()
	switch {
	case err != nil && ctx.Err() != nil:
		return "", fmt.Errorf("ocr: tesseract did not finish within %s", timeout)
	case err != nil:
		return "", fmt.Errorf("ocr: tesseract failed (%v)%s", err, lastLine(stderr.String()))
	}
	text := strings.TrimSpace(strings.TrimRight(out.buf.String(), "\f\n "))
	if out.cut {
		text += fmt.Sprintf("\n… (cut at %d bytes)", limit)
	}
	return text, nil
}

// capped keeps the first max bytes written to it and drops the rest without failing
// the writer.
type capped struct {
	max int
	buf bytes.Buffer
	cut bool
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if room := c.max - c.buf.Len(); room < len(p) {
		c.cut = true
		p = p[:max(room, 0)]
	}
	c.buf.Write(p)
	return n, nil
}

// limited writes at most left bytes to w and drops the rest.
type limited struct {
	w    *bytes.Buffer
	left int
}

func (l *limited) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > l.left {
		p = p[:l.left]
	}
	l.left -= len(p)
	l.w.Write(p)
	return n, nil
}

// lastLine is the last line of a tool's messages, for an error.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return ": " + s
}
