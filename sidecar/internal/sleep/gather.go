package sleep

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/store"
)

// task is one completed task as the sleep cycle reads it.
type task struct {
	ID          int64
	Source      string
	Interactive bool
	Prompt      string
	Result      string
	At          time.Time // finished (or, failing that, created)
}

// gatherTasks reads the namespace's completed tasks after afterID, oldest first, at most
// limit, leaving out the silent sources.
func (c *Cycle) gatherTasks(ctx context.Context, ns Namespace, afterID int64, limit int) ([]task, error) {
	col := "user_id"
	if ns.Kind == KindChannel {
		col = "conversation_token"
	}
	q := `SELECT id, source, interactive, prompt, result, created_at, finished_at FROM tasks
		WHERE ` + col + ` = ? AND status = 'completed' AND id > ?`
	args := []any{ns.ID, afterID}
	if len(c.cfg.SilentSources) > 0 {
		q += ` AND source NOT IN (?` + strings.Repeat(", ?", len(c.cfg.SilentSources)-1) + `)`
		for _, s := range c.cfg.SilentSources {
			args = append(args, s)
		}
	}
	q += ` ORDER BY id LIMIT ?`
	args = append(args, limit)
	rows, err := c.db.Read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read tasks: %w", err)
	}
	defer rows.Close()
	var out []task
	for rows.Next() {
		var t task
		var interactive int
		var created, finished string
		if err := rows.Scan(&t.ID, &t.Source, &interactive, &t.Prompt, &t.Result, &created, &finished); err != nil {
			return nil, fmt.Errorf("read tasks: %w", err)
		}
		t.Interactive = interactive != 0
		at := finished
		if at == "" {
			at = created
		}
		if t.At, err = store.ParseTime(at); err != nil {
			return nil, fmt.Errorf("task %d: %w", t.ID, err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// render is a task as the model reads it.
func render(t task, loc *time.Location) string {
	kind := "background"
	if t.Interactive {
		kind = "conversation"
	}
	return fmt.Sprintf("### Task %d (%s, %s, %s)\nRequest:\n%s\n\nAnswer:\n%s\n",
		t.ID, kind, t.Source, t.At.In(loc).Format("2006-01-02 15:04"),
		strings.TrimSpace(t.Prompt), strings.TrimSpace(t.Result))
}

// truncateMiddle keeps the head and the tail of s within max characters (runes): the
// request and the conclusion of a long task matter more than its middle.
func truncateMiddle(s string, max int) string {
	n := utf8.RuneCountInString(s)
	if n <= max {
		return s
	}
	r := []rune(s)
	marker := fmt.Sprintf("\n[… %d characters omitted …]\n", n-max)
	keep := max - utf8.RuneCountInString(marker)
	if keep < 2 {
		return string(r[:max])
	}
	head := keep * 2 / 3
	tail := keep - head
	return string(r[:head]) + marker + string(r[n-tail:])
}

// budgeted is the transcript handed to the model.
type budgeted struct {
	text      string
	truncated int // tasks shortened
	dropped   int // oldest tasks left out because even shortened they did not fit
}

// budget renders tasks into a transcript of at most total characters. Interactive tasks
// (what the user said to the assistant) get share of it and background tasks the rest;
// a group that needs less passes the remainder to the other. Within a group every task
// gets the same cap, as large as fits (at most perTask); long tasks are cut in the
// middle. When even minTask per task does not fit, the oldest tasks are left out.
func budget(tasks []task, loc *time.Location, total int, share float64, perTask, minTask int) budgeted {
	rendered := make([]string, len(tasks))
	var inter, bg []int // indexes into tasks
	for i, t := range tasks {
		rendered[i] = render(t, loc)
		if t.Interactive {
			inter = append(inter, i)
		} else {
			bg = append(bg, i)
		}
	}
	pick := func(idx []int) []string {
		out := make([]string, len(idx))
		for j, i := range idx {
			out[j] = rendered[i]
		}
		return out
	}
	interAllow := int(float64(total) * share)
	bgAllow := total - interAllow
	if need := groupNeed(pick(bg), perTask); need < bgAllow {
		interAllow += bgAllow - need
		bgAllow = need
	} else if need := groupNeed(pick(inter), perTask); need < interAllow {
		bgAllow += interAllow - need
		interAllow = need
	}
	var out budgeted
	fittedAll := make([]string, len(tasks))
	for _, g := range []struct {
		idx   []int
		allow int
	}{{inter, interAllow}, {bg, bgAllow}} {
		fitted, truncated, dropped := fitGroup(pick(g.idx), g.allow, perTask, minTask)
		out.truncated += truncated
		out.dropped += dropped
		for j, i := range g.idx {
			fittedAll[i] = fitted[j]
		}
	}
	// Back in task order, so the model reads the day as it happened.
	var b strings.Builder
	for _, s := range fittedAll {
		if s != "" {
			b.WriteString(s)
			b.WriteByte('\n')
		}
	}
	out.text = b.String()
	return out
}

func groupNeed(items []string, perTask int) int {
	n := 0
	for _, s := range items {
		n += min(utf8.RuneCountInString(s), perTask)
	}
	return n
}

// fitGroup returns, per item, its text within the group's allowance ("" when left out).
func fitGroup(items []string, allow, perTask, minTask int) (fitted []string, truncated, dropped int) {
	fitted = make([]string, len(items))
	start := 0
	// Leave out the oldest until every remaining item can have at least minTask.
	for start < len(items) && capFor(items[start:], allow, perTask) < minTask {
		start++
		dropped++
	}
	limit := capFor(items[start:], allow, perTask)
	for i := start; i < len(items); i++ {
		fitted[i] = truncateMiddle(items[i], limit)
		if fitted[i] != items[i] {
			truncated++
		}
	}
	return fitted, truncated, dropped
}

// capFor is the largest per-item cap (at most perTask) with which items fit in allow:
// short items keep their length and leave their unused share to the long ones.
func capFor(items []string, allow, perTask int) int {
	if len(items) == 0 {
		return perTask
	}
	lens := make([]int, len(items))
	for i, s := range items {
		lens[i] = utf8.RuneCountInString(s)
	}
	sort.Ints(lens)
	left := allow
	for i, l := range lens {
		k := len(lens) - i
		if l*k > left {
			return min(left/k, perTask)
		}
		left -= l
	}
	return perTask
}
