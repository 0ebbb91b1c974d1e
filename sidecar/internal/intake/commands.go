package intake

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/talk"
)

// Talk participant types that may change how the bot behaves in a conversation.
const (
	participantOwner     = 1
	participantModerator = 2
)

// parseCommand recognises "!name args…" at the start of a message.
func parseCommand(text string) (name, args string, ok bool) {
	text = strings.TrimSpace(text)
	if !strings.HasPrefix(text, "!") || len(text) < 2 {
		return "", "", false
	}
	fields := strings.SplitN(text[1:], " ", 2)
	name = strings.ToLower(strings.TrimSpace(fields[0]))
	if name == "" {
		return "", "", false
	}
	if len(fields) == 2 {
		args = strings.TrimSpace(fields[1])
	}
	return name, args, true
}

// runCommand answers a !command at once, without the agent. It returns the reply text
// and the running tasks that must be stopped after the transaction commits.
func (in *Intake) runCommand(ctx context.Context, tx *sql.Tx, name, args string, ev talk.Event, s Sender, c Conversation) (string, []queue.Task, error) {
	switch name {
	case "help":
		return in.helpText(), nil, nil
	case "status":
		text, err := in.statusText(ctx, tx, s)
		return text, nil, err
	case "stop":
		return in.stop(ctx, tx, s.UID)
	case "respond":
		text, err := in.respond(ctx, tx, args, ev, s, c)
		return text, nil, err
	case "usage":
		text, err := in.usageText(ctx, s)
		return text, nil, err
	case "memory":
		text, err := in.memory(ctx, args, s, c, ev.Token)
		return text, nil, err
	case "cron":
		text, err := in.cron(ctx, tx, args, s)
		return text, nil, err
	case "check":
		text, err := in.check(ctx, tx, args, s, c, ev.Token, ev.MessageID)
		return text, nil, err
	default:
		return fmt.Sprintf("Unknown command `!%s`. Send `!help` for the list.", name), nil, nil
	}
}

func (in *Intake) helpText() string {
	return strings.Join([]string{
		"**" + in.opts.BotName + "** answers every message in your private conversation with it, and elsewhere messages that mention @" + in.opts.BotName + ".",
		"",
		"Commands (answered at once):",
		"- `!help` — this list",
		"- `!status` — your running and queued tasks",
		"- `!stop` — stop your running task and drop your queued ones",
		"- `!respond all` / `!respond mentions` — in this conversation, answer every message or only mentions (moderators)",
		"- `!memory user` / `!memory facts` / `!memory search <words>` — what I remember about you (in our private conversation)",
		"- `!memory channel` — what I keep about this conversation (CHANNEL.md)",
		"- `!usage` — the model tokens and cost of your requests today, this week and this month",
		"- `!cron` — your scheduled jobs (CRON.md); `!cron enable NAME`, `!cron disable NAME`, `!cron run NAME`",
		"- `!check` — your heartbeat checks (HEARTBEAT.md); `!check run NAME` runs one now (in our private conversation)",
	}, "\n")
}

func (in *Intake) statusText(ctx context.Context, tx *sql.Tx, s Sender) (string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, status, prompt, started_at, attempts, max_attempts, next_attempt_at
		FROM tasks WHERE user_id = ? AND status IN ('pending','locked','running','pending_confirmation') ORDER BY id`, s.UID)
	if err != nil {
		return "", fmt.Errorf("status: %w", err)
	}
	defer rows.Close()
	loc, err := time.LoadLocation(s.Timezone)
	if err != nil || s.Timezone == "" {
		loc = time.UTC
	}
	var running, queued []string
	now := in.opts.Clock()
	for rows.Next() {
		var (
			t                     queue.Task
			status, started, next string
		)
		if err := rows.Scan(&t.ID, &status, &t.Prompt, &started, &t.Attempts, &t.MaxAttempts, &next); err != nil {
			return "", fmt.Errorf("status: %w", err)
		}
		t.Status = queue.Status(status)
		line := fmt.Sprintf("#%d %s", t.ID, excerpt(t.Prompt, 60))
		switch {
		case t.Status == queue.PendingConfirmation:
			running = append(running, line+" (waiting for your answer to a question)")
		case t.Status == queue.Running || t.Status == queue.Locked:
			var notes []string
			if at, err := store.ParseTime(started); err == nil && !at.IsZero() {
				notes = append(notes, fmt.Sprintf("running for %s", now.Sub(at).Round(time.Second)))
			}
			if t.Attempts > 0 {
				notes = append(notes, fmt.Sprintf("attempt %d of %d", t.Runs(), t.MaxAttempts))
			}
			if len(notes) > 0 {
				line += " (" + strings.Join(notes, ", ") + ")"
			}
			running = append(running, line)
		case t.WaitingToRetry():
			if at, err := store.ParseTime(next); err == nil {
				line += fmt.Sprintf(" (waiting to retry at %s, attempt %d of %d)", queue.RetryClock(at, now, loc), t.Attempts+1, t.MaxAttempts)
			}
			queued = append(queued, line)
		default:
			queued = append(queued, line)
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("status: %w", err)
	}
	if len(running) == 0 && len(queued) == 0 {
		return "Nothing is running or queued for you.", nil
	}
	var b strings.Builder
	if len(running) > 0 {
		b.WriteString("Running:\n- " + strings.Join(running, "\n- ") + "\n")
	}
	if len(queued) > 0 {
		fmt.Fprintf(&b, "Queued (%d):\n- %s\n", len(queued), strings.Join(queued, "\n- "))
	}
	return strings.TrimSpace(b.String()), nil
}

func (in *Intake) stop(ctx context.Context, tx *sql.Tx, uid string) (string, []queue.Task, error) {
	cancelled, err := in.queue.CancelUserTx(ctx, tx, uid)
	if err != nil {
		return "", nil, fmt.Errorf("stop: %w", err)
	}
	if len(cancelled) == 0 {
		return "Nothing to stop.", nil, nil
	}
	var running []queue.Task
	for _, t := range cancelled {
		if t.Status == queue.Running || t.Status == queue.Locked || t.Status == queue.PendingConfirmation {
			running = append(running, t)
		}
	}
	return fmt.Sprintf("Stopped %d running and dropped %d queued task(s).", len(running), len(cancelled)-len(running)), running, nil
}

func (in *Intake) respond(ctx context.Context, tx *sql.Tx, args string, ev talk.Event, s Sender, c Conversation) (string, error) {
	mode := strings.ToLower(strings.TrimSpace(args))
	if mode != "all" && mode != "mentions" {
		return "Use `!respond all` or `!respond mentions`.", nil
	}
	if !c.Private && ev.ParticipantType != participantOwner && ev.ParticipantType != participantModerator && !s.IsAdmin {
		return "Only moderators of this conversation can change how I respond here.", nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE conversations SET respond_mode = ? WHERE token = ?`, mode, ev.Token); err != nil {
		return "", fmt.Errorf("respond: %w", err)
	}
	if mode == "all" {
		return "I will answer every message in this conversation.", nil
	}
	return "I will answer only messages that mention @" + in.opts.BotName + " or start with `!`.", nil
}

func excerpt(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// maxMemoryReply keeps !memory answers to one comfortable Talk message.
const maxMemoryReply = 6000

func (in *Intake) memory(ctx context.Context, args string, s Sender, c Conversation, token string) (string, error) {
	if in.opts.Memory == nil {
		return "Memory is not available on this server.", nil
	}
	sub, rest, _ := strings.Cut(strings.TrimSpace(args), " ")
	sub = strings.ToLower(sub)
	if sub != "channel" && sub != "" && !c.Private {
		// Personal memory is never shown where others can read it.
		return "I only show what I remember about you in our private conversation.", nil
	}
	switch sub {
	case "user":
		md, err := in.opts.Memory.UserMD(s.UID)
		if err != nil {
			return "", err
		}
		if strings.TrimSpace(md) == "" {
			return "Your USER.md is empty. I fill it in over time, and you can edit it in Files.", nil
		}
		return "**USER.md**\n\n" + capText(md, maxMemoryReply), nil
	case "channel":
		md, err := in.opts.Memory.ChannelMD(token)
		if err != nil {
			return "", err
		}
		if strings.TrimSpace(md) == "" {
			return "This conversation has no CHANNEL.md yet.", nil
		}
		return "**CHANNEL.md**\n\n" + capText(md, maxMemoryReply), nil
	case "facts":
		facts, err := in.opts.Memory.Facts(ctx, s.UID)
		if err != nil {
			return "", err
		}
		if len(facts) == 0 {
			return "I know no facts about you yet.", nil
		}
		return capText("**Facts**\n- "+strings.Join(facts, "\n- "), maxMemoryReply), nil
	case "search":
		q := strings.TrimSpace(rest)
		if q == "" {
			return "Use `!memory search <words>`.", nil
		}
		hits, err := in.opts.Memory.Search(ctx, s.UID, q)
		if err != nil {
			return "", err
		}
		if len(hits) == 0 {
			return "Nothing found for " + q + ".", nil
		}
		return capText("**Found**\n- "+strings.Join(hits, "\n- "), maxMemoryReply), nil
	default:
		return "Use `!memory user`, `!memory channel`, `!memory facts` or `!memory search <words>`.", nil
	}
}

func capText(s string, n int) string {
	r := []rune(strings.TrimSpace(s))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n]) + "\n… (cut; the full text is in your files)"
}

// usageText sums the user's model usage by their own calendar: today, this week (from
// Monday) and this month.
func (in *Intake) usageText(ctx context.Context, s Sender) (string, error) {
	if in.opts.Usage == nil {
		return "Usage is not recorded on this server.", nil
	}
	loc, err := time.LoadLocation(s.Timezone)
	if err != nil || s.Timezone == "" {
		loc = time.UTC
	}
	now := in.opts.Clock().In(loc)
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, loc)
	week := today.AddDate(0, 0, -((int(today.Weekday()) + 6) % 7))
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, loc)
	var b strings.Builder
	b.WriteString("| | input tokens | output tokens | requests | cost |\n|---|---:|---:|---:|---:|\n")
	for _, p := range []struct {
		name  string
		since time.Time
	}{{"Today", today}, {"This week", week}, {"This month", month}} {
		t, err := in.opts.Usage.Since(ctx, s.UID, p.since)
		if err != nil {
			return "", fmt.Errorf("usage: %w", err)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | $%.2f |\n", p.name, t.InputTokens+t.CacheRead+t.CacheCreation, t.OutputTokens, t.Requests, t.CostUSD)
	}
	return strings.TrimSpace(b.String()), nil
}
