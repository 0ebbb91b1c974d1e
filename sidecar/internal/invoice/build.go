package invoice

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/userconfig"
)

// maxNet bounds an invoice's net amount (in cents), so that tax and totals stay exact.
const maxNet = 10_000_000_000_000

// entryKeys identifies each work-log entry by its content (date, client, service,
// quantity, note with blanks folded) and, for identical entries, its rank among them
// in file order. The billed marker is not part of the key, so adding it changes nothing.
func entryKeys(entries []userconfig.WorkEntry) []string {
	seen := map[string]int{}
	out := make([]string, len(entries))
	for i, e := range entries {
		content := strings.Join([]string{e.Date, e.Client, e.Service, strconv.FormatInt(e.Quantity, 10),
			strings.Join(strings.Fields(e.Note), " ")}, "\x1f")
		seen[content]++
		sum := sha256.Sum256([]byte(content + "\x1f" + strconv.Itoa(seen[content])))
		out[i] = hex.EncodeToString(sum[:16])
	}
	return out
}

// checkWorkLog reports entries that name a client or service INVOICING.md does not
// define, with their line and field.
func checkWorkLog(cfg userconfig.InvoicingFile, entries []userconfig.WorkEntry) []userconfig.Problem {
	var out []userconfig.Problem
	for _, e := range entries {
		if e.Invoice != "" {
			continue // billed: what it said no longer matters
		}
		if _, ok := findClient(cfg, e.Client); !ok {
			out = append(out, userconfig.Problem{Line: e.Line, Field: "client", Message: "no client " + strconv.Quote(e.Client) + " in " + ConfigFile})
		}
		if _, ok := findService(cfg, e.Service); !ok {
			out = append(out, userconfig.Problem{Line: e.Line, Field: "service", Message: "no service " + strconv.Quote(e.Service) + " in " + ConfigFile})
		}
	}
	return out
}

func findClient(cfg userconfig.InvoicingFile, key string) (userconfig.InvoiceClient, bool) {
	for _, c := range cfg.Clients {
		if c.Key == key {
			return c, true
		}
	}
	return userconfig.InvoiceClient{}, false
}

func findService(cfg userconfig.InvoicingFile, key string) (userconfig.InvoiceService, bool) {
	for _, s := range cfg.Services {
		if s.Key == key {
			return s, true
		}
	}
	return userconfig.InvoiceService{}, false
}

func findEntity(cfg userconfig.InvoicingFile, key string) (userconfig.InvoiceEntity, bool) {
	for _, e := range cfg.Entities {
		if e.Key == key {
			return e, true
		}
	}
	return userconfig.InvoiceEntity{}, false
}

// bundleOf names the bundle that bills service for client: a bundle for that client
// wins over one for every client; "" when none does.
func bundleOf(cfg userconfig.InvoicingFile, client, service string) string {
	name := ""
	for _, b := range cfg.Bundles {
		if !slices.Contains(b.Services, service) {
			continue
		}
		if b.Client == client {
			return b.Name
		}
		if b.Client == "" && name == "" {
			name = b.Name
		}
	}
	return name
}

// draft is an invoice before it has a number, and the entries it bills.
type draft struct {
	doc    Document
	prefix string
	keys   []string
}

// header fills the parts of a document that come from the entity and client.
func header(cfg userconfig.InvoicingFile, client userconfig.InvoiceClient, issued time.Time) Document {
	ent, _ := findEntity(cfg, client.Entity) // the parser resolved and checked it
	due := cmp.Or(client.DueDays, ent.DueDays, cfg.DueDays)
	d := Document{
		Issued:      issued.Format(time.DateOnly),
		Due:         issued.AddDate(0, 0, due).Format(time.DateOnly),
		Currency:    ent.Currency,
		Entity:      ent.Key,
		Client:      client.Key,
		From:        Party{Name: ent.Name, Address: ent.Address, TaxID: ent.TaxID, Email: ent.Email},
		To:          Party{Name: client.Name, Address: client.Address, TaxID: client.TaxID, Email: client.Email},
		Bank:        ent.Bank,
		Note:        ent.Note,
		TaxRate:     ent.TaxRate,
		BankAccount: ent.BankAccount,
	}
	if ent.TaxRate > 0 {
		d.TaxLabel, d.TaxAccount = ent.TaxLabel, ent.TaxAccount
	}
	return d
}

// serviceLine is the invoice line for quantity of service.
func serviceLine(ent userconfig.InvoiceEntity, svc userconfig.InvoiceService, date string, quantity int64, note string) Line {
	desc := svc.Name
	if note = strings.TrimSpace(note); note != "" {
		desc += ": " + note
	}
	return Line{Date: date, Description: desc, Quantity: quantity, Unit: svc.Unit, Rate: svc.Rate,
		Amount: lineAmount(svc.Rate, quantity), Account: cmp.Or(svc.Account, ent.IncomeAccount)}
}

// lineAmount is rate × quantity in cents, rounded half up (quantity is in thousandths;
// both are bounded so the product fits).
func lineAmount(rate, quantity int64) int64 { return (rate*quantity + 500) / 1000 }

// total fills Net, Tax and Total from the lines; false when the sum is too large.
func (d *Document) total() bool {
	d.Net = 0
	for _, l := range d.Lines {
		d.Net += l.Amount
		if d.Net > maxNet {
			return false
		}
	}
	d.Tax = (d.Net*d.TaxRate + 5000) / 10000
	d.Total = d.Net + d.Tax
	return true
}

type groupKey struct{ entity, client, period, bundle string }

// drafts groups the selected entries into invoices, one per entity, client, month and
// bundle, in a fixed order so that numbers are given out the same way every time.
func drafts(cfg userconfig.InvoicingFile, entries []userconfig.WorkEntry, keys []string, issued time.Time) ([]draft, error) {
	groups := map[groupKey][]int{}
	for i, e := range entries {
		c, _ := findClient(cfg, e.Client)
		k := groupKey{entity: c.Entity, client: e.Client, period: e.Date[:7], bundle: bundleOf(cfg, e.Client, e.Service)}
		groups[k] = append(groups[k], i)
	}
	order := make([]groupKey, 0, len(groups))
	for k := range groups {
		order = append(order, k)
	}
	slices.SortFunc(order, func(a, b groupKey) int {
		return cmp.Or(cmp.Compare(a.entity, b.entity), cmp.Compare(a.client, b.client),
			cmp.Compare(a.period, b.period), cmp.Compare(a.bundle, b.bundle))
	})
	out := make([]draft, 0, len(order))
	for _, k := range order {
		idx := groups[k]
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(entries[a].Date, entries[b].Date) })
		client, _ := findClient(cfg, k.client)
		ent, _ := findEntity(cfg, k.entity)
		d := draft{doc: header(cfg, client, issued), prefix: ent.Prefix}
		d.doc.Period, d.doc.Title = k.period, k.bundle
		for _, i := range idx {
			e := entries[i]
			svc, _ := findService(cfg, e.Service)
			d.doc.Lines = append(d.doc.Lines, serviceLine(ent, svc, e.Date, e.Quantity, e.Note))
			d.keys = append(d.keys, keys[i])
		}
		if !d.doc.total() {
			return nil, invalidf("the invoice for %s for %s would be too large", client.Name, k.period)
		}
		out = append(out, d)
	}
	return out, nil
}
