package userconfig

import (
	"reflect"
	"strings"
	"testing"
)

const tasksFile = "# Tasks\r\n" + // 1, CRLF on purpose
	"- [ ] Draft   a reply\r\n" + // 2
	"- [~] Running one\n" + // 3
	"* [x] Done one\n" + // 4
	"+ [X] Done too <!-- note to self -->\n" + // 5
	"- [!] Failed one\n" + // 6
	"  - [ ] indented is not a task\n" + // 7
	"- [ ]\n" + // 8: empty
	"- [?] unknown state\n" + // 9
	"-[ ] no space\n" + // 10
	"<!--\n- [ ] commented out\n-->\n" + // 11-13
	"```\n- [ ] in a code block\n```\n" + // 14-16
	"- <!-- x --> [ ] hidden marker\n" + // 17
	"- [ ] Last one" // 18, no line ending

func TestParseTasks(t *testing.T) {
	got := ParseTasks([]byte(tasksFile))
	type row struct {
		line  int
		state rune
		text  string
	}
	want := []row{
		{2, ' ', "Draft   a reply"},
		{3, '~', "Running one"},
		{4, 'x', "Done one"},
		{5, 'x', "Done too"},
		{6, '!', "Failed one"},
		{18, ' ', "Last one"},
	}
	var rows []row
	for _, tl := range got {
		rows = append(rows, row{tl.Line, tl.State, tl.Text})
		if tl.ID != TaskID(tl.Text) || len(tl.ID) != 64 {
			t.Errorf("line %d: ID %q", tl.Line, tl.ID)
		}
		if tasksFile[tl.Offset-2:tl.Offset] != " [" || rune(tasksFile[tl.Offset]) != tl.State && tasksFile[tl.Offset] != 'X' {
			t.Errorf("line %d: Offset %d does not point at the state", tl.Line, tl.Offset)
		}
	}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("got  %v\nwant %v", rows, want)
	}
	if TaskID("Draft   a reply ") != TaskID("Draft a reply") || TaskID("a") == TaskID("b") {
		t.Error("TaskID does not fold blanks or does not tell texts apart")
	}
}

func TestMarkTask(t *testing.T) {
	draft := TaskID("Draft a reply")
	tests := []struct {
		name  string
		src   string
		id    string
		state rune
		note  string
		want  string
		ok    bool
	}{
		{"running, CRLF kept", tasksFile, draft, TaskRunning, "",
			strings.Replace(tasksFile, "- [ ] Draft", "- [~] Draft", 1), true},
		{"done with note in CRLF file", "a\r\n- [~] Draft a reply\r\nb\r\n", draft, TaskDone, "Sent.\nSee <!-- x --> inbox.\n",
			"a\r\n- [x] Draft a reply\r\n  > Sent.\r\n  > See < !-- x -- > inbox.\r\nb\r\n", true},
		{"last line without ending", tasksFile, TaskID("Last one"), TaskFailed, "no access\n\nretry later",
			strings.Replace(tasksFile, "- [ ] Last one", "- [!] Last one", 1) + "\n  > no access\n  >\n  > retry later", true},
		{"duplicates: done goes to the running one", "- [ ] same\n- [~] same\n", TaskID("same"), TaskDone, "",
			"- [ ] same\n- [x] same\n", true},
		{"duplicates: running takes the first open one", "- [x] same\n- [ ] same\n- [ ] same\n", TaskID("same"), TaskRunning, "",
			"- [x] same\n- [~] same\n- [ ] same\n", true},
		{"reopen", "- [!] t\n", TaskID("t"), TaskOpen, "", "- [ ] t\n", true},
		{"edited by the user", "- [~] Draft a reply to Bob\n", draft, TaskDone, "x", "- [~] Draft a reply to Bob\n", false},
		{"already done", "- [x] Draft a reply\n", draft, TaskDone, "x", "- [x] Draft a reply\n", false},
		{"commented out", "<!-- - [ ] t -->\n<!--\n- [ ] t\n-->\n", TaskID("t"), TaskRunning, "", "<!-- - [ ] t -->\n<!--\n- [ ] t\n-->\n", false},
		{"bad state", "- [ ] t\n", TaskID("t"), 'y', "", "- [ ] t\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := MarkTask([]byte(tt.src), tt.id, tt.state, tt.note)
			if ok != tt.ok || string(got) != tt.want {
				t.Fatalf("got %q, %v\nwant %q, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestMarkTaskNoteInsideComment(t *testing.T) {
	// The task line opens a comment; a note with a closing delimiter must not end
	// it early and expose the commented-out task below.
	src := "- [~] t <!-- started\n- [ ] hidden\n-->\n"
	got, ok := MarkTask([]byte(src), TaskID("t"), TaskDone, "done -->")
	if !ok {
		t.Fatal("not marked")
	}
	tasks := ParseTasks(got)
	if len(tasks) != 1 || tasks[0].Text != "t" || tasks[0].State != TaskDone {
		t.Fatalf("tasks after marking: %+v in %q", tasks, got)
	}
}
