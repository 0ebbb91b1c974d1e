package sandbox

import (
	"context"
	"net"
	"os/exec"
	"testing"
	"time"
)

// BenchmarkSandboxOverhead runs /bin/true directly and through a complete sandbox as a
// task gets it (Prepare, bwrap, the init, the LLM gateway, two bridged service sockets
// standing in for the network and credential proxies, Close), alternating the two in
// every iteration, and reports both times and their ratio. Reference §7.1 measured about
// 4 ms for bwrap alone.
func BenchmarkSandboxOverhead(b *testing.B) {
	e := newTestEnv(b)
	r := e.runner(b)
	spec := e.userDirs(b, "bench")
	spec.Argv = []string{"/bin/true"}
	spec.LLM = &LLMUpstream{BaseURL: "http://127.0.0.1:9", APIKey: "sk-bench-key-not-real"}
	idle := func(ctx context.Context, ln net.Listener) error { <-ctx.Done(); return nil }
	spec.Services = []Service{{Name: "proxy", Port: 3128, Serve: idle}, {Name: "skills", Serve: idle}}
	ctx := context.Background()
	var direct, sandboxed time.Duration
	for b.Loop() {
		start := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		direct += time.Since(start)

		start = time.Now()
		rn, err := r.Prepare(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if err := rn.Cmd.Run(); err != nil {
			b.Fatal(err)
		}
		if err := rn.Close(); err != nil {
			b.Fatal(err)
		}
		sandboxed += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(direct.Microseconds())/1000/n, "direct-ms")
	b.ReportMetric(float64(sandboxed.Microseconds())/1000/n, "sandboxed-ms")
	b.ReportMetric(float64(sandboxed)/float64(direct), "ratio")
}
