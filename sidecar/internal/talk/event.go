// Package talk speaks Nextcloud Talk's bot protocol: it parses the events Talk hands to a
// bot (webhook bodies and BotInvokeEvent::getMessage(), which share one structure), signs
// the bot's replies and reactions, verifies webhook signatures and splits long answers at
// Talk's message length limit. Facts it relies on are in shared/reference/talk-bots.md.
package talk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Event types Talk sends to bots.
const (
	TypeCreate   = "Create"   // a chat message by an attendee
	TypeActivity = "Activity" // a system message (joins, calls, file shares, edits, …)
	TypeLike     = "Like"     // a reaction was added (feature reaction, Talk 21+)
	TypeUndo     = "Undo"     // a reaction was removed (feature reaction, Talk 21+)
	TypeJoin     = "Join"     // the bot was enabled in a conversation (Talk 20+)
	TypeLeave    = "Leave"    // the bot was disabled in a conversation (Talk 20+)
)

// Actor types as they appear before the first '/' of actor.id.
const (
	ActorUsers          = "users"
	ActorGuests         = "guests"
	ActorEmails         = "emails"
	ActorFederatedUsers = "federated_users"
	ActorBots           = "bots"
)

// ErrUnsupportedType is wrapped by ParseEvent when the event's type is none of the six
// known ones, so callers can ignore events that a newer Talk may add.
var ErrUnsupportedType = errors.New("unsupported event type")

// Event is one bot invocation, flattened. Placeholders in Message are rendered as text;
// RawMessage and Parameters keep what Talk sent for callers that need more.
type Event struct {
	// Type is Create, Activity, Like, Undo, Join or Leave.
	Type string
	// ActorType is users, guests, emails, federated_users or bots (the part of actor.id
	// before the first '/'); ActorID is the rest, which may itself contain '/' or '@'.
	ActorType string
	ActorID   string
	ActorName string
	// ParticipantType is actor.talkParticipantType (1 owner, 2 moderator, 3 user, 4 guest,
	// 5 user via public link, 6 guest moderator), 0 when absent.
	ParticipantType int
	// MessageID is the chat message: the new message for Create, the system message for
	// Activity, the reacted-to message for Like and Undo, 0 for Join and Leave.
	MessageID int64
	// ObjectName is object.name: "message" for Create, the system message identifier
	// for Activity (e.g. "call_started"), the room name for Join and Leave.
	ObjectName string
	// Message is content.message with placeholders rendered (mentions as "@Display Name").
	Message string
	// RawMessage is content.message exactly as Talk sent it, placeholders included.
	RawMessage string
	// Parameters are content.parameters; empty (never nil) when Talk sent [].
	Parameters map[string]json.RawMessage
	// InReplyTo is the quoted parent message, when the message replies to one.
	InReplyTo *Parent
	// Token and RoomName identify the conversation.
	Token    string
	RoomName string
	// Reaction is the emoji of a Like or Undo.
	Reaction string
}

// Parent is the message an event's message replies to (object.inReplyTo, Talk 21+).
type Parent struct {
	MessageID int64
	ActorType string
	ActorID   string
	ActorName string
	// Message has its placeholders rendered like Event.Message.
	Message string
}

// Wire shapes. Fields Talk sends as strings or numbers depending on the path (webhook
// JSON, or the app's re-encoding of getMessage()) are decoded as json.RawMessage and
// read by flexible helpers.
type wireEnvelope struct {
	Type    *string         `json:"type"`
	Actor   json.RawMessage `json:"actor"`
	Object  json.RawMessage `json:"object"`
	Target  json.RawMessage `json:"target"`
	Content json.RawMessage `json:"content"`
}

type wireActor struct {
	ID                  json.RawMessage `json:"id"`
	Name                json.RawMessage `json:"name"`
	TalkParticipantType json.RawMessage `json:"talkParticipantType"`
}

type wireObject struct {
	ID        json.RawMessage `json:"id"`
	Name      json.RawMessage `json:"name"`
	Content   json.RawMessage `json:"content"`
	InReplyTo json.RawMessage `json:"inReplyTo"`
}

type wireCollection struct {
	ID   json.RawMessage `json:"id"`
	Name json.RawMessage `json:"name"`
}

type wireParent struct {
	Actor  json.RawMessage `json:"actor"`
	Object json.RawMessage `json:"object"`
}

type wireContent struct {
	Message    json.RawMessage `json:"message"`
	Parameters json.RawMessage `json:"parameters"`
}

// ParseEvent decodes one event as Talk sends it to a webhook or as the app forwards
// BotInvokeEvent::getMessage(). Errors name the offending field.
func ParseEvent(raw []byte) (Event, error) {
	var env wireEnvelope
	if err := decodeObject(raw, &env); err != nil {
		return Event{}, fmt.Errorf("talk event: %w", err)
	}
	if env.Type == nil || *env.Type == "" {
		return Event{}, errors.New("talk event: field type is missing")
	}
	ev := Event{Type: *env.Type, Parameters: map[string]json.RawMessage{}}
	var err error
	switch ev.Type {
	case TypeCreate, TypeActivity:
		err = parseMessageEvent(&ev, env)
	case TypeLike:
		err = parseLike(&ev, env, "")
	case TypeUndo:
		err = parseUndo(&ev, env)
	case TypeJoin, TypeLeave:
		err = parseMembership(&ev, env)
	default:
		return Event{}, fmt.Errorf("talk event: field type %q: %w", ev.Type, ErrUnsupportedType)
	}
	if err != nil {
		return Event{}, fmt.Errorf("talk event %s: %w", ev.Type, err)
	}
	return ev, nil
}

// parseMessageEvent reads Create and Activity: actor, object (the message) and target.
func parseMessageEvent(ev *Event, env wireEnvelope) error {
	if err := parseActor(ev, env.Actor, "actor"); err != nil {
		return err
	}
	if err := parseNote(ev, env.Object, "object"); err != nil {
		return err
	}
	return parseTarget(ev, env.Target, "target")
}

// parseLike reads a Like; prefix names the fields when the Like is wrapped in an Undo.
func parseLike(ev *Event, env wireEnvelope, prefix string) error {
	if err := parseActor(ev, env.Actor, prefix+"actor"); err != nil {
		return err
	}
	if err := parseNote(ev, env.Object, prefix+"object"); err != nil {
		return err
	}
	if err := parseTarget(ev, env.Target, prefix+"target"); err != nil {
		return err
	}
	reaction, err := requiredString(env.Content, prefix+"content")
	if err != nil {
		return err
	}
	ev.Reaction = reaction
	return nil
}

// parseUndo reads an Undo, whose object is the whole Like being undone. The outer actor
// and target win; the inner ones are the fallback.
func parseUndo(ev *Event, env wireEnvelope) error {
	if isAbsent(env.Object) {
		return errors.New("field object is missing")
	}
	var inner wireEnvelope
	if err := decodeObject(env.Object, &inner); err != nil {
		return fmt.Errorf("field object: %w", err)
	}
	if inner.Type != nil && *inner.Type != TypeLike {
		return fmt.Errorf("field object.type is %q, want %q", *inner.Type, TypeLike)
	}
	if isAbsent(inner.Actor) {
		inner.Actor = env.Actor
	}
	if isAbsent(inner.Target) {
		inner.Target = env.Target
	}
	if err := parseLike(ev, inner, "object."); err != nil {
		return err
	}
	if !isAbsent(env.Actor) {
		if err := parseActor(ev, env.Actor, "actor"); err != nil {
			return err
		}
	}
	if !isAbsent(env.Target) {
		if err := parseTarget(ev, env.Target, "target"); err != nil {
			return err
		}
	}
	return nil
}

// parseMembership reads Join and Leave: the bot as actor and the room in object.
func parseMembership(ev *Event, env wireEnvelope) error {
	if err := parseActor(ev, env.Actor, "actor"); err != nil {
		return err
	}
	if isAbsent(env.Object) {
		return errors.New("field object is missing")
	}
	var room wireCollection
	if err := decodeObject(env.Object, &room); err != nil {
		return fmt.Errorf("field object: %w", err)
	}
	token, err := requiredString(room.ID, "object.id")
	if err != nil {
		return err
	}
	name, err := optionalString(room.Name, "object.name")
	if err != nil {
		return err
	}
	ev.Token, ev.RoomName, ev.ObjectName = token, name, name
	return nil
}

func parseActor(ev *Event, raw json.RawMessage, field string) error {
	typ, id, name, pt, err := readActor(raw, field)
	if err != nil {
		return err
	}
	ev.ActorType, ev.ActorID, ev.ActorName, ev.ParticipantType = typ, id, name, pt
	return nil
}

func readActor(raw json.RawMessage, field string) (typ, id, name string, participantType int, err error) {
	if isAbsent(raw) {
		return "", "", "", 0, fmt.Errorf("field %s is missing", field)
	}
	var a wireActor
	if err := decodeObject(raw, &a); err != nil {
		return "", "", "", 0, fmt.Errorf("field %s: %w", field, err)
	}
	full, err := requiredString(a.ID, field+".id")
	if err != nil {
		return "", "", "", 0, err
	}
	// Split on the first '/' only: federated ids contain '@' and may contain '/'.
	typ, id, ok := strings.Cut(full, "/")
	if !ok || typ == "" || id == "" {
		return "", "", "", 0, fmt.Errorf("field %s.id %q is not <type>/<id>", field, full)
	}
	if name, err = optionalString(a.Name, field+".name"); err != nil {
		return "", "", "", 0, err
	}
	if !isAbsent(a.TalkParticipantType) {
		n, err := flexInt(a.TalkParticipantType)
		if err != nil {
			return "", "", "", 0, fmt.Errorf("field %s.talkParticipantType: %w", field, err)
		}
		participantType = int(n)
	}
	return typ, id, name, participantType, nil
}

// parseNote reads a message object: id, name, the doubly encoded content and inReplyTo.
func parseNote(ev *Event, raw json.RawMessage, field string) error {
	if isAbsent(raw) {
		return fmt.Errorf("field %s is missing", field)
	}
	var o wireObject
	if err := decodeObject(raw, &o); err != nil {
		return fmt.Errorf("field %s: %w", field, err)
	}
	id, err := messageID(o.ID, field+".id")
	if err != nil {
		return err
	}
	name, err := optionalString(o.Name, field+".name")
	if err != nil {
		return err
	}
	text, params, err := parseContent(o.Content, field+".content")
	if err != nil {
		return err
	}
	ev.MessageID, ev.ObjectName = id, name
	ev.RawMessage, ev.Parameters = text, params
	ev.Message = RenderMessage(text, params)
	if !isAbsent(o.InReplyTo) {
		parent, err := parseParent(o.InReplyTo, field+".inReplyTo")
		if err != nil {
			return err
		}
		ev.InReplyTo = parent
	}
	return nil
}

func parseParent(raw json.RawMessage, field string) (*Parent, error) {
	var w wireParent
	if err := decodeObject(raw, &w); err != nil {
		return nil, fmt.Errorf("field %s: %w", field, err)
	}
	typ, id, name, _, err := readActor(w.Actor, field+".actor")
	if err != nil {
		return nil, err
	}
	if isAbsent(w.Object) {
		return nil, fmt.Errorf("field %s.object is missing", field)
	}
	var o wireObject
	if err := decodeObject(w.Object, &o); err != nil {
		return nil, fmt.Errorf("field %s.object: %w", field, err)
	}
	msgID, err := messageID(o.ID, field+".object.id")
	if err != nil {
		return nil, err
	}
	text, params, err := parseContent(o.Content, field+".object.content")
	if err != nil {
		return nil, err
	}
	return &Parent{MessageID: msgID, ActorType: typ, ActorID: id, ActorName: name, Message: RenderMessage(text, params)}, nil
}

func parseTarget(ev *Event, raw json.RawMessage, field string) error {
	if isAbsent(raw) {
		return fmt.Errorf("field %s is missing", field)
	}
	var c wireCollection
	if err := decodeObject(raw, &c); err != nil {
		return fmt.Errorf("field %s: %w", field, err)
	}
	token, err := requiredString(c.ID, field+".id")
	if err != nil {
		return err
	}
	name, err := optionalString(c.Name, field+".name")
	if err != nil {
		return err
	}
	ev.Token, ev.RoomName = token, name
	return nil
}

// parseContent decodes object.content: a JSON string holding
// {"message": …, "parameters": [] | {…}}. An already decoded object is accepted too.
func parseContent(raw json.RawMessage, field string) (string, map[string]json.RawMessage, error) {
	if isAbsent(raw) {
		return "", nil, fmt.Errorf("field %s is missing", field)
	}
	inner := []byte(raw)
	if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 && trimmed[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", nil, fmt.Errorf("field %s: %w", field, err)
		}
		inner = []byte(s)
	}
	var c wireContent
	if err := decodeObject(inner, &c); err != nil {
		return "", nil, fmt.Errorf("field %s: %w", field, err)
	}
	text, err := requiredStringAllowEmpty(c.Message, field+".message")
	if err != nil {
		return "", nil, err
	}
	params, err := parseParameters(c.Parameters, field+".parameters")
	if err != nil {
		return "", nil, err
	}
	return text, params, nil
}

// parseParameters accepts PHP's two encodings of an array: [] when empty, an object
// otherwise. A non-empty list cannot name placeholders and is refused.
func parseParameters(raw json.RawMessage, field string) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	if isAbsent(raw) {
		return out, nil
	}
	trimmed := bytes.TrimSpace(raw)
	if trimmed[0] == '[' {
		var list []json.RawMessage
		if err := json.Unmarshal(trimmed, &list); err != nil {
			return nil, fmt.Errorf("field %s: %w", field, err)
		}
		if len(list) > 0 {
			return nil, fmt.Errorf("field %s is a non-empty list, want an object", field)
		}
		return out, nil
	}
	if err := decodeObject(trimmed, &out); err != nil {
		return nil, fmt.Errorf("field %s: %w", field, err)
	}
	return out, nil
}

// messageID reads a message id, which Talk sends as a numeric string.
func messageID(raw json.RawMessage, field string) (int64, error) {
	if isAbsent(raw) {
		return 0, fmt.Errorf("field %s is missing", field)
	}
	n, err := flexInt(raw)
	if err != nil {
		return 0, fmt.Errorf("field %s: %w", field, err)
	}
	if n <= 0 {
		return 0, fmt.Errorf("field %s: %d is not a message id", field, n)
	}
	return n, nil
}

// flexInt reads an integer sent either as a JSON number or as a numeric string.
func flexInt(raw json.RawMessage) (int64, error) {
	trimmed := bytes.TrimSpace(raw)
	s := string(trimmed)
	if len(trimmed) > 0 && trimmed[0] == '"' {
		if err := json.Unmarshal(trimmed, &s); err != nil {
			return 0, err
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", s)
	}
	return n, nil
}

func requiredString(raw json.RawMessage, field string) (string, error) {
	s, err := requiredStringAllowEmpty(raw, field)
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", fmt.Errorf("field %s is empty", field)
	}
	return s, nil
}

func requiredStringAllowEmpty(raw json.RawMessage, field string) (string, error) {
	if isAbsent(raw) {
		return "", fmt.Errorf("field %s is missing", field)
	}
	return optionalString(raw, field)
}

// optionalString reads a string field; absent or null gives "". Numbers are accepted
// because PHP may encode a numeric room name or id either way.
func optionalString(raw json.RawMessage, field string) (string, error) {
	if isAbsent(raw) {
		return "", nil
	}
	trimmed := bytes.TrimSpace(raw)
	switch {
	case trimmed[0] == '"':
		var s string
		if err := json.Unmarshal(trimmed, &s); err != nil {
			return "", fmt.Errorf("field %s: %w", field, err)
		}
		return s, nil
	case trimmed[0] == '-' || (trimmed[0] >= '0' && trimmed[0] <= '9'):
		var n json.Number
		if err := json.Unmarshal(trimmed, &n); err != nil {
			return "", fmt.Errorf("field %s: %w", field, err)
		}
		return n.String(), nil
	default:
		return "", fmt.Errorf("field %s is not a string", field)
	}
}

// isAbsent reports a missing or null field.
func isAbsent(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// decodeObject unmarshals a JSON object, with a clearer error for other JSON values.
func decodeObject(raw []byte, v any) error {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return errors.New("empty input")
	}
	if t[0] != '{' {
		return errors.New("not a JSON object")
	}
	if err := json.Unmarshal(t, v); err != nil {
		return err
	}
	return nil
}
