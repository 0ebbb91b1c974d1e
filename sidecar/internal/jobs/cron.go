package jobs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/executor"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/schedule"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/userconfig"
	"github.com/istota/istota/sidecar/internal/users"
)

// CronFile is the name of the scheduled jobs file in the user's config folder.
const CronFile = "CRON.md"

// silentInstruction tells the agent how to say "nothing to report" for jobs marked
// silent_unless_action; the executor then delivers nothing.
const silentInstruction = "\n\n(This is a scheduled job. If nothing needs the user's attention or action, answer with exactly " +
	executor.NothingToReport + " and nothing else.)"

// syncCron brings the stored jobs in line with the user's CRON.md and tells the user,
// once per version of the file, what is wrong with it.
func (r *Runner) syncCron(ctx context.Context, u User, now time.Time) error {
	src, exists, err := r.files.ReadConfig(u.ID, CronFile)
	if err != nil {
		return err
	}
	if !exists {
		restored, err := r.restoreCron(ctx, u, now)
		if err != nil {
			// Without the file written back, syncing "no file" would delete the jobs.
			return err
		}
		src = restored
	}
	res, err := r.sched.Sync(ctx, u.ID, u.IsAdmin, src, u.Timezone, now)
	if err != nil {
		return err
	}
	if len(res.Problems) == 0 {
		return nil
	}
	_, err = r.sched.NotifyOnce(ctx, u.ID, res.Hash, func(tx *sql.Tx) error {
		_, err := r.noticeAbout(ctx, tx, u.ID, CronFile, "cron-problems:"+u.ID+":"+res.Hash, problemText(res))
		return err
	})
	if err == nil {
		r.opts.OnReply()
	}
	return err
}

// restoreCron writes a missing CRON.md back from the stored jobs, once per user: a
// file deleted after that is taken as "no jobs".
func (r *Runner) restoreCron(ctx context.Context, u User, now time.Time) ([]byte, error) {
	stored, err := r.sched.List(ctx, u.ID)
	if err != nil || len(stored) == 0 {
		return nil, err
	}
	done, err := r.sched.Restored(ctx, u.ID)
	if err != nil || done {
		return nil, err
	}
	defs := make([]userconfig.Job, len(stored))
	for i, j := range stored {
		defs[i] = j.Job
	}
	src, err := userconfig.RenderCron(defs)
	if err != nil {
		return nil, err
	}
	if err := r.files.WriteConfig(ctx, u.ID, CronFile, src); err != nil {
		return nil, fmt.Errorf("write back the missing %s: %w", CronFile, err)
	}
	if err := r.sched.MarkRestored(ctx, u.ID, now); err != nil {
		return nil, err
	}
	r.opts.Logger.Info("wrote back a missing CRON.md from the stored jobs", "user_id", u.ID, "jobs", len(stored))
	return src, nil
}

func problemText(res schedule.SyncResult) string {
	var b strings.Builder
	b.WriteString("There is a problem with your CRON.md:\n")
	for i, p := range res.Problems {
		if i == 10 {
			fmt.Fprintf(&b, "- … and %d more\n", len(res.Problems)-i)
			break
		}
		b.WriteString("- " + p.String() + "\n")
	}
	if res.KeptLastGood {
		b.WriteString("Your jobs keep running as they were until the file is fixed.")
	} else {
		b.WriteString("The other jobs in the file run as written.")
	}
	return b.String()
}

// enqueueDue turns the runs that are due into queue tasks. The dedupe key of each run
// makes a repeated tick (or a crash before MarkEnqueued) find the task already queued.
func (r *Runner) enqueueDue(ctx context.Context, users map[string]User, now time.Time) error {
	due, err := r.sched.Due(ctx, now)
	if err != nil {
		return err
	}
	for _, d := range due {
		u, known := users[d.UserID]
		if !known {
			continue
		}
		if err := d.Authorize(u.IsAdmin); err != nil {
			// The next sync drops the job (the file's state includes admin status).
			r.opts.Logger.Warn("scheduled command refused", "user_id", d.UserID, "job", d.Name, "err", err)
			continue
		}
		nt, err := r.newTask(ctx, u, d)
		if err != nil {
			r.opts.Logger.Warn("could not prepare a scheduled run", "user_id", d.UserID, "job", d.Name, "err", err)
			continue
		}
		t, created, err := r.q.Enqueue(ctx, nt)
		if err != nil {
			return fmt.Errorf("jobs: enqueue %q of %s: %w", d.Name, d.UserID, err)
		}
		if err := r.sched.MarkEnqueued(ctx, d, t.ID, d.RunAt); err != nil {
			return err
		}
		if created {
			r.opts.Logger.Info("scheduled job queued", "user_id", d.UserID, "job", d.Name, "task_id", t.ID, "manual", d.Manual)
			r.opts.OnTask()
		}
	}
	return nil
}

func (r *Runner) newTask(ctx context.Context, u User, d schedule.DueJob) (queue.NewTask, error) {
	nt := queue.NewTask{
		UserID:      u.ID,
		Source:      queue.SourceCron,
		Prompt:      d.Prompt,
		DedupeKey:   d.DedupeKey,
		MaxAttempts: r.opts.MaxAttempts,
		Delivery:    queue.Delivery{Command: d.Command, SilentUnlessAction: d.SilentUnlessAction, Job: "cron:" + d.Name},
	}
	if d.Command != "" {
		nt.Prompt = "Scheduled command " + d.Name
	}
	if d.SilentUnlessAction && d.Command == "" {
		nt.Prompt += silentInstruction
	}
	switch {
	case d.Target.Email != "":
		own, err := users.OwnsAddress(ctx, r.db.Read, u.ID, u.Email, d.Target.Email)
		if err != nil {
			return queue.NewTask{}, err
		}
		if own {
			nt.Email = &queue.EmailReply{To: d.Target.Email, Subject: r.opts.BotName + ": " + d.Name}
			return nt, nil
		}
		r.opts.Logger.Warn("a job's e-mail target is not one of the user's addresses; answering in Talk instead", "user_id", u.ID, "job", d.Name)
	case d.Target.Conversation != "":
		member, err := convlog.Wrote(ctx, r.db.Read, u.ID, d.Target.Conversation)
		if err != nil {
			return queue.NewTask{}, err
		}
		if member {
			nt.ConversationToken = d.Target.Conversation
			return nt, nil
		}
		r.opts.Logger.Warn("a job's conversation is not one the user wrote in with the bot; answering in private instead", "user_id", u.ID, "job", d.Name)
	}
	token, err := r.privateToken(ctx, u.ID)
	nt.ConversationToken = token
	return nt, err
}

func (r *Runner) privateToken(ctx context.Context, uid string) (string, error) {
	// Without a private conversation the result is kept in the task, which the settings
	// page shows.
	token, _, err := convlog.PrivateConversation(ctx, r.db.Read, uid)
	return token, err
}

// recordResults counts the outcome of every finished run once; a job switched off by
// repeated failure is announced in the same transaction.
func (r *Runner) recordResults(ctx context.Context, now time.Time) error {
	pending, err := r.sched.PendingResults(ctx)
	if err != nil {
		return err
	}
	for _, j := range pending {
		t, err := r.q.Get(ctx, j.LastTaskID)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if !t.Status.Finished() {
			continue
		}
		// A run stopped with !stop is not the job's failure.
		ok := t.Status != queue.Failed
		disabled, err := r.sched.RecordRun(ctx, j.UserID, j.Name, t.ID, ok, now, func(tx *sql.Tx, reason string) error {
			text := fmt.Sprintf("Your scheduled job %q was switched off: it %s.", j.Name, reason)
			key := fmt.Sprintf("cron-disabled:%s:%s:%d", j.UserID, j.Name, t.ID)
			if t.ConversationToken != "" {
				return r.ob.EnqueueTx(ctx, tx, outbox.Message{Token: t.ConversationToken, Kind: "notice", Text: text, Key: key})
			}
			_, err := r.notice(ctx, tx, j.UserID, key, text)
			return err
		})
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if disabled {
			r.opts.OnReply()
		}
	}
	return nil
}
