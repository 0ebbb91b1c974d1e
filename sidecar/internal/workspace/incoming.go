package workspace

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/istota/istota/sidecar/internal/webdav"
)

// maxNameTries bounds the search for a free "name (n).ext" in a shared/ folder.
const maxNameTries = 100

// SortIncomingShares moves every file or folder another user shared with the bot out of
// the bot's root into /Users/{owner}/shared/, where the owner's mirror picks it up. The
// owner is provisioned first. An existing file is never overwritten: the share gets the
// first free "name (2).ext", "name (3).ext"… Shares already under Users/ (or in the
// bot's own Channels/) are left alone, so calling it again changes nothing. A share
// whose owner is the bot itself or whose owner or path is hostile is skipped and logged
// once per process. It returns the root-relative paths it moved shares to; the
// failures of single shares are joined in err while the others are still sorted.
func (w *Workspace) SortIncomingShares(ctx context.Context) ([]string, error) {
	shares, err := w.remote.SharedWithMe(ctx)
	if err != nil {
		return nil, fmt.Errorf("workspace: list shares made with the bot: %w", err)
	}
	var moved []string
	var errs []error
	for _, sh := range shares {
		if top, _, _ := strings.Cut(sh.Path, "/"); top == "Users" || top == "Channels" {
			continue
		}
		if reason := w.refuseIncoming(sh); reason != "" {
			w.logRefused(sh, reason)
			continue
		}
		to, err := w.sortIncoming(ctx, sh)
		if err != nil {
			errs = append(errs, fmt.Errorf("workspace: share %s from %s: %w", sh.ID, sh.Owner, err))
			continue
		}
		w.opts.Logger.Debug("moved a share into the owner's shared folder",
			"share_id", sh.ID, "owner", sh.Owner, "item_type", sh.ItemType, "path", to)
		moved = append(moved, to)
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return moved, errors.Join(errs...)
}

// refuseIncoming says why a share must not be moved, or "" when it may.
func (w *Workspace) refuseIncoming(sh webdav.IncomingShare) string {
	switch {
	case sh.Owner == "":
		return "no owner"
	case strings.EqualFold(sh.Owner, w.remote.User()):
		return "shared by the bot itself"
	}
	if err := webdav.ValidateName(sh.Owner); err != nil {
		return "owner: " + err.Error()
	}
	if err := webdav.ValidatePath(sh.Path); err != nil {
		return "path: " + err.Error()
	}
	return ""
}

// logRefused warns about a refused share once, not on every tick.
func (w *Workspace) logRefused(sh webdav.IncomingShare, reason string) {
	w.mu.Lock()
	seen := w.refused[sh.ID]
	w.refused[sh.ID] = true
	w.mu.Unlock()
	if !seen {
		w.opts.Logger.Warn("left a share made with the bot where it is", "share_id", sh.ID, "reason", reason)
	}
}

// sortIncoming provisions the owner and moves one share to the first free name in
// their shared/ folder. MOVE without overwrite makes the "is it free" check and the
// move one step on the server, so a file that appears meanwhile is never replaced.
func (w *Workspace) sortIncoming(ctx context.Context, sh webdav.IncomingShare) (string, error) {
	if err := w.Provision(ctx, sh.Owner); err != nil {
		return "", err
	}
	dir := "Users/" + sh.Owner + "/shared/"
	name := path.Base(sh.Path)
	for n := 1; n <= maxNameTries; n++ {
		candidate := numbered(name, n, sh.ItemType == "folder")
		if err := webdav.ValidateName(candidate); err != nil {
			return "", fmt.Errorf("no usable name for %q: %w", name, err)
		}
		err := w.remote.Move(ctx, sh.Path, dir+candidate, false)
		if err == nil {
			return dir + candidate, nil
		}
		if !errors.Is(err, webdav.ErrPreconditionFailed) {
			return "", err
		}
	}
	return "", fmt.Errorf("%d names like %q are taken in %s", maxNameTries, name, dir)
}

// numbered is name for n == 1, else "base (n).ext". A folder has no extension ("2024.03"
// becomes "2024.03 (2)") and neither has a name that is all extension (".bashrc").
func numbered(name string, n int, folder bool) string {
	if n == 1 {
		return name
	}
	ext := path.Ext(name)
	if folder || ext == name || ext == "." {
		ext = ""
	}
	return strings.TrimSuffix(name, ext) + " (" + strconv.Itoa(n) + ")" + ext
}
