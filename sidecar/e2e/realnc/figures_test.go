package realnc

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// postsPerFigure is how many chat posts each latency median is taken over.
const postsPerFigure = 20

// testFigures measures, on the real server, what the bot costs the people who talk: the
// sender's POST /chat with and without the bot (and with the sidecar down), the time to
// 👀, and how long an answer takes beyond the agent's own run. It records figures for
// `make bench`; it fails only when something does not work, never on a timing.
func testFigures(t *testing.T, e *env) {
	nc := e.nc
	withBot := nc.createRoom(t, "alice", roomGroup, "Figures with bot", "bob")
	nc.enableBot(t, "alice", withBot)
	withoutBot := nc.createRoom(t, "alice", roomGroup, "Figures without bot", "bob")

	posts := func(token, label string) []time.Duration {
		var ds []time.Duration
		for i := 0; i < postsPerFigure; i++ {
			_, took := nc.post(t, "bob", token, fmt.Sprintf("plain chat %s %d", label, i))
			ds = append(ds, took)
		}
		return ds
	}
	// Warm both paths once (PHP's opcode cache, Talk's caches) before measuring.
	posts(withoutBot, "warm")
	without := posts(withoutBot, "no-bot")
	up := posts(withBot, "bot-up")
	e.sc.kill()
	down := posts(withBot, "bot-down")
	e.sc.start(t) // the app hands the waiting (unaddressed) events over on the sidecar's hello

	base := median(without)
	e.bench.add("POST /chat, bot not in the conversation (median of 20)", fmtDur(base), "", nil)
	for _, f := range []struct {
		name string
		ds   []time.Duration
	}{{"bot enabled, sidecar up", up}, {"bot enabled, sidecar down", down}} {
		m := median(f.ds)
		e.bench.add(fmt.Sprintf("POST /chat, %s (median of 20)", f.name),
			fmt.Sprintf("%s (+%s)", fmtDur(m), fmtDur(m-base)), "", nil)
	}

	// Addressed questions in the note-to-self conversation: 👀 is on the message when
	// the POST returns; the answer arrives some time after the agent finished.
	nts := nc.noteToSelf(t, "alice")
	nc.enableBot(t, "alice", nts)
	var toEyes, toAnswer, beyondAgent, pulls, agents, pushes []time.Duration
	for i := 0; i < 5; i++ {
		marker := fmt.Sprintf("[fig-%d]", i)
		e.script(marker, fakeapi.Reply("Figure answer "+marker))
		start := time.Now()
		id, took := nc.post(t, "alice", nts, "Quick question "+marker)
		// The listener adds 👀 inside the sender's request: it is there when POST returns.
		nc.expectEyes(t, "alice", nts, id, start, marker+" when its POST returned")
		toEyes = append(toEyes, took)
		for {
			if _, ok := replyTo(nc.messages(t, "alice", nts), id); ok {
				break
			}
			if time.Since(start) > 2*time.Minute {
				t.Fatalf("no answer to %s\n%s", marker, tail(e.sc.logs(), 40))
			}
			time.Sleep(50 * time.Millisecond)
		}
		total := time.Since(start)
		ph := e.taskPhases(t, marker)
		toAnswer = append(toAnswer, total)
		beyondAgent = append(beyondAgent, total-ph.agent)
		pulls, agents, pushes = append(pulls, ph.pull), append(agents, ph.agent), append(pushes, ph.push)
	}
	e.bench.add("event → 👀 (on the message when its POST returns; median of 5)", fmtDur(median(toEyes)), "", nil)
	e.bench.add("event → delivered answer (median of 5)", fmtDur(median(toAnswer)), "", nil)
	e.bench.add("  of which: pull before the run (median)", fmtDur(median(pulls)), "", nil)
	e.bench.add("  of which: the agent's own run (median)", fmtDur(median(agents)), "", nil)
	e.bench.add("  push after the answer (not in its path; median)", fmtDur(median(pushes)), "", nil)
	extra := median(beyondAgent)
	e.bench.add("event → answer minus the agent's own run (median of 5)", fmtDur(extra), "≤ 500 ms", boolp(extra <= 500*time.Millisecond))
}

var (
	phaseLine = regexp.MustCompile(`msg="task completed".*\btask_id=(\d+)\b.*\bpull_ms=(\d+) agent_ms=(\d+)`)
	pushLine  = regexp.MustCompile(`msg="task files pushed".*\btask_id=(\d+)\b.*\bpush_ms=(\d+)`)
)

// phaseTimes is where a task's time went, from the sidecar's log line that ends it.
type phaseTimes struct{ pull, agent, push time.Duration }

// taskPhases reads the phases of the task whose prompt carries marker; withPush waits
// for the push after the answer too.
func (e *env) taskPhases(t *testing.T, marker string) phaseTimes {
	return e.phasesOf(t, marker, true)
}

// agentTime is how long the agent itself ran for the task whose prompt carries marker.
func (e *env) agentTime(t *testing.T, marker string) time.Duration {
	return e.phasesOf(t, marker, false).agent
}

func (e *env) phasesOf(t *testing.T, marker string, withPush bool) phaseTimes {
	t.Helper()
	db := e.sc.db(t)
	defer db.Close()
	var id int64
	if err := db.QueryRow(`SELECT id FROM tasks WHERE instr(prompt, ?) > 0 ORDER BY id DESC LIMIT 1`, marker).Scan(&id); err != nil {
		t.Fatalf("task of %s: %v", marker, err)
	}
	var ph phaseTimes
	ms := func(s string) time.Duration {
		n, _ := strconv.ParseInt(s, 10, 64)
		return time.Duration(n) * time.Millisecond
	}
	waitUntil(t, "the task's completion in the log", time.Minute, func() bool {
		logs, found := e.sc.logs(), 0
		for _, m := range phaseLine.FindAllStringSubmatch(logs, -1) {
			if m[1] == strconv.FormatInt(id, 10) {
				ph.pull, ph.agent = ms(m[2]), ms(m[3])
				found++
			}
		}
		for _, m := range pushLine.FindAllStringSubmatch(logs, -1) {
			if m[1] == strconv.FormatInt(id, 10) {
				ph.push = ms(m[2])
				found++
			}
		}
		return found == 2 || (!withPush && ph.agent > 0)
	}, e.sc.logs)
	return ph
}
