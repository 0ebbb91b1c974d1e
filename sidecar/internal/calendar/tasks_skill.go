package calendar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/davshare"
	"github.com/istota/istota/sidecar/internal/skills"
)

const tasksUsage = `tasks lists [--json]
tasks list [--list LIST] [--all] [--tz ZONE] [--json]
tasks add --list LIST --summary TEXT [--due TIME] [--priority N] [--description TEXT] [--tz ZONE] [--json]
tasks done UID [--list LIST]
tasks update UID [--list LIST] [--summary TEXT] [--due TIME|none] [--priority N] [--description TEXT] [--reopen] [--tz ZONE] [--json]
tasks delete UID [--list LIST]
LIST is a task list id or name from "tasks lists"; only the Nextcloud Tasks lists you shared with the bot account
are reachable, and only lists shared with "can edit" can be changed. "list" shows open to-dos (--all: finished ones too).
TIME is RFC 3339, a local time 2025-03-01T09:00 in --tz (an IANA zone, default UTC), or a date 2025-03-01.
N is 1 (highest) … 9 (lowest), 0 for none, or high (1), medium (5), low (9).`

// RegisterTasksSkill registers the tasks skill, which works on the to-do lists the
// invoking user shared with the bot account and on no others. Task lists are not on the
// settings page's calendar choice, so every list the user shared is usable.
func RegisterTasksSkill(reg *skills.Registry, client *Client) error {
	if client == nil {
		return fmt.Errorf("calendar: register tasks skill: no client")
	}
	return reg.Register(skills.Skill{
		Manifest: skills.Manifest{
			Name:     "tasks",
			Summary:  "list, add, complete, change and delete to-dos in the Nextcloud Tasks lists you shared with the bot",
			Usage:    tasksUsage,
			Classify: classifyTasks,
			Load: skills.Load{Keywords: []string{
				"task", "todo", "to do", "due", "deadline", "remind", "checklist", "aufgabe", "erledig",
			}},
		},
		Run: func(ctx context.Context, inv skills.Invocation) skills.Result {
			return runTasks(ctx, client, inv)
		},
	})
}

// classifyTasks: listing is read; adding, completing, changing and deleting to-dos
// writes a list others may see, which is external (as calendar writes are).
func classifyTasks(_ context.Context, inv skills.Invocation) approval.Action {
	if len(inv.Args) == 0 {
		return approval.Action{Tier: approval.TierRead}
	}
	verb, ok := map[string]string{"add": "Add", "done": "Complete", "update": "Change", "delete": "Delete"}[inv.Args[0]]
	if !ok {
		return approval.Action{Tier: approval.TierRead}
	}
	what := "a to-do"
	if inv.Args[0] != "add" && len(inv.Args) > 1 {
		what = "the to-do " + inv.Args[1]
	}
	return approval.Action{Tier: approval.TierExternal,
		Summary: fmt.Sprintf("%s %s: %s", verb, what, strings.Join(inv.Args[1:], " "))}
}

func runTasks(ctx context.Context, c *Client, inv skills.Invocation) skills.Result {
	if len(inv.Args) == 0 {
		return skills.Usagef("usage:\n%s", tasksUsage)
	}
	if inv.UserID == "" {
		return skills.Failf("tasks: no user for this task")
	}
	r := &tasksRun{c: c, user: inv.UserID}
	args := inv.Args[1:]
	switch inv.Args[0] {
	case "lists":
		return r.lists(ctx, args)
	case "list":
		return r.list(ctx, args)
	case "add":
		return r.add(ctx, args)
	case "done":
		return r.done(ctx, args)
	case "update":
		return r.update(ctx, args)
	case "delete":
		return r.delete(ctx, args)
	}
	return skills.Usagef("tasks: unknown subcommand %q\nusage:\n%s", inv.Args[0], tasksUsage)
}

type tasksRun struct {
	c    *Client
	user string
}

type taskFlags struct {
	list, summary, due, priority, description, tz string
	all, reopen, json                             bool
}

func newTaskFlags(name string, f *taskFlags, withTask bool) *flag.FlagSet {
	fs := flag.NewFlagSet("tasks "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.list, "list", "", "task list id or name")
	if withTask {
		fs.StringVar(&f.summary, "summary", "", "title")
		fs.StringVar(&f.due, "due", "", "due time or date")
		fs.StringVar(&f.priority, "priority", "", "priority")
		fs.StringVar(&f.description, "description", "", "description")
		fs.StringVar(&f.tz, "tz", "", "IANA time zone for local times")
		fs.BoolVar(&f.json, "json", false, "print JSON")
	}
	return fs
}

// mine lists the user's task lists, or the one named, refusing every other list.
func (r *tasksRun) mine(ctx context.Context, name string) ([]Calendar, *skills.Result) {
	all, err := r.c.TaskLists(ctx)
	if err != nil {
		res := skills.Internal("the task server", err)
		return nil, &res
	}
	lists, err := davshare.Pick(ForUser(all, r.user), name, "task lists", "tasks lists", r.c.user)
	if err != nil {
		res := skills.Failf("tasks: %v", err)
		return nil, &res
	}
	return lists, nil
}

func (r *tasksRun) lists(ctx context.Context, args []string) skills.Result {
	var f taskFlags
	fs := newTaskFlags("lists", &f, false)
	fs.BoolVar(&f.json, "json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil || fs.NArg() > 0 || f.list != "" {
		return skills.Usagef("usage: istota skill tasks lists [--json]")
	}
	lists, res := r.mine(ctx, "")
	if res != nil {
		return *res
	}
	return collectionsResult(lists, f.json, fmt.Sprintf("no task lists: share a list with the user %q in Nextcloud Tasks or Calendar to use it here", r.c.user))
}

func (r *tasksRun) list(ctx context.Context, args []string) skills.Result {
	var f taskFlags
	fs := newTaskFlags("list", &f, false)
	fs.BoolVar(&f.all, "all", false, "finished to-dos too")
	fs.StringVar(&f.tz, "tz", "", "IANA time zone for due times")
	fs.BoolVar(&f.json, "json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil || fs.NArg() > 0 {
		return skills.Usagef("usage: istota skill tasks list [--list LIST] [--all] [--tz ZONE] [--json]")
	}
	loc, err := zone(f.tz)
	if err != nil {
		return skills.Usagef("tasks list: %v", err)
	}
	lists, res := r.mine(ctx, f.list)
	if res != nil {
		return *res
	}
	out := []taskJSON{}
	for _, l := range lists {
		ts, err := r.c.Tasks(ctx, l, f.all)
		if err != nil {
			return skills.Internal("the task server", err)
		}
		for _, t := range ts {
			out = append(out, toTaskJSON(l, t, loc))
		}
	}
	if f.json {
		return jsonResult(out)
	}
	if len(out) == 0 {
		if f.all {
			return skills.Result{Stdout: []byte("no to-dos\n")}
		}
		return skills.Result{Stdout: []byte("no open to-dos\n")}
	}
	var b strings.Builder
	for _, t := range out {
		writeTask(&b, t)
	}
	return skills.Result{Stdout: []byte(b.String())}
}

func (r *tasksRun) add(ctx context.Context, args []string) skills.Result {
	var f taskFlags
	fs := newTaskFlags("add", &f, true)
	if err := parseFlags(fs, args); err != nil || fs.NArg() > 0 || f.list == "" || strings.TrimSpace(f.summary) == "" {
		return skills.Usagef("usage: istota skill tasks add --list LIST --summary TEXT [--due TIME] [--priority N] [--description TEXT] [--tz ZONE] [--json]")
	}
	t := Task{Summary: f.summary, Description: f.description}
	if res := setTaskFields(&t, f, map[string]bool{"due": f.due != "", "priority": f.priority != ""}); res != nil {
		return *res
	}
	lists, res := r.mine(ctx, f.list)
	if res != nil {
		return *res
	}
	created, err := r.c.CreateTask(ctx, lists[0], t)
	if err != nil {
		return r.fail("add", lists[0], err)
	}
	return r.printOne(lists[0], created, "added", f)
}

func (r *tasksRun) done(ctx context.Context, args []string) skills.Result {
	var f taskFlags
	fs := newTaskFlags("done", &f, false)
	uid, err := splitUID(fs, args)
	if err != nil {
		return skills.Usagef("%v\nusage: istota skill tasks done UID [--list LIST]", err)
	}
	list, t, res := r.find(ctx, f.list, uid)
	if res != nil {
		return *res
	}
	if t.Status == StatusCompleted {
		return skills.Result{Stdout: fmt.Appendf(nil, "already done: %s (%s) in %s\n", t.UID, t.Summary, list.ID)}
	}
	t.Status = StatusCompleted
	if _, err := r.c.UpdateTask(ctx, list, t); err != nil {
		return r.fail("done", list, err)
	}
	return skills.Result{Stdout: fmt.Appendf(nil, "done: %s (%s) in %s\n", t.UID, t.Summary, list.ID)}
}

func (r *tasksRun) update(ctx context.Context, args []string) skills.Result {
	var f taskFlags
	fs := newTaskFlags("update", &f, true)
	fs.BoolVar(&f.reopen, "reopen", false, "mark the to-do open again")
	uid, err := splitUID(fs, args)
	if err != nil {
		return skills.Usagef("%v\nusage: istota skill tasks update UID [--list LIST] [--summary TEXT] [--due TIME|none] [--priority N] [--description TEXT] [--reopen] [--tz ZONE] [--json]", err)
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if !set["summary"] && !set["due"] && !set["priority"] && !set["description"] && !f.reopen {
		return skills.Usagef("tasks update: nothing to change: give --summary, --due, --priority, --description or --reopen")
	}
	if set["summary"] && strings.TrimSpace(f.summary) == "" {
		return skills.Usagef("tasks update: --summary must not be empty")
	}
	// Check the values before reading the server, so bad input is refused the same way
	// whatever the list holds.
	var probe Task
	if res := setTaskFields(&probe, f, set); res != nil {
		return *res
	}
	list, t, res := r.find(ctx, f.list, uid)
	if res != nil {
		return *res
	}
	if set["summary"] {
		t.Summary = f.summary
	}
	if set["description"] {
		t.Description = f.description
	}
	if set["due"] {
		t.Due, t.DueDate = probe.Due, probe.DueDate
	}
	if set["priority"] {
		t.Priority = probe.Priority
	}
	if f.reopen {
		t.Status, t.Completed = StatusNeedsAction, time.Time{}
	}
	updated, err := r.c.UpdateTask(ctx, list, t)
	if err != nil {
		return r.fail("update", list, err)
	}
	return r.printOne(list, updated, "updated", f)
}

func (r *tasksRun) delete(ctx context.Context, args []string) skills.Result {
	var f taskFlags
	fs := newTaskFlags("delete", &f, false)
	uid, err := splitUID(fs, args)
	if err != nil {
		return skills.Usagef("%v\nusage: istota skill tasks delete UID [--list LIST]", err)
	}
	list, t, res := r.find(ctx, f.list, uid)
	if res != nil {
		return *res
	}
	if err := r.c.DeleteTask(ctx, list, t); err != nil {
		return r.fail("delete", list, err)
	}
	return skills.Result{Stdout: fmt.Appendf(nil, "deleted %s (%s) from %s\n", t.UID, t.Summary, list.ID)}
}

// find looks for uid only in the user's own task lists.
func (r *tasksRun) find(ctx context.Context, listName, uid string) (Calendar, Task, *skills.Result) {
	lists, res := r.mine(ctx, listName)
	if res != nil {
		return Calendar{}, Task{}, res
	}
	for _, l := range lists {
		t, err := r.c.FindTask(ctx, l, uid)
		if err == nil {
			return l, t, nil
		}
		if !errors.Is(err, ErrNotFound) {
			res := r.fail("find", l, err)
			return Calendar{}, Task{}, &res
		}
	}
	missing := skills.Failf("tasks: no to-do %q in your task lists", uid)
	return Calendar{}, Task{}, &missing
}

func (r *tasksRun) fail(op string, list Calendar, err error) skills.Result {
	switch {
	case errors.Is(err, ErrReadOnly):
		return skills.Failf("tasks %s: the list %s is shared with the bot read-only; share it with \"can edit\" to let the bot change it", op, list.ID)
	case errors.Is(err, ErrNotFound):
		return skills.Failf("tasks %s: the to-do no longer exists", op)
	case errors.Is(err, ErrPrecondition):
		return skills.Failf("tasks %s: the to-do was changed by someone else meanwhile; list it again and retry", op)
	case errors.Is(err, ErrRecurring):
		return skills.Failf("tasks %s: this is a recurring to-do; change it in Nextcloud Tasks", op)
	case errors.Is(err, ErrInvalid):
		return skills.Usagef("tasks %s: %s", op, strings.TrimPrefix(err.Error(), "calendar: "))
	}
	return skills.Internal("the task server", err)
}

// setTaskFields applies --due and --priority (those set) to t.
func setTaskFields(t *Task, f taskFlags, set map[string]bool) *skills.Result {
	loc, err := zone(f.tz)
	if err != nil {
		res := skills.Usagef("tasks: %v", err)
		return &res
	}
	if set["due"] {
		if strings.EqualFold(f.due, "none") {
			t.Due, t.DueDate = time.Time{}, false
		} else if t.Due, t.DueDate, err = parseSkillTime(f.due, loc); err != nil {
			res := skills.Usagef("tasks: --due: %v (or none to remove the due date)", err)
			return &res
		}
	}
	if set["priority"] {
		p, err := parsePriority(f.priority)
		if err != nil {
			res := skills.Usagef("tasks: --priority: %v", err)
			return &res
		}
		t.Priority = p
	}
	return nil
}

func parsePriority(s string) (int, error) {
	switch strings.ToLower(s) {
	case "high":
		return 1, nil
	case "medium":
		return 5, nil
	case "low":
		return 9, nil
	case "none":
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || CheckPriority(n) != nil {
		return 0, fmt.Errorf("%q is not a priority: use 1 (highest) … 9 (lowest), 0 for none, or high, medium, low", s)
	}
	return n, nil
}

type taskJSON struct {
	List        string `json:"list"`
	UID         string `json:"uid"`
	Summary     string `json:"summary"`
	Due         string `json:"due,omitempty"`
	Priority    int    `json:"priority,omitempty"`
	Status      string `json:"status"`
	Completed   string `json:"completed,omitempty"`
	Description string `json:"description,omitempty"`
	Recurring   bool   `json:"recurring,omitempty"`
}

func toTaskJSON(list Calendar, t Task, loc *time.Location) taskJSON {
	out := taskJSON{List: list.ID, UID: t.UID, Summary: t.Summary, Priority: t.Priority, Status: t.Status,
		Description: t.Description, Recurring: t.Recurring}
	if out.Status == "" {
		out.Status = StatusNeedsAction
	}
	switch {
	case t.Due.IsZero():
	case t.DueDate:
		out.Due = t.Due.Format(time.DateOnly)
	default:
		out.Due = t.Due.In(loc).Format(time.RFC3339)
	}
	if !t.Completed.IsZero() {
		out.Completed = t.Completed.In(loc).Format(time.RFC3339)
	}
	return out
}

func writeTask(b *strings.Builder, t taskJSON) {
	box := "[ ]"
	if t.Status == StatusCompleted || t.Status == StatusCancelled || t.Completed != "" {
		box = "[x]"
	}
	fmt.Fprintf(b, "%s %s\n  list: %s  uid: %s\n", box, t.Summary, t.List, t.UID)
	var extra []string
	if t.Due != "" {
		extra = append(extra, "due: "+t.Due)
	}
	if t.Priority != 0 {
		extra = append(extra, fmt.Sprintf("priority: %d (1 highest)", t.Priority))
	}
	if t.Status != StatusNeedsAction {
		extra = append(extra, "status: "+strings.ToLower(t.Status))
	}
	if t.Recurring {
		extra = append(extra, "recurring")
	}
	if len(extra) > 0 {
		fmt.Fprintf(b, "  %s\n", strings.Join(extra, "  "))
	}
	if t.Description != "" {
		fmt.Fprintf(b, "  description: %s\n", strings.ReplaceAll(t.Description, "\n", "\n    "))
	}
}

func (r *tasksRun) printOne(list Calendar, t Task, verb string, f taskFlags) skills.Result {
	loc, _ := zone(f.tz) // already validated by setTaskFields
	j := toTaskJSON(list, t, loc)
	if f.json {
		return jsonResult(j)
	}
	var b strings.Builder
	b.WriteString(verb + ": ")
	writeTask(&b, j)
	return skills.Result{Stdout: []byte(b.String())}
}
