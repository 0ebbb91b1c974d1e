// Command istota-init is the pid 1 of every Istota sandbox (package sandboxinit). It is
// its own small binary, shipped beside istota, because it starts once per task: the
// whole istota binary takes about 20 ms longer to start. It imports nothing but the
// standard library; keep it that way (sandboxinit.TestDependencies).
package main

import (
	"os"
	"runtime"

	"github.com/istota/istota/sidecar/internal/sandbox/sandboxinit"
)

func main() {
	// The init waits and copies bytes between sockets; one P is plenty, and with more the
	// runtime starts threads for them, which measurably slows every task's start (about
	// 5 ms of 35 on a loaded 2-core machine).
	runtime.GOMAXPROCS(1)
	os.Exit(sandboxinit.Run(sandboxinit.Minimal, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
