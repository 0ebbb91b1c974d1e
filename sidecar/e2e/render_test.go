package e2e

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// With [browse] render on, the real agent's `istota skill browse` reads a page whose
// text only its script writes: the sidecar renders it with Debian's Chromium in a
// sandbox of its own, the script's call to a host outside the allowlist is refused,
// and "istota show" lists the page, the browser's requests and the refusal.
func TestBrowseRendersPagesWithChromium(t *testing.T) {
	if _, err := os.Stat("/usr/lib/chromium/chromium"); err != nil {
		t.Fatalf("this test needs Debian's chromium (scripts/deps.sh): %v", err)
	}
	const token = "rend0001"
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(`<!DOCTYPE html><html><head><title>Ferry</title></head><body><div id="root"></div>
<script>document.getElementById("root").innerHTML = "<h1>Timetable</h1><p>Boats leave at " + (4 + 5) + " o'clock.</p>";
fetch("http://tracker.example/collect").catch(function () {});</script></body></html>`))
	}))
	defer page.Close()
	u, _ := url.Parse(page.URL)

	f := newFixtureWith(t, fakeapi.Script{
		fakeapi.Bash("Reading the page.", "istota skill browse "+page.URL+"/ferry"),
		fakeapi.Reply("Boats leave at nine.").Expecting(func(r *fakeapi.Recorded) error {
			for _, want := range []string{"(rendered with JavaScript in a headless browser)", "# Timetable", "Boats leave at 9 o'clock."} {
				if err := fakeapi.ExpectToolResult(want)(r); err != nil {
					return err
				}
			}
			for _, b := range r.ToolResults() {
				if strings.Contains(b.Text, "tracker.example") {
					return errors.New("the page's script reached the agent")
				}
			}
			return nil
		}),
	}, sidecarOptions{progressInterval: "0s", allowedHosts: []string{u.Host}, allowPrivate: []string{u.Host}}, token)
	f.sc.appendConfig(t, "[approvals]\nexternal = \"allow\"\n[browse]\nrender = true\n")
	f.sc.start()

	f.say(t, token, 1, "alice", "When do the boats leave? See the page "+page.URL+"/ferry")
	msgs := f.waitMessages(t, 2, 3*time.Minute)
	if !strings.Contains(msgs[len(msgs)-1].Message, "Boats leave at nine.") {
		t.Fatalf("answer %q; fake API failures: %v\n%s", msgs[len(msgs)-1].Message, f.api.Failures(), f.sc.logs())
	}
	if fails := f.api.Failures(); len(fails) > 0 {
		t.Fatalf("fake API: %v", fails)
	}
	tasks := f.sc.tasks()
	if len(tasks) != 1 {
		t.Fatalf("tasks %+v", tasks)
	}
	show := f.sc.show(t, tasks[0].ID)
	for _, want := range []string{
		"browse GET " + page.URL + "/ferry → 200 text/html",
		"browse render " + page.URL + "/ferry → document of ",
		"browse render: GET " + page.URL + "/ferry allowed",
		"browse render: GET http://tracker.example/collect refused (host not allowed)",
	} {
		if !strings.Contains(show, want) {
			t.Errorf("istota show lacks %q:\n%s", want, show)
		}
	}
}
