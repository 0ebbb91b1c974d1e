package portal

import (
	"context"
	"errors"

	"github.com/istota/istota/sidecar/internal/schedule"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/userconfig"
)

// Job is one CRON.md job with its run state.
type Job struct {
	Name                string `json:"name"`
	Schedule            string `json:"schedule"`
	Timezone            string `json:"timezone"`
	Kind                string `json:"kind"`   // prompt | command
	Target              string `json:"target"` // talk | email | none
	Enabled             bool   `json:"enabled"`
	Active              bool   `json:"active"`
	DisabledBy          string `json:"disabled_by"`
	DisabledReason      string `json:"disabled_reason"`
	NextRunAt           string `json:"next_run_at"`
	LastRunAt           string `json:"last_run_at"`
	LastResult          string `json:"last_result"`
	ConsecutiveFailures int    `json:"consecutive_failures"`
	Line                int    `json:"line"`
}

// Problem is one thing wrong with a user's config file, by line.
type Problem struct {
	Line    int    `json:"line"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Problems converts the parsers' problems.
func Problems(ps []userconfig.Problem) []Problem {
	out := make([]Problem, 0, len(ps))
	for _, p := range ps {
		out = append(out, Problem{Line: p.Line, Field: p.Field, Message: p.Message})
	}
	return out
}

// CronFile is the outcome of the last read of CRON.md.
type CronFile struct {
	Problems     []Problem `json:"problems"`
	KeptLastGood bool      `json:"kept_last_good"`
	CheckedAt    string    `json:"checked_at"`
}

// Check is one HEARTBEAT.md check with its state.
type Check struct {
	Name            string `json:"name"`
	Kind            string `json:"kind"`
	IntervalSeconds int64  `json:"interval_seconds"`
	Enabled         bool   `json:"enabled"`
	LastRunAt       string `json:"last_run_at"`
	LastStatus      string `json:"last_status"` // ok | alert | error | ""
	LastMessage     string `json:"last_message"`
	NextRunAt       string `json:"next_run_at"`
	InQuietHours    bool   `json:"in_quiet_hours"`
}

// Heartbeats is what HeartbeatStatus reports.
type Heartbeats struct {
	Checks   []Check
	Problems []Problem
}

// Briefing is one BRIEFINGS.md briefing with its state.
type Briefing struct {
	Name       string   `json:"name"`
	Schedule   string   `json:"schedule"`
	Output     string   `json:"output"`
	Components []string `json:"components"`
	Enabled    bool     `json:"enabled"`
	NextRunAt  string   `json:"next_run_at"`
	LastRunAt  string   `json:"last_run_at"`
	LastResult string   `json:"last_result"`
}

// Briefings is what BriefingStatus reports.
type Briefings struct {
	Briefings []Briefing
	Problems  []Problem
}

// FileProblems wraps a file's problems for the page.
type FileProblems struct {
	Problems []Problem `json:"problems"`
}

// Schedule is the scheduled-work panel.
type Schedule struct {
	Jobs          []Job        `json:"jobs"`
	CronFile      CronFile     `json:"cron_file"`
	Checks        []Check      `json:"checks"`
	HeartbeatFile FileProblems `json:"heartbeat_file"`
	Briefings     []Briefing   `json:"briefings"`
	BriefingsFile FileProblems `json:"briefings_file"`
}

// JobView renders one stored job.
func JobView(j schedule.Job) Job {
	v := Job{Name: j.Name, Schedule: j.Schedule, Timezone: j.TZ, Kind: "prompt", Target: "none", Enabled: j.Enabled,
		Active: j.Active(), DisabledBy: j.DisabledBy, DisabledReason: j.DisabledReason, NextRunAt: rfc3339(j.NextRunAt),
		LastRunAt: rfc3339(j.LastRunAt), LastResult: j.LastResult, ConsecutiveFailures: j.ConsecutiveFailures, Line: j.Line}
	if j.Command != "" {
		v.Kind = "command"
	}
	switch {
	case j.Target.Email != "":
		v.Target = "email"
	case j.Target.Conversation != "":
		v.Target = "talk"
	}
	return v
}

// Schedule returns uid's jobs, checks and briefings with the problems of their files.
func (s *Service) Schedule(ctx context.Context, uid string) (Schedule, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return Schedule{}, err
	}
	out := Schedule{Jobs: []Job{}, CronFile: CronFile{Problems: []Problem{}}, Checks: []Check{},
		HeartbeatFile: FileProblems{Problems: []Problem{}}, Briefings: []Briefing{}, BriefingsFile: FileProblems{Problems: []Problem{}}}
	if s.o.Scheduler != nil {
		jobs, err := s.o.Scheduler.List(ctx, uid)
		if err != nil {
			return Schedule{}, err
		}
		for _, j := range jobs {
			out.Jobs = append(out.Jobs, JobView(j))
		}
		fs, err := s.o.Scheduler.FileStatus(ctx, uid)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return Schedule{}, err
		default:
			out.CronFile = CronFile{Problems: Problems(fs.Problems), KeptLastGood: fs.KeptLastGood, CheckedAt: rfc3339(fs.CheckedAt)}
		}
	}
	if s.o.Heartbeats != nil {
		hb, err := s.o.Heartbeats.Status(ctx, uid)
		if err != nil {
			return Schedule{}, err
		}
		if hb.Checks != nil {
			out.Checks = hb.Checks
		}
		if hb.Problems != nil {
			out.HeartbeatFile.Problems = hb.Problems
		}
	}
	if s.o.Briefings != nil {
		br, err := s.o.Briefings.Status(ctx, uid)
		if err != nil {
			return Schedule{}, err
		}
		if br.Briefings != nil {
			out.Briefings = br.Briefings
		}
		if br.Problems != nil {
			out.BriefingsFile.Problems = br.Problems
		}
	}
	return out, nil
}

// JobAction is enable, disable or run.
type JobAction string

// Job actions of POST …/schedule/jobs/{name}/{action}.
const (
	JobEnable  JobAction = "enable"
	JobDisable JobAction = "disable"
	JobRun     JobAction = "run"
)

// ActOnJob enables, disables or runs one of uid's jobs now and returns it.
func (s *Service) ActOnJob(ctx context.Context, uid, name string, action JobAction) (Job, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return Job{}, err
	}
	if s.o.Scheduler == nil {
		return Job{}, notFound("job")
	}
	now := s.o.Clock()
	var err error
	switch action {
	case JobEnable:
		err = s.o.Scheduler.SetEnabled(ctx, uid, name, true, now)
	case JobDisable:
		err = s.o.Scheduler.SetEnabled(ctx, uid, name, false, now)
	case JobRun:
		err = s.o.Scheduler.RunNow(ctx, uid, name, now)
	default:
		return Job{}, notFound("action")
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Job{}, notFound("job")
	case errors.Is(err, schedule.ErrDisabledInFile):
		return Job{}, &Error{Kind: KindConflict, Message: "this job is switched off in CRON.md (enabled = false); edit the file to switch it on"}
	case err != nil:
		return Job{}, err
	}
	if action == JobRun {
		s.o.OnJobRun()
	}
	j, err := s.o.Scheduler.Get(ctx, uid, name)
	if errors.Is(err, store.ErrNotFound) {
		return Job{}, notFound("job")
	}
	if err != nil {
		return Job{}, err
	}
	return JobView(j), nil
}
