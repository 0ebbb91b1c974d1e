// Package webdav reaches the bot account's files in Nextcloud: WebDAV under
// /remote.php/dav/files/<bot>/ and the OCS sharing API that shares folders with users.
//
// PROPFIND, MKCOL, MOVE and unconditional DELETE go through emersion/go-webdav's
// client. GET, PUT and conditional DELETE are sent directly over the same
// authenticated HTTP client, because go-webdav's Open and Create neither send
// If-Match / If-None-Match nor return the ETag Nextcloud answers with — and the
// workspace sync is built on exactly those two things.
//
// Every path is relative to the bot's files root and '/'-separated ("Users/alice/notes.md");
// "" is the root. Paths are checked with ValidatePath before anything is sent.
package webdav

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	gowebdav "github.com/emersion/go-webdav"
)

// Options configures a Client.
type Options struct {
	// URL is Nextcloud's base URL, e.g. https://cloud.example.com or
	// https://example.com/nextcloud. It must not carry credentials.
	URL string
	// User and Password are the bot account and its app password.
	User     string
	Password string
	// Timeout bounds each metadata request (PROPFIND, MKCOL, MOVE, DELETE, OCS) and the
	// wait for the first byte of a transfer. Default 30s.
	Timeout time.Duration
	// TransferTimeout bounds one whole download or upload. Default 10 minutes.
	TransferTimeout time.Duration
	// Transport carries the requests; nil uses a clone of http.DefaultTransport.
	Transport http.RoundTripper
	// Jar keeps Nextcloud's session cookies between requests. Nextcloud verifies the
	// password hash on every request that carries only Basic credentials (a deliberately
	// slow hash: about 200 ms of server CPU each); with the session cookie it does not.
	// Share one jar among the clients of the same account. nil keeps no cookies.
	Jar http.CookieJar
	// UserAgent is sent with every request. Default "istota-sidecar".
	UserAgent string
}

// FileInfo describes one remote file or folder.
type FileInfo struct {
	// Path is relative to the bot's files root, without leading or trailing slash.
	// It is exactly what the server sent (only the root prefix removed): listings may
	// contain hostile names, and an entry outside the root keeps its absolute path.
	// Check it with ValidatePath before using it locally.
	Path    string
	IsDir   bool
	Size    int64
	ETag    string // unquoted; empty for folders on servers that give them none
	ModTime time.Time
	// FileID is Nextcloud's file id (oc:fileid), from ListLevel only; 0 when unknown.
	FileID int64
}

// Object is an open remote file being downloaded.
type Object struct {
	io.ReadCloser
	// ETag is the version being read (unquoted), from the GET response.
	ETag string
	// Size is the announced length, or -1.
	Size int64
}

// PutOptions makes an upload conditional.
type PutOptions struct {
	// IfMatch uploads only if the remote file still has this (unquoted) ETag; otherwise
	// the upload fails with ErrPreconditionFailed.
	IfMatch string
	// IfNoneMatch uploads only if no file exists at the path (If-None-Match: *).
	IfNoneMatch bool
	// ModTime, when set, is sent as X-OC-Mtime so Nextcloud shows the local time.
	ModTime time.Time
}

// Client talks to one Nextcloud as the bot account. It is safe for concurrent use.
type Client struct {
	base            *url.URL // Nextcloud base URL
	root            *url.URL // the files endpoint, base + /remote.php/dav/files/<user>/
	rootPath        string   // root's decoded path, with a trailing slash
	hc              *http.Client
	dav             *gowebdav.Client
	user, password  string
	userAgent       string
	timeout         time.Duration
	transferTimeout time.Duration
	// noInfinity remembers that the server refused Depth: infinity, so later
	// recursive listings walk folder by folder straight away.
	noInfinity atomic.Bool
}

// New returns a Client. It does not contact Nextcloud.
func New(opts Options) (*Client, error) {
	base, err := url.Parse(strings.TrimRight(opts.URL, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("webdav: want an http(s) Nextcloud URL, got %q", clip(opts.URL, 100))
	}
	if base.User != nil {
		return nil, errors.New("webdav: the Nextcloud URL must not contain credentials")
	}
	base.RawQuery, base.Fragment = "", ""
	if opts.User == "" || strings.ContainsAny(opts.User, "/\\") || opts.User == "." || opts.User == ".." {
		return nil, fmt.Errorf("webdav: invalid bot user %q", clip(opts.User, 64))
	}
	if opts.Password == "" {
		return nil, errors.New("webdav: the bot account's password is required")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.TransferTimeout <= 0 {
		opts.TransferTimeout = 10 * time.Minute
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "istota-sidecar"
	}
	rt := opts.Transport
	if rt == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = opts.Timeout
		rt = t
	}
	root := *base
	root.Path = base.Path + "/remote.php/dav/files/" + opts.User + "/"
	root.RawPath = ""
	c := &Client{
		base:     base,
		root:     &root,
		rootPath: root.Path,
		hc: &http.Client{
			Transport: rt,
			Jar:       opts.Jar,
			// A redirect would mean a misconfigured URL (http→https, a moved instance);
			// following it could send the credentials elsewhere, so it is an error.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		user:            opts.User,
		password:        opts.Password,
		userAgent:       opts.UserAgent,
		timeout:         opts.Timeout,
		transferTimeout: opts.TransferTimeout,
	}
	c.dav, err = gowebdav.NewClient(davDoer{c}, root.String())
	if err != nil {
		return nil, fmt.Errorf("webdav: %w", err)
	}
	return c, nil
}

// send adds the credentials and sends req.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	req.SetBasicAuth(c.user, c.password)
	req.Header.Set("User-Agent", c.userAgent)
	return c.hc.Do(req)
}

// davDoer is the HTTP client handed to go-webdav: it authenticates, and turns every
// non-2xx answer and transport failure into an *Error before go-webdav sees it, so
// the kinds survive go-webdav's own error handling.
type davDoer struct{ c *Client }

func (d davDoer) Do(req *http.Request) (*http.Response, error) {
	rel := d.c.relFromURL(req.URL)
	resp, err := d.c.send(req)
	if err != nil {
		return nil, transportError(req.Context(), req.Method, rel, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, statusError(req.Method, rel, resp)
	}
	return resp, nil
}

// relFromURL recovers the relative path of a request for error messages.
func (c *Client) relFromURL(u *url.URL) string {
	rel, _ := strings.CutPrefix(u.Path, c.rootPath)
	return strings.Trim(rel, "/")
}

// rel turns a decoded href path from a listing into a root-relative path. Only the
// root prefix and one trailing slash (folders) are removed; nothing is cleaned, so
// ".." or an absolute path outside the root stays visible to ValidatePath.
func (c *Client) rel(href string) string {
	if href == strings.TrimSuffix(c.rootPath, "/") {
		return ""
	}
	rest, ok := strings.CutPrefix(href, c.rootPath)
	if !ok {
		return href
	}
	return strings.TrimSuffix(rest, "/")
}

func (c *Client) fileURL(rel string) string {
	u := *c.root
	u.Path = c.rootPath + rel
	return u.String()
}

// wrap gives an error from a go-webdav call its final form.
func (c *Client) wrap(ctx context.Context, op, rel string, err error) error {
	if err == nil {
		return nil
	}
	var we *Error
	if errors.As(err, &we) {
		return err
	}
	if ctx.Err() != nil {
		return transportError(ctx, op, rel, err)
	}
	// A 2xx answer go-webdav could not make sense of (bad XML, a missing href).
	return &Error{Op: op, Path: rel, cause: err}
}

func (c *Client) fromGo(fi *gowebdav.FileInfo) FileInfo {
	return FileInfo{
		Path:    c.rel(fi.Path),
		IsDir:   fi.IsDir,
		Size:    fi.Size,
		ETag:    fi.ETag,
		ModTime: fi.ModTime,
	}
}

// Stat describes one file or folder.
func (c *Client) Stat(ctx context.Context, name string) (FileInfo, error) {
	rel, err := clean(name)
	if err != nil {
		return FileInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	fi, err := c.dav.Stat(ctx, rel)
	if err != nil {
		return FileInfo{}, c.wrap(ctx, "PROPFIND", rel, err)
	}
	out := c.fromGo(fi)
	// The answer's href may be spelt differently (encoding, Unicode normalisation);
	// it describes what was asked for.
	out.Path = rel
	return out, nil
}

// maxListEntries bounds one recursive listing, so a hostile or broken server cannot
// make the sidecar walk forever.
const maxListEntries = 200000

// ReadDir lists a folder: its direct members, or with recursive everything below it.
// The folder itself is not included. Recursive listings ask for Depth: infinity and
// fall back to walking folder by folder when the server refuses it (Nextcloud can be
// configured to) or silently answers one level only (Sabre's behaviour when it is
// switched off): any folder whose members did not appear is listed on its own.
func (c *Client) ReadDir(ctx context.Context, name string, recursive bool) ([]FileInfo, error) {
	rel, err := clean(name)
	if err != nil {
		return nil, err
	}
	if !recursive {
		return c.list(ctx, rel, false)
	}
	if !c.noInfinity.Load() {
		all, err := c.list(ctx, rel, true)
		if err == nil {
			return c.complete(ctx, rel, all)
		}
		var we *Error
		if !errors.As(err, &we) || (we.Status != http.StatusBadRequest && we.Status != http.StatusForbidden && we.Status != http.StatusNotImplemented) {
			return nil, err
		}
		c.noInfinity.Store(true)
	}
	return c.walk(ctx, rel)
}

// list runs one PROPFIND (Depth 1 or infinity) and drops the folder's own entry.
func (c *Client) list(ctx context.Context, rel string, infinity bool) ([]FileInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	fis, err := c.dav.ReadDir(ctx, rel, infinity)
	if err != nil {
		return nil, c.wrap(ctx, "PROPFIND", rel, err)
	}
	out := make([]FileInfo, 0, len(fis))
	for i := range fis {
		fi := c.fromGo(&fis[i])
		if fi.Path == rel {
			continue
		}
		out = append(out, fi)
	}
	return out, nil
}

// isBelow reports whether p is a valid path strictly inside dir.
func isBelow(p, dir string) bool {
	if ValidatePath(p) != nil {
		return false
	}
	return dir == "" || strings.HasPrefix(p, dir+"/")
}

// complete lists, one by one, the folders of a Depth: infinity answer whose members
// are missing from it.
func (c *Client) complete(ctx context.Context, rel string, all []FileInfo) ([]FileInfo, error) {
	hasMembers := map[string]bool{}
	for _, fi := range all {
		if isBelow(fi.Path, rel) {
			hasMembers[path.Dir(fi.Path)] = true
		}
	}
	out := all
	for _, fi := range all {
		if !fi.IsDir || !isBelow(fi.Path, rel) || hasMembers[fi.Path] {
			continue
		}
		sub, err := c.walk(ctx, fi.Path)
		if err != nil {
			return nil, err
		}
		out = append(out, sub...)
		if len(out) > maxListEntries {
			return nil, &Error{Op: "PROPFIND", Path: rel, cause: fmt.Errorf("more than %d entries", maxListEntries)}
		}
	}
	return out, nil
}

// walk lists a tree with Depth 1 requests.
func (c *Client) walk(ctx context.Context, rel string) ([]FileInfo, error) {
	var out []FileInfo
	queue := []string{rel}
	seen := map[string]bool{rel: true}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		fis, err := c.list(ctx, dir, false)
		if err != nil {
			return nil, err
		}
		for _, fi := range fis {
			out = append(out, fi)
			if fi.IsDir && isBelow(fi.Path, dir) && !seen[fi.Path] {
				seen[fi.Path] = true
				queue = append(queue, fi.Path)
			}
		}
		if len(out) > maxListEntries {
			return nil, &Error{Op: "PROPFIND", Path: rel, cause: fmt.Errorf("more than %d entries", maxListEntries)}
		}
	}
	return out, nil
}

// Open starts downloading a file. The caller reads and closes the Object; the
// transfer is bounded by TransferTimeout.
func (c *Client) Open(ctx context.Context, name string) (*Object, error) {
	rel, err := clean(name)
	if err != nil {
		return nil, err
	}
	if rel == "" {
		return nil, fmt.Errorf("%w: cannot download the root", ErrBadPath)
	}
	ctx, cancel := context.WithTimeout(ctx, c.transferTimeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.fileURL(rel), nil)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("webdav GET %s: %w", rel, err)
	}
	resp, err := c.send(req)
	if err != nil {
		err = transportError(ctx, "GET", rel, err)
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		return nil, statusError("GET", rel, resp)
	}
	return &Object{
		ReadCloser: &cancelOnClose{ReadCloser: resp.Body, cancel: cancel},
		ETag:       parseETag(resp.Header.Get("ETag")),
		Size:       resp.ContentLength,
	}, nil
}

// cancelOnClose releases the transfer's context when the body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// Put uploads body (size bytes, or -1 when unknown) to name, replacing what is there
// unless opts make it conditional. It returns the new ETag Nextcloud answers with, or
// "" when the server sent none (the caller then treats the remote as changed next time,
// which costs a download but can never hide someone else's edit).
func (c *Client) Put(ctx context.Context, name string, body io.Reader, size int64, opts PutOptions) (string, error) {
	rel, err := clean(name)
	if err != nil {
		return "", err
	}
	if rel == "" {
		return "", fmt.Errorf("%w: cannot upload to the root", ErrBadPath)
	}
	ctx, cancel := context.WithTimeout(ctx, c.transferTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.fileURL(rel), body)
	if err != nil {
		return "", fmt.Errorf("webdav PUT %s: %w", rel, err)
	}
	if size >= 0 {
		req.ContentLength = size
		if size == 0 {
			req.Body = http.NoBody
		}
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if opts.IfMatch != "" {
		req.Header.Set("If-Match", quoteETag(opts.IfMatch))
	}
	if opts.IfNoneMatch {
		req.Header.Set("If-None-Match", "*")
	}
	if !opts.ModTime.IsZero() {
		req.Header.Set("X-OC-Mtime", strconv.FormatInt(opts.ModTime.Unix(), 10))
	}
	resp, err := c.send(req)
	if err != nil {
		return "", transportError(ctx, "PUT", rel, err)
	}
	if resp.StatusCode/100 != 2 {
		return "", statusError("PUT", rel, resp)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	// Nextcloud sends both; OC-ETag survives proxies that strip or weaken ETag.
	if e := resp.Header.Get("OC-ETag"); e != "" {
		return parseETag(e), nil
	}
	return parseETag(resp.Header.Get("ETag")), nil
}

// Mkdir creates one folder (MKCOL). A folder that already exists is not an error.
func (c *Client) Mkdir(ctx context.Context, name string) error {
	rel, err := clean(name)
	if err != nil {
		return err
	}
	if rel == "" {
		return nil
	}
	mctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	err = c.dav.Mkdir(mctx, rel)
	if err == nil {
		return nil
	}
	err = c.wrap(mctx, "MKCOL", rel, err)
	var we *Error
	if !errors.As(err, &we) || we.Status == 0 {
		return err
	}
	// Nextcloud answers 405 for an existing folder, other servers differ: whatever the
	// refusal, an existing folder is success.
	if fi, serr := c.Stat(ctx, rel); serr == nil && fi.IsDir {
		return nil
	}
	if we.Status == http.StatusConflict {
		// The parent is missing (RFC 4918 §9.3.1).
		we.kind = ErrNotFound
	}
	return err
}

// MkdirAll creates a folder and any missing parents.
func (c *Client) MkdirAll(ctx context.Context, name string) error {
	rel, err := clean(name)
	if err != nil {
		return err
	}
	if rel == "" {
		return nil
	}
	err = c.Mkdir(ctx, rel)
	if err == nil || !errors.Is(err, ErrNotFound) {
		return err
	}
	if parent := path.Dir(rel); parent != "." {
		if err := c.MkdirAll(ctx, parent); err != nil {
			return err
		}
	}
	return c.Mkdir(ctx, rel)
}

// Move renames a file or folder. Without overwrite an existing destination fails with
// ErrPreconditionFailed.
func (c *Client) Move(ctx context.Context, from, to string, overwrite bool) error {
	src, err := clean(from)
	if err != nil {
		return err
	}
	dst, err := clean(to)
	if err != nil {
		return err
	}
	if src == "" || dst == "" {
		return fmt.Errorf("%w: cannot move the root", ErrBadPath)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	err = c.dav.Move(ctx, src, dst, &gowebdav.MoveOptions{NoOverwrite: !overwrite})
	return c.wrap(ctx, "MOVE", src, err)
}

// RemoveAll deletes a file, or a folder with everything in it.
func (c *Client) RemoveAll(ctx context.Context, name string) error {
	rel, err := clean(name)
	if err != nil {
		return err
	}
	if rel == "" {
		return fmt.Errorf("%w: refusing to delete the root", ErrBadPath)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return c.wrap(ctx, "DELETE", rel, c.dav.RemoveAll(ctx, rel))
}

// Delete deletes a file only if it still has the ETag ifMatch (unquoted); otherwise it
// fails with ErrPreconditionFailed and the file stays. An empty ifMatch deletes
// unconditionally, like RemoveAll.
func (c *Client) Delete(ctx context.Context, name, ifMatch string) error {
	if ifMatch == "" {
		return c.RemoveAll(ctx, name)
	}
	rel, err := clean(name)
	if err != nil {
		return err
	}
	if rel == "" {
		return fmt.Errorf("%w: refusing to delete the root", ErrBadPath)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.fileURL(rel), nil)
	if err != nil {
		return fmt.Errorf("webdav DELETE %s: %w", rel, err)
	}
	req.Header.Set("If-Match", quoteETag(ifMatch))
	resp, err := c.send(req)
	if err != nil {
		return transportError(ctx, "DELETE", rel, err)
	}
	if resp.StatusCode/100 != 2 {
		return statusError("DELETE", rel, resp)
	}
	resp.Body.Close()
	return nil
}

// parseETag turns a header value (`"abc"`, `W/"abc"`) into the bare tag, the form
// PROPFIND listings give.
func parseETag(h string) string {
	h = strings.TrimPrefix(strings.TrimSpace(h), "W/")
	if s, err := strconv.Unquote(h); err == nil {
		return s
	}
	return strings.Trim(h, `"`)
}

func quoteETag(e string) string { return `"` + e + `"` }
