package invoice

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

const skillUsage = `invoice generate [--period YYYY-MM] [--client KEY] [--date YYYY-MM-DD] [--dry-run]
invoice list [--open | --overdue | --paid] [--client KEY]
invoice paid NUMBER [YYYY-MM-DD]
invoice create --client KEY --item SERVICE:QUANTITY[:NOTE]... [--fixed AMOUNT:DESCRIPTION]... [--title TEXT] [--date YYYY-MM-DD]
Bills from config/INVOICING.md (entities, clients, services, bundles) and the work log config/_INVOICES.md,
where each billable entry is a list item "- 2025-03-04 | CLIENT | SERVICE | 2.5 | note".
generate invoices the unbilled entries of the months before this one (or of --period), one invoice per
client, entity, month and bundle, writes the PDFs to exports/invoices/ and marks the entries billed; it
never bills an entry twice. paid records a payment and posts it to the ledger INVOICING.md names.
Never compute invoices yourself: run these commands and report their summary.`

// RegisterSkill registers the invoice skill. It works on the calling user's own files
// and invoices only, and declares no environment.
func RegisterSkill(reg *skills.Registry, svc *Service) error {
	if svc == nil {
		return errors.New("invoice: register skill: no service")
	}
	return reg.Register(skills.Skill{
		Manifest: skills.Manifest{
			Name:    "invoice",
			Summary: "generate, list, create and mark paid invoices from INVOICING.md and the _INVOICES.md work log",
			Usage:   skillUsage,
			// Everything it writes is the user's own: PDFs, the work log, their ledger.
			Classify: skills.ReadVerbs("list"),
		},
		Run: func(ctx context.Context, inv skills.Invocation) skills.Result {
			return runSkill(ctx, svc, inv)
		},
	})
}

func runSkill(ctx context.Context, svc *Service, inv skills.Invocation) skills.Result {
	if len(inv.Args) == 0 {
		return skills.Usagef("usage:\n%s", skillUsage)
	}
	if inv.UserID == "" {
		return skills.Failf("invoice: no user for this task")
	}
	args := inv.Args[1:]
	switch inv.Args[0] {
	case "generate":
		return skillGenerate(ctx, svc, inv.UserID, args)
	case "list":
		return skillList(ctx, svc, inv.UserID, args)
	case "paid":
		return skillPaid(ctx, svc, inv.UserID, args)
	case "create":
		return skillCreate(ctx, svc, inv.UserID, args)
	}
	return skills.Usagef("invoice: unknown subcommand %q\nusage:\n%s", inv.Args[0], skillUsage)
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("invoice "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// failure turns an error of the Service into what the agent sees.
func failure(err error) skills.Result {
	var fe *FileError
	switch {
	case errors.As(err, &fe):
		return skills.Failf("invoice: %v", fe)
	case errors.Is(err, ErrNoConfig):
		return skills.Failf("invoice: there is no config/%s yet. Create it with a ```toml block holding [[entities]] (key, name, address, tax_id, bank, currency, prefix), [[clients]] (key, name, address) and [[services]] (key, name, rate, unit).", ConfigFile)
	case errors.Is(err, ErrInvalid):
		return skills.Failf("invoice: %s", strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
	case errors.Is(err, ErrNotFound):
		return skills.Failf("invoice: no such invoice (see: istota skill invoice list)")
	}
	return skills.Internal("invoicing", err)
}

func checkKey(flagName, v string) *skills.Result {
	if v != "" && !userconfig.ValidInvoiceKey(v) {
		r := skills.Usagef("invoice: --%s %q is not a key from %s (lower-case letters, digits, '-' or '_')", flagName, v, ConfigFile)
		return &r
	}
	return nil
}

func skillGenerate(ctx context.Context, svc *Service, uid string, args []string) skills.Result {
	var req GenerateRequest
	fs := newFlags("generate")
	fs.StringVar(&req.Period, "period", "", "month")
	fs.StringVar(&req.Client, "client", "", "client key")
	fs.StringVar(&req.Date, "date", "", "issue date")
	fs.BoolVar(&req.DryRun, "dry-run", false, "change nothing")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return skills.Usagef("usage: istota skill invoice generate [--period YYYY-MM] [--client KEY] [--date YYYY-MM-DD] [--dry-run]")
	}
	if r := checkKey("client", req.Client); r != nil {
		return *r
	}
	if req.Period != "" && !ValidPeriod(req.Period) {
		return skills.Usagef("invoice: --period %q is not a month like 2025-03", req.Period)
	}
	res, err := svc.Generate(ctx, uid, req)
	if err != nil {
		return failure(err)
	}
	return skills.Result{Stdout: []byte(GenerateSummary(res, req.DryRun))}
}

// GenerateSummary is the short account of a run given to the agent and the user.
func GenerateSummary(res GenerateResult, dryRun bool) string {
	var b strings.Builder
	switch {
	case len(res.Invoices) == 0:
		b.WriteString("No unbilled work to invoice.\n")
	case dryRun:
		fmt.Fprintf(&b, "Would issue %d invoice(s) (dry run, nothing changed):\n", len(res.Invoices))
	default:
		fmt.Fprintf(&b, "Issued %d invoice(s):\n", len(res.Invoices))
	}
	for _, inv := range res.Invoices {
		b.WriteString("- " + oneLine(inv) + "\n")
	}
	if res.Left > 0 {
		fmt.Fprintf(&b, "%d unbilled entr%s left for later (this month's work, or outside the period or client asked for).\n", res.Left, plural(res.Left, "y", "ies"))
	}
	return b.String()
}

func oneLine(inv Invoice) string {
	num := inv.Number
	if num == "" {
		num = "(draft)"
	}
	s := fmt.Sprintf("%s  %s  %s %s  due %s", num, inv.To.Name, FormatAmount(inv.Total), inv.Currency, inv.Due)
	if inv.Period != "" {
		s += "  period " + inv.Period
	}
	if inv.Title != "" {
		s += "  " + inv.Title
	}
	if inv.PDF != "" {
		s += "  " + inv.PDF
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func skillList(ctx context.Context, svc *Service, uid string, args []string) skills.Result {
	fs := newFlags("list")
	open := fs.Bool("open", false, "unpaid")
	overdue := fs.Bool("overdue", false, "overdue")
	paid := fs.Bool("paid", false, "paid")
	client := fs.String("client", "", "client key")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return skills.Usagef("usage: istota skill invoice list [--open | --overdue | --paid] [--client KEY]")
	}
	n := 0
	for _, b := range []*bool{open, overdue, paid} {
		if *b {
			n++
		}
	}
	if n > 1 {
		return skills.Usagef("invoice list: give at most one of --open, --overdue, --paid")
	}
	if r := checkKey("client", *client); r != nil {
		return *r
	}
	invs, today, err := svc.List(ctx, uid)
	if err != nil {
		return failure(err)
	}
	var b strings.Builder
	count := 0
	for _, inv := range invs {
		st := inv.StatusOn(today)
		switch {
		case *client != "" && inv.Client != *client,
			*open && st == StatusPaid,
			*overdue && st != StatusOverdue,
			*paid && st != StatusPaid:
			continue
		}
		count++
		fmt.Fprintf(&b, "%s  %-7s  %s  %s %s  issued %s  due %s", inv.Number, st, inv.To.Name, FormatAmount(inv.Total), inv.Currency, inv.Issued, inv.Due)
		if inv.PaidOn != "" {
			b.WriteString("  paid " + inv.PaidOn)
		}
		b.WriteString("\n")
	}
	if count == 0 {
		return skills.Result{Stdout: []byte("no invoices\n")}
	}
	return skills.Result{Stdout: []byte(b.String())}
}

func skillPaid(ctx context.Context, svc *Service, uid string, args []string) skills.Result {
	if len(args) < 1 || len(args) > 2 {
		return skills.Usagef("usage: istota skill invoice paid NUMBER [YYYY-MM-DD]")
	}
	if !userconfig.ValidInvoiceNumber(args[0]) {
		return skills.Usagef("invoice paid: %q is not an invoice number like ACME-2025-0001", args[0])
	}
	day := ""
	if len(args) == 2 {
		if _, err := ParseDay(args[1]); err != nil {
			return skills.Usagef("invoice paid: %v", err)
		}
		day = args[1]
	}
	res, err := svc.Pay(ctx, uid, args[0], day)
	if err != nil {
		return failure(err)
	}
	msg := fmt.Sprintf("Recorded %s as paid on %s (%s %s).", res.Invoice.Number, res.Invoice.PaidOn, FormatAmount(res.Invoice.Total), res.Invoice.Currency)
	if res.Ledger != "" {
		msg += " Posted to " + res.Ledger + "."
	} else {
		msg += " No ledger is set in " + ConfigFile + ", so nothing was posted."
	}
	return skills.Result{Stdout: []byte(msg + "\n")}
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ", ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func skillCreate(ctx context.Context, svc *Service, uid string, args []string) skills.Result {
	var req CreateRequest
	var items, fixed listFlag
	fs := newFlags("create")
	fs.StringVar(&req.Client, "client", "", "client key")
	fs.StringVar(&req.Title, "title", "", "title")
	fs.StringVar(&req.Date, "date", "", "issue date")
	fs.Var(&items, "item", "SERVICE:QUANTITY[:NOTE]")
	fs.Var(&fixed, "fixed", "AMOUNT:DESCRIPTION")
	usage := "usage: istota skill invoice create --client KEY --item SERVICE:QUANTITY[:NOTE]... [--fixed AMOUNT:DESCRIPTION]... [--title TEXT] [--date YYYY-MM-DD]"
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || req.Client == "" || len(items)+len(fixed) == 0 {
		return skills.Usagef("%s", usage)
	}
	if r := checkKey("client", req.Client); r != nil {
		return *r
	}
	if req.Date != "" {
		if _, err := ParseDay(req.Date); err != nil {
			return skills.Usagef("invoice create: --date: %v", err)
		}
	}
	for _, it := range items {
		parts := strings.SplitN(it, ":", 3)
		if len(parts) < 2 || !userconfig.ValidInvoiceKey(parts[0]) {
			return skills.Usagef("invoice create: --item %q must be SERVICE:QUANTITY[:NOTE], like consulting:2.5:Workshop", it)
		}
		q, err := userconfig.ParseDecimal(parts[1], userconfig.QuantityPlaces)
		if err != nil || q == 0 {
			return skills.Usagef("invoice create: --item %q: the quantity must be a number above 0", it)
		}
		ci := CreateItem{Service: parts[0], Quantity: q}
		if len(parts) == 3 {
			ci.Note = parts[2]
		}
		req.Items = append(req.Items, ci)
	}
	for _, fx := range fixed {
		amount, desc, ok := strings.Cut(fx, ":")
		a, err := userconfig.ParseDecimal(amount, 2)
		if !ok || err != nil || a == 0 || strings.TrimSpace(desc) == "" {
			return skills.Usagef("invoice create: --fixed %q must be AMOUNT:DESCRIPTION, like 500.00:Setup fee", fx)
		}
		req.Items = append(req.Items, CreateItem{Amount: a, Note: desc})
	}
	for _, it := range req.Items {
		if strings.ContainsFunc(it.Note, func(r rune) bool { return r < 0x20 || r == 0x7f }) || len([]rune(it.Note)) > 300 {
			return skills.Usagef("invoice create: a note or description must be one line of at most 300 characters")
		}
	}
	inv, err := svc.Create(ctx, uid, req)
	if err != nil {
		return failure(err)
	}
	return skills.Result{Stdout: []byte("Issued " + oneLine(inv) + "\n")}
}
