package schedule

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestEveryMinuteTicksAtOnceOnWakeAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	wake := make(chan struct{}, 1)
	var ticks atomic.Int32
	done := make(chan struct{})
	// A clock at the start of a minute: the next timed tick is a minute away, so every
	// tick but the first comes from wake.
	clock := func() time.Time { return time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC) }
	go func() {
		defer close(done)
		EveryMinute(ctx, clock, wake, func(context.Context) { ticks.Add(1) })
	}()
	waitTicks := func(n int32) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for ticks.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d ticks, want %d", ticks.Load(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitTicks(1)
	wake <- struct{}{}
	waitTicks(2)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("EveryMinute did not return after cancel")
	}
}
