package mail

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/skills"
)

func emailSkill(t *testing.T, c *channel, opts SkillOptions) skills.Skill {
	t.Helper()
	reg := skills.NewRegistry()
	if err := RegisterSkill(reg, c.outbox, opts); err != nil {
		t.Fatal(err)
	}
	s, ok := reg.Lookup(SkillName)
	if !ok {
		t.Fatal("email skill not registered")
	}
	return s
}

func TestSkillRecipientRestriction(t *testing.T) {
	c := newChannel(t, channelOpts{})
	c.addUser(t, "alice", "alice@example.org", "alice@home.example")
	c.addUser(t, "bob", "bob@example.org")
	s := emailSkill(t, c, SkillOptions{AllowedDomains: []string{"Partner.example", "*.corp.example"}, MaxPerHour: 100})
	tk, _, err := c.queue.Enqueue(context.Background(), queue.NewTask{UserID: "alice", Source: queue.SourceTalk, Prompt: "mail me"})
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		args     []string
		stdin    string
		exit     int
		contains string
	}{
		{"own profile address", []string{"send", "--to", "alice@example.org", "--subject", "Note", "--body", "hi"}, "", 0, "queued for delivery to alice@example.org"},
		{"own extra address with name and case", []string{"send", "--to", "Alice <ALICE@home.example>", "--subject", "Note", "--body", "hi"}, "", 0, "queued"},
		{"allowed domain", []string{"send", "--to", "team@partner.example", "--subject", "Note", "--body", "hi"}, "", 0, "queued"},
		{"allowed subdomain pattern", []string{"send", "--to", "x@eu.corp.example", "--subject", "Note", "--body", "hi"}, "", 0, "queued"},
		{"subdomain of an exact domain", []string{"send", "--to", "x@sub.partner.example", "--subject", "Note", "--body", "hi"}, "", 1, "not sent"},
		{"apex of a subdomain pattern", []string{"send", "--to", "x@corp.example", "--subject", "Note", "--body", "hi"}, "", 1, "not sent"},
		{"another user's address", []string{"send", "--to", "bob@example.org", "--subject", "Note", "--body", "hi"}, "", 1, "alice@example.org, alice@home.example"},
		{"stranger among own", []string{"send", "--to", "alice@example.org", "--to", "evil@example.net", "--subject", "Note", "--body", "hi"}, "", 1, "not sent"},
		{"lookalike domain", []string{"send", "--to", "x@partner.example.evil.net", "--subject", "Note", "--body", "hi"}, "", 1, "not sent"},
		{"body from stdin", []string{"send", "--to", "alice@example.org", "--subject", "Piped"}, "from stdin\n", 0, "queued"},
		{"json", []string{"send", "--json"}, `{"to":["alice@example.org"],"subject":"JSON","body":"from json"}`, 0, "queued"},
		{"json to a stranger", []string{"send", "--json"}, `{"to":["evil@example.net"],"subject":"JSON","body":"x"}`, 1, "not sent"},
		{"json with flags", []string{"send", "--json", "--subject", "x"}, `{}`, 2, "no other flags"},
		{"json unknown field", []string{"send", "--json"}, `{"to":["alice@example.org"],"subject":"s","body":"b","bcc":["evil@example.net"]}`, 2, "not a message object"},
		{"subject injection", []string{"send", "--to", "alice@example.org", "--subject", "Hi\r\nBcc: evil@example.net", "--body", "x"}, "", 2, "single line"},
		{"subject injection in json", []string{"send", "--json"}, `{"to":["alice@example.org"],"subject":"Hi\nBcc: evil@example.net","body":"x"}`, 2, "single line"},
		{"recipient injection", []string{"send", "--to", "alice@example.org\r\nBcc: evil@example.net", "--subject", "s", "--body", "x"}, "", 2, "single line"},
		{"no recipient", []string{"send", "--subject", "s", "--body", "x"}, "", 2, "recipient"},
		{"no subject", []string{"send", "--to", "alice@example.org", "--body", "x"}, "", 2, "subject"},
		{"empty body", []string{"send", "--to", "alice@example.org", "--subject", "s"}, "", 2, "body is empty"},
		{"not an address", []string{"send", "--to", "nobody", "--subject", "s", "--body", "x"}, "", 2, "not an e-mail address"},
		{"unknown subcommand", []string{"forward"}, "", 2, "unknown subcommand"},
	}
	queued := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := s.Run(context.Background(), skills.Invocation{Args: tt.args, Stdin: []byte(tt.stdin), UserID: "alice", TaskID: tk.ID})
			out := string(res.Stdout) + string(res.Stderr)
			if res.ExitCode != tt.exit || !strings.Contains(out, tt.contains) {
				t.Fatalf("exit %d output %q, want exit %d containing %q", res.ExitCode, out, tt.exit, tt.contains)
			}
			if res.Err != nil {
				t.Fatalf("internal error: %v", res.Err)
			}
			if tt.exit == 0 {
				queued++
			}
		})
	}
	entries := c.entries(t)
	if len(entries) != queued {
		t.Fatalf("%d rows queued, want %d", len(entries), queued)
	}
	for _, e := range entries {
		if e.Kind != KindSkill || e.UserID != "alice" || e.TaskID != tk.ID {
			t.Errorf("row %+v", e)
		}
		for _, to := range e.To {
			if strings.Contains(to, "evil") || strings.Contains(to, "bob") {
				t.Errorf("queued to %q", to)
			}
		}
	}
	if n := c.deliver(t); n != queued {
		t.Fatalf("delivered %d, want %d", n, queued)
	}
	for _, m := range c.smtp.messages() {
		for _, to := range m.To {
			if strings.Contains(to, "evil") || strings.Contains(to, "bob") {
				t.Errorf("sent to %q", to)
			}
		}
		if strings.Contains(string(m.Data), "Bcc") {
			t.Errorf("a Bcc header reached the server:\n%s", m.Data)
		}
	}
	sent, err := c.outbox.Sent(context.Background(), "alice", 0)
	if err != nil || len(sent) != queued {
		t.Fatalf("sent records %d (%v), want %d", len(sent), err, queued)
	}
	for _, m := range sent {
		if m.Kind != KindSkill || m.UserID != "alice" {
			t.Errorf("sent record %+v", m)
		}
	}
}

func TestSkillRateLimit(t *testing.T) {
	c := newChannel(t, channelOpts{})
	c.addUser(t, "alice", "alice@example.org")
	c.addUser(t, "bob", "bob@example.org")
	s := emailSkill(t, c, SkillOptions{MaxPerHour: 2})
	send := func(user, to string) skills.Result {
		return s.Run(context.Background(), skills.Invocation{
			Args: []string{"send", "--to", to, "--subject", "s", "--body", "b"}, UserID: user,
		})
	}
	for i := range 2 {
		if res := send("alice", "alice@example.org"); res.ExitCode != 0 {
			t.Fatalf("send %d: %s", i, res.Stderr)
		}
	}
	res := send("alice", "alice@example.org")
	if res.ExitCode != 1 || !strings.Contains(string(res.Stderr), "limit of 2 messages per hour") {
		t.Fatalf("third send: exit %d %q", res.ExitCode, res.Stderr)
	}
	// The limit is per user.
	if res := send("bob", "bob@example.org"); res.ExitCode != 0 {
		t.Fatalf("bob: %s", res.Stderr)
	}
	rec := s.Run(context.Background(), skills.Invocation{Args: []string{"recipients"}, UserID: "alice"})
	if !strings.Contains(string(rec.Stdout), "sends left this hour: 0 of 2") || !strings.Contains(string(rec.Stdout), "your addresses: alice@example.org") {
		t.Errorf("recipients = %q", rec.Stdout)
	}
	// Delivered or not, a send counts for an hour.
	c.deliver(t)
	if res := send("alice", "alice@example.org"); res.ExitCode != 1 {
		t.Fatalf("send after delivery: exit %d", res.ExitCode)
	}
	c.clock.Advance(time.Hour + time.Second)
	if res := send("alice", "alice@example.org"); res.ExitCode != 0 {
		t.Fatalf("send an hour later: %s", res.Stderr)
	}

	off := emailSkill(t, c, SkillOptions{MaxPerHour: 0})
	if res := off.Run(context.Background(), skills.Invocation{Args: []string{"send", "--to", "alice@example.org", "--subject", "s", "--body", "b"}, UserID: "alice"}); res.ExitCode != 1 || !strings.Contains(string(res.Stderr), "disabled") {
		t.Fatalf("disabled: exit %d %q", res.ExitCode, res.Stderr)
	}
}

func TestDomainAllowed(t *testing.T) {
	patterns := []string{"example.org", "*.corp.example", " Mixed.Case "}
	tests := []struct {
		domain string
		want   bool
	}{
		{"example.org", true},
		{"EXAMPLE.ORG", true},
		{"example.org.", true},
		{"sub.example.org", false},
		{"badexample.org", false},
		{"eu.corp.example", true},
		{"a.b.corp.example", true},
		{"corp.example", false},
		{"xcorp.example", false},
		{"mixed.case", true},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.domain, func(t *testing.T) {
			if got := DomainAllowed(tt.domain, patterns); got != tt.want {
				t.Fatalf("DomainAllowed(%q) = %v, want %v", tt.domain, got, tt.want)
			}
		})
	}
}
