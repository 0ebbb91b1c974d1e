package heartbeat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// failFile makes the shell check of the tests fail while it exists.
func (h *harness) setFailing(uid string, failing bool) {
	h.t.Helper()
	dir := filepath.Join(h.shell.dir, uid)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		h.t.Fatal(err)
	}
	p := filepath.Join(dir, "fail")
	if failing {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			h.t.Fatal(err)
		}
		return
	}
	if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
		h.t.Fatal(err)
	}
}

const failingCommand = `"if [ -e fail ]; then echo 'disk almost full' >&2; exit 3; fi; echo fine"`

// localTimes renders the creation times of messages on the wall clock of loc.
func localTimes(ms []sentMessage, loc *time.Location) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.At.In(loc).Format("01-02 15:04 MST")
	}
	return out
}

// TestIntervalCooldownAndQuietHoursAcrossMidnightAndSpringForward follows one failing
// check through an evening, a night with quiet hours 22:00-07:00 that contains the
// spring-forward change of 2026-03-29 (02:00 CET → 03:00 CEST) and its recovery.
func TestIntervalCooldownAndQuietHoursAcrossMidnightAndSpringForward(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	start := time.Date(2026, 3, 28, 20, 0, 0, 0, berlin)
	h := newHarness(t, start, Options{})
	h.src.setUsers(User{ID: "alice", Timezone: "Europe/Berlin", IsAdmin: true})
	h.privateConversation("alice", "privdm1")
	h.src.write(t, "alice", ConfigFile, heartbeatFile(check("name", `"Disk"`, "kind", `"shell-command"`,
		"command", failingCommand, "interval", `"15m"`, "cooldown", `"2h"`, "quiet_hours", `"22:00-07:00"`)))
	h.setFailing("alice", true)

	h.runOnce()
	if got := h.messages(); len(got) != 1 || !strings.Contains(got[0].Text, "exit status 3") || !strings.Contains(got[0].Text, "disk almost full") {
		t.Fatalf("first failing run: messages %+v, want one alert quoting the output", got)
	}
	if m := h.messages()[0]; m.Token != "privdm1" {
		t.Fatalf("alert went to %q, want the private conversation", m.Token)
	}

	// Within the interval nothing runs; within the cooldown a run records but tells nothing.
	h.clock.Set(start.Add(14 * time.Minute))
	h.runOnce()
	if st := h.state("alice", "Disk"); !st.LastRunAt.Equal(start) || st.ConsecutiveAlerts != 1 {
		t.Fatalf("before the interval: last run %s, consecutive %d; want the first run only", st.LastRunAt, st.ConsecutiveAlerts)
	}
	h.clock.Set(start.Add(15 * time.Minute))
	h.runOnce()
	st := h.state("alice", "Disk")
	if st.ConsecutiveAlerts != 2 || st.Status != StatusAlert || !st.LastAlertAt.Equal(start) {
		t.Fatalf("run in cooldown: %+v; want status alert, 2 consecutive, last alert still the first", st)
	}
	if n := len(h.messages()); n != 1 {
		t.Fatalf("run in cooldown sent a message: %d", n)
	}

	// The cooldown ends at 22:00, when the quiet hours begin; they last across midnight
	// and the DST change until 07:00 CEST.
	h.stepTo(time.Date(2026, 3, 29, 6, 59, 0, 0, berlin))
	if n := len(h.messages()); n != 1 {
		t.Fatalf("messages during quiet hours: %v", localTimes(h.messages()[1:], berlin))
	}
	if st := h.state("alice", "Disk"); !st.InQuietHours || st.ConsecutiveAlerts < 30 {
		t.Fatalf("at 06:59: %+v; want quiet hours and the runs counted", st)
	}
	h.stepTo(time.Date(2026, 3, 29, 7, 0, 0, 0, berlin))
	got := localTimes(h.messages(), berlin)
	want := []string{"03-28 20:00 CET", "03-29 07:00 CEST"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("alerts at %v, want %v", got, want)
	}
	// 20:00 CET to 07:00 CEST is ten real hours: 40 runs after the first.
	if st := h.state("alice", "Disk"); st.ConsecutiveAlerts != 41 {
		t.Fatalf("consecutive alerts %d, want 41 (one run every 15 real minutes)", st.ConsecutiveAlerts)
	}

	// Fixed: the next run tells that it is over, once.
	h.setFailing("alice", false)
	h.stepTo(time.Date(2026, 3, 29, 7, 30, 0, 0, berlin))
	ms := h.messages()
	if len(ms) != 3 || !strings.Contains(ms[2].Text, "fine again") || ms[2].At.In(berlin).Format("15:04") != "07:15" {
		t.Fatalf("after the fix: %+v; want one recovery message at 07:15", ms)
	}
	if st := h.state("alice", "Disk"); st.Status != StatusOK || st.ConsecutiveAlerts != 0 {
		t.Fatalf("after the fix: %+v", st)
	}
}

// TestQuietHoursOnDSTDays checks the wall-clock reading of a quiet window on the two
// change days of Europe/Berlin in 2026: on 2026-10-25 the hour 02:00-03:00 happens twice
// and both are quiet; on 2026-03-29 it does not exist, so nothing is quiet.
func TestQuietHoursOnDSTDays(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	tests := []struct {
		name       string
		from, to   time.Time // UTC
		quiet      string
		wantQuiet  int // minutes of the range in quiet hours
		wantAlerts int
	}{
		{
			name: "fall back: 02:00-03:00 twice", quiet: "02:00-03:00",
			from: time.Date(2026, 10, 24, 23, 0, 0, 0, time.UTC), // 01:00 CEST
			to:   time.Date(2026, 10, 25, 3, 0, 0, 0, time.UTC),  // 04:00 CET
			// 02:00-02:59 CEST and 02:00-02:59 CET: 120 real minutes.
			wantQuiet: 120, wantAlerts: 241 - 120,
		},
		{
			name: "spring forward: 02:00-03:00 never happens", quiet: "02:00-03:00",
			from:      time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC), // 01:00 CET
			to:        time.Date(2026, 3, 29, 2, 0, 0, 0, time.UTC), // 04:00 CEST
			wantQuiet: 0, wantAlerts: 121,
		},
		{
			name: "across midnight on the fall-back night", quiet: "23:30-02:30",
			from: time.Date(2026, 10, 24, 21, 0, 0, 0, time.UTC), // 23:00 CEST
			to:   time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC),  // 03:00 CET
			// 23:30 CEST to 02:30 CEST (180 min), then 02:00-02:29 CET (30 min) again.
			wantQuiet: 210, wantAlerts: 301 - 210,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.from, Options{})
			h.src.setUsers(User{ID: "alice", Timezone: "Europe/Berlin", IsAdmin: true})
			h.privateConversation("alice", "privdm1")
			h.src.write(t, "alice", ConfigFile, heartbeatFile(check("name", `"Disk"`, "kind", `"shell-command"`,
				"command", failingCommand, "interval", `"1m"`, "cooldown", `"0s"`, "quiet_hours", `"`+tt.quiet+`"`)))
			h.setFailing("alice", true)
			quiet := 0
			h.runOnce()
			if h.state("alice", "Disk").InQuietHours {
				quiet++
			}
			for now := tt.from.Add(time.Minute); !now.After(tt.to); now = now.Add(time.Minute) {
				h.clock.Set(now)
				h.runOnce()
				if h.state("alice", "Disk").InQuietHours {
					quiet++
				}
			}
			if quiet != tt.wantQuiet {
				t.Errorf("quiet minutes %d, want %d", quiet, tt.wantQuiet)
			}
			ms := h.messages()
			if len(ms) != tt.wantAlerts {
				t.Errorf("alerts %d, want %d", len(ms), tt.wantAlerts)
			}
			for _, m := range ms {
				local := m.At.In(berlin)
				if min := local.Hour()*60 + local.Minute(); strings.HasPrefix(tt.quiet, "02") && min >= 120 && min < 180 {
					t.Errorf("alert inside quiet hours at %s", local.Format("15:04 MST"))
				}
			}
		})
	}
}

// TestAlertIsKeyedByRun repeats the recording of one run, as a restart after a crash
// would, and finds one message.
func TestAlertIsKeyedByRun(t *testing.T) {
	h := newHarness(t, time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC), Options{})
	u := User{ID: "alice", IsAdmin: true}
	h.src.setUsers(u)
	h.privateConversation("alice", "privdm1")
	h.src.write(t, "alice", ConfigFile, heartbeatFile(check("name", `"Disk"`, "kind", `"shell-command"`, "command", failingCommand)))
	h.setFailing("alice", true)
	if err := h.r.syncUser(t.Context(), u, h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	rows, err := queryRows(t.Context(), h.db.Read, `user_id = 'alice'`)
	if err != nil || len(rows) != 1 {
		t.Fatalf("rows %v, err %v", rows, err)
	}
	out := h.r.evaluate(t.Context(), u, rows[0], h.clock.Now())
	for i := 0; i < 2; i++ {
		if err := h.r.record(t.Context(), u, rows[0], out, h.clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(h.messages()); n != 1 {
		t.Fatalf("the same run recorded twice sent %d messages, want 1", n)
	}
}
