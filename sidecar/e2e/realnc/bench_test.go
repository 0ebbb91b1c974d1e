package realnc

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/benchfig"
)

// figures are the timings measured on the real Nextcloud during the run, printed as one
// table (and, under `make bench`, written where ISTOTA_BENCH_OUT says). Tests never fail
// on them: they are measurements with their goals beside them.
type figures struct {
	mu   sync.Mutex
	rows []figure
}

type figure struct {
	name, value, goal, verdict string
}

func newFigures() *figures { return &figures{} }

// add records one figure; met says whether it reaches its goal (nil: no goal).
func (f *figures) add(name, value, goal string, met *bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	verdict := ""
	if met != nil {
		verdict = "meets goal"
		if !*met {
			verdict = "MISSES goal"
		}
	}
	f.rows = append(f.rows, figure{name, value, goal, verdict})
}

func (f *figures) report() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.rows) == 0 {
		return ""
	}
	var b strings.Builder
	for _, r := range f.rows {
		var met *bool
		switch r.verdict {
		case "meets goal":
			met = benchfig.Met(true)
		case "MISSES goal":
			met = benchfig.Met(false)
		}
		b.WriteString(benchfig.Line("real Nextcloud: "+strings.TrimSpace(r.name), r.value, r.goal, met) + "\n")
	}
	return b.String()
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func boolp(b bool) *bool { return &b }
