package invoice

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"

	"github.com/istota/istota/sidecar/internal/store"
)

// nextNumber gives out the next number of prefix in year, inside tx: the counter only
// ever grows, so a number is never given out twice.
func nextNumber(ctx context.Context, tx *sql.Tx, uid, prefix string, year int) (string, error) {
	var n int
	err := tx.QueryRowContext(ctx, `INSERT INTO invoice_numbers (user_id, prefix, year, last) VALUES (?, ?, ?, 1)
		ON CONFLICT (user_id, prefix, year) DO UPDATE SET last = invoice_numbers.last + 1 RETURNING last`, uid, prefix, year).Scan(&n)
	if err != nil {
		return "", fmt.Errorf("invoice: next number of %s-%d: %w", prefix, year, err)
	}
	return fmt.Sprintf("%s-%04d-%04d", prefix, year, n), nil
}

// pdfPath is where the PDF of number goes, relative to the user's folder.
func (s *Service) pdfPath(number string) string {
	return path.Join(s.opts.BotDir, ExportDir, number+".pdf")
}

// issue numbers d, stores it with the entries it bills and returns the invoice.
func (s *Service) issue(ctx context.Context, tx *sql.Tx, uid string, d draft) (Invoice, error) {
	year, _ := strconv.Atoi(d.doc.Issued[:4])
	num, err := nextNumber(ctx, tx, uid, d.prefix, year)
	if err != nil {
		return Invoice{}, err
	}
	d.doc.Number = num
	doc, err := json.Marshal(d.doc)
	if err != nil {
		return Invoice{}, fmt.Errorf("invoice: encode %s: %w", num, err)
	}
	inv := Invoice{Document: d.doc, PDF: s.pdfPath(num)}
	var id int64
	err = tx.QueryRowContext(ctx, `INSERT INTO invoices (user_id, number, entity, client, period, issued_on, due_on,
		currency, total_cents, document, pdf_path, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		uid, num, d.doc.Entity, d.doc.Client, d.doc.Period, d.doc.Issued, d.doc.Due, d.doc.Currency, d.doc.Total,
		string(doc), inv.PDF, store.FormatTime(s.opts.Clock())).Scan(&id)
	if err != nil {
		return Invoice{}, fmt.Errorf("invoice: store %s: %w", num, err)
	}
	for _, k := range d.keys {
		if _, err := tx.ExecContext(ctx, `INSERT INTO invoice_entries (user_id, entry_key, invoice_id) VALUES (?, ?, ?)`, uid, k, id); err != nil {
			return Invoice{}, fmt.Errorf("invoice: record the entries of %s: %w", num, err)
		}
	}
	return inv, nil
}

// billedKeys maps the keys of uid's billed work-log entries to their invoice numbers.
func (s *Service) billedKeys(ctx context.Context, uid string) (map[string]string, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT e.entry_key, i.number FROM invoice_entries e
		JOIN invoices i ON i.id = e.invoice_id WHERE e.user_id = ?`, uid)
	if err != nil {
		return nil, fmt.Errorf("invoice: billed entries of %s: %w", uid, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, n string
		if err := rows.Scan(&k, &n); err != nil {
			return nil, fmt.Errorf("invoice: billed entries of %s: %w", uid, err)
		}
		out[k] = n
	}
	return out, rows.Err()
}

const invoiceColumns = `document, pdf_path, paid_on`

func scanInvoice(sc interface{ Scan(...any) error }) (Invoice, error) {
	var doc string
	var inv Invoice
	if err := sc.Scan(&doc, &inv.PDF, &inv.PaidOn); err != nil {
		return Invoice{}, err
	}
	if err := json.Unmarshal([]byte(doc), &inv.Document); err != nil {
		return Invoice{}, fmt.Errorf("invoice: decode stored invoice: %w", err)
	}
	return inv, nil
}

// Get returns uid's invoice number.
func (s *Service) Get(ctx context.Context, uid, number string) (Invoice, error) {
	row := s.db.Read.QueryRowContext(ctx, `SELECT `+invoiceColumns+` FROM invoices WHERE user_id = ? AND number = ?`, uid, number)
	inv, err := scanInvoice(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Invoice{}, ErrNotFound
	}
	if err != nil {
		return Invoice{}, fmt.Errorf("invoice: get %s: %w", number, err)
	}
	return inv, nil
}

// all returns uid's invoices, oldest first.
func (s *Service) all(ctx context.Context, uid string) ([]Invoice, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT `+invoiceColumns+` FROM invoices WHERE user_id = ? ORDER BY issued_on, number`, uid)
	if err != nil {
		return nil, fmt.Errorf("invoice: list of %s: %w", uid, err)
	}
	defer rows.Close()
	var out []Invoice
	for rows.Next() {
		inv, err := scanInvoice(rows)
		if err != nil {
			return nil, fmt.Errorf("invoice: list of %s: %w", uid, err)
		}
		out = append(out, inv)
	}
	return out, rows.Err()
}
