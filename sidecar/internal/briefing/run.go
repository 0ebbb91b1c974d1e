package briefing

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/schedule"
	"github.com/istota/istota/sidecar/internal/userconfig"
	"github.com/istota/istota/sidecar/internal/users"
)

// Wake asks for a tick now, without waiting for the next minute.
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run ticks at the start of every minute, and when woken, until ctx ends. The caller
// owns the goroutine that runs it; it returns once ctx is done.
func (r *Runner) Run(ctx context.Context) {
	schedule.EveryMinute(ctx, r.opts.Clock, r.wake, func(ctx context.Context) {
		if err := r.Tick(ctx); err != nil && ctx.Err() == nil {
			r.opts.Logger.Warn("briefings tick failed", "err", err)
		}
	})
}

// Tick does one round: sync every user's BRIEFINGS.md, record the outcome of finished
// runs, and queue the briefings that are due. Problems with one user or briefing
// never stop the others.
func (r *Runner) Tick(ctx context.Context) error {
	now := r.opts.Clock()
	users, err := r.src.Users(ctx)
	if err != nil {
		return fmt.Errorf("briefing: users: %w", err)
	}
	byID := make(map[string]User, len(users))
	for _, u := range users {
		byID[u.ID] = u
		if err := r.syncUser(ctx, u, now); err != nil && ctx.Err() == nil {
			r.opts.Logger.Warn("syncing BRIEFINGS.md failed", "user_id", u.ID, "err", err)
		}
	}
	if err := r.settle(ctx); err != nil {
		return err
	}
	due, err := r.due(ctx, now)
	if err != nil {
		return err
	}
	for _, d := range due {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		u, known := byID[d.UserID]
		if !known {
			continue
		}
		if err := r.runOne(ctx, u, d); err != nil {
			r.opts.Logger.Warn("queueing a briefing failed; retried next minute", "user_id", d.UserID, "briefing", d.Name, "err", err)
		}
	}
	return nil
}

// syncUser reads and syncs one user's BRIEFINGS.md and tells them, once per version of
// the file, what is wrong with it.
func (r *Runner) syncUser(ctx context.Context, u User, now time.Time) error {
	src, err := r.src.ReadConfig(ctx, u.ID, FileName)
	if errors.Is(err, fs.ErrNotExist) {
		src, err = nil, nil
	}
	if err != nil {
		// Syncing "no file" would delete the briefings: leave them as they are.
		return fmt.Errorf("read %s: %w", FileName, err)
	}
	res, err := r.Sync(ctx, u, src, now)
	if err != nil {
		return err
	}
	if len(res.Problems) == 0 || r.opts.Notify == nil {
		return nil
	}
	told, err := r.notifyOnce(ctx, u.ID, res.Hash, func(tx *sql.Tx) error {
		return r.opts.Notify(ctx, tx, u.ID, "briefing-problems:"+u.ID+":"+res.Hash, problemText(res))
	})
	if told {
		r.opts.OnReply()
	}
	return err
}

func problemText(res SyncResult) string {
	var b strings.Builder
	b.WriteString("There is a problem with your BRIEFINGS.md:\n")
	for i, p := range res.Problems {
		if i == 10 {
			fmt.Fprintf(&b, "- … and %d more\n", len(res.Problems)-i)
			break
		}
		b.WriteString("- " + p.String() + "\n")
	}
	if res.KeptLastGood {
		b.WriteString("Your briefings keep running as they were until the file is fixed.")
	} else {
		b.WriteString("The other briefings in the file run as written.")
	}
	return b.String()
}

// runOne pre-fetches a due briefing's data and queues its task. The dedupe key makes
// a second call for the same run (a repeated tick, or a crash before markEnqueued)
// find the first task instead of queueing another.
func (r *Runner) runOne(ctx context.Context, u User, d dueRun) error {
	loc, err := time.LoadLocation(d.Timezone)
	if err != nil {
		return fmt.Errorf("zone %q: %w", d.Timezone, err)
	}
	if r.opts.BeforeRun != nil {
		if err := r.opts.BeforeRun(ctx, u.ID); err != nil && ctx.Err() == nil {
			r.opts.Logger.Warn("could not refresh the user's files before a briefing; using the local copies", "user_id", u.ID, "err", err)
		}
	}
	now := r.opts.Clock().In(loc)
	rc := runContext{user: u, def: d.def, loc: loc, now: now, last: d.LastRunAt,
		today: time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, loc)}
	sections := r.prefetch(ctx, rc)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	nt := queue.NewTask{
		UserID:      u.ID,
		Source:      queue.SourceBriefing,
		Interactive: false,
		Prompt:      buildPrompt(d.Name, rc, sections),
		DedupeKey:   d.DedupeKey,
		MaxAttempts: r.opts.MaxAttempts,
		Delivery:    queue.Delivery{Job: "briefing:" + d.Name},
	}
	if err := r.deliver(ctx, u, d, &nt); err != nil {
		return err
	}
	t, created, err := r.q.Enqueue(ctx, nt)
	if err != nil {
		return err
	}
	if err := r.markEnqueued(ctx, d, t.ID); err != nil {
		return err
	}
	if created {
		failed := 0
		for _, s := range sections {
			if s.Err != nil {
				failed++
			}
		}
		r.opts.Logger.Info("briefing queued", "user_id", u.ID, "briefing", d.Name, "task_id", t.ID,
			"components", len(sections), "components_failed", failed, "talk", nt.ConversationToken != "", "email", nt.Email != nil)
		r.opts.OnTask()
	}
	return nil
}

// deliver fills in where the answer goes. A briefing only ever reaches its owner: a
// conversation the user wrote in with the bot (else their latest private one), and
// one of the user's own addresses (else their Nextcloud address).
func (r *Runner) deliver(ctx context.Context, u User, d dueRun, nt *queue.NewTask) error {
	talk := d.Output == userconfig.OutputTalk || d.Output == userconfig.OutputBoth
	if d.Output == userconfig.OutputEmail || d.Output == userconfig.OutputBoth {
		to := d.Email
		if to != "" {
			own, err := users.OwnsAddress(ctx, r.db.Read, u.ID, u.Email, to)
			if err != nil {
				return err
			}
			if !own {
				r.opts.Logger.Warn("a briefing's e-mail address is not one of the user's; using their own address", "user_id", u.ID, "briefing", d.Name)
				to = ""
			}
		}
		if to == "" {
			to = strings.TrimSpace(u.Email)
		}
		if to != "" {
			nt.Email = &queue.EmailReply{To: to, Subject: r.opts.BotName + " briefing: " + d.Name}
		} else {
			r.opts.Logger.Warn("a briefing is to be mailed but the user has no e-mail address; answering in Talk instead", "user_id", u.ID, "briefing", d.Name)
			talk = true
		}
	}
	if !talk {
		return nil
	}
	if d.Conversation != "" {
		member, err := convlog.Wrote(ctx, r.db.Read, u.ID, d.Conversation)
		if err != nil {
			return err
		}
		if member {
			nt.ConversationToken = d.Conversation
			return nil
		}
		r.opts.Logger.Warn("a briefing's conversation is not one the user wrote in with the bot; answering in private instead", "user_id", u.ID, "briefing", d.Name)
	}
	// Without a private conversation the answer stays in the task, which the settings
	// page shows.
	token, _, err := convlog.PrivateConversation(ctx, r.db.Read, u.ID)
	nt.ConversationToken = token
	return err
}
