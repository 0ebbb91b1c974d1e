package talk

import (
	"encoding/json"
	"strings"
)

// richParameter is the part of a Talk rich object parameter that rendering needs.
// Fields are decoded loosely: a value of another JSON type is simply ignored.
type richParameter struct {
	Type      string
	Name      string
	MentionID string
}

func decodeRichParameter(raw json.RawMessage) (richParameter, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return richParameter{}, false
	}
	str := func(key string) string {
		var s string
		if v, ok := m[key]; ok {
			_ = json.Unmarshal(v, &s) // a non-string value renders as absent
		}
		return s
	}
	return richParameter{Type: str("type"), Name: str("name"), MentionID: str("mention-id")}, true
}

// RenderMessage replaces the {placeholders} of a Talk message with readable text, the
// way a person reading the chat sees them: mentions become "@Display Name" ("@all" for a
// conversation-wide mention), a shared file becomes "[file: name]", other rich objects
// "[<type>: name]", and system-message actors their name. Placeholders without a
// parameter stay as they are, so literal braces in a message survive.
func RenderMessage(text string, params map[string]json.RawMessage) string {
	if len(params) == 0 || !strings.Contains(text, "{") {
		return text
	}
	var b strings.Builder
	b.Grow(len(text))
	rest := text
	for {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			b.WriteString(rest)
			break
		}
		closeAt := strings.IndexByte(rest[open+1:], '}')
		if closeAt < 0 {
			b.WriteString(rest)
			break
		}
		key := rest[open+1 : open+1+closeAt]
		raw, ok := params[key]
		if !ok || !isPlaceholderKey(key) {
			// Not ours: keep the '{' and continue after it, so "{{mention-user1}"
			// still renders its inner placeholder.
			b.WriteString(rest[:open+1])
			rest = rest[open+1:]
			continue
		}
		b.WriteString(rest[:open])
		b.WriteString(renderParameter(key, raw))
		rest = rest[open+1+closeAt+1:]
	}
	return b.String()
}

func isPlaceholderKey(key string) bool {
	if key == "" {
		return false
	}
	for _, r := range key {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func renderParameter(key string, raw json.RawMessage) string {
	p, ok := decodeRichParameter(raw)
	if !ok {
		return "{" + key + "}"
	}
	name := p.Name
	if strings.HasPrefix(key, "mention-") {
		if p.Type == "call" || p.MentionID == "all" {
			return "@all"
		}
		if name == "" {
			name = p.MentionID
		}
		return "@" + name
	}
	switch p.Type {
	case "file":
		return "[file: " + name + "]"
	case "user", "guest", "email", "user-group", "group", "circle", "federated_user", "call", "bot", "highlight":
		if name != "" {
			return name
		}
	default:
		if p.Type != "" && name != "" {
			return "[" + p.Type + ": " + name + "]"
		}
	}
	if name != "" {
		return name
	}
	return "{" + key + "}"
}
