package executor

import (
	"fmt"
	"strings"
)

// SafeName turns a Nextcloud user id into one directory name. Ids may contain spaces,
// dots, @ and other characters; anything outside a small safe set is hex-escaped so two
// different ids can never share a directory and none can climb out ("..").
func SafeName(uid string) string {
	var b strings.Builder
	for i := 0; i < len(uid); i++ {
		c := uid[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '@':
			b.WriteByte(c)
		case c == '.' && i > 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02x", c)
		}
	}
	if b.Len() == 0 {
		return "%"
	}
	return b.String()
}
