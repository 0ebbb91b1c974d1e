package userconfig

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// InvoicingFile is the valid content of INVOICING.md: who bills (entities), whom
// (clients), for what (services), and which services go on an invoice of their own
// (bundles).
type InvoicingFile struct {
	// Ledger is the Beancount file payments are posted to, relative to the user's
	// folder (/Users/{uid}/); "" means payments are recorded but not posted.
	Ledger string
	// DueDays is the default payment term in days (30 unless set).
	DueDays int
	// GenerateDay is the day of the month (1–28) on which last month's work is invoiced
	// automatically; 0 turns the scheduled generation off.
	GenerateDay int
	// RemindDays is how many days before GenerateDay the user is reminded to complete
	// the work log; 0 means no reminder.
	RemindDays int
	Entities   []InvoiceEntity
	Clients    []InvoiceClient
	Services   []InvoiceService
	Bundles    []InvoiceBundle
}

// InvoiceEntity is a company (or person) that issues invoices.
type InvoiceEntity struct {
	Key      string
	Line     int
	Name     string
	Address  string // may span lines
	TaxID    string
	Email    string
	Bank     string // payment details printed on the invoice, may span lines
	Currency string // ISO 4217 code, also the Beancount commodity
	Prefix   string // invoice numbers are PREFIX-YYYY-NNNN
	DueDays  int    // 0: the file's default
	// TaxRate is the sales tax (VAT) added to every invoice, in hundredths of a
	// percent (1900 = 19 %); TaxLabel names it on the invoice.
	TaxRate  int64
	TaxLabel string
	Note     string // printed under the totals (e.g. "Reverse charge")
	// Beancount accounts for the cash-basis postings made when an invoice is paid.
	BankAccount   string
	IncomeAccount string
	TaxAccount    string
}

// InvoiceClient is someone invoices go to.
type InvoiceClient struct {
	Key     string
	Line    int
	Name    string
	Address string
	Email   string
	TaxID   string
	Entity  string // the entity that bills this client, resolved when only one exists
	DueDays int    // 0: the entity's or file's default
}

// InvoiceService is something billed by quantity at a rate.
type InvoiceService struct {
	Key     string
	Line    int
	Name    string
	Rate    int64  // price of one unit in cents (hundredths of the currency)
	Unit    string // "hour", "day", "item"…
	Account string // income account for this service, "" for the entity's
}

// InvoiceBundle makes the work on some services go on an invoice of its own, titled
// with the bundle's name, apart from the client's other work in the same period.
type InvoiceBundle struct {
	Name     string
	Line     int
	Client   string // "" for every client
	Services []string
}

// Bounds that keep every sum of an invoice far from overflowing int64: a rate of at
// most 10 000 000.00 times a quantity of at most 1 000 000 units.
const (
	MaxRate     = 1_000_000_000 // cents
	MaxQuantity = 1_000_000_000 // thousandths
)

// Defaults of INVOICING.md.
const (
	DefaultDueDays       = 30
	DefaultBankAccount   = "Assets:Bank:Checking"
	DefaultIncomeAccount = "Income:Services"
	DefaultTaxAccount    = "Liabilities:Tax:VAT"
)

const (
	invoicingTopKeys = "ledger, due_days, generate_day, remind_days and the [[entities]], [[clients]], [[services]] and [[bundles]] tables"
	entityKeys       = "key, name, address, tax_id, email, bank, currency, prefix, due_days, tax_rate, tax_label, note, bank_account, income_account, tax_account"
	clientKeys       = "key, name, address, email, tax_id, entity, due_days"
	serviceKeys      = "key, name, rate, unit, account"
	bundleKeys       = "name, client, services"
)

var (
	invoiceKeyRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)
	prefixRE     = regexp.MustCompile(`^[A-Z0-9]{1,12}$`)
	currencyRE   = regexp.MustCompile(`^[A-Z]{3}$`)
	// accountRE is a Beancount account name: a root type and capitalised components.
	accountRE = regexp.MustCompile(`^(Assets|Liabilities|Equity|Income|Expenses)(:[A-Z0-9][A-Za-z0-9-]{0,40}){1,8}$`)
)

// ValidInvoiceKey reports whether s can be the key of an entity, client or service:
// lower-case letters, digits, '-' and '_', up to 32.
func ValidInvoiceKey(s string) bool { return invoiceKeyRE.MatchString(s) }

// ParseInvoicing parses INVOICING.md: top-level settings and [[entities]],
// [[clients]], [[services]] and [[bundles]] tables inside the first ```toml block (or
// the whole file when it has none). Entries with a problem are left out; callers that
// issue invoices should refuse to work while any problem is reported, since a left-out
// client or service would change what is billed.
func ParseInvoicing(src []byte) (InvoicingFile, []Problem) {
	doc, problems := decode(src)
	if problems != nil {
		return InvoicingFile{}, problems
	}
	top := doc.top()
	out := InvoicingFile{
		Ledger:      top.str("ledger"),
		DueDays:     top.intIn("due_days", DefaultDueDays, 0, 366),
		GenerateDay: top.intIn("generate_day", 0, 0, 28),
		RemindDays:  top.intIn("remind_days", 0, 0, 27),
	}
	if out.Ledger != "" {
		if err := CheckRelativePath(out.Ledger, ".beancount", ".bean"); err != nil {
			top.fail("ledger", "%v", err)
		}
	}
	if out.RemindDays > 0 && out.GenerateDay == 0 {
		top.fail("remind_days", "reminds you before the monthly generation; set generate_day too")
	}
	var arrays []*entry
	sets := map[string]string{"entities": "entity", "clients": "client", "services": "service", "bundles": "bundle"}
	for _, k := range sortedKeys(doc.raw) {
		what, ok := sets[k]
		if !ok {
			if !top.used[k] {
				problems = append(problems, Problem{Line: doc.ix.topKeyLine(k), Field: k,
					Message: "unknown setting; allowed are " + invoicingTopKeys + " (top-level settings go above the first table)"})
			}
			continue
		}
		es, ps := doc.arrayEntries(k, what)
		problems = append(problems, ps...)
		for _, e := range es {
			e.kind = k
		}
		arrays = append(arrays, es...)
	}
	problems = append(problems, top.problems...)

	keys := map[string]map[string]int{"entities": {}, "clients": {}, "services": {}}
	prefixes := map[string]int{}
	var clientEntries []*entry // parallel to out.Clients
	for _, e := range arrays {
		switch e.kind {
		case "entities":
			ent := parseEntity(e)
			if ent.Key != "" && !e.failed("key") {
				uniqueKey(e, keys["entities"], ent.Key, "entity")
			}
			if ent.Prefix != "" && !e.failed("prefix") {
				if first, dup := prefixes[ent.Prefix]; dup {
					e.fail("prefix", "%q is already the prefix of the entity on line %d; each entity numbers its own invoices", ent.Prefix, first)
				} else {
					prefixes[ent.Prefix] = e.lineOf("prefix")
				}
			}
			if !e.bad() {
				out.Entities = append(out.Entities, ent)
			}
		case "clients":
			c := parseClient(e)
			if c.Key != "" && !e.failed("key") {
				uniqueKey(e, keys["clients"], c.Key, "client")
			}
			if !e.bad() {
				out.Clients = append(out.Clients, c)
				clientEntries = append(clientEntries, e)
			}
		case "services":
			s := parseService(e)
			if s.Key != "" && !e.failed("key") {
				uniqueKey(e, keys["services"], s.Key, "service")
			}
			if !e.bad() {
				out.Services = append(out.Services, s)
			}
		}
	}
	// References between tables, once every table is known. A reference to an entry
	// that itself has a problem is not reported again: that entry's problem says it.
	entityLines := keys["entities"]
	for i := range out.Clients {
		c, e := &out.Clients[i], clientEntries[i]
		switch {
		case c.Entity == "" && len(entityLines) == 1:
			c.Entity = out.Entities[0].Key
		case c.Entity == "" && len(entityLines) == 0:
			e.fail("entity", "no [[entities]] table: add the company that bills this client")
		case c.Entity == "":
			e.fail("entity", "is missing; with several entities, say which one bills this client")
		default:
			if _, ok := entityLines[c.Entity]; !ok {
				e.fail("entity", "%q is not the key of an entity in this file", c.Entity)
			}
		}
	}
	claimed := map[string]int{} // client+service → bundle line
	seen := names{}
	for _, e := range arrays {
		if e.kind != "bundles" {
			continue
		}
		b := InvoiceBundle{Line: e.line, Name: e.name("bundle"), Client: e.str("client"), Services: e.strList("services")}
		e.unknownKeys(bundleKeys)
		if b.Name != "" {
			seen.check(e, b.Name, "bundle")
		}
		if b.Client != "" {
			if _, ok := keys["clients"][b.Client]; !ok {
				e.fail("client", "%q is not the key of a client in this file", b.Client)
			}
		}
		if len(b.Services) == 0 && !e.failed("services") {
			e.fail("services", `is missing; list the services billed together, like ["hosting", "domains"]`)
		}
		for _, s := range b.Services {
			if _, ok := keys["services"][s]; !ok {
				e.fail("services", "%q is not the key of a service in this file", s)
				continue
			}
			for _, c := range bundleClients(b.Client, out.Clients) {
				k := c + "\x00" + s
				if first, dup := claimed[k]; dup && first != e.line {
					e.fail("services", "%q is already in the bundle on line %d for the same client", s, first)
					break
				}
				claimed[k] = e.line
			}
		}
		if !e.bad() {
			out.Bundles = append(out.Bundles, b)
		}
	}
	clients := out.Clients[:0]
	for i, c := range out.Clients {
		if !clientEntries[i].bad() {
			clients = append(clients, c)
		}
	}
	out.Clients = clients
	for _, e := range arrays {
		problems = append(problems, e.problems...)
	}
	return out, sortProblems(problems)
}

func bundleClients(client string, all []InvoiceClient) []string {
	if client != "" {
		return []string{client}
	}
	out := make([]string, 0, len(all)+1)
	out = append(out, "") // the bundle's own "every client" slot
	for _, c := range all {
		out = append(out, c.Key)
	}
	return out
}

func uniqueKey(e *entry, seen map[string]int, key, what string) {
	if first, dup := seen[key]; dup {
		e.fail("key", "%q is already the key of the %s on line %d; keys must be unique", key, what, first)
		return
	}
	seen[key] = e.lineOf("key")
}

func parseEntity(e *entry) InvoiceEntity {
	ent := InvoiceEntity{
		Line:          e.line,
		Key:           e.key(),
		Name:          e.text("name", 200, false, true),
		Address:       e.text("address", 500, true, false),
		TaxID:         e.text("tax_id", 50, false, false),
		Email:         e.email("email"),
		Bank:          e.text("bank", 500, true, false),
		Currency:      e.str("currency"),
		Prefix:        e.str("prefix"),
		DueDays:       e.intIn("due_days", 0, 0, 366),
		TaxRate:       e.decimal("tax_rate", 2, 0, 100*100),
		TaxLabel:      e.text("tax_label", 40, false, false),
		Note:          e.text("note", 500, true, false),
		BankAccount:   e.account("bank_account", DefaultBankAccount),
		IncomeAccount: e.account("income_account", DefaultIncomeAccount),
		TaxAccount:    e.account("tax_account", DefaultTaxAccount),
	}
	e.unknownKeys(entityKeys)
	switch {
	case ent.Currency == "" && !e.failed("currency"):
		e.fail("currency", `is missing; write the ISO code, like "EUR" or "USD"`)
	case ent.Currency != "" && !currencyRE.MatchString(ent.Currency):
		e.fail("currency", "%q is not a currency code; write three capital letters like \"EUR\"", ent.Currency)
	}
	switch {
	case ent.Prefix == "" && !e.failed("prefix"):
		e.fail("prefix", `is missing; invoice numbers are PREFIX-YYYY-NNNN, so write a short prefix like "ACME"`)
	case ent.Prefix != "" && !prefixRE.MatchString(ent.Prefix):
		e.fail("prefix", "%q must be 1 to 12 capital letters or digits", ent.Prefix)
	}
	if ent.TaxLabel == "" {
		ent.TaxLabel = "VAT"
	}
	return ent
}

func parseClient(e *entry) InvoiceClient {
	c := InvoiceClient{
		Line:    e.line,
		Key:     e.key(),
		Name:    e.text("name", 200, false, true),
		Address: e.text("address", 500, true, false),
		Email:   e.email("email"),
		TaxID:   e.text("tax_id", 50, false, false),
		Entity:  e.str("entity"),
		DueDays: e.intIn("due_days", 0, 0, 366),
	}
	e.unknownKeys(clientKeys)
	return c
}

func parseService(e *entry) InvoiceService {
	s := InvoiceService{
		Line:    e.line,
		Key:     e.key(),
		Name:    e.text("name", 200, false, true),
		Unit:    e.text("unit", 20, false, false),
		Account: e.account("account", ""),
	}
	_, hasRate := e.m["rate"]
	s.Rate = e.decimal("rate", 2, 0, MaxRate)
	if !hasRate {
		e.fail("rate", `is missing; write the price of one unit, like "95.00"`)
	}
	e.unknownKeys(serviceKeys)
	if s.Unit == "" {
		s.Unit = "unit"
	}
	return s
}

// key reads the entry's key.
func (e *entry) key() string {
	k := e.str("key")
	switch {
	case k == "" && !e.failed("key"):
		e.fail("key", `is missing; give a short key like "acme" to refer to it`)
	case k != "" && !invoiceKeyRE.MatchString(k):
		e.fail("key", "%q must be lower-case letters, digits, '-' or '_' (up to 32)", k)
		return ""
	}
	return k
}

// text reads printable text of at most max characters; multi allows line breaks.
func (e *entry) text(key string, max int, multi, required bool) string {
	s := e.str(key)
	switch {
	case s == "" && required && !e.failed(key):
		e.fail(key, "is missing")
	case utf8.RuneCountInString(s) > max:
		e.fail(key, "is longer than %d characters", max)
	case strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) && !(multi && r == '\n') }):
		if multi {
			e.fail(key, "must not contain control characters other than line breaks")
		} else {
			e.fail(key, "must be one line without control characters")
		}
	default:
		return s
	}
	return ""
}

func (e *entry) account(key, def string) string {
	s := e.str(key)
	if s == "" {
		return def
	}
	if !accountRE.MatchString(s) {
		e.fail(key, "%q is not a Beancount account like \"Income:Consulting\" (Assets, Liabilities, Equity, Income or Expenses, then capitalised parts)", s)
		return def
	}
	return s
}

// intIn reads a whole number in [lo, hi].
func (e *entry) intIn(key string, def int, lo, hi int) int {
	v, ok := e.get(key)
	if !ok {
		return def
	}
	n, ok := v.(int64)
	if !ok {
		e.fail(key, "must be a whole number, not %s", typeName(v))
		return def
	}
	if n < int64(lo) || n > int64(hi) {
		e.fail(key, "%d must be between %d and %d", n, lo, hi)
		return def
	}
	return int(n)
}

// decimal reads an amount written as a string ("95.50") or a number, scaled by 10^places.
func (e *entry) decimal(key string, places int, lo, hi int64) int64 {
	v, ok := e.get(key)
	if !ok {
		return 0
	}
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case int64:
		s = strconv.FormatInt(v, 10)
	case float64:
		s = strconv.FormatFloat(v, 'f', -1, 64)
	default:
		e.fail(key, `must be a number like "95.50", not %s`, typeName(v))
		return 0
	}
	n, err := ParseDecimal(s, places)
	if err != nil {
		e.fail(key, "%v", err)
		return 0
	}
	if n < lo || n > hi {
		e.fail(key, "%s is out of range", s)
		return 0
	}
	return n
}

// ParseDecimal reads a non-negative decimal number with at most places digits after
// the point ("12", "12.5", "1200.00") as an integer scaled by 10^places, without
// floating point. Thousands separators and signs are refused.
func ParseDecimal(s string, places int) (int64, error) {
	s = strings.TrimSpace(s)
	whole, frac, hasPoint := strings.Cut(s, ".")
	if whole == "" || !allDigits(whole) || (hasPoint && (frac == "" || !allDigits(frac))) {
		return 0, fmt.Errorf("%q is not a number; write it like 12 or 12.50", s)
	}
	frac = strings.TrimRight(frac, "0")
	if len(frac) > places {
		return 0, fmt.Errorf("%q has more than %d digits after the point", s, places)
	}
	if len(whole) > 12 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	frac += strings.Repeat("0", places-len(frac))
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// CheckRelativePath validates a path the user gives relative to their folder: no
// absolute paths, no "..", no hidden or empty components, and one of the extensions
// when any are given.
func CheckRelativePath(p string, exts ...string) error {
	if strings.HasPrefix(p, "/") || strings.Contains(p, "\\") {
		return fmt.Errorf("%q must be a path inside your folder, like \"accounting/ledger.beancount\"", p)
	}
	if len(p) > 255 || strings.ContainsFunc(p, unicode.IsControl) {
		return fmt.Errorf("%q is not a usable file name", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." || strings.HasPrefix(part, ".") {
			return fmt.Errorf("%q must not contain empty, hidden, '.' or '..' parts", p)
		}
	}
	if len(exts) == 0 {
		return nil
	}
	for _, x := range exts {
		if strings.HasSuffix(p, x) {
			return nil
		}
	}
	return fmt.Errorf("%q must end in %s", p, strings.Join(exts, " or "))
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
