package userconfig

import (
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// WorkEntry is one billable line of the work log _INVOICES.md, a list item of fields
// separated by '|':
//
//   - 2025-03-04 | globex | consulting | 2.5 | Architecture review
//
// Once the entry is billed the invoice number is added as a sixth field:
//
//   - 2025-03-04 | globex | consulting | 2.5 | Architecture review | ACME-2025-0001
type WorkEntry struct {
	Line     int    // 1-based line number
	End      int    // byte offset where the line's text ends (blanks excluded): where a marker goes
	Date     string // YYYY-MM-DD
	Client   string // a client's key in INVOICING.md
	Service  string // a service's key
	Quantity int64  // in thousandths of the service's unit (2.5 hours = 2500)
	Note     string
	Invoice  string // the invoice that billed the entry, "" while unbilled
}

// QuantityPlaces is the number of decimals a work-log quantity may have.
const QuantityPlaces = 3

// Work-log field names, as problems name them.
var workFields = []string{"date", "client", "service", "quantity", "note", "invoice"}

var invoiceNumberRE = regexp.MustCompile(`^[A-Z0-9]{1,12}-[0-9]{4}-[0-9]{4,6}$`)

// ValidInvoiceNumber reports whether s has the form of an invoice number,
// PREFIX-YYYY-NNNN.
func ValidInvoiceNumber(s string) bool { return invoiceNumberRE.MatchString(s) }

// ParseWorkLog lists the entries of _INVOICES.md in file order. Only top-level list
// items outside HTML comments and code blocks that contain '|' are entries; prose,
// headings and other lists are left alone. A broken entry is reported as a Problem
// naming the line and field, and left out.
func ParseWorkLog(src []byte) ([]WorkEntry, []Problem) {
	var out []WorkEntry
	var problems []Problem
	for i, l := range scanMarkdown(src) {
		if l.inFence || l.isFence {
			continue
		}
		raw, vis := l.text, l.visible
		if len(vis) < 2 || len(raw) < 2 || raw[:2] != vis[:2] || !strings.Contains(vis, "|") {
			continue
		}
		if (vis[0] != '-' && vis[0] != '*' && vis[0] != '+') || vis[1] != ' ' {
			continue
		}
		line := i + 1
		fail := func(field int, format string, args ...any) {
			p := Problem{Line: line, Message: fmt.Sprintf(format, args...)}
			if field >= 0 {
				p.Field = workFields[field]
			}
			problems = append(problems, p)
		}
		fields := strings.Split(vis[2:], "|")
		for j := range fields {
			fields[j] = strings.TrimSpace(fields[j])
		}
		if len(fields) < 5 || len(fields) > 6 {
			fail(-1, "an entry has five fields separated by '|': date | client | service | quantity | note (the invoice number is added when it is billed); this line has %d", len(fields))
			continue
		}
		e := WorkEntry{Line: line, End: l.start + len(strings.TrimRight(raw, " \t")),
			Date: fields[0], Client: fields[1], Service: fields[2], Note: fields[4]}
		bad := false
		if _, err := time.Parse(time.DateOnly, e.Date); err != nil {
			fail(0, "%q is not a date; write it like 2025-03-04", e.Date)
			bad = true
		}
		for j, k := range []string{e.Client, e.Service} {
			if !ValidInvoiceKey(k) {
				fail(1+j, "%q is not a key from INVOICING.md (lower-case letters, digits, '-' or '_')", k)
				bad = true
			}
		}
		q, err := ParseDecimal(fields[3], QuantityPlaces)
		switch {
		case err != nil:
			fail(3, "%v", err)
			bad = true
		case q == 0:
			fail(3, "must be more than 0")
			bad = true
		case q > MaxQuantity:
			fail(3, "%s is too large", fields[3])
			bad = true
		}
		e.Quantity = q
		if utf8.RuneCountInString(e.Note) > 300 || strings.ContainsFunc(e.Note, unicode.IsControl) {
			fail(4, "must be one line of at most 300 characters")
			bad = true
		}
		if len(fields) == 6 {
			e.Invoice = fields[5]
			if !ValidInvoiceNumber(e.Invoice) {
				fail(5, "%q is not an invoice number like ACME-2025-0001; the sixth field is written by invoice generate", e.Invoice)
				bad = true
			}
		}
		if !bad {
			out = append(out, e)
		}
	}
	return out, problems
}
