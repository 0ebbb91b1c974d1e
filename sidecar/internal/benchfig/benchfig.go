// Package benchfig is how benchmarks report a figure for the table `make bench` prints
// at the end: one line "figure: NAME | VALUE | GOAL | VERDICT" in the test output,
// which scripts/bench-table.sh gathers. Figures are measurements with their goal beside
// them; nothing fails on them.
package benchfig

import (
	"fmt"
	"strings"
	"testing"
)

// Report writes one figure. met is nil for a figure without a goal.
func Report(tb testing.TB, name, value, goal string, met *bool) {
	tb.Helper()
	tb.Log(Line(name, value, goal, met))
}

// Line is the figure line itself (for reports written to a file).
func Line(name, value, goal string, met *bool) string {
	verdict := ""
	if met != nil {
		verdict = "meets goal"
		if !*met {
			verdict = "MISSES goal"
		}
	}
	clean := func(s string) string { return strings.ReplaceAll(s, "|", "/") }
	return fmt.Sprintf("figure: %s | %s | %s | %s", clean(name), clean(value), clean(goal), verdict)
}

// Met is a helper for the met argument.
func Met(ok bool) *bool { return &ok }
