// Package convlog keeps every message of the conversations the bot takes part in, so a
// task's prompt can carry the recent conversation and the message being replied to.
package convlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/users"
)

// Message is one logged chat message. Bot replies have negative ids because Talk does
// not return the id of a bot's message.
type Message struct {
	Token     string
	ID        int64
	ActorType string
	ActorID   string
	ActorName string
	Text      string
	ReplyToID int64
	FromBot   bool
	At        time.Time
}

// Execer is satisfied by *sql.DB and *sql.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Record stores m unless (token, id) is already known; it reports whether it was new.
func Record(ctx context.Context, db Execer, m Message) (bool, error) {
	res, err := db.ExecContext(ctx, `INSERT INTO conversation_messages
		(token, message_id, actor_type, actor_id, actor_name, text, reply_to_id, from_bot, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		m.Token, m.ID, m.ActorType, m.ActorID, m.ActorName, m.Text, m.ReplyToID, m.FromBot, store.FormatTime(m.At))
	if err != nil {
		return false, fmt.Errorf("convlog: record %s/%d: %w", m.Token, m.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("convlog: record %s/%d: %w", m.Token, m.ID, err)
	}
	return n == 1, nil
}

// RecordBotReply logs the bot's own answer under a synthetic negative id derived from the
// outbox key's owner (the task id), so the next prompt sees what the bot said.
func RecordBotReply(ctx context.Context, db Execer, token string, taskID int64, botName, text string, replyTo int64, at time.Time) error {
	_, err := Record(ctx, db, Message{
		Token: token, ID: -taskID, ActorType: "bots", ActorID: "istota", ActorName: botName,
		Text: text, ReplyToID: replyTo, FromBot: true, At: at,
	})
	return err
}

// Recent returns up to limit messages of token logged before the message with id before
// (by time, then id), oldest first. Bot replies are included.
func Recent(ctx context.Context, db *sql.DB, token string, before int64, limit int) ([]Message, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := db.QueryContext(ctx, `SELECT token, message_id, actor_type, actor_id, actor_name, text, reply_to_id, from_bot, created_at
		FROM conversation_messages
		WHERE token = ? AND message_id != ? AND created_at <= COALESCE(
			(SELECT created_at FROM conversation_messages WHERE token = ? AND message_id = ?), '9999')
		ORDER BY created_at DESC, rowid DESC LIMIT ?`, token, before, token, before, limit)
	if err != nil {
		return nil, fmt.Errorf("convlog: recent %s: %w", token, err)
	}
	msgs, err := scanAll(rows)
	if err != nil {
		return nil, fmt.Errorf("convlog: recent %s: %w", token, err)
	}
	for i, j := 0, len(msgs)-1; i < j; i, j = i+1, j-1 {
		msgs[i], msgs[j] = msgs[j], msgs[i]
	}
	return msgs, nil
}

// Get returns one message or store.ErrNotFound.
func Get(ctx context.Context, db *sql.DB, token string, id int64) (Message, error) {
	rows, err := db.QueryContext(ctx, `SELECT token, message_id, actor_type, actor_id, actor_name, text, reply_to_id, from_bot, created_at
		FROM conversation_messages WHERE token = ? AND message_id = ?`, token, id)
	if err != nil {
		return Message{}, fmt.Errorf("convlog: get %s/%d: %w", token, id, err)
	}
	msgs, err := scanAll(rows)
	if err != nil {
		return Message{}, fmt.Errorf("convlog: get %s/%d: %w", token, id, err)
	}
	if len(msgs) == 0 {
		return Message{}, store.ErrNotFound
	}
	return msgs[0], nil
}

func scanAll(rows *sql.Rows) ([]Message, error) {
	defer rows.Close()
	var out []Message
	for rows.Next() {
		var m Message
		var at string
		if err := rows.Scan(&m.Token, &m.ID, &m.ActorType, &m.ActorID, &m.ActorName, &m.Text, &m.ReplyToID, &m.FromBot, &at); err != nil {
			return nil, err
		}
		t, err := store.ParseTime(at)
		if err != nil {
			return nil, err
		}
		m.At = t
		out = append(out, m)
	}
	return out, errors.Join(rows.Err())
}

// PrivateConversation returns the token of the user's most recently used private
// conversation with the bot (one-to-one or alone with it), where notices that belong to
// nobody else go: scheduled results, alerts, warnings about their files. Until the user
// writes in one, it is the conversation the app made for them (users.SettingHomeConversation).
// ok is false when there is neither.
func PrivateConversation(ctx context.Context, db *sql.DB, uid string) (token string, ok bool, err error) {
	token, ok, err = privateWritten(ctx, db, uid)
	if err != nil || ok {
		return token, ok, err
	}
	ok, err = users.Setting(ctx, db, uid, users.SettingHomeConversation, &token)
	if err != nil {
		return "", false, fmt.Errorf("convlog: private conversation of %s: %w", uid, err)
	}
	return token, ok && token != "", nil
}

func privateWritten(ctx context.Context, db *sql.DB, uid string) (token string, ok bool, err error) {
	err = db.QueryRowContext(ctx, `
		SELECT m.token FROM conversation_messages m JOIN conversations c ON c.token = m.token
		WHERE c.private = 1 AND m.actor_type = 'users' AND m.actor_id = ?
		ORDER BY m.created_at DESC LIMIT 1`, uid).Scan(&token)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("convlog: private conversation of %s: %w", uid, err)
	}
	return token, true, nil
}

// Wrote reports whether uid wrote in the conversation while the bot was there. Work a
// user schedules may only post where they talk with the bot.
func Wrote(ctx context.Context, db *sql.DB, uid, token string) (bool, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM conversation_messages WHERE token = ? AND actor_type = 'users' AND actor_id = ?`, token, uid).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("convlog: did %s write in %s: %w", uid, token, err)
	}
	return n > 0, nil
}

// Prune deletes token's logged messages older than before (history retention).
func Prune(ctx context.Context, db Execer, token string, before time.Time) (int, error) {
	res, err := db.ExecContext(ctx, `DELETE FROM conversation_messages WHERE token = ? AND created_at < ?`, token, store.FormatTime(before))
	if err != nil {
		return 0, fmt.Errorf("convlog: prune %s: %w", token, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("convlog: prune %s: %w", token, err)
	}
	return int(n), nil
}
