package userconfig

import (
	"reflect"
	"testing"
)

func TestParseBriefingsWithDefaults(t *testing.T) {
	const head = "[[briefings]]\nname = \"a\"\nschedule = \"@daily\"\n" // lines 7-9
	withBoth := BriefingDefaults{Components: []Component{ComponentCalendar, ComponentNews}, Feeds: []string{"https://admin.example/feed"}}
	tests := []struct {
		name     string
		toml     string
		defaults BriefingDefaults
		want     []Component
		feeds    []string
		problems []wantProblem
	}{
		{"components left to the defaults", head, withBoth, []Component{ComponentCalendar, ComponentNews}, nil, nil},
		{"the user's components win", head + "components = [\"todos\"]\n", withBoth, []Component{ComponentTodos}, nil, nil},
		{"news without own feeds uses the admin's", head + "components = [\"news\"]\n", BriefingDefaults{Feeds: []string{"https://admin.example/feed"}},
			[]Component{ComponentNews}, nil, nil},
		{"own feeds stay the briefing's", head + "components = [\"news\"]\nfeeds = [\"https://me.example/f\"]\n", withBoth,
			[]Component{ComponentNews}, []string{"https://me.example/f"}, nil},
		{"no defaults: components still required", head, BriefingDefaults{}, nil, nil,
			[]wantProblem{{7, "components", "at least one component"}}},
		{"an empty list is not left out", head + "components = []\n", withBoth, nil, nil,
			[]wantProblem{{10, "components", "at least one component"}}},
		{"default components with news but no feeds anywhere", head, BriefingDefaults{Components: []Component{ComponentNews}}, nil, nil,
			[]wantProblem{{7, "feeds", "at least one feed"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := ParseBriefingsWith(md(tt.toml), tt.defaults)
			checkProblems(t, problems, tt.problems)
			if tt.problems != nil {
				if len(got.Briefings) != 0 {
					t.Fatalf("kept %+v despite problems", got.Briefings)
				}
				return
			}
			if len(got.Briefings) != 1 {
				t.Fatalf("got %d briefings, want 1", len(got.Briefings))
			}
			b := got.Briefings[0]
			if !reflect.DeepEqual(b.Components, tt.want) || !reflect.DeepEqual(b.Feeds, tt.feeds) {
				t.Errorf("components %v feeds %v, want %v %v", b.Components, b.Feeds, tt.want, tt.feeds)
			}
		})
	}
	// The defaults are copied: changing a parsed briefing never changes them.
	got, _ := ParseBriefingsWith(md(head), withBoth)
	got.Briefings[0].Components[0] = ComponentTodos
	if withBoth.Components[0] != ComponentCalendar {
		t.Fatal("the parsed briefing shares its components with the defaults")
	}
}
