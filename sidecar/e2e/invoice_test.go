package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInvoiceSkill runs the invoice skill the way the agent does: from the Bash tool of
// the real claude CLI in the user's sandbox, through the credential proxy, on the
// user's workspace outside. The agent must still be able to change the work log the
// skill rewrote, and nothing reaches another user.
func TestInvoiceSkill(t *testing.T) {
	e := newIsolationEnv(t, sidecarOptions{})
	ws := filepath.Join(e.sc.dir, "data", "users", "alice", "workspace")
	setup := `mkdir -p /workspace/istota/config && cd /workspace/istota/config && cat > INVOICING.md <<'EOF'
` + "```toml" + `
ledger = "books/main.beancount"
[[entities]]
key = "me"
name = "Alice Consulting"
currency = "EUR"
prefix = "AC"
[[clients]]
key = "globex"
name = "Globex Corp"
[[services]]
key = "dev"
name = "Development"
rate = "100"
unit = "hour"
` + "```" + `
EOF
printf -- '- 2025-03-04 | globex | dev | 2 | Review\n' > _INVOICES.md && echo setup-done`
	if out := e.run(t, "alice", false, setup); !strings.Contains(out, "setup-done") {
		t.Fatalf("setup:\n%s", out)
	}
	out := e.run(t, "alice", false, `istota skill invoice generate --period 2025-03 --date 2025-04-01; `+
		`echo '- 2025-03-20 | globex | dev | 1 | later' >> /workspace/istota/config/_INVOICES.md && echo appended; `+
		`istota skill invoice paid ../../etc/passwd; echo "exit=$?"; istota skill invoice paid AC-2025-0001 2025-04-03`)
	for _, want := range []string{"Issued 1 invoice(s)", "AC-2025-0001  Globex Corp  200.00 EUR", "appended", "exit=2", "Posted to books/main.beancount"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "istota/exports/invoices/AC-2025-0001.pdf")); err != nil {
		t.Errorf("no PDF in alice's workspace: %v", err)
	}
	log, _ := os.ReadFile(filepath.Join(ws, "istota/config/_INVOICES.md"))
	if string(log) != "- 2025-03-04 | globex | dev | 2 | Review | AC-2025-0001\n- 2025-03-20 | globex | dev | 1 | later\n" {
		t.Errorf("work log:\n%s", log)
	}
	ledger, _ := os.ReadFile(filepath.Join(ws, "books/main.beancount"))
	if !strings.Contains(string(ledger), `invoice: "AC-2025-0001"`) {
		t.Errorf("ledger:\n%s", ledger)
	}
	if bob := e.run(t, "bob", false, `istota skill invoice list; istota skill invoice paid AC-2025-0001; echo "exit=$?"`); strings.Contains(bob, "Globex") || !strings.Contains(bob, "exit=1") {
		t.Errorf("bob:\n%s", bob)
	}
}
