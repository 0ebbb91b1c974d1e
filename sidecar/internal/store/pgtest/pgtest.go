// Package pgtest runs a real PostgreSQL server for tests: initdb into a temporary
// directory and postgres on a loopback port, as an unprivileged account when the tests
// run as root (initdb refuses root). Tests get a fresh database each from NewDatabase.
// Without PostgreSQL binaries (Debian's postgresql package) Start says so with
// ErrUnavailable, and the tests skip with that message; scripts/deps.sh installs it, so
// `make test` always runs them.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrUnavailable means no PostgreSQL server binaries were found.
var ErrUnavailable = errors.New("pgtest: no PostgreSQL binaries (initdb, postgres): install Debian's postgresql package (scripts/deps.sh does) or set ISTOTA_PG_BIN")

// Server is one running PostgreSQL server.
type Server struct {
	dir  string
	port int
	cmd  *exec.Cmd
	done chan error
	seq  atomic.Int64
}

// binDir finds initdb and postgres: $ISTOTA_PG_BIN, else the newest
// /usr/lib/postgresql/<version>/bin.
func binDir() (string, error) {
	if d := os.Getenv("ISTOTA_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", ErrUnavailable
}

// Available says whether Start can find the server binaries (ErrUnavailable if not).
func Available() error {
	_, err := binDir()
	return err
}

// Start initialises and starts a server in a new directory under os.TempDir(). Stop
// stops it and removes the directory.
func Start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "istota-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	cred, err := runAs(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "--username=postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: initdb: %w: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{dir: dir, port: port, done: make(chan error, 1)}
	log, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	defer log.Close()
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=32MB")
	s.cmd.Stdout, s.cmd.Stderr = log, log
	// The server goes with the test binary even when that is killed.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: start postgres: %w", err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	if err := s.waitReady(60 * time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// runAs is the account the server runs as: nobody when we are root (the directory is
// given to it), else ourselves.
func runAs(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root needs the account nobody: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, fmt.Errorf("pgtest: give %s to nobody: %w", dir, err)
	}
	// nobody must reach the directory through its parents.
	for p := filepath.Dir(dir); p != "/"; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return nil, fmt.Errorf("pgtest: the account nobody cannot pass through %s (mode %v): set TMPDIR to a directory it can reach", p, fi.Mode().Perm())
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: pick a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err == nil {
			c.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		select {
		case werr := <-s.done:
			s.done <- werr
			log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			return fmt.Errorf("pgtest: postgres exited: %v: %s", werr, log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: postgres not ready after %v: %w", limit, err)
		}
	}
}

// DSN is the URL of database db on this server.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// CreateDatabase creates a new empty database and returns its URL.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("t%d_%d", os.Getpid(), s.seq.Add(1))
	c, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgtest: connect: %w", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("pgtest: create database: %w", err)
	}
	return s.DSN(name), nil
}

// NewDatabase is CreateDatabase for a test, failing it on error.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	dsn, err := s.CreateDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// Stop shuts the server down (fast shutdown, then SIGKILL) and removes its directory.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	os.RemoveAll(s.dir)
}

// Main runs a test binary's tests with a server in *srv (nil, with the reason in
// *why, when PostgreSQL is unavailable) and stops it afterwards: for TestMain.
func Main(m *testing.M, srv **Server, why *string) int {
	s, err := Start()
	if err != nil {
		if !errors.Is(err, ErrUnavailable) {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		*why = err.Error()
	}
	*srv = s
	code := m.Run()
	if s != nil {
		s.Stop()
	}
	return code
}

// Skip skips t with the reason PostgreSQL is unavailable.
func Skip(t testing.TB, why string) {
	t.Helper()
	t.Skip(strings.TrimSpace("PostgreSQL tests skipped: " + why))
}
