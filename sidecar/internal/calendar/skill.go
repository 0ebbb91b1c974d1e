package calendar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/davshare"
	"github.com/istota/istota/sidecar/internal/skills"
)

const skillUsage = `calendar list-calendars [--json]
calendar events --from TIME --to TIME [--calendar CAL] [--tz ZONE] [--json]
calendar create --calendar CAL --summary TEXT --start TIME --end TIME [--location TEXT] [--description TEXT] [--tz ZONE] [--json]
calendar update UID [--calendar CAL] [--summary TEXT] [--start TIME] [--end TIME] [--location TEXT] [--description TEXT] [--tz ZONE] [--json]
calendar delete UID [--calendar CAL]
CAL is a calendar id or name from list-calendars; only calendars you shared with the bot account are reachable.
TIME is RFC 3339 (2025-03-01T09:00:00+01:00), a local time 2025-03-01T09:00 in --tz (an IANA zone, default UTC),
or a date 2025-03-01: a start and end that are both dates make an all-day event, and the end date is exclusive.
Recurring events are listed occurrence by occurrence; update refuses them and delete removes the whole series.`

// RegisterSkill registers the calendar skill, which works on the calendars the invoking
// user shared with the bot account and on no others. The bot's credentials stay in the
// client: the skill declares no environment.
func RegisterSkill(reg *skills.Registry, client *Client, choose Choice) error {
	if client == nil {
		return fmt.Errorf("calendar: register skill: no client")
	}
	return reg.Register(skills.Skill{
		Manifest: skills.Manifest{
			Name:     "calendar",
			Summary:  "list, create, update and delete events in the calendars you shared with the bot",
			Usage:    skillUsage,
			Classify: classify,
			Load: skills.Load{Keywords: []string{
				"calendar", "event", "meeting", "appointment", "schedul", "agenda", "busy", "free time", "termin", "kalender",
				"today", "tomorrow", "week", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
			}},
		},
		Run: func(ctx context.Context, inv skills.Invocation) skills.Result {
			return runSkill(ctx, client, choose, inv)
		},
	})
}

// classify: reading is read; creating, changing and deleting events writes a calendar
// others may see, which is external.
func classify(_ context.Context, inv skills.Invocation) approval.Action {
	if len(inv.Args) == 0 {
		return approval.Action{Tier: approval.TierRead}
	}
	switch inv.Args[0] {
	case "create", "update", "delete":
		verb := map[string]string{"create": "Create", "update": "Change", "delete": "Delete"}[inv.Args[0]]
		what := "a calendar event"
		if inv.Args[0] != "create" && len(inv.Args) > 1 {
			what = "the calendar event " + inv.Args[1]
		}
		return approval.Action{Tier: approval.TierExternal,
			Summary: fmt.Sprintf("%s %s: %s", verb, what, strings.Join(inv.Args[1:], " "))}
	}
	return approval.Action{Tier: approval.TierRead}
}

func runSkill(ctx context.Context, c *Client, choose Choice, inv skills.Invocation) skills.Result {
	if len(inv.Args) == 0 {
		return skills.Usagef("usage:\n%s", skillUsage)
	}
	if inv.UserID == "" {
		return skills.Failf("calendar: no user for this task")
	}
	r := &skillRun{c: c, user: inv.UserID, choose: choose}
	args := inv.Args[1:]
	switch inv.Args[0] {
	case "list-calendars":
		return r.listCalendars(ctx, args)
	case "events":
		return r.events(ctx, args)
	case "create":
		return r.create(ctx, args)
	case "update":
		return r.update(ctx, args)
	case "delete":
		return r.delete(ctx, args)
	}
	return skills.Usagef("calendar: unknown subcommand %q\nusage:\n%s", inv.Args[0], skillUsage)
}

type skillRun struct {
	c      *Client
	user   string
	choose Choice
}

// eventFlags are the flags shared by create and update.
type eventFlags struct {
	calendar, summary, start, end, location, description, tz string
	json                                                     bool
}

func newFlagSet(name string, f *eventFlags, withEvent bool) *flag.FlagSet {
	fs := flag.NewFlagSet("calendar "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.calendar, "calendar", "", "calendar id or name")
	fs.StringVar(&f.tz, "tz", "", "IANA time zone for local times")
	fs.BoolVar(&f.json, "json", false, "print JSON")
	if withEvent {
		fs.StringVar(&f.summary, "summary", "", "title")
		fs.StringVar(&f.start, "start", "", "start time")
		fs.StringVar(&f.end, "end", "", "end time")
		fs.StringVar(&f.location, "location", "", "location")
		fs.StringVar(&f.description, "description", "", "description")
	}
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%s: %v", fs.Name(), err)
	}
	return nil
}

// splitUID takes the UID operand of update/delete, before or after the flags.
func splitUID(fs *flag.FlagSet, args []string) (string, error) {
	var uid string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		uid, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return "", err
	}
	rest := fs.Args()
	if uid == "" && len(rest) > 0 {
		uid, rest = rest[0], rest[1:]
	}
	if uid == "" || len(rest) > 0 {
		return "", fmt.Errorf("%s: give exactly one UID", fs.Name())
	}
	return uid, nil
}

// mine lists the user's calendars, or the one named, refusing every other calendar.
func (r *skillRun) mine(ctx context.Context, name string) ([]Calendar, *skills.Result) {
	all, err := r.c.Calendars(ctx)
	if err != nil {
		res := skills.Internal("the calendar server", err)
		return nil, &res
	}
	cals, err := Usable(ctx, all, r.user, r.choose)
	if err != nil {
		res := skills.Internal("the calendar settings", err)
		return nil, &res
	}
	picked, err := davshare.Pick(cals, name, "calendars", "calendar list-calendars", r.c.user)
	if err != nil {
		res := skills.Failf("calendar: %v", err)
		return nil, &res
	}
	return picked, nil
}

func (r *skillRun) listCalendars(ctx context.Context, args []string) skills.Result {
	var f eventFlags
	fs := newFlagSet("list-calendars", &f, false)
	if err := parseFlags(fs, args); err != nil || fs.NArg() > 0 || f.calendar != "" {
		return skills.Usagef("usage: istota skill calendar list-calendars [--json]")
	}
	cals, res := r.mine(ctx, "")
	if res != nil {
		return *res
	}
	return collectionsResult(cals, f.json, fmt.Sprintf("no calendars: share a calendar with the user %q in Nextcloud Calendar to use it here", r.c.user))
}

// collectionsResult lists calendars or task lists as "ID<tab>name" lines or as JSON,
// saying none (how to share one with the bot) when there are none.
func collectionsResult(cols []Calendar, asJSON bool, none string) skills.Result {
	if asJSON {
		out := make([]calendarJSON, 0, len(cols))
		for _, c := range cols {
			out = append(out, calendarJSON{ID: c.ID, Name: c.Name})
		}
		return jsonResult(out)
	}
	if len(cols) == 0 {
		return skills.Result{Stdout: []byte(none + "\n")}
	}
	var b strings.Builder
	for _, c := range cols {
		fmt.Fprintf(&b, "%s\t%s\n", c.ID, c.Name)
	}
	return skills.Result{Stdout: []byte(b.String())}
}

func (r *skillRun) events(ctx context.Context, args []string) skills.Result {
	var f eventFlags
	var from, to string
	fs := newFlagSet("events", &f, false)
	fs.StringVar(&from, "from", "", "range start")
	fs.StringVar(&to, "to", "", "range end")
	if err := parseFlags(fs, args); err != nil || fs.NArg() > 0 || from == "" || to == "" {
		return skills.Usagef("usage: istota skill calendar events --from TIME --to TIME [--calendar CAL] [--tz ZONE] [--json]")
	}
	loc, err := zone(f.tz)
	if err != nil {
		return skills.Usagef("calendar events: %v", err)
	}
	start, _, err := parseSkillTime(from, loc)
	if err != nil {
		return skills.Usagef("calendar events: --from: %v", err)
	}
	end, _, err := parseSkillTime(to, loc)
	if err != nil {
		return skills.Usagef("calendar events: --to: %v", err)
	}
	if !end.After(start) {
		return skills.Usagef("calendar events: --to must be after --from")
	}
	cals, res := r.mine(ctx, f.calendar)
	if res != nil {
		return *res
	}
	var out []eventJSON
	for _, cal := range cals {
		evs, err := r.c.Events(ctx, cal, start, end)
		if err != nil {
			return skills.Internal("the calendar server", err)
		}
		for _, e := range evs {
			out = append(out, toJSON(cal, e, f.tz != "", loc))
		}
	}
	if f.json {
		if out == nil {
			out = []eventJSON{}
		}
		return jsonResult(out)
	}
	if len(out) == 0 {
		return skills.Result{Stdout: []byte("no events in that range\n")}
	}
	var b strings.Builder
	for _, e := range out {
		writeEvent(&b, e)
	}
	return skills.Result{Stdout: []byte(b.String())}
}

func (r *skillRun) create(ctx context.Context, args []string) skills.Result {
	var f eventFlags
	fs := newFlagSet("create", &f, true)
	if err := parseFlags(fs, args); err != nil || fs.NArg() > 0 || f.calendar == "" || f.summary == "" || f.start == "" || f.end == "" {
		return skills.Usagef("usage: istota skill calendar create --calendar CAL --summary TEXT --start TIME --end TIME [--location TEXT] [--description TEXT] [--tz ZONE] [--json]")
	}
	ev := Event{Summary: f.summary, Location: f.location, Description: f.description}
	if res := setTimes(&ev, f, true, true); res != nil {
		return *res
	}
	cals, res := r.mine(ctx, f.calendar)
	if res != nil {
		return *res
	}
	created, err := r.c.Create(ctx, cals[0], ev)
	if err != nil {
		return r.fail("create", err)
	}
	return r.printOne(cals[0], created, "created", f)
}

func (r *skillRun) update(ctx context.Context, args []string) skills.Result {
	var f eventFlags
	fs := newFlagSet("update", &f, true)
	uid, err := splitUID(fs, args)
	if err != nil {
		return skills.Usagef("%v\nusage: istota skill calendar update UID [--calendar CAL] [--summary TEXT] [--start TIME] [--end TIME] [--location TEXT] [--description TEXT] [--tz ZONE] [--json]", err)
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if !set["summary"] && !set["start"] && !set["end"] && !set["location"] && !set["description"] {
		return skills.Usagef("calendar update: nothing to change: give --summary, --start, --end, --location or --description")
	}
	cal, ev, res := r.find(ctx, f.calendar, uid)
	if res != nil {
		return *res
	}
	if set["summary"] {
		ev.Summary = f.summary
	}
	if set["location"] {
		ev.Location = f.location
	}
	if set["description"] {
		ev.Description = f.description
	}
	if res := setTimes(&ev, f, set["start"], set["end"]); res != nil {
		return *res
	}
	updated, err := r.c.Update(ctx, cal, ev)
	if err != nil {
		return r.fail("update", err)
	}
	return r.printOne(cal, updated, "updated", f)
}

func (r *skillRun) delete(ctx context.Context, args []string) skills.Result {
	var f eventFlags
	fs := newFlagSet("delete", &f, false)
	uid, err := splitUID(fs, args)
	if err != nil {
		return skills.Usagef("%v\nusage: istota skill calendar delete UID [--calendar CAL]", err)
	}
	cal, ev, res := r.find(ctx, f.calendar, uid)
	if res != nil {
		return *res
	}
	if err := r.c.Delete(ctx, cal, ev); err != nil {
		return r.fail("delete", err)
	}
	return skills.Result{Stdout: fmt.Appendf(nil, "deleted %s (%s) from %s\n", ev.UID, ev.Summary, cal.ID)}
}

// find looks for uid only in the user's own calendars.
func (r *skillRun) find(ctx context.Context, calName, uid string) (Calendar, Event, *skills.Result) {
	cals, res := r.mine(ctx, calName)
	if res != nil {
		return Calendar{}, Event{}, res
	}
	for _, cal := range cals {
		ev, err := r.c.Find(ctx, cal, uid)
		if err == nil {
			return cal, ev, nil
		}
		if !errors.Is(err, ErrNotFound) {
			res := r.fail("find", err)
			return Calendar{}, Event{}, &res
		}
	}
	missing := skills.Failf("calendar: no event %q in your calendars", uid)
	return Calendar{}, Event{}, &missing
}

func (r *skillRun) fail(op string, err error) skills.Result {
	switch {
	case errors.Is(err, ErrNotFound):
		return skills.Failf("calendar %s: the event no longer exists", op)
	case errors.Is(err, ErrPrecondition):
		return skills.Failf("calendar %s: the event was changed by someone else meanwhile; read it again and retry", op)
	case errors.Is(err, ErrRecurring):
		return skills.Failf("calendar %s: this is a recurring event; change it in Nextcloud Calendar", op)
	case errors.Is(err, ErrReadOnly):
		return skills.Failf("calendar %s: this calendar is shared with the bot read-only; share it with \"can edit\" in Nextcloud Calendar to let the bot change it", op)
	case errors.Is(err, ErrInvalid):
		return skills.Usagef("calendar %s: %s", op, strings.TrimPrefix(err.Error(), "calendar: "))
	}
	return skills.Internal("the calendar server", err)
}

// setTimes applies --start/--end (those given) and --tz to ev. Both dates make an
// all-day event; a date mixed with a time is refused.
func setTimes(ev *Event, f eventFlags, haveStart, haveEnd bool) *skills.Result {
	loc, err := zone(f.tz)
	if err != nil {
		res := skills.Usagef("calendar: %v", err)
		return &res
	}
	startDay, endDay := ev.AllDay, ev.AllDay
	if haveStart {
		if ev.Start, startDay, err = parseSkillTime(f.start, loc); err != nil {
			res := skills.Usagef("calendar: --start: %v", err)
			return &res
		}
	}
	if haveEnd {
		if ev.End, endDay, err = parseSkillTime(f.end, loc); err != nil {
			res := skills.Usagef("calendar: --end: %v", err)
			return &res
		}
	}
	if startDay != endDay {
		res := skills.Usagef("calendar: --start and --end must both be dates (all-day) or both be times")
		return &res
	}
	ev.AllDay = startDay
	if !ev.End.After(ev.Start) {
		res := skills.Usagef("calendar: the end must be after the start (for all-day events the end date is exclusive)")
		return &res
	}
	return nil
}

func zone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil || name == "Local" {
		return nil, fmt.Errorf("--tz %q is not an IANA time zone", name)
	}
	return loc, nil
}

// parseSkillTime reads RFC 3339, a local date-time in loc, or a date (midnight UTC,
// reported as a date).
func parseSkillTime(s string, loc *time.Location) (time.Time, bool, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, false, nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04"} {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t, false, nil
		}
	}
	if t, err := time.ParseInLocation("2006-01-02", s, time.UTC); err == nil {
		return t, true, nil
	}
	return time.Time{}, false, fmt.Errorf("%q is not a time (use 2025-03-01T09:00:00+01:00, 2025-03-01T09:00 or 2025-03-01)", s)
}

type calendarJSON struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

type eventJSON struct {
	Calendar     string `json:"calendar"`
	UID          string `json:"uid"`
	Summary      string `json:"summary"`
	Start        string `json:"start"`
	End          string `json:"end"`
	AllDay       bool   `json:"all_day"`
	Location     string `json:"location,omitempty"`
	Description  string `json:"description,omitempty"`
	RecurrenceID string `json:"recurrence_id,omitempty"`
}

func toJSON(cal Calendar, e Event, convert bool, loc *time.Location) eventJSON {
	out := eventJSON{Calendar: cal.ID, UID: e.UID, Summary: e.Summary, AllDay: e.AllDay, Location: e.Location, Description: e.Description}
	if e.AllDay {
		out.Start, out.End = e.Start.Format(time.DateOnly), e.End.Format(time.DateOnly)
	} else {
		s, en := e.Start, e.End
		if convert {
			s, en = s.In(loc), en.In(loc)
		}
		out.Start, out.End = s.Format(time.RFC3339), en.Format(time.RFC3339)
	}
	if e.Recurring() {
		out.RecurrenceID = e.RecurrenceID.Format(time.RFC3339)
	}
	return out
}

func writeEvent(b *strings.Builder, e eventJSON) {
	when := e.Start + " – " + e.End
	if e.AllDay {
		when = e.Start + " – " + e.End + " (all day, end exclusive)"
	}
	fmt.Fprintf(b, "%s  %s\n  calendar: %s  uid: %s\n", when, e.Summary, e.Calendar, e.UID)
	if e.RecurrenceID != "" {
		b.WriteString("  recurring\n")
	}
	if e.Location != "" {
		fmt.Fprintf(b, "  location: %s\n", e.Location)
	}
	if e.Description != "" {
		fmt.Fprintf(b, "  description: %s\n", strings.ReplaceAll(e.Description, "\n", "\n    "))
	}
}

func (r *skillRun) printOne(cal Calendar, e Event, verb string, f eventFlags) skills.Result {
	loc, _ := zone(f.tz) // already validated by setTimes
	j := toJSON(cal, e, f.tz != "", loc)
	if f.json {
		return jsonResult(j)
	}
	var b strings.Builder
	b.WriteString(verb + ": ")
	writeEvent(&b, j)
	return skills.Result{Stdout: []byte(b.String())}
}

func jsonResult(v any) skills.Result { return skills.JSON(v) }
