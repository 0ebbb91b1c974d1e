package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// bwrapArgs collects bwrap's options and the descriptors they refer to. The options go
// to bwrap through --args (a file descriptor), not argv, so the environment values
// (the task token among them) and the host paths do not show in the host's process list.
type bwrapArgs struct {
	args  []string
	files []*os.File // become fds 4, 5, …: fd 3 is the --args file itself
}

func newBwrapArgs() *bwrapArgs { return &bwrapArgs{} }

func (b *bwrapArgs) add(a ...string) { b.args = append(b.args, a...) }

// fd registers f to be passed to bwrap and returns its descriptor number there.
func (b *bwrapArgs) fd(f *os.File) string {
	b.files = append(b.files, f)
	return strconv.Itoa(3 + len(b.files))
}

// data is the --args payload: NUL-terminated arguments. validate refuses NUL bytes in
// everything that comes from a Spec, so no argument can split into two.
func (b *bwrapArgs) data() []byte {
	var sb strings.Builder
	for _, a := range b.args {
		sb.WriteString(a)
		sb.WriteByte(0)
	}
	return []byte(sb.String())
}

// etcFiles are the host files under /etc a sandboxed program may need at run time: name
// service switch, dynamic linker cache, time zone, TLS roots and their OpenSSL
// configuration (Debian's /etc/ssl; /etc/pki and /etc/crypto-policies on Red Hat's
// family), Debian's alternatives (many /usr/bin entries are symlinks into
// /etc/alternatives) and the system's identity. passwd, group and hosts are generated
// instead (syntheticEtc) so the host's accounts and host names stay out. What only an
// admin's tool reads (ldconfig's /etc/ld.so.conf*, update-ca-certificates'
// /etc/ca-certificates*) stays out too: each entry is one more mount in every sandbox's
// start (BenchmarkSandboxOverhead).
var etcFiles = []string{
	"/etc/resolv.conf", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf",
	"/etc/localtime", "/etc/timezone", "/etc/ld.so.cache",
	"/etc/ssl", "/etc/pki", "/etc/crypto-policies",
	"/etc/alternatives", "/etc/mime.types", "/etc/protocols", "/etc/services",
	"/etc/os-release", "/etc/debian_version",
}

// systemRootArgs returns the read-only system part of the sandbox: /usr, the top-level
// directories or their merged-/usr symlinks, and the allowlisted /etc files. Nothing
// else of the host exists inside: the root is bwrap's tmpfs, remounted read-only at the
// end.
func systemRootArgs() []string {
	args := []string{"--ro-bind", "/usr", "/usr"}
	for _, name := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(name)
		if err != nil {
			continue
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(name)
			if err != nil {
				continue
			}
			args = append(args, "--symlink", target, name)
		case fi.IsDir():
			args = append(args, "--ro-bind", name, name)
		}
	}
	for _, f := range etcFiles {
		args = append(args, "--ro-bind-try", f, f)
	}
	return args
}

type etcData struct {
	name, dest string
	data       []byte
}

// syntheticEtc returns passwd, group and hosts for the sandbox: the agent uid is "agent"
// with home HomeDir, and localhost resolves without DNS (there is none inside).
func syntheticEtc(uid, gid uint32) []etcData {
	passwd := "root:x:0:0:root:/root:/usr/sbin/nologin\n"
	group := "root:x:0:\n"
	if uid != 65534 {
		passwd += "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	}
	if gid != 65534 {
		group += "nogroup:x:65534:\n"
	}
	passwd += fmt.Sprintf("agent:x:%d:%d:Istota agent:%s:/bin/sh\n", uid, gid, HomeDir)
	group += fmt.Sprintf("agent:x:%d:\n", gid)
	hosts := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tistota\n"
	return []etcData{
		{"passwd", "/etc/passwd", []byte(passwd)},
		{"group", "/etc/group", []byte(group)},
		{"hosts", "/etc/hosts", []byte(hosts)},
	}
}

// dataPipe returns the read end of a pipe that already holds data, for bwrap to read
// one of its inputs from (--args, --seccomp, --ro-bind-data): nothing is written to
// disk and no goroutine waits for bwrap. Data the pipe cannot hold at once (it holds
// 64 KiB, or one page when the user's pipes are over the kernel's soft limit; ours are
// a few KiB) goes through dataFile instead.
func dataPipe(dir, name string, data []byte) (*os.File, error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("pipe for %s data: %w", name, err)
	}
	r := os.NewFile(uintptr(p[0]), name+"-pipe")
	defer syscall.Close(p[1])
	// Non-blocking on the write end only: a full pipe says so instead of waiting for a
	// reader that starts later.
	if err := syscall.SetNonblock(p[1], true); err != nil {
		r.Close()
		return nil, fmt.Errorf("pipe for %s data: %w", name, err)
	}
	for rest := data; len(rest) > 0; {
		n, err := syscall.Write(p[1], rest)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			r.Close()
			return dataFile(dir, name, data)
		case err != nil:
			r.Close()
			return nil, fmt.Errorf("write %s data: %w", name, err)
		}
		rest = rest[n:]
	}
	return r, nil
}

// dataFile writes data to a file in dir, opens it for reading and unlinks it, so bwrap
// reads it from a descriptor and nothing stays on disk.
func dataFile(dir, name string, data []byte) (*os.File, error) {
	w, err := os.CreateTemp(dir, name+"-")
	if err != nil {
		return nil, fmt.Errorf("create %s data: %w", name, err)
	}
	p := w.Name()
	defer os.Remove(p)
	if _, err := w.Write(data); err != nil {
		w.Close()
		return nil, fmt.Errorf("write %s data: %w", name, err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("write %s data: %w", name, err)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("open %s data: %w", name, err)
	}
	return f, nil
}

// newToken returns a per-task token for the LLM gateway. It is not a secret: it only
// works on this task's socket, which only this sandbox can reach, and dies with the task.
func newToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate task token: %w", err)
	}
	return "istota-task-" + hex.EncodeToString(b), nil
}

// removeTaskDir removes a task directory left behind: its sockets and leftover data
// files, then the directory. Anything else in it is left alone and reported.
func removeTaskDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		switch {
		case e.Type()&os.ModeSocket != 0, e.Type().IsRegular():
			if err := os.Remove(p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unexpected entry %s", p)
		}
	}
	return os.Remove(dir)
}

// checkPrlimit reports whether p is util-linux prlimit, whose options (--as=N, …, "--",
// command) the init passes; other implementations (busybox's, say) differ or lack it.
func checkPrlimit(p string) error {
	if err := checkExecutable(p); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, p, "--version")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C"}
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w", p, err)
	}
	if !strings.Contains(string(out), "util-linux") {
		return fmt.Errorf("%s is not util-linux prlimit (%q)", p, strings.TrimSpace(string(out)))
	}
	return nil
}
