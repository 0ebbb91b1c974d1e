package userconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Task states as written between the brackets of a TASKS.md line.
const (
	TaskOpen    = ' ' // - [ ] waiting to be picked up
	TaskRunning = '~' // - [~] being worked on
	TaskDone    = 'x' // - [x] finished
	TaskFailed  = '!' // - [!] could not be done
)

// TaskLine is one task of TASKS.md: a top-level list item "- [ ] text" outside
// HTML comments and code blocks.
type TaskLine struct {
	Line   int    // 1-based line number
	Offset int    // byte offset of the state character in the file
	State  rune   // TaskOpen, TaskRunning, TaskDone ("X" counts as done) or TaskFailed
	Text   string // the task, without marker and HTML comments
	ID     string // TaskID(Text): stable while the text is unchanged
}

// TaskID identifies a task by its text: the hex SHA-256 of the text with runs of
// blanks folded to one space. Marking a task keeps its ID; editing its words makes
// it a new task.
func TaskID(text string) string {
	sum := sha256.Sum256([]byte(strings.Join(strings.Fields(text), " ")))
	return hex.EncodeToString(sum[:])
}

// ParseTasks lists the tasks of TASKS.md in file order. Indented items are not
// tasks: that is where result notes and the user's own sub-points go.
func ParseTasks(src []byte) []TaskLine {
	var out []TaskLine
	for i, l := range scanMarkdown(src) {
		if l.inFence || l.isFence {
			continue
		}
		state, text, ok := taskMarker(l.text, l.visible)
		if !ok {
			continue
		}
		out = append(out, TaskLine{Line: i + 1, Offset: l.start + 3, State: state, Text: text, ID: TaskID(text)})
	}
	return out
}

// taskMarker recognises "- [s] text" (or "*", "+") at the start of the line. The
// marker must be the same in the raw and the comment-stripped line, so that a
// commented-out marker never counts and Offset always points at a real state byte.
func taskMarker(raw, visible string) (rune, string, bool) {
	if len(visible) < 6 || len(raw) < 6 || raw[:5] != visible[:5] {
		return 0, "", false
	}
	if (visible[0] != '-' && visible[0] != '*' && visible[0] != '+') || visible[1] != ' ' || visible[2] != '[' || visible[4] != ']' {
		return 0, "", false
	}
	if visible[5] != ' ' && visible[5] != '\t' {
		return 0, "", false
	}
	var state rune
	switch visible[3] {
	case ' ', '~', 'x', '!':
		state = rune(visible[3])
	case 'X':
		state = TaskDone
	default:
		return 0, "", false
	}
	text := strings.TrimSpace(visible[6:])
	if text == "" {
		return 0, "", false
	}
	return state, text, true
}

// MarkTask sets the state of the task with the given ID and, when note is not
// empty, inserts it as an indented quote ("  > …") right below the task line. It
// changes the single state byte and inserts the note; every other byte of src
// stays as it was, so what the user edited meanwhile survives. It reports false,
// returning src unchanged, when no suitable task has that ID (the user edited or
// deleted it) or state is not one of the task states.
//
// With duplicate task texts the line is chosen by state: marking running takes the
// first open one, marking done or failed the first running one (else the first
// open one), and reopening the first one that is not open.
func MarkTask(src []byte, id string, state rune, note string) ([]byte, bool) {
	var want []rune
	switch state {
	case TaskRunning:
		want = []rune{TaskOpen}
	case TaskDone, TaskFailed:
		want = []rune{TaskRunning, TaskOpen}
	case TaskOpen:
		want = []rune{TaskRunning, TaskDone, TaskFailed}
	default:
		return src, false
	}
	tasks := ParseTasks(src)
	var target *TaskLine
	for _, w := range want {
		for i := range tasks {
			if tasks[i].ID == id && tasks[i].State == w {
				target = &tasks[i]
				break
			}
		}
		if target != nil {
			break
		}
	}
	if target == nil {
		return src, false
	}
	out := make([]byte, 0, len(src)+len(note)+16)
	out = append(out, src...)
	out[target.Offset] = byte(state)
	if strings.TrimSpace(note) == "" {
		return out, true
	}
	end := strings.IndexByte(string(src[target.Offset:]), '\n')
	var block strings.Builder
	if end < 0 {
		// The task is the last line and has no line ending: start a new line.
		for _, l := range noteLines(note) {
			block.WriteString("\n" + l)
		}
		return append(out, block.String()...), true
	}
	at := target.Offset + end + 1
	eol := "\n"
	if end > 0 && src[target.Offset+end-1] == '\r' {
		eol = "\r\n"
	}
	for _, l := range noteLines(note) {
		block.WriteString(l + eol)
	}
	res := make([]byte, 0, len(out)+block.Len())
	res = append(res, out[:at]...)
	res = append(res, block.String()...)
	return append(res, out[at:]...), true
}

// noteLines formats a result note as quoted lines indented under the task. Comment
// delimiters are broken up: an opening one would hide the tasks that follow, a
// closing one could end a comment the task line opened.
func noteLines(note string) []string {
	note = strings.Trim(strings.ReplaceAll(note, "\r", ""), "\n")
	var out []string
	for _, l := range strings.Split(note, "\n") {
		for strings.Contains(l, "<!--") || strings.Contains(l, "-->") {
			l = strings.ReplaceAll(l, "<!--", "< !--")
			l = strings.ReplaceAll(l, "-->", "-- >")
		}
		l = strings.TrimRight(l, " \t")
		if l == "" {
			out = append(out, "  >")
		} else {
			out = append(out, "  > "+l)
		}
	}
	return out
}
