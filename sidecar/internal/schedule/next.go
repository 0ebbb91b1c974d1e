package schedule

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/istota/istota/sidecar/internal/userconfig"
)

// NextRun is the first run of a cron expression (five fields or a descriptor) in the
// IANA zone tz strictly after "after", in UTC. Briefings and the sleep cycle schedule
// with it too, so every wall-clock schedule settles DST the same way.
func NextRun(expr, tz string, after time.Time) (time.Time, error) { return nextRun(expr, tz, after) }

// nextRun is the first run of a job strictly after "after".
//
// Cron fields describe wall-clock times, so they are matched on the local wall clock
// of the job's zone rather than on instants, which settles the two DST cases the way
// classic cron does:
//   - a wall time that does not exist (02:30 on the spring-forward day in
//     Europe/Berlin) runs at the first instant after the gap (03:00 local), once;
//     several skipped times collapse into that one run;
//   - a wall time that exists twice (02:30 on the fall-back day) runs once, at its
//     first occurrence, because each wall time is matched once.
//
// "@every" intervals are real durations and are computed on instants.
func nextRun(expr, tz string, after time.Time) (time.Time, error) {
	loc, err := time.LoadLocation(tz)
	if err != nil || tz == "" {
		return time.Time{}, fmt.Errorf("time zone %q: unknown", tz)
	}
	sched, err := userconfig.ParseSchedule(expr, time.UTC)
	if err != nil {
		return time.Time{}, err
	}
	spec, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return sched.Next(after).UTC(), nil
	}
	// wall is the local wall clock expressed as a UTC time, so that the spec (with
	// Location UTC) walks wall-clock minutes without any DST jumps.
	wall := asWall(after.In(loc))
	for i := 0; i < 10000; i++ {
		wall = spec.Next(wall)
		if wall.IsZero() {
			return time.Time{}, fmt.Errorf("%q never matches again", expr)
		}
		if t, ok := instant(wall, loc, after); ok {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q: no next run found", expr)
}

// asWall drops the zone of t, keeping its wall clock.
func asWall(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// instant maps a wall-clock time in loc to the earliest instant after "after" that shows
// it; a wall time inside a DST gap maps to the end of the gap. ok is false when every
// instant showing the wall time is not after "after" (or, for a gap, when the gap's end
// is not), so the caller moves on to the next wall time.
func instant(wall time.Time, loc *time.Location, after time.Time) (time.Time, bool) {
	// The zone offsets in force a few hours either side bound every instant whose wall
	// clock can equal wall (no zone shifts twice within six hours).
	_, offBefore := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), 0, 0, loc).Add(-6 * time.Hour).Zone()
	_, offAfter := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), 0, 0, loc).Add(6 * time.Hour).Zone()
	candidates := []time.Time{
		wall.Add(-time.Duration(offBefore) * time.Second),
		wall.Add(-time.Duration(offAfter) * time.Second),
	}
	if candidates[1].Before(candidates[0]) {
		candidates[0], candidates[1] = candidates[1], candidates[0]
	}
	exists := false
	for _, c := range candidates {
		if asWall(c.In(loc)).Equal(wall) {
			exists = true
			if c.After(after) {
				return c, true
			}
		}
	}
	if exists {
		return time.Time{}, false
	}
	// A gap: the first instant whose wall clock is past wall is where the clock jumped.
	lo, hi := candidates[0], candidates[1]
	if offAfter > offBefore {
		lo, hi = wall.Add(-time.Duration(offAfter)*time.Second), wall.Add(-time.Duration(offBefore)*time.Second)
	}
	for lo.Before(hi) {
		mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Second)
		if mid.Equal(lo) {
			break
		}
		if asWall(mid.In(loc)).Before(wall) {
			lo = mid
		} else {
			hi = mid
		}
	}
	if hi.After(after) {
		return hi, true
	}
	return time.Time{}, false
}
