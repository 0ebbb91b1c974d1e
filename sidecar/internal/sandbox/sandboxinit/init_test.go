package sandboxinit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// testSelf is the init as this test binary runs it: TestMain hands "sandboxinit-test …"
// to Run, so a second start (--exec) comes back here.
var testSelf = Self{Name: "istota-init", Args: []string{"sandboxinit-test"}}

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == testSelf.Args[0] {
		os.Exit(Run(testSelf, os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

const prlimitPath = "/usr/bin/prlimit"

func TestArguments(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", []string{"--"}, "istota-init: no command"},
		{"bad forward", []string{"--forward", "x=/s", "--", "true"}, "PORT=/path"},
		{"relative socket", []string{"--forward", "80=s", "--", "true"}, "PORT=/path"},
		{"unknown limit", []string{"--rlimit", "stack=1", "--", "true"}, "unknown limit"},
		{"zero limit", []string{"--rlimit", "cpu=0", "--", "true"}, "positive"},
		{"unknown flag", []string{"--protocol=1", "--sideways", "--", "true"}, "not defined"},
		{"newer protocol", []string{"--protocol", "2", "--", "true"}, "istota-init: " + MismatchMessage + `: the sidecar speaks version "2", this init speaks 1`},
		// A newer sidecar's flag that this init does not know: the version is the cause
		// to name, not the flag.
		{"newer protocol and flag", []string{"--protocol=2", "--sideways", "--", "true"}, "install the istota-init that was built with this istota binary"},
		{"older protocol", []string{"-protocol=0", "--", "true"}, MismatchMessage},
		{"protocol without value", []string{"--protocol"}, "flag needs an argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr strings.Builder
			if code := Run(testSelf, tc.args, nil, os.Stdout, &stderr); code != 2 {
				t.Fatalf("exit %d, want 2 (stderr %q)", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stderr %q does not mention %q", stderr.String(), tc.want)
			}
		})
	}
}

func TestProtocolAfterSeparatorIsTheCommand(t *testing.T) {
	// "--protocol 9" after "--" belongs to the command, not to the init.
	var out, errb strings.Builder
	code := Run(testSelf, []string{"--protocol=" + strconv.Itoa(Protocol), "--", "/bin/echo", "--protocol", "9"}, nil, &out, &errb)
	if code != 0 || out.String() != "--protocol 9\n" {
		t.Fatalf("exit %d stdout %q stderr %q", code, out.String(), errb.String())
	}
}

func TestOutsideSandbox(t *testing.T) {
	// Run as a plain process: it waits for its own child only, and copies output
	// written to a non-file writer.
	var out, errb strings.Builder
	code := Run(testSelf, []string{"--", "/bin/sh", "-c", "echo out; echo err >&2; exit 5"}, nil, &out, &errb)
	if code != 5 || out.String() != "out\n" || errb.String() != "err\n" {
		t.Fatalf("exit %d stdout %q stderr %q", code, out.String(), errb.String())
	}
	// Without --prlimit the limits are set by a second start of this binary (--exec).
	out.Reset()
	errb.Reset()
	code = Run(testSelf, []string{"--rlimit", "nofile=77", "--", "/bin/sh", "-c", "ulimit -n"}, nil, &out, &errb)
	if code != 0 || out.String() != "77\n" {
		t.Fatalf("with a limit: exit %d stdout %q stderr %q", code, out.String(), errb.String())
	}

	// With --prlimit the init runs that program with prlimit's options and the command
	// after "--": a stand-in records its arguments, then hands them to the real one.
	if out, err := exec.Command(prlimitPath, "--version").Output(); err != nil || !strings.Contains(string(out), "util-linux") {
		t.Fatalf("these tests need util-linux prlimit at %s: %v %q", prlimitPath, err, out)
	}
	dir := t.TempDir()
	record := filepath.Join(dir, "args")
	fake := filepath.Join(dir, "prlimit")
	script := "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > " + record + "\nexec " + prlimitPath + " \"$@\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	code = Run(testSelf, []string{"--prlimit", fake, "--rlimit", "nofile=77", "--rlimit", "cpu=99", "--", "sh", "-c", "ulimit -n; ulimit -t"}, nil, &out, &errb)
	if code != 0 || out.String() != "77\n99\n" {
		t.Fatalf("through prlimit: exit %d stdout %q stderr %q", code, out.String(), errb.String())
	}
	got, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	if want := fake + "\n--nofile=77\n--cpu=99\n--\nsh\n-c\nulimit -n; ulimit -t\n"; string(got) != want {
		t.Fatalf("prlimit was run with\n%s\nwant\n%s", got, want)
	}
}

// heavyStandard are standard packages the init must not pull in: each costs start time
// (package initialisation, binary size) in every task, and the init has no use for them.
var heavyStandard = []string{
	"net/http", "crypto/tls", "crypto/x509", "encoding/gob", "encoding/json", "encoding/xml",
	"regexp", "text/template", "html/template", "log/slog", "database/sql", "compress/gzip",
	"math/big", "go/ast", "runtime/cgo",
}

// TestDependencies fails when the init binary pulls in a package from outside the
// standard library or a heavy one from inside it, so that nobody re-bloats it by
// importing a convenient helper: the init starts once per task.
func TestDependencies(t *testing.T) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("locate the module: %v", err)
	}
	// As it is built: without cgo (it needs no sqlite), for both shipped architectures.
	for _, arch := range []string{"amd64", "arm64"} {
		cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", "./sidecar/cmd/istota-init")
		cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", arch, err)
		}
		own := map[string]bool{
			"github.com/istota/istota/sidecar/cmd/istota-init":              true,
			"github.com/istota/istota/sidecar/internal/sandbox/sandboxinit": true,
		}
		seen := 0
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			pkg, std, _ := strings.Cut(line, " ")
			switch {
			case own[pkg]:
				seen++
			case std != "true":
				t.Errorf("%s: the init imports %s, which is not in the standard library", arch, pkg)
			}
			for _, h := range heavyStandard {
				if pkg == h {
					t.Errorf("%s: the init imports %s, which it has no use for and which slows every task's start", arch, pkg)
				}
			}
		}
		if seen != len(own) {
			t.Fatalf("%s: go list did not list the init's own packages:\n%s", arch, out)
		}
	}
}
