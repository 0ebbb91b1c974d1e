package netproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// TLS record and handshake constants (RFC 8446 §5.1, §4, RFC 6066 §3).
const (
	recordHandshake      = 22
	recordHeaderLen      = 5
	maxRecordPayload     = 16384 + 256 // 2^14 plaintext; a little slack for odd clients
	handshakeClientHello = 1
	extServerName        = 0
	extEncryptedHello    = 0xfe0d // encrypted_client_hello (ECH)
	sniHostName          = 0
	// maxClientHello bounds what the proxy buffers while reading a ClientHello; real
	// ones, post-quantum key shares included, are a few KiB.
	maxClientHello = 64 << 10
)

// tlsAlertAccessDenied is a fatal access_denied alert record, sent to the client when the
// proxy refuses a tunnel after the ClientHello, so the client reports a clear TLS
// error rather than an unexplained reset.
const tlsAlertAccessDenied = "\x15\x03\x03\x00\x02\x02\x31" // alert(21), TLS 1.2, length 2, fatal(2), access_denied(49)

// clientHello is what the proxy learns from the first flight of a TLS client.
type clientHello struct {
	raw    []byte // every byte consumed, to be sent upstream unchanged
	sni    string // the host_name of server_name, as sent
	hasSNI bool
	ech    bool // an encrypted_client_hello extension hides the real server name
}

// errNotTLS says the tunnel's first record is not a TLS handshake.
var errNotTLS = errors.New("not a TLS handshake")

// readClientHello reads TLS records from br until it holds the whole ClientHello
// handshake message (it may be split over several records), and parses it.
func readClientHello(br *bufio.Reader) (clientHello, error) {
	var ch clientHello
	var msg []byte
	for {
		var hdr [recordHeaderLen]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return ch, fmt.Errorf("read TLS record header: %w", err)
		}
		ch.raw = append(ch.raw, hdr[:]...)
		if hdr[0] != recordHandshake || hdr[1] != 3 {
			return ch, errNotTLS
		}
		n := int(hdr[3])<<8 | int(hdr[4])
		if n == 0 || n > maxRecordPayload {
			return ch, fmt.Errorf("TLS record length %d is invalid", n)
		}
		if len(ch.raw)+n > maxClientHello {
			return ch, errors.New("TLS ClientHello is too large")
		}
		start := len(ch.raw)
		ch.raw = append(ch.raw, make([]byte, n)...)
		if _, err := io.ReadFull(br, ch.raw[start:]); err != nil {
			return ch, fmt.Errorf("read TLS record: %w", err)
		}
		msg = append(msg, ch.raw[start:]...)
		if len(msg) < 4 {
			continue
		}
		if msg[0] != handshakeClientHello {
			return ch, fmt.Errorf("first TLS handshake message has type %d, not ClientHello", msg[0])
		}
		size := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
		if size > maxClientHello {
			return ch, errors.New("TLS ClientHello is too large")
		}
		if len(msg) < 4+size {
			continue
		}
		if err := parseClientHello(msg[4:4+size], &ch); err != nil {
			return ch, fmt.Errorf("malformed TLS ClientHello: %w", err)
		}
		return ch, nil
	}
}

// cursor reads big-endian, length-prefixed fields; any overrun sets bad.
type cursor struct {
	b   []byte
	bad bool
}

func (c *cursor) take(n int) []byte {
	if c.bad || n < 0 || n > len(c.b) {
		c.bad = true
		return nil
	}
	out := c.b[:n]
	c.b = c.b[n:]
	return out
}

func (c *cursor) uint(n int) int {
	v := 0
	for _, x := range c.take(n) {
		v = v<<8 | int(x)
	}
	return v
}

// vector returns a field prefixed by an n-byte length.
func (c *cursor) vector(n int) *cursor {
	b := c.take(c.uint(n))
	return &cursor{b: b, bad: c.bad}
}

// parseClientHello fills ch from a ClientHello body (RFC 8446 §4.1.2; the TLS 1.2 form
// is the same up to the extensions, which may be absent).
func parseClientHello(body []byte, ch *clientHello) error {
	c := &cursor{b: body}
	c.take(2)  // legacy_version
	c.take(32) // random
	if sid := c.vector(1); len(sid.b) > 32 {
		return errors.New("session id longer than 32 bytes")
	}
	if suites := c.vector(2); len(suites.b) < 2 || len(suites.b)%2 != 0 {
		return errors.New("bad cipher suite list")
	}
	if comp := c.vector(1); len(comp.b) < 1 {
		return errors.New("empty compression method list")
	}
	if c.bad {
		return errors.New("truncated")
	}
	if len(c.b) == 0 {
		return nil // no extensions, hence no server name
	}
	exts := c.vector(2)
	if c.bad || len(c.b) != 0 {
		return errors.New("bad extension block")
	}
	seen := map[int]bool{}
	for len(exts.b) > 0 {
		typ := exts.uint(2)
		data := exts.vector(2)
		if exts.bad {
			return errors.New("truncated extension")
		}
		if seen[typ] {
			return fmt.Errorf("extension %d appears twice", typ)
		}
		seen[typ] = true
		switch typ {
		case extEncryptedHello:
			ch.ech = true
		case extServerName:
			list := data.vector(2)
			if data.bad || len(data.b) != 0 || len(list.b) == 0 {
				return errors.New("bad server_name extension")
			}
			for len(list.b) > 0 {
				kind := list.uint(1)
				name := list.vector(2)
				if list.bad || name.bad {
					return errors.New("truncated server_name entry")
				}
				if kind != sniHostName {
					continue
				}
				if ch.hasSNI {
					return errors.New("two host names in server_name")
				}
				ch.sni, ch.hasSNI = string(name.b), true
			}
		}
	}
	return nil
}
