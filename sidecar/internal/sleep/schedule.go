package sleep

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// DefaultCron runs the sleep cycle at 03:00 local time.
const DefaultCron = "0 3 * * *"

// Schedule says when the nightly run is due, in a namespace's own timezone.
//
// The cron expression is evaluated on the local wall clock, not on instants, so that a
// daily run happens exactly once per local day across daylight-saving changes: a time
// skipped by the spring change (02:30 in Europe/Berlin) runs at the first instant after
// the gap instead of not at all, and a time repeated by the autumn change runs only at
// its first occurrence. (cron.Schedule.Next alone skips the first and repeats the
// second.)
type Schedule struct {
	expr  string
	sched cron.Schedule
}

// ParseSchedule parses a standard five-field cron expression or a descriptor such as
// "@daily"; "" means DefaultCron. A CRON_TZ= or TZ= prefix is refused: the timezone is
// the namespace's (the user's, or UTC for channels).
func ParseSchedule(expr string) (Schedule, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		expr = DefaultCron
	}
	if strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=") {
		return Schedule{}, fmt.Errorf("sleep: cron %q: no timezone prefix, the user's timezone applies", expr)
	}
	s, err := cron.ParseStandard(expr)
	if err != nil {
		return Schedule{}, fmt.Errorf("sleep: cron %q: %w", expr, err)
	}
	return Schedule{expr: expr, sched: s}, nil
}

// String is the expression.
func (s Schedule) String() string { return s.expr }

// wall is t's local wall-clock reading as a UTC time (no daylight saving there).
func wall(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// Next returns the first activation strictly after the instant after, in loc.
func (s Schedule) Next(loc *time.Location, after time.Time) time.Time {
	if loc == nil {
		loc = time.UTC
	}
	w := wall(after.In(loc))
	for range 1000 {
		w = s.sched.Next(w)
		if w.IsZero() {
			return time.Time{} // the expression never fires (e.g. 30 February)
		}
		for _, t := range resolve(w, loc) {
			if t.After(after) {
				return t
			}
		}
	}
	return time.Time{}
}

// Due reports whether an activation fell after lastRun and at or before now. A
// namespace that never ran (zero lastRun) has nothing to measure from and is not due:
// Cycle.Due records a starting point for it first.
func (s Schedule) Due(loc *time.Location, lastRun, now time.Time) bool {
	if lastRun.IsZero() {
		return false
	}
	next := s.Next(loc, lastRun)
	return !next.IsZero() && !next.After(now)
}

// resolve maps a wall-clock reading to the instants it denotes in loc, earliest first:
// one normally, two in an autumn fold, and, for a reading in a spring gap, the instant
// the gap ends.
func resolve(w time.Time, loc *time.Location) []time.Time {
	t := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	if wall(t).Equal(w) {
		// In a fold the same reading is also valid one offset change earlier or later.
		var out []time.Time
		for _, c := range []time.Time{t.Add(-shift(t)), t, t.Add(shift(t))} {
			if wall(c.In(loc)).Equal(w) && (len(out) == 0 || c.After(out[len(out)-1])) {
				out = append(out, c)
			}
		}
		return out
	}
	// A gap: the first instant whose zone starts after the reading's nominal time.
	start, end := t.ZoneBounds()
	for _, b := range []time.Time{start, end} {
		if !b.IsZero() && absDur(b.Sub(t)) <= 24*time.Hour && wall(b.In(loc)).After(w) {
			return []time.Time{b}
		}
	}
	return []time.Time{t}
}

// shift is the size of the offset change nearest to t (an hour when none is near, which
// then finds no second reading).
func shift(t time.Time) time.Duration {
	_, off := t.Zone()
	for _, d := range []time.Duration{-12 * time.Hour, 12 * time.Hour} {
		if _, o := t.Add(d).Zone(); o != off {
			return absDur(time.Duration(o-off) * time.Second)
		}
	}
	return time.Hour
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
