package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// OpenPostgres opens the PostgreSQL database dsn names (a URL or key=value string, as
// libpq reads it) and applies pending migrations. Several processes, on several hosts,
// may open the same database: migrations take a lock, the queue claims with row locks,
// and the leader package elects the one process that runs the once-only loops.
//
// The domain packages were written for SQLite, whose write transactions never overlap
// (one writer connection, BEGIN IMMEDIATE): many read a row and then write what they
// read. On PostgreSQL every write transaction of Write therefore takes the writer lock
// first, a transaction-scoped advisory lock, so they stay one at a time across every
// process and host, as on SQLite. (Single statements outside a transaction are atomic
// by themselves and do not take it; neither do read-only transactions.) Concurrent is a
// second pool whose transactions do not take it, for code that takes its own row locks:
// the queue's claim. Read is the Write pool: reads need no lock.
func OpenPostgres(ctx context.Context, dsn string, maxConns int) (*DB, error) {
	if dsn == "" {
		return nil, errors.New("store: database.dsn is required for postgres")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: postgres dsn: %w", err)
	}
	if maxConns <= 0 {
		maxConns = 16
	}
	open := func(serialize bool, n int) *sql.DB {
		pool := sql.OpenDB(rebindConnector{inner: stdlib.GetConnector(*cfg), serialize: serialize})
		pool.SetMaxOpenConns(n)
		pool.SetMaxIdleConns(n)
		return pool
	}
	pool := open(true, maxConns)
	if err := pool.PingContext(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: connect to postgres %s:%d/%s: %w", cfg.Host, cfg.Port, cfg.Database, err)
	}
	db := &DB{Write: pool, Read: pool, Concurrent: open(false, max(maxConns/2, 2)),
		path: fmt.Sprintf("postgres://%s:%d/%s", cfg.Host, cfg.Port, cfg.Database), dialect: Postgres}
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// WriterLockKey is the advisory lock that keeps the write transactions of Write one
// at a time (see OpenPostgres).
const WriterLockKey int64 = 0x15707a_0002

// rebindConnector hands out connections that take the domain packages' SQLite
// spelling of parameters: `?` placeholders become `$N`, and booleans become the 0/1
// integers the schema stores them as (as the SQLite driver does).
// With serialize, every read-write transaction begins by taking the writer lock.
type rebindConnector struct {
	inner     driver.Connector
	serialize bool
}

func (c rebindConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	pc, ok := cn.(pgxConn)
	if !ok {
		cn.Close()
		return nil, fmt.Errorf("store: unexpected postgres driver connection %T", cn)
	}
	return rebindConn{pc, c.serialize}, nil
}

func (c rebindConnector) Driver() driver.Driver { return c.inner.Driver() }

// pgxConn is what pgx's database/sql connection implements.
type pgxConn interface {
	driver.Conn
	driver.ConnPrepareContext
	driver.ConnBeginTx
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.NamedValueChecker
}

type rebindConn struct {
	c         pgxConn
	serialize bool
}

func (r rebindConn) Prepare(query string) (driver.Stmt, error) {
	return r.c.PrepareContext(context.Background(), Rebind(query))
}
func (r rebindConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return r.c.PrepareContext(ctx, Rebind(query))
}
func (r rebindConn) Close() error { return r.c.Close() }

//nolint:staticcheck // driver.Conn requires Begin; BeginTx is what database/sql calls.
func (r rebindConn) Begin() (driver.Tx, error) {
	return r.BeginTx(context.Background(), driver.TxOptions{})
}
func (r rebindConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := r.c.BeginTx(ctx, opts)
	if err != nil || !r.serialize || opts.ReadOnly {
		return tx, err
	}
	if _, err := r.c.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, []driver.NamedValue{{Ordinal: 1, Value: WriterLockKey}}); err != nil {
		tx.Rollback()
		return nil, fmt.Errorf("store: take the writer lock: %w", err)
	}
	return tx, nil
}
func (r rebindConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return r.c.ExecContext(ctx, Rebind(query), args)
}
func (r rebindConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return r.c.QueryContext(ctx, Rebind(query), args)
}
func (r rebindConn) Ping(ctx context.Context) error         { return r.c.Ping(ctx) }
func (r rebindConn) ResetSession(ctx context.Context) error { return r.c.ResetSession(ctx) }
func (r rebindConn) CheckNamedValue(nv *driver.NamedValue) error {
	if b, ok := nv.Value.(bool); ok {
		nv.Value = int64(0)
		if b {
			nv.Value = int64(1)
		}
		return nil
	}
	return r.c.CheckNamedValue(nv)
}
