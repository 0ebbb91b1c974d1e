package e2e

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// The real agent in the real sandbox uses the browse, notes and reminders skills: the
// prompt describes them because the request names a page, a note and a reminder; a
// page on an allowed intranet host is read as text, a private address without an
// allow_private entry is refused, the note lands in the workspace the sandbox sees,
// and every fetch is in the task's events that "istota show" prints.
func TestContentSkillsInTheSandbox(t *testing.T) {
	const token = "skil0001"
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(`<html><head><title>Trips</title><script>var leak = "SCRIPT-TEXT"</script></head>
<body><nav>Menu</nav><main><h1>River trips</h1><p>Paddle the Danube in spring.</p><a href="/book">Book now</a></main></body></html>`))
	}))
	defer page.Close()
	private := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the address without an allow_private entry was reached")
	}))
	defer private.Close()
	hp := func(s *httptest.Server) string { u, _ := url.Parse(s.URL); return u.Host }

	cmd := "istota skill browse " + page.URL + "/trips; " +
		"istota skill browse " + private.URL + "/; echo \"private-exit=$?\"; " +
		"istota skill notes add trips 'Paddle the Danube' && cat /workspace/notes/trips.md; " +
		"istota skill notes add ../escape.md x; echo \"escape-exit=$?\"; " +
		"istota skill reminders add tomorrow 09:00 Book the kayak"
	f := newFixtureWith(t, fakeapi.Script{
		fakeapi.Bash("Reading the page.", cmd).Expecting(func(r *fakeapi.Recorded) error {
			p := r.UserText()
			for _, want := range []string{"### browse —", "### notes —", "### reminders —", "istota skill notes add NAME"} {
				if !strings.Contains(p, want) {
					return errors.New("the prompt does not describe " + want)
				}
			}
			if strings.Contains(p, "### calendar") || strings.Contains(p, "istota skill kv get") {
				return errors.New("the prompt describes skills the request does not need")
			}
			return nil
		}),
		fakeapi.Reply("Noted: paddle the Danube in spring.").Expecting(func(r *fakeapi.Recorded) error {
			for _, want := range []string{
				"# Trips", "# River trips", "Paddle the Danube in spring.", "1. Book now — " + page.URL + "/book",
				"refused", "network.allow_private", "private-exit=1",
				"wrote notes/trips.md", "escape-exit=2", "added ",
			} {
				if err := fakeapi.ExpectToolResult(want)(r); err != nil {
					return err
				}
			}
			for _, b := range r.ToolResults() {
				if strings.Contains(b.Text, "SCRIPT-TEXT") || strings.Contains(b.Text, "Menu") {
					return errors.New("the page's script or navigation reached the agent")
				}
			}
			return nil
		}),
	}, sidecarOptions{progressInterval: "0s", allowedHosts: []string{hp(page), hp(private)}, allowPrivate: []string{hp(page)}}, token)
	// A fetch is in the external tier, which asks first by default (TestApprovalsInTalk
	// covers the question); here the admin allows it.
	f.sc.appendConfig(t, "[approvals]\nexternal = \"allow\"\n")
	f.sc.start()

	f.say(t, token, 1, "alice", "Read the page "+page.URL+"/trips, put it in a note and remind me tomorrow to book")
	// A progress line for the tool call, then the answer.
	msgs := f.waitMessages(t, 2, 3*time.Minute)
	if !strings.Contains(msgs[len(msgs)-1].Message, "Noted") {
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
	for _, want := range []string{"fetch    browse GET " + page.URL + "/trips → 200 text/html", "fetch    browse " + private.URL + "/ refused"} {
		if !strings.Contains(show, want) {
			t.Errorf("istota show lacks %q:\n%s", want, show)
		}
	}
	var value string
	f.sc.db().QueryRow(`SELECT value FROM kv_store WHERE user_id = 'alice' AND namespace = 'reminders'`).Scan(&value)
	if !strings.Contains(value, `"text":"Book the kayak"`) || !strings.Contains(value, `T09:00"`) {
		t.Errorf("reminder value %q", value)
	}
}
