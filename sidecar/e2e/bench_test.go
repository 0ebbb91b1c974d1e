package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/benchfig"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// BenchmarkTalkRoundTrip measures one Talk message answered end to end with the real
// claude CLI in the real sandbox against the scripted model API (one tool call, then the
// answer), split into its phases: intake (the app's signed POST until the sidecar
// answers), queue wait (queued until a worker starts it), agent run (sandbox + CLI +
// model turns) and delivery (task completed until Talk accepted the reply).
func BenchmarkTalkRoundTrip(b *testing.B) {
	const token = "bench001"
	var script fakeapi.Script
	for i := 0; i < b.N; i++ {
		script = append(script,
			fakeapi.ToolCall("", "Bash", map[string]any{"command": "echo bench", "description": "bench"}),
			fakeapi.Reply(fmt.Sprintf("answer %d", i)))
	}
	f := newFixtureWith(b, script, sidecarOptions{progressInterval: "1h", logLevel: "warn"}, token)
	f.sc.start()
	var intake, wait, run, deliver, total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := int64(1000 + i)
		f.talk.AddUserMessage(token, id, "alice", "bench")
		start := time.Now()
		status, ans := f.sc.post("/v1/talk/events", talkEvent(token, id, "alice", "bench", true))
		accepted := time.Now()
		if status != 200 || ans["status"] != "accepted" {
			b.Fatalf("intake: %d %v", status, ans)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		if _, err := f.talk.WaitMessages(ctx, i+1); err != nil {
			cancel()
			b.Fatalf("reply %d: %v\n%s", i, err, f.sc.logs())
		}
		cancel()
		delivered := time.Now()
		tasks := f.sc.tasks()
		tk := tasks[len(tasks)-1]
		intake += accepted.Sub(start)
		wait += tk.Started.Sub(tk.Created)
		run += tk.Finished.Sub(tk.Started)
		deliver += delivered.Sub(tk.Finished)
		total += delivered.Sub(start)
	}
	b.StopTimer()
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
	b.ReportMetric(ms(intake), "intake-ms")
	b.ReportMetric(ms(wait), "queue-wait-ms")
	b.ReportMetric(ms(run), "agent-run-ms")
	b.ReportMetric(ms(deliver), "delivery-ms")
	b.ReportMetric(ms(total), "total-ms")
	benchfig.Report(b, "fake Talk: event → delivered answer (mean of 10)", fmt.Sprintf("%.0f ms (agent %.0f ms, queue %.0f ms, delivery %.0f ms)", ms(total), ms(run), ms(wait), ms(deliver)), "", nil)
}
