package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/istota/istota/sidecar/internal/config"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
)

// cmdTask runs one task from the command line. When no `istota serve` holds the data
// directory the task runs in this process; otherwise it is queued and this command waits
// for the server to finish it.
func cmdTask(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("task", flag.ContinueOnError)
	load := commonFlags(fs)
	user := fs.String("u", "", "user id the task runs for (required)")
	dryRun := fs.Bool("dry-run", false, "print the prompt instead of running the task")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	text := strings.TrimSpace(strings.Join(fs.Args(), " "))
	if text == "" || *user == "" {
		fmt.Fprintln(stderr, `usage: istota task "what to do" -u USER [--dry-run]`)
		return errUsage
	}
	cfg, err := load()
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	nt := queue.NewTask{UserID: *user, Source: "cli", Interactive: true, Prompt: text}

	why := toRun
	if *dryRun {
		why = toPrompt
	}
	s, err := openSidecar(ctx, cfg, log, why)
	if errors.Is(err, errLocked) {
		if *dryRun {
			return errors.New("--dry-run needs the data directory to itself; stop `istota serve` or use another data_dir")
		}
		return queueAndWait(ctx, cfg, nt, stdout)
	}
	if err != nil {
		return err
	}
	defer s.close()
	if *dryRun {
		p, err := s.exec.Prompt(ctx, queue.Task{UserID: nt.UserID, Source: nt.Source, Prompt: nt.Prompt, Interactive: true})
		if err != nil {
			return err
		}
		fmt.Fprint(stdout, p)
		return nil
	}
	t, _, err := s.queue.Enqueue(ctx, nt)
	if err != nil {
		return err
	}
	claimed, err := s.queue.ClaimID(ctx, t.ID, s.owner)
	if err != nil {
		return fmt.Errorf("claim task #%d: %w", t.ID, err)
	}
	s.exec.Handle(ctx, claimed)
	if err := s.exec.Wait(ctx); err != nil {
		return err
	}
	return printOutcome(ctx, s.queue, t.ID, stdout)
}

func queueAndWait(ctx context.Context, cfg config.Config, nt queue.NewTask, stdout io.Writer) error {
	db, err := openDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close()
	q := queue.New(db, queue.Options{})
	t, _, err := q.Enqueue(ctx, nt)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "queued as task #%d; waiting for istota serve…\n", t.ID)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting; task #%d stays queued", t.ID)
		case <-tick.C:
		}
		cur, err := q.Get(ctx, t.ID)
		if err != nil {
			return err
		}
		if cur.Status.Finished() {
			return printOutcome(ctx, q, t.ID, stdout)
		}
	}
}

func printOutcome(ctx context.Context, q *queue.Queue, id int64, stdout io.Writer) error {
	t, err := q.Get(ctx, id)
	if err != nil {
		return err
	}
	switch t.Status {
	case queue.Completed:
		fmt.Fprintln(stdout, t.Result)
		return nil
	case queue.Pending:
		return fmt.Errorf("task #%d will be retried at %s: %s", id, t.NextAttemptAt.Local().Format(time.DateTime), t.Error)
	default:
		return fmt.Errorf("task #%d %s: %s", id, t.Status, t.Error)
	}
}

func openReadOnly(ctx context.Context, args []string, name string, stderr io.Writer, extra func(*flag.FlagSet)) (*store.DB, *flag.FlagSet, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	load := commonFlags(fs)
	if extra != nil {
		extra(fs)
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return nil, nil, err
	}
	cfg, err := load()
	if err != nil {
		return nil, nil, err
	}
	db, err := openDatabase(ctx, cfg)
	return db, fs, err
}

func cmdList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var user, status *string
	var limit *int
	db, _, err := openReadOnly(ctx, args, "list", stderr, func(fs *flag.FlagSet) {
		user = fs.String("u", "", "only tasks of this user")
		status = fs.String("status", "", "only tasks with this status (pending, running, completed, failed, cancelled)")
		limit = fs.Int("n", 20, "how many tasks")
	})
	if err != nil {
		return err
	}
	defer db.Close()
	f := queue.Filter{UserID: *user, Limit: *limit}
	if *status != "" {
		f.Statuses = []queue.Status{queue.Status(*status)}
	}
	tasks, err := queue.New(db, queue.Options{}).List(ctx, f)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tUSER\tSOURCE\tCREATED\tREQUEST")
	for _, t := range tasks {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Status, t.UserID, t.Source, t.CreatedAt.Local().Format(time.DateTime), oneLine(t.Prompt, 50))
	}
	return tw.Flush()
}

func cmdShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	db, fs, err := openReadOnly(ctx, args, "show", stderr, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: istota show ID")
		return errUsage
	}
	id, err := strconv.ParseInt(strings.TrimPrefix(fs.Arg(0), "#"), 10, 64)
	if err != nil {
		return fmt.Errorf("task id %q is not a number", fs.Arg(0))
	}
	q := queue.New(db, queue.Options{})
	t, err := q.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no task #%d", id)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Task #%d  %s\n", t.ID, t.Status)
	fmt.Fprintf(stdout, "User:      %s (%s%s)\n", t.UserID, t.Source, map[bool]string{true: ", interactive", false: ""}[t.Interactive])
	if t.ConversationToken != "" {
		fmt.Fprintf(stdout, "Talk:      %s, reply to #%d\n", t.ConversationToken, t.ReplyToMessageID)
	}
	fmt.Fprintf(stdout, "Created:   %s\n", t.CreatedAt.Local().Format(time.DateTime))
	if !t.StartedAt.IsZero() {
		fmt.Fprintf(stdout, "Started:   %s\n", t.StartedAt.Local().Format(time.DateTime))
	}
	if !t.FinishedAt.IsZero() {
		fmt.Fprintf(stdout, "Finished:  %s (%s)\n", t.FinishedAt.Local().Format(time.DateTime), t.FinishedAt.Sub(t.StartedAt).Round(time.Millisecond))
	}
	fmt.Fprintf(stdout, "Attempts:  %s\n", attemptsLine(t))
	if t.WaitingToRetry() {
		fmt.Fprintf(stdout, "Next try:  %s (attempt %d of %d)\n", t.NextAttemptAt.Local().Format(time.DateTime), t.Attempts+1, t.MaxAttempts)
	}
	if t.InputTokens+t.OutputTokens > 0 {
		fmt.Fprintf(stdout, "Tokens:    %d in, %d out, $%.4f\n", t.InputTokens, t.OutputTokens, t.CostUSD)
	}
	fmt.Fprintf(stdout, "\nRequest:\n%s\n", indent(t.Prompt))
	events, err := q.Events(ctx, id)
	if err != nil {
		return err
	}
	if len(events) > 0 {
		fmt.Fprintln(stdout, "\nEvents:")
		for _, e := range events {
			fmt.Fprintf(stdout, "  %s  %-8s %s\n", e.At.Local().Format(time.TimeOnly), e.Kind, oneLine(e.Text, 100))
		}
	}
	if t.Result != "" {
		fmt.Fprintf(stdout, "\nResult:\n%s\n", indent(t.Result))
	}
	if t.Error != "" {
		fmt.Fprintf(stdout, "\nError:\n%s\n", indent(t.Error))
	}
	return nil
}

// attemptsLine counts the runs of t against its limit and says how many failed, and
// how many of those because the model API was unavailable.
func attemptsLine(t queue.Task) string {
	line := fmt.Sprintf("%d of %d", t.Runs(), t.MaxAttempts)
	switch {
	case t.Attempts == 0:
	case t.TransientFailures > 0:
		line += fmt.Sprintf(" (%d failed, %d of them with the model API unavailable)", t.Attempts, t.TransientFailures)
	default:
		line += fmt.Sprintf(" (%d failed)", t.Attempts)
	}
	return line
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}
