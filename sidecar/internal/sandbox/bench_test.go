package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/benchfig"
	"github.com/istota/istota/sidecar/internal/config"
)

// overheadRounds is how many times each of the nine commands runs per benchmark
// iteration: enough for a stable median and p90 on a busy machine.
const overheadRounds = 200

// BenchmarkSandboxOverhead runs /bin/true nine ways, interleaved in every round so that
// load on the machine hits all alike:
//   - bare;
//   - as a command of a task's session (Session.Command: istota-init --attach on the
//     host, the command started by the session's init), the way a task runs its agent
//     and an OpenAI-compatible brain its tool calls: the sandbox itself was started
//     with the task, while its files were pulled;
//   - a whole session for the one command: StartSession, the command, Close;
//   - bwrap alone: reference §7.1's minimal command with the namespaces a sandbox needs,
//     as the agent uid, the floor any such sandbox pays;
//   - a complete sandbox as a task gets it (Prepare, bwrap, the init with the default
//     resource limits, the LLM gateway, two bridged service sockets standing in for the
//     network and credential proxies, Close) with the istota binary as shipped (static,
//     stripped) as its init: the Go fallback "istota sandbox-init", which an install
//     without istota-init runs, setting the limits through util-linux prlimit;
//   - the same with istota-init as shipped, the static C program that sets the limits
//     itself; this run is also timed in its three parts;
//   - that sandbox without the gateway and the service sockets;
//   - its bwrap command running /bin/true itself, without the init;
//   - bwrap with the least it can be given (one mount, the user namespace only).
//
// The goal of issue 12 is a sandboxed run ≤ bare + 10 ms at the median: a command in the
// task's session.
func BenchmarkSandboxOverhead(b *testing.B) {
	e := newTestEnv(b)
	e.cfg.SelfPath = shippedBinary(b, e.base)
	e.cfg.Limits = defaultLimits()
	// Installed from the unit, the sidecar keeps the task sockets in /run/istota, a tmpfs
	// (app.socketDir); so does the bench where it finds one.
	if dir := tmpfsDir(b); dir != "" {
		e.cfg.SocketDir = filepath.Join(dir, "sockets")
	}
	runner := func(initPath string) *Runner {
		cfg := e.cfg
		cfg.InitPath = initPath
		r, err := New(cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { r.Close() })
		return r
	}
	// newTestEnv's istota-init is built the way it ships (sandboxtest.Build).
	withIstota, withInit := runner(""), runner(e.cfg.InitPath)
	spec := e.userDirs(b, "bench")
	spec.Argv = []string{"/bin/true"}
	spec.LLM = &LLMUpstream{BaseURL: "http://127.0.0.1:9", APIKey: "sk-bench-key-not-real"}
	idle := func(ctx context.Context, ln net.Listener) error { <-ctx.Done(); return nil }
	spec.Services = []Service{{Name: "proxy", Port: 3128, Serve: idle}, {Name: "skills", Serve: idle}}
	ctx := context.Background()

	// Each run returns the time it measured (all of it, but for noInit below) and the
	// minor page faults of the process it started, with every descendant that process
	// waited for: bwrap waits for the sandbox's pid 1, the init for the command.
	timed := func(f func() (*exec.Cmd, error)) func() (sample, error) {
		return func() (sample, error) {
			start := time.Now()
			cmd, err := f()
			return sample{time.Since(start), minorFaults(cmd)}, err
		}
	}
	bare := timed(func() (*exec.Cmd, error) {
		cmd := exec.Command("/bin/true")
		return cmd, cmd.Run()
	})
	bwrapWith := func(opts ...string) func() (sample, error) {
		return timed(func() (*exec.Cmd, error) {
			r := withInit
			cmd := exec.Command(r.cfg.BwrapPath, append(opts, "/bin/true")...)
			if r.switchTo {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: r.uid, Gid: r.gid, Groups: []uint32{}}}
			}
			return cmd, cmd.Run()
		})
	}
	bwrapAlone := bwrapWith("--ro-bind", "/", "/", "--unshare-all", "--die-with-parent")
	// bwrap's least: no namespace but the user one an unprivileged bwrap always makes,
	// and one mount. No sandbox can start faster than this on the machine.
	bwrapLeast := bwrapWith("--ro-bind", "/", "/")
	// phases holds the istota-init run's three parts: Prepare (host side: task folder,
	// ownership, descriptors, gateway and service sockets), the process (bwrap, the init,
	// /bin/true and their exits) and Close (services stopped, task folder removed).
	var phases [3][]time.Duration
	recording := false
	sandboxed := func(r *Runner, spec Spec, split bool) func() (sample, error) {
		return func() (sample, error) {
			t0 := time.Now()
			rn, err := r.Prepare(ctx, spec)
			if err != nil {
				return sample{}, err
			}
			var stderr strings.Builder
			rn.Cmd.Stderr = &stderr
			t1 := time.Now()
			err = rn.Cmd.Run()
			t2 := time.Now()
			if cerr := rn.Close(); err == nil {
				err = cerr
			}
			if split && recording {
				for i, d := range []time.Duration{t1.Sub(t0), t2.Sub(t1), time.Since(t2)} {
					phases[i] = append(phases[i], d)
				}
			}
			if err != nil {
				return sample{}, fmt.Errorf("%w (stderr %q)", err, stderr.String())
			}
			return sample{time.Since(t0), minorFaults(rn.Cmd)}, nil
		}
	}
	plain := spec // no gateway, no service sockets: what every sandbox pays
	plain.LLM, plain.Services = nil, nil
	// noInit is bwrap with every option the plain sandbox gets (mounts, /etc files,
	// seccomp, environment) running /bin/true itself, without the init: the process part
	// of the plain sandbox less what the init costs. Only the process is timed.
	noInit := func() (sample, error) {
		rn, err := withInit.Prepare(ctx, plain)
		if err != nil {
			return sample{}, err
		}
		defer rn.Close()
		end := slices.Index(rn.Cmd.Args, "--") // bwrap's own options end here, the init's start
		rn.Cmd.Args = append(rn.Cmd.Args[:end+1:end+1], "/bin/true")
		return timed(func() (*exec.Cmd, error) { return rn.Cmd, rn.Cmd.Run() })()
	}
	inSession := func(s *Session) (sample, error) {
		cmd, err := s.Command(ctx, []string{"/bin/true"}, nil, nil)
		if err != nil {
			return sample{}, err
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return sample{}, fmt.Errorf("%w (stderr %q)", err, stderr.String())
		}
		return sample{faults: minorFaults(cmd)}, nil
	}
	task, err := withInit.StartSession(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { task.Close() })
	session := func() (sample, error) {
		start := time.Now()
		s, err := inSession(task)
		s.took = time.Since(start)
		return s, err
	}
	// wholeSession is a session started for one command and closed after it: what a
	// task whose files were already there would wait for, start to end.
	wholeSession := func() (sample, error) {
		start := time.Now()
		sess, err := withInit.StartSession(ctx, spec)
		if err != nil {
			return sample{}, err
		}
		s, err := inSession(sess)
		if cerr := sess.Close(); err == nil {
			err = cerr
		}
		s.took = time.Since(start)
		return s, err
	}
	names := []string{"bare", "bwrap", "sandboxed-istota", "sandboxed", "sandboxed-plain", "bwrap-options", "bwrap-least", "session", "session-whole"}
	runs := []func() (sample, error){bare, bwrapAlone, sandboxed(withIstota, spec, false), sandboxed(withInit, spec, true), sandboxed(withInit, plain, false), noInit, bwrapLeast, session, wholeSession}
	took := make([][]time.Duration, len(runs))
	faults := make([][]int64, len(runs))
	var costs []time.Duration // one page fault, measured once a round
	round := func() {
		for i, f := range runs {
			s, err := f()
			if err != nil {
				b.Fatalf("%s: %v", names[i], err)
			}
			if recording {
				took[i] = append(took[i], s.took)
				faults[i] = append(faults[i], s.faults)
			}
		}
		c, err := faultCost()
		if err != nil {
			b.Fatal(err)
		}
		if recording {
			costs = append(costs, c)
		}
	}
	for range 10 {
		round() // page cache, the builds' first start, the gateway's first use
	}
	recording = true
	for b.Loop() {
		for i := range took {
			took[i], faults[i] = took[i][:0], faults[i][:0]
		}
		costs = costs[:0]
		for i := range phases {
			phases[i] = phases[i][:0]
		}
		for range overheadRounds {
			round()
		}
	}

	med, p90 := make([]time.Duration, len(runs)), make([]time.Duration, len(runs))
	for i := range took {
		med[i], p90[i] = percentile(took[i], 50), percentile(took[i], 90)
		b.ReportMetric(ms(med[i]), names[i]+"-ms")
		b.ReportMetric(ms(p90[i]), names[i]+"-p90-ms")
	}
	const old, now, sess, whole = 2, 3, 7, 8
	delta, deltaP90 := med[now]-med[0], p90[now]-p90[0]
	oldDelta, oldDeltaP90 := med[old]-med[0], p90[old]-p90[0]
	sessDelta, sessDeltaP90 := med[sess]-med[0], p90[sess]-p90[0]
	b.ReportMetric(ms(sessDelta), "delta-session-ms")
	b.ReportMetric(ms(sessDeltaP90), "delta-session-p90-ms")
	b.ReportMetric(ms(delta), "delta-ms")
	b.ReportMetric(ms(deltaP90), "delta-p90-ms")
	b.ReportMetric(ms(oldDelta), "delta-istota-ms")
	b.ReportMetric(ms(oldDeltaP90), "delta-istota-p90-ms")
	benchfig.Report(b, "sandbox: /bin/true in the task's sandbox (a session, started while the files are pulled), over bare (median; istota-init, default limits)",
		fmt.Sprintf("+%.1f ms (p90 +%.1f ms)", ms(sessDelta), ms(sessDeltaP90)), "≤ bare + 10 ms", benchfig.Met(sessDelta <= 10*time.Millisecond))
	benchfig.Report(b, "sandbox: a session started for /bin/true alone and closed after it, over bare (median); what a task waits for when there is nothing to pull",
		fmt.Sprintf("+%.1f ms (p90 +%.1f ms)", ms(med[whole]-med[0]), ms(p90[whole]-p90[0])), "", nil)
	benchfig.Report(b, "sandbox: /bin/true in a sandbox of its own (Prepare, bwrap, Close; no session), over bare (median; istota-init)",
		fmt.Sprintf("+%.1f ms (p90 +%.1f ms)", ms(delta), ms(deltaP90)), "", nil)
	benchfig.Report(b, "sandbox: /bin/true in a sandbox of its own with the istota binary as init (no istota-init, so no session), over bare (median)",
		fmt.Sprintf("+%.1f ms (p90 +%.1f ms)", ms(oldDelta), ms(oldDeltaP90)), "", nil)
	// What Istota adds on top of bubblewrap's own floor, absolute and as a multiple of that
	// floor: on a machine whose process starts are slow (a busy or throttled VM) the
	// absolute figures above grow with bare and bwrap alone, the multiple much less.
	floor := med[1] - med[0]
	benchfig.Report(b, "sandbox: what the sandbox adds beyond bwrap alone (median; istota-init)",
		fmt.Sprintf("+%.1f ms; sandboxed − bare = %.2f × (bwrap alone − bare), %.2f with the istota binary as init",
			ms(med[now]-med[1]), float64(delta)/float64(floor), float64(oldDelta)/float64(floor)), "", nil)
	benchfig.Report(b, "sandbox: where a sandboxed run's time goes (median; istota-init)",
		fmt.Sprintf("Prepare %.1f ms, bwrap + init + /bin/true %.1f ms, Close %.1f ms; without the gateway and service sockets %.1f ms in all (%.1f with); "+
			"the process without the init (bwrap with the sandbox's options running /bin/true) %.1f ms, bwrap alone %.1f ms",
			ms(percentile(phases[0], 50)), ms(percentile(phases[1], 50)), ms(percentile(phases[2], 50)), ms(med[4]), ms(med[now]),
			ms(med[5]), ms(med[1])), "", nil)
	benchfig.Report(b, "sandbox: bwrap's least (--ro-bind / /, the user namespace only) over bare (median)",
		fmt.Sprintf("+%.1f ms; with the namespaces the sandbox needs (bwrap alone) +%.1f ms", ms(med[6]-med[0]), ms(floor)), "", nil)
	// Page faults do not depend on the machine's speed; what one costs does. Their product
	// says how much of a start is the machine's price of touching memory.
	flt := make([]int64, len(runs))
	for i := range faults {
		slices.Sort(faults[i])
		flt[i] = faults[i][len(faults[i])/2]
		b.ReportMetric(float64(flt[i]), names[i]+"-faults")
	}
	cost := percentile(costs, 50)
	b.ReportMetric(float64(cost)/float64(time.Microsecond), "fault-us")
	benchfig.Report(b, "sandbox: minor page faults per /bin/true, bare / bwrap alone / sandboxed, istota as init / sandboxed, istota-init / in a session (median; a session's count is attach's alone)",
		fmt.Sprintf("%d / %d / %d / %d / %d; sandboxed − bare = %d faults", flt[0], flt[1], flt[old], flt[now], flt[sess], flt[now]-flt[0]), "", nil)
	benchfig.Report(b, "sandbox: one minor page fault on this machine (median, fresh anonymous page)",
		fmt.Sprintf("%.2f µs; the %d faults sandboxed − bare cost ≈ %.1f ms of the +%.1f ms at that price",
			float64(cost)/float64(time.Microsecond), flt[now]-flt[0], ms(time.Duration(flt[now]-flt[0])*cost), ms(delta)), "", nil)
	benchfig.Report(b, fmt.Sprintf("sandbox: /bin/true bare / bwrap alone / sandboxed, istota as init / sandboxed, istota-init / in a session / a whole session; median (p90) of %d interleaved", overheadRounds),
		fmt.Sprintf("%.2f (%.2f) / %.1f (%.1f) / %.1f (%.1f) / %.1f (%.1f) / %.1f (%.1f) / %.1f (%.1f) ms", ms(med[0]), ms(p90[0]), ms(med[1]), ms(p90[1]),
			ms(med[old]), ms(p90[old]), ms(med[now]), ms(p90[now]), ms(med[sess]), ms(p90[sess]), ms(med[whole]), ms(p90[whole])), "", nil)
}

// walkRounds is how many ownership walks each benchmark iteration times.
const walkRounds = 100

// BenchmarkOwnershipWalk is what giving a 10,000-file workspace (100 directories of 100
// files, the sidecar's own files as a sync leaves them) to the agent uid costs each
// task, once it was given the first time: with nothing changed since, and with one new
// file from a sync in one directory before every task.
func BenchmarkOwnershipWalk(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the ownership walk runs only when the sidecar is root")
	}
	e := newTestEnv(b)
	r, err := New(e.cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	ws := filepath.Join(e.base, "workspace")
	makeTree(b, ws, 10, 10, 100)

	start := time.Now()
	if err := r.ownTree(ws); err != nil {
		b.Fatal(err)
	}
	firstWalk := time.Since(start)
	// The first walk changed every directory's owner, so their ctimes are now; a
	// directory changed within the last second is always listed again (timestamps can
	// lag the clock), and a real workspace is given away long before its next task.
	time.Sleep(1100 * time.Millisecond)

	for _, tc := range []struct {
		name, figure string
		change       func(i int)
	}{
		{"unchanged", "nothing changed since the last task", nil},
		{"one-new-file", "one new file in one directory before each task", func(i int) {
			p := filepath.Join(ws, "d3", "d7", fmt.Sprintf("synced-%d.txt", i))
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			if tc.change == nil {
				// A parent benchmark's log is not printed; a sub-benchmark's is.
				benchfig.Report(b, "sandbox: ownership walk, 10,000-file workspace, first task (every file changes owner)",
					fmt.Sprintf("%.1f ms", ms(firstWalk)), "", nil)
			}
			var took []time.Duration
			n := 0
			for b.Loop() {
				took = took[:0]
				for range walkRounds {
					if tc.change != nil {
						tc.change(n)
						n++
					}
					start := time.Now()
					if err := r.ownTree(ws); err != nil {
						b.Fatal(err)
					}
					took = append(took, time.Since(start))
				}
			}
			med, p90 := percentile(took, 50), percentile(took, 90)
			b.ReportMetric(ms(med), "walk-ms")
			b.ReportMetric(ms(p90), "walk-p90-ms")
			benchfig.Report(b, "sandbox: ownership walk per task, 10,000-file workspace, "+tc.figure+", median (p90)",
				fmt.Sprintf("%.2f (%.2f) ms", ms(med), ms(p90)), "", nil)
		})
	}
}

// makeTree creates top directories holding sub directories of files files each, all
// owned by whoever runs the benchmark (root, like the sidecar's sync).
func makeTree(tb testing.TB, dir string, top, sub, files int) {
	tb.Helper()
	for i := range top {
		for j := range sub {
			d := filepath.Join(dir, fmt.Sprintf("d%d", i), fmt.Sprintf("d%d", j))
			if err := os.MkdirAll(d, 0o755); err != nil {
				tb.Fatal(err)
			}
			for k := range files {
				if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d.md", k)), []byte("note"), 0o644); err != nil {
					tb.Fatal(err)
				}
			}
		}
	}
}

// shippedBinary builds the istota binary the way scripts/appstore.sh ships it (static,
// stripped, the same tags and flags; keep them in step) into dir. The init's start is
// part of every task, and a test binary is neither static nor stripped.
func shippedBinary(tb testing.TB, dir string) string {
	tb.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		tb.Fatalf("locate the module: %v", err)
	}
	out := filepath.Join(dir, "istota-shipped")
	cmd := exec.Command("go", "build", "-buildvcs=false",
		"-tags", "sqlite_fts5 sqlite_omit_load_extension osusergo netgo", "-trimpath",
		"-ldflags", "-s -w -linkmode external -extldflags -static",
		"-o", out, "./sidecar/cmd/istota")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd.Env = append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build the shipped istota binary: %v\n%s", err, b)
	}
	return out
}

// defaultLimits are the resource limits of config.Default, converted the way the
// sidecar does (app.sandboxConfig).
func defaultLimits() Limits {
	s := config.Default().Sandbox
	return Limits{
		AddressSpace: uint64(s.MemoryMB) << 20,
		Processes:    uint64(s.MaxProcesses),
		OpenFiles:    uint64(s.MaxOpenFiles),
		CPUSeconds:   uint64(s.CPUSeconds),
	}
}

// percentile returns the p-th percentile (nearest rank) of d; it sorts d.
func percentile(d []time.Duration, p int) time.Duration {
	slices.Sort(d)
	return d[(len(d)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sample is one timed run: its wall time and the minor page faults of its process tree.
type sample struct {
	took   time.Duration
	faults int64
}

// minorFaults is the minor page faults of cmd's process and of the descendants it waited
// for (getrusage's accounting at wait), or 0 before cmd ran.
func minorFaults(cmd *exec.Cmd) int64 {
	if cmd == nil || cmd.ProcessState == nil {
		return 0
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	return ru.Minflt
}

// faultPages is how many fresh anonymous pages faultCost touches per measurement.
const faultPages = 256

// faultCost is what one minor page fault costs on this machine: the time to touch
// faultPages fresh anonymous pages once each, divided by their number. It is the unit of
// every process start (an exec maps and touches a few hundred pages); on a VM whose page
// faults trap to the hypervisor it is tens of times what it is on bare hardware.
func faultCost() (time.Duration, error) {
	size := faultPages * os.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return 0, fmt.Errorf("map %d bytes: %w", size, err)
	}
	start := time.Now()
	for i := 0; i < size; i += os.Getpagesize() {
		mem[i] = 1
	}
	took := time.Since(start)
	if err := syscall.Munmap(mem); err != nil {
		return 0, err
	}
	return took / faultPages, nil
}

// tmpfsDir returns a new directory on /dev/shm, traversable by the agent uid and removed
// after the benchmark, or "" when /dev/shm is not a tmpfs here.
func tmpfsDir(b *testing.B) string {
	const tmpfsMagic = 0x01021994
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || st.Type != tmpfsMagic {
		return ""
	}
	dir, err := os.MkdirTemp("/dev/shm", "istota-bench-")
	if err != nil {
		return ""
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		b.Fatal(err)
	}
	return dir
}
