package calendar

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/emersion/go-ical"
	"github.com/teambition/rrule-go"
)

const prodID = "-//Istota//Istota for Nextcloud//EN"

// maxOccurrences bounds the expansion of one series in one query, so a daily event
// asked about over a decade cannot flood a prompt.
const maxOccurrences = 1000

func newEventComponent(uid string) *ical.Component {
	comp := ical.NewComponent(ical.CompEvent)
	comp.Props.SetText(ical.PropUID, uid)
	return comp
}

// applyEvent writes ev's managed fields into comp and leaves the rest untouched.
func applyEvent(comp *ical.Component, ev Event) {
	comp.Props.SetText(ical.PropSummary, ev.Summary)
	setOptionalText(comp, ical.PropDescription, ev.Description)
	setOptionalText(comp, ical.PropLocation, ev.Location)
	comp.Props.Del(ical.PropDuration) // DTEND below replaces it
	if ev.AllDay {
		comp.Props.SetDate(ical.PropDateTimeStart, ev.Start)
		comp.Props.SetDate(ical.PropDateTimeEnd, ev.End)
	} else {
		setDateTime(comp, ical.PropDateTimeStart, ev.Start)
		setDateTime(comp, ical.PropDateTimeEnd, ev.End)
	}
	now := time.Now().UTC()
	comp.Props.SetDateTime(ical.PropDateTimeStamp, now)
	comp.Props.SetDateTime(ical.PropLastModified, now)
	seq := 0
	if p := comp.Props.Get(ical.PropSequence); p != nil {
		if n, err := p.Int(); err == nil {
			seq = n + 1
		}
	}
	comp.Props.Set(&ical.Prop{Name: ical.PropSequence, Params: ical.Params{}, Value: fmt.Sprint(seq)})
}

func setOptionalText(comp *ical.Component, name, value string) {
	if value == "" {
		comp.Props.Del(name)
		return
	}
	comp.Props.SetText(name, value)
}

// setDateTime writes t with its zone as TZID when it is a named IANA zone (Nextcloud
// resolves those without a VTIMEZONE), in UTC otherwise.
func setDateTime(comp *ical.Component, name string, t time.Time) {
	prop := ical.NewProp(name)
	switch loc := t.Location(); {
	case loc == time.UTC, loc == time.Local, loc.String() == "", !strings.Contains(loc.String(), "/"):
		prop.SetDateTime(t.UTC())
	default:
		prop.SetDateTime(t)
	}
	comp.Props.Set(prop)
}

// parseTime reads a DATE or DATE-TIME property. DATE values are midnight UTC; floating
// times are in c.loc; an unknown TZID falls back to c.loc rather than losing the event.
func (c *Client) parseTime(prop *ical.Prop) (time.Time, bool, error) {
	allDay := prop.ValueType() == ical.ValueDate || (prop.ValueType() == ical.ValueDefault && len(prop.Value) == len("20060102"))
	if allDay {
		t, err := prop.DateTime(time.UTC)
		return t, true, err
	}
	t, err := prop.DateTime(c.loc)
	if err != nil && prop.Params.Get(ical.PropTimezoneID) != "" {
		cp := *prop
		cp.Params = ical.Params{}
		c.log.Debug("calendar: unknown TZID, using the default zone", "tzid", prop.Params.Get(ical.PropTimezoneID))
		t, err = cp.DateTime(c.loc)
	}
	return t, false, err
}

func (c *Client) toEvent(comp *ical.Component) (Event, error) {
	var ev Event
	ev.UID, _ = comp.Props.Text(ical.PropUID)
	ev.Summary, _ = comp.Props.Text(ical.PropSummary)
	ev.Description, _ = comp.Props.Text(ical.PropDescription)
	ev.Location, _ = comp.Props.Text(ical.PropLocation)
	sp := comp.Props.Get(ical.PropDateTimeStart)
	if sp == nil {
		return Event{}, fmt.Errorf("event %q has no DTSTART", ev.UID)
	}
	start, allDay, err := c.parseTime(sp)
	if err != nil {
		return Event{}, fmt.Errorf("event %q: DTSTART: %w", ev.UID, err)
	}
	ev.Start, ev.AllDay = start, allDay
	switch {
	case comp.Props.Get(ical.PropDateTimeEnd) != nil:
		end, _, err := c.parseTime(comp.Props.Get(ical.PropDateTimeEnd))
		if err != nil {
			return Event{}, fmt.Errorf("event %q: DTEND: %w", ev.UID, err)
		}
		ev.End = end
	case comp.Props.Get(ical.PropDuration) != nil:
		d, err := comp.Props.Get(ical.PropDuration).Duration()
		if err != nil {
			return Event{}, fmt.Errorf("event %q: DURATION: %w", ev.UID, err)
		}
		ev.End = ev.Start.Add(d)
	case allDay:
		ev.End = ev.Start.AddDate(0, 0, 1) // RFC 5545 3.6.1: a DATE start lasts one day
	default:
		ev.End = ev.Start
	}
	return ev, nil
}

func cancelled(comp *ical.Component) bool {
	s, _ := comp.Props.Text(ical.PropStatus)
	return strings.EqualFold(s, string(ical.EventCancelled))
}

func overlaps(ev Event, from, to time.Time) bool {
	if ev.End.Equal(ev.Start) {
		return !ev.Start.Before(from) && ev.Start.Before(to)
	}
	return ev.Start.Before(to) && ev.End.After(from)
}

// objectEvents turns one calendar object into the events it holds in [from, to):
// single events, occurrences of a series, and overridden occurrences. Cancelled
// events and occurrences are left out.
func (c *Client) objectEvents(data *ical.Calendar, p, etag string, from, to time.Time) ([]Event, error) {
	type override struct {
		id   time.Time
		comp *ical.Component
	}
	var masters []*ical.Component
	overrides := map[string][]override{}
	for _, comp := range data.Children {
		if comp.Name != ical.CompEvent {
			continue
		}
		rid := comp.Props.Get(ical.PropRecurrenceID)
		if rid == nil {
			masters = append(masters, comp)
			continue
		}
		id, _, err := c.parseTime(rid)
		if err != nil {
			return nil, fmt.Errorf("RECURRENCE-ID: %w", err)
		}
		uid, _ := comp.Props.Text(ical.PropUID)
		overrides[uid] = append(overrides[uid], override{id, comp})
	}

	var out []Event
	for _, m := range masters {
		if cancelled(m) {
			continue
		}
		base, err := c.toEvent(m)
		if err != nil {
			return nil, err
		}
		base.Path, base.ETag = p, etag
		if m.Props.Get(ical.PropRecurrenceRule) == nil {
			if overlaps(base, from, to) {
				out = append(out, base)
			}
			continue
		}
		starts, err := c.occurrences(m, base, from, to)
		if err != nil {
			return nil, fmt.Errorf("event %q: %w", base.UID, err)
		}
		dur := base.End.Sub(base.Start)
		for _, s := range starts {
			if slices.ContainsFunc(overrides[base.UID], func(o override) bool { return o.id.Equal(s) }) {
				continue
			}
			occ := base
			occ.Start, occ.End, occ.RecurrenceID = s, s.Add(dur), s
			if overlaps(occ, from, to) {
				out = append(out, occ)
			}
		}
	}
	for _, list := range overrides {
		for _, o := range list {
			if cancelled(o.comp) {
				continue
			}
			ev, err := c.toEvent(o.comp)
			if err != nil {
				return nil, err
			}
			ev.Path, ev.ETag, ev.RecurrenceID = p, etag, o.id
			if overlaps(ev, from, to) {
				out = append(out, ev)
			}
		}
	}
	return out, nil
}

// occurrences lists the starts of m's series that can overlap [from, to).
func (c *Client) occurrences(m *ical.Component, base Event, from, to time.Time) ([]time.Time, error) {
	opt, err := m.Props.RecurrenceRule()
	if err != nil || opt == nil {
		return nil, fmt.Errorf("RRULE: %v", err)
	}
	opt.Dtstart = base.Start
	rule, err := rrule.NewRRule(*opt)
	if err != nil {
		return nil, fmt.Errorf("RRULE: %w", err)
	}
	var set rrule.Set
	set.RRule(rule)
	set.DTStart(base.Start)
	// EXDATE and RDATE may hold several comma-separated values per line.
	for _, name := range []string{ical.PropExceptionDates, ical.PropRecurrenceDates} {
		for _, prop := range m.Props.Values(name) {
			for _, v := range strings.Split(prop.Value, ",") {
				one := prop
				one.Value = strings.TrimSpace(v)
				t, _, err := c.parseTime(&one)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				if name == ical.PropExceptionDates {
					set.ExDate(t)
				} else {
					set.RDate(t)
				}
			}
		}
	}
	dur := base.End.Sub(base.Start)
	var out []time.Time
	next := set.Iterator()
	// steps also bounds the walk from an old DTSTART up to the range.
	steps := 0
	for t, ok := next(); ok && t.Before(to) && len(out) < maxOccurrences && steps < 100*maxOccurrences; t, ok = next() {
		steps++
		if t.Add(dur).After(from) || (dur == 0 && !t.Before(from)) {
			out = append(out, t)
		}
	}
	return out, nil
}

func sortEvents(evs []Event) {
	slices.SortStableFunc(evs, func(a, b Event) int {
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		if c := a.End.Compare(b.End); c != 0 {
			return c
		}
		return strings.Compare(a.UID, b.UID)
	})
}

// Conflicts returns the pairs of overlapping timed events (all-day events and
// zero-length ones never conflict), each pair in start order. Two entries of the same
// occurrence (same UID and recurrence) are one event, not a conflict.
func Conflicts(events []Event) [][2]Event {
	var timed []Event
	for _, e := range events {
		if !e.AllDay && e.End.After(e.Start) {
			timed = append(timed, e)
		}
	}
	sortEvents(timed)
	var out [][2]Event
	for i, a := range timed {
		for _, b := range timed[i+1:] {
			if !b.Start.Before(a.End) {
				break // sorted by start: nothing later can overlap a
			}
			if a.UID == b.UID && a.RecurrenceID.Equal(b.RecurrenceID) {
				continue
			}
			out = append(out, [2]Event{a, b})
		}
	}
	return out
}
