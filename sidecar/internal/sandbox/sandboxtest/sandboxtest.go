// Package sandboxtest builds the real istota-init (the C program in cmd/istota-init) for
// tests that run sandboxes, so they run the init that ships rather than the Go fallback
// in the test binary standing in for it.
package sandboxtest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	once     sync.Once
	buildDir string
	built    string
	buildErr error
)

// BuildInit builds cmd/istota-init the way it ships (its build.sh with cc, as the
// Makefile does; scripts/appstore.sh uses the same script) into a temporary directory,
// once per test process, and returns its path. Call Cleanup from TestMain.
func BuildInit() (string, error) {
	once.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "istota-init-build-")
		if buildErr != nil {
			return
		}
		built = filepath.Join(buildDir, "istota-init")
		buildErr = Build(built)
	})
	return built, buildErr
}

// Build builds cmd/istota-init into out as it ships.
func Build(out string) error {
	dir, err := SourceDir()
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(dir, "build.sh"), "cc", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build istota-init: %w\n%s", err, b)
	}
	return nil
}

// SourceDir returns the directory of istota-init's source and build script.
func SourceDir() (string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("locate the module: %w", err)
	}
	return filepath.Join(filepath.Dir(strings.TrimSpace(string(gomod))), "sidecar", "cmd", "istota-init"), nil
}

// Init puts a copy of the built istota-init into dir (which the agent uid must be able
// to pass through) and returns its path.
func Init(tb testing.TB, dir string) string {
	tb.Helper()
	src, err := BuildInit()
	if err != nil {
		tb.Fatal(err)
	}
	dst := filepath.Join(dir, "istota-init")
	if err := os.Link(src, dst); err == nil {
		return dst
	}
	if err := copyFile(src, dst); err != nil {
		tb.Fatalf("copy istota-init: %v", err)
	}
	return dst
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Cleanup removes what BuildInit built.
func Cleanup() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}
