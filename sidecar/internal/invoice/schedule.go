package invoice

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

// User is what the scheduled runs need to know about a user.
type User struct {
	ID       string
	Timezone string // IANA zone; UTC when empty or unknown
}

// Notifier queues a notice to the user's private conversation with the bot, inside tx
// so that the notice and the record that it was sent commit together. sent is false
// when the user has no private conversation yet.
type Notifier interface {
	Notice(ctx context.Context, tx *sql.Tx, uid, key, text string) (sent bool, err error)
}

// Folders gives the scheduled runs the users and keeps their files in step with
// Nextcloud around a run that changes them.
type Folders interface {
	Users(ctx context.Context) ([]User, error)
	// Refresh brings the user's files up to date from Nextcloud before a run.
	Refresh(ctx context.Context, uid string) error
	// Publish sends what a run wrote (PDFs, the work log) to Nextcloud.
	Publish(ctx context.Context, uid string) error
}

// RunnerOptions tune a Runner.
type RunnerOptions struct {
	// Every is how often the runner looks; default 10 minutes.
	Every time.Duration
	// Hour is the local hour from which notices and generation happen (default 9), so
	// nobody is woken at midnight.
	Hour     int
	Logger   *slog.Logger
	OnNotice func() // wake-up hint for the outbox
}

// Runner does the scheduled invoicing: on INVOICING.md's generate_day it invoices the
// previous month's work and tells the user; remind_days before that it reminds the
// user to complete the work log; and it sends one notice per invoice that falls
// overdue. Each of these is recorded in the database, so none happens twice.
type Runner struct {
	svc    *Service
	files  Folders
	notify Notifier
	opts   RunnerOptions
}

// NewRunner returns a Runner over svc.
func NewRunner(svc *Service, files Folders, notify Notifier, opts RunnerOptions) *Runner {
	if opts.Every <= 0 {
		opts.Every = 10 * time.Minute
	}
	if opts.Hour <= 0 || opts.Hour > 23 {
		opts.Hour = 9
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.OnNotice == nil {
		opts.OnNotice = func() {}
	}
	return &Runner{svc: svc, files: files, notify: notify, opts: opts}
}

// Run ticks until ctx ends.
func (r *Runner) Run(ctx context.Context) {
	t := time.NewTicker(r.opts.Every)
	defer t.Stop()
	for {
		if err := r.Tick(ctx); err != nil && ctx.Err() == nil {
			r.opts.Logger.Warn("scheduled invoicing failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Tick does what is due for every user. A problem with one user never stops the others.
func (r *Runner) Tick(ctx context.Context) error {
	users, err := r.files.Users(ctx)
	if err != nil {
		return fmt.Errorf("invoice: users: %w", err)
	}
	for _, u := range users {
		if err := r.tickUser(ctx, u); err != nil && ctx.Err() == nil {
			r.opts.Logger.Warn("scheduled invoicing failed", "user_id", u.ID, "err", err)
		}
	}
	return nil
}

func (r *Runner) tickUser(ctx context.Context, u User) error {
	loc, err := time.LoadLocation(u.Timezone)
	if err != nil || u.Timezone == "" || strings.EqualFold(u.Timezone, "local") {
		loc = time.UTC
	}
	now := r.svc.opts.Clock().In(loc)
	if now.Hour() < r.opts.Hour {
		return nil
	}
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	if err := r.overdue(ctx, u.ID, today); err != nil {
		return err
	}
	cfg, ok := r.localConfig(u.ID)
	if !ok || cfg.GenerateDay == 0 {
		return nil
	}
	gen := time.Date(today.Year(), today.Month(), cfg.GenerateDay, 0, 0, 0, 0, time.UTC)
	if !today.Before(gen) {
		if err := r.generate(ctx, u.ID, gen.AddDate(0, -1, 0).Format("2006-01")); err != nil {
			return err
		}
		gen = gen.AddDate(0, 1, 0) // the next run, for the reminder
	}
	if cfg.RemindDays > 0 && !today.Before(gen.AddDate(0, 0, -cfg.RemindDays)) {
		return r.remind(ctx, u.ID, gen)
	}
	return nil
}

// localConfig reads INVOICING.md from the local copy the job runner keeps fresh; the
// runs that change files refresh it from Nextcloud first. A user without one, or with
// a broken one, has nothing scheduled (the skill tells them what is wrong).
func (r *Runner) localConfig(uid string) (userconfig.InvoicingFile, bool) {
	f, err := r.svc.openFolder(uid)
	if err != nil {
		return userconfig.InvoicingFile{}, false
	}
	defer f.Close()
	cfg, err := f.config()
	return cfg, err == nil
}

// done reports whether the run kind of period already happened for uid.
func (r *Runner) done(ctx context.Context, uid, kind, period string) (bool, error) {
	var n int
	err := r.svc.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM invoice_runs WHERE user_id = ? AND kind = ? AND period = ?`, uid, kind, period).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("invoice: runs of %s: %w", uid, err)
	}
	return n > 0, nil
}

// record marks the run and queues its notice (if any) in one transaction.
func (r *Runner) record(ctx context.Context, uid, kind, period, text string) error {
	tx, err := r.svc.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("invoice: begin: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO invoice_runs (user_id, kind, period, done_at) VALUES (?, ?, ?, ?)
		ON CONFLICT DO NOTHING`, uid, kind, period, store.FormatTime(r.svc.opts.Clock())); err != nil {
		return fmt.Errorf("invoice: record the %s run of %s: %w", kind, period, err)
	}
	if text != "" {
		if _, err := r.notify.Notice(ctx, tx, uid, "invoice-"+kind+":"+uid+":"+period, text); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("invoice: commit: %w", err)
	}
	if text != "" {
		r.opts.OnNotice()
	}
	return nil
}

// generate invoices the unbilled work of the months up to period, once per period.
func (r *Runner) generate(ctx context.Context, uid, period string) error {
	if done, err := r.done(ctx, uid, "generate", period); err != nil || done {
		return err
	}
	if err := r.files.Refresh(ctx, uid); err != nil {
		return fmt.Errorf("invoice: refresh the files of %s: %w", uid, err)
	}
	res, err := r.svc.Generate(ctx, uid, GenerateRequest{})
	var fe *FileError
	switch {
	case errors.As(err, &fe) || errors.Is(err, ErrNoConfig):
		// Told once per period; the run is not marked, so fixing the file lets it go on.
		return r.problem(ctx, uid, period, err)
	case err != nil:
		return err
	}
	if len(res.Invoices) > 0 {
		if err := r.files.Publish(ctx, uid); err != nil {
			// The files stay in the local copy; the workspace's retry loop sends them.
			r.opts.Logger.Warn("invoices written but not yet sent to Nextcloud", "user_id", uid, "err", err)
		}
	}
	text := ""
	if len(res.Invoices) > 0 {
		text = "Monthly invoicing for " + period + ":\n" + GenerateSummary(res, false) +
			"Record payments with \"invoice paid NUMBER\" when they arrive."
	}
	return r.record(ctx, uid, "generate", period, text)
}

// problem tells the user, once per period, why the monthly generation cannot run.
func (r *Runner) problem(ctx context.Context, uid, period string, cause error) error {
	if done, err := r.done(ctx, uid, "problem", period); err != nil || done {
		return err
	}
	return r.record(ctx, uid, "problem", period, "The monthly invoicing for "+period+" could not run. "+cause.Error())
}

// remind tells the user, once before the generation on gen, how much work of that
// month is logged so far.
func (r *Runner) remind(ctx context.Context, uid string, gen time.Time) error {
	period := gen.AddDate(0, -1, 0).Format("2006-01")
	if done, err := r.done(ctx, uid, "remind", period); err != nil || done {
		return err
	}
	res, err := r.svc.Generate(ctx, uid, GenerateRequest{Period: period, DryRun: true})
	if err != nil {
		return r.record(ctx, uid, "remind", period, "") // the generation run reports the problem
	}
	entries := 0
	for _, inv := range res.Invoices {
		entries += len(inv.Lines)
	}
	text := fmt.Sprintf("Reminder: the work of %s is invoiced on %s. %d billable entr%s logged for it so far; add what is missing to %s before then.",
		period, gen.Format(time.DateOnly), entries, plural(entries, "y is", "ies are"), WorkLog)
	return r.record(ctx, uid, "remind", period, text)
}

// overdue sends one notice for each of uid's invoices past its due date and unpaid.
func (r *Runner) overdue(ctx context.Context, uid string, today time.Time) error {
	day := today.Format(time.DateOnly)
	rows, err := r.svc.db.Read.QueryContext(ctx, `SELECT `+invoiceColumns+` FROM invoices
		WHERE user_id = ? AND paid_on = '' AND overdue_notified_at = '' AND due_on < ? ORDER BY due_on, number`, uid, day)
	if err != nil {
		return fmt.Errorf("invoice: overdue invoices of %s: %w", uid, err)
	}
	var due []Invoice
	for rows.Next() {
		inv, err := scanInvoice(rows)
		if err != nil {
			rows.Close()
			return fmt.Errorf("invoice: overdue invoices of %s: %w", uid, err)
		}
		due = append(due, inv)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("invoice: overdue invoices of %s: %w", uid, err)
	}
	for _, inv := range due {
		if err := r.overdueNotice(ctx, uid, inv); err != nil {
			return err
		}
	}
	return nil
}

func (r *Runner) overdueNotice(ctx context.Context, uid string, inv Invoice) error {
	tx, err := r.svc.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("invoice: begin: %w", err)
	}
	defer tx.Rollback()
	text := fmt.Sprintf("Invoice %s to %s (%s %s) was due on %s and is not recorded as paid. If the money has arrived, tell me \"invoice %s paid\" with the date.",
		inv.Number, inv.To.Name, FormatAmount(inv.Total), inv.Currency, inv.Due, inv.Number)
	sent, err := r.notify.Notice(ctx, tx, uid, "invoice-overdue:"+uid+":"+inv.Number, text)
	if err != nil || !sent {
		return err // no private conversation yet: told once there is one
	}
	if _, err := tx.ExecContext(ctx, `UPDATE invoices SET overdue_notified_at = ? WHERE user_id = ? AND number = ? AND overdue_notified_at = ''`,
		store.FormatTime(r.svc.opts.Clock()), uid, inv.Number); err != nil {
		return fmt.Errorf("invoice: record the overdue notice of %s: %w", inv.Number, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("invoice: commit: %w", err)
	}
	r.opts.OnNotice()
	return nil
}
