package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/calendar"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

func errorf(format string, args ...any) outcome {
	return outcome{status: StatusError, message: fmt.Sprintf(format, args...)}
}

// fileWatch compares the watched path with the version the user was last told about,
// or, before any alert, the version the first run saw (memory).
func (r *Runner) fileWatch(ctx context.Context, u User, c userconfig.Check, baseline string, loc *time.Location) outcome {
	if r.opts.Files == nil {
		return errorf("watching files is not available on this server")
	}
	st, err := r.opts.Files.Stat(ctx, u.ID, c.Path)
	if err != nil {
		return errorf("could not look at %s: %v", c.Path, err)
	}
	cur := "absent"
	if st.Exists {
		cur = "file:" + st.Version
		if st.IsDir {
			cur = "dir:" + st.Version
		}
	}
	what := "file"
	if st.IsDir || strings.HasPrefix(baseline, "dir:") {
		what = "folder"
	}
	switch {
	case baseline == "" && !st.Exists:
		return outcome{status: StatusOK, memory: cur, message: fmt.Sprintf("%s does not exist yet; I will tell you when it appears", c.Path)}
	case baseline == "":
		return outcome{status: StatusOK, memory: cur, message: fmt.Sprintf("watching %s %s", what, c.Path)}
	case cur == baseline:
		return outcome{status: StatusOK, memory: cur, message: fmt.Sprintf("%s has not changed", c.Path)}
	}
	var msg string
	switch {
	case !st.Exists:
		msg = fmt.Sprintf("%s %s was deleted", what, c.Path)
	case baseline == "absent":
		msg = fmt.Sprintf("%s %s was created", what, c.Path)
	case st.IsDir:
		msg = fmt.Sprintf("something in folder %s changed", c.Path)
	default:
		msg = fmt.Sprintf("%s was changed", c.Path)
	}
	if st.Exists && !st.ModTime.IsZero() {
		msg += " (last modified " + st.ModTime.In(loc).Format("Mon 2 Jan 15:04") + ")"
	}
	return outcome{status: StatusAlert, message: msg, keys: []string{cur}, memory: baseline, toldMemory: cur}
}

// conflictWindow is how far ahead calendar-conflicts looks.
const conflictWindow = 24 * time.Hour

// calendarConflicts finds overlapping timed events in the next 24 hours across every
// calendar the user shared with the bot.
func (r *Runner) calendarConflicts(ctx context.Context, u User, now time.Time, loc *time.Location) outcome {
	if r.opts.Calendars == nil {
		return errorf("calendars are not available on this server (no bot account is configured)")
	}
	all, err := r.opts.Calendars.Calendars(ctx)
	if err != nil {
		return errorf("could not list the calendars: %v", err)
	}
	cals, err := calendar.Usable(ctx, all, u.ID, r.opts.CalendarChoice)
	if err != nil {
		return errorf("could not read which calendars you allowed: %v", err)
	}
	if len(cals) == 0 {
		return outcome{status: StatusOK, message: "no calendar is shared with me: share one with the bot account to have it checked"}
	}
	var events []calendar.Event
	for _, cal := range cals {
		evs, err := r.opts.Calendars.Events(ctx, cal, now, now.Add(conflictWindow))
		if err != nil {
			return errorf("could not read calendar %s: %v", calendarName(cal), err)
		}
		events = append(events, evs...)
	}
	pairs := calendar.Conflicts(events)
	if len(pairs) == 0 {
		return outcome{status: StatusOK, message: fmt.Sprintf("no overlapping events in the next 24 hours (%d calendar(s), %d event(s))", len(cals), len(events))}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d overlap(s) in the next 24 hours:", len(pairs))
	keys := make([]string, 0, len(pairs))
	for _, p := range pairs {
		fmt.Fprintf(&b, "\n- %s overlaps %s", eventText(p[0], loc), eventText(p[1], loc))
		keys = append(keys, eventKey(p[0])+"|"+eventKey(p[1]))
	}
	slices.Sort(keys)
	return outcome{status: StatusAlert, message: b.String(), keys: keys}
}

func calendarName(c calendar.Calendar) string {
	if c.Name != "" {
		return c.Name
	}
	return c.ID
}

func eventKey(e calendar.Event) string {
	k := e.UID
	if e.Recurring() {
		k += "@" + e.RecurrenceID.UTC().Format(time.RFC3339)
	}
	return k + "@" + e.Start.UTC().Format(time.RFC3339)
}

func eventText(e calendar.Event, loc *time.Location) string {
	s, en := e.Start.In(loc), e.End.In(loc)
	title := strings.TrimSpace(e.Summary)
	if title == "" {
		title = "(untitled)"
	}
	return fmt.Sprintf("“%s” %s–%s", excerpt(title, 80), s.Format("Mon 15:04"), en.Format("15:04"))
}

// dueRE finds the due date of a TASKS.md line: "due:2026-11-30".
var dueRE = regexp.MustCompile(`(?i)(?:^|\s)due:(\d{4}-\d{2}-\d{2})\b`)

// taskDeadline lists open and running TASKS.md lines whose due date is today or past
// on the user's calendar.
func (r *Runner) taskDeadline(ctx context.Context, u User, now time.Time, loc *time.Location) outcome {
	src, err := r.src.ReadConfig(ctx, u.ID, TasksFile)
	if errors.Is(err, fs.ErrNotExist) {
		return outcome{status: StatusOK, message: "there is no " + TasksFile}
	}
	if err != nil {
		return errorf("could not read %s: %v", TasksFile, err)
	}
	local := now.In(loc)
	today := time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, time.UTC)
	var lines, keys []string
	withDate := 0
	for _, t := range userconfig.ParseTasks(src) {
		if t.State != userconfig.TaskOpen && t.State != userconfig.TaskRunning {
			continue
		}
		m := dueRE.FindStringSubmatch(t.Text)
		if m == nil {
			continue
		}
		due, err := time.Parse("2006-01-02", m[1])
		if err != nil {
			continue // "due:2026-13-40" is not a date; the line stays an ordinary task
		}
		withDate++
		if due.After(today) {
			continue
		}
		when := "due today"
		if due.Before(today) {
			when = "overdue since " + due.Format("Mon 2 Jan 2006")
		}
		lines = append(lines, fmt.Sprintf("- %s (line %d): %s", when, t.Line, excerpt(t.Text, 120)))
		keys = append(keys, t.ID+"@"+m[1])
	}
	if len(lines) == 0 {
		return outcome{status: StatusOK, message: fmt.Sprintf("nothing due (%d open task(s) with a due date)", withDate)}
	}
	return outcome{status: StatusAlert, keys: keys,
		message: fmt.Sprintf("%d task(s) in %s due:\n%s", len(lines), TasksFile, strings.Join(lines, "\n"))}
}

// selfCheck looks at every part a task of this user needs.
func (r *Runner) selfCheck(ctx context.Context, u User) outcome {
	type part struct {
		name   string
		detail string
		err    error
	}
	var parts []part
	if r.opts.Probe != nil {
		d, err := r.opts.Probe.AgentBinary(ctx)
		parts = append(parts, part{"agent", d, err})
		d, err = r.opts.Probe.Sandbox(ctx)
		parts = append(parts, part{"sandbox", d, err})
	}
	var one int
	err := r.db.Read.QueryRowContext(ctx, `SELECT count(*) FROM tasks WHERE user_id = ?`, u.ID).Scan(&one)
	parts = append(parts, part{"database", "reachable", err})
	detail, err := r.failureRate(ctx, u.ID)
	parts = append(parts, part{"recent tasks", detail, err})

	failed := 0
	var b strings.Builder
	for _, p := range parts {
		if p.err != nil {
			failed++
			fmt.Fprintf(&b, "\n✗ %s: %v", p.name, p.err)
		} else {
			fmt.Fprintf(&b, "\n✓ %s: %s", p.name, p.detail)
		}
	}
	if failed > 0 {
		return outcome{status: StatusAlert, message: fmt.Sprintf("%d of %d parts are not well:%s", failed, len(parts), b.String())}
	}
	return outcome{status: StatusOK, message: "all parts are well:" + b.String()}
}

// failureRate judges the user's last finished tasks; cancelled ones do not count.
func (r *Runner) failureRate(ctx context.Context, uid string) (string, error) {
	var total, failed int
	err := r.db.Read.QueryRowContext(ctx, `
		SELECT count(*), COUNT(CASE WHEN status = 'failed' THEN 1 END) FROM (
			SELECT status FROM tasks WHERE user_id = ? AND status IN ('completed', 'failed') ORDER BY id DESC LIMIT ?) AS recent`,
		uid, r.opts.FailureWindow).Scan(&total, &failed)
	if err != nil {
		return "", fmt.Errorf("could not count tasks: %w", err)
	}
	if total >= r.opts.MinFailureSample && float64(failed) > r.opts.FailureThreshold*float64(total) {
		return "", fmt.Errorf("%d of your last %d tasks failed", failed, total)
	}
	return fmt.Sprintf("%d of the last %d failed", failed, total), nil
}

// maxShellOutput is how much of a command's output a message quotes.
const maxShellOutput = 800

// shellCommand runs an administrator's command in their sandbox.
func (r *Runner) shellCommand(ctx context.Context, u User, c userconfig.Check) outcome {
	if !u.IsAdmin {
		return errorf("shell-command checks are for administrators only, and you are no longer one; this check does not run")
	}
	if r.opts.Shell == nil {
		return errorf("running commands is not available on this server")
	}
	res, err := r.opts.Shell.Run(ctx, u.ID, c.Command)
	if err != nil {
		if ctx.Err() != nil {
			return outcome{status: StatusAlert, message: fmt.Sprintf("the command did not finish within %s", r.opts.CheckTimeout)}
		}
		return errorf("could not run the command: %v", err)
	}
	tail := outputTail(res.Output)
	if res.ExitCode != 0 {
		msg := fmt.Sprintf("the command failed with exit status %d", res.ExitCode)
		if tail != "" {
			msg += ":\n```\n" + tail + "\n```"
		}
		return outcome{status: StatusAlert, message: msg}
	}
	msg := "the command succeeded"
	if tail != "" {
		msg += ": " + excerpt(tail, 200)
	}
	return outcome{status: StatusOK, message: msg}
}

// outputTail keeps the end of a command's output, where the error usually is, as
// valid UTF-8 without fence breakers.
func outputTail(b []byte) string {
	if len(b) > maxShellOutput {
		b = b[len(b)-maxShellOutput:]
		for len(b) > 0 && !utf8.RuneStart(b[0]) {
			b = b[1:]
		}
	}
	s := strings.ToValidUTF8(string(b), "�")
	s = strings.ReplaceAll(s, "```", "'''")
	return strings.TrimSpace(s)
}

func excerpt(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	rs := []rune(s)
	if len(rs) <= n {
		return s
	}
	return string(rs[:n-1]) + "…"
}
