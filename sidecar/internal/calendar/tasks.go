package calendar

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/emersion/go-ical"
	"github.com/emersion/go-webdav/caldav"
)

// Task is one to-do (VTODO) in a task list, as Nextcloud Tasks keeps them.
type Task struct {
	UID         string `json:"uid"`
	Summary     string `json:"summary"`
	Description string `json:"description,omitempty"`
	// Due is zero when the to-do has no due date; DueDate marks a date without a time
	// (midnight UTC of that day).
	Due     time.Time `json:"due,omitzero"`
	DueDate bool      `json:"due_date,omitempty"`
	// Priority is iCalendar's: 1 highest … 9 lowest, 0 none.
	Priority int `json:"priority,omitempty"`
	// Status is NEEDS-ACTION, IN-PROCESS, COMPLETED or CANCELLED ("" = needs action).
	Status    string    `json:"status,omitempty"`
	Completed time.Time `json:"completed,omitzero"`
	// Recurring marks a to-do with an RRULE, which UpdateTask does not rewrite.
	Recurring bool `json:"recurring,omitempty"`
	// ETag and Path identify the calendar object resource the to-do lives in.
	ETag string `json:"etag,omitempty"`
	Path string `json:"path,omitempty"`
}

// Task statuses (RFC 5545 3.8.1.11).
const (
	StatusNeedsAction = "NEEDS-ACTION"
	StatusInProcess   = "IN-PROCESS"
	StatusCompleted   = "COMPLETED"
	StatusCancelled   = "CANCELLED"
)

// Done reports whether the to-do is finished (completed or cancelled).
func (t Task) Done() bool {
	return t.Status == StatusCompleted || t.Status == StatusCancelled || !t.Completed.IsZero()
}

// Tasks returns the to-dos of list; finished ones only with all. Open to-dos come first,
// by due date (those without one last), then priority and summary.
func (c *Client) Tasks(ctx context.Context, list Calendar, all bool) ([]Task, error) {
	objs, err := c.dav.QueryCalendar(ctx, list.Path, todoQuery())
	if err != nil {
		return nil, fmt.Errorf("calendar: query to-dos of %s: %w", list.Path, err)
	}
	var out []Task
	for _, o := range objs {
		for _, comp := range o.Data.Children {
			if comp.Name != ical.CompToDo || comp.Props.Get(ical.PropRecurrenceID) != nil {
				continue
			}
			t, err := c.toTask(comp)
			if err != nil {
				// One broken object must not hide the rest of the list.
				c.log.Warn("calendar: skipping unreadable to-do", "path", o.Path, "err", err)
				continue
			}
			if t.Done() && !all {
				continue
			}
			t.Path, t.ETag = o.Path, o.ETag
			out = append(out, t)
		}
	}
	sortTasks(out)
	return out, nil
}

func todoQuery() *caldav.CalendarQuery {
	return &caldav.CalendarQuery{
		CompRequest: caldav.CalendarCompRequest{Name: ical.CompCalendar, AllProps: true, AllComps: true},
		CompFilter:  caldav.CompFilter{Name: ical.CompCalendar, Comps: []caldav.CompFilter{{Name: ical.CompToDo}}},
	}
}

func sortTasks(ts []Task) {
	prio := func(p int) int {
		if p == 0 {
			return 10
		}
		return p
	}
	slices.SortStableFunc(ts, func(a, b Task) int {
		switch {
		case a.Done() != b.Done():
			if a.Done() {
				return 1
			}
			return -1
		case a.Due.IsZero() != b.Due.IsZero():
			if a.Due.IsZero() {
				return 1
			}
			return -1
		case !a.Due.Equal(b.Due):
			return a.Due.Compare(b.Due)
		case prio(a.Priority) != prio(b.Priority):
			return prio(a.Priority) - prio(b.Priority)
		}
		return strings.Compare(a.Summary, b.Summary)
	})
}

// FindTask returns the to-do with uid in list.
func (c *Client) FindTask(ctx context.Context, list Calendar, uid string) (Task, error) {
	if uid == "" {
		return Task{}, fmt.Errorf("%w: no uid", ErrInvalid)
	}
	// Most clients name the object <uid>.ics: try that before reading the whole list.
	if safeName(uid) {
		p := dirPath(list.Path) + uid + ".ics"
		data, etag, err := c.get(ctx, p)
		switch {
		case err == nil:
			if t, ok := c.taskIn(data, uid); ok {
				t.Path, t.ETag = p, etag
				return t, nil
			}
		case !errors.Is(err, ErrNotFound):
			return Task{}, err
		}
	}
	objs, err := c.dav.QueryCalendar(ctx, list.Path, todoQuery())
	if err != nil {
		return Task{}, fmt.Errorf("calendar: query to-dos of %s: %w", list.Path, err)
	}
	for _, o := range objs {
		if t, ok := c.taskIn(o.Data, uid); ok {
			t.Path, t.ETag = o.Path, o.ETag
			return t, nil
		}
	}
	return Task{}, fmt.Errorf("calendar: to-do %q in %s: %w", uid, list.ID, ErrNotFound)
}

func (c *Client) taskIn(data *ical.Calendar, uid string) (Task, bool) {
	comp := todoComponent(data, uid)
	if comp == nil {
		return Task{}, false
	}
	t, err := c.toTask(comp)
	if err != nil {
		c.log.Warn("calendar: unreadable to-do", "uid", uid, "err", err)
		return Task{}, false
	}
	return t, true
}

// todoComponent is the master VTODO with uid in data, or nil.
func todoComponent(data *ical.Calendar, uid string) *ical.Component {
	for _, comp := range data.Children {
		if comp.Name != ical.CompToDo || comp.Props.Get(ical.PropRecurrenceID) != nil {
			continue
		}
		if got, _ := comp.Props.Text(ical.PropUID); got == uid {
			return comp
		}
	}
	return nil
}

func (c *Client) toTask(comp *ical.Component) (Task, error) {
	var t Task
	t.UID, _ = comp.Props.Text(ical.PropUID)
	if t.UID == "" {
		return Task{}, fmt.Errorf("to-do without UID")
	}
	t.Summary, _ = comp.Props.Text(ical.PropSummary)
	t.Description, _ = comp.Props.Text(ical.PropDescription)
	if p := comp.Props.Get(ical.PropDue); p != nil {
		due, date, err := c.parseTime(p)
		if err != nil {
			return Task{}, fmt.Errorf("to-do %q: DUE: %w", t.UID, err)
		}
		t.Due, t.DueDate = due, date
	}
	if p := comp.Props.Get(ical.PropPriority); p != nil {
		if n, err := p.Int(); err == nil && n >= 0 && n <= 9 {
			t.Priority = n
		}
	}
	if s, err := comp.Props.Text(ical.PropStatus); err == nil {
		t.Status = strings.ToUpper(s)
	}
	if p := comp.Props.Get(ical.PropCompleted); p != nil {
		if at, err := p.DateTime(time.UTC); err == nil {
			t.Completed = at
		}
	}
	t.Recurring = comp.Props.Get(ical.PropRecurrenceRule) != nil
	return t, nil
}

// CheckPriority refuses priorities outside iCalendar's 0 (none) … 9.
func CheckPriority(p int) error {
	if p < 0 || p > 9 {
		return fmt.Errorf("%w: priority %d is not between 0 (none) and 9 (lowest); 1 is the highest", ErrInvalid, p)
	}
	return nil
}

// CreateTask stores t as a new to-do in list (If-None-Match: *). An empty UID gets a
// random one. It returns the to-do with UID, Path and ETag filled in.
func (c *Client) CreateTask(ctx context.Context, list Calendar, t Task) (Task, error) {
	if strings.TrimSpace(t.Summary) == "" {
		return Task{}, fmt.Errorf("%w: a to-do needs a summary", ErrInvalid)
	}
	if err := CheckPriority(t.Priority); err != nil {
		return Task{}, err
	}
	t.UID, t.Path = newObject(list, t.UID)
	comp := ical.NewComponent(ical.CompToDo)
	comp.Props.SetText(ical.PropUID, t.UID)
	comp.Props.SetDateTime(ical.PropCreated, time.Now().UTC())
	applyTask(comp, &t)
	etag, err := c.put(ctx, t.Path, wrap(comp), "", true)
	if err != nil {
		return Task{}, err
	}
	t.ETag = etag
	return t, nil
}

// UpdateTask rewrites the to-do at t.Path with t's fields, keeping every property it
// does not manage (alarms, categories, subtasks' links …). t.ETag must be the ETag the
// caller read: a newer version on the server gives ErrPrecondition. Recurring to-dos
// give ErrRecurring.
func (c *Client) UpdateTask(ctx context.Context, list Calendar, t Task) (Task, error) {
	if err := checkPath(list, t.Path, t.ETag); err != nil {
		return Task{}, err
	}
	if strings.TrimSpace(t.Summary) == "" {
		return Task{}, fmt.Errorf("%w: a to-do needs a summary", ErrInvalid)
	}
	if err := CheckPriority(t.Priority); err != nil {
		return Task{}, err
	}
	data, _, err := c.get(ctx, t.Path)
	if err != nil {
		return Task{}, err
	}
	comp := todoComponent(data, t.UID)
	if comp == nil {
		return Task{}, fmt.Errorf("calendar: to-do %q at %s: %w", t.UID, t.Path, ErrNotFound)
	}
	if comp.Props.Get(ical.PropRecurrenceRule) != nil {
		return Task{}, fmt.Errorf("calendar: update to-do %q: %w", t.UID, ErrRecurring)
	}
	applyTask(comp, &t)
	// The If-Match below decides: an edit made meanwhile is never overwritten.
	etag, err := c.put(ctx, t.Path, data, t.ETag, false)
	if err != nil {
		return Task{}, err
	}
	t.ETag = etag
	return t, nil
}

// DeleteTask removes the object holding t if its ETag still matches.
func (c *Client) DeleteTask(ctx context.Context, list Calendar, t Task) error {
	return c.deleteObject(ctx, list, t.Path, t.ETag)
}

// applyTask writes t's managed fields into comp and leaves the rest untouched. Marking
// a to-do completed sets COMPLETED and PERCENT-COMPLETE:100 as Nextcloud Tasks does;
// reopening it removes them.
func applyTask(comp *ical.Component, t *Task) {
	comp.Props.SetText(ical.PropSummary, t.Summary)
	setOptionalText(comp, ical.PropDescription, t.Description)
	switch {
	case t.Due.IsZero():
		comp.Props.Del(ical.PropDue)
	case t.DueDate:
		comp.Props.SetDate(ical.PropDue, t.Due)
	default:
		setDateTime(comp, ical.PropDue, t.Due)
	}
	if t.Priority == 0 {
		comp.Props.Del(ical.PropPriority)
	} else {
		comp.Props.Set(&ical.Prop{Name: ical.PropPriority, Params: ical.Params{}, Value: strconv.Itoa(t.Priority)})
	}
	now := time.Now().UTC()
	switch t.Status {
	case StatusCompleted:
		if t.Completed.IsZero() {
			t.Completed = now
		}
		comp.Props.SetDateTime(ical.PropCompleted, t.Completed.UTC())
		comp.Props.Set(&ical.Prop{Name: ical.PropPercentComplete, Params: ical.Params{}, Value: "100"})
	default:
		t.Completed = time.Time{}
		comp.Props.Del(ical.PropCompleted)
		if p := comp.Props.Get(ical.PropPercentComplete); p != nil && p.Value == "100" {
			comp.Props.Del(ical.PropPercentComplete)
		}
	}
	if t.Status == "" {
		t.Status = StatusNeedsAction
	}
	comp.Props.SetText(ical.PropStatus, t.Status)
	comp.Props.SetDateTime(ical.PropDateTimeStamp, now)
	comp.Props.SetDateTime(ical.PropLastModified, now)
}
