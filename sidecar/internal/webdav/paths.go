package webdav

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on names, matching what Linux file systems accept: a name Nextcloud sends that
// is longer could not be written to the mirror anyway.
const (
	MaxNameBytes = 255
	MaxPathBytes = 4000
)

// ErrBadPath marks a path that is refused before any request is sent or any file is
// written: absolute, climbing ("..", "."), empty segments, control characters,
// backslashes, invalid UTF-8 or too long.
var ErrBadPath = errors.New("refused path")

// ValidatePath checks a relative, '/'-separated path (no leading or trailing slash).
// The client calls it on every path it is given, and the workspace calls it on every
// name Nextcloud returns, so a hostile server cannot make the sidecar write outside a
// mirror and a caller cannot reach outside the bot's files through "..".
func ValidatePath(p string) error {
	if p == "" {
		return fmt.Errorf("%w: empty path", ErrBadPath)
	}
	if len(p) > MaxPathBytes {
		return fmt.Errorf("%w: path longer than %d bytes", ErrBadPath, MaxPathBytes)
	}
	if strings.HasPrefix(p, "/") {
		return fmt.Errorf("%w %q: absolute path", ErrBadPath, clip(p, 80))
	}
	if !utf8.ValidString(p) {
		return fmt.Errorf("%w: not valid UTF-8", ErrBadPath)
	}
	for _, seg := range strings.Split(p, "/") {
		if err := ValidateName(seg); err != nil {
			return err
		}
	}
	return nil
}

// ValidateName checks one path segment (a file or folder name).
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty path segment", ErrBadPath)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %q segment", ErrBadPath, name)
	case len(name) > MaxNameBytes:
		return fmt.Errorf("%w: name longer than %d bytes", ErrBadPath, MaxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: not valid UTF-8", ErrBadPath)
	case strings.ContainsAny(name, "/\\"):
		return fmt.Errorf("%w %q: slash or backslash in a name", ErrBadPath, clip(name, 80))
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("%w %q: control character in a name", ErrBadPath, clip(name, 80))
	}
	return nil
}

// clean normalises a caller's path: surrounding slashes are dropped, the empty path
// is the root. Anything else must pass ValidatePath.
func clean(p string) (string, error) {
	p = strings.Trim(p, "/")
	if p == "" {
		return "", nil
	}
	if err := ValidatePath(p); err != nil {
		return "", err
	}
	return p, nil
}
