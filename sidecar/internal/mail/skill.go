package mail

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	gomail "github.com/emersion/go-message/mail"

	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/store"
)

// SkillName is the name the agent calls: istota skill email ….
const SkillName = "email"

// Bounds of one message sent through the skill.
const (
	maxSkillRecipients = 10
	maxSkillBodyBytes  = 256 << 10
)

const skillUsage = `email send --to ADDRESS [--to ADDRESS]... --subject TEXT [--body TEXT]
email send --json        read {"to": ["ADDRESS", ...], "subject": "...", "body": "..."} from standard input
email recipients         list the addresses you may write to and the sends left this hour
Without --body (and without --json) the body is read from standard input. The mail goes out from the bot's address as plain text.
You may write to the user's own addresses, and to addresses in the domains the administrator allows. Sends are limited per hour.`

// SkillOptions configure the email skill.
type SkillOptions struct {
	// AllowedDomains are recipient domains an admin allows besides the user's
	// own addresses: "example.org" allows that domain only, "*.example.org"
	// its subdomains only.
	AllowedDomains []string
	// MaxPerHour caps the messages one user sends through the skill per hour;
	// 0 disables sending.
	MaxPerHour int
}

// RegisterSkill registers the email skill, which queues mail on o. Identity
// comes from the invocation (the task's user), never from the arguments.
func RegisterSkill(reg *skills.Registry, o *Outbox, opts SkillOptions) error {
	if o == nil {
		return errors.New("mail: register skill: no outbox")
	}
	domains := make([]string, 0, len(opts.AllowedDomains))
	for _, d := range opts.AllowedDomains {
		if d = strings.ToLower(strings.TrimSpace(d)); d != "" {
			domains = append(domains, d)
		}
	}
	opts.AllowedDomains = domains
	return reg.Register(skills.Skill{
		Manifest: skills.Manifest{
			Name:    SkillName,
			Summary: "send an e-mail to the user (or to domains the administrator allows)",
			Usage:   skillUsage,
			Classify: func(ctx context.Context, inv skills.Invocation) approval.Action {
				return classifySend(ctx, o, opts, inv)
			},
			Load: skills.Load{
				Resources: []string{skills.ResourceEmail},
				Keywords:  []string{"mail", "e mail", "send", "inbox"},
			},
		},
		Run: func(ctx context.Context, inv skills.Invocation) skills.Result {
			return runSkill(ctx, o, opts, inv)
		},
	})
}

func runSkill(ctx context.Context, o *Outbox, opts SkillOptions, inv skills.Invocation) skills.Result {
	if inv.UserID == "" {
		return skills.Internal("e-mail", errors.New("email skill called without a user"))
	}
	if len(inv.Args) == 0 {
		return skills.Usagef("usage:\n%s", skillUsage)
	}
	switch inv.Args[0] {
	case "send":
		return skillSend(ctx, o, opts, inv)
	case "recipients":
		if len(inv.Args) != 1 {
			return skills.Usagef("usage: istota skill email recipients")
		}
		return skillRecipients(ctx, o, opts, inv)
	}
	return skills.Usagef("email: unknown subcommand %q\nusage:\n%s", inv.Args[0], skillUsage)
}

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ", ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

type sendRequest struct {
	To      []string `json:"to"`
	Subject string   `json:"subject"`
	Body    string   `json:"body"`
}

// parseSend reads the message of "email send" from the arguments or standard input;
// bad gives the usage error instead.
func parseSend(inv skills.Invocation) (req sendRequest, bad *skills.Result) {
	var to stringList
	var body string
	var asJSON bool
	usage := func(r skills.Result) (sendRequest, *skills.Result) { return sendRequest{}, &r }
	fs := flag.NewFlagSet("email send", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&to, "to", "recipient (repeatable)")
	fs.StringVar(&req.Subject, "subject", "", "subject")
	fs.StringVar(&body, "body", "", "body (default: standard input)")
	fs.BoolVar(&asJSON, "json", false, "read the message as JSON from standard input")
	if err := fs.Parse(inv.Args[1:]); err != nil || fs.NArg() > 0 {
		return usage(skills.Usagef("usage:\n%s", skillUsage))
	}
	haveBody := false
	fs.Visit(func(f *flag.Flag) { haveBody = haveBody || f.Name == "body" })
	switch {
	case asJSON:
		if len(to) > 0 || req.Subject != "" || haveBody {
			return usage(skills.Usagef("email send: --json takes the whole message from standard input; give no other flags"))
		}
		dec := json.NewDecoder(bytes.NewReader(inv.Stdin))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return usage(skills.Usagef("email send --json: standard input is not a message object: %v", err))
		}
	default:
		req.To = to
		req.Body = body
		if !haveBody {
			req.Body = string(inv.Stdin)
		}
	}
	switch {
	case len(req.To) == 0:
		return usage(skills.Usagef("email send: give at least one recipient (--to)"))
	case len(req.To) > maxSkillRecipients:
		return usage(skills.Usagef("email send: at most %d recipients", maxSkillRecipients))
	case strings.TrimSpace(req.Subject) == "":
		return usage(skills.Usagef("email send: give a subject (--subject)"))
	case strings.TrimSpace(req.Body) == "":
		return usage(skills.Usagef("email send: the body is empty (give --body or standard input)"))
	case len(req.Body) > maxSkillBodyBytes:
		return usage(skills.Usagef("email send: the body is larger than %d KiB; save long material as a file in Nextcloud and send a short note", maxSkillBodyBytes>>10))
	case !utf8.ValidString(req.Body):
		return usage(skills.Usagef("email send: the body is not valid UTF-8"))
	}
	return req, nil
}

// classifySend: a mail to the user's own addresses stays with them (write-own); one to
// anybody else is external and names recipients, subject and the start of the body. A
// call the skill will refuse anyway (bad arguments, a recipient it may not write to) is
// read: nothing happens.
func classifySend(ctx context.Context, o *Outbox, opts SkillOptions, inv skills.Invocation) approval.Action {
	if len(inv.Args) == 0 || inv.Args[0] != "send" {
		return approval.Action{Tier: approval.TierRead}
	}
	req, bad := parseSend(inv)
	if bad != nil {
		return approval.Action{Tier: approval.TierRead}
	}
	tier := approval.TierWriteOwn
	own, err := userAddresses(ctx, o.db, inv.UserID)
	if err != nil {
		tier = approval.TierExternal // cannot tell: ask
	}
	for _, t := range req.To {
		a, err := gomail.ParseAddress(t)
		if err != nil {
			return approval.Action{Tier: approval.TierRead}
		}
		addr := normAddr(a.Address)
		if !mayReceive(addr, own, opts.AllowedDomains) {
			return approval.Action{Tier: approval.TierRead}
		}
		if !slices.Contains(own, addr) {
			tier = approval.TierExternal
		}
	}
	lines := strings.Split(strings.TrimRight(req.Body, "\n"), "\n")
	first := strings.TrimSpace(lines[0])
	if r := []rune(first); len(r) > 120 {
		first = string(r[:120]) + "…"
	}
	noun := "lines"
	if len(lines) == 1 {
		noun = "line"
	}
	return approval.Action{Tier: tier, Summary: fmt.Sprintf("Send an e-mail to %s, subject \u201c%s\u201d, %d %s: %s",
		strings.Join(req.To, ", "), oneLine(req.Subject), len(lines), noun, first)}
}

func skillSend(ctx context.Context, o *Outbox, opts SkillOptions, inv skills.Invocation) skills.Result {
	req, bad := parseSend(inv)
	if bad != nil {
		return *bad
	}
	if err := checkHeaderValue("subject", req.Subject); err != nil {
		return skills.Usagef("email send: the subject must be a single line without control characters")
	}
	own, err := userAddresses(ctx, o.db, inv.UserID)
	if err != nil {
		return skills.Internal("e-mail", err)
	}
	for _, t := range req.To {
		if err := checkHeaderValue("to", t); err != nil {
			return skills.Usagef("email send: a recipient must be a single line without control characters")
		}
		a, err := gomail.ParseAddress(t)
		if err != nil {
			return skills.Usagef("email send: %q is not an e-mail address", oneLine(t))
		}
		if !mayReceive(normAddr(a.Address), own, opts.AllowedDomains) {
			return skills.Failf("email send: not sent: you may write only to the user's own addresses (%s)%s; ask the user to have an administrator allow %q",
				listOrNone(own), allowedNote(opts.AllowedDomains), domainOf(normAddr(a.Address)))
		}
	}
	if opts.MaxPerHour <= 0 {
		return skills.Failf("email send: sending mail is disabled by the administrator")
	}
	id, err := o.QueueSkillSend(ctx, inv.UserID, inv.TaskID, req.To, req.Subject, req.Body, opts.MaxPerHour)
	switch {
	case errors.Is(err, ErrRateLimited):
		return skills.Failf("email send: not sent: you have reached the limit of %d messages per hour; try again later", opts.MaxPerHour)
	case errors.Is(err, ErrInvalid) || errors.Is(err, ErrHeaderInjection):
		return skills.Usagef("email send: %v", err)
	case err != nil:
		return skills.Internal("e-mail", err)
	}
	return skills.Result{Stdout: fmt.Appendf(nil, "queued for delivery to %s (Message-ID <%s>)\n", strings.Join(req.To, ", "), id)}
}

func skillRecipients(ctx context.Context, o *Outbox, opts SkillOptions, inv skills.Invocation) skills.Result {
	own, err := userAddresses(ctx, o.db, inv.UserID)
	if err != nil {
		return skills.Internal("e-mail", err)
	}
	used, err := o.sentThisHour(ctx, inv.UserID)
	if err != nil {
		return skills.Internal("e-mail", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "your addresses: %s\n", listOrNone(own))
	if len(opts.AllowedDomains) > 0 {
		fmt.Fprintf(&b, "allowed domains: %s\n", strings.Join(opts.AllowedDomains, ", "))
	}
	fmt.Fprintf(&b, "sends left this hour: %d of %d\n", max(opts.MaxPerHour-used, 0), opts.MaxPerHour)
	return skills.Result{Stdout: []byte(b.String())}
}

// sentThisHour counts the skill messages userID queued in the last hour.
func (o *Outbox) sentThisHour(ctx context.Context, userID string) (int, error) {
	var n int
	err := o.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM mail_outbox WHERE user_id = ? AND kind = 'skill' AND created_at > ?`,
		userID, store.FormatTime(o.opts.Clock().Add(-time.Hour))).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count sends of %q: %w", userID, err)
	}
	return n, nil
}

// userAddresses lists the addresses that belong to uid: the Nextcloud profile
// address and the extra ones from the personal settings, normalised, sorted.
func userAddresses(ctx context.Context, db *store.DB, uid string) ([]string, error) {
	rs, err := db.Read.QueryContext(ctx, `SELECT email FROM users WHERE id = ? AND email <> ''
		UNION SELECT email FROM user_emails WHERE user_id = ?`, uid, uid)
	if err != nil {
		return nil, fmt.Errorf("addresses of %q: %w", uid, err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var a string
		if err := rs.Scan(&a); err != nil {
			return nil, fmt.Errorf("addresses of %q: %w", uid, err)
		}
		if a = normAddr(a); a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("addresses of %q: %w", uid, err)
	}
	slices.Sort(out)
	return out, nil
}

// mayReceive reports whether addr is one of own or in an allowed domain.
func mayReceive(addr string, own, domains []string) bool {
	if addr == "" {
		return false
	}
	if slices.Contains(own, addr) {
		return true
	}
	return DomainAllowed(domainOf(addr), domains)
}

// DomainAllowed reports whether domain matches one of the patterns:
// "example.org" matches exactly that domain, "*.example.org" any subdomain of
// it (not example.org itself). Patterns and domain compare case-insensitively.
func DomainAllowed(domain string, patterns []string) bool {
	domain = strings.ToLower(strings.TrimSuffix(domain, "."))
	if domain == "" {
		return false
	}
	for _, p := range patterns {
		p = strings.ToLower(strings.TrimSpace(p))
		if rest, ok := strings.CutPrefix(p, "*."); ok {
			if rest != "" && strings.HasSuffix(domain, "."+rest) {
				return true
			}
			continue
		}
		if p != "" && domain == p {
			return true
		}
	}
	return false
}

func domainOf(addr string) string {
	if at := strings.LastIndexByte(addr, '@'); at >= 0 {
		return addr[at+1:]
	}
	return ""
}

func listOrNone(list []string) string {
	if len(list) == 0 {
		return "none registered"
	}
	return strings.Join(list, ", ")
}

func allowedNote(domains []string) string {
	if len(domains) == 0 {
		return ""
	}
	return " or to the domains " + strings.Join(domains, ", ")
}
