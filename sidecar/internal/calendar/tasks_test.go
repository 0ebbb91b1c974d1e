package calendar

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/emersion/go-ical"

	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/skills"
)

// taskFixture is the calendar fixture plus task lists: alice's "tasks" list (from
// newFixture, read-write) with three to-dos, her read-only "groceries" list, a calendar
// of hers that takes events and to-dos, and bob's list.
type taskFixture struct {
	*fixture
	aliceTasks, groceries, bobTasks string
	run                             func(user string, args ...string) skills.Result
}

func todo(uid, summary string, props ...string) string {
	return "BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//test//EN\nBEGIN:VTODO\nUID:" + uid + "\nDTSTAMP:20250101T000000Z\nSUMMARY:" + summary + "\n" +
		strings.Join(props, "\n") + "\nEND:VTODO\nEND:VCALENDAR\n"
}

func newTaskFixture(t *testing.T) *taskFixture {
	t.Helper()
	f := &taskFixture{fixture: newFixture(t)}
	f.aliceTasks = testHome + "tasks_shared_by_alice/"
	f.groceries = f.b.addCalendar("groceries_shared_by_alice", "Groceries", "VTODO")
	f.b.setReadOnly(f.groceries)
	// Bob's list has the display name of alice's: by name, alice still reaches only hers.
	f.bobTasks = f.b.addCalendar("tasks_shared_by_bob", "Alice Tasks", "VTODO")
	f.b.addCalendar("mixed_shared_by_alice", "Mixed", "VEVENT", "VTODO")

	f.b.addObject(t, f.aliceTasks, "report.ics", todo("report", "Write the report", "DUE:20250305T170000Z", "PRIORITY:1"))
	f.b.addObject(t, f.aliceTasks, "plants.ics", todo("plants", "Water the plants", "DUE;VALUE=DATE:20250303"))
	f.b.addObject(t, f.aliceTasks, "someday.ics", todo("someday", "Learn the cello"))
	f.b.addObject(t, f.aliceTasks, "taxes.ics", todo("taxes", "File taxes", "STATUS:COMPLETED", "COMPLETED:20250201T100000Z", "PERCENT-COMPLETE:100"))
	f.b.addObject(t, f.groceries, "milk.ics", todo("milk", "Buy milk"))
	f.b.addObject(t, f.bobTasks, "bob-todo.ics", todo("bob-todo", "Bob's secret errand [bob]"))

	reg := skills.NewRegistry()
	if err := RegisterTasksSkill(reg, f.c); err != nil {
		t.Fatal(err)
	}
	s, ok := reg.Lookup("tasks")
	if !ok {
		t.Fatal("tasks skill not registered")
	}
	f.run = func(user string, args ...string) skills.Result {
		t.Helper()
		return s.Run(context.Background(), skills.Invocation{Args: args, UserID: user, TaskID: 1})
	}
	return f
}

// component is the VTODO stored at p on the server.
func (f *taskFixture) component(t *testing.T, p string) *ical.Component {
	t.Helper()
	o, ok := f.b.object(p)
	if !ok {
		t.Fatalf("no object at %s", p)
	}
	for _, c := range o.data.Children {
		if c.Name == ical.CompToDo {
			return c
		}
	}
	t.Fatalf("no VTODO at %s", p)
	return nil
}

func TestTaskLists(t *testing.T) {
	f := newTaskFixture(t)
	lists, err := f.c.TaskLists(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"groceries_shared_by_alice|alice", "mixed_shared_by_alice|alice", "tasks_shared_by_alice|alice", "tasks_shared_by_bob|bob"}
	if got := ids(lists); !slices.Equal(got, want) {
		t.Errorf("task lists = %v, want %v", got, want)
	}
	cals, err := f.c.Calendars(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(cals); slices.Contains(got, "tasks_shared_by_alice|alice") || !slices.Contains(got, "mixed_shared_by_alice|alice") {
		t.Errorf("calendars = %v: the VTODO-only list must be left out, the mixed one kept", got)
	}
}

func TestTasksSkillRead(t *testing.T) {
	f := newTaskFixture(t)

	r := f.run("alice", "lists")
	out := string(r.Stdout)
	if r.ExitCode != 0 || !strings.Contains(out, "tasks_shared_by_alice") || !strings.Contains(out, "groceries_shared_by_alice") {
		t.Errorf("lists: exit %d, out %q, err %q", r.ExitCode, out, r.Stderr)
	}
	if strings.Contains(out, "bob") {
		t.Errorf("alice's lists show bob's: %q", out)
	}
	if r := f.run("carol", "lists"); r.ExitCode != 0 || !strings.Contains(string(r.Stdout), "no task lists") {
		t.Errorf("carol: exit %d, out %q", r.ExitCode, r.Stdout)
	}

	// Open to-dos by due date (a date-only due first: it is earlier), the one without a
	// due date last; the completed one only with --all.
	r = f.run("alice", "list", "--list", "tasks_shared_by_alice", "--json")
	var got []taskJSON
	if err := json.Unmarshal(r.Stdout, &got); r.ExitCode != 0 || err != nil {
		t.Fatalf("list: exit %d, %v, err %q", r.ExitCode, err, r.Stderr)
	}
	var uids []string
	for _, x := range got {
		uids = append(uids, x.UID)
	}
	if strings.Join(uids, ",") != "plants,report,someday" {
		t.Errorf("open to-dos = %v", uids)
	}
	if got[0].Due != "2025-03-03" || got[1].Due != "2025-03-05T17:00:00Z" || got[1].Priority != 1 || got[1].Status != StatusNeedsAction {
		t.Errorf("to-dos: %+v", got)
	}
	r = f.run("alice", "list", "--all", "--tz", "Europe/Berlin")
	out = string(r.Stdout)
	if r.ExitCode != 0 || !strings.Contains(out, "[x] File taxes") || !strings.Contains(out, "[ ] Write the report") ||
		!strings.Contains(out, "due: 2025-03-05T18:00:00+01:00") || !strings.Contains(out, "Buy milk") {
		t.Errorf("list --all: exit %d, out %q, err %q", r.ExitCode, out, r.Stderr)
	}
	if strings.Contains(out, "[bob]") {
		t.Errorf("alice's to-dos show bob's: %q", out)
	}
	r = f.run("bob", "list")
	if out := string(r.Stdout); r.ExitCode != 0 || !strings.Contains(out, "[bob]") || strings.Contains(out, "report") {
		t.Errorf("bob's list: exit %d, out %q", r.ExitCode, out)
	}
}

func TestTasksSkillWrite(t *testing.T) {
	f := newTaskFixture(t)

	// add, with a due date in a zone and a priority by name
	r := f.run("alice", "add", "--list", "alice tasks", "--summary", "Call the plumber", "--due", "2025-03-04T09:00", "--tz", "Europe/Berlin",
		"--priority", "high", "--description", "about the sink", "--json")
	var added taskJSON
	if err := json.Unmarshal(r.Stdout, &added); r.ExitCode != 0 || err != nil {
		t.Fatalf("add: exit %d, %v, err %q", r.ExitCode, err, r.Stderr)
	}
	if added.List != "tasks_shared_by_alice" || added.Due != "2025-03-04T09:00:00+01:00" || added.Priority != 1 {
		t.Errorf("added: %+v", added)
	}
	p := f.aliceTasks + added.UID + ".ics"
	comp := f.component(t, p)
	if s, _ := comp.Props.Text(ical.PropSummary); s != "Call the plumber" {
		t.Errorf("stored summary %q", s)
	}
	if due := comp.Props.Get(ical.PropDue); due == nil || due.Params.Get(ical.PropTimezoneID) != "Europe/Berlin" || due.Value != "20250304T090000" {
		t.Errorf("stored DUE %+v", due)
	}
	if pr := comp.Props.Get(ical.PropPriority); pr == nil || pr.Value != "1" {
		t.Errorf("stored PRIORITY %+v", pr)
	}

	// done
	r = f.run("alice", "done", added.UID)
	if r.ExitCode != 0 || !strings.Contains(string(r.Stdout), "done: "+added.UID) {
		t.Fatalf("done: exit %d, out %q, err %q", r.ExitCode, r.Stdout, r.Stderr)
	}
	comp = f.component(t, p)
	if st, _ := comp.Props.Text(ical.PropStatus); st != StatusCompleted || comp.Props.Get(ical.PropCompleted) == nil || comp.Props.Get(ical.PropPercentComplete).Value != "100" {
		t.Errorf("after done: status %q, props %v", st, comp.Props)
	}
	if d, _ := comp.Props.Text(ical.PropDescription); d != "about the sink" {
		t.Errorf("done lost the description: %q", d)
	}
	if out := string(f.run("alice", "list").Stdout); strings.Contains(out, "plumber") {
		t.Errorf("a done to-do is listed as open: %q", out)
	}

	// update: reopen, clear the due date, change the priority; unmanaged props stay
	f.b.addObject(t, f.aliceTasks, "alarm.ics", todo("alarm", "With alarm", "DUE:20250310T080000Z", "CATEGORIES:home"))
	r = f.run("alice", "update", "alarm", "--due", "none", "--priority", "7", "--summary", "Alarm renamed")
	if r.ExitCode != 0 || !strings.Contains(string(r.Stdout), "Alarm renamed") {
		t.Fatalf("update: exit %d, out %q, err %q", r.ExitCode, r.Stdout, r.Stderr)
	}
	comp = f.component(t, f.aliceTasks+"alarm.ics")
	if comp.Props.Get(ical.PropDue) != nil || comp.Props.Get(ical.PropPriority).Value != "7" || comp.Props.Get(ical.PropCategories) == nil {
		t.Errorf("after update: %v", comp.Props)
	}
	r = f.run("alice", "update", added.UID, "--reopen")
	comp = f.component(t, p)
	if st, _ := comp.Props.Text(ical.PropStatus); r.ExitCode != 0 || st != StatusNeedsAction || comp.Props.Get(ical.PropCompleted) != nil {
		t.Errorf("reopen: exit %d, err %q, status %q", r.ExitCode, r.Stderr, st)
	}

	// delete
	r = f.run("alice", "delete", added.UID, "--list", "tasks_shared_by_alice")
	if r.ExitCode != 0 {
		t.Fatalf("delete: exit %d, err %q", r.ExitCode, r.Stderr)
	}
	if _, ok := f.b.object(p); ok {
		t.Error("the deleted to-do is still on the server")
	}
}

func TestTasksSkillRefusals(t *testing.T) {
	f := newTaskFixture(t)
	bobBefore, groceriesBefore := f.b.count(f.bobTasks), f.b.count(f.groceries)
	milkBefore, _ := f.b.object(f.groceries + "milk.ics")

	t.Run("read-only list", func(t *testing.T) {
		for _, args := range [][]string{
			{"add", "--list", "Groceries", "--summary", "Eggs"},
			{"done", "milk"},
			{"update", "milk", "--summary", "Oat milk"},
			{"delete", "milk"},
		} {
			r := f.run("alice", args...)
			if r.ExitCode != 1 || !strings.Contains(string(r.Stderr), "groceries_shared_by_alice is shared with the bot read-only") {
				t.Errorf("%v: exit %d, err %q", args, r.ExitCode, r.Stderr)
			}
		}
		if milk, _ := f.b.object(f.groceries + "milk.ics"); f.b.count(f.groceries) != groceriesBefore || milk.etag != milkBefore.etag {
			t.Error("the read-only list changed")
		}
	})

	t.Run("another user's list", func(t *testing.T) {
		for _, args := range [][]string{
			{"list", "--list", "tasks_shared_by_bob"},
			{"add", "--list", "tasks_shared_by_bob", "--summary", "intrusion"},
			{"add", "--list", "personal", "--summary", "intrusion"},
			{"done", "bob-todo"},
			{"update", "bob-todo", "--summary", "hacked"},
			{"delete", "bob-todo", "--list", "tasks_shared_by_bob"},
		} {
			r := f.run("alice", args...)
			if r.ExitCode == 0 || strings.Contains(string(r.Stdout)+string(r.Stderr), "secret errand") {
				t.Errorf("%v: exit %d, out %q, err %q", args, r.ExitCode, r.Stdout, r.Stderr)
			}
		}
		// The answer for bob's list is the answer for a list that does not exist.
		a := f.run("alice", "list", "--list", "tasks_shared_by_bob")
		b := f.run("alice", "list", "--list", "no_such_list")
		if strings.ReplaceAll(string(a.Stderr), "tasks_shared_by_bob", "X") != strings.ReplaceAll(string(b.Stderr), "no_such_list", "X") {
			t.Errorf("bob's list is told apart: %q vs %q", a.Stderr, b.Stderr)
		}
		if f.b.count(f.bobTasks) != bobBefore {
			t.Error("bob's list changed")
		}
		if st, _ := f.component(t, f.bobTasks+"bob-todo.ics").Props.Text(ical.PropStatus); st != "" {
			t.Errorf("bob's to-do has status %q", st)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{nil, "usage:"},
			{[]string{"frobnicate"}, `unknown subcommand "frobnicate"`},
			{[]string{"add", "--list", "Tasks"}, "usage: istota skill tasks add"},
			{[]string{"add", "--list", "Tasks", "--summary", "  "}, "usage: istota skill tasks add"},
			{[]string{"add", "--list", "Tasks", "--summary", "x", "--priority", "12"}, `"12" is not a priority`},
			{[]string{"add", "--list", "Tasks", "--summary", "x", "--due", "next week"}, `--due: "next week" is not a time`},
			{[]string{"add", "--list", "Tasks", "--summary", "x", "--tz", "Mars/Base"}, "not an IANA time zone"},
			{[]string{"update", "report"}, "nothing to change"},
			{[]string{"update", "report", "--summary", ""}, "--summary must not be empty"},
			{[]string{"update", "report", "--priority", "urgent"}, `"urgent" is not a priority`},
			{[]string{"done"}, "give exactly one UID"},
			{[]string{"done", "a", "b"}, "give exactly one UID"},
			{[]string{"list", "--bogus"}, "usage: istota skill tasks list"},
		} {
			r := f.run("alice", tc.args...)
			if r.ExitCode != 2 || !strings.Contains(string(r.Stderr), tc.want) {
				t.Errorf("%v: exit %d, err %q, want %q", tc.args, r.ExitCode, r.Stderr, tc.want)
			}
		}
		if r := f.run("alice", "done", "nope"); r.ExitCode != 1 || !strings.Contains(string(r.Stderr), `no to-do "nope" in your task lists`) {
			t.Errorf("unknown uid: exit %d, err %q", r.ExitCode, r.Stderr)
		}
		if r := f.run("", "lists"); r.ExitCode != 1 || !strings.Contains(string(r.Stderr), "no user") {
			t.Errorf("no user: exit %d, err %q", r.ExitCode, r.Stderr)
		}
		if _, ok := f.b.object(f.aliceTasks + "x.ics"); ok {
			t.Error("a refused add stored something")
		}
	})
}

func TestClassifyTasks(t *testing.T) {
	for _, tc := range []struct {
		args []string
		tier approval.Tier
		sum  string
	}{
		{[]string{"lists"}, approval.TierRead, ""},
		{[]string{"list", "--all"}, approval.TierRead, ""},
		{nil, approval.TierRead, ""},
		{[]string{"add", "--list", "Tasks", "--summary", "x"}, approval.TierExternal, "Add a to-do: --list Tasks --summary x"},
		{[]string{"done", "report"}, approval.TierExternal, "Complete the to-do report: report"},
		{[]string{"update", "report", "--due", "none"}, approval.TierExternal, "Change the to-do report"},
		{[]string{"delete", "report"}, approval.TierExternal, "Delete the to-do report"},
	} {
		a := classifyTasks(context.Background(), skills.Invocation{Args: tc.args})
		if a.Tier != tc.tier || !strings.Contains(a.Summary, tc.sum) {
			t.Errorf("%v: %v %q", tc.args, a.Tier, a.Summary)
		}
	}
}

func TestStatusErr(t *testing.T) {
	for code, want := range map[int]error{404: ErrNotFound, 410: ErrNotFound, 412: ErrPrecondition, 403: ErrReadOnly} {
		err := statusErr(&http.Response{StatusCode: code, Status: http.StatusText(code)}, "put", "/x.ics")
		if !errors.Is(err, want) {
			t.Errorf("%d: %v", code, err)
		}
	}
	if err := statusErr(&http.Response{StatusCode: 403}, "get", "/x.ics"); errors.Is(err, ErrReadOnly) {
		t.Errorf("a refused read is no read-only share: %v", err)
	}
	if err := statusErr(&http.Response{StatusCode: 201}, "put", "/x.ics"); err != nil {
		t.Error(err)
	}
}

func TestCreateRetriesOnceAfterAServerError(t *testing.T) {
	f := newTaskFixture(t)
	list := newCalendar(f.aliceTasks, "Alice Tasks")
	before := f.b.count(f.aliceTasks)
	f.b.mu.Lock()
	f.b.failPuts = 1
	f.b.mu.Unlock()
	got, err := f.c.CreateTask(context.Background(), list, Task{Summary: "after a locked database"})
	if err != nil || got.ETag == "" || f.b.count(f.aliceTasks) != before+1 {
		t.Fatalf("one 500: %+v %v, %d objects", got, err, f.b.count(f.aliceTasks))
	}
	f.b.mu.Lock()
	f.b.failPuts = 2
	f.b.mu.Unlock()
	if _, err := f.c.CreateTask(context.Background(), list, Task{Summary: "twice"}); err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("two 500s: %v", err)
	}
	// Updates are not put again: their If-Match could not tell a stored first try.
	f.b.mu.Lock()
	f.b.failPuts = 1
	f.b.mu.Unlock()
	if _, err := f.c.UpdateTask(context.Background(), list, got); err == nil {
		t.Fatal("an update after a 500 succeeded")
	}
}
