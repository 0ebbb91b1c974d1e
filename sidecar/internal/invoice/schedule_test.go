package invoice

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"
)

type notice struct{ uid, key, text string }

// fakeNotifier records notices; private says whether the user has a conversation.
type fakeNotifier struct {
	private bool
	sent    []notice
}

func (n *fakeNotifier) Notice(_ context.Context, _ *sql.Tx, uid, key, text string) (bool, error) {
	if !n.private {
		return false, nil
	}
	n.sent = append(n.sent, notice{uid, key, text})
	return true, nil
}

type fakeFolders struct {
	refreshed, published int
}

func (f *fakeFolders) Users(context.Context) ([]User, error) {
	return []User{{ID: "alice", Timezone: "Europe/Berlin"}}, nil
}
func (f *fakeFolders) Refresh(context.Context, string) error { f.refreshed++; return nil }
func (f *fakeFolders) Publish(context.Context, string) error { f.published++; return nil }

func TestRunnerRemindsGeneratesAndTellsOverdueOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	n := &fakeNotifier{private: true}
	folders := &fakeFolders{}
	r := NewRunner(f.svc, folders, n, RunnerOptions{})
	at := func(month time.Month, day, hour int) {
		t.Helper()
		f.now = time.Date(2025, month, day, hour, 30, 0, 0, time.UTC) // Berlin is UTC+1/+2
		for range 2 {                                                 // a second tick never repeats anything
			if err := r.Tick(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	expect := func(when string, keys ...string) {
		t.Helper()
		var got []string
		for _, s := range n.sent {
			got = append(got, s.key)
		}
		if strings.Join(got, " ") != strings.Join(keys, " ") {
			t.Fatalf("%s: notices %v, want %v", when, got, keys)
		}
		n.sent = nil
	}

	// generate_day = 2, remind_days = 3: the reminder for March is due from 30 March.
	at(time.March, 29, 10)
	expect("29 March")
	at(time.March, 30, 5) // 07:30 in Berlin: too early
	expect("30 March, early")
	at(time.March, 30, 10)
	expect("30 March", "invoice-remind:alice:2025-03")
	at(time.April, 1, 10)
	expect("1 April")
	if folders.refreshed != 1 || folders.published != 0 {
		// The first tick ran February's generation, which found nothing to bill.
		t.Errorf("refreshed %d, published %d before March's generation; want 1, 0", folders.refreshed, folders.published)
	}

	at(time.April, 2, 10)
	expect("2 April", "invoice-generate:alice:2025-03")
	if folders.refreshed != 2 || folders.published != 1 {
		t.Errorf("refreshed %d, published %d; want 2, 1", folders.refreshed, folders.published)
	}
	invs, _, err := f.svc.List(ctx, "alice")
	if err != nil || len(invs) != 3 {
		t.Fatalf("after the monthly run: %d invoices, %v", len(invs), err)
	}
	if _, err := f.svc.Pay(ctx, "alice", "ACME-2025-0002", "2025-04-02"); err != nil {
		t.Fatal(err)
	}

	// Due 16 April: ACME-2025-0001 is overdue from the 17th; 0002 was paid. Invoice
	// 0003 (due 2 May) follows later. The reminder for April comes on 29 April.
	at(time.April, 17, 10)
	expect("17 April", "invoice-overdue:alice:ACME-2025-0001")
	at(time.April, 29, 10)
	expect("29 April", "invoice-remind:alice:2025-04")
	at(time.May, 3, 10)
	expect("3 May", "invoice-overdue:alice:ACME-2025-0003", "invoice-generate:alice:2025-04")

	// A user without a private conversation is told once there is one.
	f.write(t, "istota/config/"+WorkLog, testLog+"- 2025-05-05 | initech | consulting | 1 | x\n")
	n.private = false
	at(time.June, 2, 10)
	if _, err := f.db.Write.Exec(`UPDATE invoices SET due_on = '2025-06-01' WHERE number = 'ACME-2025-0005'`); err != nil {
		t.Fatal(err)
	}
	at(time.June, 3, 10)
	n.private = true
	at(time.June, 3, 11)
	expect("3 June", "invoice-overdue:alice:ACME-2025-0004", "invoice-overdue:alice:ACME-2025-0005")
}

func TestRunnerTellsWhyGenerationCannotRun(t *testing.T) {
	f := newFixture(t)
	n := &fakeNotifier{private: true}
	r := NewRunner(f.svc, &fakeFolders{}, n, RunnerOptions{})
	f.write(t, "istota/config/"+WorkLog, testLog+"- 2025-03-07 | globex | consulting | lots | x\n")
	f.now = time.Date(2025, 4, 2, 10, 0, 0, 0, time.UTC)
	for range 3 {
		if err := r.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if len(n.sent) != 1 || n.sent[0].key != "invoice-problem:alice:2025-03" || !strings.Contains(n.sent[0].text, "line 13: quantity") {
		t.Fatalf("notices %+v", n.sent)
	}
	f.write(t, "istota/config/"+WorkLog, testLog)
	if err := r.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(n.sent) != 2 || n.sent[1].key != "invoice-generate:alice:2025-03" || !strings.Contains(n.sent[1].text, "Issued 3 invoice(s)") {
		t.Fatalf("after the fix: %+v", n.sent)
	}
}
