package realnc

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// aliceJob is a CRON.md job of alice's with a long name, for the widest table.
const aliceJob = "quarterly-board-report-with-every-figure-and-projection"

// testPages opens the personal and the admin section in Chromium inside this Nextcloud
// (nextcloud-app/tests/browser/nextcloud-pages.mjs, playwright-core): each must load,
// show the user's own data and never another user's, and fit Nextcloud's content area
// at a desktop and a narrow width. Screenshots go to build/screenshots/nextcloud-*.png.
func testPages(t *testing.T, e *env) {
	nc := e.nc
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed; run `make deps`")
	}
	script := filepath.Join(repoRoot(), "nextcloud-app", "tests", "browser", "nextcloud-pages.mjs")

	// Alice's data: a request long enough to have stretched the "Recent results" table
	// past the content area (a long link does not wrap by itself), a scheduled job, her
	// own line in USER.md and a fact. Bob gets the same, which her page must never show.
	longRequest := "[pages-long] Please read https://example.test/reports/" +
		strings.Repeat("quarterly-figures-and-projections-", 6) + "final.pdf and summarise it for the board, " +
		strings.Repeat("with every number checked twice, ", 8)
	e.script("[pages-long]", fakeapi.Reply("Summary ready [pages-long-answer]: "+
		strings.Repeat("see-https://example.test/summary/", 5)+" "+strings.Repeat("figures are up and costs are down, ", 12)))
	e.script("[pages-bob]", fakeapi.Reply("Noted, Bob. [pages-bob-answer]"))
	// A scheduled job each, written in Files (the requests below pull it in); the
	// schedule (Feb 29, 03:00) keeps it from running during the tests.
	jobs := map[string]string{"alice": aliceJob, "bob": "bob-secret-plans-job"}
	for user, name := range jobs {
		e.waitBotShare(t, user)
		nc.putFile(t, user, "istota/config/CRON.md", []byte("# Scheduled jobs\n\n```toml\n[[jobs]]\nname = \""+name+
			"\"\nschedule = \"0 3 29 2 *\"\nprompt = \"Prepare the report with every figure and projection, checked twice\"\n```\n"))
	}
	for _, q := range []struct{ user, text string }{
		{"alice", longRequest},
		{"bob", "Remember my secret plans [pages-bob]"},
	} {
		nts := nc.noteToSelf(t, q.user)
		nc.enableBot(t, q.user, nts)
		e.ask(t, q.user, nts, q.text)
	}
	for user, name := range jobs {
		waitUntil(t, user+"'s job from CRON.md in the schedule", 3*time.Minute, func() bool {
			r := nc.ocs(t, user, "GET", istotaAPI+"/me/schedule", nil)
			return r.Status == 200 && strings.Contains(string(r.Data), name)
		}, e.sc.logs)
	}
	e.addToUserMd(t, "alice", "- Alice likes the page to fit [usermd-alice-pages]")
	e.addToUserMd(t, "bob", "- Bob keeps this to himself [usermd-bob-pages]")
	e.insertFact(t, "user:alice", "alice", "prefers", "tables that fit [fact-alice-pages]")
	e.insertFact(t, "user:bob", "bob", "prefers", "secrets [fact-bob-pages]")

	list := func(v ...string) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test-reporter=spec", script)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(),
		"ISTOTA_NC_URL="+nc.URL,
		"ISTOTA_NC_USER=alice", "ISTOTA_NC_USER_PASSWORD="+nc.password("alice"),
		"ISTOTA_NC_ADMIN=admin", "ISTOTA_NC_ADMIN_PASSWORD="+nc.password("admin"),
		"ISTOTA_PAGES_WANT="+list("[pages-long]", "[pages-long-answer]", "[fact-alice-pages]", aliceJob),
		"ISTOTA_PAGES_NEVER="+list("[pages-bob]", "[usermd-bob-pages]", "[fact-bob-pages]", jobs["bob"]),
		"ISTOTA_PAGES_USERMD=[usermd-alice-pages]",
		"ISTOTA_SCREENSHOTS="+filepath.Join(repoRoot(), "build", "screenshots"),
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the sections in Chromium (%s): %v\n%s", script, err, out)
	}
	t.Logf("the sections in Chromium:\n%s", out)
}

// addToUserMd appends a line to user's USER.md through the app's API, as the page's
// editor does.
func (e *env) addToUserMd(t *testing.T, user, line string) {
	t.Helper()
	var mem struct {
		Content string `json:"content"`
		ETag    string `json:"etag"`
	}
	r := e.nc.ocs(t, user, "GET", istotaAPI+"/me/memory/user", nil)
	if r.Status != 200 {
		t.Fatalf("%s reading USER.md: %d %s", user, r.Status, r.Raw)
	}
	r.decode(t, &mem)
	if r := e.nc.ocs(t, user, "PUT", istotaAPI+"/me/memory/user", map[string]any{"content": strings.TrimRight(mem.Content, "\n") + "\n" + line + "\n", "etag": mem.ETag}); r.Status != 200 {
		t.Fatalf("%s writing USER.md: %d %s", user, r.Status, r.Raw)
	}
}
