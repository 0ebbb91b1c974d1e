package convlog

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/users"
)

// EditTTL is how long after an agent edited one of the user's configuration files a
// refusal of that file is told in the conversation of the edit rather than in the
// user's private conversation.
const EditTTL = time.Hour

// editKey is the user setting that remembers where file was last edited by the agent.
func editKey(file string) string { return "config_edit:" + file }

type edit struct {
	Token  string `json:"token"`
	TaskID int64  `json:"task_id"`
	At     string `json:"at"`
}

// RecordEdit remembers that the agent, working on taskID in conversation token, changed
// the user's configuration file (CRON.md, HEARTBEAT.md, BRIEFINGS.md, TASKS.md), so that
// the validator's verdict on it is told where the user asked for the change.
func RecordEdit(ctx context.Context, db users.Execer, uid, file, token string, taskID int64, now time.Time) error {
	return users.SetSetting(ctx, db, uid, editKey(file), edit{Token: token, TaskID: taskID, At: store.FormatTime(now)}, now)
}

// NoticeTarget is where a notice about the user's file goes: the conversation in which
// the agent last changed it (within EditTTL; the record is used up, inside tx), else the
// user's private conversation. edited says which; ok is false when there is neither.
func NoticeTarget(ctx context.Context, read *sql.DB, tx users.Execer, uid, file string, now time.Time) (token string, edited, ok bool, err error) {
	var e edit
	found, err := users.Setting(ctx, read, uid, editKey(file), &e)
	if err != nil {
		return "", false, false, fmt.Errorf("convlog: edit of %s by %s: %w", file, uid, err)
	}
	if found {
		if err := users.DeleteSetting(ctx, tx, uid, editKey(file)); err != nil {
			return "", false, false, err
		}
		at, perr := store.ParseTime(e.At)
		if perr == nil && now.Sub(at) <= EditTTL && e.Token != "" {
			return e.Token, true, true, nil
		}
	}
	token, ok, err = PrivateConversation(ctx, read, uid)
	return token, false, ok, err
}

// EditedPrefix starts a notice told in the conversation where the change was asked for.
func EditedPrefix(file string) string {
	return "The change to your " + file + " made here was checked and not (fully) accepted.\n"
}
