package userconfig

import (
	"reflect"
	"strings"
	"testing"
)

// md wraps TOML in a Markdown file the way users write it: a heading, prose with
// a commented-out example, then the fenced block. The first TOML line is line 7.
func md(toml string) []byte {
	return []byte("# Config\nProse with <!-- [[jobs]] name = \"x\" --> a comment.\n<!--\n[[jobs]]\n-->\n```toml\n" + toml + "```\n\nMore prose.\n")
}

type wantProblem struct {
	line  int
	field string
	text  string // substring of the message
}

func checkProblems(t *testing.T, got []Problem, want []wantProblem) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d problems %v, want %d %v", len(got), got, len(want), want)
	}
	for i, w := range want {
		g := got[i]
		if g.Line != w.line || g.Field != w.field || !strings.Contains(g.Message, w.text) {
			t.Errorf("problem %d = %q (line %d field %q), want line %d field %q containing %q",
				i, g.String(), g.Line, g.Field, w.line, w.field, w.text)
		}
	}
}

func TestParseCronGood(t *testing.T) {
	src := md(`[[jobs]]
name = "Weekly review"
schedule = "0 17 * * 5"
prompt = """
Summarise my week.
name = "not a key"
"""

[[jobs]]
name = "Backup"
schedule = "@daily"
timezone = "America/New_York"
command = "backup.sh"
email = "me@example.org"
silent_unless_action = true
enabled = false

[[jobs]]
name = "Ping"
schedule = "@every 1h30m"
prompt = 'ping'
conversation = "abc123XY"
`)
	got, problems := ParseCron(src, "Europe/Berlin")
	checkProblems(t, problems, nil)
	want := CronFile{Jobs: []Job{
		{Name: "Weekly review", Line: 7, Schedule: "0 17 * * 5", TZ: "Europe/Berlin", Prompt: "Summarise my week.\nname = \"not a key\"", Enabled: true},
		{Name: "Backup", Line: 15, Schedule: "@daily", TZ: "America/New_York", Command: "backup.sh",
			Target: Target{Email: "me@example.org"}, SilentUnlessAction: true, Enabled: false},
		{Name: "Ping", Line: 24, Schedule: "@every 1h30m", TZ: "Europe/Berlin", Prompt: "ping",
			Target: Target{Conversation: "abc123XY"}, Enabled: true},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

func TestParseCronWithoutFence(t *testing.T) {
	src := []byte("<!-- explained here -->\n[[jobs]]\nname = \"a\" <!-- inline -->\nschedule = \"@hourly\"\nprompt = \"p\"\n")
	got, problems := ParseCron(src, "")
	checkProblems(t, problems, nil)
	if len(got.Jobs) != 1 || got.Jobs[0].Line != 2 || got.Jobs[0].TZ != "UTC" {
		t.Fatalf("got %+v", got)
	}
}

func TestParseCronEmpty(t *testing.T) {
	for _, src := range []string{"", "# Nothing here\n", "<!--\n[[jobs]]\nname = 1\n-->", "```toml\n```\n"} {
		got, problems := ParseCron([]byte(src), "UTC")
		if len(got.Jobs) != 0 || len(problems) != 0 {
			t.Errorf("%q: got %+v %v, want nothing", src, got, problems)
		}
	}
}

func TestParseCronProblems(t *testing.T) {
	const ok = "schedule = \"@daily\"\nprompt = \"p\"\n"
	tests := []struct {
		name     string
		toml     string
		defTZ    string
		keptJobs []string
		want     []wantProblem
	}{
		{"bad toml", "[[jobs]]\nname = \"a\nschedule = 1\n", "UTC", nil,
			[]wantProblem{{8, "", "not valid TOML"}}},
		{"bad cron expression", "[[jobs]]\nname = \"a\"\nschedule = \"61 * * * *\"\nprompt = \"p\"\n[[jobs]]\nname = \"b\"\n" + ok, "UTC", []string{"b"},
			[]wantProblem{{9, "schedule", "not a valid schedule"}}},
		{"six fields", "[[jobs]]\nname = \"a\"\nschedule = \"0 0 0 * * *\"\nprompt = \"p\"\n", "UTC", nil,
			[]wantProblem{{9, "schedule", "five fields"}}},
		{"tz prefix", "[[jobs]]\nname = \"a\"\nschedule = \"CRON_TZ=UTC\"\nprompt = \"p\"\n", "UTC", nil,
			[]wantProblem{{9, "schedule", "timezone setting"}}},
		{"never matches", "[[jobs]]\nname = \"a\"\nschedule = \"0 0 30 2 *\"\nprompt = \"p\"\n", "UTC", nil,
			[]wantProblem{{9, "schedule", "never matches"}}},
		{"every too short", "[[jobs]]\nname = \"a\"\nschedule = \"@every 10s\"\nprompt = \"p\"\n", "UTC", nil,
			[]wantProblem{{9, "schedule", "at least 1m"}}},
		{"missing schedule", "[[jobs]]\nname = \"a\"\nprompt = \"p\"\n", "UTC", nil,
			[]wantProblem{{7, "schedule", "missing"}}},
		{"both prompt and command", "[[jobs]]\nname = \"a\"\nschedule = \"@daily\"\nprompt = \"p\"\ncommand = \"c\"\n", "UTC", nil,
			[]wantProblem{{11, "command", "not both"}}},
		{"neither prompt nor command", "[[jobs]]\nname = \"a\"\nschedule = \"@daily\"\n", "UTC", nil,
			[]wantProblem{{7, "prompt", "needs a prompt"}}},
		{"duplicate name", "[[jobs]]\nname = \"Daily\"\n" + ok + "[[jobs]]\nname = \"daily\"\n" + ok, "UTC", []string{"Daily"},
			[]wantProblem{{12, "name", "line 8"}}},
		{"missing name", "[[jobs]]\n" + ok, "UTC", nil,
			[]wantProblem{{7, "name", "needs a name"}}},
		{"unknown key", "[[jobs]]\nname = \"a\"\n" + ok + "shedule = \"x\"\n", "UTC", nil,
			[]wantProblem{{11, "shedule", "unknown setting"}}},
		{"unknown top-level key", "timezone = \"UTC\"\n[[jobs]]\nname = \"a\"\n" + ok, "UTC", []string{"a"},
			[]wantProblem{{7, "timezone", "unknown setting"}}},
		{"jobs not tables", "jobs = \"x\"\n", "UTC", nil,
			[]wantProblem{{7, "jobs", "[[jobs]]"}}},
		{"bad timezone", "[[jobs]]\nname = \"a\"\ntimezone = \"Mars/Olympus\"\n" + ok, "UTC", nil,
			[]wantProblem{{9, "timezone", "not a known time zone"}}},
		{"local timezone", "[[jobs]]\nname = \"a\"\ntimezone = \"Local\"\n" + ok, "UTC", nil,
			[]wantProblem{{9, "timezone", "not a time zone"}}},
		{"bad default timezone", "[[jobs]]\nname = \"a\"\n" + ok, "Nowhere/Land", []string{"a"},
			[]wantProblem{{0, "timezone", "default time zone"}}},
		{"wrong types", "[[jobs]]\nname = 5\nschedule = true\nprompt = \"p\"\nenabled = \"yes\"\nsilent_unless_action = 1\n", "UTC", nil,
			[]wantProblem{{8, "name", "must be a string"}, {9, "schedule", "must be a string"}, {11, "enabled", "true or false"}, {12, "silent_unless_action", "true or false"}}},
		{"bad targets", "[[jobs]]\nname = \"a\"\n" + ok + "conversation = \"https://cloud/call/x\"\nemail = \"Me <me@x.org>\"\n", "UTC", nil,
			[]wantProblem{{11, "conversation", "conversation token"}, {12, "email", "e-mail address"}}},
		{"both targets", "[[jobs]]\nname = \"a\"\n" + ok + "conversation = \"abc\"\nemail = \"me@x.org\"\n", "UTC", nil,
			[]wantProblem{{12, "email", "not both"}}},
		{"inline tables", "jobs = [\n  { name = \"a\", schedule = \"@daily\", prompt = \"p\" },\n  { name = \"b\", schedule = \"bad\", prompt = \"p\" },\n]\n", "UTC", []string{"a"},
			[]wantProblem{{7, "schedule", "not a valid schedule"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := ParseCron(md(tt.toml), tt.defTZ)
			checkProblems(t, problems, tt.want)
			var kept []string
			for _, j := range got.Jobs {
				kept = append(kept, j.Name)
			}
			if !reflect.DeepEqual(kept, tt.keptJobs) {
				t.Errorf("kept %q, want %q", kept, tt.keptJobs)
			}
		})
	}
}

func TestProblemString(t *testing.T) {
	tests := []struct {
		p    Problem
		want string
	}{
		{Problem{Line: 3, Field: "schedule", Message: "bad"}, "line 3: schedule: bad"},
		{Problem{Message: "bad"}, "bad"},
		{Problem{Field: "timezone", Message: "bad"}, "timezone: bad"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}
