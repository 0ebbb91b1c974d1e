package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
	"github.com/istota/istota/sidecar/internal/talk/talktest"
	"github.com/istota/istota/sidecar/internal/webdav/davtest"
)

// fakeNextcloud serves Talk's bot API and the bot account's files on one base URL, as
// a real Nextcloud does.
func fakeNextcloud(t *testing.T, tk *talktest.Server, dav *davtest.Server) string {
	t.Helper()
	talkURL, _ := url.Parse(tk.URL)
	davURL, _ := url.Parse(dav.URL)
	toTalk, toDAV := httputil.NewSingleHostReverseProxy(talkURL), httputil.NewSingleHostReverseProxy(davURL)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/remote.php/dav/") || strings.HasPrefix(r.URL.Path, "/ocs/v2.php/apps/files_sharing/") {
			toDAV.ServeHTTP(w, r)
			return
		}
		toTalk.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestFilesRoundTripThroughNextcloud(t *testing.T) {
	const token = "files001"
	tk := talktest.New(t)
	tk.AddBot(botSecret).EnableIn(token)
	dav := davtest.New(t, davtest.Options{Users: []string{"alice"}})
	api := fakeapi.New(t, fakeapi.Script{
		fakeapi.ToolCall("", "Bash", map[string]any{
			"command":     "cat /workspace/istota/config/USER.md; echo 'Meeting notes from the agent' > /workspace/istota/exports/notes.md; echo 'for everyone' > /channel/agenda.md; echo ok",
			"description": "files"}),
		fakeapi.Reply("Saved your notes."),
	})
	sc := newSidecar(t, sidecarOptions{talkURL: fakeNextcloud(t, tk, dav), apiURL: api.URL(), apiKey: apiKey, botSecret: botSecret,
		botUser: "istota", botPassword: "bot-app-password"})
	// Alice wrote her USER.md in Nextcloud before ever talking to the bot.
	dav.WriteFile("Users/alice/istota/config/USER.md", "# Alice\n- prefers short answers\n")
	sc.start()
	tk.AddUserMessage(token, 5, "alice", "save notes")
	if status, ans := sc.post("/v1/talk/events", talkEvent(token, 5, "alice", "save notes", true)); status != 200 || ans["status"] != "accepted" {
		t.Fatalf("intake: %d %v", status, ans)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := tk.WaitMessages(ctx, 1); err != nil {
		t.Fatalf("no answer: %v\n%s", err, sc.logs())
	}
	// The USER.md written in Nextcloud reached the agent: in its prompt and its files.
	reqs := api.MessageRequests()
	if !strings.Contains(reqs[0].UserText(), "prefers short answers") {
		t.Errorf("USER.md from Nextcloud is not in the prompt")
	}
	if res := api.ToolResults(); len(res) != 1 || !strings.Contains(res[0].Content, "prefers short answers") {
		t.Errorf("USER.md is not in the agent's workspace: %+v", res)
	}
	// What the agent wrote reached Nextcloud, and the user's folders were provisioned and shared.
	waitFor(t, "the agent's files in Nextcloud", time.Minute, func() bool {
		_, ok := dav.ReadFile("Users/alice/istota/exports/notes.md")
		_, ok2 := dav.ReadFile("Channels/" + token + "/agenda.md")
		return ok && ok2
	}, sc.logs)
	if got, _ := dav.ReadFile("Users/alice/istota/exports/notes.md"); !strings.Contains(got, "Meeting notes from the agent") {
		t.Fatalf("exports/notes.md = %q", got)
	}
	for _, p := range []string{"Users/alice/memories", "Users/alice/inbox", "Users/alice/shared", "Users/alice/istota/config/PERSONA.md"} {
		if _, ok := dav.ReadFile(p); !ok && !davDirExists(dav, p) {
			t.Errorf("%s was not provisioned", p)
		}
	}
	shared := false
	for _, s := range dav.Shares() {
		if s.ShareWith == "alice" && strings.Trim(s.Path, "/") == "Users/alice/istota" {
			shared = true
		}
	}
	if !shared {
		t.Errorf("the bot folder was not shared with alice: %+v", dav.Shares())
	}
}
