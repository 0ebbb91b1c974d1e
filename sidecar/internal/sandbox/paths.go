package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// oPath is O_PATH, which package syscall does not name (the same on amd64 and arm64).
const oPath = 0x200000

// openNoSymlink opens path as an O_PATH descriptor for bwrap's --bind-fd and refuses it
// when path, or any directory on the way to it, is a symbolic link: a user who can plant
// a symlink in their workspace must not get another directory bound in its place
// (CVE-2024-42472). bwrap mounts the path it reads back from the descriptor and checks
// that the mount is the very inode we opened, so a swap after this check fails too.
func openNoSymlink(p string, wantDir bool) (*os.File, error) {
	if !filepath.IsAbs(p) {
		return nil, fmt.Errorf("%s is not an absolute path", p)
	}
	clean := filepath.Clean(p)
	flags := oPath | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
	if wantDir {
		flags |= syscall.O_DIRECTORY
	}
	fd, err := syscall.Open(clean, flags, 0)
	if err != nil {
		if fi, lerr := os.Lstat(clean); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is a symbolic link; refusing to bind it", clean)
		}
		if errors.Is(err, syscall.ENOTDIR) {
			return nil, fmt.Errorf("%s is not a directory", clean)
		}
		return nil, fmt.Errorf("open %s: %w", clean, err)
	}
	f := os.NewFile(uintptr(fd), clean)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", clean, err)
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		// O_PATH|O_NOFOLLOW opens the link itself rather than failing.
		f.Close()
		return nil, fmt.Errorf("%s is a symbolic link; refusing to bind it", clean)
	}
	actual, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("resolve %s: %w", clean, err)
	}
	if actual != clean {
		f.Close()
		return nil, fmt.Errorf("%s passes through a symbolic link (it is %s); refusing to bind it", clean, actual)
	}
	return f, nil
}

// checkReachable reports whether uid/gid (without supplementary groups) may search every
// directory above p. bwrap runs as that uid and opens each bind source by path, so a
// 0700 parent owned by someone else makes it fail with a bare "Permission denied".
func checkReachable(p string, uid, gid uint32) error {
	for d := filepath.Dir(filepath.Clean(p)); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode().Perm()
		var ok bool
		switch {
		case st.Uid == uid:
			ok = mode&0o100 != 0
		case st.Gid == gid:
			ok = mode&0o010 != 0
		default:
			ok = mode&0o001 != 0
		}
		if !ok {
			return fmt.Errorf("%s is not reachable by the agent uid %d: directory %s (mode %04o, owner %d:%d) must let it pass (o+x)", p, uid, d, mode, st.Uid, st.Gid)
		}
		if d == "/" {
			return nil
		}
	}
}

// checkExecutable reports whether p is a regular file with an execute bit.
func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", p)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", p)
	}
	return nil
}

// removeSocket removes p if it is a Unix socket and refuses anything else, so a
// misconfigured path never deletes a real file.
func removeSocket(p string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("sandbox: %s exists and is not a socket; not removing it", p)
	}
	return os.Remove(p)
}
