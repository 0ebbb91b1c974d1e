// Package storetest runs a package's store-using tests on both engines. A plain
// `go test` runs them on SQLite, and TestOnPostgres (RunOnPostgres) runs the same test
// binary again with ISTOTA_TEST_DB=postgres, where Open gives each test a fresh database
// on a real PostgreSQL server that the package's TestMain (Main) started.
package storetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/store/pgtest"
)

// EnvDB names the engine the tests of this run use: "postgres", or SQLite when unset.
const EnvDB = "ISTOTA_TEST_DB"

// OnPostgres reports whether this run's tests use PostgreSQL.
func OnPostgres() bool { return os.Getenv(EnvDB) == "postgres" }

// DBs opens the databases of one test binary.
type DBs struct {
	pg  *pgtest.Server
	mu  sync.Mutex
	dsn map[string]string // SQLite path a test asked for → its PostgreSQL database
}

// Main is TestMain's body: it starts PostgreSQL when this run uses it.
func Main(m *testing.M, dbs *DBs) int {
	if !OnPostgres() {
		return m.Run()
	}
	srv, err := pgtest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dbs.pg = srv
	dbs.dsn = map[string]string{}
	code := m.Run()
	srv.Stop()
	return code
}

// Open opens the database a test calls path: the SQLite file, or on PostgreSQL a
// database created for that path the first time (so two Opens of one path share it,
// as two processes share a file). It is closed when the test ends.
func (d *DBs) Open(t testing.TB, path string) *store.DB {
	t.Helper()
	ctx := context.Background()
	var (
		db  *store.DB
		err error
	)
	if d.pg == nil {
		db, err = store.Open(ctx, path)
	} else {
		d.mu.Lock()
		dsn, ok := d.dsn[path]
		if !ok {
			dsn, err = d.pg.CreateDatabase(ctx)
			d.dsn[path] = dsn
		}
		d.mu.Unlock()
		if err == nil {
			db, err = store.OpenPostgres(ctx, dsn, 8)
		}
	}
	if err != nil {
		t.Fatalf("open the test database: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// RunOnPostgres runs this test binary's other tests again on PostgreSQL (in a child
// process with ISTOTA_TEST_DB=postgres) and fails t with the child's output if any of
// them fails. Without PostgreSQL binaries it skips, saying so.
func RunOnPostgres(t *testing.T) {
	if OnPostgres() {
		t.Skip("already the PostgreSQL run")
	}
	if err := pgtest.Available(); err != nil {
		pgtest.Skip(t, err.Error())
	}
	args := []string{"-test.count=1", "-test.skip=^" + t.Name() + "$"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-test.timeout=") || strings.HasPrefix(a, "-test.short") {
			args = append(args, a)
		}
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), EnvDB+"=postgres")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the tests on PostgreSQL failed (%v):\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("on PostgreSQL:\n%s", out)
	}
}

// OpenPath is Open with store.Open's signature, for tests that open and close their
// databases themselves.
func (d *DBs) OpenPath(ctx context.Context, path string) (*store.DB, error) {
	if d.pg == nil {
		return store.Open(ctx, path)
	}
	d.mu.Lock()
	dsn, ok := d.dsn[path]
	var err error
	if !ok {
		dsn, err = d.pg.CreateDatabase(ctx)
		d.dsn[path] = dsn
	}
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return store.OpenPostgres(ctx, dsn, 8)
}
