package webdav

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Share permissions, as in OCP\Constants.
const (
	PermRead   = 1
	PermUpdate = 2
	PermCreate = 4
	PermDelete = 8
	PermShare  = 16
	// PermEdit is what a user needs to read and edit a shared folder.
	PermEdit = PermRead | PermUpdate | PermCreate | PermDelete
)

// ShareTypeUser is IShare::TYPE_USER.
const ShareTypeUser = 0

// Share is one share as the OCS sharing API describes it (a subset of the fields of
// ShareAPIController::formatShare).
type Share struct {
	ID          string
	ShareType   int
	ShareWith   string
	Path        string // as the bot sees it, with a leading slash
	Permissions int
	ItemType    string // "folder" | "file"
	FileTarget  string // where the recipient sees it
}

// sharesPath is the files_sharing OCS endpoint (apps/files_sharing/appinfo/routes.php).
const sharesPath = "/ocs/v2.php/apps/files_sharing/api/v1/shares"

type ocsEnvelope struct {
	OCS struct {
		Meta struct {
			Status     string `json:"status"`
			StatusCode int    `json:"statuscode"`
			Message    string `json:"message"`
		} `json:"meta"`
		Data json.RawMessage `json:"data"`
	} `json:"ocs"`
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// wireShare decodes the fields we use. id has been a string since Nextcloud 9 but old
// servers and proxies have sent numbers; share_with is null for link shares.
type wireShare struct {
	ID          flexString `json:"id"`
	ShareType   flexInt    `json:"share_type"`
	ShareWith   flexString `json:"share_with"`
	Path        string     `json:"path"`
	Permissions flexInt    `json:"permissions"`
	ItemType    string     `json:"item_type"`
	FileTarget  string     `json:"file_target"`
}

func (w wireShare) share() Share {
	return Share{
		ID: string(w.ID), ShareType: int(w.ShareType), ShareWith: string(w.ShareWith),
		Path: w.Path, Permissions: int(w.Permissions), ItemType: w.ItemType, FileTarget: w.FileTarget,
	}
}

type flexString string

func (f *flexString) UnmarshalJSON(b []byte) error {
	switch {
	case bytes.Equal(b, []byte("null")):
		*f = ""
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*f = flexString(s)
	default:
		var n json.Number
		if err := json.Unmarshal(b, &n); err != nil {
			return err
		}
		*f = flexString(n.String())
	}
	return nil
}

type flexInt int

func (f *flexInt) UnmarshalJSON(b []byte) error {
	var s flexString
	if err := s.UnmarshalJSON(b); err != nil {
		return err
	}
	if s == "" {
		*f = 0
		return nil
	}
	n, err := strconv.Atoi(string(s))
	if err != nil {
		return err
	}
	*f = flexInt(n)
	return nil
}

// ocs sends one request to the sharing API and decodes the envelope's data into out.
func (c *Client) ocs(ctx context.Context, method, rel string, query url.Values, body any, out any) error {
	return c.ocsAt(ctx, sharesPath, method, rel, query, body, out)
}

// ocsAt sends one OCS request to endpoint (a path below the server root) and decodes
// the envelope's data into out; rel names what it is about in errors.
func (c *Client) ocsAt(ctx context.Context, endpoint, method, rel string, query url.Values, body any, out any) error {
	op := "OCS " + method
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := *c.base
	u.Path = c.base.Path + endpoint
	if query == nil {
		query = url.Values{}
	}
	query.Set("format", "json")
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("webdav %s: %w", op, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return fmt.Errorf("webdav %s: %w", op, err)
	}
	// Without this header Nextcloud treats a request as a browser's and demands a CSRF
	// token; it also selects OCS error semantics.
	req.Header.Set("OCS-APIRequest", "true")
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.send(req)
	if err != nil {
		return transportError(ctx, op, rel, err)
	}
	if resp.StatusCode/100 != 2 {
		return statusError(op, rel, resp)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return transportError(ctx, op, rel, err)
	}
	var env ocsEnvelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return &Error{Op: op, Path: rel, Status: resp.StatusCode, cause: fmt.Errorf("not an OCS JSON answer: %w", err)}
	}
	// OCS v1 answers 200 with the real status in meta; v2 should not, but a proxy
	// or an old server might.
	if sc := env.OCS.Meta.StatusCode; env.OCS.Meta.Status != "ok" && sc != 100 && sc != 200 {
		if sc == 997 {
			sc = http.StatusUnauthorized
		}
		return &Error{Op: op, Path: rel, Status: sc, Message: clip(env.OCS.Meta.Message, 200), kind: kindForStatus(sc)}
	}
	if out != nil {
		if err := json.Unmarshal(env.OCS.Data, out); err != nil {
			return &Error{Op: op, Path: rel, Status: resp.StatusCode, cause: fmt.Errorf("unexpected OCS data: %w", err)}
		}
	}
	return nil
}

// Shares lists the shares the bot made of one path (GET …/shares?path=…).
func (c *Client) Shares(ctx context.Context, name string) ([]Share, error) {
	rel, err := clean(name)
	if err != nil {
		return nil, err
	}
	var ws []wireShare
	if err := c.ocs(ctx, http.MethodGet, rel, url.Values{"path": {"/" + rel}}, nil, &ws); err != nil {
		return nil, err
	}
	out := make([]Share, len(ws))
	for i, w := range ws {
		out[i] = w.share()
	}
	return out, nil
}

// CreateShare shares a path with a user (POST …/shares, shareType 0).
func (c *Client) CreateShare(ctx context.Context, name, uid string, permissions int) (Share, error) {
	rel, err := clean(name)
	if err != nil {
		return Share{}, err
	}
	if rel == "" {
		return Share{}, fmt.Errorf("%w: refusing to share the root", ErrBadPath)
	}
	body := map[string]any{
		"path":        "/" + rel,
		"shareType":   ShareTypeUser,
		"shareWith":   uid,
		"permissions": permissions,
	}
	var w wireShare
	if err := c.ocs(ctx, http.MethodPost, rel, nil, body, &w); err != nil {
		return Share{}, err
	}
	return w.share(), nil
}

// ShareWithUser makes sure a path is shared with uid: an existing user share is
// returned as it is (created false), never duplicated, and its permissions are left
// alone — the admin or the user may have changed them on purpose. It trusts a share it
// finds; CompleteShareWithUser is for when that share may be half made.
func (c *Client) ShareWithUser(ctx context.Context, name, uid string, permissions int) (Share, bool, error) {
	return c.shareWithUser(ctx, name, uid, permissions, false)
}

// CompleteShareWithUser is ShareWithUser that posts the share even when it exists.
// Nextcloud stores a new user share as pending and accepts it for the recipient in a
// later step of the same request; when a step between fails (on SQLite, "database is
// locked" in the contacts-interaction listener), the request answers with an error and
// the share stays pending for good: listed for the owner, absent from the recipient's
// files. The owner's view cannot tell the two apart. Nextcloud (31 and later) answers
// the post of an identical share with the existing one, permissions untouched, and runs
// those steps again, which accepts it. Each post adds an entry to the user's activity
// stream, so this is for the rare moments a half-made share can exist: the first
// provisioning of a user, or after an earlier attempt failed.
func (c *Client) CompleteShareWithUser(ctx context.Context, name, uid string, permissions int) (Share, bool, error) {
	return c.shareWithUser(ctx, name, uid, permissions, true)
}

func (c *Client) shareWithUser(ctx context.Context, name, uid string, permissions int, complete bool) (Share, bool, error) {
	if uid == "" {
		return Share{}, false, fmt.Errorf("webdav: share %s: empty user id", name)
	}
	existing, found, err := c.findUserShare(ctx, name, uid)
	if err != nil || (found && !complete) {
		return existing, false, err
	}
	s, err := c.CreateShare(ctx, name, uid, permissions)
	if err == nil {
		return s, !found, nil
	}
	if !found {
		// Refused outright (no such user, no such path), or stored and then failed:
		// only a share that is there now is worth posting again.
		if _, found, ferr := c.findUserShare(ctx, name, uid); ferr != nil || !found {
			return Share{}, false, err
		}
	}
	// Post it again after a pause: the database lock that broke the first post is
	// usually gone within a second.
	for _, pause := range [...]time.Duration{200 * time.Millisecond, time.Second} {
		select {
		case <-ctx.Done():
			return Share{}, false, fmt.Errorf("webdav: share %s with %s: %w (then: %w)", name, uid, err, ctx.Err())
		case <-time.After(pause):
		}
		var again error
		if s, again = c.CreateShare(ctx, name, uid, permissions); again == nil {
			return s, !found, nil
		}
		err = again
	}
	return Share{}, false, fmt.Errorf("webdav: the share of %s with %s exists but Nextcloud did not complete it, so %s may not see it: %w", name, uid, uid, err)
}

// findUserShare returns the user share of name with uid, if there is one. Nextcloud
// user ids compare case-insensitively at login; a share stored as "Alice" serves
// "alice" too.
func (c *Client) findUserShare(ctx context.Context, name, uid string) (Share, bool, error) {
	shares, err := c.Shares(ctx, name)
	if err != nil {
		return Share{}, false, err
	}
	for _, s := range shares {
		if s.ShareType == ShareTypeUser && strings.EqualFold(s.ShareWith, uid) {
			return s, true, nil
		}
	}
	return Share{}, false, nil
}

// IncomingShare is a file or folder another user shared with the bot account, as the
// bot sees it (ShareAPIController::formatShare for ?shared_with_me=true).
type IncomingShare struct {
	ID string
	// Owner is uid_owner: the user who shared it with the bot (for a reshare, the
	// resharer, not the file's owner).
	Owner string
	// Path is where the share is mounted in the bot's files, relative to its root and
	// without a leading slash, exactly as Nextcloud sent it: check it with
	// ValidatePath before use.
	Path     string
	ItemType string // "file" | "folder"
}

type wireIncoming struct {
	ID         flexString `json:"id"`
	Owner      flexString `json:"uid_owner"`
	Path       flexString `json:"path"`
	FileTarget flexString `json:"file_target"`
	ItemType   string     `json:"item_type"`
}

// User is the bot account's user id.
func (c *Client) User() string { return c.user }

// SharedWithMe lists the shares other users made with the bot account
// (GET …/shares?shared_with_me=true). Nextcloud already leaves out shares the bot owns.
func (c *Client) SharedWithMe(ctx context.Context) ([]IncomingShare, error) {
	var ws []wireIncoming
	if err := c.ocs(ctx, http.MethodGet, "", url.Values{"shared_with_me": {"true"}}, nil, &ws); err != nil {
		return nil, err
	}
	out := make([]IncomingShare, len(ws))
	for i, w := range ws {
		// "path" follows the node wherever the bot moved it; file_target is the
		// mount point recorded on the share and is the fallback formatShare itself uses.
		p := string(w.Path)
		if p == "" {
			p = string(w.FileTarget)
		}
		out[i] = IncomingShare{
			ID: string(w.ID), Owner: string(w.Owner), ItemType: w.ItemType,
			Path: strings.TrimPrefix(p, "/"),
		}
	}
	return out, nil
}
