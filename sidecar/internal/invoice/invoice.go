// Package invoice bills a user's clients from two files in the user's config folder:
// INVOICING.md says who bills (entities), whom (clients), for what (services) and which
// services go on invoices of their own (bundles); the work log _INVOICES.md lists the
// billable work. The package turns unbilled work into numbered invoices with PDFs in
// the user's exports folder, records payments as cash-basis Beancount postings in the
// user's ledger, and tells the user when invoices were generated or fall overdue.
//
// Everything is computed here, deterministically: the agent only calls the invoice
// skill and reads its short summary. Numbers are given out from SQLite, per user,
// entity prefix and year, and are never reused; every issued invoice is stored as it
// was issued, and which work-log entries it billed, so generating twice never bills
// anything twice.
package invoice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

// File names in the user's {bot}/config folder.
const (
	ConfigFile = "INVOICING.md"
	WorkLog    = "_INVOICES.md"
)

// ExportDir is where the PDFs go, relative to the bot folder.
const ExportDir = "exports/invoices"

var (
	// ErrNotFound: no invoice with that number for this user.
	ErrNotFound = errors.New("invoice: not found")
	// ErrNoConfig: the user has no INVOICING.md yet.
	ErrNoConfig = errors.New("invoice: no " + ConfigFile)
	// ErrInvalid marks a request that cannot be carried out as asked (an unknown
	// client, a paid invoice paid again…); its message is for the user.
	ErrInvalid = errors.New("invoice: invalid request")
)

// FileError is a config file or work log with problems; nothing was changed.
type FileError struct {
	File     string // ConfigFile or WorkLog
	Problems []userconfig.Problem
}

func (e *FileError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s has %d problem(s); fix them and try again:", e.File, len(e.Problems))
	for i, p := range e.Problems {
		if i == 20 {
			fmt.Fprintf(&b, "\n- … and %d more", len(e.Problems)-i)
			break
		}
		b.WriteString("\n- " + p.String())
	}
	return b.String()
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Party is the issuer or recipient of an invoice as printed on it.
type Party struct {
	Name    string `json:"name"`
	Address string `json:"address,omitempty"`
	TaxID   string `json:"tax_id,omitempty"`
	Email   string `json:"email,omitempty"`
}

// Line is one line of an invoice.
type Line struct {
	Date        string `json:"date,omitempty"` // YYYY-MM-DD of the work, "" for one-off lines
	Description string `json:"description"`
	Quantity    int64  `json:"quantity"` // thousandths of Unit
	Unit        string `json:"unit"`
	Rate        int64  `json:"rate"`   // cents per unit
	Amount      int64  `json:"amount"` // cents
	Account     string `json:"account"`
}

// Document is an invoice as issued: everything its PDF and its ledger posting are made
// from, so that neither changes when INVOICING.md does later.
type Document struct {
	Number   string `json:"number"`
	Title    string `json:"title,omitempty"`  // a bundle's name, or the one-off's title
	Period   string `json:"period,omitempty"` // YYYY-MM
	Issued   string `json:"issued"`           // YYYY-MM-DD
	Due      string `json:"due"`
	Currency string `json:"currency"`
	Entity   string `json:"entity"` // keys in INVOICING.md
	Client   string `json:"client"`
	From     Party  `json:"from"`
	To       Party  `json:"to"`
	Bank     string `json:"bank,omitempty"`
	Note     string `json:"note,omitempty"`
	Lines    []Line `json:"lines"`
	Net      int64  `json:"net"`
	TaxRate  int64  `json:"tax_rate"` // hundredths of a percent
	TaxLabel string `json:"tax_label,omitempty"`
	Tax      int64  `json:"tax"`
	Total    int64  `json:"total"`
	// Accounts of the cash-basis posting made at payment (income per line).
	BankAccount string `json:"bank_account"`
	TaxAccount  string `json:"tax_account,omitempty"`
}

// Invoice is an issued invoice and its state.
type Invoice struct {
	Document
	PDF    string // relative to /Users/{uid}/
	PaidOn string // YYYY-MM-DD, "" while open
}

// Status of an invoice on a given day.
type Status string

const (
	StatusOpen    Status = "open"
	StatusOverdue Status = "overdue"
	StatusPaid    Status = "paid"
)

// StatusOn is the invoice's status on day (YYYY-MM-DD): overdue once the due date has
// passed without payment.
func (inv Invoice) StatusOn(day string) Status {
	switch {
	case inv.PaidOn != "":
		return StatusPaid
	case day > inv.Due:
		return StatusOverdue
	}
	return StatusOpen
}

// Options configure a Service.
type Options struct {
	// UserRoot is the local directory of the user's /Users/{uid}/ folder (the mirror,
	// or the mount). Required.
	UserRoot func(uid string) (string, error)
	// BotDir is the bot's folder in the user's folder, holding config/ and exports/.
	BotDir string
	// Timezone returns the user's zone, which decides what "today" is; UTC by default.
	Timezone func(ctx context.Context, uid string) (*time.Location, error)
	Clock    func() time.Time
	Logger   *slog.Logger
}

// Service does the invoicing for every user. It is safe for concurrent use; work on
// one user's files is serialised.
type Service struct {
	db   *store.DB
	opts Options
	log  *slog.Logger

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// New returns a Service over db.
func New(db *store.DB, opts Options) (*Service, error) {
	if opts.UserRoot == nil {
		return nil, errors.New("invoice: no UserRoot")
	}
	if opts.BotDir == "" || strings.ContainsAny(opts.BotDir, `/\`) || strings.HasPrefix(opts.BotDir, ".") {
		return nil, fmt.Errorf("invoice: bot folder %q is not a folder name", opts.BotDir)
	}
	if opts.Timezone == nil {
		opts.Timezone = func(context.Context, string) (*time.Location, error) { return time.UTC, nil }
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{db: db, opts: opts, log: opts.Logger, locks: map[string]*sync.Mutex{}}, nil
}

// lock serialises work on uid's files; call the returned function to release.
func (s *Service) lock(uid string) func() {
	s.mu.Lock()
	m, ok := s.locks[uid]
	if !ok {
		m = &sync.Mutex{}
		s.locks[uid] = m
	}
	s.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// today is the current date in the user's zone.
func (s *Service) today(ctx context.Context, uid string) (time.Time, error) {
	loc, err := s.opts.Timezone(ctx, uid)
	if err != nil {
		return time.Time{}, fmt.Errorf("invoice: time zone of %s: %w", uid, err)
	}
	now := s.opts.Clock().In(loc)
	return time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC), nil
}

// ParseDay reads a YYYY-MM-DD date.
func ParseDay(s string) (time.Time, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a date like 2025-03-31", s)
	}
	return t, nil
}
