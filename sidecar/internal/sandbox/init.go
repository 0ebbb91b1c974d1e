package sandbox

import (
	"io"
	"runtime"

	"github.com/istota/istota/sidecar/internal/sandbox/sandboxinit"
)

// initName prefixes the fallback init's own messages on the task's stderr.
const initName = "istota sandbox-init"

// fallbackInit is the init run by the istota binary itself ("istota sandbox-init"): an
// install that predates istota-init, or one that lost the file, still works, only each
// task starts slower.
var fallbackInit = sandboxinit.Self{Name: initName, Args: []string{InitCommand}}

// RunInit is the istota binary's "sandbox-init" subcommand: the sandbox's pid 1 when
// there is no istota-init (Config.InitPath), the Go twin of that C program
// (sandboxinit.Run, same protocol), and a second start of it sets the resource limits
// when util-linux prlimit is missing. When it returns, the process must exit with the
// returned status.
func RunInit(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// The process is the init and nothing else from here on.
	runtime.GOMAXPROCS(1)
	return sandboxinit.Run(fallbackInit, args, stdin, stdout, stderr)
}
