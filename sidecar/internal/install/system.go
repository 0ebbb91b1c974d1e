package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// OS is the System of the machine the installer runs on.
type OS struct{}

// servicePath is the PATH commands run with: an installer started by sudo may have a
// reduced one, and useradd, systemctl and npm live in these folders.
const servicePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Run runs name as account (the current user when "" or already that user), like
// runuser(1): the account's ids and groups, its home, a clean environment.
func (OS) Run(ctx context.Context, account, dir string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	env := os.Environ()
	cur, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("who runs the installer: %w", err)
	}
	if account != "" && account != cur.Username {
		cred, home, err := Credential(account)
		if err != nil {
			return nil, err
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		env = AccountEnv(account, home)
	}
	cmd.Env = append(withoutPath(env), "PATH="+servicePath)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		if len(msg) > 2000 {
			msg = "…" + msg[len(msg)-2000:]
		}
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return stdout.Bytes(), nil
}

// AccountEnv is the clean environment a command gets when it runs as account, as
// runuser(1) gives it (PATH included).
func AccountEnv(account, home string) []string {
	return []string{"HOME=" + home, "USER=" + account, "LOGNAME=" + account, "LANG=C.UTF-8", "PATH=" + servicePath}
}

func withoutPath(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "PATH=") {
			out = append(out, e)
		}
	}
	return out
}

// Credential is account's uid, gid and supplementary groups, and its home: what a
// process needs to run as that account.
func Credential(account string) (*syscall.Credential, string, error) {
	u, err := user.Lookup(account)
	if err != nil {
		return nil, "", fmt.Errorf("run as %s: %w", account, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, "", fmt.Errorf("run as %s: %w", account, err)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				cred.Groups = append(cred.Groups, uint32(g))
			}
		}
	}
	return cred, u.HomeDir, nil
}

func (OS) LookPath(name string) (string, error) {
	for _, dir := range filepath.SplitList(servicePath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not installed (looked in %s)", name, servicePath)
}

func (OS) LookupUser(name string) (int, int, bool, error) {
	u, err := user.Lookup(name)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("look up %s: %w", name, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, false, fmt.Errorf("look up %s: %w", name, err)
	}
	return uid, gid, true, nil
}

func (OS) Owner(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("%s: no owner", path)
	}
	u, err := user.LookupId(strconv.FormatUint(uint64(st.Uid), 10))
	if err != nil {
		// An owner without a name (a deleted account) is still an answer.
		return strconv.FormatUint(uint64(st.Uid), 10), nil
	}
	return u.Username, nil
}

func (OS) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

// WriteFile writes a temporary file beside path with its final mode and owner, then
// renames it over path, so a reader sees the old file or the new one, never a part, and
// never a secret with the wrong mode.
func (OS) WriteFile(path string, data []byte, mode fs.FileMode, uid, gid int) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	name := tmp.Name()
	fail := func(err error) error {
		tmp.Close()
		os.Remove(name)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return fail(err)
	}
	if err := tmp.Chown(uid, gid); err != nil {
		return fail(err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(name)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func (OS) MkdirAll(dir string, mode fs.FileMode, uid, gid int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return nil
}

func (OS) RemoveAll(path string) error {
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

func (OS) Exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
