package netproxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/istota/istota/sidecar/internal/audit"
)

// recordingGate admits the hosts in allow and counts what it was asked.
type recordingGate struct {
	mu    sync.Mutex
	allow map[string]bool
	asked []string
	who   []Identity
}

func (g *recordingGate) AdmitHost(_ context.Context, who Identity, host string, port uint16) (bool, string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked = append(g.asked, host)
	g.who = append(g.who, who)
	if g.allow[host] {
		return true, "", nil
	}
	return false, "not done: alice refused it (approval #7)", nil
}

func (g *recordingGate) calls() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.asked...)
}

// A connection to an allowed host also passes the gate (the approvals of new hosts);
// the gate is asked once per host and task, never for a host the allowlist refuses,
// and its refusal is a 403 that says why, recorded in the audit log.
func TestGateDecidesAllowedHosts(t *testing.T) {
	gate := &recordingGate{allow: map[string]bool{"allowed.test": true}}
	f := newFixture(t, func(o *Options) { o.Gate = gate })
	c := f.pt.client(f.cert.pool)
	for range 3 {
		resp, err := c.Get("https://allowed.test:" + f.tls.port + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "hello from tls" {
			t.Fatalf("admitted host: %d %q", resp.StatusCode, body)
		}
		c.CloseIdleConnections()
	}
	if got := gate.calls(); len(got) != 1 || got[0] != "allowed.test" {
		t.Errorf("gate asked %v, want allowed.test once", got)
	}
	if gate.who[0] != testWho {
		t.Errorf("gate asked for %+v, want the listener's identity %+v", gate.who[0], testWho)
	}

	// Refused by the allowlist: the gate is not asked.
	conn := f.pt.dial(t)
	conn.send(t, "CONNECT "+hostPort("evil.test", f.tls.port)+" HTTP/1.1\r\n\r\n")
	if resp, _ := conn.response(t, http.MethodConnect); resp.Header.Get(ErrorHeader) != ErrorBlocked {
		t.Fatalf("host outside the allowlist: %s %s", resp.Status, resp.Header.Get(ErrorHeader))
	}
	if n := len(gate.calls()); n != 1 {
		t.Errorf("the gate was asked about a host the allowlist refuses")
	}

	// Allowed but not admitted: 403 not-approved, nothing reaches the origin.
	target := hostPort("a.wild.test", f.tls.port)
	before := len(f.tls.requests())
	conn = f.pt.dial(t)
	conn.send(t, "CONNECT "+target+" HTTP/1.1\r\n\r\n")
	resp, body := conn.response(t, http.MethodConnect)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(ErrorHeader) != ErrorNotApproved || !strings.Contains(body, "alice refused it") {
		t.Fatalf("refused by the gate: %s %q %q", resp.Status, resp.Header.Get(ErrorHeader), body)
	}
	conn.wantClosed(t)
	wantRefusal(t, f.audit, target, audit.ReasonNotApproved)
	if n := len(f.tls.requests()); n != before {
		t.Errorf("a refused connection reached the origin")
	}
}
