package userconfig

import (
	"bytes"
	"strings"
	"testing"
)

// fuzzSeeds are shared starting points: valid files, each kind of mistake, and the
// Markdown constructs the extractor has to get right.
func fuzzSeeds() []string {
	return []string{
		"",
		"```toml\n[[jobs]]\nname = \"a\"\nschedule = \"@daily\"\nprompt = \"p\"\n```\n",
		"<!--\n```toml\n[[jobs]]\n```\n-->\n[[jobs]]\nname = 1\n",
		"[[checks]]\nname = \"w\"\nkind = \"url-health\"\nurl = \"https://x.org\"\nquiet_hours = \"22:00-07:00\"\n",
		"[[briefings]]\nname = \"m\"\nschedule = \"0 7 * * 1-5\"\ncomponents = [\"news\"]\nfeeds = [\"https://x.org/f\"]\n",
		"jobs = [{name = \"a\", schedule = \"TZ=UTC\", prompt = \"\"\"x\n[[jobs]]\"\"\"}]\n",
		"[[jobs]]\nschedule = \"CRON_TZ=Europe/Berlin\"\n",
		"~~~toml\n[[checks]]\nkind = 'file-watch'\npath = '../x'\n~~~\n",
		"- [ ] a\n- [~] b <!-- c\n- [x] d\n-->\n```\n- [!] e\n```\n",
		"- [ ] t\r\n  > note\r\n- [ ] t",
	}
}

func FuzzParseCron(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s), "Europe/Berlin")
	}
	f.Fuzz(func(t *testing.T, src []byte, tz string) {
		got, problems := ParseCron(src, tz)
		checkFuzzProblems(t, src, problems)
		for _, j := range got.Jobs {
			if j.Name == "" || (j.Prompt == "") == (j.Command == "") || j.TZ == "" {
				t.Fatalf("invalid job returned: %+v", j)
			}
		}
	})
}

func FuzzParseHeartbeat(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, src []byte, isAdmin bool) {
		got, problems := ParseHeartbeat(src, isAdmin)
		checkFuzzProblems(t, src, problems)
		for _, c := range got.Checks {
			if c.Interval < MinCheckInterval || (c.Kind == CheckShellCommand && !isAdmin) || strings.Contains(c.Path, "..") {
				t.Fatalf("invalid check returned: %+v", c)
			}
		}
	})
}

func FuzzParseBriefings(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		got, problems := ParseBriefings(src)
		checkFuzzProblems(t, src, problems)
		for _, b := range got.Briefings {
			if b.Name == "" || len(b.Components) == 0 {
				t.Fatalf("invalid briefing returned: %+v", b)
			}
		}
	})
}

// checkFuzzProblems demands messages a user can act on, pointing into the file.
func checkFuzzProblems(t *testing.T, src []byte, problems []Problem) {
	t.Helper()
	lines := bytes.Count(src, []byte("\n")) + 1
	for _, p := range problems {
		if p.Message == "" || p.Line < 0 || p.Line > lines+1 {
			t.Fatalf("bad problem %+v for a file of %d lines", p, lines)
		}
	}
}

func FuzzParseTasks(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		for _, tl := range ParseTasks(src) {
			if tl.Offset < 0 || tl.Offset >= len(src) || tl.Text == "" || tl.ID != TaskID(tl.Text) {
				t.Fatalf("bad task %+v", tl)
			}
			if s := rune(src[tl.Offset]); s != tl.State && !(s == 'X' && tl.State == TaskDone) {
				t.Fatalf("Offset of %+v points at %q", tl, s)
			}
		}
	})
}

func FuzzMarkTask(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s), 0, byte('x'), "done\n<!-- -->")
	}
	f.Fuzz(func(t *testing.T, src []byte, pick int, state byte, note string) {
		before := ParseTasks(src)
		if len(before) == 0 {
			if out, ok := MarkTask(src, TaskID("x"), rune(state), note); ok || !bytes.Equal(out, src) {
				t.Fatal("marked a task in a file without tasks")
			}
			return
		}
		if pick < 0 {
			pick = -pick
		}
		id := before[pick%len(before)].ID
		out, ok := MarkTask(src, id, rune(state), note)
		if !ok {
			if !bytes.Equal(out, src) {
				t.Fatal("changed the file without marking")
			}
			return
		}
		after := ParseTasks(out)
		if len(after) != len(before) {
			t.Fatalf("%d tasks before, %d after:\n%q\n%q", len(before), len(after), src, out)
		}
		changed := -1
		for i := range before {
			b, a := before[i], after[i]
			if a.Text != b.Text || a.ID != b.ID {
				t.Fatalf("task %d changed text: %+v -> %+v", i, b, a)
			}
			if a.State != b.State || src[b.Offset] != out[a.Offset] {
				if changed >= 0 || a.State != rune(state) {
					t.Fatalf("unexpected state change at task %d: %+v -> %+v", i, b, a)
				}
				changed = i
			}
		}
		if changed < 0 {
			t.Fatal("reported marked but no state changed")
		}
		// Every other byte survives: removing the inserted note lines and restoring
		// the one state byte gives back the input.
		c := before[changed]
		restored := append([]byte(nil), out...)
		restored[c.Offset] = src[c.Offset]
		inserted := len(out) - len(src)
		if inserted < 0 {
			t.Fatal("output shorter than input")
		}
		if inserted > 0 {
			nl := bytes.IndexByte(out[c.Offset:], '\n')
			var at int
			if nl < 0 || c.Offset+nl+1+inserted > len(out) || bytes.IndexByte(src[c.Offset:], '\n') < 0 {
				at = len(src) // note appended after a last line without ending
			} else {
				at = c.Offset + nl + 1
			}
			note := restored[at : at+inserted]
			for _, l := range strings.Split(strings.Trim(strings.ReplaceAll(string(note), "\r", ""), "\n"), "\n") {
				if !strings.HasPrefix(l, "  >") {
					t.Fatalf("inserted line %q is not an indented note", l)
				}
			}
			restored = append(restored[:at:at], restored[at+inserted:]...)
		}
		if !bytes.Equal(restored, src) {
			t.Fatalf("other bytes changed:\n%q\n%q", src, out)
		}
	})
}
