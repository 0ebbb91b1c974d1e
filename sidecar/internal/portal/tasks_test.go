package portal

import (
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/queue"
)

// What the status panel says of a task at each point of its retries: the attempt count
// it is at, when it runs again, and why, in words the user may see.
func TestTaskViewAttemptsAndRetries(t *testing.T) {
	next := time.Date(2026, 11, 24, 15, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		task      queue.Task
		attempts  int
		retryAt   string
		wantError string
	}{
		{"new", queue.Task{Status: queue.Pending, MaxAttempts: 4, NextAttemptAt: next}, 0, "", ""},
		{"waiting after the model API failed",
			queue.Task{Status: queue.Pending, Attempts: 1, TransientFailures: 1, MaxAttempts: 4, NextAttemptAt: next,
				Error: "model API error 502 (api_error): API Error: 502 the model API is unreachable from the gateway"},
			1, "2026-11-24T15:30:00Z", "the model service is not answering; it will be retried"},
		{"waiting after a rate limit without a status",
			queue.Task{Status: queue.Pending, Attempts: 2, TransientFailures: 2, MaxAttempts: 4, NextAttemptAt: next, Error: "model API unavailable: timeout"},
			2, "2026-11-24T15:30:00Z", "the model service is not answering; it will be retried"},
		{"waiting after an agent error",
			queue.Task{Status: queue.Pending, Attempts: 1, MaxAttempts: 4, NextAttemptAt: next, Error: "agent error: /srv/x exploded"},
			1, "2026-11-24T15:30:00Z", "the last attempt failed; it will be retried"},
		{"running the second attempt", queue.Task{Status: queue.Running, Attempts: 1, MaxAttempts: 4, Error: "model API error 529 (api_error): x"}, 2, "", ""},
		{"succeeded on the third", queue.Task{Status: queue.Completed, Attempts: 2, MaxAttempts: 4}, 3, "", ""},
		{"gave up, model API down",
			queue.Task{Status: queue.Failed, Attempts: 4, TransientFailures: 4, MaxAttempts: 4, Error: "model API error 503 (api_error): x"},
			4, "", "the model service was not answering (error 503)"},
		{"gave up, bad key", queue.Task{Status: queue.Failed, Attempts: 4, MaxAttempts: 4, Error: "model API error 401 (api_error): invalid x-api-key"},
			4, "", "the model API answered with error 401"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := TaskView(tc.task)
			if v.Attempts != tc.attempts || v.MaxAttempts != tc.task.MaxAttempts || v.RetryAt != tc.retryAt || v.Error != tc.wantError {
				t.Errorf("got attempts %d of %d, retry_at %q, error %q; want %d of %d, %q, %q",
					v.Attempts, v.MaxAttempts, v.RetryAt, v.Error, tc.attempts, tc.task.MaxAttempts, tc.retryAt, tc.wantError)
			}
		})
	}
}
