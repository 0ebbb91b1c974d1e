package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/istota/istota/sidecar/internal/skills"
)

// loadOrCreateSecret returns the secret stored in dataDir/name, creating a random one
// (0600) the first time, so a fresh install runs without hand-written secrets.
func loadOrCreateSecret(dataDir, name string) (secret string, created bool, err error) {
	path := filepath.Join(dataDir, name)
	b, err := os.ReadFile(path)
	if err == nil {
		s := strings.TrimSpace(string(b))
		if len(s) < 32 {
			return "", false, fmt.Errorf("%s is shorter than 32 characters; delete it to generate a new one", path)
		}
		return s, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("read %s: %w", path, err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", false, err
	}
	s := hex.EncodeToString(raw)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := f.WriteString(s + "\n"); err != nil {
		f.Close()
		return "", false, fmt.Errorf("write %s: %w", path, err)
	}
	return s, true, f.Close()
}

// openCredentials opens the users' credential store with its sealing key, kept in the
// data directory beside the shared secret and outside the database directory that
// administrators' sandboxes may read, and seals values older versions kept in clear.
func (s *sidecar) openCredentials(ctx context.Context) (*skills.Credentials, error) {
	hexKey, created, err := loadOrCreateSecret(s.cfg.DataDir, "credentials_key")
	if err != nil {
		return nil, err
	}
	key, err := hex.DecodeString(hexKey)
	if err != nil || len(key) != skills.CredentialKeySize {
		return nil, fmt.Errorf("%s: want %d random bytes in hex; restore it from a backup (a new key cannot open the stored credentials)",
			filepath.Join(s.cfg.DataDir, "credentials_key"), skills.CredentialKeySize)
	}
	if created {
		s.log.Info("created the key that seals users' credentials; back it up with the database", "path", filepath.Join(s.cfg.DataDir, "credentials_key"))
	}
	creds, err := skills.NewCredentials(s.db, key, nil)
	if err != nil {
		return nil, err
	}
	if n, err := creds.SealLegacy(ctx); err != nil {
		return nil, err
	} else if n > 0 {
		s.log.Info("sealed credentials stored in clear by an earlier version", "count", n)
	}
	return creds, nil
}
