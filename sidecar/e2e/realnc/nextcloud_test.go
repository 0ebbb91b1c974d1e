// Package realnc proves Istota against a real Nextcloud 31 with Talk 21: the app from the
// `make appstore` tarball in custom_apps, `occ istota:setup`, the tarball's own sidecar
// binary, the real claude CLI in bwrap against a scripted model API, and users who talk
// to the bot over Nextcloud's HTTP APIs only, as their browsers and clients would.
//
// The tests run when `make test-nextcloud` provides ISTOTA_NEXTCLOUD_BUNDLE (a folder
// with serve.sh, like ../shared/nextcloud) and ISTOTA_APPSTORE_TARBALL; otherwise they
// skip and say why.
package realnc

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// sharesAPI is Nextcloud's OCS sharing endpoint.
const sharesAPI = "/ocs/v2.php/apps/files_sharing/api/v1/shares"

// Passwords of the users serve.sh creates.
var passwords = map[string]string{
	"admin": "Admin-Test-Pass-2026!",
	"alice": "Alice-Test-Pass-2026!",
	"bob":   "Bob-Test-Pass-2026!",
}

// nextcloud is one running Nextcloud started by serve.sh.
type nextcloud struct {
	t      testing.TB
	bundle string // the folder with serve.sh
	root   string // serve.sh's DIR
	URL    string
	Dir    string // the server folder (occ, custom_apps)
	client *http.Client
	// sessions are each user's client with its own cookie jar, as each user's browser
	// or app keeps its Nextcloud session (without it every request pays for a password
	// hash check on the server, which no real client does).
	mu       sync.Mutex
	sessions map[string]*http.Client
	known    map[string]string // passwords learned during the run (knowPassword)
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startNextcloud unpacks, installs and starts a Nextcloud in root on a free port.
func startNextcloud(t testing.TB, bundle, root string) *nextcloud {
	t.Helper()
	nc := &nextcloud{t: t, bundle: bundle, root: root, client: &http.Client{Timeout: 60 * time.Second}, sessions: map[string]*http.Client{}}
	out, err := exec.Command("bash", filepath.Join(bundle, "serve.sh"), root, strconv.Itoa(freePort(t))).CombinedOutput()
	if err != nil {
		t.Fatalf("serve.sh: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "NEXTCLOUD_URL="); ok {
			nc.URL = v
		}
		if v, ok := strings.CutPrefix(line, "NEXTCLOUD_DIR="); ok {
			nc.Dir = v
		}
	}
	if nc.URL == "" || nc.Dir == "" {
		t.Fatalf("serve.sh did not say where Nextcloud runs:\n%s", out)
	}
	return nc
}

// stop ends the PHP server (serve.sh --stop); start brings it back on the same port.
func (nc *nextcloud) stop() {
	if out, err := exec.Command("bash", filepath.Join(nc.bundle, "serve.sh"), "--stop", nc.root).CombinedOutput(); err != nil {
		nc.t.Logf("serve.sh --stop: %v\n%s", err, out)
	}
}

func (nc *nextcloud) start() {
	u, _ := url.Parse(nc.URL)
	out, err := exec.Command("bash", filepath.Join(nc.bundle, "serve.sh"), nc.root, u.Port()).CombinedOutput()
	if err != nil {
		nc.t.Fatalf("serve.sh (restart): %v\n%s", err, out)
	}
}

// occ runs `php occ args…` in the server folder and returns its combined output. The
// test server's database is SQLite: while the sidecar keeps Nextcloud busy (a first sync
// of 10,000 files) a write can find it locked, so such a failure is tried again a few
// times, as an admin would.
func (nc *nextcloud) occ(args ...string) (string, error) {
	for attempt := 1; ; attempt++ {
		cmd := exec.Command("php", append([]string{"occ"}, args...)...)
		cmd.Dir = nc.Dir
		out, err := cmd.CombinedOutput()
		if err == nil || attempt == 5 || !strings.Contains(string(out), "database is locked") {
			return string(out), err
		}
		time.Sleep(time.Duration(attempt) * time.Second)
	}
}

func (nc *nextcloud) mustOcc(t testing.TB, args ...string) string {
	t.Helper()
	out, err := nc.occ(args...)
	if err != nil {
		t.Fatalf("occ %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// cron runs Nextcloud's background jobs once, as the system cron would.
func (nc *nextcloud) cron(t testing.TB) {
	t.Helper()
	cmd := exec.Command("php", "cron.php")
	cmd.Dir = nc.Dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cron.php: %v\n%s", err, out)
	}
}

// request is one HTTP call as user (Basic auth, as a client with an app password would).
func (nc *nextcloud) request(ctx context.Context, user, method, path string, body io.Reader, header http.Header) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, nc.URL+path, body)
	if err != nil {
		return nil, nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	client := nc.client
	if user != "" {
		req.SetBasicAuth(user, nc.password(user))
		client = nc.session(user)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp, raw, err
}

func (nc *nextcloud) session(user string) *http.Client {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	c, ok := nc.sessions[user]
	if !ok {
		jar, _ := cookiejar.New(nil)
		c = &http.Client{Timeout: 60 * time.Second, Jar: jar}
		nc.sessions[user] = c
	}
	return c
}

func (nc *nextcloud) password(user string) string {
	if p, ok := passwords[user]; ok {
		return p
	}
	nc.mu.Lock()
	p, ok := nc.known[user]
	nc.mu.Unlock()
	if ok {
		return p
	}
	return testUserPassword(user)
}

// knowPassword lets the helpers act as an account whose password the test learned
// during the run: the bot's, from what occ istota:setup wrote.
func (nc *nextcloud) knowPassword(user, password string) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if nc.known == nil {
		nc.known = map[string]string{}
	}
	nc.known[user] = password
}

// testUserPassword is the password of users the tests add themselves.
func testUserPassword(user string) string { return "Test-" + user + "-Pass-2026!" }

// addUser creates a user (with an e-mail address) through occ.
func (nc *nextcloud) addUser(t testing.TB, uid string) {
	t.Helper()
	cmd := exec.Command("php", "occ", "user:add", "--password-from-env", "--display-name="+strings.ToUpper(uid[:1])+uid[1:], uid)
	cmd.Dir = nc.Dir
	cmd.Env = append(os.Environ(), "OC_PASS="+testUserPassword(uid))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("occ user:add %s: %v\n%s", uid, err, out)
	}
	nc.mustOcc(t, "user:setting", uid, "settings", "email", uid+"@example.test")
}

// ocsResult is an OCS answer: status and the data part.
type ocsResult struct {
	Status int
	Data   json.RawMessage
	Header http.Header
	Took   time.Duration
	Raw    []byte
}

func (r ocsResult) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Data, v); err != nil {
		t.Fatalf("decode OCS data %s: %v", r.Data, err)
	}
}

// ocs calls an OCS endpoint as user with a JSON body (nil for none).
func (nc *nextcloud) ocs(t testing.TB, user, method, path string, body any) ocsResult {
	t.Helper()
	var rd io.Reader
	var b []byte
	h := http.Header{"Ocs-Apirequest": {"true"}, "Accept": {"application/json"}}
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
		h.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, raw, err := nc.request(context.Background(), user, method, path, rd, h)
	// The test server runs Nextcloud on SQLite, which answers 500 when its database is
	// locked by a concurrent request (cron, the app's own calls); a read is asked again.
	for try := 1; err == nil && method == http.MethodGet && resp.StatusCode == http.StatusInternalServerError && try <= 4; try++ {
		t.Logf("GET %s as %s: 500 from the test Nextcloud, asking again (%d)", path, user, try)
		time.Sleep(time.Duration(try) * 500 * time.Millisecond)
		start = time.Now()
		resp, raw, err = nc.request(context.Background(), user, method, path, nil, h)
	}
	// A share post can fail the same way after Nextcloud stored the share (pending);
	// posting it again completes it (see webdav.CompleteShareWithUser).
	for try := 1; err == nil && method == http.MethodPost && strings.HasPrefix(path, sharesAPI) &&
		resp.StatusCode/100 != 2 && bytes.Contains(raw, []byte("database is locked")) && try <= 4; try++ {
		t.Logf("POST %s as %s: %d (database is locked) from the test Nextcloud, posting again (%d)", path, user, resp.StatusCode, try)
		time.Sleep(time.Duration(try) * 500 * time.Millisecond)
		start = time.Now()
		resp, raw, err = nc.request(context.Background(), user, method, path, bytes.NewReader(b), h)
	}
	if err != nil {
		t.Fatalf("%s %s as %s: %v", method, path, user, err)
	}
	res := ocsResult{Status: resp.StatusCode, Header: resp.Header, Took: time.Since(start), Raw: raw}
	var env struct {
		OCS struct {
			Data json.RawMessage `json:"data"`
		} `json:"ocs"`
	}
	if json.Unmarshal(raw, &env) == nil {
		res.Data = env.OCS.Data
	}
	return res
}

// dav calls WebDAV/CalDAV as user.
func (nc *nextcloud) dav(t testing.TB, user, method, path string, body []byte, header map[string]string) (int, []byte) {
	t.Helper()
	h := http.Header{}
	for k, v := range header {
		h.Set(k, v)
	}
	resp, raw, err := nc.request(context.Background(), user, method, path, bytes.NewReader(body), h)
	if err != nil {
		t.Fatalf("%s %s as %s: %v", method, path, user, err)
	}
	return resp.StatusCode, raw
}

// putFile writes a file into user's files over WebDAV, creating folders on the way.
func (nc *nextcloud) putFile(t testing.TB, user, path string, content []byte) {
	t.Helper()
	dir := ""
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for _, p := range parts[:len(parts)-1] {
		dir += "/" + p
		nc.dav(t, user, "MKCOL", "/remote.php/dav/files/"+user+escapePath(dir), nil, nil)
	}
	st, raw := nc.dav(t, user, "PUT", "/remote.php/dav/files/"+user+escapePath("/"+strings.Trim(path, "/")), content, nil)
	if st != 201 && st != 204 {
		t.Fatalf("PUT %s as %s: %d %s", path, user, st, raw)
	}
}

// getFile reads a file of user's over WebDAV; ok is false when it does not exist.
func (nc *nextcloud) getFile(t testing.TB, user, path string) ([]byte, bool) {
	t.Helper()
	st, raw := nc.dav(t, user, "GET", "/remote.php/dav/files/"+user+escapePath("/"+strings.Trim(path, "/")), nil, nil)
	switch st {
	case 200:
		return raw, true
	case 404:
		return nil, false
	}
	t.Fatalf("GET %s as %s: %d %s", path, user, st, raw)
	return nil, false
}

// database opens Nextcloud's own SQLite database with the given URI parameters.
func (nc *nextcloud) database(params string) (*sql.DB, error) {
	dbs, _ := filepath.Glob(filepath.Join(nc.root, "data", "*.db"))
	if len(dbs) != 1 {
		return nil, fmt.Errorf("no single database in %s: %q", filepath.Join(nc.root, "data"), dbs)
	}
	return sql.Open("sqlite3", "file:"+dbs[0]+"?"+params)
}

// setShareAccepted sets a share's oc_share.accepted in Nextcloud's database: 0 leaves
// it as Nextcloud does when a step between storing and accepting it fails.
func (nc *nextcloud) setShareAccepted(t testing.TB, id string, accepted int) {
	t.Helper()
	db, err := nc.database("_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(`UPDATE oc_share SET accepted = ? WHERE id = ?`, accepted, id)
	if err != nil {
		t.Fatalf("set share %s accepted=%d: %v", id, accepted, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("set share %s accepted=%d: %d rows", id, accepted, n)
	}
}

// shareRows lists the shares made with user as Nextcloud's database holds them, those
// the OCS API hides (pending or refused by the user) included: for the message of a test
// that finds a share missing.
func (nc *nextcloud) shareRows(user string) string {
	db, err := nc.database("mode=ro&_busy_timeout=5000")
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer db.Close()
	rows, err := db.Query(`SELECT id, share_type, uid_owner, uid_initiator, file_target, permissions, accepted, COALESCE(parent, 0)
		FROM oc_share WHERE share_with = ? ORDER BY id`, user)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, typ, perms, accepted, parent int64
		var owner, initiator, target string
		if err := rows.Scan(&id, &typ, &owner, &initiator, &target, &perms, &accepted, &parent); err != nil {
			return "(" + err.Error() + ")"
		}
		out = append(out, fmt.Sprintf("#%d type %d owner %s by %s at %s perms %d accepted %d parent %d", id, typ, owner, initiator, target, perms, accepted, parent))
	}
	if err := rows.Err(); err != nil {
		return "(" + err.Error() + ")"
	}
	return fmt.Sprintf("%q", out)
}

// list returns the names directly inside a folder of user's (PROPFIND depth 1).
func (nc *nextcloud) list(t testing.TB, user, path string) []string {
	t.Helper()
	base := "/remote.php/dav/files/" + user + escapePath("/"+strings.Trim(path, "/"))
	st, raw := nc.dav(t, user, "PROPFIND", base, nil, map[string]string{"Depth": "1"})
	if st == 404 {
		return nil
	}
	if st != 207 {
		t.Fatalf("PROPFIND %s as %s: %d %s", path, user, st, raw)
	}
	var names []string
	for _, chunk := range strings.Split(string(raw), "<d:href>")[1:] {
		href := chunk[:strings.Index(chunk, "</d:href>")]
		href, _ = url.PathUnescape(href)
		name := strings.TrimPrefix(strings.TrimSuffix(href, "/"), strings.TrimSuffix(mustUnescape(base), "/"))
		if name = strings.Trim(name, "/"); name != "" {
			names = append(names, name)
		}
	}
	return names
}

func mustUnescape(s string) string {
	u, _ := url.PathUnescape(s)
	return u
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// waitUntil polls cond until it holds or timeout passes.
func waitUntil(t testing.TB, what string, timeout time.Duration, cond func() bool, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			extra := ""
			if logs != nil {
				extra = "\n--- sidecar log (tail) ---\n" + tail(logs(), 60)
			}
			t.Fatalf("timed out after %s waiting for %s%s", timeout, what, extra)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}
