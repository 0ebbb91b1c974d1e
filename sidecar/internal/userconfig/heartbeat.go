package userconfig

import (
	"fmt"
	"path"
	"strings"
	"time"
)

// CheckKind is what a heartbeat check looks at. None of them involves the model.
type CheckKind string

// The heartbeat check kinds.
const (
	CheckFileWatch         CheckKind = "file-watch"         // a file in the user's folder changed
	CheckURLHealth         CheckKind = "url-health"         // a web address stops answering
	CheckCalendarConflicts CheckKind = "calendar-conflicts" // overlapping calendar events
	CheckTaskDeadline      CheckKind = "task-deadline"      // tasks close to or past their due date
	CheckSelfCheck         CheckKind = "self-check"         // the assistant's own health
	CheckShellCommand      CheckKind = "shell-command"      // a command's exit status; administrators only
)

// CheckKinds lists every check kind in the order the documentation names them.
func CheckKinds() []CheckKind {
	return []CheckKind{CheckFileWatch, CheckURLHealth, CheckCalendarConflicts, CheckTaskDeadline, CheckSelfCheck, CheckShellCommand}
}

// Defaults and limits for heartbeat checks.
const (
	DefaultCheckInterval = 15 * time.Minute
	MinCheckInterval     = time.Minute
	DefaultCheckCooldown = time.Hour
)

// HeartbeatFile is the valid content of HEARTBEAT.md.
type HeartbeatFile struct {
	Checks []Check
}

// Check is one heartbeat check of HEARTBEAT.md.
type Check struct {
	Name     string
	Line     int // line of the check's [[checks]] header
	Kind     CheckKind
	Interval time.Duration // how often it runs; at least MinCheckInterval
	Cooldown time.Duration // silence after an alert, so a lasting fault is told once
	Quiet    QuietHours    // no alerts in this daily window; zero value: never quiet
	Enabled  bool          // default true
	URL      string        // url-health: the http(s) address to probe
	Path     string        // file-watch: cleaned path relative to the user's folder
	Command  string        // shell-command: run by the administrator's shell check
}

// QuietHours is a daily window in minutes since midnight. End before Start means
// the window runs across midnight (22:00-07:00).
type QuietHours struct {
	Start, End int
}

// IsZero reports whether no quiet hours are set.
func (q QuietHours) IsZero() bool { return q.Start == q.End }

// Contains reports whether t's wall clock, in t's own location, falls inside the
// window; pass t.In(userLocation). The start minute is inside, the end minute not.
func (q QuietHours) Contains(t time.Time) bool {
	if q.IsZero() {
		return false
	}
	m := t.Hour()*60 + t.Minute()
	if q.Start < q.End {
		return m >= q.Start && m < q.End
	}
	return m >= q.Start || m < q.End
}

// String renders the window as written in the file, "22:00-07:00".
func (q QuietHours) String() string {
	if q.IsZero() {
		return ""
	}
	return fmt.Sprintf("%02d:%02d-%02d:%02d", q.Start/60, q.Start%60, q.End/60, q.End%60)
}

// ParseQuietHours parses "HH:MM-HH:MM" (24-hour clock).
func ParseQuietHours(s string) (QuietHours, error) {
	from, to, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		return QuietHours{}, fmt.Errorf("%q must be a range like \"22:00-07:00\"", s)
	}
	start, err1 := parseClock(from)
	end, err2 := parseClock(to)
	if err1 != nil || err2 != nil {
		return QuietHours{}, fmt.Errorf("%q must be a range like \"22:00-07:00\" with times from 00:00 to 23:59", s)
	}
	if start == end {
		return QuietHours{}, fmt.Errorf("%q starts and ends at the same time", s)
	}
	return QuietHours{Start: start, End: end}, nil
}

func parseClock(s string) (int, error) {
	t, err := time.Parse("15:04", strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	return t.Hour()*60 + t.Minute(), nil
}

const heartbeatKeys = "name, kind, interval, cooldown, quiet_hours, enabled, url, path, command"

// ParseHeartbeat parses HEARTBEAT.md: [[checks]] tables inside the first ```toml
// block (or the whole file when it has none). shell-command checks are accepted
// only when isAdmin is set. Checks with a problem are left out.
func ParseHeartbeat(src []byte, isAdmin bool) (HeartbeatFile, []Problem) {
	doc, problems := decode(src)
	if problems != nil {
		return HeartbeatFile{}, problems
	}
	entries, ps := doc.entries("checks", "check")
	problems = append(problems, ps...)
	var out HeartbeatFile
	seen := names{}
	for _, e := range entries {
		c := Check{Line: e.line, Name: e.name("check"), Kind: CheckKind(e.str("kind")), Enabled: e.boolean("enabled", true)}
		if c.Name != "" {
			seen.check(e, c.Name, "check")
		}
		if !e.failed("kind") {
			if c.Kind == "" {
				e.fail("kind", "every check needs a kind: one of %s", kindList())
			} else if !validKind(c.Kind) {
				e.fail("kind", "%q is not a check; use one of %s", c.Kind, kindList())
			} else if c.Kind == CheckShellCommand && !isAdmin {
				e.fail("kind", "shell-command checks are for administrators only")
			}
		}
		c.Interval, _ = e.duration("interval", DefaultCheckInterval)
		if c.Interval < MinCheckInterval && !e.failed("interval") {
			e.fail("interval", "must be at least %s", MinCheckInterval)
		}
		c.Cooldown, _ = e.duration("cooldown", DefaultCheckCooldown)
		if c.Cooldown < 0 && !e.failed("cooldown") {
			e.fail("cooldown", "must not be negative")
		}
		if q := e.str("quiet_hours"); q != "" {
			var err error
			if c.Quiet, err = ParseQuietHours(q); err != nil {
				e.fail("quiet_hours", "%v", err)
			}
		}
		c.URL = e.kindField("url", c.Kind, CheckURLHealth)
		if c.URL != "" {
			if err := checkWebURL(c.URL); err != nil {
				e.fail("url", "%v", err)
			}
		}
		c.Path = e.kindField("path", c.Kind, CheckFileWatch)
		if c.Path != "" {
			var err error
			if c.Path, err = cleanUserPath(c.Path); err != nil {
				e.fail("path", "%v", err)
			}
		}
		c.Command = e.kindField("command", c.Kind, CheckShellCommand)
		e.unknownKeys(heartbeatKeys)
		if e.bad() {
			problems = append(problems, e.problems...)
			continue
		}
		out.Checks = append(out.Checks, c)
	}
	return out, sortProblems(problems)
}

// kindField reads a field that belongs to one check kind only: required there,
// refused elsewhere so a typo in kind does not silently ignore it.
func (e *entry) kindField(key string, kind, owner CheckKind) string {
	_, present := e.m[key]
	v := e.str(key)
	if e.failed(key) || !validKind(kind) {
		return v
	}
	switch {
	case kind == owner && v == "":
		e.fail(key, "a %s check needs %s", owner, key)
	case kind != owner && present:
		e.fail(key, "is only used by %s checks, not %s", owner, kind)
	}
	return v
}

func validKind(k CheckKind) bool {
	for _, c := range CheckKinds() {
		if k == c {
			return true
		}
	}
	return false
}

func kindList() string {
	s := make([]string, len(CheckKinds()))
	for i, k := range CheckKinds() {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// cleanUserPath accepts a path relative to the user's folder that stays inside it.
func cleanUserPath(p string) (string, error) {
	if strings.HasPrefix(p, "/") || strings.Contains(p, `\`) {
		return "", fmt.Errorf("%q must be relative to your folder, like \"Documents/report.md\"", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "", fmt.Errorf("%q must stay inside your folder (no \"..\")", p)
		}
	}
	if strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", fmt.Errorf("%q contains control characters", p)
	}
	c := path.Clean(p)
	if c == "." {
		return "", fmt.Errorf("%q names your whole folder; name a file or folder inside it", p)
	}
	return c, nil
}
