package portal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/talk"
	"github.com/istota/istota/sidecar/internal/users"
)

// Poster queues the bot's Talk messages in the caller's transaction; *outbox.Outbox
// implements it.
type Poster interface {
	EnqueueTx(ctx context.Context, tx *sql.Tx, m outbox.Message) error
	Wake()
}

// HomeConversation is what the app reports after making (or finding) the user's private
// conversation with the bot enabled in it.
type HomeConversation struct {
	Token string `json:"token"`
}

// HomeAnswer says whether this call queued the welcome (it is sent once per user).
type HomeAnswer struct {
	Token    string `json:"token"`
	Welcomed bool   `json:"welcomed"`
}

// SetHomeConversation records the user's private conversation, where scheduled results
// and notices go until they write in another, and queues a short welcome in it the first
// time. Only a user the access settings let use the bot gets one (403 otherwise): the app
// asks first, and the sidecar checks again.
func (s *Service) SetHomeConversation(ctx context.Context, uid string, in HomeConversation) (HomeAnswer, error) {
	if !talk.ValidToken(in.Token) {
		return HomeAnswer{}, invalid("token is not a Talk conversation token")
	}
	u, err := s.Authorize(ctx, uid)
	if err != nil {
		return HomeAnswer{}, err
	}
	if s.o.Poster == nil {
		return HomeAnswer{}, &Error{Kind: KindUnavailable, Message: "Talk delivery is not set up in the sidecar"}
	}
	now := s.o.Clock()
	tx, err := s.o.DB.Write.BeginTx(ctx, nil)
	if err != nil {
		return HomeAnswer{}, fmt.Errorf("portal: home conversation of %s: %w", uid, err)
	}
	defer tx.Rollback()
	if err := users.SetSetting(ctx, tx, uid, users.SettingHomeConversation, in.Token, now); err != nil {
		return HomeAnswer{}, err
	}
	var welcomedAt string
	err = tx.QueryRowContext(ctx, `SELECT value FROM user_settings WHERE user_id = ? AND key = ?`, uid, users.SettingWelcomedAt).Scan(&welcomedAt)
	welcome := errors.Is(err, sql.ErrNoRows)
	if err != nil && !welcome {
		return HomeAnswer{}, fmt.Errorf("portal: welcome of %s: %w", uid, err)
	}
	if welcome {
		msg := outbox.Message{Token: in.Token, Kind: outbox.KindNotice, Key: "welcome:" + uid, Text: WelcomeText(s.o.BotName, u.DisplayName)}
		if err := s.o.Poster.EnqueueTx(ctx, tx, msg); err != nil {
			return HomeAnswer{}, fmt.Errorf("portal: welcome of %s: %w", uid, err)
		}
		if err := users.SetSetting(ctx, tx, uid, users.SettingWelcomedAt, store.FormatTime(now), now); err != nil {
			return HomeAnswer{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return HomeAnswer{}, fmt.Errorf("portal: home conversation of %s: %w", uid, err)
	}
	if welcome {
		s.o.Poster.Wake()
		s.o.Logger.Info("welcomed user in their conversation", "user_id", uid, "token", in.Token)
	}
	return HomeAnswer{Token: in.Token, Welcomed: welcome}, nil
}

// WelcomeText is the first message in a user's conversation with the bot: what it is and
// a few things to try, each of which works without further setup except the calendar.
func WelcomeText(botName, displayName string) string {
	hello := "Hello!"
	if name := strings.TrimSpace(displayName); name != "" {
		hello = "Hello " + name + "!"
	}
	dir := strings.ToLower(botName)
	return hello + " I'm " + botName + ", your assistant in this Nextcloud. Everything you write here reaches me; no need to mention me.\n\n" +
		"Things to try:\n" +
		"- \"Remind me every Monday at 8:00 to take out the bins\"\n" +
		"- Share a file here and ask me about it\n" +
		"- \"What is on my calendar this week?\" (share a calendar with " + botName + " first)\n" +
		"- `!help` lists the commands I answer at once\n\n" +
		"What I keep for you is in your Files, in the folder " + dir + "/ (USER.md is what I remember about you)."
}
