package calendar

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestUsableNarrowsToTheUsersChoice(t *testing.T) {
	cals := []Calendar{
		{Path: "/remote.php/dav/calendars/istota/personal_shared_by_alice/", ID: "personal_shared_by_alice", Owner: "alice"},
		{Path: "/remote.php/dav/calendars/istota/work_shared_by_alice/", ID: "work_shared_by_alice", Owner: "alice"},
		{Path: "/remote.php/dav/calendars/istota/personal_shared_by_bob/", ID: "personal_shared_by_bob", Owner: "bob"},
	}
	ids := func(cs []Calendar) (out []string) {
		for _, c := range cs {
			out = append(out, c.ID)
		}
		return out
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		choose Choice
		want   []string
	}{
		{"no choice function", nil, []string{"personal_shared_by_alice", "work_shared_by_alice"}},
		{"never chose", func(context.Context, string) ([]string, bool, error) { return nil, false, nil }, []string{"personal_shared_by_alice", "work_shared_by_alice"}},
		{"chose one (without trailing slash)", func(context.Context, string) ([]string, bool, error) {
			return []string{"/remote.php/dav/calendars/istota/work_shared_by_alice"}, true, nil
		}, []string{"work_shared_by_alice"}},
		{"chose none", func(context.Context, string) ([]string, bool, error) { return []string{}, true, nil }, nil},
		{"naming bob's calendar gives nothing of bob's", func(context.Context, string) ([]string, bool, error) {
			return []string{"/remote.php/dav/calendars/istota/personal_shared_by_bob/"}, true, nil
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Usable(ctx, cals, "alice", tc.choose)
			if err != nil {
				t.Fatal(err)
			}
			if g := ids(got); len(g) != len(tc.want) || (len(g) > 0 && g[0] != tc.want[0]) {
				t.Fatalf("got %v, want %v", g, tc.want)
			}
		})
	}
	if _, err := Usable(ctx, cals, "alice", func(context.Context, string) ([]string, bool, error) { return nil, false, errors.New("db down") }); err == nil {
		t.Fatal("a failing choice was ignored")
	}
}

func TestSafeName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"event-1@host.ics", true},
		{strings.Repeat("a", 201), true}, // the bound the pattern once held ({0,200})
		{strings.Repeat("a", 202), false},
		{".hidden", false},
		{"a..b", false},
		{"a/b", false},
		{"", false},
	} {
		if got := safeName(tc.name); got != tc.want {
			t.Errorf("safeName(%.20q…) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
