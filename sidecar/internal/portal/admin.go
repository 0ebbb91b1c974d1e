package portal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/istota/istota/sidecar/internal/settings"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/users"
)

// Health is the admin's view of the sidecar.
type Health struct {
	Version       string       `json:"version"`
	Schema        int          `json:"schema"`
	UptimeSeconds int64        `json:"uptime_seconds"`
	Queue         QueueHealth  `json:"queue"`
	Workers       WorkerHealth `json:"workers"`
	Sandbox       SandboxState `json:"sandbox"`
	Nextcloud     NCHealth     `json:"nextcloud"`
	Model         ModelHealth  `json:"model"`
	LastErrors    []TaskError  `json:"last_errors"`
}

// ModelHealth says which credential the model requests use and whether the model API
// refused it.
type ModelHealth struct {
	Login string `json:"login"` // subscription_token | api_key | none
	// Refused is "" or what to do about the model API refusing the credential in effect.
	Refused string `json:"refused"`
}

// QueueHealth counts tasks.
type QueueHealth struct {
	Pending  int `json:"pending"`
	Running  int `json:"running"`
	Failed24 int `json:"failed_24h"`
}

// WorkerHealth is the pool's use.
type WorkerHealth struct {
	Max                 int `json:"max"`
	Busy                int `json:"busy"`
	ReservedInteractive int `json:"reserved_interactive"`
}

// NCHealth says whether the Nextcloud credentials are configured.
type NCHealth struct {
	BotAccount bool `json:"bot_account"`
	TalkSecret bool `json:"talk_secret"`
}

// TaskError is one failed task with its internal reason (admins only).
type TaskError struct {
	At     string `json:"at"`
	TaskID int64  `json:"task_id"`
	UserID string `json:"user_id"`
	Error  string `json:"error"`
}

// Health returns the admin's health view.
func (s *Service) Health(ctx context.Context) (Health, error) {
	now := s.o.Clock()
	h := Health{Version: s.o.Version, Schema: s.o.Schema, UptimeSeconds: int64(now.Sub(s.o.StartedAt) / time.Second),
		Sandbox: s.o.Sandbox, Nextcloud: NCHealth{BotAccount: s.o.BotAccount, TalkSecret: s.o.TalkSecret},
		LastErrors: []TaskError{}}
	st, err := s.o.Queue.Stats(ctx)
	if err != nil {
		return Health{}, err
	}
	h.Queue.Pending, h.Queue.Running = st.Pending, st.Running+st.Locked
	if err := s.o.DB.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks WHERE status = 'failed' AND finished_at >= ?`,
		store.FormatTime(now.Add(-24*time.Hour))).Scan(&h.Queue.Failed24); err != nil {
		return Health{}, fmt.Errorf("portal: count failures: %w", err)
	}
	if s.o.Pool != nil {
		h.Workers.Busy, h.Workers.Max = s.o.Pool.Stats()
	}
	h.Workers.ReservedInteractive = s.o.ReservedInteractive
	h.Model.Login = settings.LoginNone
	if s.o.Settings != nil {
		h.Model.Login = s.o.Settings.Login().Kind
		r, ok, err := s.o.Settings.LoginRefused(ctx)
		if err != nil {
			return Health{}, err
		}
		if ok {
			h.Model.Refused = r.Advice()
		}
	}
	rows, err := s.o.DB.Read.QueryContext(ctx, `SELECT id, user_id, error, finished_at FROM tasks
		WHERE status = 'failed' ORDER BY finished_at DESC, id DESC LIMIT 10`)
	if err != nil {
		return Health{}, fmt.Errorf("portal: last errors: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e TaskError
		var at string
		if err := rows.Scan(&e.TaskID, &e.UserID, &e.Error, &at); err != nil {
			return Health{}, fmt.Errorf("portal: last errors: %w", err)
		}
		t, _ := store.ParseTime(at)
		e.At, e.Error = rfc3339(t), cut(e.Error, 1000)
		h.LastErrors = append(h.LastErrors, e)
	}
	return h, rows.Err()
}

// AdminSettings is the admin panel's settings answer.
type AdminSettings struct {
	Settings        settings.Admin `json:"settings"`
	RestartRequired []string       `json:"restart_required"`
}

// AdminSettings returns the settings in effect (for the next start) and what waits for
// a restart.
func (s *Service) AdminSettings() (AdminSettings, error) {
	if s.o.Settings == nil {
		return AdminSettings{}, &Error{Kind: KindUnavailable, Message: "settings are not available"}
	}
	a, restart := s.o.Settings.Get()
	return AdminSettings{Settings: a, RestartRequired: restart}, nil
}

// SaveAdminSettings applies a partial AdminSettings (JSON). A change of the admin lists
// reaches users.is_admin at once.
func (s *Service) SaveAdminSettings(ctx context.Context, patch []byte) (AdminSettings, error) {
	if s.o.Settings == nil {
		return AdminSettings{}, &Error{Kind: KindUnavailable, Message: "settings are not available"}
	}
	a, restart, err := s.o.Settings.Update(ctx, patch)
	var fe settings.FieldErrors
	if errors.As(err, &fe) {
		return AdminSettings{}, &Error{Kind: KindInvalidSettings, Message: "some settings are not valid", Fields: fe}
	}
	if errors.Is(err, settings.ErrMalformed) {
		return AdminSettings{}, invalid("%s", err.Error())
	}
	if err != nil {
		return AdminSettings{}, err
	}
	if err := users.RecomputeAdmins(ctx, s.o.DB, s.o.Access.Decide); err != nil {
		return AdminSettings{}, err
	}
	s.o.Logger.Info("admin settings changed", "restart_required", len(restart))
	return AdminSettings{Settings: a, RestartRequired: restart}, nil
}
