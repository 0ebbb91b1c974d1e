package app

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
