package sandbox

import (
	"context"
	"os/exec"
	"testing"
)

// BenchmarkSandboxOverhead runs /bin/true directly and through a complete sandbox
// (Prepare, bwrap, the init, Close). The overhead is sandbox ns/op minus direct ns/op;
// reference §7.1 measured about 4 ms for bwrap alone.
func BenchmarkSandboxOverhead(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sandbox", func(b *testing.B) {
		e := newTestEnv(b)
		r := e.runner(b)
		spec := e.userDirs(b, "bench")
		spec.Argv = []string{"/bin/true"}
		ctx := context.Background()
		for b.Loop() {
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
		}
	})
	b.Run("sandbox+gateway", func(b *testing.B) {
		e := newTestEnv(b)
		r := e.runner(b)
		spec := e.userDirs(b, "bench")
		spec.Argv = []string{"/bin/true"}
		spec.LLM = &LLMUpstream{BaseURL: "http://127.0.0.1:9", APIKey: "sk-bench-key-not-real"}
		ctx := context.Background()
		for b.Loop() {
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
		}
	})
}
