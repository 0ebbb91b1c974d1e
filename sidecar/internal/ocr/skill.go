package ocr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/skills"
)

// SkillName is the skill's name.
const SkillName = "ocr"

// MaxFileBytes bounds the files read.
const MaxFileBytes = 50 << 20

const skillUsage = `ocr FILE [--lang eng+deu]   print the text in a photo, scan or PDF of your workspace
FILE is a path in your workspace such as inbox/receipt.jpg (or /workspace/inbox/receipt.jpg): an image
(png, jpg, gif, bmp, tiff, webp, pnm) or a PDF (its first 20 pages, separated by form feeds); at most 50 MB.
Nextcloud's own OCR reads images when its administrator installed a provider; otherwise tesseract does,
with --lang (default eng; tesseract --list-langs shows what is installed).`

// SkillOptions configure the skill.
type SkillOptions struct {
	// Nextcloud reads images through Nextcloud's OCR provider; nil without a bot account.
	Nextcloud *Nextcloud
	// Local reads with tesseract in a sandbox; nil when tesseract is not installed.
	Local *Tesseract
	// Root returns the local copy of a user's /Users/{uid}/ folder (the workspace).
	Root   func(uid string) (string, error)
	Logger *slog.Logger
}

// RegisterSkill adds the ocr skill to reg.
func RegisterSkill(reg *skills.Registry, opts SkillOptions) error {
	if opts.Root == nil {
		return errors.New("ocr: no workspace root")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return reg.Register(skills.Skill{
		Manifest: skills.Manifest{
			Name:    SkillName,
			Summary: "read the text in a photo, scan or PDF of your workspace",
			Usage:   skillUsage,
			Load: skills.Load{Keywords: []string{"ocr", "scan", "photo", "image", "picture", "screenshot", "receipt",
				"pdf", "png", "jpg", "jpeg", "foto", "bild", "beleg"}},
			// Reading the user's own file, with Nextcloud's own provider or locally.
			Classify: func(context.Context, skills.Invocation) approval.Action {
				return approval.Action{Tier: approval.TierRead}
			},
		},
		Run: func(ctx context.Context, inv skills.Invocation) skills.Result { return runSkill(ctx, opts, inv) },
	})
}

func parseArgs(args []string) (file, langs string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		switch {
		case name == "--lang":
			if !hasVal {
				if i+1 >= len(args) {
					return "", "", errors.New("--lang needs languages such as eng+deu")
				}
				i++
				val = args[i]
			}
			if !ValidLanguages(val) {
				return "", "", fmt.Errorf("--lang %q is not a list of tesseract languages such as eng+deu", val)
			}
			langs = val
		case strings.HasPrefix(a, "-"):
			return "", "", fmt.Errorf("unknown option %q", a)
		case file != "":
			return "", "", errors.New("give one file")
		default:
			file = a
		}
	}
	if file == "" {
		return "", "", errors.New("no file")
	}
	return file, langs, nil
}

func runSkill(ctx context.Context, opts SkillOptions, inv skills.Invocation) skills.Result {
	arg, langs, err := parseArgs(inv.Args)
	if err != nil {
		return skills.Usagef("ocr: %v\nusage: istota skill %s", err, skillUsage)
	}
	if inv.UserID == "" {
		return skills.Failf("ocr: no user for this task")
	}
	rel, err := workspacePath(arg)
	if err != nil {
		return skills.Usagef("ocr: %v", err)
	}
	kind := KindOf(rel)
	if kind == Unknown {
		return skills.Usagef("ocr: %s is not an image or a PDF (by its extension)", rel)
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
	fi, err := root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return skills.Failf("ocr: %s does not exist in your workspace", rel)
	case err != nil:
		return skills.Failf("ocr: %s cannot be read: %v", rel, errors.Unwrap(err))
	case fi.Mode()&fs.ModeSymlink != 0:
		return skills.Failf("ocr: %s is a symbolic link; only plain files are read", rel)
	case !fi.Mode().IsRegular():
		return skills.Failf("ocr: %s is not a file", rel)
	case fi.Size() > MaxFileBytes:
		return skills.Failf("ocr: %s is %d MB; at most 50 MB are read", rel, fi.Size()>>20)
	}

	var ncErr error
	if kind == Image && opts.Nextcloud != nil {
		text, err := opts.Nextcloud.Read(ctx, inv.UserID, rel, "istota-task-"+strconv.FormatInt(inv.TaskID, 10))
		switch {
		case err == nil:
			return answer(text, "read by Nextcloud's OCR")
		case errors.Is(err, ErrNoProvider):
		case ctx.Err() != nil:
			r := skills.Failf("ocr: %s could not be read in time", rel)
			r.Err = err
			return r
		default:
			// Nextcloud down, or the file not uploaded yet: tesseract reads it here.
			ncErr = err
			opts.Logger.Warn("ocr: Nextcloud's OCR failed; reading with tesseract", "user_id", inv.UserID, "task_id", inv.TaskID, "err", err)
		}
	}
	if opts.Local == nil {
		r := skills.Failf("ocr: no OCR is available on this server (Nextcloud offers no OCR provider, and tesseract cannot run here: it is not installed or the sandbox is disabled); tell the user an administrator can install tesseract-ocr")
		r.Err = ncErr
		return r
	}
	text, err := opts.Local.Read(ctx, Job{UserID: inv.UserID, TaskID: inv.TaskID, File: filepath.Join(dir, filepath.FromSlash(rel)), Kind: kind, Langs: langs})
	if err != nil {
		r := skills.Failf("ocr: %s could not be read: %v", rel, strings.TrimPrefix(err.Error(), "ocr: "))
		r.Err = err
		return r
	}
	return answer(text, "read by tesseract")
}

func answer(text, by string) skills.Result {
	if text == "" {
		return skills.Result{Stdout: []byte("(no text recognised; " + by + ")\n")}
	}
	return skills.Result{Stdout: []byte(text + "\n(" + by + ")\n")}
}

// workspacePath turns the argument into a clean path relative to the workspace.
func workspacePath(arg string) (string, error) {
	p := strings.TrimPrefix(arg, "/workspace/")
	if p == "" || strings.ContainsAny(p, "\x00\\") || path.IsAbs(p) {
		return "", fmt.Errorf("%q is not a path in your workspace", arg)
	}
	clean := path.Clean(p)
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%q is not a path in your workspace", arg)
	}
	return clean, nil
}
