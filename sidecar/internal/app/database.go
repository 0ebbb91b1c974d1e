package app

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/istota/istota/sidecar/internal/config"
	"github.com/istota/istota/sidecar/internal/store"
)

// errNoDatabase means the SQLite file does not exist yet (only `istota serve` creates it).
var errNoDatabase = errors.New("the database does not exist yet: `istota serve` creates it")

// openDatabase opens the store the configuration names: the SQLite file, or the shared
// PostgreSQL database.
func openDatabase(ctx context.Context, cfg config.Config) (*store.DB, error) {
	if cfg.Database.Postgres() {
		db, err := store.OpenPostgres(ctx, cfg.Database.DSN, cfg.Database.MaxConns)
		if err != nil {
			return nil, fmt.Errorf("database: %w", err)
		}
		return db, nil
	}
	return store.Open(ctx, cfg.Database.Path)
}

// openExistingDatabase is openDatabase for commands that must not create a SQLite file.
func openExistingDatabase(ctx context.Context, cfg config.Config) (*store.DB, error) {
	if !cfg.Database.Postgres() {
		if _, err := os.Stat(cfg.Database.Path); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Database.Path, errNoDatabase)
		}
	}
	return openDatabase(ctx, cfg)
}
