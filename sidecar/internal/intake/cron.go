package intake

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/schedule"
	"github.com/istota/istota/sidecar/internal/store"
)

// Cron is the schedule as !cron sees it. The Tx methods write in intake's transaction.
type Cron interface {
	List(ctx context.Context, uid string) ([]schedule.Job, error)
	FileStatus(ctx context.Context, uid string) (schedule.FileStatus, error)
	SetEnabledTx(ctx context.Context, db schedule.Execer, uid, name string, enabled bool, now time.Time) error
	RunNowTx(ctx context.Context, db schedule.Execer, uid, name string, now time.Time) error
	// Wake tells the job runner to look at the schedule now.
	Wake()
}

// cron answers !cron, !cron enable|disable|run NAME.
func (in *Intake) cron(ctx context.Context, tx *sql.Tx, args string, s Sender) (string, error) {
	if in.opts.Cron == nil {
		return "Scheduled jobs are not available on this server.", nil
	}
	sub, name, _ := strings.Cut(strings.TrimSpace(args), " ")
	sub, name = strings.ToLower(sub), strings.TrimSpace(name)
	if sub == "" || sub == "list" {
		return in.cronList(ctx, s)
	}
	if sub != "enable" && sub != "disable" && sub != "run" {
		return "Unknown `!cron " + sub + "`. Use `!cron`, `!cron enable NAME`, `!cron disable NAME` or `!cron run NAME`.", nil
	}
	if name == "" {
		return fmt.Sprintf("Which job? `!cron %s NAME` (send `!cron` for the list).", sub), nil
	}
	jobs, err := in.opts.Cron.List(ctx, s.UID)
	if err != nil {
		return "", err
	}
	job, ok := findJob(jobs, name)
	if !ok {
		return fmt.Sprintf("You have no scheduled job named %q. Send `!cron` for the list.", name), nil
	}
	now := in.opts.Clock()
	switch sub {
	case "run":
		if err := in.opts.Cron.RunNowTx(ctx, tx, s.UID, job.Name, now); err != nil {
			return "", err
		}
		return fmt.Sprintf("Running %q now. Its result comes %s.", job.Name, where(job)), nil
	case "disable":
		if err := in.opts.Cron.SetEnabledTx(ctx, tx, s.UID, job.Name, false, now); err != nil {
			return "", err
		}
		return fmt.Sprintf("%q is switched off until you send `!cron enable %s`.", job.Name, job.Name), nil
	default:
		err := in.opts.Cron.SetEnabledTx(ctx, tx, s.UID, job.Name, true, now)
		if errors.Is(err, schedule.ErrDisabledInFile) {
			return fmt.Sprintf("%q says `enabled = false` in your CRON.md (line %d); change it there to switch it on.", job.Name, job.Line), nil
		}
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%q is switched on again.", job.Name), nil
	}
}

func findJob(jobs []schedule.Job, name string) (schedule.Job, bool) {
	for _, j := range jobs {
		if j.Name == name {
			return j, true
		}
	}
	var found []schedule.Job
	for _, j := range jobs {
		if strings.EqualFold(j.Name, name) {
			found = append(found, j)
		}
	}
	if len(found) == 1 {
		return found[0], true
	}
	return schedule.Job{}, false
}

func where(j schedule.Job) string {
	switch {
	case j.Target.Email != "":
		return "by e-mail"
	case j.Target.Conversation != "":
		return "in the job's conversation"
	default:
		return "in our private conversation"
	}
}

func (in *Intake) cronList(ctx context.Context, s Sender) (string, error) {
	jobs, err := in.opts.Cron.List(ctx, s.UID)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if len(jobs) == 0 {
		b.WriteString("You have no scheduled jobs. Add them to `CRON.md` in the config folder of your " + in.opts.BotName + " folder.\n")
	} else {
		b.WriteString("Your scheduled jobs (CRON.md):\n")
	}
	for _, j := range jobs {
		loc, err := time.LoadLocation(j.TZ)
		if err != nil {
			loc = time.UTC
		}
		kind := "prompt"
		if j.Command != "" {
			kind = "command"
		}
		fmt.Fprintf(&b, "- **%s** — `%s` (%s, %s)", j.Name, j.Schedule, j.TZ, kind)
		switch {
		case !j.Enabled:
			b.WriteString(" · off in CRON.md")
		case j.DisabledBy == schedule.DisabledByUser:
			b.WriteString(" · switched off with !cron disable")
		case j.DisabledBy == schedule.DisabledByFailures:
			b.WriteString(" · switched off: " + j.DisabledReason)
		case !j.NextRunAt.IsZero():
			b.WriteString(" · next " + j.NextRunAt.In(loc).Format("Mon 2 Jan 15:04"))
		}
		if !j.LastRunAt.IsZero() {
			fmt.Fprintf(&b, " · last %s", j.LastRunAt.In(loc).Format("Mon 2 Jan 15:04"))
			if j.LastResult != "" {
				b.WriteString(" (" + j.LastResult + ")")
			}
		}
		if j.ConsecutiveFailures > 0 {
			fmt.Fprintf(&b, " · %d failure(s) in a row", j.ConsecutiveFailures)
		}
		b.WriteString("\n")
	}
	fs, err := in.opts.Cron.FileStatus(ctx, s.UID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", err
	}
	if len(fs.Problems) > 0 {
		b.WriteString("\nProblems in CRON.md:\n")
		for _, p := range fs.Problems {
			b.WriteString("- " + p.String() + "\n")
		}
		if fs.KeptLastGood {
			b.WriteString("The jobs above keep running as they were until the file is fixed.\n")
		}
	}
	if len(jobs) > 0 {
		b.WriteString("\n`!cron enable NAME` · `!cron disable NAME` · `!cron run NAME`")
	}
	return strings.TrimRight(b.String(), "\n"), nil
}
