package userconfig

import (
	"fmt"
	"net/mail"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/robfig/cron/v3"
)

// Target says where a job's or briefing's output goes. Both empty means the
// user's own conversation with the bot (or, for e-mail, the user's address).
type Target struct {
	Conversation string // Talk conversation token
	Email        string // bare e-mail address
}

const maxNameLen = 100

// names tracks entry names for duplicate detection, case-insensitively, because
// users refer to entries by name in Talk ("!cron disable weekly review").
type names map[string]int

func (n names) check(e *entry, name, what string) {
	key := strings.ToLower(name)
	if first, dup := n[key]; dup {
		e.fail("name", "%q is already the name of the %s on line %d; names must be unique", name, what, first)
		return
	}
	n[key] = e.lineOf("name")
}

func (e *entry) name(what string) string {
	name := e.str("name")
	switch {
	case name == "" && !e.failed("name"):
		e.fail("name", "every %s needs a name", what)
	case utf8.RuneCountInString(name) > maxNameLen:
		e.fail("name", "is longer than %d characters", maxNameLen)
	case strings.ContainsFunc(name, unicode.IsControl):
		e.fail("name", "must not contain control characters")
	}
	return name
}

func (e *entry) conversation(key string) string {
	tok := e.str(key)
	if tok == "" {
		return ""
	}
	if len(tok) > 64 || strings.ContainsFunc(tok, func(r rune) bool {
		return !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)))
	}) {
		e.fail(key, "%q is not a Talk conversation token (the letters and digits at the end of the conversation's link)", tok)
		return ""
	}
	return tok
}

func (e *entry) email(key string) string {
	s := e.str(key)
	if s == "" {
		return ""
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Name != "" || a.Address != s {
		e.fail(key, "%q is not an e-mail address like someone@example.org", s)
		return ""
	}
	return s
}

// checkWebURL validates an http(s) URL. Credentials in the URL are refused: these
// files are read by the assistant and end up in logs.
func checkWebURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL", s)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q must start with https:// or http://", s)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("%q has no host name", s)
	case u.User != nil:
		return fmt.Errorf("%q contains a user name or password; put no credentials in this file", redactURL(u))
	}
	return nil
}

func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// scheduleParser accepts the five classic cron fields and the @descriptors.
func scheduleParser() cron.Parser {
	return cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
}

// minEvery is the shortest "@every" interval; a model run every few seconds would
// only burn the user's budget.
const minEvery = time.Minute

// ParseSchedule parses a schedule exactly as the configuration parsers validate it:
// five cron fields (minute hour day-of-month month day-of-week) or a descriptor
// (@yearly, @monthly, @weekly, @daily, @hourly, @every 2h), evaluated in loc.
// Time zone prefixes (CRON_TZ=) are refused: the zone is a separate setting.
func ParseSchedule(expr string, loc *time.Location) (cron.Schedule, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return nil, fmt.Errorf("is empty; write five fields like \"0 7 * * 1-5\" or @daily")
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, fmt.Errorf("must not start with a time zone; use the timezone setting")
	}
	if rest, ok := strings.CutPrefix(expr, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return nil, fmt.Errorf("%q: the interval after @every must be like 30m or 2h", expr)
		}
		if d < minEvery {
			return nil, fmt.Errorf("%q: @every must be at least %s", expr, minEvery)
		}
	}
	s, err := scheduleParser().Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("%q is not a valid schedule (%v); write five fields: minute hour day-of-month month day-of-week, like \"0 7 * * 1-5\", or @daily", expr, err)
	}
	if spec, ok := s.(*cron.SpecSchedule); ok {
		spec.Location = loc
		// A date that never exists (30 February) makes Next give up and return zero.
		if spec.Next(time.Date(2024, 1, 1, 0, 0, 0, 0, loc)).IsZero() {
			return nil, fmt.Errorf("%q never matches a real date", expr)
		}
	}
	return s, nil
}

// loadZone resolves an IANA zone name. "Local" is refused because it would mean
// the server's zone, not the user's.
func loadZone(name string) (*time.Location, error) {
	if name == "" || strings.EqualFold(name, "local") {
		return nil, fmt.Errorf("%q is not a time zone; use a name like Europe/Berlin", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not a known time zone; use a name like Europe/Berlin or UTC", name)
	}
	return loc, nil
}
