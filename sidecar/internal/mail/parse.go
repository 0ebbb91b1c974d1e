package mail

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"html"
	"io"
	"mime"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/emersion/go-message"
	gomail "github.com/emersion/go-message/mail"
)

// Limits bounds what Parse keeps from one message. Zero fields take the
// defaults noted on each field.
type Limits struct {
	// MaxTextBytes caps the body text (default 256 KiB).
	MaxTextBytes int
	// MaxAttachments caps the number of attachments kept (default 20).
	MaxAttachments int
	// MaxAttachmentBytes caps one decoded attachment (default 25 MiB);
	// larger ones are dropped with a note.
	MaxAttachmentBytes int64
	// MaxParts caps the MIME parts walked, so a message of thousands of
	// empty parts cannot make parsing slow (default 200).
	MaxParts int
}

func (l Limits) withDefaults() Limits {
	if l.MaxTextBytes <= 0 {
		l.MaxTextBytes = 256 << 10
	}
	if l.MaxAttachments <= 0 {
		l.MaxAttachments = 20
	}
	if l.MaxAttachmentBytes <= 0 {
		l.MaxAttachmentBytes = 25 << 20
	}
	if l.MaxParts <= 0 {
		l.MaxParts = 200
	}
	return l
}

const (
	maxSubjectRunes = 998
	maxReferences   = 30
	maxMsgIDLen     = 250
	maxFilenameLen  = 100
)

// Parse decodes a raw RFC 5322 message. It never panics on malformed input:
// anything it cannot decode is recorded in Message.Notes and the rest is
// kept. It returns an error only when not even the header can be read.
func Parse(raw []byte, lim Limits) (Message, error) {
	lim = lim.withDefaults()
	m := Message{Size: int64(len(raw))}
	// message.Read rather than mail.CreateReader: it also returns a usable
	// entity for an unknown transfer encoding (kept as raw bytes).
	e, err := message.Read(bytes.NewReader(raw))
	if e == nil {
		return m, fmt.Errorf("parse message header: %w", err)
	}
	if err != nil {
		m.Notes = append(m.Notes, "header: "+truncateRunes(oneLine(err.Error()), 200))
	}
	r := gomail.NewReader(e)
	parseHeader(&m, r.Header)
	parseBody(&m, r, lim)
	return m, nil
}

func parseHeader(m *Message, h gomail.Header) {
	if from := addressList(m, h, "From"); len(from) > 0 {
		m.From = from[0]
	}
	m.To = addressList(m, h, "To")
	m.Cc = addressList(m, h, "Cc")

	subject, err := h.Subject()
	if err != nil {
		subject = h.Get("Subject")
	}
	m.Subject = truncateRunes(strings.TrimSpace(oneLine(subject)), maxSubjectRunes)

	if id, err := h.MessageID(); err == nil && validMsgID(id) {
		m.MessageID = id
	}
	if ids, err := h.MsgIDList("In-Reply-To"); err == nil {
		for _, id := range ids {
			if validMsgID(id) {
				m.InReplyTo = id
				break
			}
		}
	}
	if ids, err := h.MsgIDList("References"); err == nil {
		for _, id := range ids {
			if validMsgID(id) {
				m.References = append(m.References, id)
			}
		}
		// The newest ancestors matter for threading; drop the oldest.
		if len(m.References) > maxReferences {
			m.References = m.References[len(m.References)-maxReferences:]
		}
	}
	if d, err := h.Date(); err == nil {
		m.Date = d
	}
	auto := strings.ToLower(strings.TrimSpace(h.Get("Auto-Submitted")))
	m.AutoSubmitted = (auto != "" && auto != "no") || h.Get("X-Autoreply") != "" ||
		strings.EqualFold(strings.TrimSpace(h.Get("Precedence")), "bulk") ||
		strings.EqualFold(strings.TrimSpace(h.Get("Precedence")), "auto_reply")

	ct, _, _ := h.ContentType()
	local, _, _ := strings.Cut(m.From.Email, "@")
	m.Bounce = strings.EqualFold(ct, "multipart/report") ||
		strings.TrimSpace(h.Get("Return-Path")) == "<>" ||
		strings.EqualFold(local, "mailer-daemon")

	m.Key = m.MessageID
	if m.Key == "" {
		sum := sha256.New()
		for _, k := range []string{"From", "To", "Cc", "Subject", "Date"} {
			fmt.Fprintf(sum, "%s:%s\n", k, h.Get(k))
		}
		m.Key = "sha256:" + hex.EncodeToString(sum.Sum(nil))
	}
}

func addressList(m *Message, h gomail.Header, key string) []Address {
	if h.Get(key) == "" {
		return nil
	}
	list, err := h.AddressList(key)
	if err != nil {
		m.Notes = append(m.Notes, fmt.Sprintf("unparseable %s header", key))
		return nil
	}
	out := make([]Address, 0, len(list))
	for _, a := range list {
		if a == nil || a.Address == "" {
			continue
		}
		email := oneLine(a.Address)
		if strings.ContainsAny(email, " <>") {
			continue
		}
		out = append(out, Address{Name: truncateRunes(strings.TrimSpace(oneLine(a.Name)), 200), Email: email})
		if len(out) == 100 {
			break
		}
	}
	return out
}

// validMsgID accepts an id-left@id-right without characters that could break
// a header line or a References list when echoed back in a reply.
func validMsgID(id string) bool {
	if id == "" || len(id) > maxMsgIDLen || !strings.Contains(id, "@") {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c <= ' ' || c >= 0x7f || c == '<' || c == '>' || c == '"' || c == '\\' || c == ',' {
			return false
		}
	}
	return true
}

func parseBody(m *Message, r *gomail.Reader, lim Limits) {
	var plain, htmlText strings.Builder
	names := map[string]bool{}
	for i := 0; ; i++ {
		if i >= lim.MaxParts {
			m.Notes = append(m.Notes, fmt.Sprintf("more than %d MIME parts; the rest was ignored", lim.MaxParts))
			break
		}
		p, err := r.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && (p == nil || !message.IsUnknownCharset(err)) {
			m.Notes = append(m.Notes, "malformed MIME structure: "+truncateRunes(oneLine(err.Error()), 200))
			break
		}
		if err != nil {
			m.Notes = append(m.Notes, "part "+strconv.Itoa(i)+": "+truncateRunes(oneLine(err.Error()), 200))
		}

		var hdr message.Header
		inline := false
		switch h := p.Header.(type) {
		case *gomail.InlineHeader:
			hdr, inline = h.Header, true
		case *gomail.AttachmentHeader:
			hdr = h.Header
		default:
			continue
		}
		ct, params, _ := hdr.ContentType()
		ct = strings.ToLower(ct)
		isText := ct == "" || ct == "text/plain"
		_, hasName := params["name"]
		if dispName, _ := (&gomail.AttachmentHeader{Header: hdr}).Filename(); dispName != "" {
			hasName = true
		}
		// A named text part is a file the sender attached (notes.txt), not
		// the message body.
		if inline && (isText || ct == "text/html") && !hasName {
			limit := lim.MaxTextBytes - plain.Len()
			dst := &plain
			if ct == "text/html" {
				// HTML is converted later; its markup makes it larger than
				// the text, so allow a margin before conversion.
				limit, dst = 4*lim.MaxTextBytes-htmlText.Len(), &htmlText
			}
			data, truncated, rerr := readBounded(p.Body, int64(max(limit, 0)))
			if rerr != nil {
				m.Notes = append(m.Notes, fmt.Sprintf("part %d: body partly undecodable: %s", i, truncateRunes(oneLine(rerr.Error()), 200)))
			}
			if truncated {
				m.Notes = append(m.Notes, fmt.Sprintf("part %d: body truncated", i))
			}
			if dst.Len() > 0 && len(data) > 0 {
				dst.WriteString("\n\n")
			}
			dst.Write(data)
			continue
		}

		if len(m.Attachments) >= lim.MaxAttachments {
			m.Notes = append(m.Notes, fmt.Sprintf("part %d: attachment dropped: more than %d attachments", i, lim.MaxAttachments))
			continue
		}
		data, truncated, rerr := readBounded(p.Body, lim.MaxAttachmentBytes)
		if truncated {
			m.Notes = append(m.Notes, fmt.Sprintf("part %d: attachment dropped: larger than %d bytes", i, lim.MaxAttachmentBytes))
			continue
		}
		if rerr != nil {
			m.Notes = append(m.Notes, fmt.Sprintf("part %d: attachment dropped: %s", i, truncateRunes(oneLine(rerr.Error()), 200)))
			continue
		}
		name, _ := (&gomail.AttachmentHeader{Header: hdr}).Filename()
		if name == "" {
			name = params["name"]
		}
		if ct == "" {
			ct = "application/octet-stream"
		}
		name = uniqueName(names, sanitizeFilename(name, len(m.Attachments)+1, ct))
		m.Attachments = append(m.Attachments, Attachment{
			Filename:    name,
			ContentType: oneLine(ct),
			Size:        int64(len(data)),
			Content:     data,
		})
	}

	text := plain.String()
	if strings.TrimSpace(text) == "" && htmlText.Len() > 0 {
		text = htmlToText(htmlText.String())
		m.FromHTML = true
	}
	text = cleanBody(text)
	if len(text) > lim.MaxTextBytes {
		text = truncateBytes(text, lim.MaxTextBytes)
		m.Notes = append(m.Notes, "body truncated")
	}
	m.Text = text
}

// readBounded reads at most n bytes; truncated reports that more followed.
// A decoding error keeps what was read before it.
func readBounded(r io.Reader, n int64) (data []byte, truncated bool, err error) {
	data, err = io.ReadAll(io.LimitReader(r, n+1))
	if int64(len(data)) > n {
		return data[:n], true, err
	}
	return data, false, err
}

// sanitizeFilename turns an attacker-chosen name into a plain base name that
// cannot escape the directory it is joined to or hide itself.
func sanitizeFilename(name string, n int, contentType string) string {
	name = strings.ReplaceAll(name, "\\", "/")
	name = path.Base(name)
	name = strings.Map(func(r rune) rune {
		switch {
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			return -1
		case strings.ContainsRune(`/\:*?"<>|`, r):
			return '_'
		case r == '\u202a' || r == '\u202b' || r == '\u202c' || r == '\u202d' || r == '\u202e' ||
			(r >= '\u2066' && r <= '\u2069'):
			return -1
		}
		return r
	}, strings.ToValidUTF8(name, ""))
	name = strings.TrimLeft(strings.TrimSpace(name), ".")
	name = strings.TrimSpace(name)
	if name == "" {
		ext := ".bin"
		if exts, _ := mime.ExtensionsByType(contentType); len(exts) > 0 {
			ext = exts[0]
		}
		return "attachment-" + strconv.Itoa(n) + ext
	}
	if len(name) > maxFilenameLen {
		ext := path.Ext(name)
		if len(ext) > 16 || !utf8.ValidString(ext) {
			ext = ""
		}
		name = truncateBytes(name, maxFilenameLen-len(ext)) + ext
	}
	return name
}

func uniqueName(seen map[string]bool, name string) string {
	candidate := name
	for i := 2; seen[strings.ToLower(candidate)]; i++ {
		ext := path.Ext(name)
		candidate = strings.TrimSuffix(name, ext) + "-" + strconv.Itoa(i) + ext
	}
	seen[strings.ToLower(candidate)] = true
	return candidate
}

// cleanBody normalises line ends and removes control and bidi-override
// characters, which could hide text from a human reviewing the prompt.
func cleanBody(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			return -1
		case r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069':
			return -1
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// htmlToText is a deliberately crude converter: it drops tags, comments and
// the content of script/style/head, turns block elements into line breaks
// and decodes entities. Its output is only ever shown as text, so it need
// not be a faithful renderer, only total (never panics, never loops).
func htmlToText(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		lt := strings.IndexByte(s[i:], '<')
		if lt < 0 {
			b.WriteString(html.UnescapeString(s[i:]))
			break
		}
		b.WriteString(html.UnescapeString(s[i : i+lt]))
		i += lt
		if strings.HasPrefix(s[i:], "<!--") {
			end := strings.Index(s[i+4:], "-->")
			if end < 0 {
				break
			}
			i += 4 + end + 3
			continue
		}
		gt := strings.IndexByte(s[i:], '>')
		if gt < 0 {
			break
		}
		tag := s[i+1 : i+gt]
		i += gt + 1
		name := strings.ToLower(strings.TrimLeft(tag, "/!? \t\r\n"))
		if j := strings.IndexAny(name, " \t\r\n/"); j >= 0 {
			name = name[:j]
		}
		closing := strings.HasPrefix(tag, "/")
		switch name {
		case "script", "style", "head", "title", "template":
			if closing {
				continue
			}
			end := indexFold(s[i:], "</"+name)
			if end < 0 {
				i = len(s)
				continue
			}
			i += end
		case "br", "p", "div", "tr", "h1", "h2", "h3", "h4", "h5", "h6",
			"table", "blockquote", "hr", "ul", "ol", "pre", "section", "article":
			b.WriteByte('\n')
		case "li":
			if !closing {
				b.WriteString("\n- ")
			}
		case "td", "th":
			b.WriteByte(' ')
		}
	}
	return tidyWhitespace(b.String())
}

// indexFold is strings.Index ignoring ASCII case; sub must be ASCII. It does
// not lower-case s, because Unicode case mapping can change byte offsets.
func indexFold(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return i
		}
	}
	return -1
}

// tidyWhitespace collapses runs of spaces within lines and more than one
// blank line, which HTML source is full of.
func tidyWhitespace(s string) string {
	lines := strings.Split(strings.ReplaceAll(s, "\u00a0", " "), "\n")
	var out []string
	blank := 0
	for _, l := range lines {
		l = strings.Join(strings.Fields(l), " ")
		if l == "" {
			blank++
			if blank > 1 || len(out) == 0 {
				continue
			}
		} else {
			blank = 0
		}
		out = append(out, l)
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}

func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// truncateBytes cuts s to at most n bytes without splitting a rune.
func truncateBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
