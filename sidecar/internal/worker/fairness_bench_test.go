package worker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/benchfig"
	"github.com/istota/istota/sidecar/internal/queue"
)

// BenchmarkFairness is the queue's fairness under a flood: one user drops 500 tasks at
// once, then 49 others send 500 more at a steady pace over the time the work takes.
// Every other user's first task must start within one task length of its arrival (it
// never waits behind the flood), on the real SQLite queue with the real pool (4 workers)
// and tasks that take taskLength each. Printed: drain time, enqueue → claim p50/p99 over
// all tasks, and the others' worst first-task wait in task lengths (goal ≤ 1).
func BenchmarkFairness(b *testing.B) {
	const (
		workers    = 4
		taskLength = 40 * time.Millisecond
		flood      = 500
		others     = 49
		otherTasks = 500
	)
	for i := 0; i < b.N; i++ {
		ctx := context.Background()
		db, err := testDBs.OpenPath(ctx, filepath.Join(b.TempDir(), "fair.db"))
		if err != nil {
			b.Fatal(err)
		}
		q := queue.New(db, queue.Options{})
		var mu sync.Mutex
		claimedAt := map[int64]time.Time{}
		done := make(chan struct{}, flood+otherTasks)
		var pool *Pool
		pool = New(q, func(ctx context.Context, t queue.Task) {
			mu.Lock()
			claimedAt[t.ID] = time.Now()
			mu.Unlock()
			if err := q.Start(ctx, t.ID, pool.Owner()); err != nil {
				b.Error(err)
			}
			time.Sleep(taskLength)
			if err := q.Complete(ctx, t.ID, pool.Owner(), queue.Outcome{Result: "ok"}, nil); err != nil {
				b.Error(err)
			}
			done <- struct{}{}
		}, Options{Max: workers, ReservedInteractive: -1, PollInterval: 50 * time.Millisecond})

		enqueuedAt := map[int64]time.Time{}
		firstOf := map[string]int64{}
		enqueue := func(uid string, n int) {
			t, _, err := q.Enqueue(ctx, queue.NewTask{UserID: uid, Source: queue.SourceTalk, Interactive: true, Prompt: fmt.Sprintf("task %d of %s", n, uid)})
			if err != nil {
				b.Fatal(err)
			}
			mu.Lock()
			enqueuedAt[t.ID] = time.Now()
			if _, ok := firstOf[uid]; !ok && uid != "flood" {
				firstOf[uid] = t.ID
			}
			mu.Unlock()
			pool.Wake()
		}
		b.ResetTimer()
		start := time.Now()
		pool.Start(ctx)
		for n := 0; n < flood; n++ {
			enqueue("flood", n)
		}
		// The others arrive evenly over the time the whole load needs at full speed.
		total := time.Duration(flood+otherTasks) * taskLength / workers
		gap := total / otherTasks
		rng := rand.New(rand.NewPCG(1, 2))
		for n := 0; n < otherTasks; n++ {
			enqueue(fmt.Sprintf("user%02d", rng.IntN(others)), n)
			time.Sleep(gap)
		}
		for n := 0; n < flood+otherTasks; n++ {
			<-done
		}
		drain := time.Since(start)
		b.StopTimer()
		pool.Close(ctx)
		db.Close()

		var waits []time.Duration
		for id, at := range enqueuedAt {
			waits = append(waits, claimedAt[id].Sub(at))
		}
		sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
		var worst time.Duration
		for _, id := range firstOf {
			worst = max(worst, claimedAt[id].Sub(enqueuedAt[id]))
		}
		ratio := float64(worst) / float64(taskLength)
		// One user's tasks run one at a time, so the flood alone needs flood × taskLength.
		ideal := max(total, flood*taskLength)
		b.ReportMetric(drain.Seconds(), "drain-s")
		b.ReportMetric(ms(waits[len(waits)/2]), "claim-p50-ms")
		b.ReportMetric(ms(waits[len(waits)*99/100]), "claim-p99-ms")
		b.ReportMetric(ratio, "others-first-wait-tasks")
		verdict := "meets"
		if ratio > 1 {
			verdict = "MISSES"
		}
		benchfig.Report(b, "fairness: others' first task waited (500 tasks of one user queued first)", fmt.Sprintf("%.2f task lengths", ratio), "≤ 1 task length", benchfig.Met(ratio <= 1))
		benchfig.Report(b, "fairness: 1,000 tasks drained in", drain.Round(time.Millisecond).String(), fmt.Sprintf("(at best %s)", ideal), nil)
		benchfig.Report(b, "fairness: enqueue → claim p50 / p99", fmt.Sprintf("%s / %s", waits[len(waits)/2].Round(time.Millisecond), waits[len(waits)*99/100].Round(time.Millisecond)), "", nil)
		b.Logf("fairness: 1,000 tasks (500 from one user at once, 500 from 49 others): drain %s (at best %s: one user's tasks run one at a time); enqueue→claim p50 %s, p99 %s; others' first task waited at most %.2f task lengths (goal ≤ 1: %s)",
			drain.Round(time.Millisecond), ideal, waits[len(waits)/2].Round(time.Millisecond), waits[len(waits)*99/100].Round(time.Millisecond), ratio, verdict)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
