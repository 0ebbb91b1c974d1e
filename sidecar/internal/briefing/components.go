package briefing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/istota/istota/sidecar/internal/calendar"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

// Limits on what one section brings into a prompt.
const (
	maxEvents     = 50
	maxTodos      = 30
	maxMails      = 30
	maxNotes      = 20
	maxNotesSeen  = 2000 // directory entries looked at under notes/
	maxReminders  = 30
	maxFeeds      = 10
	maxSectionLen = 8 << 10
)

// section is the pre-fetched data of one component.
type section struct {
	Component userconfig.Component
	Title     string
	Text      string // the data; untrusted
	Err       error  // the component failed; Text may hold what was read before
}

var sectionTitles = map[userconfig.Component]string{
	userconfig.ComponentCalendar:  "Calendar today",
	userconfig.ComponentTodos:     "Open tasks (TASKS.md)",
	userconfig.ComponentEmail:     "E-mail",
	userconfig.ComponentNotes:     "Notes changed in the last 24 hours",
	userconfig.ComponentReminders: "Reminders due",
	userconfig.ComponentNews:      "News",
	userconfig.ComponentMarkets:   "Markets",
}

// runContext is what every component of one run knows.
type runContext struct {
	user  User
	def   definition
	loc   *time.Location
	now   time.Time // the run's time, in loc
	today time.Time // local midnight that starts today, in loc
	last  time.Time // the scheduled time of this briefing's previous run; zero for the first
}

// prefetch fetches every component of the run at once, each within its own timeout.
// A failing (or panicking) component becomes a section with an error; the others
// are unaffected.
func (r *Runner) prefetch(ctx context.Context, rc runContext) []section {
	out := make([]section, len(rc.def.Components))
	var wg sync.WaitGroup
	for i, c := range rc.def.Components {
		out[i] = section{Component: c, Title: sectionTitles[c]}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					r.opts.Logger.Error("briefing component panicked", "user_id", rc.user.ID, "component", string(c), "panic", fmt.Sprint(p))
					out[i].Err = errors.New("internal error")
				}
			}()
			cctx, cancel := context.WithTimeout(ctx, r.opts.ComponentTimeout)
			defer cancel()
			text, err := r.fetch(cctx, c, rc)
			if err != nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
				err = fmt.Errorf("took longer than %s", r.opts.ComponentTimeout)
			}
			out[i].Text, out[i].Err = clip(text, maxSectionLen), err
			if err != nil {
				r.opts.Logger.Warn("briefing component failed", "user_id", rc.user.ID, "component", string(c), "err", err)
			}
		}()
	}
	wg.Wait()
	return out
}

func (r *Runner) fetch(ctx context.Context, c userconfig.Component, rc runContext) (string, error) {
	switch c {
	case userconfig.ComponentCalendar:
		return r.calendarSection(ctx, rc)
	case userconfig.ComponentTodos:
		return r.todosSection(ctx, rc)
	case userconfig.ComponentEmail:
		return r.mailSection(ctx, rc)
	case userconfig.ComponentNotes:
		return r.notesSection(ctx, rc)
	case userconfig.ComponentReminders:
		return r.remindersSection(ctx, rc)
	case userconfig.ComponentNews:
		return r.newsSection(ctx, rc)
	case userconfig.ComponentMarkets:
		return r.marketsSection(ctx, rc)
	}
	return "", fmt.Errorf("unknown component %q", c)
}

// calendarSection lists today's events of the calendars the user shared with the bot.
func (r *Runner) calendarSection(ctx context.Context, rc runContext) (string, error) {
	if r.opts.Calendars == nil {
		return "", errors.New("calendars are not available: the sidecar has no Nextcloud bot account")
	}
	all, err := r.opts.Calendars.Calendars(ctx)
	if err != nil {
		return "", err
	}
	cals, err := calendar.Usable(ctx, all, rc.user.ID, r.opts.CalendarChoice)
	if err != nil {
		return "", err
	}
	if len(cals) == 0 {
		return "No calendar is shared with the bot account.", nil
	}
	from, to := rc.today, rc.today.AddDate(0, 0, 1)
	type entry struct {
		ev  calendar.Event
		cal string
	}
	var list []entry
	var b strings.Builder
	var failed []error
	for _, cal := range cals {
		evs, err := r.opts.Calendars.Events(ctx, cal, from, to)
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", calName(cal), err))
			continue
		}
		for _, ev := range evs {
			if ev.AllDay && !allDayToday(ev, rc.today) {
				continue
			}
			list = append(list, entry{ev, calName(cal)})
		}
	}
	if len(failed) == len(cals) {
		return "", errors.Join(failed...)
	}
	sort.SliceStable(list, func(i, j int) bool {
		a, c := list[i].ev, list[j].ev
		if a.AllDay != c.AllDay {
			return a.AllDay
		}
		return a.Start.Before(c.Start)
	})
	for i, e := range list {
		if i == maxEvents {
			fmt.Fprintf(&b, "- … and %d more\n", len(list)-i)
			break
		}
		when := "all day"
		if !e.ev.AllDay {
			start, end := e.ev.Start.In(rc.loc), e.ev.End.In(rc.loc)
			when = start.Format("15:04") + "–" + end.Format("15:04")
			if start.Before(from) {
				when = "until " + end.Format("15:04")
				if !end.Before(to) {
					when = "all day (continues)"
				}
			} else if !end.Before(to) {
				when = "from " + start.Format("15:04")
			}
		}
		fmt.Fprintf(&b, "- %s %s", when, oneLine(e.ev.Summary, 200))
		if e.ev.Location != "" {
			fmt.Fprintf(&b, " (at %s)", oneLine(e.ev.Location, 120))
		}
		fmt.Fprintf(&b, " [%s]\n", e.cal)
	}
	if len(list) == 0 {
		b.WriteString("No events today.\n")
	}
	for _, err := range failed {
		fmt.Fprintf(&b, "(could not be read: %s)\n", oneLine(err.Error(), 300))
	}
	return b.String(), nil
}

func calName(c calendar.Calendar) string {
	if c.Name != "" {
		return oneLine(c.Name, 80)
	}
	return oneLine(c.ID, 80)
}

// allDayToday reports whether an all-day event covers the local date of today. All-day
// events carry midnight UTC of their dates, so they are compared by date, not instant.
func allDayToday(ev calendar.Event, today time.Time) bool {
	d := time.Date(today.Year(), today.Month(), today.Day(), 0, 0, 0, 0, time.UTC)
	return !ev.Start.After(d) && ev.End.After(d)
}

// todosSection lists the open and running lines of TASKS.md.
func (r *Runner) todosSection(ctx context.Context, rc runContext) (string, error) {
	src, err := r.src.ReadConfig(ctx, rc.user.ID, TasksFileName)
	if errors.Is(err, fs.ErrNotExist) {
		return "There is no TASKS.md.", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", TasksFileName, err)
	}
	var b strings.Builder
	n := 0
	for _, t := range userconfig.ParseTasks(src) {
		if t.State != userconfig.TaskOpen && t.State != userconfig.TaskRunning {
			continue
		}
		n++
		if n > maxTodos {
			continue
		}
		state := ""
		if t.State == userconfig.TaskRunning {
			state = " (being worked on)"
		}
		fmt.Fprintf(&b, "- %s%s\n", oneLine(t.Text, 200), state)
	}
	if n > maxTodos {
		fmt.Fprintf(&b, "- … and %d more\n", n-maxTodos)
	}
	if n == 0 {
		return "No open tasks.", nil
	}
	return b.String(), nil
}

// Bounds of the window the e-mail component looks at in the user's own mailbox.
const (
	defaultMailWindow = 24 * time.Hour
	maxMailWindow     = 7 * 24 * time.Hour
)

// mailSection lists the mail that arrived in the user's own mailbox since the previous
// run of this briefing, when they connected one; otherwise the mail the bot received
// from their addresses in the last 24 hours. A mailbox that cannot be reached fails
// this section only, with a line that says why.
func (r *Runner) mailSection(ctx context.Context, rc runContext) (string, error) {
	if r.opts.Mailbox != nil {
		since := rc.now.Add(-defaultMailWindow)
		if !rc.last.IsZero() && rc.last.Before(rc.now) && rc.now.Sub(rc.last) <= maxMailWindow {
			since = rc.last
		}
		res, err := r.opts.Mailbox.Recent(ctx, rc.user.ID, since, maxMails)
		if res.Connected {
			if err != nil {
				return "", fmt.Errorf("your mailbox %s could not be reached: %w", res.Account, err)
			}
			return mailboxText(res, since, rc.loc), nil
		}
		if err != nil {
			return "", err
		}
	}
	if r.opts.Mail == nil {
		return "", errors.New("e-mail is not available on this server")
	}
	mails, err := r.opts.Mail.Received(ctx, rc.user.ID, rc.now.Add(-24*time.Hour))
	if err != nil {
		return "", err
	}
	if len(mails) == 0 {
		return "No e-mail received by the bot from your addresses in the last 24 hours.", nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d message(s) received by the bot from your addresses in the last 24 hours:\n", len(mails))
	for i, m := range mails {
		if i == maxMails {
			fmt.Fprintf(&b, "- … and %d more\n", len(mails)-i)
			break
		}
		fmt.Fprintf(&b, "- %s from %s: %s\n", m.At.In(rc.loc).Format("Mon 15:04"), oneLine(m.From, 120), oneLine(m.Subject, 200))
	}
	return b.String(), nil
}

func mailboxText(res MailboxDigest, since time.Time, loc *time.Location) string {
	var b strings.Builder
	when := since.In(loc).Format("Mon 15:04")
	if res.Total == 0 {
		fmt.Fprintf(&b, "No new mail in your mailbox (%s) since %s.\n", oneLine(res.Account, 200), when)
		return b.String()
	}
	unseen := 0
	for _, m := range res.Mails {
		if m.Unseen {
			unseen++
		}
	}
	fmt.Fprintf(&b, "%d message(s) arrived in your mailbox (%s) since %s", res.Total, oneLine(res.Account, 200), when)
	if len(res.Mails) < res.Total {
		fmt.Fprintf(&b, "; the newest %d (%d of them unread):\n", len(res.Mails), unseen)
	} else {
		fmt.Fprintf(&b, " (%d unread):\n", unseen)
	}
	for _, m := range res.Mails {
		mark := ""
		if m.Unseen {
			mark = " [unread]"
		}
		fmt.Fprintf(&b, "- %s from %s: %s%s\n", m.At.In(loc).Format("Mon 15:04"), oneLine(m.From, 120), oneLine(m.Subject, 200), mark)
	}
	if len(res.Mails) < res.Total {
		fmt.Fprintf(&b, "- … and %d more\n", res.Total-len(res.Mails))
	}
	return b.String()
}

// notesSection lists the files under the user's notes/ folder changed in the last 24
// hours, newest first, with their first line.
func (r *Runner) notesSection(ctx context.Context, rc runContext) (string, error) {
	if r.opts.UserRoot == nil {
		return "", errors.New("the user's files are not available")
	}
	root := filepath.Join(r.opts.UserRoot(rc.user.ID), "notes")
	if fi, err := os.Lstat(root); errors.Is(err, fs.ErrNotExist) {
		return "There is no notes/ folder.", nil
	} else if err != nil {
		return "", fmt.Errorf("notes/: %w", errors.Unwrap(err))
	} else if !fi.IsDir() {
		return "notes is not a folder.", nil
	}
	since := rc.now.Add(-24 * time.Hour)
	type note struct {
		rel string
		mod time.Time
	}
	var found []note
	seen := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable entry is skipped, not the whole section
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if seen++; seen > maxNotesSeen {
			return fs.SkipAll
		}
		if p != root && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil // directories are walked; links and devices are never followed
		}
		info, err := d.Info()
		if err != nil || !info.ModTime().After(since) {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		found = append(found, note{filepath.ToSlash(rel), info.ModTime()})
		return nil
	})
	if err != nil {
		return "", err
	}
	if len(found) == 0 {
		return "No notes changed.", nil
	}
	sort.Slice(found, func(i, j int) bool { return found[i].mod.After(found[j].mod) })
	var b strings.Builder
	for i, n := range found {
		if i == maxNotes {
			fmt.Fprintf(&b, "- … and %d more\n", len(found)-i)
			break
		}
		fmt.Fprintf(&b, "- notes/%s (changed %s)", oneLine(n.rel, 200), n.mod.In(rc.loc).Format("Mon 15:04"))
		if first := firstLine(filepath.Join(root, filepath.FromSlash(n.rel))); first != "" {
			fmt.Fprintf(&b, ": %s", first)
		}
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// firstLine returns the first non-empty line of a text file, without Markdown heading
// marks; "" for binary files.
func firstLine(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	buf := make([]byte, 4096)
	n, _ := io.ReadFull(f, buf)
	buf = buf[:n]
	if strings.ContainsRune(string(buf), 0) {
		return ""
	}
	for _, l := range strings.Split(string(buf), "\n") {
		l = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(l), "#"))
		if l != "" {
			return oneLine(l, 160)
		}
	}
	return ""
}

// reminder is one entry of the "reminders" namespace.
type reminder struct {
	Text string
	Due  time.Time // in the user's zone
	Time bool      // Due has a time of day
}

// parseReminder reads a reminder value (see the package documentation).
func parseReminder(value string, loc *time.Location) (reminder, bool) {
	value = strings.TrimSpace(value)
	var r reminder
	var due string
	if strings.HasPrefix(value, "{") {
		var j struct {
			Text string `json:"text"`
			Due  string `json:"due"`
		}
		if json.Unmarshal([]byte(value), &j) != nil {
			return reminder{}, false
		}
		r.Text, due = j.Text, strings.TrimSpace(j.Due)
	} else {
		date, rest, _ := strings.Cut(value, " ")
		due, r.Text = date, rest
		if hm, after, ok := strings.Cut(strings.TrimSpace(rest), " "); ok && len(hm) == 5 && hm[2] == ':' {
			if _, err := time.Parse("15:04", hm); err == nil {
				due, r.Text = date+"T"+hm, after
			}
		}
	}
	r.Text = strings.TrimSpace(r.Text)
	if r.Text == "" {
		return reminder{}, false
	}
	if t, err := time.Parse(time.RFC3339, due); err == nil {
		r.Due, r.Time = t.In(loc), true
		return r, true
	}
	if t, err := time.ParseInLocation("2006-01-02T15:04", due, loc); err == nil {
		r.Due, r.Time = t, true
		return r, true
	}
	if t, err := time.ParseInLocation("2006-01-02", due, loc); err == nil {
		r.Due = t
		return r, true
	}
	return reminder{}, false
}

// remindersSection lists the reminders due today or overdue.
func (r *Runner) remindersSection(ctx context.Context, rc runContext) (string, error) {
	if r.opts.KV == nil {
		return "", errors.New("reminders are not available")
	}
	entries, err := r.opts.KV.List(ctx, rc.user.ID, RemindersNamespace)
	if err != nil {
		return "", err
	}
	tomorrow := rc.today.AddDate(0, 0, 1)
	var due []reminder
	for _, e := range entries {
		rem, ok := parseReminder(e.Value, rc.loc)
		if ok && rem.Due.Before(tomorrow) {
			due = append(due, rem)
		}
	}
	if len(due) == 0 {
		return "No reminders due today.", nil
	}
	sort.SliceStable(due, func(i, j int) bool { return due[i].Due.Before(due[j].Due) })
	var b strings.Builder
	for i, rem := range due {
		if i == maxReminders {
			fmt.Fprintf(&b, "- … and %d more\n", len(due)-i)
			break
		}
		when := "today"
		switch {
		case rem.Due.Before(rc.today):
			when = "overdue since " + rem.Due.Format("2006-01-02")
		case rem.Time:
			when = rem.Due.Format("15:04")
		}
		fmt.Fprintf(&b, "- %s: %s\n", when, oneLine(rem.Text, 200))
	}
	return b.String(), nil
}

// newsSection reads each feed; a feed that fails is named with its reason and the
// others still run. Only when every feed fails does the section fail.
func (r *Runner) newsSection(ctx context.Context, rc runContext) (string, error) {
	feeds := rc.def.Feeds
	if len(feeds) == 0 {
		return "", errors.New("no feeds are configured")
	}
	var b strings.Builder
	if len(feeds) > maxFeeds {
		feeds = feeds[:maxFeeds]
	}
	results := make([]struct {
		feed Feed
		err  error
	}, len(feeds))
	var wg sync.WaitGroup
	for i, u := range feeds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].feed, results[i].err = r.opts.News.Fetch(ctx, u, r.opts.Defaults.MaxItemsPerFeed)
		}()
	}
	wg.Wait()
	var errs []error
	for i, u := range feeds {
		res := results[i]
		title := res.feed.Title
		if title == "" {
			title = u
		}
		fmt.Fprintf(&b, "### %s (%s)\n", oneLine(title, 120), u)
		if res.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u, res.err))
			fmt.Fprintf(&b, "(could not be read: %s)\n\n", oneLine(res.err.Error(), 300))
			continue
		}
		if len(res.feed.Items) == 0 {
			b.WriteString("(no items)\n\n")
			continue
		}
		for _, it := range res.feed.Items {
			line := "- " + oneLine(it.Title, 200)
			if !it.Published.IsZero() {
				line += " (" + it.Published.In(rc.loc).Format("Jan 2 15:04") + ")"
			}
			if it.Link != "" {
				line += " " + it.Link
			}
			b.WriteString(line + "\n")
		}
		b.WriteByte('\n')
	}
	if len(rc.def.Feeds) > maxFeeds {
		fmt.Fprintf(&b, "(%d more feeds not read: at most %d per briefing)\n", len(rc.def.Feeds)-maxFeeds, maxFeeds)
	}
	if len(errs) == len(feeds) {
		return b.String(), errors.Join(errs...)
	}
	return b.String(), nil
}

// oneLine folds whitespace and control characters into single spaces and clips to n
// runes, so fetched text cannot forge lines of the prompt.
func oneLine(s string, n int) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	return clip(s, n)
}

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
