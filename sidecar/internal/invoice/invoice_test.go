package invoice

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/store"
)

const testConfig = "# Invoicing\n<!-- explained here -->\n```toml\n" + `ledger = "accounting/main.beancount"
due_days = 14
generate_day = 2
remind_days = 3

[[entities]]
key = "acme"
name = "ACME Consulting GmbH"
address = """Hauptstraße 1
10115 Berlin"""
tax_id = "DE123456789"
bank = "IBAN DE02 1203 0000 0000 2020 51"
currency = "EUR"
prefix = "ACME"
tax_rate = 19
income_account = "Income:Consulting"
bank_account = "Assets:Bank:Giro"

[[clients]]
key = "globex"
name = "Globex Corp"
address = "1 Globex Way"

[[clients]]
key = "initech"
name = "Initech"
due_days = 30

[[services]]
key = "consulting"
name = "Consulting"
rate = "120.00"
unit = "hour"

[[services]]
key = "hosting"
name = "Hosting"
rate = 25
unit = "month"
account = "Income:Hosting"

[[bundles]]
name = "Hosting"
services = ["hosting"]
` + "```\n"

const testLog = `# Work log
<!--
- 2025-01-01 | globex | consulting | 1 | commented out, never billed
-->
Some prose | with a pipe.

- 2025-03-04 | globex | consulting | 2.5 | Architecture review
- 2025-03-05 | globex | consulting | 1 | Call
- 2025-03-05 | globex | consulting | 1 | Call
- 2025-03-31 | globex | hosting | 1 | March
- 2025-03-10 | initech | consulting | 0.25 | Quick fix
- 2025-04-01 | globex | consulting | 3 | April work
`

type fixture struct {
	svc  *Service
	db   *store.DB
	root string
	now  time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	db, err := testDBs.OpenPath(ctx, filepath.Join(t.TempDir(), "istota.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f := &fixture{db: db, root: filepath.Join(t.TempDir(), "alice"), now: time.Date(2025, 4, 2, 8, 0, 0, 0, time.UTC)}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	f.svc, err = New(db, Options{
		UserRoot: func(uid string) (string, error) {
			if uid != "alice" {
				return filepath.Join(filepath.Dir(f.root), uid), nil
			}
			return f.root, nil
		},
		BotDir:   "istota",
		Timezone: func(context.Context, string) (*time.Location, error) { return berlin, nil },
		Clock:    func() time.Time { return f.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	f.write(t, "istota/config/"+ConfigFile, testConfig)
	f.write(t, "istota/config/"+WorkLog, testLog)
	return f
}

func (f *fixture) write(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pdfText extracts the text of a PDF with poppler's pdftotext, which scripts/deps.sh
// installs; outside CI a machine without it skips the check.
func pdfText(t *testing.T, path string) string {
	t.Helper()
	bin, err := exec.LookPath("pdftotext")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("pdftotext is missing: run scripts/deps.sh")
		}
		t.Skip("pdftotext is not installed (scripts/deps.sh installs poppler-utils)")
	}
	out, err := exec.Command(bin, "-layout", path, "-").CombinedOutput()
	if err != nil {
		t.Fatalf("pdftotext %s: %v\n%s", path, err, out)
	}
	return string(out)
}

func TestGenerateBillsEachEntryOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()

	dry, err := f.svc.Generate(ctx, "alice", GenerateRequest{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Invoices) != 3 || dry.Invoices[0].Number != "" {
		t.Fatalf("dry run = %+v", dry)
	}
	if got := f.read(t, "istota/config/"+WorkLog); got != testLog {
		t.Fatalf("a dry run changed the work log:\n%s", got)
	}

	res, err := f.svc.Generate(ctx, "alice", GenerateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// March only (April is the current month): Globex consulting, Globex's hosting
	// bundle, Initech — in entity, client, period, bundle order.
	want := []struct {
		number, client, title string
		net, tax, total       int64
		due                   string
	}{
		{"ACME-2025-0001", "globex", "", 54000, 10260, 64260, "2025-04-16"},
		{"ACME-2025-0002", "globex", "Hosting", 2500, 475, 2975, "2025-04-16"},
		{"ACME-2025-0003", "initech", "", 3000, 570, 3570, "2025-05-02"},
	}
	if len(res.Invoices) != len(want) || res.Left != 1 {
		t.Fatalf("got %d invoices, %d left; want %d, 1 left", len(res.Invoices), res.Left, len(want))
	}
	for i, w := range want {
		g := res.Invoices[i]
		if g.Number != w.number || g.Client != w.client || g.Title != w.title || g.Net != w.net || g.Tax != w.tax ||
			g.Total != w.total || g.Due != w.due || g.Issued != "2025-04-02" || g.Period != "2025-03" {
			t.Errorf("invoice %d = %s %s %q net %d tax %d total %d due %s issued %s period %s; want %+v",
				i, g.Number, g.Client, g.Title, g.Net, g.Tax, g.Total, g.Due, g.Issued, g.Period, w)
		}
	}
	if n := len(res.Invoices[0].Lines); n != 3 {
		t.Errorf("the first invoice has %d lines, want 3 (the two identical calls are two entries)", n)
	}

	wantLog := strings.NewReplacer(
		"Architecture review\n", "Architecture review | ACME-2025-0001\n",
		"| Call\n- 2025-03-05 | globex | consulting | 1 | Call\n", "| Call | ACME-2025-0001\n- 2025-03-05 | globex | consulting | 1 | Call | ACME-2025-0001\n",
		"| March\n", "| March | ACME-2025-0002\n",
		"Quick fix\n", "Quick fix | ACME-2025-0003\n",
	).Replace(testLog)
	if got := f.read(t, "istota/config/"+WorkLog); got != wantLog {
		t.Fatalf("work log after generate:\n%s\nwant:\n%s", got, wantLog)
	}

	text := pdfText(t, filepath.Join(f.root, "istota/exports/invoices/ACME-2025-0001.pdf"))
	for _, s := range []string{"ACME-2025-0001", "ACME Consulting GmbH", "Hauptstraße 1", "Globex Corp", "Architecture review",
		"642.60", "102.60", "VAT 19%", "2025-04-16", "IBAN DE02"} {
		if !strings.Contains(text, s) {
			t.Errorf("the PDF lacks %q:\n%s", s, text)
		}
	}

	// Again: nothing new, even with the current month asked for explicitly only the
	// April entry is new.
	again, err := f.svc.Generate(ctx, "alice", GenerateRequest{})
	if err != nil || len(again.Invoices) != 0 {
		t.Fatalf("second run: %+v, %v", again, err)
	}
	march, err := f.svc.Generate(ctx, "alice", GenerateRequest{Period: "2025-03"})
	if err != nil || len(march.Invoices) != 0 {
		t.Fatalf("March again: %+v, %v", march, err)
	}
	april, err := f.svc.Generate(ctx, "alice", GenerateRequest{Period: "2025-04"})
	if err != nil || len(april.Invoices) != 1 || april.Invoices[0].Number != "ACME-2025-0004" {
		t.Fatalf("April: %+v, %v", april, err)
	}
}

func TestGenerateAfterLostMarkersBillsNothingTwice(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.svc.Generate(ctx, "alice", GenerateRequest{}); err != nil {
		t.Fatal(err)
	}
	// Someone restores the old file (or the write was lost): the database still knows.
	f.write(t, "istota/config/"+WorkLog, testLog)
	os.Remove(filepath.Join(f.root, "istota/exports/invoices/ACME-2025-0002.pdf"))
	res, err := f.svc.Generate(ctx, "alice", GenerateRequest{})
	if err != nil || len(res.Invoices) != 0 {
		t.Fatalf("after restore: %+v, %v", res, err)
	}
	if got := f.read(t, "istota/config/"+WorkLog); strings.Count(got, "ACME-2025-") != 5 {
		t.Errorf("markers not written back:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(f.root, "istota/exports/invoices/ACME-2025-0002.pdf")); err != nil {
		t.Errorf("the missing PDF was not written again: %v", err)
	}
}

func TestPDFIsDeterministic(t *testing.T) {
	f := newFixture(t)
	res, err := f.svc.Generate(context.Background(), "alice", GenerateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := RenderPDF(res.Invoices[0].Document)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RenderPDF(res.Invoices[0].Document)
	onDisk, _ := os.ReadFile(filepath.Join(f.root, res.Invoices[0].PDF))
	if !bytes.Equal(a, b) || !bytes.Equal(a, onDisk) {
		t.Error("rendering the same invoice twice gave different bytes")
	}
	if !bytes.HasPrefix(a, []byte("%PDF-")) {
		t.Errorf("not a PDF: %q", a[:10])
	}
}

func TestPayPostsToTheLedgerOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.write(t, "accounting/main.beancount", "option \"title\" \"Alice\"\n2000-01-01 open Assets:Bank:Giro EUR")
	if _, err := f.svc.Generate(ctx, "alice", GenerateRequest{}); err != nil {
		t.Fatal(err)
	}
	f.now = time.Date(2025, 4, 20, 12, 0, 0, 0, time.UTC)
	res, err := f.svc.Pay(ctx, "alice", "ACME-2025-0001", "2025-04-10")
	if err != nil {
		t.Fatal(err)
	}
	if res.Invoice.PaidOn != "2025-04-10" || res.Ledger != "accounting/main.beancount" {
		t.Fatalf("pay = %+v", res)
	}
	if _, err := f.svc.Pay(ctx, "alice", "ACME-2025-0002", ""); err != nil {
		t.Fatal(err)
	}
	ledger := f.read(t, "accounting/main.beancount")
	want := `2025-04-10 * "Globex Corp" "Invoice ACME-2025-0001 paid"
  invoice: "ACME-2025-0001"
  Assets:Bank:Giro  642.60 EUR
  Income:Consulting  -540.00 EUR
  Liabilities:Tax:VAT  -102.60 EUR
`
	if !strings.Contains(ledger, want) {
		t.Errorf("ledger lacks the posting:\n%s", ledger)
	}
	if strings.Count(ledger, "open Assets:Bank:Giro") != 1 || strings.Count(ledger, "open Liabilities:Tax:VAT") != 1 ||
		!strings.Contains(ledger, "2000-01-01 open Income:Hosting") {
		t.Errorf("open directives wrong:\n%s", ledger)
	}
	checkLedger(t, filepath.Join(f.root, "accounting/main.beancount"), ledger)

	if _, err := f.svc.Pay(ctx, "alice", "ACME-2025-0001", "2025-04-11"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "already") {
		t.Errorf("paying twice: %v", err)
	}
	// A payment posted before a crash that kept the database from recording it is
	// not posted again.
	if _, err := f.db.Write.Exec(`UPDATE invoices SET paid_on = '' WHERE number = 'ACME-2025-0001'`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Pay(ctx, "alice", "ACME-2025-0001", "2025-04-10"); err != nil {
		t.Fatal(err)
	}
	if got := f.read(t, "accounting/main.beancount"); got != ledger {
		t.Errorf("the ledger changed on the repeated payment:\n%s", got)
	}

	for _, tc := range []struct{ number, day, want string }{
		{"ACME-2025-0003", "2025-03-01", "issued on"},
		{"ACME-2025-0003", "2025-05-01", "future"},
		{"ACME-2025-0099", "", "not found"},
		{"../../etc", "", "not an invoice number"},
	} {
		if _, err := f.svc.Pay(ctx, "alice", tc.number, tc.day); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pay %s %s: %v, want %q", tc.number, tc.day, err, tc.want)
		}
	}
}

var (
	txnRE     = regexp.MustCompile(`^(\d{4}-\d{2}-\d{2}) \* "[^"\\]*" "[^"\\]*"$`)
	openLine  = regexp.MustCompile(`^(\d{4}-\d{2}-\d{2}) open ((Assets|Liabilities|Equity|Income|Expenses)(:[A-Z][A-Za-z0-9-]*)+)( [A-Z]{3})?$`)
	postingRE = regexp.MustCompile(`^  ((Assets|Liabilities|Equity|Income|Expenses)(:[A-Z][A-Za-z0-9-]*)+)  (-?\d+\.\d{2}) ([A-Z]{3})$`)
	metaRE    = regexp.MustCompile(`^  [a-z][a-z0-9_-]*: "[^"]*"$`)
)

// checkLedger checks the ledger with Beancount's own bean-check (scripts/deps.sh
// installs Debian's beancount), and always with a small reading of its own: every
// transaction balances, and every account it uses is opened on or before its date.
func checkLedger(t *testing.T, path, text string) {
	t.Helper()
	opened := map[string]string{}
	var date string
	sum := map[string]int64{}
	flush := func() {
		for cur, s := range sum {
			if s != 0 {
				t.Errorf("transaction of %s does not balance in %s: %d", date, cur, s)
			}
		}
		sum = map[string]int64{}
	}
	for i, l := range strings.Split(text, "\n") {
		switch {
		case l == "" || strings.HasPrefix(l, "option "):
			flush()
		case openLine.MatchString(l):
			flush()
			m := openLine.FindStringSubmatch(l)
			opened[m[2]] = m[1]
		case txnRE.MatchString(l):
			flush()
			date = txnRE.FindStringSubmatch(l)[1]
		case metaRE.MatchString(l):
		case postingRE.MatchString(l):
			m := postingRE.FindStringSubmatch(l)
			if od, ok := opened[m[1]]; !ok || od > date {
				t.Errorf("line %d: %s is not open on %s", i+1, m[1], date)
			}
			cents := strings.Replace(m[4], ".", "", 1)
			var n int64
			for _, c := range strings.TrimPrefix(cents, "-") {
				n = n*10 + int64(c-'0')
			}
			if strings.HasPrefix(cents, "-") {
				n = -n
			}
			sum[m[5]] += n
		default:
			t.Errorf("line %d is not Beancount this test knows: %q", i+1, l)
		}
	}
	flush()
	bin, err := exec.LookPath("bean-check")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("bean-check is missing: run scripts/deps.sh")
		}
		t.Log("bean-check is not installed; checked the ledger's syntax only")
		return
	}
	if out, err := exec.Command(bin, path).CombinedOutput(); err != nil {
		t.Errorf("bean-check: %v\n%s\n%s", err, out, text)
	}
}

func TestCreateOneOff(t *testing.T) {
	f := newFixture(t)
	inv, err := f.svc.Create(context.Background(), "alice", CreateRequest{
		Client: "initech", Title: "Workshop", Date: "2025-04-01",
		Items: []CreateItem{{Service: "consulting", Quantity: 8000, Note: "On site"}, {Amount: 15000, Note: "Travel"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if inv.Number != "ACME-2025-0001" || inv.Net != 111000 || inv.Total != 132090 || inv.Due != "2025-05-01" || inv.Period != "" {
		t.Fatalf("one-off = %+v", inv)
	}
	text := pdfText(t, filepath.Join(f.root, inv.PDF))
	for _, s := range []string{"Workshop", "Consulting: On site", "Travel", "1,320.90"} {
		if !strings.Contains(text, s) {
			t.Errorf("PDF lacks %q:\n%s", s, text)
		}
	}
	// The numbers go on from the one-off; the work log is untouched by it.
	res, err := f.svc.Generate(context.Background(), "alice", GenerateRequest{})
	if err != nil || res.Invoices[0].Number != "ACME-2025-0002" {
		t.Fatalf("generate after create: %+v, %v", res, err)
	}
	for _, req := range []CreateRequest{
		{Client: "nobody", Items: []CreateItem{{Amount: 100, Note: "x"}}},
		{Client: "initech", Items: []CreateItem{{Service: "nothing", Quantity: 1000}}},
		{Client: "initech"},
	} {
		if _, err := f.svc.Create(context.Background(), "alice", req); !errors.Is(err, ErrInvalid) {
			t.Errorf("create %+v: %v, want ErrInvalid", req, err)
		}
	}
}

func TestNumbersArePerPrefixAndYearAndNeverReused(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tx, err := f.db.Write.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var got []string
	for _, c := range []struct {
		uid, prefix string
		year        int
	}{{"alice", "ACME", 2025}, {"alice", "ACME", 2025}, {"alice", "ACME", 2026}, {"alice", "OTHER", 2025}, {"bob", "ACME", 2025}, {"alice", "ACME", 2025}} {
		n, err := nextNumber(ctx, tx, c.uid, c.prefix, c.year)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	want := "ACME-2025-0001 ACME-2025-0002 ACME-2026-0001 OTHER-2025-0001 ACME-2025-0001 ACME-2025-0003"
	if strings.Join(got, " ") != want {
		t.Errorf("numbers %v, want %s", got, want)
	}
}

func TestBrokenFilesNameLineAndField(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.write(t, "istota/config/"+WorkLog, testLog+"- 2025-03-32 | globex | consulting | 1 | bad date\n- 2025-03-03 | umbrella | consulting | 1 | \n- 2025-03-03 | globex | consulting | x | \n")
	_, err := f.svc.Generate(ctx, "alice", GenerateRequest{})
	var fe *FileError
	if !errors.As(err, &fe) || fe.File != WorkLog {
		t.Fatalf("err = %v", err)
	}
	msg := fe.Error()
	for _, s := range []string{"line 13: date:", "line 14: client: no client \"umbrella\"", "line 15: quantity:"} {
		if !strings.Contains(msg, s) {
			t.Errorf("message lacks %q:\n%s", s, msg)
		}
	}
	if _, err := os.Stat(filepath.Join(f.root, "istota/exports")); !os.IsNotExist(err) {
		t.Error("a broken work log still produced invoices")
	}

	f.write(t, "istota/config/"+ConfigFile, strings.Replace(testConfig, `rate = "120.00"`, `rate = "12O.00"`, 1))
	_, err = f.svc.Generate(ctx, "alice", GenerateRequest{})
	if !errors.As(err, &fe) || fe.File != ConfigFile || !strings.Contains(fe.Error(), "line 35: rate:") {
		t.Fatalf("err = %v", err)
	}
	os.Remove(filepath.Join(f.root, "istota/config/"+ConfigFile))
	if _, err := f.svc.Generate(ctx, "alice", GenerateRequest{}); !errors.Is(err, ErrNoConfig) {
		t.Fatalf("without INVOICING.md: %v", err)
	}
}

func TestLedgerSymlinkOutsideIsRefused(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	outside := filepath.Join(t.TempDir(), "victim.beancount")
	if err := os.WriteFile(outside, []byte("; someone else's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(f.root, "accounting"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(f.root, "accounting/main.beancount")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Generate(ctx, "alice", GenerateRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Pay(ctx, "alice", "ACME-2025-0001", ""); err == nil {
		t.Fatal("paying through a symlink that leaves the user's folder worked")
	}
	if b, _ := os.ReadFile(outside); string(b) != "; someone else's\n" {
		t.Errorf("the file outside was written: %q", b)
	}
}

func TestSkill(t *testing.T) {
	f := newFixture(t)
	reg := skills.NewRegistry()
	if err := RegisterSkill(reg, f.svc); err != nil {
		t.Fatal(err)
	}
	s, _ := reg.Lookup("invoice")
	run := func(uid string, args ...string) skills.Result {
		t.Helper()
		return s.Run(context.Background(), skills.Invocation{Args: args, UserID: uid, TaskID: 1})
	}
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{nil, 2, "usage"},
		{[]string{"frobnicate"}, 2, "unknown subcommand"},
		{[]string{"generate", "--period", "March"}, 2, "not a month"},
		{[]string{"generate", "--client", "../x"}, 2, "not a key"},
		{[]string{"paid", "../../etc/passwd"}, 2, "not an invoice number"},
		{[]string{"paid", "ACME-2025-0001", "yesterday"}, 2, "not a date"},
		{[]string{"create", "--client", "globex"}, 2, "usage"},
		{[]string{"create", "--client", "globex", "--item", "consulting"}, 2, "SERVICE:QUANTITY"},
		{[]string{"list", "--open", "--paid"}, 2, "at most one"},
		{[]string{"paid", "ACME-2025-0001"}, 1, "no such invoice"},
		{[]string{"list"}, 0, "no invoices"},
		{[]string{"generate", "--dry-run"}, 0, "Would issue 3 invoice(s)"},
		{[]string{"generate"}, 0, "Issued 3 invoice(s):\n- ACME-2025-0001  Globex Corp  642.60 EUR  due 2025-04-16  period 2025-03  istota/exports/invoices/ACME-2025-0001.pdf"},
		{[]string{"generate"}, 0, "No unbilled work"},
		{[]string{"paid", "ACME-2025-0001", "2025-04-02"}, 0, "Recorded ACME-2025-0001 as paid on 2025-04-02 (642.60 EUR). Posted to accounting/main.beancount."},
		{[]string{"create", "--client", "globex", "--fixed", "99.5:Setup fee"}, 0, "Issued ACME-2025-0004"},
		{[]string{"create", "--client", "umbrella", "--fixed", "99.5:Setup fee"}, 1, "no client \"umbrella\""},
		{[]string{"list", "--paid"}, 0, "ACME-2025-0001  paid"},
	} {
		r := run("alice", tc.args...)
		got := string(r.Stdout) + string(r.Stderr)
		if r.ExitCode != tc.code || !strings.Contains(got, tc.out) {
			t.Errorf("invoice %v: exit %d, output %q; want exit %d with %q", tc.args, r.ExitCode, got, tc.code, tc.out)
		}
	}
	f.now = time.Date(2025, 5, 20, 9, 0, 0, 0, time.UTC)
	r := run("alice", "list", "--overdue")
	if out := string(r.Stdout); strings.Count(out, "\n") != 3 || strings.Contains(out, "ACME-2025-0001") || !strings.Contains(out, "ACME-2025-0003  overdue") {
		t.Errorf("overdue list:\n%s", out)
	}
	// Another user sees none of alice's invoices.
	if r := run("bob", "list"); r.ExitCode != 1 && !strings.Contains(string(r.Stdout), "no invoices") {
		t.Errorf("bob: exit %d %s %s", r.ExitCode, r.Stdout, r.Stderr)
	}
	if r := run("bob", "paid", "ACME-2025-0001"); r.ExitCode != 1 || !strings.Contains(string(r.Stderr), "no such invoice") {
		t.Errorf("bob paying alice's invoice: exit %d %s", r.ExitCode, r.Stderr)
	}
}

func TestFilesGoToTheFolderOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a sidecar running as root hands files over")
	}
	f := newFixture(t)
	const nobody = 65534
	if err := filepath.WalkDir(f.root, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, nobody, nobody)
	}); err != nil {
		t.Fatal(err)
	}
	res, err := f.svc.Generate(context.Background(), "alice", GenerateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"istota/config/" + WorkLog, res.Invoices[0].PDF, "istota/exports/invoices", "istota/exports"} {
		fi, err := os.Lstat(filepath.Join(f.root, rel))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != nobody || st.Gid != nobody {
			t.Errorf("%s is owned by %d:%d, want the folder's owner", rel, st.Uid, st.Gid)
		}
	}
}
