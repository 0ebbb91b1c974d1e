// Package davshare reads how Nextcloud lays out the DAV collections its users share
// with the bot account: a calendar, task list or address book "<uri>" of the user
// <owner> appears in the bot's calendar or address book home as
// "<uri>_shared_by_<owner>". That suffix is what tells whose collection it is, and the
// skills over those collections (calendar, tasks, contacts) let a user's agent reach
// only the collections the user shared (ForUser).
package davshare

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-webdav"
)

// sharedBySep is what Nextcloud appends to a collection shared with another user.
const sharedBySep = "_shared_by_"

// Collection is one collection (calendar, task list, address book) in the bot's home.
type Collection struct {
	// Path is the absolute collection path on the server, with a trailing slash.
	Path string `json:"path"`
	// ID is the last path segment, e.g. "personal_shared_by_alice"; stable, used to
	// name the collection in the skills.
	ID string `json:"id"`
	// Name is the display name (may be empty).
	Name string `json:"name"`
	// Owner is the Nextcloud user who shared the collection with the bot, from the
	// "_shared_by_<uid>" suffix; empty for the bot's own collections.
	Owner string `json:"owner,omitempty"`
}

// New describes the collection at p with display name name.
func New(p, name string) Collection {
	p = DirPath(p)
	id := path.Base(strings.TrimSuffix(p, "/"))
	if un, err := url.PathUnescape(id); err == nil {
		id = un
	}
	c := Collection{Path: p, ID: id, Name: name}
	if i := strings.LastIndex(id, sharedBySep); i > 0 {
		c.Owner = id[i+len(sharedBySep):]
	}
	return c
}

// DirPath is p with a trailing slash.
func DirPath(p string) string {
	if !strings.HasSuffix(p, "/") {
		return p + "/"
	}
	return p
}

// ForUser returns the collections uid shared with the bot, so a user's agent only ever
// sees that user's collections. The bot's own collections belong to no user.
func ForUser(cols []Collection, uid string) []Collection {
	var out []Collection
	if uid == "" {
		return out
	}
	for _, c := range cols {
		if c.Owner == uid {
			out = append(out, c)
		}
	}
	return out
}

// Named is the collections of cols whose id is name or whose display name is name
// (case-insensitively).
func Named(cols []Collection, name string) []Collection {
	var out []Collection
	for _, c := range cols {
		if c.ID == name || strings.EqualFold(c.Name, name) {
			out = append(out, c)
		}
	}
	return out
}

// Login is how the bot account reaches the server's DAV root.
type Login struct {
	// Endpoint is the DAV root, e.g. "https://cloud.example/remote.php/dav/".
	Endpoint string
	// Username and Password are the bot account's credentials (an app password).
	Username string
	Password string
	// HTTPClient defaults to a client with a 30 s timeout.
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// Conn is a checked Login: the endpoint with a trailing slash, the HTTP client, the same
// client sending the bot's basic auth (for go-webdav's clients) and a logger.
type Conn struct {
	Endpoint *url.URL
	HTTP     *http.Client
	Auth     webdav.HTTPClient
	Log      *slog.Logger
}

// Open checks l and fills in its defaults; what names the caller in errors.
func (l Login) Open(what string) (Conn, error) {
	u, err := url.Parse(l.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Conn{}, fmt.Errorf("%s: endpoint must be an http(s) URL", what)
	}
	u.Path = DirPath(u.Path)
	if l.Username == "" {
		return Conn{}, fmt.Errorf("%s: username is required", what)
	}
	hc := l.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	log := l.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return Conn{Endpoint: u, HTTP: hc, Auth: webdav.HTTPClientWithBasicAuth(hc, l.Username, l.Password), Log: log}, nil
}

// Home is a home set (calendar or address book home) found once and then remembered.
// Its zero value discovers; Set fixes it in advance. Safe for concurrent use.
type Home struct {
	mu   sync.Mutex
	path string
}

// Set fixes the home path (a configured home set); "" leaves it to discovery.
func (h *Home) Set(p string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p != "" {
		h.path = DirPath(p)
	}
}

// Discover is Get with the usual discovery: the current user's principal, then the home
// set named in it (homeOf: go-webdav's FindCalendarHomeSet or FindAddressBookHomeSet).
// what names the caller in errors.
func (h *Home) Discover(ctx context.Context, what string, principal func(context.Context) (string, error),
	homeOf func(context.Context, string) (string, error)) (string, error) {
	return h.Get(ctx, func(ctx context.Context) (string, error) {
		p, err := principal(ctx)
		if err != nil {
			return "", fmt.Errorf("%s: find current user principal: %w", what, err)
		}
		hs, err := homeOf(ctx, p)
		if err != nil {
			return "", fmt.Errorf("%s: find the home set of %s: %w", what, p, err)
		}
		return hs, nil
	})
}

// Get returns the home path, calling find the first time (or until it succeeds).
func (h *Home) Get(ctx context.Context, find func(context.Context) (string, error)) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.path != "" {
		return h.path, nil
	}
	p, err := find(ctx)
	if err != nil {
		return "", err
	}
	h.path = DirPath(p)
	return h.path, nil
}

// Pick is mine (a user's collections), or the one of them named name (see Named). The
// error is the message for the agent: the same whether the named collection does not
// exist or is someone else's, so it learns nothing about other users' collections.
// noun is what the collections are ("calendars"), listCmd the skill command listing
// them and bot the bot account's name.
func Pick(mine []Collection, name, noun, listCmd, bot string) ([]Collection, error) {
	if name == "" {
		return mine, nil
	}
	match := Named(mine, name)
	switch len(match) {
	case 1:
		return match, nil
	case 0:
		return nil, fmt.Errorf("%q is not one of the %s you shared with the bot account %q (see: istota skill %s)", name, noun, bot, listCmd)
	}
	return nil, fmt.Errorf("%q names several of your %s; use the id from \"istota skill %s\"", name, noun, listCmd)
}
