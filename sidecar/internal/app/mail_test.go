package app

import (
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapserver"
	"github.com/emersion/go-imap/v2/imapserver/imapmemserver"
	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/istota/istota/sidecar/internal/config"
	"github.com/istota/istota/sidecar/internal/mail"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/store"
)

const (
	mailTestUser = "istota@bot.example.org"
	mailTestPass = "pa55-Xk29"
)

func startMailIMAP(t *testing.T) string {
	t.Helper()
	mem := imapmemserver.New()
	user := imapmemserver.NewUser(mailTestUser, mailTestPass)
	if err := user.Create("INBOX", nil); err != nil {
		t.Fatal(err)
	}
	mem.AddUser(user)
	srv := imapserver.New(&imapserver.Options{
		NewSession: func(*imapserver.Conn) (imapserver.Session, *imapserver.GreetingData, error) {
			return mem.NewSession(), nil, nil
		},
		Caps:         imap.CapSet{imap.CapIMAP4rev1: {}},
		InsecureAuth: true,
		Logger:       log.New(io.Discard, "", 0),
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	// Closing ln too: the server only closes listeners Serve has registered.
	t.Cleanup(func() { srv.Close(); ln.Close(); <-done })
	return ln.Addr().String()
}

type smtpSession struct{ authed bool }

func (s *smtpSession) AuthMechanisms() []string { return []string{sasl.Plain} }
func (s *smtpSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != mailTestUser || pass != mailTestPass {
			return errors.New("invalid credentials")
		}
		s.authed = true
		return nil
	}), nil
}
func (s *smtpSession) Mail(string, *smtp.MailOptions) error { return errors.New("not in this test") }
func (s *smtpSession) Rcpt(string, *smtp.RcptOptions) error { return errors.New("not in this test") }
func (s *smtpSession) Data(io.Reader) error                 { return errors.New("not in this test") }
func (s *smtpSession) Reset()                               {}
func (s *smtpSession) Logout() error                        { return nil }

func startMailSMTP(t *testing.T) string {
	t.Helper()
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &smtpSession{}, nil }))
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = true
	srv.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	// Closing ln too: the server only closes listeners Serve has registered.
	t.Cleanup(func() { srv.Close(); ln.Close(); <-done })
	return ln.Addr().String()
}

func mailConfig(imapAddr, smtpAddr string) config.Config {
	cfg := config.Default()
	cfg.Mail.Enabled = true
	cfg.Mail.IMAPAddr, cfg.Mail.IMAPTLS, cfg.Mail.IMAPUser, cfg.Mail.IMAPPassword = imapAddr, "none", mailTestUser, mailTestPass
	cfg.Mail.SMTPAddr, cfg.Mail.SMTPTLS, cfg.Mail.SMTPUser, cfg.Mail.SMTPPassword = smtpAddr, "none", mailTestUser, mailTestPass
	cfg.Mail.From = "Istota <" + mailTestUser + ">"
	return cfg
}

func TestOpenMail(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "istota.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q := queue.New(db, queue.Options{})
	root := func(uid string) (string, error) { return filepath.Join(t.TempDir(), uid), nil }
	logger := slog.New(slog.DiscardHandler)

	t.Run("disabled", func(t *testing.T) {
		reg := skills.NewRegistry()
		m, err := openMail(config.Default(), db, q, reg, root, nil, func() {}, logger)
		if err != nil || m != nil {
			t.Fatalf("openMail = %v, %v; want nil, nil", m, err)
		}
		// A typed nil in the interface would make the executor believe mail works.
		if m.mailer() != nil {
			t.Fatal("mailer of a disabled channel is not a nil interface")
		}
		if _, ok := reg.Lookup(mail.SkillName); ok {
			t.Fatal("email skill registered with mail disabled")
		}
		if _, enabled, err := m.stats(ctx); enabled || err != nil {
			t.Fatalf("stats enabled=%v err=%v", enabled, err)
		}
		m.wake() // must not panic
	})
	t.Run("enabled", func(t *testing.T) {
		reg := skills.NewRegistry()
		cfg := mailConfig(startMailIMAP(t), startMailSMTP(t))
		m, err := openMail(cfg, db, q, reg, root, nil, func() {}, logger)
		if err != nil || m == nil {
			t.Fatalf("openMail = %v, %v", m, err)
		}
		if m.mailer() == nil {
			t.Fatal("no mailer")
		}
		if _, ok := reg.Lookup(mail.SkillName); !ok {
			t.Fatal("email skill not registered")
		}
		// One poll through the loop, then stop.
		if _, err := m.intake.PollOnce(ctx); err != nil {
			t.Fatal(err)
		}
		st, enabled, err := m.stats(ctx)
		if !enabled || err != nil || st.LastPollAt.IsZero() || st.LastPollError != "" {
			t.Fatalf("stats %+v enabled=%v err=%v", st, enabled, err)
		}
	})
}

func TestDoctorMail(t *testing.T) {
	imapAddr, smtpAddr := startMailIMAP(t), startMailSMTP(t)
	ctx := context.Background()
	detail, err := doctorMail(ctx, mailConfig(imapAddr, smtpAddr))
	if err != nil || !strings.Contains(detail, "accept the bot's login") {
		t.Fatalf("doctorMail = %q, %v", detail, err)
	}
	tests := []struct {
		name   string
		mutate func(*config.Config)
	}{
		{"wrong imap password", func(c *config.Config) { c.Mail.IMAPPassword = "wrong-imap-Qz7" }},
		{"wrong smtp password", func(c *config.Config) { c.Mail.SMTPPassword = "wrong-smtp-Qz7" }},
		{"smtp down", func(c *config.Config) { c.Mail.SMTPAddr = closedAddr(t) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mailConfig(imapAddr, smtpAddr)
			tt.mutate(&cfg)
			_, err := doctorMail(ctx, cfg)
			if err == nil {
				t.Fatal("doctorMail succeeded")
			}
			if strings.Contains(err.Error(), "Qz7") || strings.Contains(err.Error(), mailTestPass) {
				t.Fatalf("error shows a password: %v", err)
			}
		})
	}
}

func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
