// Package live streams task progress to the settings page over a WebSocket
// (docs/user-api.md, "Live progress"). The browser connects with a short-lived token the
// app minted; one poller reads new task events and task state changes from the database
// and fans them out to the connections of the task's user. A client that does not keep
// up is dropped instead of slowing anyone else.
package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/istota/istota/sidecar/internal/portal"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/signing"
	"github.com/istota/istota/sidecar/internal/store"
)

// Nonces makes each token single-use; *signing.Nonces implements it.
type Nonces interface {
	Use(ctx context.Context, nonce string, now time.Time) error
}

// Options configure a Hub.
type Options struct {
	Secret []byte
	// Origins are the accepted Origin header values ("https://cloud.example.com"):
	// the configured Nextcloud URL's origin.
	Origins []string
	Nonces  Nonces
	// Authorize refuses a user who may not use the bot (nil lets every token in).
	Authorize func(ctx context.Context, uid string) error
	// PollInterval is how often the database is read while someone is connected
	// (default 1 s); PingInterval how often clients are pinged (default 30 s).
	PollInterval time.Duration
	PingInterval time.Duration
	// SendBuffer is how many frames may wait for one client before it is dropped
	// (default 256).
	SendBuffer int
	Clock      func() time.Time
	Logger     *slog.Logger
}

// Hub owns the poller and every open connection.
type Hub struct {
	db   *store.DB
	q    *queue.Queue
	opts Options
	up   websocket.Upgrader

	mu      sync.Mutex
	subs    map[string]map[*client]struct{} // by user id
	closing bool
	wake    chan struct{} // a first subscriber arrived

	conns   sync.WaitGroup // one per open connection
	poller  sync.WaitGroup
	stop    context.CancelFunc
	closeCh chan struct{}
}

// New returns a Hub; Start runs its poller.
func New(db *store.DB, q *queue.Queue, opts Options) *Hub {
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = 30 * time.Second
	}
	if opts.SendBuffer <= 0 {
		opts.SendBuffer = 256
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Hub{db: db, q: q, opts: opts, subs: map[string]map[*client]struct{}{},
		wake: make(chan struct{}, 1), closeCh: make(chan struct{})}
	h.up = websocket.Upgrader{
		HandshakeTimeout: 10 * time.Second,
		ReadBufferSize:   1024,
		WriteBufferSize:  4096,
		// The Origin is checked before the upgrade, with a JSON answer on refusal.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	return h
}

// Origin returns the origin ("scheme://host[:port]") of a URL, for Options.Origins.
func Origin(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return ""
	}
	return strings.ToLower(u.Scheme + "://" + u.Host)
}

// Start runs the poller until ctx ends or Close is called.
func (h *Hub) Start(ctx context.Context) {
	ctx, h.stop = context.WithCancel(ctx)
	h.poller.Add(1)
	go func() {
		defer h.poller.Done()
		h.pollLoop(ctx)
	}()
}

// Close stops the poller, closes every connection and waits for their handlers.
func (h *Hub) Close(ctx context.Context) error {
	h.mu.Lock()
	if !h.closing {
		h.closing = true
		close(h.closeCh)
	}
	h.mu.Unlock()
	if h.stop != nil {
		h.stop()
	}
	done := make(chan struct{})
	go func() {
		h.poller.Wait()
		h.conns.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("live: close: %w", ctx.Err())
	}
}

// client is one open connection.
type client struct {
	uid  string
	send chan []byte
	gone chan struct{} // closed when the hub dropped the client
	once sync.Once
}

func (c *client) drop() { c.once.Do(func() { close(c.gone) }) }

// Connected counts the open connections (for tests and the health view).
func (h *Hub) Connected() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.subs {
		n += len(m)
	}
	return n
}

func (h *Hub) add(c *client) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	m := h.subs[c.uid]
	if m == nil {
		m = map[*client]struct{}{}
		h.subs[c.uid] = m
	}
	m[c] = struct{}{}
	h.conns.Add(1)
	select {
	case h.wake <- struct{}{}:
	default:
	}
	return true
}

func (h *Hub) remove(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m := h.subs[c.uid]; m != nil {
		delete(m, c)
		if len(m) == 0 {
			delete(h.subs, c.uid)
		}
	}
}

// publish hands a frame to every connection of uid without waiting: a client whose
// buffer is full is dropped.
func (h *Hub) publish(uid string, frame any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.subs[uid]
	if len(m) == 0 {
		return
	}
	b, err := json.Marshal(frame)
	if err != nil {
		h.opts.Logger.Error("live: encode frame", "err", err)
		return
	}
	for c := range m {
		select {
		case c.send <- b:
		default:
			h.opts.Logger.Info("live: dropping a client that does not keep up", "user_id", uid)
			delete(m, c)
			c.drop()
		}
	}
	if len(m) == 0 {
		delete(h.subs, uid)
	}
}

func (h *Hub) watched() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]bool, len(h.subs))
	for uid := range h.subs {
		out[uid] = true
	}
	return out
}

// TaskFrame is sent on every state change of one of the user's tasks.
type TaskFrame struct {
	Type string      `json:"type"` // "task"
	Task portal.Task `json:"task"`
}

// EventFrame is sent for each progress line and tool action.
type EventFrame struct {
	Type   string `json:"type"` // "event"
	TaskID int64  `json:"task_id"`
	Seq    int64  `json:"seq"`
	At     string `json:"at"`
	Kind   string `json:"kind"`
	Text   string `json:"text"`
}

func writeRefusal(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// ServeHTTP is GET /v1/ws?token=…: it checks the token (MAC, expiry, single use), the
// Origin and the user's access, upgrades, and streams that user's frames.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	closing := h.closing
	h.mu.Unlock()
	if closing {
		writeRefusal(w, http.StatusServiceUnavailable, "unavailable", "the sidecar is shutting down; try again shortly")
		return
	}
	now := h.opts.Clock()
	claims, err := signing.VerifyWSToken(h.opts.Secret, r.URL.Query().Get("token"), now)
	if errors.Is(err, signing.ErrWeakSecret) {
		writeRefusal(w, http.StatusServiceUnavailable, "no_shared_secret", "the sidecar has no usable shared secret; see its log")
		return
	}
	if err != nil {
		writeRefusal(w, http.StatusUnauthorized, "bad_token", "the connection token is invalid or expired; ask the app for a new one")
		return
	}
	origin := strings.ToLower(r.Header.Get("Origin"))
	ok := false
	for _, o := range h.opts.Origins {
		if o != "" && origin == o {
			ok = true
		}
	}
	if !ok {
		h.opts.Logger.Warn("live: refused a connection from another origin", "origin", r.Header.Get("Origin"))
		writeRefusal(w, http.StatusForbidden, "bad_origin", "connections are accepted only from the Nextcloud pages")
		return
	}
	if h.opts.Nonces != nil {
		if err := h.opts.Nonces.Use(r.Context(), "ws:"+claims.Nonce, now); err != nil {
			writeRefusal(w, http.StatusUnauthorized, "bad_token", "the connection token was already used; ask the app for a new one")
			return
		}
	}
	if h.opts.Authorize != nil {
		if err := h.opts.Authorize(r.Context(), claims.UID); err != nil {
			writeRefusal(w, http.StatusForbidden, "not_allowed", "this account may not use the assistant")
			return
		}
	}
	conn, err := h.up.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered the client already
	}
	c := &client{uid: claims.UID, send: make(chan []byte, h.opts.SendBuffer), gone: make(chan struct{})}
	if !h.add(c) {
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "shutting down"), time.Now().Add(time.Second))
		conn.Close()
		return
	}
	defer h.conns.Done()
	h.serveConn(conn, c)
}

// serveConn writes frames and pings until the client leaves, is dropped or the hub
// closes. Its reader goroutine only answers pongs and notices the peer closing.
func (h *Hub) serveConn(conn *websocket.Conn, c *client) {
	defer h.remove(c)
	wait := 2 * h.opts.PingInterval
	conn.SetReadLimit(4096)
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(wait)) })
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()
	ping := time.NewTicker(h.opts.PingInterval)
	defer ping.Stop()
	closeWith := func(code int, text string) {
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
	}
	defer func() {
		conn.Close()
		<-readDone
	}()
	for {
		select {
		case b := <-c.send:
			_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if err := conn.WriteMessage(websocket.TextMessage, b); err != nil {
				return
			}
		case <-ping.C:
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(10*time.Second)); err != nil {
				return
			}
		case <-c.gone:
			closeWith(websocket.ClosePolicyViolation, "too slow")
			return
		case <-h.closeCh:
			closeWith(websocket.CloseGoingAway, "shutting down")
			return
		case <-readDone:
			return
		}
	}
}

// pollLoop reads the database while anyone is connected.
func (h *Hub) pollLoop(ctx context.Context) {
	t := time.NewTicker(h.opts.PollInterval)
	defer t.Stop()
	var p poller
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.wake:
		}
		watched := h.watched()
		if len(watched) == 0 {
			p = poller{} // start from "now" when someone connects again
			continue
		}
		if err := h.poll(ctx, &p, watched); err != nil && ctx.Err() == nil {
			h.opts.Logger.Warn("live: reading task progress failed", "err", err)
		}
	}
}

// poller is the position of the poll loop.
type poller struct {
	primed    bool
	lastEvent int64                  // task_events rowid
	lastTask  int64                  // highest task id seen
	seen      map[int64]queue.Status // unfinished tasks (and ones that finished since the last poll)
}

const activeStatuses = `'pending','locked','running','pending_confirmation'`

func (h *Hub) poll(ctx context.Context, p *poller, watched map[string]bool) error {
	db := h.db.Read
	if !p.primed {
		p.seen = map[int64]queue.Status{}
		if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(rowid), 0) FROM task_events`).Scan(&p.lastEvent); err != nil {
			return fmt.Errorf("prime events: %w", err)
		}
		if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM tasks`).Scan(&p.lastTask); err != nil {
			return fmt.Errorf("prime tasks: %w", err)
		}
		rows, err := db.QueryContext(ctx, `SELECT id, status FROM tasks WHERE status IN (`+activeStatuses+`)`)
		if err != nil {
			return fmt.Errorf("prime tasks: %w", err)
		}
		for rows.Next() {
			var id int64
			var st string
			if err := rows.Scan(&id, &st); err != nil {
				rows.Close()
				return fmt.Errorf("prime tasks: %w", err)
			}
			p.seen[id] = queue.Status(st)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("prime tasks: %w", err)
		}
		p.primed = true
		return nil
	}
	// A task's new state goes out before its events, and a final state after them, so
	// a page sees "running", then the steps, then "completed".
	finished, err := h.pollTasks(ctx, p, watched)
	if err != nil {
		return err
	}
	if err := h.pollEvents(ctx, p, watched); err != nil {
		return err
	}
	for _, f := range finished {
		h.publish(f.uid, f.frame)
	}
	return nil
}

// pendingFrame is a task frame held back until the events before it are out.
type pendingFrame struct {
	uid   string
	frame TaskFrame
}

func (h *Hub) pollEvents(ctx context.Context, p *poller, watched map[string]bool) error {
	for {
		rows, err := h.db.Read.QueryContext(ctx, `
			SELECT e.rowid, e.task_id, e.seq, e.at, e.kind, e.text, t.user_id
			FROM task_events e JOIN tasks t ON t.id = e.task_id
			WHERE e.rowid > ? ORDER BY e.rowid LIMIT 500`, p.lastEvent)
		if err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		n := 0
		for rows.Next() {
			var (
				rowid int64
				e     queue.Event
				at    string
				uid   string
			)
			if err := rows.Scan(&rowid, &e.TaskID, &e.Seq, &at, &e.Kind, &e.Text, &uid); err != nil {
				rows.Close()
				return fmt.Errorf("read events: %w", err)
			}
			n++
			p.lastEvent = rowid
			if !watched[uid] {
				continue
			}
			e.At, _ = store.ParseTime(at)
			v := portal.EventView(e)
			h.publish(uid, EventFrame{Type: "event", TaskID: e.TaskID, Seq: v.Seq, At: v.At, Kind: v.Kind, Text: v.Text})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		if n < 500 {
			return nil
		}
	}
}

func (h *Hub) pollTasks(ctx context.Context, p *poller, watched map[string]bool) ([]pendingFrame, error) {
	// New tasks, unfinished ones, and the ones seen unfinished last time (which may
	// have finished since): all by index, never a scan of finished history.
	args := []any{p.lastTask}
	var known strings.Builder
	for id := range p.seen {
		if known.Len() > 0 {
			known.WriteByte(',')
		}
		fmt.Fprintf(&known, "%d", id)
	}
	query := `SELECT id, user_id, status FROM tasks WHERE id > ? OR status IN (` + activeStatuses + `)`
	if known.Len() > 0 {
		query += ` OR id IN (` + known.String() + `)`
	}
	rows, err := h.db.Read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read tasks: %w", err)
	}
	type change struct {
		id  int64
		uid string
	}
	var changes []change
	next := map[int64]queue.Status{}
	for rows.Next() {
		var id int64
		var uid, st string
		if err := rows.Scan(&id, &uid, &st); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read tasks: %w", err)
		}
		p.lastTask = max(p.lastTask, id)
		status := queue.Status(st)
		if prev, ok := p.seen[id]; !ok || prev != status {
			changes = append(changes, change{id, uid})
		}
		if !status.Finished() {
			next[id] = status
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read tasks: %w", err)
	}
	p.seen = next
	var finished []pendingFrame
	for _, c := range changes {
		if !watched[c.uid] {
			continue
		}
		t, err := h.q.Get(ctx, c.id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read task %d: %w", c.id, err)
		}
		f := TaskFrame{Type: "task", Task: portal.TaskView(t)}
		if t.Status.Finished() {
			finished = append(finished, pendingFrame{c.uid, f})
			continue
		}
		h.publish(c.uid, f)
	}
	return finished, nil
}
