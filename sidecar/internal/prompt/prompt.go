// Package prompt assembles what the agent reads for one task: header, persona, the
// user's memory, the conversation, the request and the channel's guidelines, in that
// order. It is pure: everything it needs is passed in, so golden tests pin its output.
package prompt

import (
	"fmt"
	"strings"
	"time"
)

// User is the person the task runs for.
type User struct {
	ID          string
	DisplayName string
	Email       string
	Timezone    string
	Language    string
	IsAdmin     bool
}

// Message is one message of the conversation shown to the agent.
type Message struct {
	ID        int64
	Author    string
	FromBot   bool
	Text      string
	At        time.Time
	ReplyToID int64
	// Actions is the compact record of what the agent did for one of its own past
	// answers (tool calls, as "Bash: ls notes"), so it knows what it already tried.
	Actions []string
	// Earlier marks an older message kept because it bears on the request (the recent
	// ones are always kept; see the executor's narrowing).
	Earlier bool
}

// Input is everything one prompt is built from.
type Input struct {
	BotName string
	Now     time.Time
	User    User
	Source  string // talk | cli | …
	Room    string // conversation name, for talk
	Persona string // PERSONA.md, or DefaultPersona
	UserMD  string // USER.md, empty when the user has none
	// Memory beyond USER.md, in prompt order. Briefings and scheduled jobs get none of
	// it (nor USER.md): the executor leaves these empty for them.
	Facts     []string      // knowledge facts relevant to the request, one line each
	ChannelMD string        // CHANNEL.md of the conversation
	Dated     []DatedMemory // the last days of dated memories, oldest first
	Recalled  []string      // memories recalled by search (off by default)
	// MaxMemoryChars caps facts, dated and recalled memories together (recalled are
	// trimmed first, then the oldest dated ones, then facts); USER.md and CHANNEL.md are
	// never trimmed. 0 means no cap.
	MaxMemoryChars int
	Context        []Message
	ReplyTo        *Message // the message the request replies to, forced in
	Request        string
	Workspace      string // the agent's working directory inside the sandbox
	// Resources are extra places and tools the agent may use, one line each.
	Resources []string
	// Skills are described at the end of the prompt: the ones this request is likely
	// to need (skills.Registry.ForPrompt). OtherSkills are only named, so the agent
	// knows they exist and can ask for their usage.
	Skills      []SkillDoc
	OtherSkills []string
	// Guides explain the user's configuration files the request is about (GuidesFor).
	Guides []string
}

// SkillDoc is one skill as the prompt describes it.
type SkillDoc struct {
	Name     string
	Summary  string
	Synopsis string // the usage, one command per line ("istota skill …")
}

// DatedMemory is one memories/YYYY-MM-DD.md file.
type DatedMemory struct {
	Date string // YYYY-MM-DD
	Text string
}

// DefaultPersona is used until the user writes their own PERSONA.md.
const DefaultPersona = `You are a helpful, precise assistant. You answer in the language the user writes in.
You are direct and friendly, you say when you are unsure, and you never invent facts about the user.`

// maxContextChars bounds the conversation section so a chatty room cannot crowd out the request.
const maxContextChars = 12000

// Build renders the prompt.
func Build(in Input) string {
	var b strings.Builder
	loc := time.UTC
	if l, err := time.LoadLocation(in.User.Timezone); err == nil && in.User.Timezone != "" {
		loc = l
	}
	name := in.User.DisplayName
	if name == "" {
		name = in.User.ID
	}
	fmt.Fprintf(&b, "# %s\n\n", in.BotName)
	fmt.Fprintf(&b, "You are %s, an AI assistant living inside the user's Nextcloud.\n", in.BotName)
	fmt.Fprintf(&b, "- User: %s (Nextcloud id `%s`)", name, in.User.ID)
	if in.User.IsAdmin {
		b.WriteString(", a Nextcloud administrator")
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "- Now: %s (%s)\n", in.Now.In(loc).Format("Monday, 2 January 2006 15:04"), loc.String())
	if in.User.Language != "" {
		fmt.Fprintf(&b, "- Preferred language: %s\n", in.User.Language)
	}
	if in.Workspace != "" {
		fmt.Fprintf(&b, "- Your working directory is %s; files you create there are kept for this user.\n", in.Workspace)
	}
	switch in.Source {
	case "talk":
		room := in.Room
		if room == "" {
			room = "a conversation"
		}
		fmt.Fprintf(&b, "- Channel: Nextcloud Talk, conversation %q\n", room)
	case "":
	default:
		fmt.Fprintf(&b, "- Channel: %s\n", in.Source)
	}

	persona := strings.TrimSpace(in.Persona)
	if persona == "" {
		persona = DefaultPersona
	}
	section(&b, "Persona", persona)

	if len(in.Resources) > 0 {
		section(&b, "Resources", "- "+strings.Join(in.Resources, "\n- "))
	}

	if md := strings.TrimSpace(in.UserMD); md != "" {
		section(&b, "What you know about "+name+" (USER.md)", md)
	}
	facts, dated, recalled := capMemory(in.Facts, in.Dated, in.Recalled, in.MaxMemoryChars)
	if len(facts) > 0 {
		section(&b, "Known facts", "- "+strings.Join(facts, "\n- "))
	}
	if md := strings.TrimSpace(in.ChannelMD); md != "" {
		section(&b, "About this conversation (CHANNEL.md)", md)
	}
	if len(dated) > 0 {
		var parts []string
		for _, d := range dated {
			parts = append(parts, "### "+d.Date+"\n"+strings.TrimSpace(d.Text))
		}
		section(&b, "Recent memories", strings.Join(parts, "\n\n"))
	}
	if len(recalled) > 0 {
		section(&b, "Recalled memories", "- "+strings.Join(recalled, "\n- "))
	}

	if conv := renderContext(in.Context, in.ReplyTo, in.Now.In(loc)); conv != "" {
		section(&b, "Conversation so far", conv)
	}

	req := strings.TrimSpace(in.Request)
	if in.ReplyTo != nil {
		req = fmt.Sprintf("(in reply to message #%d)\n%s", in.ReplyTo.ID, req)
	}
	section(&b, "Request from "+name, req)

	if g := guidelines(in.Source); g != "" {
		section(&b, "How to answer", g)
	}
	if len(in.Guides) > 0 {
		section(&b, "The user's files you may edit for this", strings.Join(in.Guides, "\n\n"))
	}
	if s := renderSkills(in.Skills, in.OtherSkills); s != "" {
		section(&b, "Skills", s)
	}
	return b.String()
}

// renderSkills describes the chosen skills and names the others.
func renderSkills(docs []SkillDoc, others []string) string {
	if len(docs) == 0 && len(others) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Skills act for the user outside your sandbox; run them as shell commands.")
	for _, d := range docs {
		fmt.Fprintf(&b, "\n\n### %s — %s\n\n```\n%s\n```", d.Name, d.Summary, strings.TrimRight(d.Synopsis, "\n"))
	}
	if len(others) > 0 {
		fmt.Fprintf(&b, "\n\nOther skills: %s. `istota skill skills NAME` shows how to use one.", strings.Join(others, ", "))
	}
	return b.String()
}

func section(b *strings.Builder, title, body string) {
	fmt.Fprintf(b, "\n## %s\n\n%s\n", title, body)
}

// renderContext shows the recent messages, oldest first, and makes sure the replied-to
// message is present even when it is older than the window.
func renderContext(msgs []Message, replyTo *Message, now time.Time) string {
	var lines []string
	seen := map[int64]bool{}
	for i, m := range msgs {
		seen[m.ID] = true
		lines = append(lines, renderMessage(m, now))
		if m.Earlier && (i+1 == len(msgs) || !msgs[i+1].Earlier) {
			lines = append(lines, "… (older messages above were picked as relevant to the request; the rest follows in order)")
		}
	}
	// Trim oldest lines first when over budget.
	total := 0
	for _, l := range lines {
		total += len(l) + 1
	}
	for len(lines) > 0 && total > maxContextChars {
		total -= len(lines[0]) + 1
		lines = lines[1:]
	}
	if replyTo != nil && !seen[replyTo.ID] {
		lines = append([]string{renderMessage(*replyTo, now) + "  ← the message the request replies to", "…"}, lines...)
	}
	return strings.Join(lines, "\n")
}

func renderMessage(m Message, now time.Time) string {
	at := m.At.In(now.Location())
	stamp := at.Format("15:04")
	if at.Year() != now.Year() || at.YearDay() != now.YearDay() {
		stamp = at.Format("Mon 2 Jan 15:04")
	}
	author := m.Author
	if m.FromBot {
		author += " (you)"
	}
	text := strings.TrimSpace(m.Text)
	if r := []rune(text); len(r) > 2000 {
		text = string(r[:2000]) + "…"
	}
	text = strings.ReplaceAll(text, "\n", "\n    ")
	id := ""
	if m.ID > 0 {
		id = fmt.Sprintf("#%d ", m.ID)
	}
	line := fmt.Sprintf("[%s%s] %s: %s", id, stamp, author, text)
	if len(m.Actions) > 0 {
		line += "\n    (what you did then: " + strings.Join(m.Actions, "; ") + ")"
	}
	return line
}

func guidelines(source string) string {
	switch source {
	case "talk":
		return strings.Join([]string{
			"- Your final answer is posted to the Talk conversation as a reply; write it for a chat: short paragraphs, Markdown is rendered.",
			"- Do not repeat the request. Lead with the answer; add detail only where it helps.",
			"- Very long answers are split into several messages; prefer a file in your working directory for long material and say where it is.",
			"- Other people in the conversation may read your answer: do not disclose the user's private files or memory unless asked in a private conversation.",
		}, "\n")
	case "cli":
		return "- Your final answer is printed in a terminal; plain text or Markdown."
	}
	return ""
}

// capMemory trims the optional memory to max characters: recalled memories go first,
// then the oldest dated memories, then the last facts.
func capMemory(facts []string, dated []DatedMemory, recalled []string, max int) ([]string, []DatedMemory, []string) {
	if max <= 0 {
		return facts, dated, recalled
	}
	size := 0
	for _, f := range facts {
		size += len(f) + 3
	}
	for _, d := range dated {
		size += len(d.Date) + len(d.Text) + 6
	}
	for _, r := range recalled {
		size += len(r) + 3
	}
	for size > max && len(recalled) > 0 {
		last := recalled[len(recalled)-1]
		size -= len(last) + 3
		recalled = recalled[:len(recalled)-1]
	}
	for size > max && len(dated) > 0 {
		size -= len(dated[0].Date) + len(dated[0].Text) + 6
		dated = dated[1:]
	}
	for size > max && len(facts) > 0 {
		size -= len(facts[len(facts)-1]) + 3
		facts = facts[:len(facts)-1]
	}
	return facts, dated, recalled
}
