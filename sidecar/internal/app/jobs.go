package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/istota/istota/sidecar/internal/executor"
	"github.com/istota/istota/sidecar/internal/jobs"
	"github.com/istota/istota/sidecar/internal/schedule"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/workspace"
)

// userConfigFiles gives the job runner the users and the config files of their bot
// folder: read from the local mirror, refreshed from Nextcloud and written back there.
type userConfigFiles struct {
	db      *store.DB
	dataDir string
	botDir  string
	ws      *workspace.Workspace // nil without a bot account: local mirrors only
}

func (f *userConfigFiles) Users(ctx context.Context) ([]jobs.User, error) {
	rows, err := f.db.Read.QueryContext(ctx, `SELECT id, timezone, is_admin, email FROM users ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("users: %w", err)
	}
	defer rows.Close()
	var out []jobs.User
	for rows.Next() {
		var u jobs.User
		if err := rows.Scan(&u.ID, &u.Timezone, &u.IsAdmin, &u.Email); err != nil {
			return nil, fmt.Errorf("users: %w", err)
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

func (f *userConfigFiles) Refresh(ctx context.Context, uid string) error {
	if f.ws == nil {
		return nil
	}
	if err := f.ws.Provision(ctx, uid); err != nil {
		return err
	}
	_, err := f.ws.Pull(ctx, uid)
	return errors.Join(err, f.ws.EnsureShared(ctx, uid))
}

func (f *userConfigFiles) path(uid, name string) string {
	return filepath.Join(executor.UserMirror(f.dataDir, uid), f.botDir, "config", name)
}

func (f *userConfigFiles) ReadConfig(uid, name string) ([]byte, bool, error) {
	b, err := os.ReadFile(f.path(uid, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s of %s: %w", name, uid, err)
	}
	return b, true, nil
}

// WriteConfig replaces the file atomically in the mirror and pushes it; a push that
// fails is retried by the background loop, so the write itself is not lost.
func (f *userConfigFiles) WriteConfig(ctx context.Context, uid, name string, data []byte) error {
	p := f.path(uid, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("write %s of %s: %w", name, uid, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+name+".*")
	if err != nil {
		return fmt.Errorf("write %s of %s: %w", name, uid, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s of %s: %w", name, uid, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s of %s: %w", name, uid, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("write %s of %s: %w", name, uid, err)
	}
	if f.ws != nil {
		// A failed push keeps the file in the mirror; retryPushes sends it when
		// Nextcloud is back, so the write is not lost.
		_, _ = f.ws.Push(ctx, uid)
	}
	return nil
}

// cronCommands is the schedule as !cron uses it, waking the runner after a change.
type cronCommands struct {
	*schedule.Scheduler
	runner *jobs.Runner
}

func (c cronCommands) Wake() { c.runner.Wake() }
