package invoice

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/userconfig"
)

var periodRE = regexp.MustCompile(`^[0-9]{4}-(0[1-9]|1[0-2])$`)

// ValidPeriod reports whether s is a month, YYYY-MM.
func ValidPeriod(s string) bool { return periodRE.MatchString(s) }

// GenerateRequest says which unbilled work to invoice.
type GenerateRequest struct {
	// Period limits the run to the work of one month (YYYY-MM), the current one
	// included. Empty means all unbilled work dated before the current month.
	Period string
	Client string // only this client's work, "" for all
	Date   string // issue date YYYY-MM-DD, "" for today in the user's zone
	DryRun bool   // compute and report, change nothing
}

// GenerateResult is what a run did.
type GenerateResult struct {
	Invoices []Invoice // issued (or, in a dry run, drafted: without numbers)
	Left     int       // unbilled entries outside the request (later months, other clients)
}

// Generate turns unbilled work-log entries into invoices, one per entity, client,
// month and bundle, writes their PDFs and marks the entries billed in the work log.
// Running it again bills nothing twice: entries are recognised by their content, both
// from the marker in the work log and from the database.
func (s *Service) Generate(ctx context.Context, uid string, req GenerateRequest) (GenerateResult, error) {
	if req.Period != "" && !ValidPeriod(req.Period) {
		return GenerateResult{}, invalidf("the period %q is not a month like 2025-03", req.Period)
	}
	today, err := s.today(ctx, uid)
	if err != nil {
		return GenerateResult{}, err
	}
	issued := today
	if req.Date != "" {
		if issued, err = ParseDay(req.Date); err != nil {
			return GenerateResult{}, invalidf("%v", err)
		}
	}
	defer s.lock(uid)()
	f, err := s.openFolder(uid)
	if err != nil {
		return GenerateResult{}, err
	}
	defer f.Close()
	cfg, err := f.config()
	if err != nil {
		return GenerateResult{}, err
	}
	if req.Client != "" {
		if _, ok := findClient(cfg, req.Client); !ok {
			return GenerateResult{}, invalidf("no client %q in %s", req.Client, ConfigFile)
		}
	}
	entries, keys, err := f.workLog(cfg)
	if err != nil {
		return GenerateResult{}, err
	}
	billed, err := s.billedKeys(ctx, uid)
	if err != nil {
		return GenerateResult{}, err
	}
	before := today.Format("2006-01")
	var pick []userconfig.WorkEntry
	var pickKeys []string
	var res GenerateResult
	for i, e := range entries {
		if e.Invoice != "" || billed[keys[i]] != "" {
			continue
		}
		month := e.Date[:7]
		inPeriod := (req.Period == "" && month < before) || month == req.Period
		if !inPeriod || (req.Client != "" && e.Client != req.Client) {
			res.Left++
			continue
		}
		pick = append(pick, e)
		pickKeys = append(pickKeys, keys[i])
	}
	ds, err := drafts(cfg, pick, pickKeys, issued)
	if err != nil {
		return GenerateResult{}, err
	}
	if req.DryRun {
		for _, d := range ds {
			res.Invoices = append(res.Invoices, Invoice{Document: d.doc})
		}
		return res, nil
	}
	if len(ds) > 0 {
		tx, err := s.db.Write.BeginTx(ctx, nil)
		if err != nil {
			return GenerateResult{}, fmt.Errorf("invoice: begin: %w", err)
		}
		defer tx.Rollback()
		for _, d := range ds {
			inv, err := s.issue(ctx, tx, uid, d)
			if err != nil {
				return GenerateResult{}, err
			}
			res.Invoices = append(res.Invoices, inv)
		}
		if err := tx.Commit(); err != nil {
			return GenerateResult{}, fmt.Errorf("invoice: commit: %w", err)
		}
		for _, inv := range res.Invoices {
			s.log.Info("invoice issued", "user_id", uid, "number", inv.Number, "client", inv.Client, "period", inv.Period)
		}
	}
	// The invoices are issued; what follows only brings the files in line with the
	// database, and is repeated by every later run if it fails now.
	if err := s.finish(ctx, uid, f); err != nil {
		return res, err
	}
	return res, nil
}

// workLog reads and checks _INVOICES.md (a missing one is empty).
func (f *folder) workLog(cfg userconfig.InvoicingFile) ([]userconfig.WorkEntry, []string, error) {
	src, _, err := f.readConfig(WorkLog)
	if err != nil {
		return nil, nil, err
	}
	entries, problems := userconfig.ParseWorkLog(src)
	problems = append(problems, checkWorkLog(cfg, entries)...)
	if len(problems) > 0 {
		slices.SortStableFunc(problems, func(a, b userconfig.Problem) int { return a.Line - b.Line })
		return nil, nil, &FileError{File: WorkLog, Problems: problems}
	}
	return entries, entryKeys(entries), nil
}

// finish writes the PDFs that are missing and the billed markers that are missing.
func (s *Service) finish(ctx context.Context, uid string, f *folder) error {
	invs, err := s.all(ctx, uid)
	if err != nil {
		return err
	}
	for _, inv := range invs {
		if f.exists(inv.PDF) {
			continue
		}
		pdf, err := RenderPDF(inv.Document)
		if err != nil {
			return err
		}
		if err := f.writeFile(inv.PDF, pdf); err != nil {
			return err
		}
	}
	return s.markBilled(ctx, uid, f)
}

// markBilled adds the invoice number to every entry of the work log that is billed
// in the database but not marked in the file. The file is read again here, so an
// entry added meanwhile is kept as it is.
func (s *Service) markBilled(ctx context.Context, uid string, f *folder) error {
	src, ok, err := f.readConfig(WorkLog)
	if err != nil || !ok {
		return err
	}
	billed, err := s.billedKeys(ctx, uid)
	if err != nil {
		return err
	}
	entries, _ := userconfig.ParseWorkLog(src) // broken lines are left alone
	keys := entryKeys(entries)
	out := slices.Clone(src)
	changed := false
	for i := len(entries) - 1; i >= 0; i-- {
		num := billed[keys[i]]
		if entries[i].Invoice != "" || num == "" {
			continue
		}
		out = slices.Insert(out, entries[i].End, []byte(" | "+num)...)
		changed = true
	}
	if !changed {
		return nil
	}
	return f.writeFile(f.configPath(WorkLog), out)
}

// CreateItem is one line of a one-off invoice: a service by quantity, or a fixed
// amount with a description.
type CreateItem struct {
	Service  string
	Quantity int64 // thousandths
	Note     string
	Amount   int64 // cents, for a fixed line (Service empty)
}

// CreateRequest is a one-off invoice, without the work log.
type CreateRequest struct {
	Client string
	Title  string
	Date   string // issue date, "" for today
	Items  []CreateItem
}

// Create issues a one-off invoice and writes its PDF.
func (s *Service) Create(ctx context.Context, uid string, req CreateRequest) (Invoice, error) {
	if len(req.Items) == 0 {
		return Invoice{}, invalidf("an invoice needs at least one line")
	}
	if len([]rune(req.Title)) > 100 || strings.ContainsFunc(req.Title, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return Invoice{}, invalidf("the title must be one line of at most 100 characters")
	}
	issued, err := s.today(ctx, uid)
	if err != nil {
		return Invoice{}, err
	}
	if req.Date != "" {
		if issued, err = ParseDay(req.Date); err != nil {
			return Invoice{}, invalidf("%v", err)
		}
	}
	defer s.lock(uid)()
	f, err := s.openFolder(uid)
	if err != nil {
		return Invoice{}, err
	}
	defer f.Close()
	cfg, err := f.config()
	if err != nil {
		return Invoice{}, err
	}
	client, ok := findClient(cfg, req.Client)
	if !ok {
		return Invoice{}, invalidf("no client %q in %s", req.Client, ConfigFile)
	}
	ent, _ := findEntity(cfg, client.Entity)
	d := draft{doc: header(cfg, client, issued), prefix: ent.Prefix}
	d.doc.Title = strings.TrimSpace(req.Title)
	for _, it := range req.Items {
		if it.Service == "" {
			if it.Amount <= 0 || it.Amount > userconfig.MaxRate || strings.TrimSpace(it.Note) == "" {
				return Invoice{}, invalidf("a fixed line needs an amount above 0 and a description")
			}
			d.doc.Lines = append(d.doc.Lines, Line{Description: strings.TrimSpace(it.Note), Quantity: 1000, Unit: "item",
				Rate: it.Amount, Amount: it.Amount, Account: ent.IncomeAccount})
			continue
		}
		svc, ok := findService(cfg, it.Service)
		if !ok {
			return Invoice{}, invalidf("no service %q in %s", it.Service, ConfigFile)
		}
		if it.Quantity <= 0 || it.Quantity > userconfig.MaxQuantity {
			return Invoice{}, invalidf("the quantity of %s must be above 0", it.Service)
		}
		d.doc.Lines = append(d.doc.Lines, serviceLine(ent, svc, "", it.Quantity, it.Note))
	}
	if !d.doc.total() {
		return Invoice{}, invalidf("the invoice would be too large")
	}
	tx, err := s.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return Invoice{}, fmt.Errorf("invoice: begin: %w", err)
	}
	defer tx.Rollback()
	inv, err := s.issue(ctx, tx, uid, d)
	if err != nil {
		return Invoice{}, err
	}
	if err := tx.Commit(); err != nil {
		return Invoice{}, fmt.Errorf("invoice: commit: %w", err)
	}
	s.log.Info("invoice issued", "user_id", uid, "number", inv.Number, "client", inv.Client, "one_off", true)
	return inv, s.finish(ctx, uid, f)
}

// List returns uid's invoices with their status today, oldest first.
func (s *Service) List(ctx context.Context, uid string) ([]Invoice, string, error) {
	today, err := s.today(ctx, uid)
	if err != nil {
		return nil, "", err
	}
	invs, err := s.all(ctx, uid)
	return invs, today.Format(time.DateOnly), err
}
