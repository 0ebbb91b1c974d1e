package portal

import (
	"context"
	"errors"
	"fmt"
	"github.com/istota/istota/sidecar/internal/curation"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/calendar"
	"github.com/istota/istota/sidecar/internal/users"
)

// MaxPersona is the largest PERSONA.md the page may save.
const MaxPersona = 16 << 10

// CalendarRef is one calendar the user shared with the bot.
type CalendarRef struct {
	Href string `json:"href"`
	Name string `json:"name"`
}

// CalendarChoice is which shared calendars the bot may use.
type CalendarChoice struct {
	Available []CalendarRef `json:"available"`
	Enabled   []string      `json:"enabled"`
}

// Prefs are the personal settings.
type Prefs struct {
	Persona   string         `json:"persona"`
	Timezone  string         `json:"timezone"`
	Emails    []string       `json:"emails"`
	Calendars CalendarChoice `json:"calendars"`
	FilesPath string         `json:"files_path"`
}

// PrefsUpdate is a partial change; absent fields stay as they are.
type PrefsUpdate struct {
	Persona   *string   `json:"persona"`
	Timezone  *string   `json:"timezone"`
	Emails    *[]string `json:"emails"`
	Calendars *[]string `json:"calendars"`
}

func (s *Service) personaName() string { return s.o.BotDir + "/config/PERSONA.md" }

// Prefs returns uid's personal settings.
func (s *Service) Prefs(ctx context.Context, uid string) (Prefs, error) {
	u, err := s.Authorize(ctx, uid)
	if err != nil {
		return Prefs{}, err
	}
	root, err := s.o.UserRoot(uid)
	if err != nil {
		return Prefs{}, err
	}
	persona, err := readRootFile(root, s.personaName(), maxReadBytes)
	if err != nil {
		return Prefs{}, err
	}
	emails, err := users.Emails(ctx, s.o.DB.Read, uid)
	if err != nil {
		return Prefs{}, err
	}
	cals, err := s.calendarChoice(ctx, uid)
	if err != nil {
		return Prefs{}, err
	}
	return Prefs{Persona: string(persona), Timezone: u.Timezone, Emails: emails, Calendars: cals, FilesPath: s.filesPath()}, nil
}

// availableCalendars lists the calendars uid shared with the bot; nil Calendars (no
// bot account) lists none.
func (s *Service) availableCalendars(ctx context.Context, uid string) ([]CalendarRef, error) {
	out := []CalendarRef{}
	if s.o.Calendars == nil {
		return out, nil
	}
	all, err := s.o.Calendars.Calendars(ctx)
	if err != nil {
		s.o.Logger.Warn("settings page: listing calendars failed", "user_id", uid, "err", err)
		return nil, &Error{Kind: KindUnavailable, Message: "your calendars could not be listed: Nextcloud did not answer; try again"}
	}
	for _, c := range calendar.ForUser(all, uid) {
		name := c.Name
		if name == "" {
			name = c.ID
		}
		out = append(out, CalendarRef{Href: c.Path, Name: name})
	}
	return out, nil
}

func (s *Service) calendarChoice(ctx context.Context, uid string) (CalendarChoice, error) {
	avail, err := s.availableCalendars(ctx, uid)
	var perr *Error
	if errors.As(err, &perr) && perr.Kind == KindUnavailable {
		avail = []CalendarRef{} // the rest of the page still shows
	} else if err != nil {
		return CalendarChoice{}, err
	}
	enabled, chosen, err := users.EnabledCalendars(ctx, s.o.DB.Read, uid)
	if err != nil {
		return CalendarChoice{}, err
	}
	if !chosen {
		// Never chosen: every calendar the user shared with the bot.
		enabled = make([]string, 0, len(avail))
		for _, c := range avail {
			enabled = append(enabled, c.Href)
		}
	}
	if enabled == nil {
		enabled = []string{}
	}
	return CalendarChoice{Available: avail, Enabled: enabled}, nil
}

// SavePrefs validates every field of up first (KindInvalidSettings with all problems),
// then stores them. PERSONA.md goes to Nextcloud at once (KindUnavailable when it
// cannot, the edit kept for the retry loop).
func (s *Service) SavePrefs(ctx context.Context, uid string, up PrefsUpdate) (Prefs, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return Prefs{}, err
	}
	bad := map[string]string{}
	var emails []string
	if up.Persona != nil {
		if len(*up.Persona) > MaxPersona {
			bad["persona"] = fmt.Sprintf("may be at most %d KiB", MaxPersona>>10)
		} else if !utf8.ValidString(*up.Persona) || strings.ContainsRune(*up.Persona, 0) {
			bad["persona"] = "must be UTF-8 text"
		}
	}
	if up.Timezone != nil {
		if _, err := loadZone(*up.Timezone); err != nil {
			bad["timezone"] = err.Error()
		}
	}
	if up.Emails != nil {
		list, err := users.NormalizeEmails(*up.Emails)
		var fe *users.FieldError
		switch {
		case errors.As(err, &fe):
			bad["emails"] = fe.Message
		case err != nil:
			return Prefs{}, err
		default:
			taken, err := users.ClaimedByOthers(ctx, s.o.DB.Read, uid, list)
			if err != nil {
				return Prefs{}, err
			}
			if len(taken) > 0 {
				bad["emails"] = strings.Join(taken, ", ") + " already belongs to another user"
			}
			emails = list
		}
	}
	if up.Calendars != nil {
		avail, err := s.availableCalendars(ctx, uid)
		if err != nil {
			return Prefs{}, err
		}
		for _, h := range *up.Calendars {
			if !slices.ContainsFunc(avail, func(c CalendarRef) bool { return c.Href == h }) {
				bad["calendars"] = fmt.Sprintf("%q is not one of the calendars you shared with %s", cut(h, 120), s.o.BotName)
				break
			}
		}
	}
	if len(bad) > 0 {
		return Prefs{}, &Error{Kind: KindInvalidSettings, Message: "some settings are not valid", Fields: bad}
	}
	now := s.o.Clock()
	tx, err := s.o.DB.Write.BeginTx(ctx, nil)
	if err != nil {
		return Prefs{}, fmt.Errorf("portal: save settings: %w", err)
	}
	defer tx.Rollback()
	if up.Timezone != nil {
		if err := users.SetTimezone(ctx, tx, uid, strings.TrimSpace(*up.Timezone), now); err != nil {
			return Prefs{}, fieldOrErr(err)
		}
	}
	if up.Emails != nil {
		if err := users.SetEmails(ctx, tx, uid, emails, now); err != nil {
			return Prefs{}, fieldOrErr(err)
		}
	}
	if up.Calendars != nil {
		list := slices.Clone(*up.Calendars)
		if list == nil {
			list = []string{}
		}
		if err := users.SetSetting(ctx, tx, uid, users.SettingCalendars, list, now); err != nil {
			return Prefs{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return Prefs{}, fmt.Errorf("portal: save settings: %w", err)
	}
	if up.Persona != nil {
		if err := s.writePersona(ctx, uid, *up.Persona); err != nil {
			return Prefs{}, err
		}
	}
	return s.Prefs(ctx, uid)
}

func fieldOrErr(err error) error {
	var fe *users.FieldError
	if errors.As(err, &fe) {
		return &Error{Kind: KindInvalidSettings, Message: "some settings are not valid", Fields: map[string]string{fe.Field: fe.Message}}
	}
	return err
}

func loadZone(tz string) (string, error) {
	tz = strings.TrimSpace(tz)
	if tz == "" || len(tz) > 64 {
		return "", errors.New("must be an IANA time zone such as Europe/Berlin")
	}
	if _, err := time.LoadLocation(tz); err != nil {
		return "", fmt.Errorf("%q is not a known IANA time zone", tz)
	}
	return tz, nil
}

func (s *Service) writePersona(ctx context.Context, uid, content string) error {
	root, err := s.o.UserRoot(uid)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("portal: create %s: %w", root, err)
	}
	s.pull(ctx, uid)
	r, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("portal: open workspace: %w", err)
	}
	defer r.Close()
	name := s.personaName()
	if err := r.MkdirAll(strings.TrimSuffix(name, "/PERSONA.md"), 0o700); err != nil {
		return fmt.Errorf("portal: create the config folder: %w", err)
	}
	_, mode, err := readRooted(r, name, maxReadBytes)
	if err != nil {
		return err
	}
	if err := curation.WriteAtomic(r, name, []byte(content), mode); err != nil {
		return fmt.Errorf("portal: write PERSONA.md: %w", err)
	}
	return s.push(ctx, uid)
}
