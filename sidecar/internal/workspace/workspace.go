// Package workspace keeps each user's files: the folders the bot account holds for them
// in Nextcloud (/Users/{uid}/…, shared with the user so they can read and edit them in
// Files) and a local mirror the agent's sandbox works in, kept in step over WebDAV.
//
// Layout in the bot's storage (ARCHITECTURE.md §3):
//
//	/Users/{uid}/{bot}/config/   USER.md PERSONA.md CRON.md HEARTBEAT.md BRIEFINGS.md TASKS.md
//	/Users/{uid}/{bot}/exports/  what the agent produces for the user
//	/Users/{uid}/memories/ inbox/ shared/ scripts/
//	/Channels/{token}/           CHANNEL.md, memories/
//
// Sync decides with ETags (remote) and SHA-256 content hashes (local) against what
// both sides last agreed on (table sync_state). An edit is never dropped: when both
// sides changed, the remote version stays at the path and the local one is kept beside
// it as "<name> (conflict <host> <date>).<ext>", on both sides. In mount mode the
// bot's storage is already a local directory and the mirror is that directory.
package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/webdav"
)

// Modes.
const (
	ModeSync  = "sync"
	ModeMount = "mount"
)

// Remote is what the workspace needs from Nextcloud; *webdav.Client implements it.
type Remote interface {
	ReadDir(ctx context.Context, name string, recursive bool) ([]webdav.FileInfo, error)
	ListLevel(ctx context.Context, name, depth string) ([]webdav.FileInfo, error)
	Open(ctx context.Context, name string) (*webdav.Object, error)
	Put(ctx context.Context, name string, body io.Reader, size int64, opts webdav.PutOptions) (string, error)
	MkdirAll(ctx context.Context, name string) error
	Delete(ctx context.Context, name, ifMatch string) error
	ShareWithUser(ctx context.Context, name, uid string, permissions int) (webdav.Share, bool, error)
	CompleteShareWithUser(ctx context.Context, name, uid string, permissions int) (webdav.Share, bool, error)
	Move(ctx context.Context, from, to string, overwrite bool) error
	SharedWithMe(ctx context.Context) ([]webdav.IncomingShare, error)
	// User is the bot account's user id.
	User() string
}

// Options configures a Workspace.
type Options struct {
	// Mode is ModeSync (default) or ModeMount.
	Mode string
	// MountPath, in mount mode, is the bot's files root on this machine (the folder
	// that holds Users/ and Channels/), e.g. /srv/nextcloud/data/istota/files.
	MountPath string
	// UserMirror and ChannelMirror, in sync mode, say where the local mirror of
	// /Users/{uid} and of /Channels/{token} lives. UserMirror must agree with the
	// executor's workspace directory (<data>/users/<safe uid>/workspace).
	UserMirror    func(uid string) string
	ChannelMirror func(token string) string
	// BotDir is the name of the {bot} folder, e.g. "istota".
	BotDir string
	// MaxFileBytes bounds one synced file; larger files are skipped and reported.
	// Default 100 MiB.
	MaxFileBytes int64
	// SharePermissions is what the user gets on {bot}/. Default webdav.PermEdit.
	SharePermissions int
	// Host appears in conflict file names. Default: this machine's host name.
	Host string
	// Mirror names this host's mirrors in the database, where what each sync agreed
	// with Nextcloud is kept per mirror. Empty is right when the database is this host's
	// alone (SQLite); hosts sharing a PostgreSQL database each need their own, kept
	// with their mirrors (the app keeps it in the data directory).
	Mirror string
	Clock  func() time.Time
	Logger *slog.Logger
}

// Workspace provisions users' folders and syncs their mirrors. It is safe for
// concurrent use; syncs of the same user (or channel) run one at a time.
type Workspace struct {
	db     *store.DB
	remote Remote
	opts   Options

	mu          sync.Mutex
	locks       map[string]chan struct{} // one per tree key; a held lock is a full channel
	provisioned map[string]bool          // tree keys provisioned by this process
	unsynced    map[string]bool          // tree keys whose last sync failed
	refused     map[string]bool          // incoming share ids already logged as refused
	// checked is when the last successful sync of a tree that asked Nextcloud began:
	// a task made before that needs no pull of its own.
	checked map[string]time.Time
	// shareSeen is when EnsureShared (or Provision) last saw a user's share.
	shareSeen map[string]time.Time

	// records holds the sync records of the trees synced last (cache.go).
	records *recordCache

	// Prefetches run in the background, owned here; Close stops them.
	bg       sync.WaitGroup
	bgCtx    context.Context
	bgCancel context.CancelFunc
	fetching map[string]bool // trees with a prefetch running
	// fetchSlots bounds the prefetches at once: they are an optimisation, and a burst of
	// them must not crowd out the requests of the people writing to the bot.
	fetchSlots chan struct{}
}

// maxPrefetches is how many prefetches may run at once; more are skipped (the task
// pulls itself).
const maxPrefetches = 2

// New returns a Workspace.
func New(db *store.DB, remote Remote, opts Options) (*Workspace, error) {
	if db == nil || remote == nil {
		return nil, errors.New("workspace: a database and a Nextcloud client are required")
	}
	switch opts.Mode {
	case "":
		opts.Mode = ModeSync
	case ModeSync, ModeMount:
	default:
		return nil, fmt.Errorf("workspace: unknown mode %q (want %s or %s)", opts.Mode, ModeSync, ModeMount)
	}
	if opts.Mode == ModeMount && !filepath.IsAbs(opts.MountPath) {
		return nil, fmt.Errorf("workspace: mount mode needs an absolute mount path, got %q", opts.MountPath)
	}
	if opts.Mode == ModeSync && (opts.UserMirror == nil || opts.ChannelMirror == nil) {
		return nil, errors.New("workspace: sync mode needs UserMirror and ChannelMirror")
	}
	if err := webdav.ValidateName(opts.BotDir); err != nil {
		return nil, fmt.Errorf("workspace: bot folder name: %w", err)
	}
	if opts.MaxFileBytes <= 0 {
		opts.MaxFileBytes = 100 << 20
	}
	if opts.SharePermissions == 0 {
		opts.SharePermissions = webdav.PermEdit
	}
	if opts.Host == "" {
		opts.Host, _ = os.Hostname()
	}
	opts.Host = hostLabel(opts.Host)
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	bgCtx, bgCancel := context.WithCancel(context.Background())
	return &Workspace{
		db: db, remote: remote, opts: opts, records: newRecordCache(defaultCachedRecords),
		locks:       map[string]chan struct{}{},
		provisioned: map[string]bool{},
		unsynced:    map[string]bool{},
		refused:     map[string]bool{},
		checked:     map[string]time.Time{},
		shareSeen:   map[string]time.Time{},
		bgCtx:       bgCtx, bgCancel: bgCancel,
		fetching:   map[string]bool{},
		fetchSlots: make(chan struct{}, maxPrefetches),
	}, nil
}

// Settle waits for the running prefetches to finish.
func (w *Workspace) Settle() { w.bg.Wait() }

// Close stops the prefetches and waits for them.
func (w *Workspace) Close() {
	w.bgCancel()
	w.bg.Wait()
}

// Prefetch syncs, in the background, a user's tree and a conversation's (token may be
// empty) as soon as a task for them is queued. The task's Prepare then finds them
// checked after the task was made and skips its own pull: the round trips to Nextcloud
// happen while the task waits in the queue or starts, not in the worker's time. New
// users and trees already being fetched are left alone.
func (w *Workspace) Prefetch(uid, token string) {
	if w.opts.Mode == ModeMount {
		return
	}
	var trees []tree
	if t, err := w.userTree(uid); err == nil {
		trees = append(trees, t)
	}
	if token != "" {
		if t, err := w.channelTree(token); err == nil {
			trees = append(trees, t)
		}
	}
	for _, t := range trees {
		w.mu.Lock()
		busy := w.fetching[t.key]
		w.fetching[t.key] = true
		w.mu.Unlock()
		if busy {
			continue
		}
		select {
		case w.fetchSlots <- struct{}{}:
		default:
			w.mu.Lock()
			delete(w.fetching, t.key)
			w.mu.Unlock()
			continue
		}
		w.bg.Add(1)
		go func(t tree) {
			defer w.bg.Done()
			defer func() { <-w.fetchSlots }()
			defer func() {
				w.mu.Lock()
				delete(w.fetching, t.key)
				w.mu.Unlock()
			}()
			ctx, cancel := context.WithTimeout(w.bgCtx, 5*time.Minute)
			defer cancel()
			if fresh, err := w.fresh(ctx, t.key); err != nil || fresh || !w.isProvisioned(t.key) {
				return // new or not provisioned yet: the task's own Prepare decides
			}
			if _, err := w.sync(ctx, t, "prefetch"); err != nil && ctx.Err() == nil {
				w.opts.Logger.Debug("prefetch failed; the task pulls itself", "tree", t.remote, "err", err)
			}
		}(t)
	}
}

// hostLabel keeps a host name short and safe inside a file name.
func hostLabel(h string) string {
	h, _, _ = strings.Cut(h, ".")
	var b strings.Builder
	for _, r := range h {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		}
		if b.Len() >= 32 {
			break
		}
	}
	if b.Len() == 0 {
		return "sidecar"
	}
	return b.String()
}

// tree is one synced subtree: a user's /Users/{uid} or a channel's /Channels/{token}.
type tree struct {
	key    string   // sync_state.user_id: the uid, or "channel:<token>"
	remote string   // root-relative remote folder
	local  string   // the mirror directory
	keep   []string // folders recreated when missing on one side instead of deleted
}

// Nextcloud user ids cannot contain ':' (letters, digits, "_.@-'" and spaces), so a
// channel's state can never collide with a user's.
const channelKeyPrefix = "channel:"

func (w *Workspace) userTree(uid string) (tree, error) {
	if err := webdav.ValidateName(uid); err != nil {
		return tree{}, fmt.Errorf("workspace: user id: %w", err)
	}
	t := tree{key: uid, remote: "Users/" + uid, keep: w.userFolders()}
	if w.opts.Mode == ModeMount {
		t.local = filepath.Join(w.opts.MountPath, "Users", uid)
	} else {
		t.local = w.opts.UserMirror(uid)
	}
	return t, nil
}

func (w *Workspace) channelTree(token string) (tree, error) {
	if err := webdav.ValidateName(token); err != nil {
		return tree{}, fmt.Errorf("workspace: conversation token: %w", err)
	}
	t := tree{key: channelKeyPrefix + token, remote: "Channels/" + token, keep: []string{"memories"}}
	if w.opts.Mode == ModeMount {
		t.local = filepath.Join(w.opts.MountPath, "Channels", token)
	} else {
		t.local = w.opts.ChannelMirror(token)
	}
	return t, nil
}

// userFolders are the folders every user has, relative to /Users/{uid}.
func (w *Workspace) userFolders() []string {
	b := w.opts.BotDir
	return []string{b, b + "/config", b + "/exports", "memories", "inbox", "shared", "scripts"}
}

// UserRoot is the local directory that mirrors /Users/{uid}: what the sandbox binds
// as /workspace. In mount mode it is inside the mounted storage.
func (w *Workspace) UserRoot(uid string) (string, error) {
	t, err := w.userTree(uid)
	return t.local, err
}

// ChannelRoot is the local directory that mirrors /Channels/{token}.
func (w *Workspace) ChannelRoot(token string) (string, error) {
	t, err := w.channelTree(token)
	return t.local, err
}

// BotFolder is the user's {bot} folder relative to their root, e.g. "istota".
func (w *Workspace) BotFolder() string { return w.opts.BotDir }

// lock serialises work on one tree. It gives up when ctx ends.
func (w *Workspace) lock(ctx context.Context, key string) (func(), error) {
	w.mu.Lock()
	ch, ok := w.locks[key]
	if !ok {
		ch = make(chan struct{}, 1)
		w.locks[key] = ch
	}
	w.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Provision creates a user's folders in the bot's storage, seeds the config files
// that do not exist yet (a user's edit is never overwritten: seeds are uploaded with
// If-None-Match: *), and shares {bot}/ with the user. It is idempotent; after it has
// succeeded once, later calls in the same process return at once, so the intake may
// call it on every message. A failure is returned and the next call tries again.
func (w *Workspace) Provision(ctx context.Context, uid string) error {
	t, err := w.userTree(uid)
	if err != nil {
		return err
	}
	if w.isProvisioned(t.key) {
		return nil
	}
	unlock, err := w.lock(ctx, t.key)
	if err != nil {
		return err
	}
	defer unlock()
	for _, d := range t.keep {
		if err := w.remote.MkdirAll(ctx, t.remote+"/"+d); err != nil {
			return fmt.Errorf("workspace: provision %s: %w", uid, err)
		}
	}
	for _, s := range userSeeds(w.opts.BotDir) {
		if err := w.seed(ctx, t.remote+"/"+s.path, s.content); err != nil {
			return fmt.Errorf("workspace: provision %s: %w", uid, err)
		}
	}
	// Completed, not just found: a share found here may be one Nextcloud stored but
	// never accepted for the user (an earlier attempt failed half way), which the
	// user would never see.
	share, created, err := w.shareBotDir(ctx, t, uid, true)
	if err != nil {
		return fmt.Errorf("workspace: share %s/ with %s: %w", w.opts.BotDir, uid, err)
	}
	if created {
		w.opts.Logger.Info("shared the bot folder with the user", "user_id", uid, "share_id", share.ID, "target", share.FileTarget)
	}
	w.setProvisioned(ctx, t.key)
	return nil
}

// shareBotDir makes sure the user's bot folder is shared with them (creating the share
// when there is none; completing it too when complete is set, see
// webdav.CompleteShareWithUser) and notes when it was seen, for EnsureShared.
func (w *Workspace) shareBotDir(ctx context.Context, t tree, uid string, complete bool) (webdav.Share, bool, error) {
	share := w.remote.ShareWithUser
	if complete {
		share = w.remote.CompleteShareWithUser
	}
	s, created, err := share(ctx, t.remote+"/"+w.opts.BotDir, uid, w.opts.SharePermissions)
	if err != nil {
		return webdav.Share{}, false, err
	}
	w.mu.Lock()
	w.shareSeen[t.key] = w.opts.Clock()
	w.mu.Unlock()
	return s, created, nil
}

// shareCheckEvery is how often EnsureShared asks Nextcloud about a user's share.
const shareCheckEvery = time.Hour

// EnsureShared shares the bot folder with a provisioned user again when the share is
// gone: an admin removed it, or the user left it in Files. The database remembers the
// user as provisioned, so Provision alone would never notice, and the user would have
// no istota/ folder (no USER.md, no CRON.md) from then on. It asks Nextcloud once per
// process and then at most once an hour per user (one OCS request while the share is
// there); it is meant for the background refresh, not for a task's path.
func (w *Workspace) EnsureShared(ctx context.Context, uid string) error {
	t, err := w.userTree(uid)
	if err != nil {
		return err
	}
	if !w.isProvisioned(t.key) {
		return nil // Provision shares it
	}
	now := w.opts.Clock()
	w.mu.Lock()
	last, seen := w.shareSeen[t.key]
	w.mu.Unlock()
	if seen && now.Sub(last) < shareCheckEvery && now.Sub(last) >= 0 {
		return nil
	}
	share, created, err := w.shareBotDir(ctx, t, uid, false)
	if err != nil {
		return fmt.Errorf("workspace: check the share of %s/ with %s: %w", w.opts.BotDir, uid, err)
	}
	if created {
		w.opts.Logger.Warn("the bot folder was no longer shared with the user; shared it again",
			"user_id", uid, "share_id", share.ID, "target", share.FileTarget)
	}
	return nil
}

// ProvisionChannel creates /Channels/{token}/ with memories/ and a commented CHANNEL.md.
// Like Provision it is idempotent and remembered once it succeeded.
func (w *Workspace) ProvisionChannel(ctx context.Context, token string) error {
	t, err := w.channelTree(token)
	if err != nil {
		return err
	}
	if w.isProvisioned(t.key) {
		return nil
	}
	unlock, err := w.lock(ctx, t.key)
	if err != nil {
		return err
	}
	defer unlock()
	for _, d := range t.keep {
		if err := w.remote.MkdirAll(ctx, t.remote+"/"+d); err != nil {
			return fmt.Errorf("workspace: provision channel %s: %w", token, err)
		}
	}
	if err := w.seed(ctx, t.remote+"/CHANNEL.md", channelSeed); err != nil {
		return fmt.Errorf("workspace: provision channel %s: %w", token, err)
	}
	w.setProvisioned(ctx, t.key)
	return nil
}

// provisionLayout versions what Provision makes; raising it provisions every tree
// again once (new folders or seed files). 2: the bot folder's share is completed, not
// just found (webdav.CompleteShareWithUser), so a share that Nextcloud left pending for
// a user provisioned before is accepted once.
const provisionLayout = 2

// isProvisioned reports whether the tree was provisioned, by this process or (as the
// database remembers) an earlier one, so a restart does not provision every user again.
func (w *Workspace) isProvisioned(key string) bool {
	w.mu.Lock()
	done := w.provisioned[key]
	w.mu.Unlock()
	if done {
		return true
	}
	var layout int
	err := w.db.Read.QueryRow(`SELECT layout FROM workspace_provisioned WHERE tree = ?`, key).Scan(&layout)
	if err != nil || layout < provisionLayout {
		return false
	}
	w.mu.Lock()
	w.provisioned[key] = true
	w.mu.Unlock()
	return true
}

func (w *Workspace) setProvisioned(ctx context.Context, key string) {
	w.mu.Lock()
	w.provisioned[key] = true
	w.mu.Unlock()
	if _, err := w.db.Write.ExecContext(ctx, `INSERT INTO workspace_provisioned (tree, layout, at) VALUES (?, ?, ?)
		ON CONFLICT (tree) DO UPDATE SET layout = excluded.layout, at = excluded.at`,
		key, provisionLayout, store.FormatTime(w.opts.Clock())); err != nil {
		// Only costs a provisioning after the next restart.
		w.opts.Logger.Warn("could not remember a provisioned folder", "tree", key, "err", err)
	}
}

// fresh reports whether a tree was never provisioned nor synced: a new user or
// conversation.
func (w *Workspace) fresh(ctx context.Context, key string) (bool, error) {
	if w.isProvisioned(key) {
		return false, nil
	}
	var synced bool
	if err := w.db.Read.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sync_state WHERE user_id = ?)`, key).Scan(&synced); err != nil {
		return false, fmt.Errorf("workspace: %w", err)
	}
	return !synced, nil
}

// Prepare makes a user's mirror ready for a task. A user never provisioned nor synced
// (new) gets the folders and seed files in the mirror only: making them in Nextcloud,
// with the share, takes a dozen requests, which Finish does after the answer. Everyone
// else is provisioned (once) and pulled.
//
// A sync of the tree that began after since (when the task was made: a Prefetch, or
// another task's pull) already brought everything the task's request could refer to,
// so the pull is skipped then; a zero since always pulls.
func (w *Workspace) Prepare(ctx context.Context, uid string, since time.Time) (Report, error) {
	t, err := w.userTree(uid)
	if err != nil {
		return Report{}, err
	}
	if isNew, err := w.isNew(ctx, t); err != nil {
		return Report{}, err
	} else if isNew {
		return Report{}, seedLocal(t, userSeeds(w.opts.BotDir))
	}
	if err := w.Provision(ctx, uid); err != nil {
		return Report{}, err
	}
	return w.syncSince(ctx, t, "pull", since)
}

// Finish sends what a task left in the user's mirror to Nextcloud, provisioning a new
// user first.
func (w *Workspace) Finish(ctx context.Context, uid string) (Report, error) {
	if err := w.Provision(ctx, uid); err != nil {
		w.markSynced(uid, err) // RetryFailed tries again
		return Report{}, err
	}
	t, err := w.userTree(uid)
	if err != nil {
		return Report{}, err
	}
	return w.sync(ctx, t, opAfterTask)
}

// PrepareChannel and FinishChannel are Prepare and Finish for a conversation's folder.
func (w *Workspace) PrepareChannel(ctx context.Context, token string, since time.Time) (Report, error) {
	t, err := w.channelTree(token)
	if err != nil {
		return Report{}, err
	}
	if isNew, err := w.isNew(ctx, t); err != nil {
		return Report{}, err
	} else if isNew {
		return Report{}, seedLocal(t, []seedFile{{"CHANNEL.md", channelSeed}})
	}
	if err := w.ProvisionChannel(ctx, token); err != nil {
		return Report{}, err
	}
	return w.syncSince(ctx, t, "pull", since)
}

func (w *Workspace) FinishChannel(ctx context.Context, token string) (Report, error) {
	if err := w.ProvisionChannel(ctx, token); err != nil {
		w.markSynced(channelKeyPrefix+token, err)
		return Report{}, err
	}
	t, err := w.channelTree(token)
	if err != nil {
		return Report{}, err
	}
	return w.sync(ctx, t, opAfterTask)
}

// isNew reports whether a tree is new: never provisioned nor synced here, and without a
// folder in Nextcloud (one small request; a user may have files there from an earlier
// installation or the settings page, and those must reach the first task).
func (w *Workspace) isNew(ctx context.Context, t tree) (bool, error) {
	if w.opts.Mode == ModeMount {
		return false, nil
	}
	fresh, err := w.fresh(ctx, t.key)
	if err != nil || !fresh {
		return false, err
	}
	_, err = w.remote.ListLevel(ctx, t.remote, webdav.DepthSelf)
	return errors.Is(err, webdav.ErrNotFound), nil
}

// seedLocal creates a tree's folders and seed files in its mirror where missing.
func seedLocal(t tree, seeds []seedFile) error {
	for _, d := range t.keep {
		if err := os.MkdirAll(filepath.Join(t.local, filepath.FromSlash(d)), 0o700); err != nil {
			return fmt.Errorf("workspace: seed mirror: %w", err)
		}
	}
	for _, s := range seeds {
		p := filepath.Join(t.local, filepath.FromSlash(s.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return fmt.Errorf("workspace: seed mirror: %w", err)
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("workspace: seed mirror: %w", err)
		}
		_, werr := f.WriteString(s.content)
		if err := f.Close(); werr == nil {
			werr = err
		}
		if werr != nil {
			return fmt.Errorf("workspace: seed mirror: %w", werr)
		}
	}
	return nil
}

// seed uploads content to name unless something is already there.
func (w *Workspace) seed(ctx context.Context, name, content string) error {
	_, err := w.remote.Put(ctx, name, strings.NewReader(content), int64(len(content)), webdav.PutOptions{IfNoneMatch: true})
	if errors.Is(err, webdav.ErrPreconditionFailed) {
		return nil
	}
	return err
}
