package sandbox

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// evalSeccomp runs the filter on one seccomp_data (nr, arch) the way the kernel does,
// for the four instructions the assembler emits.
func evalSeccomp(t *testing.T, prog []byte, nr, arch uint32) uint32 {
	t.Helper()
	var acc uint32
	for pc := 0; pc*8 < len(prog); pc++ {
		ins := prog[pc*8 : pc*8+8]
		code := binary.NativeEndian.Uint16(ins[0:2])
		jt, jf := int(ins[2]), int(ins[3])
		k := binary.NativeEndian.Uint32(ins[4:8])
		switch code {
		case bpfLdWAbs:
			switch k {
			case seccompDataNr:
				acc = nr
			case seccompDataArch:
				acc = arch
			default:
				t.Fatalf("load of offset %d", k)
			}
		case bpfJeqK:
			if acc == k {
				pc += jt
			} else {
				pc += jf
			}
		case bpfJgeK:
			if acc >= k {
				pc += jt
			} else {
				pc += jf
			}
		case bpfRetK:
			return k
		default:
			t.Fatalf("unexpected opcode %#x", code)
		}
	}
	t.Fatal("program fell off the end")
	return 0
}

func TestSeccompProgram(t *testing.T) {
	const deny = retErrno | errnoEPERM
	for _, goarch := range []string{"amd64", "arm64"} {
		t.Run(goarch, func(t *testing.T) {
			a, err := seccompArchFor(goarch)
			if err != nil {
				t.Fatal(err)
			}
			prog, err := seccompProgram(goarch)
			if err != nil {
				t.Fatal(err)
			}
			for name, nr := range a.denied {
				if got := evalSeccomp(t, prog, nr, a.audit); got != deny {
					t.Errorf("%s (%d) → %#x, want EPERM", name, nr, got)
				}
			}
			// read, write, openat, clone, execve, socket, connect on each arch.
			allowed := map[string][]uint32{"amd64": {0, 1, 257, 56, 59, 41, 42}, "arm64": {63, 64, 56, 220, 221, 198, 203}}[goarch]
			for _, nr := range allowed {
				if got := evalSeccomp(t, prog, nr, a.audit); got != retAllow {
					t.Errorf("syscall %d → %#x, want allow", nr, got)
				}
			}
			const auditArchI386 = 0x40000003
			if got := evalSeccomp(t, prog, 0, auditArchI386); got != deny {
				t.Errorf("foreign architecture → %#x, want EPERM", got)
			}
			if a.denyX32 {
				if got := evalSeccomp(t, prog, x32SyscallBit|0, a.audit); got != deny {
					t.Errorf("x32 read → %#x, want EPERM", got)
				}
			}
		})
	}
	if _, err := seccompProgram("riscv64"); err == nil {
		t.Error("an unsupported architecture got a filter")
	}
}

func parseKV(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

func TestSeccompInSandbox(t *testing.T) {
	e := newTestEnv(t)
	spec := e.userDirs(t, "alice")
	spec.Argv = []string{SelfBinary, helperCommand, "syscalls"}

	// Control: the same calls succeed in the sandbox without the filter, so the EPERMs
	// below come from the filter and not from somewhere else.
	open := e.runner(t)
	open.noSeccomp = true
	res := run(t, open, spec)
	mustSucceed(t, res)
	control := parseKV(res.stdout)
	for _, name := range []string{"ptrace", "process_vm_readv"} {
		if control[name] != "ok" {
			t.Fatalf("control: %s = %q without the filter, want ok (output %q)", name, control[name], res.stdout)
		}
	}

	r := e.runner(t)
	res = run(t, r, spec)
	mustSucceed(t, res)
	got := parseKV(res.stdout)
	for _, name := range []string{"ptrace", "process_vm_readv", "io_uring_setup", "keyctl"} {
		if got[name] != "operation not permitted" {
			t.Errorf("%s = %q under the filter, want operation not permitted (without it: %q)", name, got[name], control[name])
		}
	}

	t.Run("strace of pid 1", func(t *testing.T) {
		if _, err := os.Stat("/usr/bin/strace"); err != nil {
			t.Skip("strace is not installed")
		}
		res := sh(t, r, spec, `strace -p 1 -e trace=none 2>&1; echo "exit=$?"`)
		if !strings.Contains(res.stdout, "Operation not permitted") || strings.Contains(res.stdout, "exit=0") {
			t.Fatalf("strace -p 1: %q", res.stdout)
		}
	})
}

// initCase is one way a sandbox's pid 1 runs, with how it sets the command's limits:
// istota-init (the C program, with setrlimit), or the istota binary's Go fallback
// ("sandbox-init"), through util-linux prlimit or by a second start of itself. The tests
// of init behaviour run for each, so the two implementations cannot drift apart
// unnoticed (package sandboxinit compares them outside a sandbox).
type initCase struct {
	name     string
	fallback bool // the istota binary is the init (no Config.InitPath)
	prlimit  bool // the fallback sets the limits through util-linux prlimit
	// initName prefixes the init's own messages; notExec is who says that a command
	// cannot run when limits are set.
	initName, notExec string
}

var initCases = []initCase{
	{name: "istota-init", initName: InitFile + ": ", notExec: InitFile + ": "},
	{name: "fallback prlimit", fallback: true, prlimit: true, initName: initName + ": ", notExec: "prlimit: failed to execute"},
	{name: "fallback second start", fallback: true, initName: initName + ": ", notExec: initName + ": "},
}

// initRunner returns a runner whose sandboxes start the init of ic and whose commands
// get limits.
func initRunner(t *testing.T, e *testEnv, limits Limits, ic initCase) *Runner {
	t.Helper()
	cfg := e.cfg
	cfg.Limits = limits
	if ic.fallback {
		cfg.InitPath = ""
	}
	r, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	switch {
	case !ic.fallback:
		if r.prlimit != "" {
			t.Fatalf("New took prlimit (%q) for istota-init, which sets the limits itself", r.prlimit)
		}
	case ic.prlimit && len(limits.flags()) > 0:
		// Fail, never skip: a host without util-linux prlimit would otherwise pass
		// every limit test on the other path and leave this one untested.
		if r.prlimit != prlimitPath {
			t.Fatalf("New did not take util-linux prlimit from %s (got %q); install util-linux", prlimitPath, r.prlimit)
		}
	default:
		r.prlimit = ""
	}
	return r
}

func TestLimits(t *testing.T) {
	e := newTestEnv(t)
	spec := e.userDirs(t, "alice")
	unlimited := e.runner(t)
	if unlimited.prlimit != "" {
		t.Errorf("a runner without limits looked for prlimit: %q", unlimited.prlimit)
	}

	forkBomb := `perl -e 'my ($ok, $fail) = (0, 0); for (1..200) { my $p = fork(); if (!defined $p) { $fail++; next } if ($p == 0) { sleep 60; exit 0 } $ok++ } print "started=$ok failed=$fail\n"'`
	t.Run("fork bomb control", func(t *testing.T) {
		if _, err := os.Stat("/usr/bin/perl"); err != nil {
			t.Skip("perl is not installed")
		}
		res := sh(t, unlimited, spec, forkBomb)
		mustSucceed(t, res)
		if c := parseKV(strings.ReplaceAll(res.stdout, " ", "\n")); c["started"] != "200" {
			t.Fatalf("control without limits: %q", res.stdout)
		}
	})
	hog := `dd if=/dev/zero of=/dev/null bs=400M count=1 2>&1; echo "exit=$?"`
	t.Run("memory hog control", func(t *testing.T) {
		res := sh(t, unlimited, spec, hog)
		if !strings.Contains(res.stdout, "exit=0") {
			t.Fatalf("control without limits: %q", res.stdout)
		}
	})

	for _, ic := range initCases {
		t.Run(ic.name, func(t *testing.T) {
			t.Run("applied to the command only", func(t *testing.T) {
				r := initRunner(t, e, Limits{AddressSpace: 1 << 30, Processes: 300, OpenFiles: 123, CPUSeconds: 50}, ic)
				s := spec
				s.Argv = []string{"/bin/sh", "-c", `grep -E '^Max (address space|processes|open files|cpu time)' /proc/self/limits; echo; grep -E '^Max (processes|open files)' /proc/1/limits`}
				rn, err := r.Prepare(context.Background(), s)
				if err != nil {
					t.Fatal(err)
				}
				rn.Close()
				if got, want := slices.Contains(rn.Cmd.Args, "--prlimit"), ic.prlimit; got != want {
					t.Fatalf("init arguments %q: --prlimit present = %v, want %v", rn.Cmd.Args, got, want)
				}
				res := run(t, r, s)
				mustSucceed(t, res)
				self, init, _ := strings.Cut(res.stdout, "\n\n")
				for _, want := range []string{
					"Max cpu time              50                   50                   seconds",
					"Max processes             300                  300                  processes",
					"Max open files            123                  123                  files",
					"Max address space         1073741824           1073741824           bytes",
				} {
					if !strings.Contains(self, want) {
						t.Errorf("limits inside lack %q:\n%s", want, self)
					}
				}
				if strings.Contains(init, "123") || strings.Contains(init, " 300 ") {
					t.Errorf("the init itself is limited:\n%s", init)
				}
			})

			t.Run("fork bomb", func(t *testing.T) {
				if _, err := os.Stat("/usr/bin/perl"); err != nil {
					t.Skip("perl is not installed")
				}
				r := initRunner(t, e, Limits{Processes: 40}, ic)
				res := sh(t, r, spec, forkBomb)
				mustSucceed(t, res)
				c := parseKV(strings.ReplaceAll(res.stdout, " ", "\n"))
				started, _ := strconv.Atoi(c["started"])
				failed, _ := strconv.Atoi(c["failed"])
				if started >= 40 || failed == 0 || started+failed != 200 {
					t.Fatalf("with 40 processes allowed: %q", res.stdout)
				}
			})

			t.Run("memory hog", func(t *testing.T) {
				r := initRunner(t, e, Limits{AddressSpace: 256 << 20}, ic)
				res := sh(t, r, spec, hog)
				if strings.Contains(res.stdout, "exit=0") || !strings.Contains(res.stdout, "memory exhausted") {
					t.Fatalf("a 400 MiB buffer under a 256 MiB limit: %q", res.stdout)
				}
			})

			r := initRunner(t, e, Limits{OpenFiles: 100}, ic)
			t.Run("missing command", func(t *testing.T) {
				for _, argv0 := range []string{"no-such-command-xyz", "/no/such/command"} {
					s := spec
					s.Argv = []string{argv0}
					if res := run(t, r, s); res.code != 127 || !strings.Contains(res.stderr, ic.initName) || !strings.Contains(res.stderr, "not found") {
						t.Errorf("%s: exit %d stderr %q, want 127", argv0, res.code, res.stderr)
					}
				}
			})

			t.Run("not executable", func(t *testing.T) {
				// Found but not executable is 126; who says so shows which path ran.
				if err := os.WriteFile(filepath.Join(spec.Workspace, "script"), []byte("echo ran\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				s := spec
				s.Argv = []string{WorkspaceDir + "/script"}
				res := run(t, r, s)
				want := ic.notExec
				if res.code != 126 || !strings.Contains(res.stderr, want) || strings.Contains(res.stdout, "ran") {
					t.Fatalf("exit %d stdout %q stderr %q, want 126 and %q", res.code, res.stdout, res.stderr, want)
				}
			})

			t.Run("argv[0] kept", func(t *testing.T) {
				// Looked up on PATH, yet the command sees the name it was given.
				s := spec
				s.Argv = []string{"sh", "-c", `tr '\0' ' ' < /proc/$$/cmdline`}
				res := run(t, r, s)
				mustSucceed(t, res)
				if !strings.HasPrefix(res.stdout, "sh -c ") {
					t.Fatalf("the command's argv = %q, want it to start with sh -c", res.stdout)
				}
			})

			t.Run("cpu", func(t *testing.T) {
				r := initRunner(t, e, Limits{CPUSeconds: 1}, ic)
				res := sh(t, r, spec, `while :; do :; done`)
				if res.code != 128+24 && res.code != 128+9 {
					t.Fatalf("busy loop under a 1 s CPU limit ended with %d, want SIGXCPU or SIGKILL", res.code)
				}
			})
		})
	}
}

// TestFallbackInit runs sandboxes without istota-init, as an install that predates it
// does: the istota binary (here the test binary) is pid 1 through its "sandbox-init"
// subcommand. What it does there is checked for every init (initCases).
func TestFallbackInit(t *testing.T) {
	e := newTestEnv(t)
	spec := e.userDirs(t, "alice")
	for _, ic := range initCases[1:] {
		t.Run(ic.name, func(t *testing.T) {
			r := initRunner(t, e, Limits{OpenFiles: 123}, ic)
			if got := r.InitInUse(); !strings.Contains(got, InitCommand) {
				t.Errorf("InitInUse = %q, want the istota binary's %s", got, InitCommand)
			}
			s := spec
			s.Argv = []string{"/bin/sh", "-c", `tr '\0' ' ' < /proc/1/cmdline`}
			res := run(t, r, s)
			if want := SelfBinary + " " + InitCommand + " --protocol=1 "; res.code != 0 || !strings.HasPrefix(res.stdout, want) {
				t.Fatalf("%+v, want pid 1 %q", res, want)
			}
		})
	}
}

func TestInitInUse(t *testing.T) {
	e := newTestEnv(t)
	r := e.runner(t)
	if got, want := r.InitInUse(), e.cfg.InitPath+" (protocol 1)"; got != want {
		t.Fatalf("InitInUse = %q, want %q", got, want)
	}
}
