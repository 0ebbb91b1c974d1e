package userconfig

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// BurntSushi/toml reports positions only for syntax errors, yet users need the line
// of every bad value. Once the text has decoded cleanly, keyIndex walks it a second
// time with a small lexer that knows strings, comments and brackets, and records
// where each table header and key sits.

type tomlHeader struct {
	line  int
	name  string // dotted name without brackets, blanks or quotes
	array bool   // [[name]]
}

type tomlKey struct {
	line   int
	header int    // index into headers, -1 before the first header
	key    string // first segment of the (possibly dotted) key, unquoted
}

type keyIndex struct {
	headers []tomlHeader
	keys    []tomlKey
}

func indexKeys(text string) keyIndex {
	const (
		normal = iota
		basic
		literal
		mlBasic
		mlLiteral
		comment
	)
	var ix keyIndex
	state, depth, line, header := normal, 0, 1, -1
	lineStart := true
	for i := 0; i < len(text); i++ {
		c := text[i]
		if lineStart && state == normal && depth == 0 {
			lineStart = false
			j := i
			for j < len(text) && (text[j] == ' ' || text[j] == '\t') {
				j++
			}
			if j < len(text) && text[j] == '[' {
				end := strings.IndexByte(text[j:], '\n')
				if end < 0 {
					end = len(text) - j
				}
				h := text[j : j+end]
				if k := strings.LastIndexByte(h, ']'); k >= 0 {
					h = h[:k+1]
				}
				array := strings.HasPrefix(h, "[[")
				name := strings.Trim(h, "[]")
				name = strings.NewReplacer(" ", "", "\t", "", `"`, "", "'", "").Replace(name)
				ix.headers = append(ix.headers, tomlHeader{line: line, name: name, array: array})
				header = len(ix.headers) - 1
				i = j + len(h) - 1
				continue
			}
			if j < len(text) && text[j] != '\n' && text[j] != '\r' && text[j] != '#' {
				if eq := strings.IndexByte(text[j:], '='); eq > 0 {
					k := strings.TrimSpace(text[j : j+eq])
					if strings.IndexByte(k, '\n') < 0 {
						ix.keys = append(ix.keys, tomlKey{line: line, header: header, key: firstKeySegment(k)})
						i = j + eq // continue at '=' so the value is lexed
						continue
					}
				}
			}
		}
		switch state {
		case normal:
			switch c {
			case '#':
				state = comment
			case '"':
				if strings.HasPrefix(text[i:], `"""`) {
					state, i = mlBasic, i+2
				} else {
					state = basic
				}
			case '\'':
				if strings.HasPrefix(text[i:], `'''`) {
					state, i = mlLiteral, i+2
				} else {
					state = literal
				}
			case '[', '{':
				depth++
			case ']', '}':
				if depth > 0 {
					depth--
				}
			}
		case basic:
			switch c {
			case '\\':
				if i+1 < len(text) && text[i+1] != '\n' {
					i++
				}
			case '"', '\n':
				state = normal
			}
		case literal:
			if c == '\'' || c == '\n' {
				state = normal
			}
		case mlBasic:
			if c == '\\' && i+1 < len(text) && text[i+1] != '\n' {
				i++
			} else if strings.HasPrefix(text[i:], `"""`) {
				state, i = normal, i+2
			}
		case mlLiteral:
			if strings.HasPrefix(text[i:], `'''`) {
				state, i = normal, i+2
			}
		case comment:
			if c == '\n' {
				state = normal
			}
		}
		if text[i] == '\n' {
			line++
			lineStart = true
		}
	}
	return ix
}

func firstKeySegment(k string) string {
	if k == "" {
		return k
	}
	if q := k[0]; q == '"' || q == '\'' {
		if end := strings.IndexByte(k[1:], q); end >= 0 {
			return k[1 : end+1]
		}
		return strings.Trim(k, `"'`)
	}
	if dot := strings.IndexByte(k, '.'); dot >= 0 {
		k = k[:dot]
	}
	return strings.TrimSpace(k)
}

// topKeyLine is the line where a top-level key is defined, or 0.
func (ix keyIndex) topKeyLine(key string) int {
	for _, k := range ix.keys {
		if k.header == -1 && k.key == key {
			return k.line
		}
	}
	for _, h := range ix.headers {
		if h.name == key || strings.HasPrefix(h.name, key+".") {
			return h.line
		}
	}
	return 0
}

// document is a decoded configuration file: its top-level table and where things are.
type document struct {
	raw map[string]any
	ix  keyIndex
}

// decode extracts the TOML from a Markdown file and decodes it. A syntax error
// comes back as the single Problem of the file.
func decode(src []byte) (document, []Problem) {
	text := tomlText(src)
	var raw map[string]any
	if _, err := toml.Decode(text, &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return document{}, []Problem{{Line: pe.Position.Line, Message: "not valid TOML: " + pe.Message}}
		}
		return document{}, []Problem{{Message: "not valid TOML: " + err.Error()}}
	}
	return document{raw: raw, ix: indexKeys(text)}, nil
}

// entries returns the tables of the array named key ([[key]] or key = [{…}]), each
// with the line it starts on and the lines of its keys. Top-level keys other than
// key are reported as unknown.
func (d document) entries(key, what string) ([]*entry, []Problem) {
	var problems []Problem
	names := make([]string, 0, len(d.raw))
	for k := range d.raw {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if k != key {
			problems = append(problems, Problem{Line: d.ix.topKeyLine(k), Field: k,
				Message: fmt.Sprintf("unknown setting; write each %s as a [[%s]] table", what, key)})
		}
	}
	es, ps := d.arrayEntries(key, what)
	return es, append(problems, ps...)
}

// arrayEntries is entries without the check for other top-level keys, for files that
// hold several arrays of tables and top-level settings.
func (d document) arrayEntries(key, what string) ([]*entry, []Problem) {
	var problems []Problem
	v, ok := d.raw[key]
	if !ok {
		return nil, problems
	}
	var tables []map[string]any
	switch v := v.(type) {
	case []map[string]any:
		tables = v
	case []any:
		for _, e := range v {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, append(problems, Problem{Line: d.ix.topKeyLine(key), Field: key,
					Message: fmt.Sprintf("must be a list of tables, one per %s, not %s", what, typeName(e))})
			}
			tables = append(tables, m)
		}
	default:
		return nil, append(problems, Problem{Line: d.ix.topKeyLine(key), Field: key,
			Message: fmt.Sprintf("must be written as [[%s]] tables, one per %s, not as %s", key, what, typeName(v))})
	}
	var hdrs []int
	for i, h := range d.ix.headers {
		if h.array && h.name == key {
			hdrs = append(hdrs, i)
		}
	}
	out := make([]*entry, len(tables))
	for i, m := range tables {
		e := &entry{m: m, line: d.ix.topKeyLine(key), keyLines: map[string]int{}}
		if len(hdrs) == len(tables) {
			e.line = d.ix.headers[hdrs[i]].line
			for _, k := range d.ix.keys {
				if k.header == hdrs[i] {
					if _, seen := e.keyLines[k.key]; !seen {
						e.keyLines[k.key] = k.line
					}
				}
			}
		}
		out[i] = e
	}
	return out, problems
}

// top returns the file's top level as an entry, so that settings outside any table
// are read and reported like a table's fields.
func (d document) top() *entry {
	e := &entry{m: d.raw, keyLines: map[string]int{}}
	for _, k := range d.ix.keys {
		if k.header == -1 {
			if _, seen := e.keyLines[k.key]; !seen {
				e.keyLines[k.key] = k.line
			}
		}
	}
	return e
}

// entry is one table of an array, read field by field. Every accessor records a
// Problem for a value of the wrong type, and the entry is then marked bad.
type entry struct {
	m        map[string]any
	line     int
	keyLines map[string]int
	problems []Problem
	used     map[string]bool
	kind     string // which array the entry is from, in files with several
}

func (e *entry) lineOf(key string) int {
	if l, ok := e.keyLines[key]; ok {
		return l
	}
	return e.line
}

func (e *entry) fail(key, format string, args ...any) {
	e.problems = append(e.problems, Problem{Line: e.lineOf(key), Field: key, Message: fmt.Sprintf(format, args...)})
}

func (e *entry) bad() bool { return len(e.problems) > 0 }

// failed reports whether key already has a problem, so that a value of the wrong
// type is not reported a second time as missing.
func (e *entry) failed(key string) bool {
	for _, p := range e.problems {
		if p.Field == key {
			return true
		}
	}
	return false
}

func (e *entry) get(key string) (any, bool) {
	if e.used == nil {
		e.used = map[string]bool{}
	}
	e.used[key] = true
	v, ok := e.m[key]
	return v, ok
}

// str returns a string field with blanks trimmed, "" when absent.
func (e *entry) str(key string) string {
	v, ok := e.get(key)
	if !ok {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		e.fail(key, "must be a string in quotes, not %s", typeName(v))
		return ""
	}
	return strings.TrimSpace(s)
}

func (e *entry) boolean(key string, def bool) bool {
	v, ok := e.get(key)
	if !ok {
		return def
	}
	b, ok := v.(bool)
	if !ok {
		e.fail(key, "must be true or false, not %s", typeName(v))
		return def
	}
	return b
}

func (e *entry) strList(key string) []string {
	v, ok := e.get(key)
	if !ok {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		e.fail(key, `must be a list of strings like ["a", "b"], not %s`, typeName(v))
		return nil
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := x.(string)
		if !ok {
			e.fail(key, "must contain only strings in quotes, not %s", typeName(x))
			return nil
		}
		out = append(out, strings.TrimSpace(s))
	}
	return out
}

// duration reads a Go duration written as a string ("15m", "1h30m").
func (e *entry) duration(key string, def time.Duration) (time.Duration, bool) {
	v, ok := e.get(key)
	if !ok {
		return def, false
	}
	s, ok := v.(string)
	if !ok {
		e.fail(key, `must be a duration in quotes like "15m" or "2h", not %s`, typeName(v))
		return def, true
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		e.fail(key, `%q is not a duration; write it like "90s", "15m" or "2h30m"`, s)
		return def, true
	}
	return d, true
}

// unknownKeys reports every key no accessor asked for; call it last.
func (e *entry) unknownKeys(allowed string) {
	keys := make([]string, 0, len(e.m))
	for k := range e.m {
		if !e.used[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		e.fail(k, "unknown setting; allowed are %s", allowed)
	}
}

func typeName(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "a number"
	case float64:
		return "a decimal number"
	case bool:
		return "true/false"
	case time.Time:
		return "a date or time"
	case []any, []map[string]any:
		return "a list"
	case map[string]any:
		return "a table"
	default:
		return fmt.Sprintf("%T", v)
	}
}
