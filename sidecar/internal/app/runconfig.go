package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/istota/istota/sidecar/internal/config"
	"github.com/istota/istota/sidecar/internal/settings"
	"github.com/istota/istota/sidecar/internal/signing"
	"github.com/istota/istota/sidecar/internal/store"
)

// Every command runs with one complete configuration, finished here before any component
// is given a copy: absolute paths, the shared secret generated into (or read from) the
// data directory, and the admin's stored settings over the file. A component built from
// a copy taken halfway through would run with values the rest of the process no longer
// has (an empty signing key was the result once), so nothing below changes a
// configuration after it has been handed out.

// sharedSecretFile is where `istota serve` keeps the secret it generated when neither the
// configuration nor the environment gave one.
const sharedSecretFile = "shared_secret"

// resolvePaths makes data_dir and database.path absolute, with data_dir's symbolic links
// resolved when it exists: sandbox bind sources must be real, absolute paths.
func resolvePaths(cfg config.Config) (config.Config, error) {
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return cfg, fmt.Errorf("data_dir: %w", err)
	}
	if real, err := filepath.EvalSymlinks(dataDir); err == nil {
		dataDir = real
	} else if !errors.Is(err, fs.ErrNotExist) {
		return cfg, fmt.Errorf("data_dir: %w", err)
	}
	cfg.DataDir = dataDir
	if cfg.Database.Path, err = filepath.Abs(cfg.Database.Path); err != nil {
		return cfg, fmt.Errorf("database.path: %w", err)
	}
	return cfg, nil
}

// withSharedSecret fills in the shared secret when the configuration has none: from the
// data directory, where `serve` (generate) creates a random one the first time. Commands
// that do not serve only read it, so they sign exactly as the running server verifies.
func withSharedSecret(cfg config.Config, generate bool, log *slog.Logger) (config.Config, error) {
	if cfg.Nextcloud.SharedSecret == "" {
		path := filepath.Join(cfg.DataDir, sharedSecretFile)
		if generate {
			secret, created, err := loadOrCreateSecret(cfg.DataDir, sharedSecretFile)
			if err != nil {
				return cfg, err
			}
			cfg.Nextcloud.SharedSecret = secret
			if created {
				log.Warn("generated a shared secret; give it to the Nextcloud app with `occ istota:setup` or set nextcloud.shared_secret_file",
					"path", path)
			}
		} else if b, err := os.ReadFile(path); err == nil {
			cfg.Nextcloud.SharedSecret = strings.TrimSpace(string(b))
		} else if !errors.Is(err, fs.ErrNotExist) {
			return cfg, fmt.Errorf("read %s: %w", path, err)
		}
	}
	if generate {
		// Serving without a usable secret would verify requests against a weak key.
		if err := signing.CheckSecret([]byte(cfg.Nextcloud.SharedSecret)); err != nil {
			return cfg, fmt.Errorf("nextcloud.shared_secret: %w", err)
		}
	}
	return cfg, nil
}

// inspectConfig is the configuration `istota doctor` checks: the one `istota serve`
// would run with, read without creating or changing anything. db is nil when the
// database does not exist yet; the caller closes it otherwise.
func inspectConfig(ctx context.Context, cfg config.Config) (config.Config, *store.DB, error) {
	cfg, err := resolvePaths(cfg)
	if err != nil {
		return cfg, nil, err
	}
	if cfg, err = withSharedSecret(cfg, false, nil); err != nil {
		return cfg, nil, err
	}
	db, err := openExistingDatabase(ctx, cfg)
	if errors.Is(err, errNoDatabase) {
		return cfg, nil, nil
	}
	if err != nil {
		return cfg, nil, err
	}
	st, err := settings.Open(ctx, db, cfg, settings.Options{DataDir: cfg.DataDir, Brains: brainKinds()})
	if err != nil {
		db.Close()
		return cfg, nil, err
	}
	return st.Effective(), db, nil
}

// brainKinds are the brains newBrain can build.
func brainKinds() []string { return []string{"claude", "openai"} }

// findAgent locates the Claude Code CLI brain.claude_path names: a path, a name on PATH,
// or — for the default name — the one installed beside the istota binary (`make build`
// links the npm CLI there; the app-store package may ship one there). serve, task and
// doctor all find it the same way.
func findAgent(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil && !strings.ContainsRune(name, '/') {
		if self, serr := os.Executable(); serr == nil {
			if p, lerr := exec.LookPath(filepath.Join(filepath.Dir(self), name)); lerr == nil {
				path, err = p, nil
			}
		}
	}
	if err != nil {
		return "", fmt.Errorf("brain.claude_path: the claude CLI %q was not found on PATH or beside istota (install @anthropic-ai/claude-code)", name)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("brain.claude_path: %w", err)
	}
	return real, nil
}
