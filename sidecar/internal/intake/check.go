package intake

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/heartbeat"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

// Checks is the heartbeat runner as !check sees it. Status never writes; RequestRunTx
// writes in intake's transaction and wakes the runner, which answers with the outcome
// once the transaction has committed.
type Checks interface {
	Status(ctx context.Context, uid string) ([]heartbeat.CheckState, []userconfig.Problem, error)
	RequestRunTx(ctx context.Context, tx *sql.Tx, uid, name, token string, replyTo int64) (string, error)
}

// check answers !check (the list), !check run NAME and !check NAME.
func (in *Intake) check(ctx context.Context, tx *sql.Tx, args string, s Sender, c Conversation, token string, msgID int64) (string, error) {
	if in.opts.Checks == nil {
		return "Heartbeat checks are not available on this server.", nil
	}
	if !c.Private {
		// Checks name the user's sites, files and command output.
		return "I only show your checks in our private conversation.", nil
	}
	args = strings.TrimSpace(args)
	sub, rest, _ := strings.Cut(args, " ")
	switch strings.ToLower(sub) {
	case "", "list":
		return in.checkList(ctx, s)
	case "run":
		args = strings.TrimSpace(rest)
		if args == "" {
			return "Which check? `!check run NAME` (send `!check` for the list).", nil
		}
	}
	name, err := in.opts.Checks.RequestRunTx(ctx, tx, s.UID, args, token, msgID)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Sprintf("You have no check named %q. Send `!check` for the list (an edit of HEARTBEAT.md takes a few minutes to be read).", args), nil
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("Running %q now; its outcome follows here.", name), nil
}

func (in *Intake) checkList(ctx context.Context, s Sender) (string, error) {
	checks, problems, err := in.opts.Checks.Status(ctx, s.UID)
	if err != nil {
		return "", err
	}
	loc, err := time.LoadLocation(s.Timezone)
	if err != nil || s.Timezone == "" {
		loc = time.UTC
	}
	var b strings.Builder
	if len(checks) == 0 {
		b.WriteString("You have no heartbeat checks. Add them to `HEARTBEAT.md` in the config folder of your " + in.opts.BotName + " folder.\n")
	} else {
		b.WriteString("Your checks (HEARTBEAT.md):\n")
	}
	icons := map[string]string{heartbeat.StatusOK: "✅", heartbeat.StatusAlert: "⚠️", heartbeat.StatusError: "❌", "": "⏳"}
	for _, c := range checks {
		icon := icons[c.Status]
		if !c.Enabled {
			icon = "⏸"
		}
		fmt.Fprintf(&b, "- %s **%s** — %s, every %s", icon, c.Name, c.Kind, shortDuration(c.Interval))
		if c.QuietHours != "" {
			b.WriteString(" · quiet " + c.QuietHours)
			if c.InQuietHours {
				b.WriteString(" (now)")
			}
		}
		if !c.Enabled {
			b.WriteString(" · off in HEARTBEAT.md")
		}
		if !c.LastRunAt.IsZero() {
			fmt.Fprintf(&b, " · last %s: %s", c.LastRunAt.In(loc).Format("Mon 15:04"), excerpt(firstLine(c.Message), 120))
		}
		if c.Enabled && !c.NextRunAt.IsZero() {
			b.WriteString(" · next " + c.NextRunAt.In(loc).Format("Mon 15:04"))
		}
		b.WriteString("\n")
	}
	if len(problems) > 0 {
		b.WriteString("\nProblems in HEARTBEAT.md:\n")
		for _, p := range problems {
			b.WriteString("- " + p.String() + "\n")
		}
	}
	if len(checks) > 0 {
		b.WriteString("\n`!check run NAME` runs one now.")
	}
	return strings.TrimRight(b.String(), "\n"), nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// shortDuration renders 15m0s as 15m and 2h0m0s as 2h.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
