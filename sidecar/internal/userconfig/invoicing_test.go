package userconfig

import (
	"testing"
)

func TestParseInvoicingGood(t *testing.T) {
	src := md(`ledger = "books/main.beancount"
generate_day = 1
remind_days = 2

[[entities]]
key = "acme"
name = "ACME"
currency = "EUR"
prefix = "AC"
tax_rate = "7.5"

[[clients]]
key = "globex"
name = "Globex"

[[services]]
key = "dev"
name = "Development"
rate = 95.5

[[bundles]]
name = "Retainer"
client = "globex"
services = ["dev"]
`)
	got, problems := ParseInvoicing(src)
	checkProblems(t, problems, nil)
	if got.Ledger != "books/main.beancount" || got.DueDays != DefaultDueDays || got.GenerateDay != 1 || got.RemindDays != 2 {
		t.Errorf("settings = %+v", got)
	}
	if len(got.Entities) != 1 || got.Entities[0].TaxRate != 750 || got.Entities[0].BankAccount != DefaultBankAccount || got.Entities[0].TaxLabel != "VAT" {
		t.Errorf("entities = %+v", got.Entities)
	}
	if len(got.Clients) != 1 || got.Clients[0].Entity != "acme" {
		t.Errorf("clients = %+v (the only entity bills every client)", got.Clients)
	}
	if len(got.Services) != 1 || got.Services[0].Rate != 9550 || got.Services[0].Unit != "unit" {
		t.Errorf("services = %+v", got.Services)
	}
	if len(got.Bundles) != 1 || got.Bundles[0].Client != "globex" {
		t.Errorf("bundles = %+v", got.Bundles)
	}
}

func TestParseInvoicingProblems(t *testing.T) {
	// md puts the first TOML line on line 7.
	src := md(`ledger = "../outside.beancount"
colour = "blue"

[[entities]]
key = "acme"
name = "ACME"
currency = "euro"
prefix = "AC"
bank_account = "bank"

[[entities]]
key = "other"
name = "Other"
currency = "EUR"
prefix = "AC"

[[clients]]
key = "Globex Corp"
name = "Globex"

[[clients]]
key = "initech"
name = "Initech"

[[services]]
key = "dev"
name = "Development"
rate = "95.505"

[[bundles]]
name = "B"
services = ["ops"]
`)
	_, problems := ParseInvoicing(src)
	checkProblems(t, problems, []wantProblem{
		{7, "ledger", "must not contain"},
		{8, "colour", "unknown setting"},
		{13, "currency", "not a currency code"},
		{15, "bank_account", "not a Beancount account"},
		{21, "prefix", "already the prefix"},
		{24, "key", "must be lower-case"},
		{27, "entity", "say which one"},
		{34, "rate", "more than 2 digits"},
		{38, "services", `"ops" is not the key`},
	})
}

func TestParseWorkLog(t *testing.T) {
	src := []byte("# Log\n<!-- - 2025-01-01 | a | b | 1 | hidden -->\n```\n- 2025-01-01 | a | b | 1 | code\n```\n" +
		"- 2025-03-04 | globex | dev | 2.5 | Review\n" +
		"  - 2025-03-04 | globex | dev | 1 | indented: not an entry\n" +
		"- a list item without pipes\n" +
		"* 2025-03-05 | globex | dev | 1 |  | AC-2025-0001\n" +
		"- 2025-02-30 | globex | dev | 1 | bad date\n" +
		"- 2025-03-06 | Globex | dev | -1 | two problems\n" +
		"- 2025-03-06 | globex | dev | 1 | note | not-a-number\n" +
		"- 2025-03-06 | globex | dev\n")
	got, problems := ParseWorkLog(src)
	checkProblems(t, problems, []wantProblem{
		{10, "date", "not a date"},
		{11, "client", "not a key"},
		{11, "quantity", "not a number"},
		{12, "invoice", "not an invoice number"},
		{13, "", "five fields"},
	})
	if len(got) != 2 {
		t.Fatalf("entries = %+v", got)
	}
	if e := got[0]; e.Line != 6 || e.Date != "2025-03-04" || e.Client != "globex" || e.Quantity != 2500 || e.Note != "Review" || e.Invoice != "" {
		t.Errorf("first = %+v", e)
	}
	if e := got[1]; e.Line != 9 || e.Note != "" || e.Invoice != "AC-2025-0001" {
		t.Errorf("second = %+v", e)
	}
	if end := got[0].End; string(src[end-6:end]) != "Review" {
		t.Errorf("End points at %q", src[end-6:end+1])
	}
}

func TestParseDecimal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"12", 1200, true}, {"12.5", 1250, true}, {"0.10", 10, true}, {"12.500", 1250, true},
		{"12.505", 0, false}, {"-1", 0, false}, {"1,000", 0, false}, {"", 0, false}, {".5", 0, false}, {"1e3", 0, false},
	} {
		got, err := ParseDecimal(tc.in, 2)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseDecimal(%q) = %d, %v", tc.in, got, err)
		}
	}
}
