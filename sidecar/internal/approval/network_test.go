package approval

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/istota/istota/sidecar/internal/queue"
)

// Reaching a host is an external action: asked about once per new host, remembered
// for the user once approved (in any task, and when a fetch of that host was approved),
// refused when the tier denies, and never asked when it allows.
func TestCheckHost(t *testing.T) {
	f := newFixture(t, queue.SourceTalk, "room0001")
	ctx := context.Background()

	done := make(chan result, 1)
	go func() {
		o, err := f.svc.CheckHost(ctx, f.who(), "Pypi.ORG.", 443)
		done <- result{o, err}
	}()
	req := f.waitPending(t, 1)[0]
	if req.Host != "pypi.org" || req.Kind != KindNetwork || req.Tier != TierExternal || !strings.Contains(req.Summary, "Connect to pypi.org:443") {
		t.Errorf("question = %+v", req)
	}
	if _, err := f.svc.Decide(ctx, req.ID, "alice", true, ViaPage); err != nil {
		t.Fatal(err)
	}
	if r := receive(t, done); r.err != nil || !r.out.Allowed {
		t.Fatalf("approved host = %+v, %v", r.out, r.err)
	}

	// Another task of alice's reaches it without a question; bob is asked.
	other, _, err := f.q.Enqueue(ctx, queue.NewTask{UserID: "alice", Source: queue.SourceCron, Prompt: "check prices"})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := f.svc.CheckHost(ctx, Who{UserID: "alice", TaskID: other.ID}, "pypi.org", 80); err != nil || !out.Allowed {
		t.Fatalf("known host in another task = %+v, %v", out, err)
	}
	if known, _ := f.svc.KnownHost(ctx, "bob", "pypi.org"); known {
		t.Error("alice's approval counts for bob")
	}

	// A denied host stays unknown and is refused.
	go func() {
		o, err := f.svc.CheckHost(ctx, f.who(), "evil.example", 443)
		done <- result{o, err}
	}()
	req = f.waitPending(t, 1)[0]
	f.svc.Decide(ctx, req.ID, "alice", false, ViaTalkReaction)
	if r := receive(t, done); r.err != nil || r.out.Allowed || !strings.Contains(r.out.Message, "alice refused") {
		t.Fatalf("denied host = %+v, %v", r.out, r.err)
	}
	if known, _ := f.svc.KnownHost(ctx, "alice", "evil.example"); known {
		t.Error("a denied host became known")
	}

	// An approved WebFetch of a page makes its host known too.
	fetch := ClassifyTool("WebFetch", json.RawMessage(`{"url":"https://Docs.Example.net/guide","prompt":"summarise"}`))
	if fetch.Host != "docs.example.net" {
		t.Fatalf("WebFetch host = %q", fetch.Host)
	}
	ch := f.checkAsync(ctx, fetch)
	req = f.waitPending(t, 1)[0]
	f.svc.Decide(ctx, req.ID, "alice", true, ViaPage)
	if r := receive(t, ch); !r.out.Allowed {
		t.Fatalf("fetch = %+v", r.out)
	}
	if out, err := f.svc.CheckHost(ctx, f.who(), "docs.example.net", 443); err != nil || !out.Allowed {
		t.Fatalf("host of an approved fetch = %+v, %v", out, err)
	}

	// The tier's policy comes first: deny refuses even a known host, allow asks nothing.
	f.defs.External = Deny
	if out, _ := f.svc.CheckHost(ctx, f.who(), "pypi.org", 443); out.Allowed {
		t.Error("a known host was reached although the external tier is set to deny")
	}
	f.defs.External = Allow
	if out, _ := f.svc.CheckHost(ctx, f.who(), "new.example", 443); !out.Allowed {
		t.Error("allow policy still asked or refused")
	}
	var questions int
	f.db.Read.QueryRow(`SELECT COUNT(*) FROM approvals`).Scan(&questions)
	if questions != 3 {
		t.Errorf("%d questions asked, want 3 (pypi.org, evil.example, the fetch)", questions)
	}
}

// While a task waits for answers the pool is told once, and again when it goes on.
func TestWaitIsReported(t *testing.T) {
	f := newFixture(t, queue.SourceTalk, "room0001")
	var mu sync.Mutex
	var seen []string
	f.svc.opts.OnWait = func(id int64, waiting bool) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%d:%v", id, waiting))
	}
	ctx := context.Background()
	done := f.checkAsync(ctx, mailBob)
	req := f.waitPending(t, 1)[0]
	f.svc.Decide(ctx, req.ID, "alice", true, ViaPage)
	receive(t, done)
	mu.Lock()
	defer mu.Unlock()
	if want := fmt.Sprintf("[%d:true %d:false]", f.task.ID, f.task.ID); fmt.Sprint(seen) != want {
		t.Errorf("OnWait calls %v, want %s", seen, want)
	}
}

// HostAllowedNow answers at once: a known host under "ask", any host under "allow",
// none under "deny", and it never asks.
func TestHostAllowedNow(t *testing.T) {
	f := newFixture(t, queue.SourceTalk, "room0001")
	ctx := context.Background()
	if ok, msg, err := f.svc.HostAllowedNow(ctx, "alice", "cdn.example"); err != nil || ok || !strings.Contains(msg, "has not approved reaching cdn.example") {
		t.Fatalf("new host under ask = %v %q %v", ok, msg, err)
	}
	done := make(chan result, 1)
	go func() {
		o, err := f.svc.CheckHost(ctx, f.who(), "CDN.example", 443)
		done <- result{o, err}
	}()
	req := f.waitPending(t, 1)[0]
	f.svc.Decide(ctx, req.ID, "alice", true, ViaPage)
	receive(t, done)
	if ok, _, err := f.svc.HostAllowedNow(ctx, "alice", "cdn.example."); err != nil || !ok {
		t.Fatalf("approved host = %v %v", ok, err)
	}
	if ok, _, _ := f.svc.HostAllowedNow(ctx, "bob", "cdn.example"); ok {
		t.Error("alice's approval counts for bob")
	}
	f.defs.External = Deny
	if ok, msg, _ := f.svc.HostAllowedNow(ctx, "alice", "cdn.example"); ok || !strings.Contains(msg, "deny") {
		t.Errorf("deny = %v %q", ok, msg)
	}
	f.defs.External = Allow
	if ok, _, _ := f.svc.HostAllowedNow(ctx, "alice", "other.example"); !ok {
		t.Error("allow refused")
	}
	var questions int
	f.db.Read.QueryRow(`SELECT COUNT(*) FROM approvals`).Scan(&questions)
	if questions != 1 {
		t.Errorf("%d questions asked, want only CheckHost's", questions)
	}
}
