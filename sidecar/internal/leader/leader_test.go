package leader

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/store/pgtest"
)

var (
	pg        *pgtest.Server
	pgMissing string
)

func TestMain(m *testing.M) {
	// The child of TestLeaderKilled: campaign on the database it is given and say when
	// it leads, until it is killed.
	if dsn := os.Getenv("ISTOTA_LEADER_CHILD"); dsn != "" {
		db, err := store.OpenPostgres(context.Background(), dsn, 2)
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		New(db, Options{Interval: 200 * time.Millisecond}).Run(context.Background(), func(ctx context.Context) {
			os.Stdout.WriteString("leading\n")
			<-ctx.Done()
		})
		os.Exit(0)
	}
	os.Exit(pgtest.Main(m, &pg, &pgMissing))
}

func openPG(t *testing.T) (*store.DB, string) {
	t.Helper()
	if pg == nil {
		pgtest.Skip(t, pgMissing)
	}
	dsn := pg.NewDatabase(t)
	db, err := store.OpenPostgres(context.Background(), dsn, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, dsn
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSQLiteAlwaysLeads(t *testing.T) {
	db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e := New(db, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan bool)
	go e.Run(ctx, func(ctx context.Context) { ran <- e.Leading(); <-ctx.Done() })
	if !<-ran {
		t.Fatal("Leading false inside lead")
	}
	cancel()
	waitFor(t, "stops leading", 5*time.Second, func() bool { return !e.Leading() })
}

// Of three electors on one database exactly one leads at a time; when the leader stops,
// another takes over, and lead never runs in two at once.
func TestOneLeaderAndHandOver(t *testing.T) {
	const interval = 100 * time.Millisecond
	var running, overlaps, terms atomic.Int32
	type member struct {
		e      *Elector
		cancel context.CancelFunc
		done   chan struct{}
	}
	var members []member
	_, dsn := openPG(t)
	for range 3 {
		db := openAgain(t, dsn)
		e := New(db, Options{Interval: interval})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.Run(ctx, func(ctx context.Context) {
				if running.Add(1) > 1 {
					overlaps.Add(1)
				}
				terms.Add(1)
				<-ctx.Done()
				running.Add(-1)
			})
		}()
		members = append(members, member{e, cancel, done})
	}
	t.Cleanup(func() {
		for _, m := range members {
			m.cancel()
			<-m.done
		}
	})
	leaders := func() (n, who int) {
		for i, m := range members {
			if m.e.Leading() {
				n, who = n+1, i
			}
		}
		return n, who
	}
	for round := range 2 {
		waitFor(t, "a leader", 10*time.Second, func() bool { n, _ := leaders(); return n == 1 })
		time.Sleep(5 * interval)
		n, who := leaders()
		if n != 1 {
			t.Fatalf("round %d: %d leaders", round, n)
		}
		members[who].cancel()
		<-members[who].done
		members = append(members[:who], members[who+1:]...)
	}
	if overlaps.Load() != 0 {
		t.Fatalf("lead ran in two electors at once %d times", overlaps.Load())
	}
	if terms.Load() < 2 {
		t.Fatalf("%d terms, want a hand-over", terms.Load())
	}
}

func openAgain(t *testing.T, dsn string) *store.DB {
	t.Helper()
	db, err := store.OpenPostgres(context.Background(), dsn, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// A leader process killed with SIGKILL loses the lead with its session: another
// process takes over within a few intervals, and not before the kill.
func TestLeaderKilled(t *testing.T) {
	db, dsn := openPG(t)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "ISTOTA_LEADER_CHILD="+dsn)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || strings.TrimSpace(lines.Text()) != "leading" {
		t.Fatalf("child did not lead: %q %v", lines.Text(), lines.Err())
	}

	e := New(db, Options{Interval: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	led := make(chan time.Time, 1)
	go e.Run(ctx, func(ctx context.Context) { led <- time.Now(); <-ctx.Done() })
	select {
	case <-led:
		t.Fatal("took the lead while the child held it")
	case <-time.After(time.Second):
	}
	killed := time.Now()
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-led:
		t.Logf("took over %v after the kill", at.Sub(killed).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("no take-over within 15s of killing the leader")
	}
}
