// Package mailbox is the user's own mailbox: the IMAP account a user connects on the
// personal settings page so that the agent can search and read their mail (the
// read-only "mailbox" skill) and the e-mail part of their briefings can list what
// arrived. It is not the bot's mailbox (package mail, the e-mail channel).
//
// The password is kept sealed in the users' credential store (package skills) and is
// only ever used here, in the sidecar: the skill runs outside the sandbox, gets the
// password from the credential proxy (its manifest declares it) and logs in itself,
// so the sandbox sees results and nothing else. The other connection settings (host,
// port, TLS mode, user name) and the outcome of the last login are ordinary per-user
// settings. Every connection goes through safedial, so a user cannot point the sidecar
// at its own host or LAN unless an administrator allowed that host:port in
// network.allow_private.
package mailbox

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"unicode/utf8"
)

// TLS modes of an account. Clear-text IMAP is not offered: the password would cross the
// network in the clear.
const (
	// TLSImplicit is IMAP over TLS from the first byte (port 993).
	TLSImplicit = "tls"
	// TLSStartTLS upgrades a plain connection with STARTTLS (port 143) and fails when
	// the server does not offer it.
	TLSStartTLS = "starttls"
)

// CredentialName is the user_credentials entry that holds the IMAP password.
const CredentialName = "mailbox.password"

// Account is the non-secret part of a connected mailbox.
type Account struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	TLS      string `json:"tls"`
	Username string `json:"username"`
}

// Addr is host:port.
func (a Account) Addr() string { return net.JoinHostPort(a.Host, strconv.Itoa(a.Port)) }

// String names the account for people: user@host:port.
func (a Account) String() string { return a.Username + " at " + a.Addr() }

// Limits of what a page may store.
const (
	maxHostLen     = 253
	maxUsernameLen = 320
	maxPasswordLen = 1024
)

// FieldError is input the settings page can point at: Fields maps a field (host, port,
// tls, username, password) to what is wrong with it. It never holds the password.
type FieldError struct {
	Fields map[string]string
}

func (e *FieldError) Error() string {
	parts := make([]string, 0, len(e.Fields))
	for _, f := range []string{"host", "port", "tls", "username", "password"} {
		if m, ok := e.Fields[f]; ok {
			parts = append(parts, f+": "+m)
		}
	}
	return "mailbox: " + strings.Join(parts, "; ")
}

// Normalize checks a and returns it cleaned up (host lower case, trimmed; port
// defaulted from the TLS mode), or a *FieldError naming every bad field.
func (a Account) Normalize() (Account, error) {
	bad := map[string]string{}
	a.Host = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(a.Host), "."))
	a.Username = strings.TrimSpace(a.Username)
	a.TLS = strings.ToLower(strings.TrimSpace(a.TLS))
	switch {
	case a.Host == "":
		bad["host"] = "is required"
	case len(a.Host) > maxHostLen || strings.ContainsAny(a.Host, "/:@ \t[]%") && !isIPv6(a.Host):
		bad["host"] = "must be a host name or an IP address, without a scheme or port"
	}
	switch a.TLS {
	case TLSImplicit, TLSStartTLS:
	case "":
		a.TLS = TLSImplicit
	default:
		bad["tls"] = `must be "tls" (port 993) or "starttls" (port 143)`
	}
	if a.Port == 0 {
		a.Port = 993
		if a.TLS == TLSStartTLS {
			a.Port = 143
		}
	} else if a.Port < 1 || a.Port > 65535 {
		bad["port"] = "must be a number from 1 to 65535"
	}
	switch {
	case a.Username == "":
		bad["username"] = "is required"
	case len(a.Username) > maxUsernameLen || !utf8.ValidString(a.Username) || hasControl(a.Username):
		bad["username"] = fmt.Sprintf("must be text of at most %d characters on one line", maxUsernameLen)
	}
	if len(bad) > 0 {
		return a, &FieldError{Fields: bad}
	}
	return a, nil
}

// checkPassword refuses a password the store or the IMAP LOGIN command cannot carry.
// The message never repeats it.
func checkPassword(pw string) error {
	switch {
	case pw == "":
		return &FieldError{Fields: map[string]string{"password": "is required"}}
	case len(pw) > maxPasswordLen || !utf8.ValidString(pw) || hasControl(pw):
		return &FieldError{Fields: map[string]string{"password": fmt.Sprintf("must be text of at most %d characters on one line", maxPasswordLen)}}
	}
	return nil
}

func isIPv6(h string) bool {
	ip := net.ParseIP(h)
	return ip != nil && ip.To4() == nil && !strings.Contains(h, "%")
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

// Kind classifies a failure to use a mailbox, so the page can point at the right
// field and the skill can say what to do.
type Kind string

// Failure kinds.
const (
	KindAuth        Kind = "auth"        // the server refused the user name or password
	KindUnreachable Kind = "unreachable" // no connection: the name does not resolve, refused, timed out
	KindRefused     Kind = "refused"     // the address is private, loopback or this host's own
	KindTLS         Kind = "tls"         // the TLS handshake or STARTTLS failed
	KindProtocol    Kind = "protocol"    // the server answered something unexpected
	KindNotFound    Kind = "not_found"   // no such folder or message
)

// Error is a failure with a message fit for the user and the agent: it names the
// server and what went wrong, never the password.
type Error struct {
	Kind    Kind
	Message string
	Err     error // the underlying error, for the sidecar's log
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Err }

// ErrNotConnected is returned for a user who has no mailbox connected.
var ErrNotConnected = errors.New("no mailbox is connected")

// Field is the settings-page field a failure of this kind is about.
func (k Kind) Field() string {
	switch k {
	case KindAuth:
		return "password"
	case KindTLS:
		return "tls"
	}
	return "host"
}
