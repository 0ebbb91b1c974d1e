package realnc

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// setupFile is what `occ istota:setup --write` writes.
type setupFile struct {
	Nextcloud struct {
		URL          string `toml:"url"`
		SharedSecret string `toml:"shared_secret"`
		BotUser      string `toml:"bot_user"`
		BotPassword  string `toml:"bot_password"`
	} `toml:"nextcloud"`
	Talk struct {
		BotName   string `toml:"bot_name"`
		BotSecret string `toml:"bot_secret"`
	} `toml:"talk"`
	Server struct {
		Listen string `toml:"listen"`
	} `toml:"server"`
}

func readSetupFile(t *testing.T, path string) setupFile {
	t.Helper()
	var f setupFile
	if _, err := toml.DecodeFile(path, &f); err != nil {
		t.Fatalf("the file occ istota:setup wrote: %v", err)
	}
	return f
}

// botCanLogIn proves the written bot password opens the bot account's WebDAV.
func (nc *nextcloud) botCanLogIn(t *testing.T, user, password string) bool {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), "PROPFIND", nc.URL+"/remote.php/dav/files/"+user+"/", nil)
	req.SetBasicAuth(user, password)
	req.Header.Set("Depth", "0")
	resp, err := nc.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode == 207
}

// botRegistered asks Talk (as the admin's client) whether our bot is installed with the
// features the app needs: event, response and reaction.
func (nc *nextcloud) botRegistered(t *testing.T) bool {
	t.Helper()
	r := nc.ocs(t, "admin", "GET", talkV1+"/bot/admin", nil)
	if r.Status != 200 {
		t.Fatalf("admin bot list: %d %s", r.Status, r.Raw)
	}
	var bots []struct {
		URL      string `json:"url"`
		Features int    `json:"features"`
		State    int    `json:"state"`
	}
	r.decode(t, &bots)
	for _, b := range bots {
		if b.URL == "nextcloudapp://istota" {
			return b.Features&(2|4|8) == 2|4|8 && b.State == 1
		}
	}
	return false
}

// testInstall installs the app from the tarball and sets it up as an admin would, with
// `occ istota:setup` broken at each of its steps on the way and run again each time.
func testInstall(t *testing.T, e *env) {
	nc := e.nc
	// The test bundle's Nextcloud carries a local patch ("IDA MODIFICATION" in
	// lib/private/Files/View.php) whose copy() calls a class the bundle does not ship; with
	// files_versions on, every overwrite of an existing file (which copies the old version)
	// fails with HTTP 500 for every client. Upstream Nextcloud has no such call.
	nc.mustOcc(t, "app:disable", "files_versions")
	// Nothing outside loopback is reachable here; without this, every cron.php run waits
	// about 35 s for the app store and the update server to time out.
	nc.mustOcc(t, "config:system:set", "has_internet_connection", "--value=false", "--type=boolean")
	// The fault app first: enabling Istota while Talk refuses the bot must still work.
	copyTree(t, filepath.Join(repoRoot(), "sidecar/e2e/realnc/testdata/istotafault"), filepath.Join(nc.Dir, "custom_apps"))
	nc.mustOcc(t, "app:enable", "istotafault")
	nc.mustOcc(t, "config:app:set", "istotafault", "fail_at", "--value=bot_install")
	e.appDir = unpackApp(t, nc, os.Getenv("ISTOTA_APPSTORE_TARBALL"))
	nc.mustOcc(t, "app:enable", "istota")
	if nc.botRegistered(t) {
		t.Fatal("the bot is registered although Talk refused it")
	}

	e.listen = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	confDir := filepath.Join(e.root, "etc")
	os.MkdirAll(confDir, 0o700)
	e.setup = filepath.Join(confDir, "istota.toml")
	setup := func(extra ...string) (string, error) {
		args := append([]string{"istota:setup", "--write=" + e.setup, "--sidecar-url=http://" + e.listen}, extra...)
		return nc.occ(args...)
	}

	// Each injected failure on a fresh bot account, then the same command again without
	// it: the second run must give a complete, working configuration.
	faults := []struct {
		step, botUser string
		// wantFail: the broken run exits non-zero (a warning-only step still succeeds).
		wantFail bool
	}{
		{"bot_install", "istota-f1", true},
		{"before_user_created", "istota-f2", true},
		{"user_created", "istota-f3", true},
		{"user_changed", "istota-f4", false},
	}
	for _, f := range faults {
		t.Run("fault "+f.step, func(t *testing.T) {
			os.Remove(e.setup)
			nc.mustOcc(t, "config:app:set", "istotafault", "fail_at", "--value="+f.step)
			out, err := setup("--bot-user=" + f.botUser)
			if f.wantFail && err == nil {
				t.Fatalf("setup with a failure at %s exited 0:\n%s", f.step, out)
			}
			if strings.Contains(out, "injected failure") == false && f.wantFail {
				t.Logf("setup output:\n%s", out)
			}
			nc.mustOcc(t, "config:app:delete", "istotafault", "fail_at")
			out, err = setup("--bot-user=" + f.botUser)
			if err != nil {
				t.Fatalf("setup run again after a failure at %s: %v\n%s", f.step, err, out)
			}
			if strings.Contains(out, "does not know its password") || strings.Contains(out, "reset-bot-password") {
				t.Fatalf("setup run again after a failure at %s needs a password reset:\n%s", f.step, out)
			}
			sf := readSetupFile(t, e.setup)
			if sf.Nextcloud.BotUser != f.botUser || sf.Nextcloud.BotPassword == "" || len(sf.Nextcloud.SharedSecret) < 32 || len(sf.Talk.BotSecret) < 40 {
				t.Fatalf("incomplete configuration after recovering from %s: %+v", f.step, sf)
			}
			if !nc.botCanLogIn(t, f.botUser, sf.Nextcloud.BotPassword) {
				t.Fatalf("the bot password written after recovering from %s does not open the account", f.step)
			}
			if !nc.botRegistered(t) {
				t.Fatalf("the bot is not registered with Talk after recovering from %s", f.step)
			}
		})
	}
	t.Run("unwritable target", func(t *testing.T) {
		out, err := nc.occ("istota:setup", "--write="+filepath.Join(e.root, "missing", "istota.toml"), "--sidecar-url=http://"+e.listen)
		if err == nil || !strings.Contains(out, "does not exist") {
			t.Fatalf("writing into a missing folder: %v\n%s", err, out)
		}
	})
	nc.mustOcc(t, "app:disable", "istotafault")

	// The installation the rest of the tests use, with the default bot account. A second
	// run changes nothing.
	out, err := setup("--bot-user=istota")
	if err != nil {
		t.Fatalf("occ istota:setup: %v\n%s", err, out)
	}
	first, _ := os.ReadFile(e.setup)
	if out, err := setup(); err != nil {
		t.Fatalf("occ istota:setup again: %v\n%s", err, out)
	}
	if second, _ := os.ReadFile(e.setup); string(first) != string(second) {
		t.Fatalf("a second setup changed the configuration:\n%s\n---\n%s", first, second)
	}
	sf := readSetupFile(t, e.setup)
	if sf.Nextcloud.BotUser != "istota" || !nc.botCanLogIn(t, "istota", sf.Nextcloud.BotPassword) {
		t.Fatalf("the bot account istota does not open with the written password: %+v", sf.Nextcloud)
	}

	dataDir := filepath.Join(e.root, "data")
	e.cfgPath = writeSidecarConfig(t, e.setup, dataDir, e.api.URL())
	// Progress messages without the 8 s spacing, so a short test task shows one.
	e.sc = newSidecar(filepath.Join(e.appDir, "bin", "amd64", "istota"), e.cfgPath, e.listen, dataDir, "ISTOTA_PROGRESS_INTERVAL=0s")
	e.sc.start(t)

	out, err = e.sc.cli("doctor")
	if err != nil {
		t.Fatalf("istota doctor: %v\n%s", err, out)
	}
	for _, want := range []string{"✓ configuration", "✓ database", "✓ agent binary", "✓ sandbox", "✓ model login", "✓ Nextcloud reachable", "✓ Talk bot secret", "✓ signed round trip"} {
		if !hasLine(out, want) {
			t.Errorf("doctor lacks %q:\n%s", want, out)
		}
	}
	out, err = nc.occ("istota:self-test")
	if err != nil || strings.Contains(out, "✗") {
		t.Fatalf("occ istota:self-test: %v\n%s", err, out)
	}
	for _, want := range []string{"✓ configuration", "✓ sidecar reachable", "✓ signed round trip", "✓ Talk bot", "✓ outbox"} {
		if !hasLine(out, want) {
			t.Errorf("self-test lacks %q:\n%s", want, out)
		}
	}
}
