package userconfig

import (
	"reflect"
	"testing"
)

func TestParseBriefingsGood(t *testing.T) {
	src := md(`[[briefings]]
name = "Morning"
schedule = "0 7 * * 1-5"
components = ["calendar", "Todos", "news"]
feeds = ["https://example.org/feed.xml"]

[[briefings]]
name = "Evening"
schedule = "@daily"
output = "both"
conversation = "room42"
email = "me@example.org"
components = ["email", "notes", "reminders"]
enabled = false
`)
	got, problems := ParseBriefings(src)
	checkProblems(t, problems, nil)
	want := BriefingsFile{Briefings: []Briefing{
		{Name: "Morning", Line: 7, Schedule: "0 7 * * 1-5", Output: OutputTalk,
			Components: []Component{ComponentCalendar, ComponentTodos, ComponentNews},
			Feeds:      []string{"https://example.org/feed.xml"}, Enabled: true},
		{Name: "Evening", Line: 13, Schedule: "@daily", Output: OutputBoth,
			Target:     Target{Conversation: "room42", Email: "me@example.org"},
			Components: []Component{ComponentEmail, ComponentNotes, ComponentReminders}, Enabled: false},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

func TestParseBriefingsProblems(t *testing.T) {
	const head = "[[briefings]]\nname = \"a\"\nschedule = \"@daily\"\n" // lines 7-9
	tests := []struct {
		name string
		toml string
		kept []string
		want []wantProblem
	}{
		// The TOML decoder reports a missing bracket where it met the line ending.
		{"bad toml", "[[briefings]\n", nil, []wantProblem{{8, "", "not valid TOML"}}},
		{"bad schedule", "[[briefings]]\nname = \"a\"\nschedule = \"0 25 * * *\"\ncomponents = [\"calendar\"]\n", nil,
			[]wantProblem{{9, "schedule", "not a valid schedule"}}},
		{"missing schedule", "[[briefings]]\nname = \"a\"\ncomponents = [\"calendar\"]\n", nil,
			[]wantProblem{{7, "schedule", "missing"}}},
		{"bad output", head + "output = \"sms\"\ncomponents = [\"calendar\"]\n", nil,
			[]wantProblem{{10, "output", "talk, email or both"}}},
		{"conversation with email output", head + "output = \"email\"\nconversation = \"abc\"\ncomponents = [\"calendar\"]\n", nil,
			[]wantProblem{{11, "conversation", "output is email"}}},
		{"email with talk output", head + "email = \"me@x.org\"\ncomponents = [\"calendar\"]\n", nil,
			[]wantProblem{{10, "email", "output is talk"}}},
		{"no components", head, nil, []wantProblem{{7, "components", "at least one component"}}},
		{"unknown and duplicate component", head + "components = [\"calendar\", \"weather\", \"calendar\"]\n", nil,
			[]wantProblem{{10, "components", "\"weather\" is not a component"}, {10, "components", "listed twice"}}},
		{"components not a list", head + "components = \"calendar\"\n", nil,
			[]wantProblem{{10, "components", "list of strings"}}},
		{"news without feeds", head + "components = [\"news\"]\n", nil,
			[]wantProblem{{7, "feeds", "at least one feed"}}},
		{"feeds without news", head + "components = [\"calendar\"]\nfeeds = [\"https://x.org/f\"]\n", nil,
			[]wantProblem{{11, "feeds", "add \"news\""}}},
		{"bad and duplicate feeds", head + "components = [\"news\"]\nfeeds = [\"file:///etc/passwd\", \"https://x.org/f\", \"https://x.org/f\", 3]\n", nil,
			[]wantProblem{{11, "feeds", "only strings"}}},
		{"bad feed url", head + "components = [\"news\"]\nfeeds = [\"file:///etc/passwd\", \"https://x.org/f\", \"https://x.org/f\"]\n", nil,
			[]wantProblem{{11, "feeds", "https://"}, {11, "feeds", "listed twice"}}},
		{"duplicate names, unknown key", head + "components = [\"calendar\"]\n[[briefings]]\nname = \"A\"\nschedule = \"@daily\"\ncomponents = [\"todos\"]\ntimezone = \"UTC\"\n", []string{"a"},
			[]wantProblem{{12, "name", "already the name"}, {15, "timezone", "unknown setting"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := ParseBriefings(md(tt.toml))
			checkProblems(t, problems, tt.want)
			var kept []string
			for _, b := range got.Briefings {
				kept = append(kept, b.Name)
			}
			if !reflect.DeepEqual(kept, tt.kept) {
				t.Errorf("kept %q, want %q", kept, tt.kept)
			}
		})
	}
}
