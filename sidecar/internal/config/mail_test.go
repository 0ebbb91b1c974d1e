package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestMailSection(t *testing.T) {
	dir := t.TempDir()
	imapPW := writeFile(t, dir, "imap.pw", "imap-secret-1\n")
	path := writeFile(t, dir, "istota.toml", `
[mail]
enabled = true
imap_addr = "mail.example.org:993"
imap_user = "istota@example.org"
imap_password_file = "`+imapPW+`"
smtp_addr = "mail.example.org:587"
smtp_user = "istota@example.org"
smtp_password = "smtp-secret-2"
from = "Istota <istota@example.org>"
allowed_recipient_domains = ["example.org", "*.corp.example"]
`)
	cfg, err := Load(path, []string{"ISTOTA_MAIL_POLL_INTERVAL=30s", "ISTOTA_MAIL_MAX_SENDS_PER_HOUR=3"})
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Mail
	if !m.Enabled || m.IMAPPassword != "imap-secret-1" || m.SMTPPassword != "smtp-secret-2" || m.IMAPTLS != "implicit" ||
		m.SMTPTLS != "starttls" || m.Mailbox != "INBOX" || m.MaxMessageMB != 25 || m.PollInterval.Duration != 30*time.Second ||
		m.MaxSendsPerHour != 3 || len(m.AllowedRecipientDomains) != 2 {
		t.Fatalf("mail = %+v", m)
	}
	red := cfg.Redacted()
	if strings.Contains(red, "imap-secret-1") || strings.Contains(red, "smtp-secret-2") {
		t.Fatalf("Redacted shows a mail password:\n%s", red)
	}
}

func TestMailValidation(t *testing.T) {
	valid := func() Config {
		c := Default()
		c.Mail.Enabled = true
		c.Mail.IMAPAddr, c.Mail.IMAPUser, c.Mail.IMAPPassword = "mail.example.org:993", "bot", "pw"
		c.Mail.SMTPAddr, c.Mail.SMTPUser, c.Mail.SMTPPassword = "mail.example.org:587", "bot", "pw"
		c.Mail.From = "bot@example.org"
		return c
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid mail config refused: %v", err)
	}
	disabled := Default()
	disabled.Mail.IMAPAddr = "nonsense"
	if err := disabled.Validate(); err != nil {
		t.Fatalf("a disabled mail section is checked: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(*Mail)
		field  string
	}{
		{"imap addr", func(m *Mail) { m.IMAPAddr = "mail.example.org" }, "mail.imap_addr"},
		{"smtp addr", func(m *Mail) { m.SMTPAddr = ":587" }, "mail.smtp_addr"},
		{"imap tls unknown", func(m *Mail) { m.IMAPTLS = "ssl" }, "mail.imap_tls"},
		{"clear text to a remote host", func(m *Mail) { m.SMTPTLS = "none" }, "mail.smtp_tls"},
		{"imap user", func(m *Mail) { m.IMAPUser = "" }, "mail.imap_user"},
		{"imap password", func(m *Mail) { m.IMAPPassword = "" }, "mail.imap_password"},
		{"smtp password", func(m *Mail) { m.SMTPPassword = "" }, "mail.smtp_password"},
		{"from", func(m *Mail) { m.From = "not an address" }, "mail.from"},
		{"from with a line break", func(m *Mail) { m.From = "bot@example.org\r\nBcc: x@example.net" }, "mail.from"},
		{"poll interval", func(m *Mail) { m.PollInterval = Duration{time.Second} }, "mail.poll_interval"},
		{"message size", func(m *Mail) { m.MaxMessageMB = 0 }, "mail.max_message_mb"},
		{"sends", func(m *Mail) { m.MaxSendsPerHour = -1 }, "mail.max_sends_per_hour"},
		{"domain", func(m *Mail) { m.AllowedRecipientDomains = []string{"user@example.org"} }, "mail.allowed_recipient_domains"},
		{"mailbox", func(m *Mail) { m.Mailbox = " " }, "mail.mailbox"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.mutate(&c.Mail)
			err := c.Validate()
			var fe *FieldError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), "config: "+tt.field+":") {
				t.Fatalf("err = %v, want one naming %s", err, tt.field)
			}
		})
	}
	t.Run("loopback may use no tls", func(t *testing.T) {
		c := valid()
		c.Mail.IMAPAddr, c.Mail.IMAPTLS = "127.0.0.1:143", "none"
		c.Mail.SMTPAddr, c.Mail.SMTPTLS, c.Mail.SMTPUser, c.Mail.SMTPPassword = "localhost:25", "none", "", ""
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	})
}
