package executor

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"unicode"

	"github.com/istota/istota/sidecar/internal/convlog"
	"github.com/istota/istota/sidecar/internal/prompt"
	"github.com/istota/istota/sidecar/internal/queue"
)

// Conversation context: the last ContextMessages messages, but in a long conversation
// a third of them may instead be older messages that bear on the request (a keyword
// score over the last contextWindow messages); the most recent two thirds are always
// kept. The agent's own past answers carry what it did for them.
const (
	contextWindow     = 200
	maxActions        = 8
	maxActionRunes    = 120
	minRelevantLength = 3
)

// conversationContext returns the messages of t's conversation the prompt shows.
func (e *Executor) conversationContext(ctx context.Context, t queue.Task, log *slog.Logger) ([]prompt.Message, error) {
	limit := e.opts.ContextMessages
	if limit <= 0 {
		return nil, nil
	}
	msgs, err := convlog.Recent(ctx, e.db.Read, t.ConversationToken, t.ReplyToMessageID, max(limit, contextWindow))
	if err != nil {
		return nil, err
	}
	picked := narrow(msgs, t.Prompt, limit)
	out := make([]prompt.Message, 0, len(picked))
	for _, p := range picked {
		pm := toPromptMessage(p.msg)
		pm.Earlier = p.earlier
		if p.msg.FromBot && p.msg.ID < 0 {
			// A bot answer is logged under the negated id of the task that wrote it.
			pm.Actions = e.actionsOf(ctx, -p.msg.ID, log)
		}
		out = append(out, pm)
	}
	return out, nil
}

// actionsOf is the compact record of the tool calls of task id.
func (e *Executor) actionsOf(ctx context.Context, id int64, log *slog.Logger) []string {
	evs, err := e.queue.Events(ctx, id)
	if err != nil {
		log.Debug("reading a past task's actions failed", "task_id", id, "err", err)
		return nil
	}
	var out []string
	n := 0
	for _, ev := range evs {
		if ev.Kind != queue.EventTool {
			continue
		}
		n++
		if len(out) < maxActions {
			out = append(out, clipRunes(strings.Join(strings.Fields(ev.Text), " "), maxActionRunes))
		}
	}
	if n > len(out) {
		out = append(out, fmt.Sprintf("and %d more", n-len(out)))
	}
	return out
}

func clipRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// pickedMessage is a message chosen for the prompt; earlier marks one kept for its
// relevance from before the recent ones.
type pickedMessage struct {
	msg     convlog.Message
	earlier bool
}

// narrow chooses at most limit of msgs (oldest first): all when they fit; otherwise the
// newest two thirds, and from the older ones those sharing the most (rarest) words with
// request, in their order.
func narrow(msgs []convlog.Message, request string, limit int) []pickedMessage {
	if len(msgs) <= limit {
		out := make([]pickedMessage, len(msgs))
		for i, m := range msgs {
			out[i] = pickedMessage{msg: m}
		}
		return out
	}
	recent := max(limit-limit/3, 1)
	older, newest := msgs[:len(msgs)-recent], msgs[len(msgs)-recent:]
	var chosen []int
	if slots := limit - recent; slots > 0 {
		chosen = relevant(older, request, slots)
	}
	out := make([]pickedMessage, 0, limit)
	for _, i := range chosen {
		out = append(out, pickedMessage{msg: older[i], earlier: true})
	}
	for _, m := range newest {
		out = append(out, pickedMessage{msg: m})
	}
	return out
}

// relevant returns the indexes (ascending) of up to n messages that share words with
// request, best first by the sum of the words' inverse document frequency; messages
// that share none are never chosen.
func relevant(msgs []convlog.Message, request string, n int) []int {
	terms := words(request)
	if len(terms) == 0 {
		return nil
	}
	docs := make([]map[string]bool, len(msgs))
	df := map[string]int{}
	for i, m := range msgs {
		docs[i] = words(m.Text)
		for w := range docs[i] {
			if terms[w] {
				df[w]++
			}
		}
	}
	type scored struct {
		i     int
		score float64
	}
	var cand []scored
	for i, d := range docs {
		s := 0.0
		for w := range terms {
			if d[w] {
				s += math.Log(1 + float64(len(msgs))/float64(df[w]))
			}
		}
		if s > 0 {
			cand = append(cand, scored{i, s})
		}
	}
	sort.SliceStable(cand, func(a, b int) bool {
		if cand[a].score != cand[b].score {
			return cand[a].score > cand[b].score
		}
		return cand[a].i > cand[b].i // newer first on a tie
	})
	if len(cand) > n {
		cand = cand[:n]
	}
	idx := make([]int, len(cand))
	for k, c := range cand {
		idx[k] = c.i
	}
	sort.Ints(idx)
	return idx
}

// stopWords are frequent words that say nothing about a topic (English and German, the
// languages of the seeds' users).
var stopWords = map[string]bool{
	"the": true, "and": true, "for": true, "you": true, "your": true, "are": true, "was": true, "what": true,
	"that": true, "this": true, "with": true, "have": true, "has": true, "can": true, "not": true, "but": true,
	"all": true, "any": true, "from": true, "about": true, "please": true, "thanks": true, "how": true, "when": true,
	"der": true, "die": true, "das": true, "und": true, "ist": true, "mit": true, "ich": true, "du": true,
	"nicht": true, "ein": true, "eine": true, "bitte": true, "auf": true, "für": true, "wie": true,
}

// words is the set of lower-case words of at least minRelevantLength letters or digits.
func words(s string) map[string]bool {
	out := map[string]bool{}
	for _, f := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if len([]rune(f)) >= minRelevantLength && !stopWords[f] {
			out[f] = true
		}
	}
	return out
}
