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
// Write and Read are the same pool: PostgreSQL has no single-writer rule to respect.
func OpenPostgres(ctx context.Context, dsn string, maxConns int) (*DB, error) {
	if dsn == "" {
		return nil, errors.New("store: database.dsn is required for postgres")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: postgres dsn: %w", err)
	}
	pool := sql.OpenDB(rebindConnector{stdlib.GetConnector(*cfg)})
	if maxConns <= 0 {
		maxConns = 16
	}
	pool.SetMaxOpenConns(maxConns)
	pool.SetMaxIdleConns(maxConns)
	if err := pool.PingContext(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: connect to postgres %s:%d/%s: %w", cfg.Host, cfg.Port, cfg.Database, err)
	}
	db := &DB{Write: pool, Read: pool, path: fmt.Sprintf("postgres://%s:%d/%s", cfg.Host, cfg.Port, cfg.Database), dialect: Postgres}
	if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return db, nil
}

// rebindConnector hands out connections that take the domain packages' SQLite
// spelling of parameters: `?` placeholders become `$N`, and booleans become the 0/1
// integers the schema stores them as (as the SQLite driver does).
type rebindConnector struct{ inner driver.Connector }

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
	return rebindConn{pc}, nil
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

type rebindConn struct{ c pgxConn }

func (r rebindConn) Prepare(query string) (driver.Stmt, error) {
	return r.c.PrepareContext(context.Background(), Rebind(query))
}
func (r rebindConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return r.c.PrepareContext(ctx, Rebind(query))
}
func (r rebindConn) Close() error { return r.c.Close() }

//nolint:staticcheck // driver.Conn requires Begin; BeginTx is what database/sql calls.
func (r rebindConn) Begin() (driver.Tx, error) {
	return r.c.BeginTx(context.Background(), driver.TxOptions{})
}
func (r rebindConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return r.c.BeginTx(ctx, opts)
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
