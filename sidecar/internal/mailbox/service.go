package mailbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/users"
)

// Secrets is the sealed credential store; *skills.Credentials implements it. A missing
// value is an error matching store.ErrNotFound.
type Secrets interface {
	Get(ctx context.Context, userID, name string) (string, error)
	Set(ctx context.Context, userID, name, value string) error
	Delete(ctx context.Context, userID, name string) error
}

// state is the per-user setting (users.SettingMailbox): the account and the outcome
// of the last login the sidecar made with it.
type state struct {
	Account
	ConnectedAt time.Time `json:"connected_at"`
	CheckedAt   time.Time `json:"checked_at,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	Messages    int       `json:"messages"`
	Unseen      int       `json:"unseen"`
}

// Status is what the settings page shows: never the password.
type Status struct {
	Connected   bool   `json:"connected"`
	Host        string `json:"host,omitempty"`
	Port        int    `json:"port,omitempty"`
	TLS         string `json:"tls,omitempty"`
	Username    string `json:"username,omitempty"`
	ConnectedAt string `json:"connected_at,omitempty"`
	CheckedAt   string `json:"checked_at,omitempty"`
	// OK is whether the last login worked; LastError says why not.
	OK        bool   `json:"ok"`
	LastError string `json:"last_error,omitempty"`
	Messages  int    `json:"messages"`
	Unseen    int    `json:"unseen"`
}

// Service keeps users' mailbox accounts and uses them. It is safe for concurrent use.
type Service struct {
	db      *store.DB
	secrets Secrets
	client  *Client
	clock   func() time.Time
	log     *slog.Logger
}

// New returns a Service. clock and logger may be nil.
func New(db *store.DB, secrets Secrets, client *Client, clock func() time.Time, logger *slog.Logger) (*Service, error) {
	if db == nil || secrets == nil || client == nil {
		return nil, errors.New("mailbox: a database, a credential store and a client are required")
	}
	if clock == nil {
		clock = time.Now
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Service{db: db, secrets: secrets, client: client, clock: clock, log: logger}, nil
}

// Client is the IMAP client the service uses.
func (s *Service) Client() *Client { return s.client }

func (s *Service) load(ctx context.Context, uid string) (state, bool, error) {
	var st state
	ok, err := users.Setting(ctx, s.db.Read, uid, users.SettingMailbox, &st)
	if err != nil {
		return state{}, false, fmt.Errorf("mailbox: %w", err)
	}
	return st, ok, nil
}

// Account returns uid's connected account, or ErrNotConnected.
func (s *Service) Account(ctx context.Context, uid string) (Account, error) {
	st, ok, err := s.load(ctx, uid)
	if err != nil {
		return Account{}, err
	}
	if !ok {
		return Account{}, ErrNotConnected
	}
	return st.Account, nil
}

// Connected reports whether uid has a mailbox connected.
func (s *Service) Connected(ctx context.Context, uid string) (bool, error) {
	_, ok, err := s.load(ctx, uid)
	return ok, err
}

// Status returns what the page shows about uid's mailbox.
func (s *Service) Status(ctx context.Context, uid string) (Status, error) {
	st, ok, err := s.load(ctx, uid)
	if err != nil || !ok {
		return Status{}, err
	}
	out := Status{Connected: true, Host: st.Host, Port: st.Port, TLS: st.TLS, Username: st.Username,
		ConnectedAt: rfc3339(st.ConnectedAt), CheckedAt: rfc3339(st.CheckedAt), OK: st.LastError == "",
		LastError: st.LastError, Messages: st.Messages, Unseen: st.Unseen}
	return out, nil
}

// Connect logs in to the account with password and, only when that works, stores
// both: the password sealed, the rest as a setting. An empty password keeps the stored
// one, but only for the same server and user name: a password is never sent to a
// server other than the one it was given for. A failure leaves what was stored as it
// was and is a *FieldError or an *Error.
func (s *Service) Connect(ctx context.Context, uid string, a Account, password string) (Status, error) {
	a, err := a.Normalize()
	if err != nil {
		return Status{}, err
	}
	if password == "" {
		old, ok, err := s.load(ctx, uid)
		if err != nil {
			return Status{}, err
		}
		if !ok || old.Host != a.Host || old.Port != a.Port || old.Username != a.Username {
			return Status{}, &FieldError{Fields: map[string]string{"password": "is required for a new server or user name"}}
		}
		if password, err = s.secrets.Get(ctx, uid, CredentialName); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return Status{}, &FieldError{Fields: map[string]string{"password": "is required"}}
			}
			return Status{}, fmt.Errorf("mailbox: connect %s: %w", uid, err)
		}
	}
	if err := checkPassword(password); err != nil {
		return Status{}, err
	}
	in, err := s.client.Check(ctx, a, password)
	if err != nil {
		return Status{}, err
	}
	if err := s.secrets.Set(ctx, uid, CredentialName, password); err != nil {
		return Status{}, fmt.Errorf("mailbox: connect %s: %w", uid, err)
	}
	now := s.clock()
	st := state{Account: a, ConnectedAt: now, CheckedAt: now, Messages: in.Messages, Unseen: in.Unseen}
	if err := users.SetSetting(ctx, s.db.Write, uid, users.SettingMailbox, st, now); err != nil {
		return Status{}, fmt.Errorf("mailbox: connect %s: %w", uid, err)
	}
	s.log.Info("mailbox connected", "user_id", uid, "host", a.Host, "port", a.Port, "tls", a.TLS)
	return s.Status(ctx, uid)
}

// Test logs in with the stored account and records the outcome, which Status then
// shows; a failed login is not an error of Test. ErrNotConnected when there is none.
func (s *Service) Test(ctx context.Context, uid string) (Status, error) {
	a, pw, err := s.open(ctx, uid)
	if err != nil {
		return Status{}, err
	}
	in, err := s.client.Check(ctx, a, pw)
	s.Record(ctx, uid, err, &in)
	return s.Status(ctx, uid)
}

// Disconnect removes uid's account and its sealed password; nothing is left behind.
func (s *Service) Disconnect(ctx context.Context, uid string) error {
	if err := s.secrets.Delete(ctx, uid, CredentialName); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("mailbox: disconnect %s: %w", uid, err)
	}
	if err := users.DeleteSetting(ctx, s.db.Write, uid, users.SettingMailbox); err != nil {
		return fmt.Errorf("mailbox: disconnect %s: %w", uid, err)
	}
	s.log.Info("mailbox disconnected", "user_id", uid)
	return nil
}

// open returns uid's account and password, for the sidecar's own use (the briefing);
// the skill gets the password from the credential proxy instead.
func (s *Service) open(ctx context.Context, uid string) (Account, string, error) {
	a, err := s.Account(ctx, uid)
	if err != nil {
		return Account{}, "", err
	}
	pw, err := s.secrets.Get(ctx, uid, CredentialName)
	if errors.Is(err, store.ErrNotFound) {
		return Account{}, "", ErrNotConnected
	}
	if err != nil {
		return Account{}, "", fmt.Errorf("mailbox: %w", err)
	}
	return a, pw, nil
}

// Recent lists the inbox messages that arrived since a time, newest first (at most
// limit), and how many there were, for the briefing.
func (s *Service) Recent(ctx context.Context, uid string, since time.Time, limit int) (Account, []Summary, int, error) {
	a, pw, err := s.open(ctx, uid)
	if err != nil {
		return Account{}, nil, 0, err
	}
	list, total, err := s.client.Since(ctx, a, pw, since, limit)
	s.Record(ctx, uid, err, nil)
	return a, list, total, err
}

// Record notes the outcome of a login for the page's "last checked": a connection
// failure (wrong password, unreachable, TLS) is shown until a later login works. A
// missing folder or message says nothing about the connection and is not recorded.
func (s *Service) Record(ctx context.Context, uid string, err error, in *Inbox) {
	var me *Error
	if err != nil && (!errors.As(err, &me) || me.Kind == KindNotFound) {
		return
	}
	ctx = context.WithoutCancel(ctx)
	st, ok, lerr := s.load(ctx, uid)
	if lerr != nil || !ok {
		return
	}
	now := s.clock()
	st.CheckedAt, st.LastError = now, ""
	if me != nil {
		st.LastError = me.Message
	}
	if in != nil && err == nil {
		st.Messages, st.Unseen = in.Messages, in.Unseen
	}
	if _, uerr := users.UpdateSetting(ctx, s.db.Write, uid, users.SettingMailbox, st, now); uerr != nil {
		s.log.Warn("mailbox: recording the last check failed", "user_id", uid, "err", uerr)
	}
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
