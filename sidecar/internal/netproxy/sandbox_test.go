package netproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
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

// helperCommand makes the test binary act as a client inside the sandbox, where it is
// bound as sandbox.SelfBinary: "SelfBinary helperCommand LABEL MODE ARGS…". It prints
// one line "LABEL: …".
const helperCommand = "netproxy-test-helper"

func runHelper(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "helper: LABEL MODE ARGS…")
		return 2
	}
	label, mode, args := args[0], args[1], args[2:]
	say := func(format string, a ...any) { fmt.Printf(label+": "+format+"\n", a...) }
	switch {
	case mode == "get" && len(args) == 2:
		// An ordinary HTTP client configured only by the proxy environment.
		ca, err := os.ReadFile(args[1])
		if err != nil {
			say("error=%v", err)
			return 1
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		c := &http.Client{
			Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: &tls.Config{RootCAs: pool}},
			Timeout:   20 * time.Second,
		}
		resp, err := c.Get(args[0])
		if err != nil {
			say("error=%v", err)
			return 0
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		say("status=%d body=%s", resp.StatusCode, body)
	case mode == "connect" && len(args) == 1:
		// A raw CONNECT, to see the proxy's own answer.
		u, err := url.Parse(os.Getenv("HTTPS_PROXY"))
		if err != nil {
			say("error=%v", err)
			return 1
		}
		c, err := net.DialTimeout("tcp", u.Host, 20*time.Second)
		if err != nil {
			say("error=%v", err)
			return 0
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", args[0], args[0])
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			say("error=%v", err)
			return 0
		}
		say("status=%d x-proxy-error=%s", resp.StatusCode, resp.Header.Get(ErrorHeader))
	case mode == "dial" && len(args) == 1:
		c, err := net.DialTimeout("tcp", args[0], 5*time.Second)
		if err != nil {
			say("error=%v", err)
			return 0
		}
		c.Close()
		say("connected")
	default:
		fmt.Fprintln(os.Stderr, "helper: bad mode", mode)
		return 2
	}
	return 0
}

// newRunner prepares a sandbox runner whose istota binary is this test binary, the way
// the sandbox package's own tests do.
func newRunner(t *testing.T) (*sandbox.Runner, string) {
	t.Helper()
	cfg, base := testrunner.Config(t)
	r, err := sandbox.New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ws := filepath.Join(base, "workspace")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	return r, ws
}

// TestInsideSandbox runs clients in a real sandbox whose only way out is the proxy.
func TestInsideSandbox(t *testing.T) {
	r, ws := newRunner(t)
	cert := newCert(t, "allowed.test")
	allowed := newOrigin(t, "allowed", cert)
	evil := newOrigin(t, "evil", nil)
	if err := os.WriteFile(filepath.Join(ws, "ca.pem"), cert.pemCA, 0o644); err != nil {
		t.Fatal(err)
	}
	aud := testAudit(t)
	p := New(Options{
		Allow:        mustRules(t, hostPort("allowed.test", allowed.port)),
		AllowPrivate: []string{hostPort("allowed.test", allowed.port)},
		Resolver:     fakeResolver{"allowed.test": addrs("127.0.0.1"), "evil.test": addrs("127.0.0.1")},
		Audit:        aud,
		Logger:       testLogger(t),
	})

	good := "https://" + hostPort("allowed.test", allowed.port) + "/"
	bad := "https://" + hostPort("evil.test", evil.port) + "/"
	script := `h="$0 ` + helperCommand + `"
$h allowed get ` + good + ` /workspace/ca.pem
$h evil get ` + bad + ` /workspace/ca.pem
$h evil-connect connect ` + hostPort("evil.test", evil.port) + `
$h ip-connect connect ` + hostPort("127.0.0.1", allowed.port) + `
$h direct-ip dial ` + hostPort("127.0.0.1", allowed.port) + `
$h direct-name dial ` + hostPort("allowed.test", allowed.port) + `
echo "proxy-vars: $(env | grep -ci proxy)"
if command -v curl >/dev/null; then
  echo "curl-allowed: $(curl -sS --max-time 20 --cacert /workspace/ca.pem ` + good + ` 2>&1)"
  echo "curl-evil: $(curl -sS --max-time 20 -o /dev/null -w '%{http_connect}' ` + bad + ` 2>/dev/null)"
fi`
	spec := sandbox.Spec{
		TaskID:    testWho.TaskID,
		UserID:    testWho.UserID,
		Workspace: ws,
		Argv:      []string{"/bin/sh", "-c", script, sandbox.SelfBinary},
		Env:       map[string]string{"HTTPS_PROXY": ProxyEnv(Port)["HTTPS_PROXY"]},
		Services:  []sandbox.Service{p.Service(testWho)},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := r.Prepare(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	run.Cmd.Stdout, run.Cmd.Stderr = &stdout, &stderr
	err = run.Cmd.Run()
	if cerr := run.Close(); cerr != nil {
		t.Errorf("closing the run: %v", cerr)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run: %v", err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			out[k] = v
		}
	}
	t.Logf("sandbox output:\n%s\nstderr:\n%s", stdout.String(), stderr.String())

	check := func(key string, ok bool, why string) {
		t.Helper()
		if !ok {
			t.Errorf("%s: got %q; %s", key, out[key], why)
		}
	}
	check("allowed", out["allowed"] == "status=200 body=hello from allowed", "the allowed host must be reachable through HTTPS_PROXY")
	check("evil", strings.HasPrefix(out["evil"], "error=") && strings.Contains(out["evil"], "Forbidden"), "another host must be refused")
	check("evil-connect", out["evil-connect"] == "status=403 x-proxy-error="+ErrorBlocked, "the refusal must carry the proxy's error header")
	check("ip-connect", out["ip-connect"] == "status=403 x-proxy-error="+ErrorBlocked, "an IP literal must be refused")
	check("direct-ip", strings.HasPrefix(out["direct-ip"], "error="), "the origin must not be reachable directly")
	check("direct-name", strings.HasPrefix(out["direct-name"], "error="), "names must not resolve inside the sandbox")
	check("proxy-vars", out["proxy-vars"] == "1", "only HTTPS_PROXY is set")
	if _, err := exec.LookPath("curl"); err == nil {
		check("curl-allowed", out["curl-allowed"] == "hello from allowed", "curl must reach the allowed host")
		check("curl-evil", out["curl-evil"] == "403", "curl must see the proxy's 403")
	}
	if n := len(evil.requests()); n != 0 {
		t.Errorf("the refused host was reached %d times", n)
	}
	wantRefusal(t, aud, hostPort("evil.test", evil.port), audit.ReasonHostNotAllowed)
	wantRefusal(t, aud, hostPort("127.0.0.1", allowed.port), audit.ReasonHostNotAllowed)
}
