package schedule

import (
	"context"
	"time"
)

// EveryMinute calls tick at once, then at the start of every minute of clock and
// whenever wake fires, until ctx ends; it returns after the tick in progress. The job
// and briefing runners use it so "due at 07:00" runs at 07:00:00, not up to a minute late.
func EveryMinute(ctx context.Context, clock func() time.Time, wake <-chan struct{}, tick func(context.Context)) {
	for {
		tick(ctx)
		now := clock()
		t := time.NewTimer(now.Truncate(time.Minute).Add(time.Minute).Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}
