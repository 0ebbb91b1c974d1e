package invoice

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/userconfig"
)

// openDate dates the open directives written for accounts the ledger does not open yet:
// early enough for any payment the user may record.
const openDate = "2000-01-01"

// PayResult is what recording a payment did.
type PayResult struct {
	Invoice Invoice
	Ledger  string // the ledger posted to, relative to the user's folder; "" when none is configured
}

// Pay records that invoice number was paid on day (YYYY-MM-DD, "" for today) and, when
// INVOICING.md names a ledger, appends the cash-basis posting to it: the bank account
// receives the total, each income account its share of the net, the tax account the
// tax. Paying a paid invoice is refused, and a posting already in the ledger is never
// written again.
func (s *Service) Pay(ctx context.Context, uid, number, day string) (PayResult, error) {
	if !userconfig.ValidInvoiceNumber(number) {
		return PayResult{}, invalidf("%q is not an invoice number like ACME-2025-0001", number)
	}
	today, err := s.today(ctx, uid)
	if err != nil {
		return PayResult{}, err
	}
	paid := today
	if day != "" {
		if paid, err = ParseDay(day); err != nil {
			return PayResult{}, invalidf("%v", err)
		}
		if paid.After(today) {
			return PayResult{}, invalidf("%s is in the future; record a payment once it has arrived", day)
		}
	}
	defer s.lock(uid)()
	inv, err := s.Get(ctx, uid, number)
	if err != nil {
		return PayResult{}, err
	}
	if inv.PaidOn != "" {
		return PayResult{}, invalidf("%s was already recorded as paid on %s", number, inv.PaidOn)
	}
	on := paid.Format(time.DateOnly)
	if on < inv.Issued {
		return PayResult{}, invalidf("%s was issued on %s, after %s", number, inv.Issued, on)
	}
	f, err := s.openFolder(uid)
	if err != nil {
		return PayResult{}, err
	}
	defer f.Close()
	cfg, err := f.config()
	if err != nil {
		return PayResult{}, err
	}
	if cfg.Ledger != "" {
		if err := f.post(cfg.Ledger, inv.Document, on); err != nil {
			return PayResult{}, err
		}
	}
	res, err := s.db.Write.ExecContext(ctx, `UPDATE invoices SET paid_on = ? WHERE user_id = ? AND number = ? AND paid_on = ''`, on, uid, number)
	if err != nil {
		return PayResult{}, fmt.Errorf("invoice: record payment of %s: %w", number, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return PayResult{}, fmt.Errorf("invoice: record payment of %s: %d rows changed", number, n)
	}
	inv.PaidOn = on
	s.log.Info("invoice paid", "user_id", uid, "number", number, "paid_on", on, "ledger", cfg.Ledger != "")
	return PayResult{Invoice: inv, Ledger: cfg.Ledger}, nil
}

var openRE = regexp.MustCompile(`(?m)^[0-9]{4}-[0-9]{2}-[0-9]{2}[ \t]+open[ \t]+([A-Z][A-Za-z0-9:-]*)`)

// post appends the payment of d to the ledger at rel, with open directives for the
// accounts the file does not open yet. A ledger that already holds the posting (a
// payment recorded before a crash) is left as it is.
func (f *folder) post(rel string, d Document, on string) error {
	old, err := f.root.ReadFile(rel)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("invoice: read the ledger %s: %w", rel, err)
	}
	if strings.Contains(string(old), "invoice: "+strconv.Quote(d.Number)) {
		return nil
	}
	opened := map[string]bool{}
	for _, m := range openRE.FindAllStringSubmatch(string(old), -1) {
		opened[m[1]] = true
	}
	var b strings.Builder
	if len(old) > 0 && old[len(old)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	for _, a := range postingAccounts(d) {
		if !opened[a] {
			fmt.Fprintf(&b, "%s open %s\n", openDate, a)
		}
	}
	b.WriteString(Posting(d, on))
	if err := f.root.MkdirAll(path.Dir(rel), 0o700); err != nil {
		return fmt.Errorf("invoice: create the ledger's folder: %w", err)
	}
	w, err := f.root.OpenFile(rel, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("invoice: open the ledger %s: %w", rel, err)
	}
	_, err = w.WriteString(b.String())
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("invoice: append to the ledger %s: %w", rel, err)
	}
	return f.own(rel)
}

// postingAccounts lists the accounts the payment of d touches, in posting order.
func postingAccounts(d Document) []string {
	out := []string{d.BankAccount}
	for _, l := range d.Lines {
		if !slices.Contains(out, l.Account) {
			out = append(out, l.Account)
		}
	}
	if d.Tax > 0 && !slices.Contains(out, d.TaxAccount) {
		out = append(out, d.TaxAccount)
	}
	return out
}

// Posting is the Beancount transaction recording the payment of d on day: cash basis,
// so income is recognised when the money arrives.
func Posting(d Document, day string) string {
	income := map[string]int64{}
	var accounts []string
	for _, l := range d.Lines {
		if _, ok := income[l.Account]; !ok {
			accounts = append(accounts, l.Account)
		}
		income[l.Account] += l.Amount
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s * %s %s\n", day, beanString(d.To.Name), beanString("Invoice "+d.Number+" paid"))
	fmt.Fprintf(&b, "  invoice: %s\n", strconv.Quote(d.Number))
	fmt.Fprintf(&b, "  %s  %s %s\n", d.BankAccount, beanAmount(d.Total), d.Currency)
	for _, a := range accounts {
		fmt.Fprintf(&b, "  %s  %s %s\n", a, beanAmount(-income[a]), d.Currency)
	}
	if d.Tax > 0 {
		fmt.Fprintf(&b, "  %s  %s %s\n", d.TaxAccount, beanAmount(-d.Tax), d.Currency)
	}
	return b.String()
}

// beanString quotes s for Beancount, on one line and without characters its string
// syntax treats specially.
func beanString(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.NewReplacer(`"`, "'", `\`, "/").Replace(s)
	return `"` + s + `"`
}

// beanAmount writes cents as 1428.00 (no thousands separators).
func beanAmount(cents int64) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s%d.%02d", sign, cents/100, cents%100)
}
