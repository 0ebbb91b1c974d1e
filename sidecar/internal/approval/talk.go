package approval

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
)

// markerRE finds the question's number in the text of the bot's message: Talk does not
// tell a bot the id of the message it posted, but a reaction or a reply carries the
// text of the message it refers to.
var markerRE = regexp.MustCompile(`\(approval #(\d+)\)`)

// QuestionText is the one Talk message that asks about r, naming exactly what will
// happen and how to answer.
func QuestionText(r Request, t queue.Task, timeout time.Duration) string {
	var b strings.Builder
	if t.Source != queue.SourceTalk {
		fmt.Fprintf(&b, "🔐 Your %s task #%d waits for your OK (approval #%d). It wants to:\n\n", sourceName(t.Source), t.ID, r.ID)
	} else {
		fmt.Fprintf(&b, "🔐 May I do this? (approval #%d)\n\n", r.ID)
	}
	fmt.Fprintf(&b, "**%s**\n\n", r.Summary)
	fmt.Fprintf(&b, "React with 👍 to allow or 👎 to refuse, or reply yes or no (also on your Istota settings page). Only %s can answer. Without an answer within %s it is not done.",
		r.UserID, roundDuration(timeout))
	return b.String()
}

func sourceName(src string) string {
	switch src {
	case queue.SourceCron:
		return "scheduled"
	case queue.SourceEmail:
		return "e-mail"
	case queue.SourceTasksMD:
		return "TASKS.md"
	case queue.SourceBriefing:
		return "briefing"
	}
	return src
}

// QuestionID finds the question number in the text of a bot message.
func QuestionID(text string) (int64, bool) {
	m := markerRE.FindStringSubmatch(text)
	if m == nil {
		return 0, false
	}
	id, err := strconv.ParseInt(m[1], 10, 64)
	return id, err == nil && id > 0
}

// ParseAnswer reads a yes or no from a chat message; ok is false for anything else.
func ParseAnswer(text string) (approve, ok bool) {
	s := strings.ToLower(strings.TrimSpace(text))
	s = strings.TrimRight(s, ".!👍👎 ")
	if s == "" {
		// Only an emoji (or punctuation).
		t := strings.TrimSpace(text)
		switch {
		case strings.HasPrefix(t, "👍"):
			return true, true
		case strings.HasPrefix(t, "👎"):
			return false, true
		}
		return false, false
	}
	switch s {
	case "yes", "y", "yes please", "yep", "ok", "okay", "sure", "go ahead", "do it", "approve", "approved", "allow", "ja", "oui", "sí", "si":
		return true, true
	case "no", "n", "nope", "no thanks", "don't", "dont", "do not", "deny", "denied", "refuse", "cancel", "nein", "non":
		return false, true
	}
	return false, false
}

// ParseReaction reads 👍 or 👎 (any skin tone) as a yes or no.
func ParseReaction(emoji string) (approve, ok bool) {
	base := strings.TrimRight(emoji, "\U0001F3FB\U0001F3FC\U0001F3FD\U0001F3FE\U0001F3FF\uFE0F")
	switch base {
	case "👍":
		return true, true
	case "👎":
		return false, true
	}
	return false, false
}

// TalkAnswer is a chat message or reaction that may answer a question.
type TalkAnswer struct {
	Token  string
	UserID string
	// Reaction is the emoji of a reaction; empty for a message.
	Reaction string
	// Text is the message (for a message).
	Text string
	// Quoted is the text of the message reacted to or replied to ("" when none).
	Quoted string
}

// Match is what a TalkAnswer means.
type Match struct {
	// Handled: the message or reaction concerned a question and is no request of its own.
	Handled bool
	// RequestID and Approve: the answer to give with Decide (RequestID 0: none).
	RequestID int64
	Approve   bool
	Via       string
	// Notice is what to tell the sender instead ("" when nothing).
	Notice string
}

// MatchTx finds which question a's sender answers, reading with tx (the caller's
// transaction that also logs the message). The decision itself is made with Decide
// after the transaction commits.
func (s *Service) MatchTx(ctx context.Context, tx *sql.Tx, a TalkAnswer) (Match, error) {
	var approve, ok bool
	via := ViaTalkReply
	if a.Reaction != "" {
		approve, ok = ParseReaction(a.Reaction)
		via = ViaTalkReaction
	} else {
		approve, ok = ParseAnswer(a.Text)
	}
	id, quoted := QuestionID(a.Quoted)
	if !ok {
		return Match{}, nil
	}
	var cands []Request
	if quoted {
		r, err := scan(tx.QueryRowContext(ctx, `SELECT `+columns+` FROM approvals WHERE id = ? AND ask_token = ?`, id, a.Token))
		if errors.Is(err, store.ErrNotFound) {
			return Match{}, nil
		}
		if err != nil {
			return Match{}, err
		}
		cands = []Request{r}
	} else {
		if a.Reaction != "" {
			return Match{}, nil // a reaction to something else
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+columns+` FROM approvals
			WHERE ask_token = ? AND user_id = ? AND status = 'pending' AND expires_at > ? ORDER BY id`,
			a.Token, a.UserID, store.FormatTime(s.opts.Clock()))
		if err != nil {
			return Match{}, fmt.Errorf("approval: match: %w", err)
		}
		for rows.Next() {
			r, err := scan(rows)
			if err != nil {
				rows.Close()
				return Match{}, err
			}
			cands = append(cands, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return Match{}, fmt.Errorf("approval: match: %w", err)
		}
		switch len(cands) {
		case 0:
			return Match{}, nil
		case 1:
		default:
			return Match{Handled: true, Notice: "Several questions are waiting for you here: reply to the one you mean, or react to it with 👍 or 👎."}, nil
		}
	}
	r := cands[0]
	switch {
	case r.UserID != a.UserID:
		return Match{Handled: true, Notice: fmt.Sprintf("Only %s can answer approval #%d; your answer was ignored.", r.UserID, r.ID)}, nil
	case r.Status != Pending:
		return Match{Handled: true, Notice: fmt.Sprintf("Approval #%d is already %s.", r.ID, r.Status)}, nil
	case !s.opts.Clock().Before(r.ExpiresAt):
		return Match{Handled: true, Notice: fmt.Sprintf("Approval #%d has expired: it was not done.", r.ID)}, nil
	}
	return Match{Handled: true, RequestID: r.ID, Approve: approve, Via: via}, nil
}
