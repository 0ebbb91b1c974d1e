package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// errLocked means another istota process serves this data directory.
var errLocked = errors.New("another istota process is serving this data directory")

// processLock is an exclusive flock on the data directory. Holding it proves that every
// task still marked running belongs to a process that is gone, so start-up may reclaim
// them at once instead of waiting for their leases to expire.
type processLock struct{ f *os.File }

func acquireLock(dataDir string) (*processLock, error) {
	// 0711: the agent account (when istota runs as root) must pass through to its
	// sandbox sockets, but may not list the directory; every file in it is 0600.
	if err := os.MkdirAll(dataDir, 0o711); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	if os.Geteuid() == 0 {
		// Created earlier by something else (an admin, `istota doctor`): make sure the
		// agent account can still pass through it.
		if fi, err := os.Stat(dataDir); err == nil && fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(dataDir, fi.Mode().Perm()|0o011); err != nil {
				return nil, fmt.Errorf("data directory: %w", err)
			}
		}
	}
	path := filepath.Join(dataDir, "istota.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s)", errLocked, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &processLock{f: f}, nil
}

func (l *processLock) Release() error { return l.f.Close() }
