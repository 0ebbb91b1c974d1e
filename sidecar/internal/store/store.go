// Package store opens the sidecar's database: the embedded SQLite file (one writer
// connection, a pool of readers, WAL, foreign keys and a busy timeout) or, for several
// hosts sharing one queue, PostgreSQL (postgres.go). Ordered migrations each run in one
// transaction, the same files for both (dialect.go says how they are read on
// PostgreSQL). Domain packages own their SQL, written with `?` placeholders; this
// package owns only the connection and the schema.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	sqlitevec "github.com/asg017/sqlite-vec-go-bindings/cgo"
	sqlite3 "github.com/mattn/go-sqlite3"
)

// driverOnce loads the sqlite-vec extension (the memory package's vector index) into
// every SQLite connection of the process and registers driverName. SQLite's
// auto-extension list and database/sql's driver registry are process-wide by nature, so
// this is the one piece of process state the store keeps.
var driverOnce sync.Once

// driverName is mattn/go-sqlite3's driver with every connection set up to read the
// database through a memory map (mmapSize). Without it every page SQLite's own small
// cache lacks is one pread system call and a copy: a vector search at 100,000 chunks
// reads 20 MB of index that way, and the map took a quarter off it and off keyword
// search (measured by the memory package's BenchmarkSearch). Writes still go through
// write(2), and pages newer than the file are still read from the WAL.
const driverName = "sqlite3_istota"

// mmapSize bounds the map; a database larger than this is read beyond it as before.
const mmapSize = 1 << 30

func registerDriver() {
	sqlitevec.Auto()
	sql.Register(driverName, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		if _, err := c.Exec(fmt.Sprintf("PRAGMA mmap_size = %d", mmapSize), nil); err != nil {
			return fmt.Errorf("store: map the database: %w", err)
		}
		return nil
	}})
}

//go:embed migrations/*.sql
var migrationFS embed.FS

// ErrNotFound is returned by domain packages when a row does not exist.
var ErrNotFound = errors.New("not found")

// ErrSchemaTooNew means the database was written by a newer sidecar.
var ErrSchemaTooNew = errors.New("database schema is newer than this binary")

// DB holds the writer and reader handles. Writes go through Write; everything else may
// use Read. Both are safe for concurrent use.
type DB struct {
	Write *sql.DB
	Read  *sql.DB
	// Concurrent is for writers that take their own row locks (the queue's claim): on
	// PostgreSQL its transactions do not wait for the writer lock (see OpenPostgres);
	// on SQLite it is Write.
	Concurrent *sql.DB
	path       string
	dialect    Dialect
}

// Dialect is the engine behind db.
func (db *DB) Dialect() Dialect { return db.dialect }

// Open opens (creating if needed) the database at path and applies pending migrations.
// path ":memory:" is not supported because writer and readers must share one database.
func Open(ctx context.Context, path string) (*DB, error) {
	if path == "" || path == ":memory:" {
		return nil, errors.New("store: a database file path is required")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: create database directory: %w", err)
	}
	driverOnce.Do(registerDriver)
	dsn := func(mode string) string {
		q := url.Values{}
		q.Set("_journal_mode", "WAL")
		q.Set("_foreign_keys", "on")
		q.Set("_busy_timeout", "10000")
		q.Set("_synchronous", "NORMAL")
		q.Set("_txlock", "immediate")
		if mode != "" {
			q.Set("mode", mode)
		}
		return "file:" + path + "?" + q.Encode()
	}
	w, err := sql.Open(driverName, dsn("rwc"))
	if err != nil {
		return nil, fmt.Errorf("store: open writer: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxIdleTime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	db := &DB{Write: w, Concurrent: w, path: path}
	if err := db.migrate(ctx); err != nil {
		w.Close()
		return nil, err
	}
	r, err := sql.Open(driverName, dsn("ro"))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open readers: %w", err)
	}
	r.SetMaxOpenConns(4)
	db.Read = r
	// The database holds conversation logs and settings: nobody but the sidecar (and,
	// through the group, admins' sandboxes when the admin allows it) may read it.
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o007 != 0 {
		_ = os.Chmod(path, fi.Mode().Perm()&0o770)
	}
	return db, nil
}

// Path is the database file (on PostgreSQL, host, port and database, without credentials).
func (db *DB) Path() string { return db.path }

// Close closes both handles.
func (db *DB) Close() error {
	var errs []error
	if db.Read != nil && db.Read != db.Write {
		errs = append(errs, db.Read.Close())
	}
	if db.Concurrent != nil && db.Concurrent != db.Write {
		errs = append(errs, db.Concurrent.Close())
	}
	errs = append(errs, db.Write.Close())
	return errors.Join(errs...)
}

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			return nil, fmt.Errorf("store: migration %q has no version prefix", e.Name())
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("store: migration %q: %w", e.Name(), err)
		}
		body, err := migrationFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: e.Name(), sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("store: migrations must be numbered 1..n without gaps, found %s", m.name)
		}
	}
	return out, nil
}

// SchemaVersion is the newest schema this binary knows.
func SchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

func (db *DB) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	if db.dialect == Postgres {
		return db.migratePostgres(ctx, ms)
	}
	var current int
	if err := db.Write.QueryRowContext(ctx, "PRAGMA user_version").Scan(&current); err != nil {
		return fmt.Errorf("store: read schema version: %w", err)
	}
	if current > len(ms) {
		return fmt.Errorf("%w: database has version %d, this binary knows %d", ErrSchemaTooNew, current, len(ms))
	}
	for _, m := range ms[current:] {
		body, err := migrationFor(m.sql, SQLite)
		if err != nil {
			return fmt.Errorf("store: migration %s: %w", m.name, err)
		}
		tx, err := db.Write.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("store: begin migration %s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, body); err != nil {
			tx.Rollback()
			if strings.Contains(err.Error(), "no such module: fts5") {
				return fmt.Errorf("store: migration %s: this binary was built without SQLite full-text search: build and test with -tags sqlite_fts5 (make build, make test): %w", m.name, err)
			}
			return fmt.Errorf("store: migration %s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.version)); err != nil {
			tx.Rollback()
			return fmt.Errorf("store: record migration %s: %w", m.name, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("store: commit migration %s: %w", m.name, err)
		}
	}
	return nil
}

// migrateLockKey is the advisory lock that serialises migrations of processes starting
// together against one PostgreSQL database.
const migrateLockKey = 0x15707a_0001

// migratePostgres applies the pending migrations, each in one transaction (PostgreSQL's
// DDL is transactional) that first takes the migration lock and reads the version again,
// so processes starting at once apply each migration once.
func (db *DB) migratePostgres(ctx context.Context, ms []migration) error {
	// Under the migration lock too: two CREATE TABLE IF NOT EXISTS at once can both miss
	// the table and one then fails on its type ("type schema_version already exists").
	if err := db.createVersionTable(ctx); err != nil {
		return fmt.Errorf("store: create schema_version: %w", err)
	}
	for {
		done, err := db.migrateNextPostgres(ctx, ms)
		if err != nil || done {
			return err
		}
	}
}

func (db *DB) createVersionTable(ctx context.Context) error {
	tx, err := db.Write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(?)`, int64(migrateLockKey)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)`); err != nil {
		return err
	}
	return tx.Commit()
}

func (db *DB) migrateNextPostgres(ctx context.Context, ms []migration) (done bool, err error) {
	tx, err := db.Write.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("store: begin migration: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(?)`, int64(migrateLockKey)); err != nil {
		return false, fmt.Errorf("store: take the migration lock: %w", err)
	}
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&current); err != nil {
		return false, fmt.Errorf("store: read schema version: %w", err)
	}
	if current > len(ms) {
		return false, fmt.Errorf("%w: database has version %d, this binary knows %d", ErrSchemaTooNew, current, len(ms))
	}
	if current == len(ms) {
		return true, tx.Commit()
	}
	m := ms[current]
	body, err := migrationFor(m.sql, Postgres)
	if err != nil {
		return false, fmt.Errorf("store: migration %s: %w", m.name, err)
	}
	if _, err := tx.ExecContext(ctx, body); err != nil {
		return false, fmt.Errorf("store: migration %s: %w", m.name, err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM schema_version`); err != nil {
		return false, fmt.Errorf("store: record migration %s: %w", m.name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version) VALUES (?)`, m.version); err != nil {
		return false, fmt.Errorf("store: record migration %s: %w", m.name, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("store: commit migration %s: %w", m.name, err)
	}
	return false, nil
}

// TimeFormat is how every timestamp is stored: UTC, SQLite's own datetime layout with
// milliseconds, so that values sort as text and compare with datetime('now', …).
const TimeFormat = "2006-01-02 15:04:05.000"

// InTx runs fn in a write transaction and commits it; an error from fn rolls it back
// and is returned as it is.
func (db *DB) InTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := db.Write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// FormatTime renders t for storage.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// ParseTime reads a stored timestamp; the empty string gives the zero time.
func ParseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{TimeFormat, "2006-01-02 15:04:05", time.RFC3339Nano} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("store: bad timestamp %q", s)
}
