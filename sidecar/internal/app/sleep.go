package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/brain"
	"github.com/istota/istota/sidecar/internal/brain/claude"
	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/curation"
	"github.com/istota/istota/sidecar/internal/executor"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/sleep"
)

// sandboxExtractor asks the model, in a sandbox of its own with no tools and no files,
// to extract memories from a transcript: a text-only call outside the queue.
type sandboxExtractor struct {
	s     *sidecar
	brain brain.Brain
}

func (x *sandboxExtractor) Extract(ctx context.Context, prompt string) (string, error) {
	scratch := filepath.Join(x.s.cfg.DataDir, "tmp")
	if err := os.MkdirAll(scratch, 0o711); err != nil {
		return "", fmt.Errorf("sleep: scratch directory: %w", err)
	}
	dir, err := os.MkdirTemp(scratch, "sleep-")
	if err != nil {
		return "", fmt.Errorf("sleep: scratch directory: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o711); err != nil {
		return "", err
	}
	ws := executor.Workspace{Root: filepath.Join(dir, "w"), Home: filepath.Join(dir, "h"), Tmp: filepath.Join(dir, "t")}
	for _, d := range []string{ws.Root, ws.Home, ws.Tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return "", err
		}
	}
	launcher, closeFn, err := x.s.launcher.ForTask(ctx, queue.Task{UserID: "sleep-cycle"}, ws)
	if err != nil {
		return "", err
	}
	defer closeFn()
	res, err := x.brain.Run(ctx, brain.Request{Prompt: prompt, MaxTurns: 1, UserID: "sleep-cycle"}, launcher, nil)
	if err != nil {
		return "", err
	}
	if !res.OK {
		return "", fmt.Errorf("sleep: the model failed (%s %d): %s", res.Subtype, res.APIStatus, res.Text)
	}
	return res.Text, nil
}

// newSleepCycle builds the nightly memory extraction for every user and conversation.
func (s *sidecar) newSleepCycle() (*sleep.Cycle, error) {
	dataDir := s.cfg.DataDir
	var extractBrain brain.Brain = claude.New(claude.Config{
		Binary: s.launcher.agentPath(), Model: s.cfg.Brain.Model, MaxTurns: 1,
		ExtraArgs: []string{"--tools="}, // text only: no tool may run
	}, s.log.With("component", "sleep"))
	if s.cfg.Brain.Kind != "claude" {
		// One turn: a tool call on it ends the run without running the tool.
		b, err := s.newBrain(s.cfg, s.log.With("component", "sleep"))
		if err != nil {
			return nil, err
		}
		extractBrain = b
	}
	extractor := &sandboxExtractor{s: s, brain: extractBrain}
	return sleep.New(s.db, s.graph, curation.New(curation.Options{}), extractor, sleep.Config{
		UserRoot:      func(uid string) string { return executor.UserMirror(dataDir, uid) },
		ChannelRoot:   func(token string) string { return executor.ChannelMirror(dataDir, token) },
		BotDir:        strings.ToLower(s.cfg.Talk.BotName),
		Cron:          s.cfg.Memory.SleepCron,
		RetentionDays: s.cfg.Memory.RetentionDays,
		HistoryDays:   s.historyDays,
		History:       historyPruner{s},
		Indexer:       sleepIndexer{s.mem},
		Retainer:      s.mem,
		Vectors:       s.mem,
		Logger:        s.log.With("component", "sleep"),
	})
}

// historyDays is memory.history_days as the admin set it last (it applies live).
func (s *sidecar) historyDays() int {
	if s.pages.settings != nil {
		return s.pages.settings.Effective().Memory.HistoryDays
	}
	return s.cfg.Memory.HistoryDays
}

// historyPruner applies history retention for the sleep cycle: a user's finished tasks
// (their events go with them) and audit entries, a conversation's log.
type historyPruner struct{ s *sidecar }

func (h historyPruner) PruneHistory(ctx context.Context, ns sleep.Namespace, before time.Time) (int, error) {
	if ns.Kind == sleep.KindChannel {
		return convlog.Prune(ctx, h.s.db.Write, ns.ID, before)
	}
	tasks, err := h.s.queue.PruneFinished(ctx, ns.ID, before)
	if err != nil {
		return tasks, err
	}
	entries, err := audit.New(h.s.db, nil, nil).Prune(ctx, ns.ID, before)
	return tasks + entries, err
}

// runSleep runs one namespace's sleep cycle with its folder synced around it.
func (s *sidecar) runSleep(ctx context.Context, cycle *sleep.Cycle, ns string, now time.Time) (sleep.Outcome, error) {
	kind, id, _ := strings.Cut(ns, ":")
	if s.files != nil {
		var err error
		if kind == "user" {
			_, err = s.files.Pull(ctx, id)
		} else {
			_, err = s.files.PullChannel(ctx, id)
		}
		if err != nil {
			s.log.Warn("sleep cycle: pull failed; using the local mirror", "namespace", ns, "err", err)
		}
		defer func() {
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
			defer cancel()
			if kind == "user" {
				_, err = s.files.Push(pctx, id)
			} else {
				_, err = s.files.PushChannel(pctx, id)
			}
			if err != nil {
				s.log.Warn("sleep cycle: push failed; it is retried", "namespace", ns, "err", err)
			}
		}()
	}
	return cycle.Run(ctx, ns, now)
}

// sleepLoop checks once a minute which namespaces are due (by their own timezone).
func (s *sidecar) sleepLoop(ctx context.Context, cycle *sleep.Cycle) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := s.graph.ExpireEphemeral(ctx, time.Now()); err != nil {
			s.log.Warn("expiring ephemeral facts failed", "err", err)
		} else if n > 0 {
			s.log.Info("expired ephemeral facts", "count", n)
		}
		namespaces, err := cycle.Namespaces(ctx)
		if err != nil {
			s.log.Warn("sleep cycle: listing namespaces failed", "err", err)
			continue
		}
		for _, ns := range namespaces {
			if ctx.Err() != nil {
				return
			}
			due, err := cycle.Due(ctx, ns, time.Now())
			if err != nil || !due {
				continue
			}
			out, err := s.runSleep(ctx, cycle, ns, time.Now())
			if err != nil {
				s.log.Warn("sleep cycle failed; retried next night", "namespace", ns, "err", err)
				continue
			}
			s.log.Info("sleep cycle done", "namespace", ns, "skipped", out.Skipped, "history_rows_deleted", out.PrunedRows, "vectors_filled", out.Embedded)
		}
	}
}

// cmdSleep runs the sleep cycle now for one user or conversation (`istota sleep -u alice`).
func cmdSleep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sleep", flag.ContinueOnError)
	load := commonFlags(fs)
	user := fs.String("u", "", "user id")
	channel := fs.String("channel", "", "conversation token")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if (*user == "") == (*channel == "") {
		fmt.Fprintln(stderr, "usage: istota sleep -u USER | --channel TOKEN")
		return errUsage
	}
	cfg, err := load()
	if err != nil {
		return err
	}
	s, err := openSidecar(ctx, cfg, newLogger(cfg, stderr), toRun)
	if errors.Is(err, errLocked) {
		return errors.New("istota serve is running: it runs the sleep cycle itself every night; stop it to run one now")
	}
	if err != nil {
		return err
	}
	defer s.close()
	cycle, err := s.newSleepCycle()
	if err != nil {
		return err
	}
	ns := "user:" + *user
	if *channel != "" {
		ns = "channel:" + *channel
	}
	out, err := s.runSleep(ctx, cycle, ns, time.Now())
	if err != nil {
		return err
	}
	if out.PrunedRows > 0 {
		fmt.Fprintf(stdout, "%s: %d history row(s) older than %d days deleted\n", ns, out.PrunedRows, s.historyDays())
	}
	if out.Embedded > 0 {
		fmt.Fprintf(stdout, "%s: %d chunk(s) stored without a vector received one\n", ns, out.Embedded)
	}
	if out.Skipped != "" {
		fmt.Fprintf(stdout, "%s: nothing to do (%s)\n", ns, out.Skipped)
		return nil
	}
	fmt.Fprintf(stdout, "%s: done\n", ns)
	return nil
}
