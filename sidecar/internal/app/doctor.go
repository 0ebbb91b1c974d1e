package app

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/config"
	"github.com/istota/istota/sidecar/internal/netproxy"
	"github.com/istota/istota/sidecar/internal/sandbox"
	"github.com/istota/istota/sidecar/internal/settings"
	"github.com/istota/istota/sidecar/internal/signing"
	"github.com/istota/istota/sidecar/internal/store"
)

// cmdDoctor checks every hop an answer depends on and prints one ✓/✗ line each. It exits
// non-zero when any check fails.
func cmdDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	load := commonFlags(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	failed := 0
	check := func(name string, fn func() (string, error)) {
		detail, err := fn()
		if err != nil {
			failed++
			fmt.Fprintf(stdout, "✗ %s: %v\n", name, err)
			return
		}
		fmt.Fprintf(stdout, "✓ %s: %s\n", name, detail)
	}
	// The checks look at the configuration `istota serve` runs with: the file, the
	// secret it generated and the admin's settings stored in its database.
	cfg, err := load()
	var db *store.DB
	if err == nil {
		cfg, db, err = inspectConfig(ctx, cfg)
	}
	if db != nil {
		defer db.Close()
	}
	check("configuration", func() (string, error) {
		if err != nil {
			return "", err
		}
		return "valid", nil
	})
	if err != nil {
		return ExitCode(1)
	}
	check("database", func() (string, error) {
		if db == nil {
			if cfg.Database.Postgres() {
				return "", errors.New("PostgreSQL (database.dsn) could not be opened: see the configuration check above")
			}
			return "", fmt.Errorf("%s does not exist yet: `istota serve` creates it", cfg.Database.Path)
		}
		var n int
		if err := db.Read.QueryRowContext(ctx, `SELECT count(*) FROM tasks WHERE status IN ('pending','locked','running')`).Scan(&n); err != nil {
			return "", err
		}
		where := cfg.Database.Path
		if cfg.Database.Postgres() {
			where = db.Path() + " (PostgreSQL, shared by every host)"
		}
		return fmt.Sprintf("%s, schema %d, %d task(s) queued or running", where, store.SchemaVersion(), n), nil
	})
	check("agent binary", func() (string, error) {
		if cfg.Brain.Kind != "claude" {
			return "none needed: the " + cfg.Brain.Kind + " brain runs in the sidecar (model " + cfg.Brain.Model + ")", nil
		}
		path, err := findAgent(cfg.Brain.ClaudePath)
		if err != nil {
			return "", err
		}
		version, err := agentVersion(ctx, path)
		if err != nil {
			return "", err
		}
		return path + " " + version, nil
	})
	check("sandbox", func() (string, error) {
		if cfg.Sandbox.Unsandboxed {
			return "", errors.New("DISABLED (sandbox.unsandboxed = true): agents can read everything the agent account can")
		}
		scfg, err := sandboxConfig(cfg)
		if err != nil {
			return "", err
		}
		if err := sandbox.Probe(ctx, scfg); err != nil {
			return "", err
		}
		return "bwrap works for uid " + strconv.Itoa(int(scfg.AgentUID)) + " (0 = the sidecar's own)", nil
	})
	if !cfg.Sandbox.Unsandboxed {
		// Which init the sandboxes start: a missing istota-init works, but slower.
		check("sandbox init", func() (string, error) {
			scfg, err := sandboxConfig(cfg)
			if err != nil {
				return "", err
			}
			r, err := sandbox.New(scfg, nil)
			if err != nil {
				return "", err
			}
			defer r.Close()
			if scfg.InitPath == "" {
				return r.InitInUse() + "; " + initBeside(scfg.SelfPath) + " is missing", nil
			}
			return r.InitInUse(), nil
		})
	}
	if cfg.Browse.Render {
		// The browse skill's headless browser: Chromium must start in its sandbox and run
		// a page's script (a page of its own, no network).
		check("browse rendering", func() (string, error) {
			r, err := newRenderer(cfg, netproxy.Options{}, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				return "", err
			}
			if err := r.Check(ctx); err != nil {
				return "", err
			}
			return cfg.Browse.ChromiumPath + " renders pages in the sandbox (timeout " + cfg.Browse.RenderTimeout.Duration.String() + ")", nil
		})
	}
	check("model login", func() (string, error) {
		return doctorLogin(ctx, cfg, db)
	})
	check("Nextcloud reachable", func() (string, error) {
		client := &http.Client{Timeout: 10 * time.Second}
		resp, err := client.Get(strings.TrimRight(cfg.Nextcloud.URL, "/") + "/status.php")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var st struct {
			Installed   bool   `json:"installed"`
			Maintenance bool   `json:"maintenance"`
			Version     string `json:"versionstring"`
		}
		if resp.StatusCode != 200 || json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&st) != nil {
			return "", fmt.Errorf("%s/status.php answered %s, not Nextcloud's status", cfg.Nextcloud.URL, resp.Status)
		}
		if st.Maintenance {
			return "", fmt.Errorf("Nextcloud %s is in maintenance mode", st.Version)
		}
		return "Nextcloud " + st.Version, nil
	})
	check("Talk bot secret", func() (string, error) {
		if cfg.Talk.BotSecret == "" {
			return "", errors.New("talk.bot_secret is empty: answers cannot be delivered (run occ istota:setup)")
		}
		return "set (never shown)", nil
	})
	if cfg.Mail.Enabled {
		check("mail", func() (string, error) { return doctorMail(ctx, cfg) })
	}
	check("signed round trip", func() (string, error) {
		return doctorPing(ctx, cfg)
	})
	if failed > 0 {
		fmt.Fprintf(stdout, "%d check(s) failed\n", failed)
		return ExitCode(1)
	}
	return nil
}

// doctorPing signs a ping to the running sidecar exactly as the app does.
func doctorPing(ctx context.Context, cfg config.Config) (string, error) {
	secret := []byte(cfg.Nextcloud.SharedSecret)
	if len(secret) == 0 {
		return "", errors.New("no shared secret configured, and `istota serve` has not generated one yet")
	}
	raw := make([]byte, 16)
	rand.Read(raw)
	nonce := hex.EncodeToString(raw)
	body, _ := json.Marshal(map[string]string{"nonce_echo": nonce})
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+cfg.Server.Listen+"/v1/ping", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set(signing.HeaderTimestamp, ts)
	req.Header.Set(signing.HeaderNonce, nonce)
	sig, err := signing.Sign(secret, "POST", "/v1/ping", ts, nonce, body)
	if err != nil {
		return "", fmt.Errorf("nextcloud.shared_secret: %w", err)
	}
	req.Header.Set(signing.HeaderSignature, sig)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return "", fmt.Errorf("istota serve is not answering on %s: %w", cfg.Server.Listen, err)
	}
	defer resp.Body.Close()
	var out struct {
		Pong    string `json:"pong"`
		Version string `json:"version"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&out) != nil || out.Pong != nonce {
		return "", fmt.Errorf("the sidecar on %s refused the signed ping (%s): is it using the same shared secret?", cfg.Server.Listen, resp.Status)
	}
	return "sidecar " + out.Version + " on " + cfg.Server.Listen, nil
}

// agentVersion runs the agent binary with --version: the cheapest proof that it is
// there and starts (doctor and the heartbeat self-check).
func agentVersion(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", filepath.Base(path), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// doctorLogin says which credential the model requests use, and fails when there is none
// or the model API refused the one in effect (recorded by `istota serve`).
func doctorLogin(ctx context.Context, cfg config.Config, db *store.DB) (string, error) {
	login := settings.LoginOf(cfg)
	if login.Kind == settings.LoginNone {
		return "", errors.New("no model API key or Claude subscription token: paste one into Administration settings → Istota → Model (used at once), or set brain.api_key_file / brain.oauth_token_file; until then every task fails with an authentication error")
	}
	detail := "the model API key (never shown)"
	if login.Kind == settings.LoginSubscription {
		detail = "the Claude subscription token from `claude setup-token` (never shown)"
		if cfg.Brain.APIKey != "" {
			detail += "; the API key that is also set is not used"
		}
	}
	if db != nil {
		st, err := settings.Open(ctx, db, cfg, settings.Options{DataDir: cfg.DataDir, Brains: brainKinds()})
		if err != nil {
			return "", err
		}
		if r, ok, err := st.LoginRefused(ctx); err != nil {
			return "", err
		} else if ok {
			return "", errors.New(r.Advice())
		}
	}
	return detail, nil
}
