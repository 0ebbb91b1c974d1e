package prompt

import (
	"strings"
	"testing"
	"time"
)

// Each guide comes with the requests that are about its file, versioned, with the
// file's place in the sandbox filled in; unrelated requests get none.
func TestGuidesFor(t *testing.T) {
	for _, tc := range []struct {
		request string
		want    []string
	}{
		{"Remind me every Monday at 8 to take out the bins", []string{"CRON.md"}},
		{"Erinnere mich montags an den Müll", []string{"CRON.md"}},
		{"Tell me if the website goes down", []string{"HEARTBEAT.md"}},
		{"Set up a morning briefing with the news", []string{"BRIEFINGS.md"}},
		{"Put 'call the plumber' on my to-do list", []string{"TASKS.md"}},
		{"What is wrong with my CRON.md and HEARTBEAT.md?", []string{"CRON.md", "HEARTBEAT.md"}},
		{"What is the capital of Peru?", nil},
		{"Translate this letter into French", nil},
	} {
		t.Run(tc.request, func(t *testing.T) {
			got := GuidesFor(tc.request, "/workspace/istota/config")
			var files []string
			for _, g := range got {
				head, _, _ := strings.Cut(g, " (guide v")
				files = append(files, strings.TrimPrefix(head, "### "))
				if !strings.Contains(g, "/workspace/istota/config/") || strings.Contains(g, "{config}") {
					t.Errorf("guide without its path:\n%s", g)
				}
				if !strings.Contains(g, "(guide v1)") {
					t.Errorf("guide without its version: %.60s", g)
				}
			}
			if strings.Join(files, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("guides %v, want %v", files, tc.want)
			}
		})
	}
}

// The validated files' guides say how a change is checked and where the verdict goes,
// and every guide shows its format; the prompt carries them after the request.
func TestGuidesContentAndPlace(t *testing.T) {
	for _, f := range []string{"CRON.md", "HEARTBEAT.md", "BRIEFINGS.md"} {
		g := GuidesFor(f, "/c")
		if len(g) == 0 || !strings.Contains(g[0], "told to the user in this conversation") || !strings.Contains(g[0], "```toml") {
			t.Errorf("%s guide lacks the check or the format:\n%s", f, g)
		}
	}
	in := Input{BotName: "Istota", Now: time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC), User: User{ID: "alice"},
		Request: "remind me daily", Guides: GuidesFor("remind me daily", "/c")}
	out := Build(in)
	if i, j := strings.Index(out, "## Request from"), strings.Index(out, "### CRON.md"); i < 0 || j < i {
		t.Fatalf("the guide is not after the request:\n%s", out)
	}
	in.Guides = nil
	if strings.Contains(Build(in), "guide v") {
		t.Fatal("a guide without being asked")
	}
}
