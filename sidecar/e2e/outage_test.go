package e2e

import (
	"database/sql"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/talk/talktest"
)

// The model API down, with the real binary, the real claude CLI in bwrap and the real
// queue: the user hears once that the request waits and when it runs again, then the
// answer or a final message naming what an administrator can check; !status, the
// status page and `istota show` count the attempts the same way. The retries are made
// due by moving the task's retry time in the database instead of waiting the real 1, 4
// and 16 minutes; everything else runs as in production.

const retryNoticePrefix = "The model service is not answering; I'll try again at "

// retryRow is the queue's view of the task the tests follow.
type retryRow struct {
	status             string
	attempts, max, api int
	next               time.Time
}

func (s *sidecar) retryRow(t *testing.T, id int64) retryRow {
	t.Helper()
	var r retryRow
	var next string
	err := s.db().QueryRow(`SELECT status, attempts, max_attempts, transient_retries, next_attempt_at FROM tasks WHERE id = ?`, id).
		Scan(&r.status, &r.attempts, &r.max, &r.api, &next)
	if err != nil {
		t.Fatal(err)
	}
	if r.next, err = store.ParseTime(next); err != nil {
		t.Fatal(err)
	}
	return r
}

// setRetryAt moves a waiting task's retry time: far ahead to hold it while the test
// looks at it, or to now to let the worker pool take it on its next poll.
func (s *sidecar) setRetryAt(t *testing.T, id int64, at time.Time) {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(s.dir, "data", "db", "istota.db")+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(`UPDATE tasks SET next_attempt_at = ? WHERE id = ? AND status = 'pending'`, store.FormatTime(at), id)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("task %d is not waiting: %+v", id, s.retryRow(t, id))
	}
}

// waitAttempts waits until the task has failed n attempts.
func (s *sidecar) waitAttempts(t *testing.T, id int64, n int) retryRow {
	t.Helper()
	var r retryRow
	waitFor(t, fmt.Sprintf("task %d to fail attempt %d", id, n), 3*time.Minute, func() bool {
		r = s.retryRow(t, id)
		return r.attempts >= n && r.status != "locked" && r.status != "running"
	}, s.logs)
	if r.attempts != n {
		t.Fatalf("task %d: %+v, want %d failed attempts", id, r, n)
	}
	return r
}

func onlyTask(t *testing.T, sc *sidecar) int64 {
	t.Helper()
	var tasks []task
	waitFor(t, "the task to be queued", time.Minute, func() bool { tasks = sc.tasks(); return len(tasks) > 0 }, sc.logs)
	if len(tasks) != 1 {
		t.Fatalf("tasks = %+v", tasks)
	}
	return tasks[0].ID
}

// berlinClocks are the two ways the sidecar may name a retry time for a user in
// Europe/Berlin (the timezone talkEvent sends): the time of day, or with the weekday
// when it is not the day the sidecar wrote it (which the test cannot know near midnight).
func berlinClocks(t *testing.T, at time.Time) []string {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return []string{at.In(loc).Format("15:04"), at.In(loc).Format("Mon 15:04")}
}

// isRetryNotice reports whether text is exactly the notice of a retry at at as attempt 2.
func isRetryNotice(t *testing.T, text string, at time.Time) bool {
	t.Helper()
	for _, c := range berlinClocks(t, at) {
		if text == retryNoticePrefix+c+", attempt 2 of 4." {
			return true
		}
	}
	return false
}

// hasRetryClock reports whether text contains before + the retry time at + after.
func hasRetryClock(t *testing.T, text, before string, at time.Time, after string) bool {
	t.Helper()
	for _, c := range berlinClocks(t, at) {
		if strings.Contains(text, before+c+after) {
			return true
		}
	}
	return false
}

func (s *sidecar) show(t *testing.T, id int64) string {
	t.Helper()
	out, stderr, err := runCLI(t, s.cfgPath, "show", strconv.FormatInt(id, 10))
	if err != nil {
		t.Fatalf("istota show: %v\n%s", err, stderr)
	}
	return out
}

// statusTask is the status page's view of the task, from running, queued or recent.
func (s *sidecar) statusTask(t *testing.T, uid string, id int64) map[string]any {
	t.Helper()
	st, out := s.call("GET", "/v1/users/"+uid+"/status", nil)
	if st != 200 {
		t.Fatalf("status page: %d %v", st, out)
	}
	var all []any
	if r, ok := out["running"].(map[string]any); ok {
		all = append(all, r)
	}
	all = append(all, out["queued"].([]any)...)
	all = append(all, out["recent"].([]any)...)
	for _, x := range all {
		if m := x.(map[string]any); m["id"].(float64) == float64(id) {
			return m
		}
	}
	t.Fatalf("task %d is not on the status page: %v", id, out)
	return nil
}

func noPanic(t *testing.T, sc *sidecar) {
	t.Helper()
	if logs := sc.logs(); strings.Contains(logs, "panic serving") || strings.Contains(logs, "invalid concurrent Body.Read") {
		t.Fatalf("the sidecar logged a panic:\n%s", sc.logs())
	}
}

func TestModelAPIFailsThenRecovers(t *testing.T) {
	const token = "retry001"
	// Each run's CLI tries three times (CLAUDE_CODE_MAX_RETRIES=2): the first two runs
	// see only 503s, the third gets an answer.
	f := newFixture(t, fakeapi.Script{fakeapi.Error(503).Times(6), fakeapi.Reply("Recovered answer.")}, token)
	f.sc.start()
	f.say(t, token, 11, "alice", "what is on today?")
	id := onlyTask(t, f.sc)

	// Attempt 1 fails: one notice, with the retry time in alice's zone.
	r := f.sc.waitAttempts(t, id, 1)
	f.sc.setRetryAt(t, id, time.Now().Add(time.Hour)) // hold it while we look
	if r.status != "pending" || r.max != 4 || r.api != 1 {
		t.Fatalf("after attempt 1: %+v", r)
	}
	notice := f.waitMessages(t, 1, time.Minute)[0]
	if !isRetryNotice(t, notice.Message, r.next) || notice.ReplyTo != 11 {
		t.Fatalf("notice = %+v, want %q<%v in Berlin>, attempt 2 of 4. replying to 11", notice, retryNoticePrefix, r.next)
	}
	held := f.sc.retryRow(t, id).next

	// Everyone counts the same: one failed attempt, attempt 2 of 4 next.
	f.say(t, token, 12, "alice", "!status")
	status := f.waitMessages(t, 2, time.Minute)[1].Message
	if !hasRetryClock(t, status, fmt.Sprintf("#%d what is on today? (waiting to retry at ", id), held, ", attempt 2 of 4)") {
		t.Errorf("!status = %q, want task %d waiting to retry at %v in Berlin, attempt 2 of 4", status, id, held)
	}
	page := f.sc.statusTask(t, "alice", id)
	if page["status"] != "pending" || page["attempts"] != 1.0 || page["max_attempts"] != 4.0 ||
		page["retry_at"] != held.UTC().Format(time.RFC3339) || page["error"] != "the model service is not answering; it will be retried" {
		t.Errorf("status page task = %v", page)
	}
	show := f.sc.show(t, id)
	for _, want := range []string{"Attempts:  1 of 4 (1 failed, 1 of them with the model API unavailable)",
		"Next try:  " + held.Local().Format(time.DateTime) + " (attempt 2 of 4)"} {
		if !strings.Contains(show, want) {
			t.Errorf("istota show lacks %q:\n%s", want, show)
		}
	}

	// Attempt 2 fails too, quietly; attempt 3 answers.
	f.sc.setRetryAt(t, id, time.Now())
	f.sc.waitAttempts(t, id, 2)
	f.sc.setRetryAt(t, id, time.Now())
	msgs := f.waitMessages(t, 3, 3*time.Minute)
	if msgs[2].Message != "Recovered answer." || msgs[2].ReplyTo != 11 {
		t.Fatalf("answer = %+v", msgs[2])
	}
	time.Sleep(2 * time.Second) // a second notice would be posted by now
	for _, m := range f.talk.Messages() {
		if strings.HasPrefix(m.Message, retryNoticePrefix) && m.ID != notice.ID {
			t.Errorf("a second retry notice: %q", m.Message)
		}
	}
	if n := len(f.talk.Messages()); n != 3 {
		t.Errorf("Talk got %d messages, want the notice, !status and the answer: %+v", n, f.talk.Messages())
	}
	if r := f.sc.retryRow(t, id); r.status != "completed" || r.attempts != 2 || r.api != 2 {
		t.Fatalf("task = %+v", r)
	}
	if show := f.sc.show(t, id); !strings.Contains(show, "Attempts:  3 of 4 (2 failed, 2 of them with the model API unavailable)") {
		t.Errorf("istota show of the answered task:\n%s", show)
	}
	if page := f.sc.statusTask(t, "alice", id); page["status"] != "completed" || page["attempts"] != 3.0 || page["retry_at"] != "" {
		t.Errorf("status page task = %v", page)
	}
	if n := len(f.api.MessageRequests()); n != 7 {
		t.Errorf("the model API got %d calls, want 6 failed and 1 answered", n)
	}
	noPanic(t, f.sc)
}

// The model API is stopped for good (nothing listens on its port): every call the
// agent makes gets the gateway's 502, the task gives up after its four attempts and the
// final message says what to check.
func TestModelAPINeverRecovers(t *testing.T) {
	const token = "retry002"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stopped := "http://" + ln.Addr().String()
	ln.Close()
	tk := talktest.New(t)
	tk.AddBot(botSecret).EnableIn(token)
	f := &fixture{talk: tk, sc: newSidecar(t, sidecarOptions{talkURL: tk.URL, apiURL: stopped, apiKey: apiKey, botSecret: botSecret, progressInterval: "0s"})}
	f.sc.start()
	f.say(t, token, 21, "bob", "are you there?")
	id := onlyTask(t, f.sc)

	r := f.sc.waitAttempts(t, id, 1)
	notice := f.waitMessages(t, 1, time.Minute)[0]
	if !isRetryNotice(t, notice.Message, r.next) {
		t.Fatalf("notice = %q, want %q<%v in Berlin>, attempt 2 of 4.", notice.Message, retryNoticePrefix, r.next)
	}
	for n := 2; n <= 4; n++ {
		f.sc.setRetryAt(t, id, time.Now())
		r = f.sc.waitAttempts(t, id, n)
	}
	if r.status != "failed" || r.api != 4 {
		t.Fatalf("task = %+v", r)
	}
	msgs := f.waitMessages(t, 2, time.Minute)
	final := msgs[1].Message
	for _, want := range []string{"Sorry, I could not complete this request: the model service is not answering (error 502); I gave up after 4 attempts.",
		"reachable", "API key", "`istota doctor`"} {
		if !strings.Contains(final, want) {
			t.Errorf("final message %q lacks %q", final, want)
		}
	}
	if msgs[1].ReplyTo != 21 {
		t.Errorf("final message replies to %d", msgs[1].ReplyTo)
	}
	time.Sleep(2 * time.Second)
	if n := len(f.talk.Messages()); n != 2 {
		t.Errorf("Talk got %d messages, want the one notice and the final message: %+v", n, f.talk.Messages())
	}
	if show := f.sc.show(t, id); !strings.Contains(show, "Task #"+strconv.FormatInt(id, 10)+"  failed") ||
		!strings.Contains(show, "Attempts:  4 of 4 (4 failed, 4 of them with the model API unavailable)") || strings.Contains(show, "Next try:") {
		t.Errorf("istota show:\n%s", show)
	}
	if page := f.sc.statusTask(t, "bob", id); page["status"] != "failed" || page["attempts"] != 4.0 || page["error"] != "the model service was not answering (error 502)" {
		t.Errorf("status page task = %v", page)
	}
	if !strings.Contains(f.sc.logs(), "llm gateway upstream error") {
		t.Errorf("the gateway never reported the stopped upstream:\n%s", f.sc.logs())
	}
	noPanic(t, f.sc)
}
