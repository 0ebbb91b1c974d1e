// Package davshare reads how Nextcloud lays out the DAV collections its users share
// with the bot account: a calendar, task list or address book "<uri>" of the user
// <owner> appears in the bot's calendar or address book home as
// "<uri>_shared_by_<owner>". That suffix is what tells whose collection it is, and the
// skills over those collections (calendar, tasks, contacts) let a user's agent reach
// only the collections the user shared (ForUser).
package davshare

import (
	"net/url"
	"path"
	"strings"
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
