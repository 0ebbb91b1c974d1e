package outbox

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/store"
	"github.com/istota/istota/sidecar/internal/store/storetest"
	"github.com/istota/istota/sidecar/internal/talk"
	"github.com/istota/istota/sidecar/internal/talk/talktest"
)

const (
	secret = "outbox-test-secret-outbox-test-secret-0123456789"
	tokA   = "roomaaaa"
	tokB   = "roombbbb"
)

// waitLimit bounds every wait for the loop; it is never a pass/fail timing figure.
const waitLimit = 60 * time.Second

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// logBuffer collects log output; the loop writes while tests read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

type env struct {
	t      *testing.T
	talk   *talktest.Server
	bot    *talktest.Bot
	client *talk.Client
	dbPath string
	db     *store.DB
	clock  *fakeClock
	logs   *logBuffer
	opts   Options
	ob     *Outbox
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, talk: talktest.New(t), clock: &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}, logs: &logBuffer{}}
	e.bot = e.talk.AddBot(secret)
	e.bot.EnableIn(tokA, tokB)
	e.talk.AddUserMessage(tokA, 100, "users/alice", "question in A")
	e.talk.AddUserMessage(tokB, 200, "users/bob", "question in B")
	e.client = talk.NewClient(e.talk.URL, []byte(secret), nil)
	e.dbPath = filepath.Join(t.TempDir(), "istota.db")
	e.opts = Options{
		Clock:  e.clock.Now,
		Logger: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		// Frequent polling makes the loop tests independent of when a Wake lands;
		// backoff is measured on the fake clock, so polling never hurries a retry.
		PollInterval: 20 * time.Millisecond,
	}
	e.open()
	return e
}

// open opens the database and a new Outbox on it, as a restarted sidecar would.
func (e *env) open() {
	e.t.Helper()
	db := dbs.Open(e.t, e.dbPath)
	e.db = db
	e.ob = New(db, e.client, e.opts)
	e.t.Cleanup(func() { e.ob.Close(context.Background()) })
}

func (e *env) enqueue(m Message) {
	e.t.Helper()
	if err := e.ob.Enqueue(context.Background(), m); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) deliver() int {
	e.t.Helper()
	n, err := e.ob.DeliverDue(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) entries(token string) []Entry {
	e.t.Helper()
	list, err := e.ob.List(context.Background(), token)
	if err != nil {
		e.t.Fatal(err)
	}
	return list
}

func (e *env) waitMessages(n int) []talktest.Posted {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	got, err := e.talk.WaitMessages(ctx, n)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

func (e *env) waitStatus(status, n int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := e.talk.WaitStatus(ctx, status, n); err != nil {
		e.t.Fatal(err)
	}
}

// waitEntry waits until the loop has recorded what cond looks for.
func (e *env) waitEntry(token string, cond func([]Entry) bool) []Entry {
	e.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		list := e.entries(token)
		if cond(list) {
			return list
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("condition not reached; rows: %+v", list)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func texts(ps []talktest.Posted) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Token + ":" + p.Message
	}
	return out
}

// dbs opens the tests' databases: SQLite files, or PostgreSQL in the run TestOnPostgres starts.
var dbs storetest.DBs

func TestMain(m *testing.M) { os.Exit(storetest.Main(m, &dbs)) }

// TestOnPostgres runs every test of this package again on a real PostgreSQL.
func TestOnPostgres(t *testing.T) { storetest.RunOnPostgres(t) }

// An outbox that is not Active (another process leads) sends nothing, and sends what
// waited once it is.
func TestInactiveOutboxSendsNothing(t *testing.T) {
	e := newEnv(t)
	var active atomic.Bool
	e.opts.Active = active.Load
	e.open()
	e.enqueue(Message{Token: tokA, Text: "held", Key: "task:9:reply"})
	if n := e.deliver(); n != 0 || len(e.talk.Messages()) != 0 {
		t.Fatalf("an inactive outbox delivered %d", n)
	}
	active.Store(true)
	if n := e.deliver(); n != 1 || len(e.talk.Messages()) != 1 {
		t.Fatalf("the active outbox delivered %d", n)
	}
}

func TestDeliveredSignedWithReplyTo(t *testing.T) {
	e := newEnv(t)
	e.enqueue(Message{Token: tokA, Text: "The answer is 42.", ReplyTo: 100, Key: "task:1:reply"})
	e.enqueue(Message{Token: tokA, Text: "Still working…", Kind: KindProgress, Key: "task:2:progress:1"})
	if n := e.deliver(); n != 2 {
		t.Fatalf("delivered %d, want 2", n)
	}
	msgs := e.talk.Messages()
	if len(msgs) != 2 {
		t.Fatalf("%d messages", len(msgs))
	}
	m := msgs[0]
	if m.Message != "The answer is 42." || m.ReplyTo != 100 || m.Silent || m.ReferenceID != ReferenceID("task:1:reply", 0) {
		t.Fatalf("posted %+v", m)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(m.Header.Get(talk.HeaderBotRandom) + m.Message))
	if m.Header.Get(talk.HeaderBotSignature) != hex.EncodeToString(mac.Sum(nil)) {
		t.Fatal("signature does not match HMAC(secret, random + message)")
	}
	if !msgs[1].Silent || msgs[1].ReplyTo != 0 {
		t.Fatalf("progress message should be silent without reply target: %+v", msgs[1])
	}
	rows := e.entries(tokA)
	for _, r := range rows {
		if r.Status != StatusSent || r.Attempts != 1 || !r.SentAt.Equal(e.clock.Now()) || r.LastError != "" {
			t.Fatalf("row %+v", r)
		}
	}
	if p, _ := e.ob.Pending(context.Background()); p != 0 {
		t.Fatalf("pending %d", p)
	}
	if n := e.deliver(); n != 0 || len(e.talk.Messages()) != 2 {
		t.Fatal("a delivered row was sent again")
	}
}

func TestEnqueueIsIdempotentAndValidated(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.enqueue(Message{Token: tokA, Text: "first", Key: "task:7:reply", TaskID: 0})
	e.enqueue(Message{Token: tokA, Text: "first", Key: "task:7:reply"})
	e.enqueue(Message{Token: tokA, Text: "changed text, same key", Key: "task:7:reply"})
	if rows := e.entries(tokA); len(rows) != 1 || rows[0].Text != "first" || rows[0].Kind != KindReply {
		t.Fatalf("rows %+v", rows)
	}
	bad := []struct {
		name string
		m    Message
	}{
		{"no key", Message{Token: tokA, Text: "x"}},
		{"bad token", Message{Token: "Not A Token", Text: "x", Key: "k1"}},
		{"empty text", Message{Token: tokA, Text: " \n", Key: "k2"}},
		{"unknown kind", Message{Token: tokA, Text: "x", Key: "k3", Kind: "shout"}},
		{"negative reply", Message{Token: tokA, Text: "x", Key: "k4", ReplyTo: -1}},
		{"unknown task", Message{Token: tokA, Text: "x", Key: "k5", TaskID: 999}},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			if err := e.ob.Enqueue(ctx, c.m); err == nil {
				t.Fatal("no error")
			}
		})
	}
	if rows := e.entries(tokA); len(rows) != 1 {
		t.Fatalf("invalid messages were stored: %+v", rows)
	}
}

func TestEnqueueTxCommitsWithTheTask(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	now := store.FormatTime(e.clock.Now())
	completeTask := func(commit bool) int64 {
		tx, err := e.db.Write.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		var id int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO tasks (user_id, source, status, prompt, conversation_token, next_attempt_at, created_at)
			VALUES ('alice', 'talk', 'completed', 'q', ?, ?, ?) RETURNING id`, tokA, now, now).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if err := e.ob.EnqueueTx(ctx, tx, Message{Token: tokA, Text: "answer", ReplyTo: 100, TaskID: id, Key: fmt.Sprintf("task:%d:reply", id)}); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		return id
	}
	completeTask(false)
	if rows := e.entries(tokA); len(rows) != 0 {
		t.Fatalf("rolled back reply is queued: %+v", rows)
	}
	id := completeTask(true)
	rows := e.entries(tokA)
	if len(rows) != 1 || rows[0].TaskID != id || rows[0].Status != StatusPending {
		t.Fatalf("rows %+v", rows)
	}
	e.deliver()
	if m := e.talk.Messages(); len(m) != 1 || m[0].Message != "answer" {
		t.Fatalf("messages %+v", m)
	}
}

func TestLongMessageSplitAndDeliveredInOrder(t *testing.T) {
	e := newEnv(t)
	para := strings.Repeat("Ein längerer Absatz mit Ümlauten und Wörtern. ", 50) // 2350 runes
	text := strings.TrimSpace(strings.Repeat(para+"\n\n", 30))                   // ~70 000 runes
	e.enqueue(Message{Token: tokA, Text: text, ReplyTo: 100, Key: "task:3:reply"})
	rows := e.entries(tokA)
	if len(rows) != 3 {
		t.Fatalf("%d parts, want 3", len(rows))
	}
	for i, r := range rows {
		if r.ReferenceID != ReferenceID("task:3:reply", i) || len(r.ReferenceID) != 64 {
			t.Fatalf("part %d reference id %q", i, r.ReferenceID)
		}
		if (r.ReplyTo == 100) != (i == 0) {
			t.Fatalf("part %d reply_to %d", i, r.ReplyTo)
		}
	}
	e.ob.Start(context.Background())
	msgs := e.waitMessages(3)
	for i, m := range msgs {
		if n := utf8.RuneCountInString(m.Message); n > talk.MaxMessageLength {
			t.Fatalf("part %d has %d characters", i+1, n)
		}
		if !strings.HasSuffix(m.Message, fmt.Sprintf("(%d/3)", i+1)) {
			t.Fatalf("part %d out of order or unmarked: …%s", i+1, m.Message[len(m.Message)-20:])
		}
		if (m.ReplyTo == 100) != (i == 0) {
			t.Fatalf("part %d replyTo %d", i+1, m.ReplyTo)
		}
	}
	if got := strings.Join(strings.Fields(strings.Join(stripMarkers(msgs), " ")), " "); got != strings.Join(strings.Fields(text), " ") {
		t.Fatal("reassembled parts differ from the text")
	}
}

func stripMarkers(ps []talktest.Posted) []string {
	var out []string
	for i, p := range ps {
		out = append(out, strings.TrimSuffix(p.Message, fmt.Sprintf("\n\n(%d/%d)", i+1, len(ps))))
	}
	return out
}

func TestOutageThenRecoveryDeliversEverythingOnceInOrder(t *testing.T) {
	e := newEnv(t)
	e.talk.SetDown(503)
	e.ob.Start(context.Background())
	var want []string
	for i := range 5 {
		tok := []string{tokA, tokB}[i%2]
		text := fmt.Sprintf("message %d", i)
		e.enqueue(Message{Token: tok, Text: text, Key: fmt.Sprintf("k%d", i)})
		want = append(want, tok+":"+text)
	}
	// Both conversations' first rows meet the outage and back off.
	for _, tok := range []string{tokA, tokB} {
		e.waitEntry(tok, func(l []Entry) bool { return l[0].Attempts >= 1 })
	}
	if len(e.talk.Messages()) != 0 {
		t.Fatal("messages arrived during the outage")
	}
	// Retries follow the fake clock: a few more passes while down, then recovery.
	for range 3 {
		e.clock.Advance(DefaultMaxBackoff)
		e.ob.Wake()
		e.deliver()
	}
	if e.talk.Count(503) < 2 {
		t.Fatalf("expected repeated attempts during the outage, counts %v", e.talk.Counts())
	}
	e.talk.SetUp()
	e.clock.Advance(DefaultMaxBackoff)
	e.ob.Wake()
	msgs := e.waitMessages(5)

	// Later passes send nothing again.
	e.clock.Advance(time.Hour)
	if n := e.deliver(); n != 0 {
		t.Fatalf("sent %d again", n)
	}
	msgs = e.talk.Messages()
	if len(msgs) != 5 {
		t.Fatalf("%d messages, want exactly 5: %q", len(msgs), texts(msgs))
	}
	// Order holds within each conversation.
	for _, tok := range []string{tokA, tokB} {
		var got, exp []string
		for _, m := range texts(msgs) {
			if strings.HasPrefix(m, tok) {
				got = append(got, m)
			}
		}
		for _, m := range want {
			if strings.HasPrefix(m, tok) {
				exp = append(exp, m)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(exp) {
			t.Fatalf("%s: got %q, want %q", tok, got, exp)
		}
	}
	if p, _ := e.ob.Pending(context.Background()); p != 0 {
		t.Fatalf("pending %d", p)
	}
}

func TestBackoffDoublesOnTheClockAndIsCapped(t *testing.T) {
	e := newEnv(t)
	e.talk.SetDown(0) // connections dropped: a network error
	e.enqueue(Message{Token: tokA, Text: "hello", Key: "k"})
	var waits []time.Duration
	for range 10 {
		before := e.talk.Requests()
		e.deliver()
		if e.talk.Requests() != before+1 {
			t.Fatalf("attempt not made when due")
		}
		r := e.entries(tokA)[0]
		wait := r.NextAttemptAt.Sub(e.clock.Now())
		waits = append(waits, wait)
		// Not due yet: a pass makes no request.
		e.clock.Advance(wait - time.Millisecond)
		e.deliver()
		if e.talk.Requests() != before+1 {
			t.Fatalf("retried before the backoff ended")
		}
		e.clock.Advance(time.Millisecond)
	}
	want := []time.Duration{2, 4, 8, 16, 32, 64, 128, 256, 300, 300}
	for i := range want {
		want[i] *= time.Second
	}
	if fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	if r := e.entries(tokA)[0]; r.Status != StatusPending || r.Attempts != 10 || r.LastError == "" {
		t.Fatalf("row %+v", r)
	}
	e.talk.SetUp()
	e.deliver()
	if len(e.talk.Messages()) != 1 {
		t.Fatal("not delivered after the outage")
	}
}

func TestUnauthorizedIsHeldNotHammered(t *testing.T) {
	e := newEnv(t)
	e.bot.DisableIn(tokB) // the bot was removed from conversation B
	e.ob.Start(context.Background())
	e.enqueue(Message{Token: tokB, Text: "for B", Key: "b1"})
	e.waitStatus(401, 1)
	e.waitEntry(tokB, func(l []Entry) bool { return l[0].Attempts == 1 })

	// Wake-ups and passes while held make no request.
	for range 5 {
		e.ob.Wake()
		e.deliver()
	}
	if n := e.talk.Count(401); n != 1 {
		t.Fatalf("%d 401s while held, want 1", n)
	}
	// Conversation A is not affected.
	e.enqueue(Message{Token: tokA, Text: "for A", Key: "a1"})
	if m := e.waitMessages(1); m[0].Token != tokA {
		t.Fatalf("got %+v", m)
	}

	// The loop keeps polling; with the fake clock only AuthRetryAfter releases the row.
	for attempt := 2; attempt <= DefaultMaxAuthAttempts; attempt++ {
		e.clock.Advance(DefaultAuthRetryAfter - time.Second)
		e.deliver()
		if n := e.talk.Count(401); n != attempt-1 {
			t.Fatalf("retried before the hold ended: %d 401s", n)
		}
		e.clock.Advance(time.Second)
		e.ob.Wake()
		e.waitStatus(401, attempt)
		// The hold is computed from the clock read after the answer: let it be recorded
		// before the test moves the clock again.
		e.waitEntry(tokB, func(l []Entry) bool { return l[0].Attempts == attempt })
	}
	rows := e.waitEntry(tokB, func(l []Entry) bool { return l[0].Status == StatusFailed })
	if !strings.Contains(rows[0].LastError, "not enabled in conversation "+tokB) {
		t.Fatalf("last error %q", rows[0].LastError)
	}
	// Failed for good: no more attempts, ever.
	e.clock.Advance(24 * time.Hour)
	for range 3 {
		e.ob.Wake()
		e.deliver()
	}
	if n := e.talk.Count(401); n != DefaultMaxAuthAttempts {
		t.Fatalf("%d 401s, want %d", n, DefaultMaxAuthAttempts)
	}
	failed, err := e.ob.Failed(context.Background())
	if err != nil || len(failed) != 1 || failed[0].Token != tokB {
		t.Fatalf("failed %+v, %v", failed, err)
	}
	logs := e.logs.String()
	if got := strings.Count(logs, "level=ERROR"); got != DefaultMaxAuthAttempts {
		t.Fatalf("%d error logs, want one per 401:\n%s", got, logs)
	}
	if !strings.Contains(logs, "bot not enabled in the conversation or wrong bot secret") || !strings.Contains(logs, "giving up") {
		t.Fatalf("logs lack the reason:\n%s", logs)
	}
	if strings.Contains(logs, secret) {
		t.Fatal("secret in logs")
	}
}

func TestPermanentErrors(t *testing.T) {
	cases := []struct {
		name   string
		status int
	}{
		{"bad request", 400},
		{"not found", 404},
		{"too large", 413},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.enqueue(Message{Token: tokA, Text: "doomed", Key: "k1"})
			e.enqueue(Message{Token: tokA, Text: "next one", Key: "k2"})
			e.talk.FailNext(c.status, 1)
			if n := e.deliver(); n != 1 {
				t.Fatalf("delivered %d, want the second row", n)
			}
			rows := e.entries(tokA)
			if rows[0].Status != StatusFailed || rows[0].Attempts != 1 || !strings.Contains(rows[0].LastError, fmt.Sprint(c.status)) {
				t.Fatalf("first row %+v", rows[0])
			}
			if rows[1].Status != StatusSent {
				t.Fatalf("a failed row must not block the conversation: %+v", rows[1])
			}
			e.clock.Advance(24 * time.Hour)
			e.deliver()
			if e.talk.Count(c.status) != 1 {
				t.Fatalf("a permanent failure was retried: %v", e.talk.Counts())
			}
			if !strings.Contains(e.logs.String(), "failed permanently") {
				t.Fatalf("not logged:\n%s", e.logs.String())
			}
		})
	}
}

func TestRefusedReplyTargetIsDropped(t *testing.T) {
	e := newEnv(t)
	// 200 is a message of conversation B: Talk refuses it as a reply target in A.
	e.enqueue(Message{Token: tokA, Text: "answer", ReplyTo: 200, Key: "k"})
	if n := e.deliver(); n != 1 {
		t.Fatalf("delivered %d", n)
	}
	m := e.talk.Messages()
	if len(m) != 1 || m[0].ReplyTo != 0 || m[0].Message != "answer" {
		t.Fatalf("messages %+v", m)
	}
	if r := e.entries(tokA)[0]; r.Status != StatusSent || r.Attempts != 2 || r.ReplyTo != 0 {
		t.Fatalf("row %+v", r)
	}
}

func TestConversationsAreIndependent(t *testing.T) {
	e := newEnv(t)
	e.enqueue(Message{Token: tokA, Text: "A1", Key: "a1"})
	e.enqueue(Message{Token: tokB, Text: "B1", Key: "b1"})
	e.enqueue(Message{Token: tokA, Text: "A2", Key: "a2"})
	e.enqueue(Message{Token: tokB, Text: "B2", Key: "b2"})
	e.talk.FailNext(503, 1) // hits A1, the oldest row
	if n := e.deliver(); n != 2 {
		t.Fatalf("delivered %d", n)
	}
	if got := fmt.Sprint(texts(e.talk.Messages())); got != "[roombbbb:B1 roombbbb:B2]" {
		t.Fatalf("A2 must wait behind A1, B goes on: %s", got)
	}
	e.clock.Advance(DefaultMinBackoff)
	e.deliver()
	if got := fmt.Sprint(texts(e.talk.Messages())); got != "[roombbbb:B1 roombbbb:B2 roomaaaa:A1 roomaaaa:A2]" {
		t.Fatalf("got %s", got)
	}
}

func TestRestartResumesPendingRows(t *testing.T) {
	e := newEnv(t)
	e.talk.SetDown(502)
	for i := range 3 {
		e.enqueue(Message{Token: tokA, Text: fmt.Sprintf("m%d", i), Key: fmt.Sprintf("k%d", i)})
	}
	e.deliver()
	if e.talk.Count(502) != 1 {
		t.Fatalf("counts %v", e.talk.Counts())
	}
	// The sidecar stops and starts again with the same database file.
	if err := e.ob.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.db.Close(); err != nil {
		t.Fatal(err)
	}
	e.open()
	e.talk.SetUp()
	e.clock.Advance(time.Minute)
	e.ob.Start(context.Background())
	msgs := e.waitMessages(3)
	if got := fmt.Sprint(texts(msgs)); got != "[roomaaaa:m0 roomaaaa:m1 roomaaaa:m2]" {
		t.Fatalf("got %s", got)
	}
	e.waitEntry(tokA, func(l []Entry) bool { return l[2].Status == StatusSent })
	if n := e.deliver(); n != 0 || len(e.talk.Messages()) != 3 {
		t.Fatal("sent twice")
	}
}

func TestLoopDeliversOnWake(t *testing.T) {
	e := newEnv(t)
	e.opts.PollInterval = time.Hour // only Enqueue's wake-up can trigger the send
	e.ob = New(e.db, e.client, e.opts)
	e.ob.Start(context.Background())
	e.ob.Start(context.Background()) // a second Start is a no-op
	e.enqueue(Message{Token: tokA, Text: "prompt", Key: "k"})
	e.waitMessages(1)
	if err := e.ob.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.ob.Close(context.Background()); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// blockingSender blocks until its context ends, like a request to a hung server.
type blockingSender struct{ started chan struct{} }

func (b blockingSender) SendMessage(ctx context.Context, _, _ string, _ talk.SendOptions) error {
	close(b.started)
	<-ctx.Done()
	return fmt.Errorf("send: %w", ctx.Err())
}

func TestCloseAbortsAHungSendWithoutCountingIt(t *testing.T) {
	e := newEnv(t)
	s := blockingSender{started: make(chan struct{})}
	ob := New(e.db, s, e.opts)
	if err := ob.Enqueue(context.Background(), Message{Token: tokA, Text: "x", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	ob.Start(context.Background())
	<-s.started
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Close may not wait at all: the send must be aborted
	if err := ob.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("close: %v", err)
	}
	r := e.entries(tokA)[0]
	if r.Status != StatusPending || r.Attempts != 0 || r.LastError != "" {
		t.Fatalf("row changed by an aborted send: %+v", r)
	}
}

func TestStatsFailedAndRetry(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.bot.DisableIn(tokB)
	e.opts.MaxAuthAttempts = 1
	e.ob = New(e.db, e.client, e.opts)
	e.enqueue(Message{Token: tokA, Text: "sent", Key: "a"})
	e.enqueue(Message{Token: tokB, Text: "refused", Key: "b"})
	e.enqueue(Message{Token: tokA, Text: "waiting", Key: "c"})
	e.deliver() // a: sent; b: 401 → failed at once (MaxAuthAttempts 1); c: sent
	e.talk.SetDown(503)
	e.enqueue(Message{Token: tokA, Text: "pending", Key: "d"})
	e.deliver()
	st, err := e.ob.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent != 2 || st.Failed != 1 || st.Pending != 1 || st.Held != 0 || !st.OldestPending.Equal(e.clock.Now()) {
		t.Fatalf("stats %+v", st)
	}
	failed, _ := e.ob.Failed(ctx)
	if len(failed) != 1 || failed[0].Text != "refused" {
		t.Fatalf("failed %+v", failed)
	}
	if err := e.ob.Retry(ctx, failed[0].ID+100); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("retry of a missing row: %v", err)
	}
	e.talk.SetUp()
	e.bot.EnableIn(tokB) // the admin fixed the cause
	if err := e.ob.Retry(ctx, failed[0].ID); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	e.deliver()
	if st, _ := e.ob.Stats(ctx); st.Sent != 4 || st.Failed != 0 || st.Pending != 0 {
		t.Fatalf("stats after retry %+v", st)
	}
}

func TestHeldRowsCountInStats(t *testing.T) {
	e := newEnv(t)
	e.bot.DisableIn(tokB)
	e.enqueue(Message{Token: tokB, Text: "x", Key: "b"})
	e.deliver()
	st, err := e.ob.Stats(context.Background())
	if err != nil || st.Held != 1 || st.Pending != 1 {
		t.Fatalf("stats %+v, %v", st, err)
	}
}

func TestSentRowsArePruned(t *testing.T) {
	e := newEnv(t)
	e.enqueue(Message{Token: tokA, Text: "old", Key: "k"})
	e.deliver() // also the first prune, which finds nothing
	e.clock.Advance(DefaultKeepSent + 2*time.Hour)
	e.deliver()
	if rows := e.entries(tokA); len(rows) != 0 {
		t.Fatalf("rows %+v", rows)
	}
}

func TestReferenceID(t *testing.T) {
	sum := sha256.Sum256([]byte("task:12:reply#0"))
	if got, want := ReferenceID("task:12:reply", 0), hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if ReferenceID("k", 0) == ReferenceID("k", 1) || ReferenceID("k", 1) == ReferenceID("k1", 0) {
		t.Fatal("reference ids collide")
	}
}

// lostAnswer sends through Talk, then reports the connection broken, as when the
// process or the network dies after Talk stored the message but before its 201 arrived.
type lostAnswer struct {
	Sender
	lose bool
}

func (l *lostAnswer) SendMessage(ctx context.Context, token, message string, opts talk.SendOptions) error {
	err := l.Sender.SendMessage(ctx, token, message, opts)
	if l.lose {
		l.lose = false
		return fmt.Errorf("talk: send message: %w", io.ErrUnexpectedEOF)
	}
	return err
}

// A send whose answer was lost is not repeated when the app says Talk has the message;
// it is sent when Talk does not have it, or when the app cannot tell; and while the app
// cannot be asked, it waits.
func TestInterruptedSendIsNotPostedTwice(t *testing.T) {
	for _, c := range []struct {
		name     string
		posted   func(e *env) func(context.Context, string, []string) ([]string, error)
		wantMsgs int
	}{
		{"talk has it", func(e *env) func(context.Context, string, []string) ([]string, error) {
			return func(_ context.Context, token string, refs []string) ([]string, error) {
				var out []string
				for _, m := range e.talk.Messages() {
					if m.Token == token && slices.Contains(refs, m.ReferenceID) {
						out = append(out, m.ReferenceID)
					}
				}
				return out, nil
			}
		}, 1},
		{"the app cannot tell", func(*env) func(context.Context, string, []string) ([]string, error) {
			return func(context.Context, string, []string) ([]string, error) { return nil, ErrCannotTell }
		}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.opts.Posted = c.posted(e)
			lost := &lostAnswer{Sender: e.client, lose: true}
			e.ob = New(e.db, lost, e.opts)
			e.enqueue(Message{Token: tokA, Text: "the answer", ReplyTo: 100, Key: "task:1:reply"})
			if n := e.deliver(); n != 0 {
				t.Fatalf("a send without an answer counted as delivered")
			}
			var inFlight bool
			e.db.Read.QueryRow(`SELECT in_flight FROM talk_outbox`).Scan(&inFlight)
			if !inFlight {
				t.Fatal("the row is not marked in flight after a lost answer")
			}
			// A restart, and the retry comes due.
			e.open()
			e.ob = New(e.db, e.client, e.opts)
			e.clock.Advance(time.Hour)
			e.deliver()
			if got := len(e.talk.Messages()); got != c.wantMsgs {
				t.Fatalf("Talk has %d message(s), want %d", got, c.wantMsgs)
			}
			if list := e.entries(tokA); len(list) != 1 || list[0].Status != StatusSent {
				t.Fatalf("row: %+v", list)
			}
		})
	}
}

// brokenBeforeTalk fails like a connection that broke after the request left, but Talk
// never got it.
type brokenBeforeTalk struct{}

func (brokenBeforeTalk) SendMessage(context.Context, string, string, talk.SendOptions) error {
	return fmt.Errorf("talk: send message: %w", io.ErrUnexpectedEOF)
}

// While the app cannot be asked (Nextcloud down), an unsure row waits rather than risk a
// duplicate; once the app says Talk does not have it, it is sent, once.
func TestUnsureRowWaitsForTheApp(t *testing.T) {
	e := newEnv(t)
	asked := 0
	e.opts.Posted = func(context.Context, string, []string) ([]string, error) {
		asked++
		if asked == 1 {
			return nil, errors.New("nextcloud is down")
		}
		return nil, nil
	}
	e.ob = New(e.db, brokenBeforeTalk{}, e.opts)
	e.enqueue(Message{Token: tokA, Text: "hello", Key: "k1"})
	e.deliver()
	e.ob = New(e.db, e.client, e.opts)
	e.clock.Advance(time.Hour)
	e.deliver()
	if asked != 1 || len(e.talk.Messages()) != 0 {
		t.Fatalf("while the app is down: asked %d time(s), Talk has %d message(s)", asked, len(e.talk.Messages()))
	}
	e.clock.Advance(time.Hour)
	e.deliver()
	if asked != 2 || len(e.talk.Messages()) != 1 {
		t.Fatalf("after the app answered: asked %d time(s), Talk has %d message(s)", asked, len(e.talk.Messages()))
	}
}

// A send Talk answered with an error, or that never connected, did not arrive: the next
// try does not need to ask.
func TestDefiniteFailuresAreNotUnsure(t *testing.T) {
	for _, err := range []error{
		&talk.StatusError{Op: "send message", Status: 503},
		fmt.Errorf("talk: send message: %w", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}),
	} {
		if mayHaveArrived(err) {
			t.Errorf("%v counted as possibly arrived", err)
		}
	}
	if !mayHaveArrived(fmt.Errorf("talk: send message: %w", io.ErrUnexpectedEOF)) {
		t.Error("a broken connection counted as not arrived")
	}
}
