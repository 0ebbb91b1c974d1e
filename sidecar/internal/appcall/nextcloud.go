package appcall

import (
	"context"
	"encoding/json"
	"fmt"
)

// The app's routes for the nextcloud skill, below Nextcloud's URL. Each acts on behalf
// of the user named in the signed body, inside Nextcloud (lib/Service/NextcloudDelegate.php).
const (
	SharePath         = "/ocs/v2.php/apps/istota/api/v1/sidecar/nextcloud/share"
	SharesPath        = "/ocs/v2.php/apps/istota/api/v1/sidecar/nextcloud/shares"
	MkdirPath         = "/ocs/v2.php/apps/istota/api/v1/sidecar/nextcloud/mkdir"
	ConversationsPath = "/ocs/v2.php/apps/istota/api/v1/sidecar/nextcloud/conversations"
	PostTargetPath    = "/ocs/v2.php/apps/istota/api/v1/sidecar/nextcloud/post-target"
)

// ShareRequest asks for one share of a file or folder in User's own files.
type ShareRequest struct {
	User        string `json:"user"`
	Path        string `json:"path"`               // relative to the user's home
	Type        string `json:"type"`               // user | group | link
	With        string `json:"with,omitempty"`     // user or group id; empty for links
	Permissions string `json:"permissions"`        // read | edit
	Expires     string `json:"expires,omitempty"`  // YYYY-MM-DD
	Password    string `json:"password,omitempty"` // links only
	Note        string `json:"note,omitempty"`
}

// Share is one share as the app describes it. Password says whether a link has one; the
// password itself never comes back.
type Share struct {
	ID          string `json:"id"`
	Type        string `json:"type"`
	Path        string `json:"path"`
	With        string `json:"with"`
	Permissions string `json:"permissions"`
	Expires     string `json:"expires"`
	Password    bool   `json:"password"`
	URL         string `json:"url"`
	Note        string `json:"note"`
}

// Folder is the outcome of Mkdir.
type Folder struct {
	Path    string `json:"path"`
	Created bool   `json:"created"` // false: it existed already
}

// Conversation is one of a user's Talk conversations.
type Conversation struct {
	Token      string `json:"token"`
	Name       string `json:"name"`
	Type       int    `json:"type"`
	BotEnabled bool   `json:"bot_enabled"`
}

// Share shares a file or folder of req.User's own, as that user.
func (c *Client) Share(ctx context.Context, req ShareRequest) (Share, error) {
	var out Share
	return out, c.callJSON(ctx, SharePath, req, &out)
}

// Shares lists the shares user made (of path only, when it is not empty).
func (c *Client) Shares(ctx context.Context, user, path string) ([]Share, error) {
	var out struct {
		Shares []Share `json:"shares"`
	}
	err := c.callJSON(ctx, SharesPath, map[string]string{"user": user, "path": path}, &out)
	return out.Shares, err
}

// Mkdir creates a folder, and the missing folders above it, in user's own files.
func (c *Client) Mkdir(ctx context.Context, user, path string) (Folder, error) {
	var out Folder
	return out, c.callJSON(ctx, MkdirPath, map[string]string{"user": user, "path": path}, &out)
}

// Conversations lists user's Talk conversations, with whether the bot is in each.
func (c *Client) Conversations(ctx context.Context, user string) ([]Conversation, error) {
	var out struct {
		Conversations []Conversation `json:"conversations"`
	}
	err := c.callJSON(ctx, ConversationsPath, map[string]string{"user": user}, &out)
	return out.Conversations, err
}

// PostTarget asks whether the bot may post into conversation token for user: user is a
// participant who may write there and the bot is enabled in it. A refusal is a
// *RejectedError saying why.
func (c *Client) PostTarget(ctx context.Context, user, token string) (Conversation, error) {
	var out Conversation
	err := c.callJSON(ctx, PostTargetPath, map[string]string{"user": user, "token": token}, &out)
	out.BotEnabled = err == nil
	return out, err
}

func (c *Client) callJSON(ctx context.Context, route string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("appcall: %s: %w", route, err)
	}
	return c.call(ctx, route, body, out)
}
