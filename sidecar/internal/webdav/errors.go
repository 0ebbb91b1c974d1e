package webdav

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode"
)

// The kinds of failure callers branch on. Test with errors.Is; every error the client
// returns for a failed exchange is an *Error that matches at most one of them.
var (
	// ErrNotFound: the path (or, for MKCOL and PUT, its parent) does not exist (404).
	ErrNotFound = errors.New("not found")
	// ErrPreconditionFailed: an If-Match / If-None-Match condition did not hold (412),
	// or MOVE without overwrite found the destination taken.
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrUnauthorized: the bot account's credentials were refused (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: the account may not do this (403), e.g. a share Nextcloud refuses.
	ErrForbidden = errors.New("forbidden")
	// ErrUnavailable: Nextcloud could not be reached or answered that it cannot serve
	// now (connection refused, timeout, 429, 423 Locked, 5xx). Worth retrying later.
	ErrUnavailable = errors.New("nextcloud unavailable")
)

// Error describes one failed exchange with Nextcloud. It never holds credentials:
// Path is relative to the bot's files root and Message is Nextcloud's own short text.
type Error struct {
	Op      string // HTTP method, e.g. "PUT", or "OCS GET"
	Path    string // relative path the request was about
	Status  int    // HTTP status; 0 when no answer arrived
	Message string // Nextcloud's message, if it sent one
	kind    error  // one of the Err* values above, or nil
	cause   error  // the transport error when no answer arrived
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "webdav %s %s: ", e.Op, displayPath(e.Path))
	switch {
	case e.Status != 0:
		fmt.Fprintf(&b, "%d %s", e.Status, http.StatusText(e.Status))
		if e.Message != "" {
			b.WriteString(": " + e.Message)
		}
	case e.cause != nil:
		b.WriteString(e.cause.Error())
	default:
		b.WriteString("failed")
	}
	if e.kind != nil {
		b.WriteString(" (" + e.kind.Error() + ")")
	}
	return b.String()
}

// Unwrap exposes the kind and the transport cause to errors.Is / errors.As.
func (e *Error) Unwrap() []error {
	var out []error
	if e.kind != nil {
		out = append(out, e.kind)
	}
	if e.cause != nil {
		out = append(out, e.cause)
	}
	return out
}

func displayPath(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// kindForStatus maps an HTTP status to the error kind callers branch on.
func kindForStatus(status int) error {
	switch {
	case status == http.StatusNotFound:
		return ErrNotFound
	case status == http.StatusPreconditionFailed:
		return ErrPreconditionFailed
	case status == http.StatusUnauthorized:
		return ErrUnauthorized
	case status == http.StatusForbidden:
		return ErrForbidden
	case status == http.StatusTooManyRequests, status == http.StatusLocked, status >= 500:
		return ErrUnavailable
	}
	return nil
}

// statusError builds the error for a non-2xx answer and closes its body. It reads at
// most a few KiB of the body for Nextcloud's message.
func statusError(op, relPath string, resp *http.Response) *Error {
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
	return &Error{
		Op:      op,
		Path:    relPath,
		Status:  resp.StatusCode,
		Message: serverMessage(resp.Header.Get("Content-Type"), body),
		kind:    kindForStatus(resp.StatusCode),
	}
}

// transportError builds the error for an exchange that got no answer. A cancelled
// caller context is passed through as such (the caller stopped, Nextcloud is not at
// fault); everything else — refused connections, timeouts, resets — is ErrUnavailable.
func transportError(ctx context.Context, op, relPath string, err error) error {
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("webdav %s %s: %w", op, displayPath(relPath), ctx.Err())
	}
	// url.Error repeats the whole URL; the op and path already say what was asked.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return &Error{Op: op, Path: relPath, kind: ErrUnavailable, cause: err}
}

// serverMessage extracts a short human message from an error body: Sabre's
// <s:message>, an OCS meta message, or the first line of plain text.
func serverMessage(contentType string, body []byte) string {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return ""
	}
	var msg string
	switch {
	case strings.Contains(contentType, "xml") || bytes.HasPrefix(body, []byte("<?xml")) || bytes.HasPrefix(body, []byte("<")):
		dec := xml.NewDecoder(bytes.NewReader(body))
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "message" {
				var s string
				if dec.DecodeElement(&s, &se) == nil {
					msg = s
				}
				break
			}
		}
	case strings.Contains(contentType, "json"):
		var env ocsEnvelope
		if jsonUnmarshal(body, &env) == nil {
			msg = env.OCS.Meta.Message
		}
	case strings.HasPrefix(contentType, "text/plain"):
		msg, _, _ = strings.Cut(string(body), "\n")
	}
	return clip(msg, 200)
}

// clip trims s to at most n bytes of printable text.
func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.TrimSpace(s))
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
