package credproxy

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/sandbox"
	"github.com/istota/istota/sidecar/internal/sandbox/testrunner"
)

// TestClientInsideSandbox runs "istota skill …" (this test binary, see TestMain) inside
// a real bwrap sandbox as the unprivileged agent uid, with the proxy as the task's
// service, as the sidecar does for every task.
func TestClientInsideSandbox(t *testing.T) {
	cfg, base := testrunner.Config(t)
	runner, err := sandbox.New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer runner.Close()

	f := newFixture(t, Options{})
	users := filepath.Join(base, "users")
	if err := os.Mkdir(users, 0o711); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{TaskID: 7, UserID: "alice"}
	root := filepath.Join(users, "alice")
	spec.Workspace, spec.Home, spec.Tmp = filepath.Join(root, "workspace"), filepath.Join(root, "home"), filepath.Join(root, "tmp")
	if err := os.Mkdir(root, 0o711); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{spec.Workspace, spec.Home, spec.Tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	spec.Services = []sandbox.Service{f.srv.Service(Identity{UserID: "alice", TaskID: 7})}
	// The agent keeps whatever it sees: the skill's output lands in a workspace file,
	// and the environment in another, so the test can check neither holds a secret.
	spec.Argv = []string{"/bin/sh", "-c", `
istota skill whoami
istota skill upstream x > /workspace/upstream.out; echo "upstream_exit=$?"
cat /workspace/upstream.out
echo hello | istota skill kv set notes greeting; echo "kv_exit=$?"
istota skill kv get notes greeting
istota skill admin-tool; echo "admin_exit=$?"
env > /tmp/env.txt
ls -l /run/istota/
`}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := runner.Prepare(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	run.Cmd.Stdout, run.Cmd.Stderr = &out, &errb
	err = run.Cmd.Run()
	if cerr := run.Close(); cerr != nil {
		t.Errorf("Close: %v", cerr)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run: %v", err)
	}
	stdout, stderr := out.String(), errb.String()
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)

	for _, want := range []string{
		"user_id=alice\ntask_id=7\nadmin=false\n",
		"upstream_exit=0\nupstream says hello\nenv=UPSTREAM_TOKEN,UPSTREAM_URL\nargs=x\nstdin=\n",
		"kv_exit=0\nhello\n",
		"admin_exit=126\n",
		"skills.sock",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if !strings.Contains(stderr, "istota skill admin-tool: refused (not_authorized): admin-tool is only available to administrators") {
		t.Errorf("stderr lacks the refusal: %q", stderr)
	}
	if got := f.up.seen(); len(got) != 1 || got[0] != "Bearer "+f.aliceTok {
		t.Errorf("upstream saw %q", got)
	}
	if e := f.lastAudit(t, "alice"); e.Reason != audit.ReasonNotAuthorized || e.TaskID != 7 {
		t.Errorf("last audit entry = %+v", e)
	}

	// No credential in anything the sandbox printed or left behind.
	secrets := []string{f.aliceTok, f.bobTok, f.extraTok}
	for _, s := range secrets {
		if strings.Contains(stdout, s) || strings.Contains(stderr, s) {
			t.Errorf("the sandbox printed a credential")
		}
	}
	files := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		files++
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds a credential", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 2 {
		t.Errorf("found %d files in the user's directories, want the two the script wrote", files)
	}
}
