package briefing

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/kv"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/store"
)

// RemindersSkillName is the name of the reminders skill.
const RemindersSkillName = "reminders"

// maxReminderText bounds the text of one reminder.
const maxReminderText = 500

const remindersUsage = `reminders add WHEN TEXT…     remember TEXT for WHEN, in your time zone
reminders list               your reminders, soonest first, with their ids
reminders remove ID…         forget reminders by id
WHEN is a date 2026-05-04, a date and time 2026-05-04 09:00 (or 2026-05-04T09:00), today or tomorrow
with an optional time (tomorrow 08:30), "in" with a number and m, h or d (in 90m, in 2h, in 3d), or RFC 3339.
Reminders due today or overdue appear in your briefings (component "reminders") until you remove them.`

// RemindersStore is what the reminders skill keeps reminders in; *kv.Store
// implements it. Reminders are the user's "reminders" key-value entries, the same the
// briefings' reminders component reads.
type RemindersStore interface {
	Get(ctx context.Context, userID, namespace, key string) (kv.Entry, error)
	Set(ctx context.Context, userID, namespace, key, value string) error
	Delete(ctx context.Context, userID, namespace, key string) error
	List(ctx context.Context, userID, namespace string) ([]kv.Entry, error)
}

// RemindersOptions configure the reminders skill.
type RemindersOptions struct {
	Store RemindersStore
	// Zone returns the user's time zone; nil or a nil answer means UTC.
	Zone  func(ctx context.Context, uid string) *time.Location
	Clock func() time.Time
}

// RemindersSkill returns the reminders skill: add, list and remove the user's
// reminders, stored as {"text": …, "due": "YYYY-MM-DD[THH:MM]"} in the user's time
// zone so that the briefings read them back exactly.
func RemindersSkill(opts RemindersOptions) (skills.Skill, error) {
	if opts.Store == nil {
		return skills.Skill{}, errors.New("reminders: no store")
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	return skills.Skill{
		Manifest: skills.Manifest{
			Name:     RemindersSkillName,
			Summary:  "add, list and remove your reminders (they appear in your briefings)",
			Usage:    remindersUsage,
			Load:     skills.Load{Keywords: []string{"remind", "erinner", "don t forget", "do not forget", "due"}},
			Classify: skills.ReadVerbs("list"),
		},
		Run: func(ctx context.Context, inv skills.Invocation) skills.Result {
			return runReminders(ctx, opts, inv)
		},
	}, nil
}

// RegisterRemindersSkill adds the reminders skill to reg.
func RegisterRemindersSkill(reg *skills.Registry, opts RemindersOptions) error {
	s, err := RemindersSkill(opts)
	if err != nil {
		return err
	}
	return reg.Register(s)
}

func remindersUsagef(format string, args ...any) skills.Result {
	return skills.Usagef("reminders: "+format+"\nusage:\n%s", append(args, remindersUsage)...)
}

func runReminders(ctx context.Context, opts RemindersOptions, inv skills.Invocation) skills.Result {
	if len(inv.Args) == 0 {
		return remindersUsagef("no command")
	}
	if inv.UserID == "" {
		return skills.Failf("reminders: no user for this task")
	}
	loc := time.UTC
	if opts.Zone != nil {
		if l := opts.Zone(ctx, inv.UserID); l != nil {
			loc = l
		}
	}
	now := opts.Clock().In(loc)
	args := inv.Args[1:]
	switch inv.Args[0] {
	case "add":
		due, withTime, rest, err := parseWhen(args, now)
		if err != nil {
			return remindersUsagef("%v", err)
		}
		text := strings.TrimSpace(strings.Join(rest, " "))
		if text == "" && len(rest) == 0 && len(inv.Stdin) > 0 {
			text = strings.TrimSpace(string(inv.Stdin))
		}
		switch {
		case text == "":
			return remindersUsagef("add: no text after WHEN")
		case !utf8.ValidString(text) || strings.IndexFunc(text, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) >= 0:
			return remindersUsagef("add: the text must be UTF-8 without control characters")
		case utf8.RuneCountInString(text) > maxReminderText:
			return remindersUsagef("add: the text is longer than %d characters", maxReminderText)
		}
		text = strings.Join(strings.Fields(text), " ")
		if withTime && due.Before(now.Truncate(time.Minute)) || !withTime && due.Before(startOfDay(now)) {
			return remindersUsagef("add: %s is in the past (now is %s %s)", formatDue(due, withTime), now.Format("2006-01-02 15:04"), loc)
		}
		return addReminder(ctx, opts.Store, inv.UserID, text, due, withTime)
	case "list":
		if len(args) != 0 {
			return remindersUsagef("list takes no arguments")
		}
		return listReminders(ctx, opts.Store, inv.UserID, now)
	case "remove", "delete":
		if len(args) == 0 {
			return remindersUsagef("remove needs at least one id (see reminders list)")
		}
		return removeReminders(ctx, opts.Store, inv.UserID, args)
	}
	return remindersUsagef("unknown command %q", inv.Args[0])
}

var (
	hhmmRE = regexp.MustCompile(`^([01]?[0-9]|2[0-3]):([0-5][0-9])$`)
	inRE   = regexp.MustCompile(`^([0-9]{1,4})\s*(m|min|mins|minutes?|h|hours?|d|days?)$`)
)

// parseWhen reads WHEN from the start of args and returns the due time in now's
// location, whether it has a time of day, and the arguments after it.
func parseWhen(args []string, now time.Time) (time.Time, bool, []string, error) {
	if len(args) == 0 {
		return time.Time{}, false, nil, errors.New("add: no WHEN")
	}
	loc := now.Location()
	first, rest := strings.ToLower(args[0]), args[1:]
	// An optional HH:MM after a day.
	clock := func(day time.Time) (time.Time, bool, []string, error) {
		if len(rest) > 0 {
			if m := hhmmRE.FindStringSubmatch(rest[0]); m != nil {
				h, _ := strconv.Atoi(m[1])
				mi, _ := strconv.Atoi(m[2])
				return time.Date(day.Year(), day.Month(), day.Day(), h, mi, 0, 0, loc), true, rest[1:], nil
			}
		}
		return day, false, rest, nil
	}
	switch first {
	case "today":
		return clock(startOfDay(now))
	case "tomorrow":
		return clock(startOfDay(now).AddDate(0, 0, 1))
	case "in":
		// "in 2h", "in 2 h", "in 2 hours"
		if len(rest) == 0 {
			return time.Time{}, false, nil, errors.New(`add: "in" needs an amount such as 2h`)
		}
		spec, after := rest[0], rest[1:]
		if len(after) > 0 && inRE.MatchString(spec+after[0]) && !inRE.MatchString(spec) {
			spec, after = spec+after[0], after[1:]
		}
		m := inRE.FindStringSubmatch(strings.ToLower(spec))
		if m == nil {
			return time.Time{}, false, nil, fmt.Errorf("add: %q is not an amount such as 90m, 2h or 3d", spec)
		}
		n, _ := strconv.Atoi(m[1])
		var due time.Time
		switch m[2][0] {
		case 'm':
			due = now.Add(time.Duration(n) * time.Minute)
		case 'h':
			due = now.Add(time.Duration(n) * time.Hour)
		default:
			due = now.AddDate(0, 0, n)
		}
		return due.Truncate(time.Minute), true, after, nil
	}
	if t, err := time.Parse(time.RFC3339, args[0]); err == nil {
		return t.In(loc).Truncate(time.Minute), true, rest, nil
	}
	if t, err := time.ParseInLocation("2006-01-02T15:04", args[0], loc); err == nil {
		return t, true, rest, nil
	}
	if t, err := time.ParseInLocation("2006-01-02", args[0], loc); err == nil {
		return clock(t)
	}
	return time.Time{}, false, nil, fmt.Errorf("add: %q is not a WHEN (2026-05-04, 2026-05-04 09:00, today, tomorrow 08:30, in 2h)", args[0])
}

func startOfDay(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, t.Location())
}

func formatDue(t time.Time, withTime bool) string {
	if withTime {
		return t.Format("Mon 2006-01-02 15:04")
	}
	return t.Format("Mon 2006-01-02")
}

func addReminder(ctx context.Context, st RemindersStore, uid, text string, due time.Time, withTime bool) skills.Result {
	value := struct {
		Text string `json:"text"`
		Due  string `json:"due"`
	}{Text: text, Due: due.Format("2006-01-02")}
	if withTime {
		value.Due = due.Format("2006-01-02T15:04")
	}
	b, err := json.Marshal(value)
	if err != nil {
		return skills.Internal("your reminders", err)
	}
	var key string
	for range 5 {
		key = reminderKey(due)
		_, err := st.Get(ctx, uid, RemindersNamespace, key)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if err != nil {
			return skills.Internal("your reminders", err)
		}
	}
	if err := st.Set(ctx, uid, RemindersNamespace, key, string(b)); err != nil {
		if errors.Is(err, kv.ErrInvalid) {
			return skills.Failf("reminders: %v", err)
		}
		return skills.Internal("your reminders", err)
	}
	return skills.Result{Stdout: []byte(fmt.Sprintf("added %s: %s — %s (%s)\n", key, formatDue(due, withTime), text, due.Location()))}
}

// reminderKey is a readable, practically unique id: the due minute and a random tail.
func reminderKey(due time.Time) string {
	var rnd [2]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand never fails on supported platforms
	return due.Format("20060102-1504") + "-" + hex.EncodeToString(rnd[:])
}

func listReminders(ctx context.Context, st RemindersStore, uid string, now time.Time) skills.Result {
	entries, err := st.List(ctx, uid, RemindersNamespace)
	if err != nil {
		return skills.Internal("your reminders", err)
	}
	if len(entries) == 0 {
		return skills.Result{Stdout: []byte("No reminders.\n")}
	}
	type item struct {
		key string
		rem reminder
		ok  bool
		raw string
	}
	items := make([]item, len(entries))
	for i, e := range entries {
		rem, ok := parseReminder(e.Value, now.Location())
		items[i] = item{key: e.Key, rem: rem, ok: ok, raw: e.Value}
	}
	sort.SliceStable(items, func(i, j int) bool {
		a, b := items[i], items[j]
		if a.ok != b.ok {
			return a.ok
		}
		if !a.rem.Due.Equal(b.rem.Due) {
			return a.rem.Due.Before(b.rem.Due)
		}
		return a.key < b.key
	})
	var b strings.Builder
	fmt.Fprintf(&b, "Times are in %s; now is %s.\n", now.Location(), now.Format("Mon 2006-01-02 15:04"))
	for _, it := range items {
		if !it.ok {
			fmt.Fprintf(&b, "%s\t(not a reminder this skill can read: %s)\n", it.key, oneLine(it.raw, 120))
			continue
		}
		state := ""
		switch {
		case it.rem.Time && it.rem.Due.Before(now), !it.rem.Time && it.rem.Due.Before(startOfDay(now)):
			state = " (overdue)"
		case startOfDay(it.rem.Due).Equal(startOfDay(now)):
			state = " (today)"
		}
		fmt.Fprintf(&b, "%s\t%s%s\t%s\n", it.key, formatDue(it.rem.Due, it.rem.Time), state, oneLine(it.rem.Text, 200))
	}
	return skills.Result{Stdout: []byte(b.String())}
}

func removeReminders(ctx context.Context, st RemindersStore, uid string, keys []string) skills.Result {
	var b, missing strings.Builder
	failed := false
	for _, k := range keys {
		err := st.Delete(ctx, uid, RemindersNamespace, k)
		switch {
		case err == nil:
			fmt.Fprintf(&b, "removed %s\n", k)
		case errors.Is(err, store.ErrNotFound), errors.Is(err, kv.ErrInvalid):
			failed = true
			fmt.Fprintf(&missing, "reminders: no reminder %q (see reminders list)\n", k)
		default:
			return skills.Internal("your reminders", err)
		}
	}
	res := skills.Result{Stdout: []byte(b.String()), Stderr: []byte(missing.String())}
	if failed {
		res.ExitCode = 1
	}
	return res
}
