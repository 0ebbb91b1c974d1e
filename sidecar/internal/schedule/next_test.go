package schedule

import (
	"testing"
	"time"
)

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestNextRun pins the DST rules documented on nextRun: a wall time skipped by the
// spring-forward change runs at 03:00 local, a repeated one runs at its first occurrence.
func TestNextRun(t *testing.T) {
	berlin := mustLoc(t, "Europe/Berlin")
	at := func(y int, m time.Month, d, h, min int, loc *time.Location) time.Time {
		return time.Date(y, m, d, h, min, 0, 0, loc)
	}
	utc := func(y int, m time.Month, d, h, min int) time.Time { return at(y, m, d, h, min, time.UTC) }
	tests := []struct {
		name, expr, tz string
		after          time.Time
		want           time.Time
	}{
		{"plain daily", "30 7 * * *", "Europe/Berlin", at(2026, 6, 1, 8, 0, berlin), at(2026, 6, 2, 7, 30, berlin)},
		{"spring forward gap runs at 03:00", "30 2 * * *", "Europe/Berlin", at(2026, 3, 28, 12, 0, berlin), utc(2026, 3, 29, 1, 0)},
		{"day after spring forward", "30 2 * * *", "Europe/Berlin", utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)},
		{"fall back first occurrence", "30 2 * * *", "Europe/Berlin", at(2026, 10, 24, 12, 0, berlin), utc(2026, 10, 25, 0, 30)},
		{"fall back no second run", "30 2 * * *", "Europe/Berlin", utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)},
		{"created inside the repeated hour", "30 2 * * *", "Europe/Berlin", utc(2026, 10, 25, 1, 10), utc(2026, 10, 25, 1, 30)},
		{"quarter hours in the gap collapse", "*/15 2 * * *", "Europe/Berlin", utc(2026, 3, 29, 0, 50), utc(2026, 3, 29, 1, 0)},
		{"after the collapsed run", "*/15 2 * * *", "Europe/Berlin", utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 0)},
		{"hourly skips the repeated wall hour", "0 * * * *", "Europe/Berlin", utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 2, 0)},
		{"every is real time", "@every 1h", "Europe/Berlin", utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 1, 0)},
		{"descriptor in zone", "@daily", "America/New_York", utc(2026, 1, 1, 12, 0), utc(2026, 1, 2, 5, 0)},
		{"strictly after", "0 9 * * *", "UTC", utc(2026, 1, 1, 9, 0), utc(2026, 1, 2, 9, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := nextRun(tt.expr, tt.tz, tt.after)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(tt.want) {
				t.Errorf("nextRun(%q, %s, %s) = %s (%s), want %s", tt.expr, tt.tz, tt.after.UTC(), got, got.In(mustLoc(t, tt.tz)), tt.want.UTC())
			}
		})
	}
	if _, err := nextRun("61 * * * *", "UTC", time.Now()); err == nil {
		t.Error("bad expression accepted")
	}
	if _, err := nextRun("@daily", "Mars/Base", time.Now()); err == nil {
		t.Error("bad zone accepted")
	}
}
