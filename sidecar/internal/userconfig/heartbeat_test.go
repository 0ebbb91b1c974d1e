package userconfig

import (
	"reflect"
	"testing"
	"time"
)

func TestParseHeartbeatGood(t *testing.T) {
	src := md(`[[checks]]
name = "Website up"
kind = "url-health"
url = "https://example.org/status"
interval = "5m"
cooldown = "2h"
quiet_hours = "22:00-07:00"

[[checks]]
name = "Plan"
kind = "file-watch"
path = "./Documents//plan.md"

[[checks]]
name = "Disk"
kind = "shell-command"
command = "df -h"
enabled = false
`)
	got, problems := ParseHeartbeat(src, true)
	checkProblems(t, problems, nil)
	want := HeartbeatFile{Checks: []Check{
		{Name: "Website up", Line: 7, Kind: CheckURLHealth, Interval: 5 * time.Minute, Cooldown: 2 * time.Hour,
			Quiet: QuietHours{Start: 22 * 60, End: 7 * 60}, Enabled: true, URL: "https://example.org/status"},
		{Name: "Plan", Line: 15, Kind: CheckFileWatch, Interval: DefaultCheckInterval, Cooldown: DefaultCheckCooldown,
			Enabled: true, Path: "Documents/plan.md"},
		{Name: "Disk", Line: 20, Kind: CheckShellCommand, Interval: DefaultCheckInterval, Cooldown: DefaultCheckCooldown,
			Command: "df -h"},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

func TestParseHeartbeatProblems(t *testing.T) {
	tests := []struct {
		name    string
		toml    string
		isAdmin bool
		kept    []string
		want    []wantProblem
	}{
		{"shell for users", "[[checks]]\nname = \"a\"\nkind = \"shell-command\"\ncommand = \"true\"\n", false, nil,
			[]wantProblem{{9, "kind", "administrators only"}}},
		{"unknown kind", "[[checks]]\nname = \"a\"\nkind = \"ping\"\n[[checks]]\nname = \"b\"\nkind = \"self-check\"\n", false, []string{"b"},
			[]wantProblem{{9, "kind", "not a check"}}},
		{"missing kind", "[[checks]]\nname = \"a\"\n", false, nil,
			[]wantProblem{{7, "kind", "needs a kind"}}},
		{"interval too short", "[[checks]]\nname = \"a\"\nkind = \"self-check\"\ninterval = \"30s\"\n", false, nil,
			[]wantProblem{{10, "interval", "at least 1m"}}},
		{"interval not a duration", "[[checks]]\nname = \"a\"\nkind = \"self-check\"\ninterval = \"often\"\ncooldown = 5\n", false, nil,
			[]wantProblem{{10, "interval", "not a duration"}, {11, "cooldown", "duration in quotes"}}},
		{"negative cooldown", "[[checks]]\nname = \"a\"\nkind = \"self-check\"\ncooldown = \"-1h\"\n", false, nil,
			[]wantProblem{{10, "cooldown", "negative"}}},
		{"bad quiet hours", "[[checks]]\nname = \"a\"\nkind = \"self-check\"\nquiet_hours = \"22-7\"\n[[checks]]\nname = \"b\"\nkind = \"self-check\"\nquiet_hours = \"08:00-08:00\"\n", false, nil,
			[]wantProblem{{10, "quiet_hours", "like \"22:00-07:00\""}, {14, "quiet_hours", "same time"}}},
		{"url scheme", "[[checks]]\nname = \"a\"\nkind = \"url-health\"\nurl = \"ftp://example.org/\"\n", false, nil,
			[]wantProblem{{10, "url", "https://"}}},
		{"url credentials", "[[checks]]\nname = \"a\"\nkind = \"url-health\"\nurl = \"https://bob:secret@example.org/\"\n", false, nil,
			[]wantProblem{{10, "url", "no credentials"}}},
		{"url missing", "[[checks]]\nname = \"a\"\nkind = \"url-health\"\n", false, nil,
			[]wantProblem{{7, "url", "needs url"}}},
		{"url on wrong kind", "[[checks]]\nname = \"a\"\nkind = \"self-check\"\nurl = \"https://example.org/\"\n", false, nil,
			[]wantProblem{{10, "url", "only used by url-health"}}},
		{"absolute path", "[[checks]]\nname = \"a\"\nkind = \"file-watch\"\npath = \"/etc/passwd\"\n", false, nil,
			[]wantProblem{{10, "path", "relative"}}},
		{"dotdot path", "[[checks]]\nname = \"a\"\nkind = \"file-watch\"\npath = \"a/../../b\"\n", false, nil,
			[]wantProblem{{10, "path", "inside your folder"}}},
		{"whole folder", "[[checks]]\nname = \"a\"\nkind = \"file-watch\"\npath = \"./\"\n", false, nil,
			[]wantProblem{{10, "path", "whole folder"}}},
		{"command missing", "[[checks]]\nname = \"a\"\nkind = \"shell-command\"\n", true, nil,
			[]wantProblem{{7, "command", "needs command"}}},
		{"duplicate and unknown", "[[checks]]\nname = \"a\"\nkind = \"self-check\"\n[[checks]]\nname = \"A\"\nkind = \"self-check\"\nevery = \"5m\"\n", false, []string{"a"},
			[]wantProblem{{11, "name", "already the name"}, {13, "every", "unknown setting"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := ParseHeartbeat(md(tt.toml), tt.isAdmin)
			checkProblems(t, problems, tt.want)
			var kept []string
			for _, c := range got.Checks {
				kept = append(kept, c.Name)
			}
			if !reflect.DeepEqual(kept, tt.kept) {
				t.Errorf("kept %q, want %q", kept, tt.kept)
			}
		})
	}
}

func TestQuietHoursContains(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(h, m int) time.Time { return time.Date(2025, 3, 1, h, m, 0, 0, berlin) }
	tests := []struct {
		window string
		t      time.Time
		want   bool
	}{
		{"22:00-07:00", at(23, 30), true},
		{"22:00-07:00", at(22, 0), true},
		{"22:00-07:00", at(0, 0), true},
		{"22:00-07:00", at(6, 59), true},
		{"22:00-07:00", at(7, 0), false},
		{"22:00-07:00", at(12, 0), false},
		{"22:00-07:00", at(21, 59), false},
		{"12:00-13:30", at(12, 45), true},
		{"12:00-13:30", at(13, 30), false},
		{"12:00-13:30", at(11, 59), false},
		// 21:30 UTC is 22:30 in Berlin in winter: the caller's location decides.
		{"22:00-07:00", time.Date(2025, 3, 1, 21, 30, 0, 0, time.UTC), false},
		{"22:00-07:00", time.Date(2025, 3, 1, 21, 30, 0, 0, time.UTC).In(berlin), true},
	}
	for _, tt := range tests {
		q, err := ParseQuietHours(tt.window)
		if err != nil {
			t.Fatal(err)
		}
		if got := q.Contains(tt.t); got != tt.want {
			t.Errorf("%s contains %s = %v, want %v", tt.window, tt.t.Format("15:04 MST"), got, tt.want)
		}
		if q.String() != tt.window {
			t.Errorf("String() = %q, want %q", q.String(), tt.window)
		}
	}
	if (QuietHours{}).Contains(at(0, 0)) {
		t.Error("zero QuietHours contains midnight")
	}
}
