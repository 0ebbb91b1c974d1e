// Package skillstest holds what tests of skills share: a recorder standing in for the
// task event log.
package skillstest

import (
	"context"
	"strings"
	"sync"
)

// Events records task events in memory as "kind: text" lines; it implements
// skills.EventLog.
type Events struct {
	mu   sync.Mutex
	list []string
}

func (e *Events) AddEvent(_ context.Context, _ int64, kind, text string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, kind+": "+text)
	return nil
}

// All is every event recorded so far, one per line.
func (e *Events) All() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.list, "\n")
}
