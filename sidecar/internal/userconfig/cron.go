package userconfig

import "time"

// CronFile is the valid content of CRON.md.
type CronFile struct {
	Jobs []Job
}

// Job is one scheduled job of CRON.md: a prompt for the assistant or a command,
// run on Schedule in TZ.
type Job struct {
	Name     string
	Line     int    // line of the job's [[jobs]] header, for messages
	Schedule string // five cron fields or a descriptor; parse it with ParseSchedule
	TZ       string // IANA zone: the job's timezone, else the user's default
	Prompt   string // exactly one of Prompt and Command is set
	Command  string
	Target   Target
	// SilentUnlessAction suppresses the message when the run found nothing to do.
	SilentUnlessAction bool
	Enabled            bool // default true
}

const cronKeys = "name, schedule, timezone, prompt, command, conversation, email, silent_unless_action, enabled"

// ParseCron parses CRON.md: [[jobs]] tables inside the first ```toml block (or the
// whole file when it has none). defaultTZ is the user's time zone, used for jobs
// without their own. Jobs with a problem are left out; the rest are returned.
func ParseCron(src []byte, defaultTZ string) (CronFile, []Problem) {
	doc, problems := decode(src)
	if problems != nil {
		return CronFile{}, problems
	}
	if defaultTZ == "" {
		defaultTZ = "UTC"
	}
	if _, err := loadZone(defaultTZ); err != nil {
		problems = append(problems, Problem{Field: "timezone",
			Message: "your default time zone " + err.Error() + "; jobs without their own timezone use UTC"})
		defaultTZ = "UTC"
	}
	entries, ps := doc.entries("jobs", "job")
	problems = append(problems, ps...)
	var out CronFile
	seen := names{}
	for _, e := range entries {
		j := Job{
			Line:               e.line,
			Name:               e.name("job"),
			Schedule:           e.str("schedule"),
			TZ:                 e.str("timezone"),
			Prompt:             e.str("prompt"),
			Command:            e.str("command"),
			Target:             Target{Conversation: e.conversation("conversation"), Email: e.email("email")},
			SilentUnlessAction: e.boolean("silent_unless_action", false),
			Enabled:            e.boolean("enabled", true),
		}
		e.unknownKeys(cronKeys)
		if j.Name != "" {
			seen.check(e, j.Name, "job")
		}
		loc := time.UTC
		if j.TZ == "" {
			j.TZ = defaultTZ
			loc, _ = loadZone(defaultTZ)
		} else if l, err := loadZone(j.TZ); err != nil {
			e.fail("timezone", "%v", err)
		} else {
			loc = l
		}
		if _, hasSchedule := e.m["schedule"]; !hasSchedule {
			e.fail("schedule", `is missing; write five fields like "0 7 * * 1-5" or "@daily"`)
		} else if !e.failed("schedule") {
			if _, err := ParseSchedule(j.Schedule, loc); err != nil {
				e.fail("schedule", "%v", err)
			}
		}
		switch {
		case j.Prompt != "" && j.Command != "":
			e.fail("command", "a job has either a prompt or a command, not both")
		case j.Prompt == "" && j.Command == "" && !e.failed("prompt") && !e.failed("command"):
			e.fail("prompt", "a job needs a prompt (what to ask the assistant) or a command")
		}
		if j.Target.Conversation != "" && j.Target.Email != "" {
			e.fail("email", "send a job's result to a conversation or to an e-mail address, not both")
		}
		if e.bad() {
			problems = append(problems, e.problems...)
			continue
		}
		out.Jobs = append(out.Jobs, j)
	}
	return out, sortProblems(problems)
}
