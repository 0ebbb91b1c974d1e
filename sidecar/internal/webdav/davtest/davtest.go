// Package davtest runs a real WebDAV server on loopback for tests: go-webdav's own
// server (webdav.Handler over a webdav.LocalFileSystem in a temporary directory) at
// Nextcloud's path /remote.php/dav/files/<bot>/, behind basic auth, plus a small
// OCS sharing endpoint that answers in Nextcloud's JSON envelope.
//
// Where go-webdav's server differs from Nextcloud (Sabre) in ways the sidecar relies
// on, the server here behaves like Nextcloud:
//   - ETags change with the content (LocalFileSystem derives them from mtime and size,
//     which can repeat within one clock tick);
//   - If-Match / If-None-Match on PUT and DELETE are enforced with 412, as Sabre's
//     Server::checkPreconditions does (go-webdav's file server ignores them);
//   - MKCOL on an existing folder answers 405 (go-webdav answers 500);
//   - optionally, Depth: infinity is refused (400) or silently served as Depth 1,
//     the two ways a Nextcloud with infinity disabled behaves.
package davtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	gowebdav "github.com/emersion/go-webdav"
)

// Depth: infinity behaviours.
const (
	InfinityServe   = ""        // answer it (go-webdav's default)
	InfinityRefuse  = "refuse"  // 400 Bad Request
	InfinityDegrade = "degrade" // answer as Depth 1, like Sabre with infinity off
)

// Options configures a Server.
type Options struct {
	BotUser     string   // default "istota"
	BotPassword string   // default "bot-app-password"
	Users       []string // accounts that exist (may be shared with); the bot always exists
	Infinity    string   // InfinityServe, InfinityRefuse or InfinityDegrade
	// NoFolderETags answers PROPFIND without folder ETags, as a server other than
	// Nextcloud (or a proxy that drops them) may; by default folders carry ETags that
	// change whenever anything below them changes, as Nextcloud's do.
	NoFolderETags bool
}

// Share is a share held by the fake OCS endpoint.
type Share struct {
	ID          string
	Path        string
	ShareType   int
	ShareWith   string
	Permissions int
	// Pending is a share Nextcloud stored but did not accept for the recipient
	// (oc_share.accepted = 0): the owner lists it, the recipient's files lack it.
	Pending bool
}

// IncomingShare is a share another user made with the bot, held by the fake OCS
// endpoint. Path follows MOVEs of the mounted file or folder, as Nextcloud's node id does.
type IncomingShare struct {
	ID    string
	Owner string // uid_owner
	Path  string // where the bot sees it, with a leading slash
}

// Server is a running WebDAV + OCS server.
type Server struct {
	// URL is the Nextcloud base URL to give the client.
	URL string
	// Root is the bot's files root on disk: what /remote.php/dav/files/<bot>/ serves.
	Root string

	t      testing.TB
	opts   Options
	dir    string
	prefix string
	addr   string

	mu         sync.Mutex
	hs         *httptest.Server
	shares     []Share
	incoming   []IncomingShare
	nextID     int
	requests   []string
	beforeHook func(r *http.Request)
	failHook   func(r *http.Request) int
	halfShares int
	inject     []string
}

// New starts a server; it is closed when the test ends.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.BotUser == "" {
		opts.BotUser = "istota"
	}
	if opts.BotPassword == "" {
		opts.BotPassword = "bot-app-password"
	}
	dir := t.TempDir()
	s := &Server{t: t, opts: opts, dir: dir, prefix: "/remote.php/dav/files/" + opts.BotUser, nextID: 1}
	s.Root = filepath.Join(dir, "remote.php", "dav", "files", opts.BotUser)
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.start(ln)
	t.Cleanup(s.Close)
	return s
}

func (s *Server) start(ln net.Listener) {
	hs := httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	s.mu.Lock()
	s.hs = hs
	s.URL = hs.URL
	s.mu.Unlock()
}

// Close stops the server: clients get "connection refused" until Restart.
func (s *Server) Close() {
	s.mu.Lock()
	hs := s.hs
	s.hs = nil
	s.mu.Unlock()
	if hs != nil {
		hs.CloseClientConnections()
		hs.Close()
	}
}

// Restart serves the same files again on the same address.
func (s *Server) Restart() {
	s.t.Helper()
	var ln net.Listener
	var err error
	// The port was ours a moment ago; Go listeners set SO_REUSEADDR, so this only
	// fails if another process grabbed it meanwhile.
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
	}
	if err != nil {
		s.t.Fatalf("davtest: listen again on %s: %v", s.addr, err)
	}
	s.start(ln)
}

// BeforeRequest installs a hook run before each authenticated request is served, e.g.
// to change a file "meanwhile". nil removes it.
func (s *Server) BeforeRequest(f func(r *http.Request)) {
	s.mu.Lock()
	s.beforeHook = f
	s.mu.Unlock()
}

// FailWith makes requests for which f returns a status other than 0 fail with that
// status (and a Sabre error body) instead of being served. nil removes it.
func (s *Server) FailWith(f func(r *http.Request) int) {
	s.mu.Lock()
	s.failHook = f
	s.mu.Unlock()
}

// InjectPropfind adds raw <response> elements (in the DAV: default namespace) to every
// PROPFIND answer: the way to serve names no file system can hold.
func (s *Server) InjectPropfind(responses ...string) {
	s.mu.Lock()
	s.inject = append([]string(nil), responses...)
	s.mu.Unlock()
}

// Requests returns "METHOD path" ("PROPFIND path depth=N") for every authenticated
// request so far, and forgets them.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.requests
	s.requests = nil
	return out
}

// AddShare records a share as if it had been made through Nextcloud's UI.
func (s *Server) AddShare(p, uid string, permissions int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shares = append(s.shares, Share{ID: strconv.Itoa(s.nextID), Path: "/" + strings.Trim(p, "/"), ShareType: 0, ShareWith: uid, Permissions: permissions})
	s.nextID++
}

// LeaveSharePending sets uid's shares back to pending, as a half-made share was left
// before the sidecar knew to complete it.
func (s *Server) LeaveSharePending(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.shares {
		if s.shares[i].ShareWith == uid {
			s.shares[i].Pending = true
		}
	}
}

// HalfMakeShares makes the next n share posts fail as Nextcloud's do when a listener
// between storing the share and accepting it throws (SQLite's "database is locked"):
// the share is stored, or kept, pending, and the post is answered 403.
func (s *Server) HalfMakeShares(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.halfShares = n
}

// RemoveSharesWith deletes every share made with uid, as an admin's removal or the user
// leaving the share in Files does.
func (s *Server) RemoveSharesWith(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.shares[:0]
	for _, sh := range s.shares {
		if sh.ShareWith != uid {
			kept = append(kept, sh)
		}
	}
	s.shares = kept
}

// AddIncomingShare records that owner shared something with the bot, mounted at p in
// the bot's root. Create the file or folder itself with WriteFile or os.MkdirAll on
// Path(p). p is stored as given, so a test can serve a hostile path.
func (s *Server) AddIncomingShare(p, owner string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := strconv.Itoa(s.nextID)
	s.nextID++
	s.incoming = append(s.incoming, IncomingShare{ID: id, Owner: owner, Path: "/" + strings.TrimPrefix(p, "/")})
	return id
}

// IncomingShares returns the shares made with the bot, with their current paths.
func (s *Server) IncomingShares() []IncomingShare {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]IncomingShare(nil), s.incoming...)
}

// Shares returns the shares held by the OCS endpoint.
func (s *Server) Shares() []Share {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Share(nil), s.shares...)
}

// Path maps a root-relative path to the file on disk.
func (s *Server) Path(rel string) string {
	return filepath.Join(s.Root, filepath.FromSlash(rel))
}

// WriteFile writes a file as a Nextcloud user editing in Files would.
func (s *Server) WriteFile(rel, content string) {
	s.t.Helper()
	p := s.Path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// ReadFile returns a file's content, or "" and false when it does not exist.
func (s *Server) ReadFile(rel string) (string, bool) {
	b, err := os.ReadFile(s.Path(rel))
	if err != nil {
		return "", false
	}
	return string(b), true
}

// Remove deletes a file or folder as a user would.
func (s *Server) Remove(rel string) {
	s.t.Helper()
	if err := os.RemoveAll(s.Path(rel)); err != nil {
		s.t.Fatal(err)
	}
}

// Snapshot maps every path under rel (files and folders, folders with a trailing
// slash) to its content hash, to compare a tree before and after.
func (s *Server) Snapshot(rel string) map[string]string {
	s.t.Helper()
	out := map[string]string{}
	base := s.Path(rel)
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(base, p)
		r = filepath.ToSlash(r)
		if r == "." {
			return nil
		}
		if d.IsDir() {
			out[r+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[r] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.t.Fatal(err)
	}
	return out
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	user, pass, ok := r.BasicAuth()
	if !ok || user != s.opts.BotUser || subtle.ConstantTimeCompare([]byte(pass), []byte(s.opts.BotPassword)) != 1 {
		w.Header().Set("WWW-Authenticate", `Basic realm="Nextcloud", charset="UTF-8"`)
		w.Header().Set("Content-Type", "application/xml; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `<?xml version="1.0" encoding="utf-8"?>
<d:error xmlns:d="DAV:" xmlns:s="http://sabredav.org/ns"><s:exception>Sabre\DAV\Exception\NotAuthenticated</s:exception><s:message>No public access to this resource., Username or password was incorrect</s:message></d:error>`)
		return
	}
	s.mu.Lock()
	entry := r.Method + " " + r.URL.Path
	if r.Method == "PROPFIND" {
		entry += " depth=" + r.Header.Get("Depth")
	}
	s.requests = append(s.requests, entry)
	hook, fail := s.beforeHook, s.failHook
	s.mu.Unlock()
	if hook != nil {
		hook(r)
	}
	if fail != nil {
		if status := fail(r); status != 0 {
			sabreError(w, status, "ServiceUnavailable", http.StatusText(status))
			return
		}
	}
	switch {
	case r.URL.Path == "/ocs/v2.php/apps/files_sharing/api/v1/shares":
		s.serveShares(w, r)
	case r.URL.Path == s.prefix || strings.HasPrefix(r.URL.Path, s.prefix+"/"):
		s.serveDAV(w, r)
	default:
		http.NotFound(w, r)
	}
}

func sabreError(w http.ResponseWriter, status int, exception, message string) {
	w.Header().Set("Content-Type", "application/xml; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="utf-8"?>
<d:error xmlns:d="DAV:" xmlns:s="http://sabredav.org/ns"><s:exception>Sabre\DAV\Exception\%s</s:exception><s:message>%s</s:message></d:error>`, exception, message)
}

func (s *Server) serveDAV(w http.ResponseWriter, r *http.Request) {
	fsys := etagFS{gowebdav.LocalFileSystem(s.dir)}
	if r.Method == http.MethodPut || r.Method == http.MethodDelete {
		fi, err := fsys.Stat(r.Context(), r.URL.Path)
		exists := err == nil
		if im := r.Header.Get("If-Match"); im != "" {
			if !exists {
				sabreError(w, http.StatusPreconditionFailed, "PreconditionFailed", "An If-Match header was specified, but none of the specified ETags matched.")
				return
			}
			if !etagListHas(im, fi.ETag) {
				sabreError(w, http.StatusPreconditionFailed, "PreconditionFailed", "An If-Match header was specified, but none of the specified ETags matched.")
				return
			}
		}
		if inm := r.Header.Get("If-None-Match"); inm != "" && exists && (strings.TrimSpace(inm) == "*" || etagListHas(inm, fi.ETag)) {
			sabreError(w, http.StatusPreconditionFailed, "PreconditionFailed", "An If-None-Match header was specified, but the ETag matched (or * was specified).")
			return
		}
	}
	if r.Method == "MKCOL" {
		if _, err := fsys.Stat(r.Context(), r.URL.Path); err == nil {
			sabreError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "The resource you tried to create already exists")
			return
		}
	}
	if r.Method == "PROPFIND" && strings.EqualFold(r.Header.Get("Depth"), "infinity") {
		switch s.opts.Infinity {
		case InfinityRefuse:
			sabreError(w, http.StatusBadRequest, "BadRequest", "Depth infinity is not supported")
			return
		case InfinityDegrade:
			r.Header.Set("Depth", "1")
		}
	}
	h := &gowebdav.Handler{FileSystem: fsys}
	if r.Method == "PROPFIND" && !s.opts.NoFolderETags {
		h = nil
	}
	if h == nil {
		s.servePropfind(w, r, fsys)
		return
	}
	if r.Method == "MOVE" {
		s.serveMove(w, r, h)
		return
	}
	s.mu.Lock()
	inject := s.inject
	s.mu.Unlock()
	if r.Method != "PROPFIND" || len(inject) == 0 {
		h.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	if rec.Code == http.StatusMultiStatus {
		if i := bytes.LastIndex(body, []byte("</")); i >= 0 {
			body = append(append(append([]byte(nil), body[:i]...), []byte(strings.Join(inject, ""))...), body[i:]...)
		}
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(rec.Code)
	w.Write(body)
}

// serveMove moves a file and, like Nextcloud moving a share mount, makes incoming
// shares at or below the source follow it.
func (s *Server) serveMove(w http.ResponseWriter, r *http.Request, h http.Handler) {
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	h.ServeHTTP(rec, r)
	if rec.status/100 != 2 {
		return
	}
	dst, err := url.Parse(r.Header.Get("Destination"))
	if err != nil {
		return
	}
	from := strings.TrimPrefix(strings.TrimRight(r.URL.Path, "/"), s.prefix)
	to := strings.TrimPrefix(strings.TrimRight(dst.Path, "/"), s.prefix)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, in := range s.incoming {
		if in.Path == from || strings.HasPrefix(in.Path, from+"/") {
			s.incoming[i].Path = to + strings.TrimPrefix(in.Path, from)
		}
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func etagListHas(header, etag string) bool {
	for _, part := range strings.Split(header, ",") {
		part = strings.TrimSpace(part)
		if part == "*" {
			return true
		}
		if uq, err := strconv.Unquote(strings.TrimPrefix(part, "W/")); err == nil && uq == etag {
			return true
		}
	}
	return false
}

// etagFS gives content-derived ETags (Nextcloud's change on every write; a content
// hash is the closest a file system fake can get without a database) and answers
// MKCOL on an existing folder as Nextcloud does.
type etagFS struct{ gowebdav.LocalFileSystem }

func (f etagFS) withETag(fi *gowebdav.FileInfo) {
	if fi.IsDir {
		return
	}
	p := filepath.Join(string(f.LocalFileSystem), filepath.FromSlash(path.Clean(fi.Path)))
	b, err := os.ReadFile(p)
	if err != nil {
		return
	}
	sum := sha256.Sum256(b)
	fi.ETag = hex.EncodeToString(sum[:12])
}

func (f etagFS) Stat(ctx context.Context, name string) (*gowebdav.FileInfo, error) {
	fi, err := f.LocalFileSystem.Stat(ctx, name)
	if err != nil {
		return nil, err
	}
	f.withETag(fi)
	return fi, nil
}

func (f etagFS) ReadDir(ctx context.Context, name string, recursive bool) ([]gowebdav.FileInfo, error) {
	fis, err := f.LocalFileSystem.ReadDir(ctx, name, recursive)
	for i := range fis {
		f.withETag(&fis[i])
	}
	return fis, err
}

func (f etagFS) Create(ctx context.Context, name string, body io.ReadCloser) (*gowebdav.FileInfo, bool, error) {
	fi, created, err := f.LocalFileSystem.Create(ctx, name, body)
	if err != nil {
		return nil, false, err
	}
	f.withETag(fi)
	return fi, created, nil
}

// --- OCS sharing ---------------------------------------------------------------

type ocsMeta struct {
	Status       string `json:"status"`
	StatusCode   int    `json:"statuscode"`
	Message      string `json:"message"`
	TotalItems   string `json:"totalitems"`
	ItemsPerPage string `json:"itemsperpage"`
}

// writeOCS answers in the OCS v2 envelope: the HTTP status equals the OCS status code
// (lib/private/AppFramework/OCS/V2Response.php), and failures carry "data": [].
func writeOCS(w http.ResponseWriter, status int, message string, data any) {
	meta := ocsMeta{Status: "ok", StatusCode: status, Message: "OK"}
	if status >= 300 {
		meta.Status = "failure"
		meta.Message = message
		data = []any{}
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"ocs": map[string]any{"meta": meta, "data": data}})
}

func (s *Server) formatShare(sh Share) map[string]any {
	st, _ := os.Stat(s.Path(strings.TrimPrefix(sh.Path, "/")))
	itemType := "file"
	if st != nil && st.IsDir() {
		itemType = "folder"
	}
	return map[string]any{
		"id":                     sh.ID,
		"share_type":             sh.ShareType,
		"uid_owner":              s.opts.BotUser,
		"displayname_owner":      s.opts.BotUser,
		"permissions":            sh.Permissions,
		"can_edit":               true,
		"can_delete":             true,
		"stime":                  1700000000,
		"parent":                 nil,
		"expiration":             nil,
		"token":                  nil,
		"uid_file_owner":         s.opts.BotUser,
		"note":                   "",
		"label":                  "",
		"displayname_file_owner": s.opts.BotUser,
		"path":                   sh.Path,
		"item_type":              itemType,
		"mimetype":               "httpd/unix-directory",
		"file_target":            "/" + path.Base(sh.Path),
		"share_with":             sh.ShareWith,
		"share_with_displayname": sh.ShareWith,
		"mail_send":              0,
		"hide_download":          0,
		"attributes":             nil,
	}
}

// formatIncoming describes a share made with the bot as Nextcloud does for
// ?shared_with_me=true: "path" and "file_target" are where the bot sees it.
func (s *Server) formatIncoming(in IncomingShare) map[string]any {
	itemType := "file"
	if ValidRel(strings.Trim(in.Path, "/")) == nil {
		if st, err := os.Stat(s.Path(strings.Trim(in.Path, "/"))); err == nil && st.IsDir() {
			itemType = "folder"
		}
	}
	return map[string]any{
		"id":                     in.ID,
		"share_type":             0,
		"uid_owner":              in.Owner,
		"displayname_owner":      in.Owner,
		"uid_file_owner":         in.Owner,
		"displayname_file_owner": in.Owner,
		"permissions":            31,
		"stime":                  1700000000,
		"parent":                 nil,
		"expiration":             nil,
		"token":                  nil,
		"path":                   in.Path,
		"item_type":              itemType,
		"file_target":            in.Path,
		"share_with":             s.opts.BotUser,
		"share_with_displayname": s.opts.BotUser,
		"mail_send":              0,
	}
}

func (s *Server) serveShares(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("OCS-APIRequest") != "true" {
		// What Nextcloud's SecurityMiddleware does to a basic-auth request without it.
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusPreconditionFailed)
		io.WriteString(w, `{"message":"CSRF check failed"}`)
		return
	}
	if r.URL.Query().Get("format") != "json" && !strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "text/xml; charset=UTF-8")
		io.WriteString(w, `<?xml version="1.0"?><ocs><meta><status>ok</status><statuscode>200</statuscode><message>OK</message></meta><data/></ocs>`)
		return
	}
	exists := func(p string) bool {
		rel := strings.Trim(p, "/")
		if rel == "" || ValidRel(rel) != nil {
			return false
		}
		_, err := os.Stat(s.Path(rel))
		return err == nil
	}
	switch r.Method {
	case http.MethodGet:
		if r.URL.Query().Get("shared_with_me") == "true" {
			s.mu.Lock()
			out := []map[string]any{}
			for _, in := range s.incoming {
				out = append(out, s.formatIncoming(in))
			}
			s.mu.Unlock()
			writeOCS(w, http.StatusOK, "", out)
			return
		}
		p := r.URL.Query().Get("path")
		if p != "" && !exists(p) {
			writeOCS(w, http.StatusNotFound, "Wrong path, file/folder does not exist", nil)
			return
		}
		s.mu.Lock()
		out := []map[string]any{}
		for _, sh := range s.shares {
			if p == "" || strings.TrimRight(sh.Path, "/") == "/"+strings.Trim(p, "/") {
				out = append(out, s.formatShare(sh))
			}
		}
		s.mu.Unlock()
		writeOCS(w, http.StatusOK, "", out)
	case http.MethodPost:
		var in struct {
			Path        *string `json:"path"`
			ShareType   *int    `json:"shareType"`
			ShareWith   *string `json:"shareWith"`
			Permissions *int    `json:"permissions"`
		}
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
				writeOCS(w, http.StatusBadRequest, "bad JSON", nil)
				return
			}
		} else {
			r.ParseForm()
			if v := r.Form.Get("path"); v != "" {
				in.Path = &v
			}
			if v, err := strconv.Atoi(r.Form.Get("shareType")); err == nil {
				in.ShareType = &v
			}
			if v := r.Form.Get("shareWith"); v != "" {
				in.ShareWith = &v
			}
			if v, err := strconv.Atoi(r.Form.Get("permissions")); err == nil {
				in.Permissions = &v
			}
		}
		if in.Path == nil {
			writeOCS(w, http.StatusNotFound, "Please specify a file or folder path", nil)
			return
		}
		if !exists(*in.Path) {
			writeOCS(w, http.StatusNotFound, "Wrong path, file/folder does not exist", nil)
			return
		}
		if in.ShareType == nil || *in.ShareType != 0 {
			writeOCS(w, http.StatusBadRequest, "Unknown share type", nil)
			return
		}
		perms := 31
		if in.Permissions != nil {
			perms = *in.Permissions
		}
		if perms < 0 || perms > 31 {
			writeOCS(w, http.StatusNotFound, "invalid permissions", nil)
			return
		}
		perms |= 1
		if in.ShareWith == nil || !s.userExists(*in.ShareWith) {
			writeOCS(w, http.StatusNotFound, "Please specify a valid account to share with", nil)
			return
		}
		p := "/" + strings.Trim(*in.Path, "/")
		// Nextcloud 31 stores a new user share as pending and accepts it in a listener
		// of ShareCreatedEvent. An identical share is answered with the existing one,
		// its permissions untouched, after the same listeners ran again.
		s.mu.Lock()
		i := slices.IndexFunc(s.shares, func(sh Share) bool {
			return sh.Path == p && sh.ShareType == 0 && sh.ShareWith == *in.ShareWith
		})
		if i < 0 {
			s.shares = append(s.shares, Share{ID: strconv.Itoa(s.nextID), Path: p, ShareType: 0, ShareWith: *in.ShareWith, Permissions: perms, Pending: true})
			s.nextID++
			i = len(s.shares) - 1
		}
		if s.halfShares > 0 {
			s.halfShares--
			s.mu.Unlock()
			writeOCS(w, http.StatusForbidden, "An exception occurred while executing a query: SQLSTATE[HY000]: General error: 5 database is locked", nil)
			return
		}
		s.shares[i].Pending = false
		sh := s.shares[i]
		s.mu.Unlock()
		writeOCS(w, http.StatusOK, "", s.formatShare(sh))
	default:
		writeOCS(w, http.StatusMethodNotAllowed, "Method not allowed", nil)
	}
}

func (s *Server) userExists(uid string) bool {
	if uid == s.opts.BotUser {
		return true
	}
	for _, u := range s.opts.Users {
		if u == uid {
			return true
		}
	}
	return false
}

// ValidRel rejects paths that would leave the root; the fake must not be the weak spot
// of a test about hostile names.
func ValidRel(rel string) error {
	for _, seg := range strings.Split(rel, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("bad path %q", rel)
		}
	}
	return nil
}

// Tree lists the files under rel on the server's disk, sorted, folders with a
// trailing slash.
func (s *Server) Tree(rel string) []string {
	snap := s.Snapshot(rel)
	out := make([]string, 0, len(snap))
	for k := range snap {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// servePropfind answers PROPFIND as Nextcloud does, folder ETags included: a folder's
// ETag is derived from everything below it, so it changes whenever anything below it
// does (Nextcloud propagates ETags up the tree). Every property a sync asks for is
// answered; injected responses (Inject) are appended.
func (s *Server) servePropfind(w http.ResponseWriter, r *http.Request, fsys etagFS) {
	local := filepath.Join(s.dir, filepath.FromSlash(path.Clean(r.URL.Path)))
	fi, err := os.Stat(local)
	if err != nil {
		sabreError(w, http.StatusNotFound, "NotFound", "File with name "+r.URL.Path+" could not be located")
		return
	}
	depth := strings.ToLower(r.Header.Get("Depth"))
	self := path.Clean(r.URL.Path)
	type entry struct {
		href string
		fi   os.FileInfo
		path string
	}
	entries := []entry{{self, fi, local}}
	if fi.IsDir() && depth != "0" {
		err := filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == local {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(s.dir, p)
			entries = append(entries, entry{"/" + filepath.ToSlash(rel), info, p})
			if d.IsDir() && depth == "1" {
				return fs.SkipDir
			}
			return nil
		})
		if err != nil {
			sabreError(w, http.StatusInternalServerError, "ServiceUnavailable", err.Error())
			return
		}
	}
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="utf-8"?>` + "\n" + `<multistatus xmlns="DAV:">`)
	for _, e := range entries {
		href := (&url.URL{Path: e.href}).EscapedPath()
		var props string
		if e.fi.IsDir() {
			href += "/"
			props = "<resourcetype><collection/></resourcetype><getetag>&quot;" + folderETag(e.path) + "&quot;</getetag>"
		} else {
			fsi := &gowebdav.FileInfo{Path: e.href}
			fsys.withETag(fsi)
			props = fmt.Sprintf("<resourcetype/><getetag>&quot;%s&quot;</getetag><getcontentlength>%d</getcontentlength>", fsi.ETag, e.fi.Size())
		}
		props += "<getlastmodified>" + e.fi.ModTime().UTC().Format(http.TimeFormat) + "</getlastmodified>"
		fmt.Fprintf(&b, "<response><href>%s</href><propstat><prop>%s</prop><status>HTTP/1.1 200 OK</status></propstat></response>", html.EscapeString(href), props)
	}
	s.mu.Lock()
	b.WriteString(strings.Join(s.inject, ""))
	s.mu.Unlock()
	b.WriteString("</multistatus>")
	w.Header().Set("Content-Type", "application/xml; charset=utf-8")
	w.WriteHeader(http.StatusMultiStatus)
	io.WriteString(w, b.String())
}

// folderETag hashes the names and contents of everything below dir.
func folderETag(dir string) string {
	h := sha256.New()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s\x00%t\x00", rel, d.IsDir())
		if d.Type().IsRegular() {
			if b, err := os.ReadFile(p); err == nil {
				h.Write(b)
			}
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)[:12])
}
