package workspace

import "github.com/istota/istota/sidecar/internal/prompt"

// The files a new user finds in {bot}/config. Everything explanatory is inside HTML
// comments, which Nextcloud's Markdown editor hides and which the parsers of these
// files skip, so a seeded file behaves exactly like an empty one until the user
// writes in it. PERSONA.md is the exception: it starts out with the default persona,
// so the user sees what to change.
type seedFile struct {
	path    string // relative to /Users/{uid}
	content string
}

func userSeeds(bot string) []seedFile {
	dir := bot + "/config/"
	return []seedFile{
		{dir + "PERSONA.md", personaSeed},
		{dir + "USER.md", userSeed},
		{dir + "CRON.md", cronSeed},
		{dir + "HEARTBEAT.md", heartbeatSeed},
		{dir + "BRIEFINGS.md", briefingsSeed},
		{dir + "TASKS.md", tasksSeed},
	}
}

const personaSeed = `<!--
PERSONA.md: how the assistant talks to you. Edit the text below freely; it is given
to the assistant at the start of every request. Delete everything to get the default.
-->

` + prompt.DefaultPersona + "\n"

const userSeed = `<!--
USER.md: what the assistant knows about you. It reads this file with every request
(except briefings). Write anything it should always keep in mind: how you like answers,
people and projects you mention often, things to avoid.

The assistant also keeps it up to date itself, every night, from your conversations.
Each change it makes is logged in USER.md.audit.jsonl next to this file. Your own edits
always win: change or delete anything here.
-->
`

// fence opens and closes the TOML examples; a Go raw string cannot hold backticks.
const fence = "```"

// The TOML examples below are what the parsers in internal/userconfig read: the
// first ` + "```toml" + ` block outside HTML comments. Inside the comment they are inert;
// userconfig's tests parse these seeds to keep both in step.

const cronSeed = `<!--
CRON.md: jobs the assistant runs for you on a schedule, in your time zone.
Write one [[jobs]] table per job in a toml code block. An example, ready to use
once you remove the comment marks:

` + fence + `toml
[[jobs]]
name = "Weekly review"
schedule = "0 17 * * 5"
prompt = "Summarise what I asked you to do this week and what is still open."
` + fence + `

The schedule is a cron expression (minute hour day-of-month month day-of-week)
or @daily, @weekly, @monthly. Each job has either a prompt (a request to the
assistant) or a command. Optional: timezone = "Europe/Berlin" (else yours),
conversation = "token" or email = "you@example.org" (where the result goes),
silent_unless_action = true (no message when there was nothing to do),
enabled = false (keep the job but do not run it).
A job that fails several times in a row is switched off; "!cron" in Talk lists jobs.
-->
`

const heartbeatSeed = `<!--
HEARTBEAT.md: checks the assistant runs quietly and only tells you about when
something needs your attention. An example:

` + fence + `toml
[[checks]]
name = "Website up"
kind = "url-health"
url = "https://example.org/"
interval = "15m"
cooldown = "2h"
quiet_hours = "22:00-07:00"
` + fence + `

Other kinds: file-watch (with path = "Documents/plan.md"; tells you when it
changes), calendar-conflicts (overlapping events in the next 24 hours),
task-deadline (TASKS.md lines with due:2026-11-30 that are due), self-check.
interval is how often the check runs (at least 1m),
cooldown how long it stays quiet after telling you, quiet_hours when it never
disturbs you.
-->
`

const briefingsSeed = `<!--
BRIEFINGS.md: regular summaries sent to you in Talk or by e-mail, in your time
zone. Briefings never use your personal memory (USER.md, dated memories).
An example:

` + fence + `toml
[[briefings]]
name = "Morning"
schedule = "0 7 * * 1-5"
output = "talk"
components = ["calendar", "todos", "news"]
feeds = ["https://example.org/feed.xml"]
` + fence + `

output is talk, email or both. Components: calendar, todos, email, notes,
reminders, news (headlines from feeds), markets (futures before noon, index
closes from noon, when the administrator set up a quote source).
-->
`

const tasksSeed = `<!--
TASKS.md: give the assistant work by adding a line starting with "- [ ] ".
It marks the line "- [~] " while working on it, then "- [x] " when done or
"- [!] " when it could not do it, writes the result below the line and answers
in Talk. Example:

- [ ] Draft a reply to the invitation in inbox/invitation.pdf

A task may carry a due date, written due:2026-11-30 anywhere in its line; a
task-deadline check in HEARTBEAT.md tells you when an open task is due or overdue.
-->
`

const channelSeed = `<!--
CHANNEL.md: what the assistant should know in this conversation. It reads this file
whenever it answers here. The assistant adds to it as the conversation goes on;
everyone in the conversation can edit it.
-->
`
