// Package talktest is a fake of Nextcloud Talk's bot OCS API for tests. It checks what
// Talk 21 checks, in the same order and with the same status codes (reference
// talk-bots.md §5, §6, §10.3, §10.4, §12, and spreed's BotController): the
// OCS-APIRequest header, brute-force throttling after repeated 401s, the random and
// signature headers, bots enabled per conversation, the reply target, and the 32000
// character limit. It records what was accepted and counts every status it answered,
// and it can simulate outages.
package talktest

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// Bot feature bits (reference §1).
const (
	FeatureWebhook  = 1
	FeatureResponse = 2
	FeatureEvent    = 4
	FeatureReaction = 8
)

// MaxChatLength is ChatManager::MAX_CHAT_LENGTH, counted with mb_strlen.
const MaxChatLength = 32000

// DefaultBruteForceLimit is how many 401s the fake accepts before it answers 429 to
// every bot request, like Nextcloud's throttler reaching its maximum delay.
const DefaultBruteForceLimit = 10

const apiPrefix = "/ocs/v2.php/apps/spreed/api/v1/bot/"

var (
	messageRoute  = regexp.MustCompile(`^([a-z0-9]{4,30})/message$`)
	reactionRoute = regexp.MustCompile(`^([a-z0-9]{4,30})/reaction/([0-9]+)$`)
)

// Posted is a message the fake accepted from a bot.
type Posted struct {
	ID          int64 // the id Talk gave the new message
	BotID       int
	Token       string
	Message     string
	ReplyTo     int64
	ReferenceID string // as Talk stores it: trimmed, at most 64 characters
	Silent      bool
	Header      http.Header
}

// Reaction is a bot reaction currently on a message.
type Reaction struct {
	BotID     int
	Token     string
	MessageID int64
	Emoji     string
}

// Bot is a bot installed in the fake. Configure it before requests are made, or at any
// time: the fake locks around every change.
type Bot struct {
	s        *Server
	id       int
	secret   string
	features int
	state    int
	enabled  map[string]bool
}

type chatMessage struct {
	id      int64
	actorID string
	text    string
}

// Server is the fake Talk. Its zero value is not usable; call New.
type Server struct {
	// URL is the base URL to hand to talk.NewClient, e.g. "http://127.0.0.1:41234".
	URL string

	srv *httptest.Server

	mu              sync.Mutex
	bots            []*Bot
	rooms           map[string]map[int64]chatMessage
	lastID          int64
	posted          []Posted
	reactions       []Reaction
	counts          map[int]int
	requests        int
	failNext        []int
	down            bool
	downStatus      int
	authFailures    int
	bruteForceLimit int
	changed         chan struct{}
}

// New starts a fake Talk on 127.0.0.1 and stops it when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("talktest: listen: %v", err)
	}
	s := &Server{
		rooms:           map[string]map[int64]chatMessage{},
		counts:          map[int]int{},
		bruteForceLimit: DefaultBruteForceLimit,
		changed:         make(chan struct{}),
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serveHTTP))
	s.srv.Listener.Close()
	s.srv.Listener = ln
	s.srv.Start()
	s.URL = s.srv.URL
	t.Cleanup(s.Close)
	return s
}

// Close stops the server. It is called automatically at the end of the test.
func (s *Server) Close() { s.srv.Close() }

// AddBot installs a bot with features response|event|reaction (an app bot able to answer
// later, as Istota installs itself) and server state enabled. Enable it per conversation
// with EnableIn.
func (s *Server) AddBot(secret string) *Bot {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := &Bot{s: s, id: len(s.bots) + 1, secret: secret, features: FeatureResponse | FeatureEvent | FeatureReaction, state: 1, enabled: map[string]bool{}}
	s.bots = append(s.bots, b)
	return b
}

// ID is the bot's id in the fake.
func (b *Bot) ID() int { return b.id }

// EnableIn enables the bot in the conversations (talk:bot:setup).
func (b *Bot) EnableIn(tokens ...string) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	for _, t := range tokens {
		b.enabled[t] = true
	}
}

// DisableIn disables the bot in the conversations (talk:bot:remove).
func (b *Bot) DisableIn(tokens ...string) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	for _, t := range tokens {
		delete(b.enabled, t)
	}
}

// SetFeatures replaces the bot's feature bits (talk:bot:state -f).
func (b *Bot) SetFeatures(features int) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	b.features = features
}

// SetState sets the server-level state: 0 disabled, 1 enabled, 2 no-setup.
func (b *Bot) SetState(state int) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	b.state = state
}

// AddUserMessage records a message a user posted in conversation token, so that bots
// can reply and react to it. Ids should grow like Talk's; bot messages get ids above
// the highest one seen.
func (s *Server) AddUserMessage(token string, id int64, actorID, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addMessageLocked(token, chatMessage{id: id, actorID: actorID, text: text})
}

func (s *Server) addMessageLocked(token string, m chatMessage) {
	room := s.rooms[token]
	if room == nil {
		room = map[int64]chatMessage{}
		s.rooms[token] = room
	}
	room[m.id] = m
	s.lastID = max(s.lastID, m.id)
}

// FailNext makes the next n requests fail with status before any check, as a reverse
// proxy or a broken Nextcloud would. Status 0 closes the connection without an answer.
func (s *Server) FailNext(status, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failNext = append(s.failNext, status)
	}
}

// SetDown answers every request with status (0: closes the connection) until SetUp.
func (s *Server) SetDown(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down, s.downStatus = true, status
}

// SetUp ends an outage started with SetDown.
func (s *Server) SetUp() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = false
}

// SetBruteForceLimit sets how many 401s turn every later bot request into a 429.
func (s *Server) SetBruteForceLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bruteForceLimit = n
}

// ResetBruteForce forgets earlier 401s (occ security:bruteforce:reset).
func (s *Server) ResetBruteForce() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.authFailures = 0
}

// Messages returns the accepted bot messages in the order they were posted.
func (s *Server) Messages() []Posted {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.posted)
}

// Reactions returns the bot reactions currently present, in the order they were added.
func (s *Server) Reactions() []Reaction {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reactions)
}

// WaitMessages waits until at least n bot messages were accepted and returns all of them.
func (s *Server) WaitMessages(ctx context.Context, n int) ([]Posted, error) {
	for {
		s.mu.Lock()
		if len(s.posted) >= n {
			out := slices.Clone(s.posted)
			s.mu.Unlock()
			return out, nil
		}
		ch, got := s.changed, len(s.posted)
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("talktest: %d of %d messages arrived: %w", got, n, ctx.Err())
		case <-ch:
		}
	}
}

// WaitStatus waits until the fake has answered status at least n times.
func (s *Server) WaitStatus(ctx context.Context, status, n int) error {
	for {
		s.mu.Lock()
		got, ch := s.counts[status], s.changed
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("talktest: status %d answered %d of %d times: %w", status, got, n, ctx.Err())
		case <-ch:
		}
	}
}

// Count returns how many times the fake answered status (0: connections it dropped).
func (s *Server) Count(status int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[status]
}

// Counts returns every status answered and how often.
func (s *Server) Counts() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.counts)
}

// Requests returns how many requests reached the fake.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// notifyLocked wakes waiters; callers hold s.mu.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// reply is one answer: an OCS status and whether to drop the connection instead.
type reply struct {
	status int
	body   any // OCS data; nil renders as null
	msg    string
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/status.php" && r.Method == http.MethodGet {
		// Nextcloud's own unauthenticated status endpoint, which `istota doctor` reads.
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"installed":true,"maintenance":false,"needsDbUpgrade":false,"version":"31.0.2.1","versionstring":"31.0.2","edition":"","productname":"Nextcloud","extendedSupport":false}`)
		return
	}
	s.mu.Lock()
	s.requests++
	rep, drop := s.handleLocked(r)
	if drop {
		s.counts[0]++
	} else {
		s.counts[rep.status]++
	}
	s.notifyLocked()
	s.mu.Unlock()

	if drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // closes the connection without an answer
	}
	writeOCS(w, r, rep)
}

// handleLocked decides the answer; callers hold s.mu.
func (s *Server) handleLocked(r *http.Request) (reply, bool) {
	if len(s.failNext) > 0 {
		st := s.failNext[0]
		s.failNext = s.failNext[1:]
		return reply{status: st}, st == 0
	}
	if s.down {
		return reply{status: s.downStatus}, s.downStatus == 0
	}

	rest, ok := strings.CutPrefix(r.URL.Path, apiPrefix)
	if !ok {
		return reply{status: http.StatusNotFound}, false
	}
	var token string
	var messageID int64
	isMessage := false
	switch {
	case r.Method == http.MethodPost && messageRoute.MatchString(rest):
		token, isMessage = messageRoute.FindStringSubmatch(rest)[1], true
	case (r.Method == http.MethodPost || r.Method == http.MethodDelete) && reactionRoute.MatchString(rest):
		m := reactionRoute.FindStringSubmatch(rest)
		token = m[1]
		id, err := strconv.ParseInt(m[2], 10, 64)
		if err != nil {
			return reply{status: http.StatusNotFound}, false
		}
		messageID = id
	default:
		return reply{status: http.StatusNotFound}, false
	}

	// Middleware order in Nextcloud: CSRF (OCS requests pass it with OCS-APIRequest),
	// then brute-force throttling, then the controller.
	if r.Header.Get("OCS-APIRequest") != "true" {
		return reply{status: http.StatusPreconditionFailed, msg: "CSRF check failed"}, false
	}
	if s.bruteForceLimit > 0 && s.authFailures >= s.bruteForceLimit {
		return reply{status: http.StatusTooManyRequests, msg: "Reached maximum delay"}, false
	}
	params, err := requestParams(r)
	if err != nil {
		return reply{status: http.StatusBadRequest}, false
	}
	if isMessage {
		return s.sendMessageLocked(r, token, params), false
	}
	return s.reactLocked(r, token, messageID, params), false
}

// sendMessageLocked follows BotController::sendMessage.
func (s *Server) sendMessageLocked(r *http.Request, token string, p params) reply {
	message, ok := p.str("message")
	if !ok || phpTrim(message) == "" {
		return reply{status: http.StatusBadRequest}
	}
	bot, st := s.botFromHeadersLocked(r, token, message)
	if bot == nil {
		return reply{status: st}
	}
	replyTo, ok := p.int("replyTo")
	if !ok {
		return reply{status: http.StatusBadRequest}
	}
	if replyTo != 0 {
		if _, found := s.rooms[token][replyTo]; !found {
			return reply{status: http.StatusBadRequest}
		}
	}
	silent, ok := p.bool("silent")
	if !ok {
		return reply{status: http.StatusBadRequest}
	}
	refID, _ := p.str("referenceId")
	// Comment::setMessage trims before it checks the length with mb_strlen.
	stored := phpTrim(message)
	if utf8.RuneCountInString(stored) > MaxChatLength {
		return reply{status: http.StatusRequestEntityTooLarge}
	}
	refID = strings.TrimSpace(refID)
	if utf8.RuneCountInString(refID) > 64 {
		refID = string([]rune(refID)[:64])
	}
	id := s.lastID + 1
	s.addMessageLocked(token, chatMessage{id: id, actorID: "bots/bot-" + bot.urlHash(), text: stored})
	s.posted = append(s.posted, Posted{
		ID: id, BotID: bot.id, Token: token, Message: stored, ReplyTo: replyTo,
		ReferenceID: refID, Silent: silent, Header: r.Header.Clone(),
	})
	return reply{status: http.StatusCreated}
}

// reactLocked follows BotController::react and ::deleteReaction.
func (s *Server) reactLocked(r *http.Request, token string, messageID int64, p params) reply {
	emoji, ok := p.str("reaction")
	if !ok {
		return reply{status: http.StatusBadRequest}
	}
	bot, st := s.botFromHeadersLocked(r, token, emoji)
	if bot == nil {
		return reply{status: st}
	}
	_, found := s.rooms[token][messageID]
	idx := slices.IndexFunc(s.reactions, func(x Reaction) bool {
		return x.BotID == bot.id && x.Token == token && x.MessageID == messageID && x.Emoji == emoji
	})
	if r.Method == http.MethodDelete {
		if !found || idx < 0 {
			return reply{status: http.StatusNotFound}
		}
		s.reactions = slices.Delete(s.reactions, idx, idx+1)
		return reply{status: http.StatusOK}
	}
	if !found {
		return reply{status: http.StatusNotFound}
	}
	if strings.TrimSpace(emoji) == "" {
		return reply{status: http.StatusBadRequest}
	}
	if idx >= 0 {
		return reply{status: http.StatusOK}
	}
	s.reactions = append(s.reactions, Reaction{BotID: bot.id, Token: token, MessageID: messageID, Emoji: emoji})
	return reply{status: http.StatusCreated}
}

// botFromHeadersLocked follows BotController::getBotFromHeaders: 400 for a missing or
// short random or a missing signature, 401 (counted for brute-force protection) when
// no bot enabled in token with the response feature has a matching secret.
func (s *Server) botFromHeadersLocked(r *http.Request, token, signed string) (*Bot, int) {
	random := r.Header.Get("X-Nextcloud-Talk-Bot-Random")
	if len(random) < 32 {
		return nil, http.StatusBadRequest
	}
	signature := r.Header.Get("X-Nextcloud-Talk-Bot-Signature")
	if signature == "" {
		return nil, http.StatusBadRequest
	}
	for _, b := range s.bots {
		if b.state == 0 || !b.enabled[token] || b.features&FeatureResponse == 0 || b.secret == "" {
			continue
		}
		mac := hmac.New(sha256.New, []byte(b.secret))
		mac.Write([]byte(random + signed))
		if hmac.Equal([]byte(hex.EncodeToString(mac.Sum(nil))), []byte(strings.ToLower(signature))) {
			return b, 0
		}
	}
	s.authFailures++
	return nil, http.StatusUnauthorized
}

// urlHash stands in for sha1(bot url), which names the bot's actor in chat.
func (b *Bot) urlHash() string {
	sum := sha1.Sum([]byte(fmt.Sprintf("nextcloudapp://talktest/%d", b.id)))
	return hex.EncodeToString(sum[:])
}

// params are request parameters merged the way Nextcloud's Request does: query first,
// then the JSON or form body.
type params map[string]any

func requestParams(r *http.Request) (params, error) {
	p := params{}
	for k, v := range r.URL.Query() {
		if len(v) > 0 {
			p[k] = v[0]
		}
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		// Like Request::decodeContent: a body that is not a JSON object is ignored.
		var body map[string]any
		dec := json.NewDecoder(r.Body)
		dec.UseNumber()
		if err := dec.Decode(&body); err == nil {
			for k, v := range body {
				p[k] = v
			}
		}
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return nil, err
		}
		for k, v := range r.PostForm {
			if len(v) > 0 {
				p[k] = v[0]
			}
		}
	}
	return p, nil
}

// str reads a string parameter; PHP's string type juggling accepts numbers.
func (p params) str(key string) (string, bool) {
	switch v := p[key].(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	default:
		return "", false
	}
}

// int reads an int parameter with a default of 0; a non-numeric value is a 400.
func (p params) int(key string) (int64, bool) {
	switch v := p[key].(type) {
	case nil:
		return 0, true
	case json.Number:
		n, err := v.Int64()
		return n, err == nil
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	default:
		return 0, false
	}
}

// bool reads a bool parameter with a default of false.
func (p params) bool(key string) (bool, bool) {
	switch v := p[key].(type) {
	case nil:
		return false, true
	case bool:
		return v, true
	case string:
		switch v {
		case "1", "true":
			return true, true
		case "", "0", "false":
			return false, true
		}
	case json.Number:
		return v.String() != "0", true
	}
	return false, false
}

// phpTrim is PHP's trim() with its default character list.
func phpTrim(s string) string { return strings.Trim(s, " \t\n\r\x00\x0B") }

// OCS v2 envelope, in Nextcloud's field order.
type ocsEnvelope struct {
	OCS ocsBody `json:"ocs"`
}

type ocsBody struct {
	Meta ocsMeta `json:"meta"`
	Data any     `json:"data"`
}

type ocsMeta struct {
	Status     string `json:"status"`
	StatusCode int    `json:"statuscode"`
	Message    string `json:"message"`
}

// writeOCS renders an OCS v2 answer: JSON when the client accepts it (or asks with
// format=json), XML otherwise, as Nextcloud does.
func writeOCS(w http.ResponseWriter, r *http.Request, rep reply) {
	status := "ok"
	msg := "OK"
	if rep.status >= 300 {
		status, msg = "failure", rep.msg
	}
	wantJSON := strings.Contains(r.Header.Get("Accept"), "application/json") || r.URL.Query().Get("format") == "json"
	if wantJSON {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(rep.status)
		_ = json.NewEncoder(w).Encode(ocsEnvelope{OCS: ocsBody{
			Meta: ocsMeta{Status: status, StatusCode: rep.status, Message: msg},
			Data: rep.body,
		}})
		return
	}
	w.Header().Set("Content-Type", "text/xml; charset=UTF-8")
	w.WriteHeader(rep.status)
	fmt.Fprintf(w, "<?xml version=\"1.0\"?>\n<ocs>\n <meta>\n  <status>%s</status>\n  <statuscode>%d</statuscode>\n  <message>%s</message>\n </meta>\n <data/>\n</ocs>\n",
		status, rep.status, xmlEscape(msg))
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
