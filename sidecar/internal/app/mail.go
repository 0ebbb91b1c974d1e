package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/istota/istota/sidecar/internal/config"
	"github.com/istota/istota/sidecar/internal/executor"
	"github.com/istota/istota/sidecar/internal/mail"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/store"
)

// mailChannel is the e-mail channel of `istota serve`: the intake loop that turns mail
// from known users into tasks, the outbox loop that mails answers, and the email skill.
// A nil *mailChannel is a disabled channel; its methods are safe to call.
type mailChannel struct {
	intake *mail.Intake
	outbox *mail.Outbox
}

// mailClients builds the IMAP poller and SMTP sender of cfg's [mail] section.
func mailClients(cfg config.Config, log *slog.Logger) (*mail.Poller, *mail.Sender, error) {
	m := cfg.Mail
	// An attachment larger than one synced file could not reach Nextcloud anyway.
	maxAttachment := int64(min(m.MaxMessageMB, cfg.Workspace.MaxFileMB)) << 20
	poller, err := mail.NewPoller(mail.PollerOptions{
		Addr: m.IMAPAddr, User: m.IMAPUser, Password: m.IMAPPassword, TLS: mail.TLSMode(m.IMAPTLS),
		Mailbox: m.Mailbox, MaxMessageBytes: int64(m.MaxMessageMB) << 20,
		Limits: mail.Limits{MaxAttachmentBytes: maxAttachment},
	}, log)
	if err != nil {
		return nil, nil, fmt.Errorf("mail: %w", err)
	}
	sender, err := mail.NewSender(mail.SenderOptions{
		Addr: m.SMTPAddr, User: m.SMTPUser, Password: m.SMTPPassword, From: m.From, TLS: mail.TLSMode(m.SMTPTLS),
	}, log)
	if err != nil {
		return nil, nil, fmt.Errorf("mail: %w", err)
	}
	return poller, sender, nil
}

// openMail builds the e-mail channel when [mail] is enabled and registers the email
// skill; it returns nil when mail is disabled. onTask wakes the worker pool.
func openMail(cfg config.Config, db *store.DB, q *queue.Queue, registry *skills.Registry,
	userRoot func(uid string) (string, error), allowed func(ctx context.Context, uid string) (bool, error), onTask func(), log *slog.Logger) (*mailChannel, error) {
	if !cfg.Mail.Enabled {
		return nil, nil
	}
	log = log.With("component", "mail")
	poller, sender, err := mailClients(cfg, log)
	if err != nil {
		return nil, err
	}
	outbox := mail.NewOutbox(db, sender, mail.OutboxOptions{Logger: log})
	bot := []string{sender.Address()}
	for _, u := range []string{cfg.Mail.IMAPUser, cfg.Mail.SMTPUser} {
		if strings.Contains(u, "@") {
			bot = append(bot, u)
		}
	}
	intake := mail.NewIntake(db, q, poller, mail.IntakeOptions{
		BotAddresses:    bot,
		UserRoot:        userRoot,
		Outbox:          outbox,
		MaxMessageBytes: int64(cfg.Mail.MaxMessageMB) << 20,
		PollInterval:    cfg.Mail.PollInterval.Duration,
		OnTask:          onTask,
		Allowed:         allowed,
		Logger:          log,
	})
	if err := mail.RegisterSkill(registry, outbox, mail.SkillOptions{
		AllowedDomains: cfg.Mail.AllowedRecipientDomains,
		MaxPerHour:     cfg.Mail.MaxSendsPerHour,
	}); err != nil {
		return nil, err
	}
	return &mailChannel{intake: intake, outbox: outbox}, nil
}

// mailer is the executor's hook for mailed answers; nil (an untyped nil interface)
// when mail is disabled, so the executor knows answers cannot be mailed.
func (m *mailChannel) mailer() executor.Mailer {
	if m == nil {
		return nil
	}
	return m.outbox
}

// wake hints the outbox loop that an answer was queued.
func (m *mailChannel) wake() {
	if m != nil {
		m.outbox.Wake()
	}
}

// start runs the intake and outbox loops until ctx ends; wg waits for them.
func (m *mailChannel) start(ctx context.Context, wg *sync.WaitGroup) {
	if m == nil {
		return
	}
	wg.Add(2)
	go func() { defer wg.Done(); m.intake.Run(ctx) }()
	go func() { defer wg.Done(); m.outbox.Run(ctx) }()
}

// stats is the channel's health for the admin view; enabled is false without [mail].
func (m *mailChannel) stats(ctx context.Context) (st mail.Stats, enabled bool, err error) {
	if m == nil {
		return mail.Stats{}, false, nil
	}
	st, err = m.intake.Stats(ctx)
	return st, true, err
}

// doctorMail logs in to the mailbox and to the submission server without sending.
func doctorMail(ctx context.Context, cfg config.Config) (string, error) {
	poller, sender, err := mailClients(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := poller.Check(ctx)
	if err != nil {
		return "", err
	}
	if err := sender.Check(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("IMAP %s (%s: %d message(s)) and SMTP %s accept the bot's login", cfg.Mail.IMAPAddr, cfg.Mail.Mailbox, n, cfg.Mail.SMTPAddr), nil
}
