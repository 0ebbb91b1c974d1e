package userconfig

import (
	"reflect"
	"testing"
)

func TestRenderCronRoundTrip(t *testing.T) {
	jobs := []Job{
		{Name: "Morning", Schedule: "0 7 * * 1-5", TZ: "Europe/Berlin", Prompt: "Plan my day.\nUse \"quotes\" and ``` fences.", Target: Target{Conversation: "abc123"}, SilentUnlessAction: true, Enabled: true},
		{Name: "Backup check", Schedule: "@daily", TZ: "UTC", Command: "test -f /workspace/backup.ok", Target: Target{Email: "me@example.org"}, Enabled: false},
	}
	src, err := RenderCron(jobs)
	if err != nil {
		t.Fatal(err)
	}
	got, problems := ParseCron(src, "UTC")
	if len(problems) != 0 {
		t.Fatalf("problems: %v\n%s", problems, src)
	}
	if len(got.Jobs) != len(jobs) {
		t.Fatalf("got %d jobs, want %d\n%s", len(got.Jobs), len(jobs), src)
	}
	for i := range jobs {
		g := got.Jobs[i]
		g.Line = 0
		if !reflect.DeepEqual(g, jobs[i]) {
			t.Errorf("job %d: got %+v, want %+v", i, g, jobs[i])
		}
	}
}
