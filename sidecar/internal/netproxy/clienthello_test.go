package netproxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
)

// realHello returns the first flight of Go's TLS client for serverName.
func realHello(t *testing.T, serverName string) []byte {
	t.Helper()
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tls.Client(client, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).Handshake()
	}()
	br := bufio.NewReader(server)
	ch, err := readClientHello(br)
	server.Close()
	client.Close()
	<-done
	if err != nil {
		t.Fatalf("reading Go's ClientHello: %v", err)
	}
	return ch.raw
}

// records splits a handshake message into TLS records of at most size bytes each.
func records(msg []byte, size int) []byte {
	var out []byte
	for len(msg) > 0 {
		n := min(size, len(msg))
		out = append(out, recordHandshake, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

// handshakeOf strips the record headers of a single-record hello.
func handshakeOf(raw []byte) []byte { return raw[recordHeaderLen:] }

func u16(n int) []byte { return binary.BigEndian.AppendUint16(nil, uint16(n)) }

func ext(typ int, data []byte) []byte {
	return append(append(u16(typ), u16(len(data))...), data...)
}

func sniExt(names ...string) []byte {
	var list []byte
	for _, n := range names {
		list = append(list, sniHostName)
		list = append(list, u16(len(n))...)
		list = append(list, n...)
	}
	return ext(extServerName, append(u16(len(list)), list...))
}

// buildHello makes a ClientHello handshake message with the given extensions (nil for
// none at all).
func buildHello(exts ...[]byte) []byte {
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...) // random
	body = append(body, 0)                   // session id
	body = append(body, 0, 2, 0x13, 0x01)    // one cipher suite
	body = append(body, 1, 0)                // null compression
	if exts != nil {
		var all []byte
		for _, e := range exts {
			all = append(all, e...)
		}
		body = append(body, u16(len(all))...)
		body = append(body, all...)
	}
	return append([]byte{handshakeClientHello, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
}

func TestReadClientHello(t *testing.T) {
	goHello := realHello(t, "api.example.com")
	for _, tc := range []struct {
		name   string
		in     []byte
		sni    string
		hasSNI bool
		ech    bool
	}{
		{"Go client", goHello, "api.example.com", true, false},
		{"Go client, split into small records", records(handshakeOf(goHello), 50), "api.example.com", true, false},
		{"Go client to an address", realHello(t, ""), "", false, false},
		{"no extensions", records(buildHello(), 1000), "", false, false},
		{"other name types ignored", records(buildHello(ext(extServerName, append(u16(4), 7, 0, 1, 'x'))), 1000), "", false, false},
		{"built", records(buildHello(ext(10, []byte{0, 2, 0, 29}), sniExt("a.test")), 1000), "a.test", true, false},
		{"encrypted hello", records(buildHello(sniExt("public.test"), ext(extEncryptedHello, []byte{0})), 1000), "public.test", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Bytes after the hello (the client's next flight) are left unread.
			in := append(append([]byte(nil), tc.in...), "tail"...)
			br := bufio.NewReader(bytes.NewReader(in))
			ch, err := readClientHello(br)
			if err != nil {
				t.Fatal(err)
			}
			if ch.sni != tc.sni || ch.hasSNI != tc.hasSNI || ch.ech != tc.ech {
				t.Errorf("got sni %q (%v) ech %v", ch.sni, ch.hasSNI, ch.ech)
			}
			if !bytes.Equal(ch.raw, tc.in) {
				t.Error("raw is not exactly the bytes of the hello")
			}
			if rest, _ := br.Peek(4); string(rest) != "tail" {
				t.Errorf("read past the hello: next bytes %q", rest)
			}
		})
	}
}

func TestReadClientHelloErrors(t *testing.T) {
	good := buildHello(sniExt("a.test"))
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"application data", append([]byte{23, 3, 3, 0, 5}, "hello"...)},
		{"SSLv2-style", []byte{0x80, 0x2e, 1, 3, 1}},
		{"empty record", []byte{recordHandshake, 3, 1, 0, 0}},
		{"oversized record", []byte{recordHandshake, 3, 1, 0x50, 0}},
		{"truncated record", records(good, 1000)[:20]},
		{"truncated message", records(good[:len(good)-3], 1000)},
		{"server hello", records(append([]byte{2}, good[1:]...), 1000)},
		{"two host names", records(buildHello(sniExt("a.test", "b.test")), 1000)},
		{"duplicate extension", records(buildHello(sniExt("a.test"), sniExt("b.test")), 1000)},
		{"extension overrun", records(buildHello(append(u16(0), 0, 9, 1)), 1000)},
		{"empty server name list", records(buildHello(ext(extServerName, u16(0))), 1000)},
		{"too large", append([]byte{recordHandshake, 3, 1, 0x40, 0, handshakeClientHello, 0x10, 0, 0}, make([]byte, 0x4000-4)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch, err := readClientHello(bufio.NewReader(bytes.NewReader(tc.in)))
			if err == nil {
				t.Fatalf("accepted, sni %q", ch.sni)
			}
		})
	}
	if _, err := readClientHello(bufio.NewReader(bytes.NewReader([]byte("GET / HTTP/1.1\r\n")))); !errors.Is(err, errNotTLS) {
		t.Errorf("plain text: %v, want errNotTLS", err)
	}
}

func TestSNIProblem(t *testing.T) {
	name := target{host: "api.test", port: 443}
	ip := target{host: "192.0.2.7", ip: netip.MustParseAddr("192.0.2.7"), port: 443}
	for _, tc := range []struct {
		name string
		ch   clientHello
		t    target
		ok   bool
	}{
		{"same", clientHello{sni: "api.test", hasSNI: true}, name, true},
		{"case and dot", clientHello{sni: "API.test.", hasSNI: true}, name, true},
		{"other", clientHello{sni: "evil.test", hasSNI: true}, name, false},
		{"none", clientHello{}, name, false},
		{"invalid", clientHello{sni: "api.test\x00", hasSNI: true}, name, false},
		{"encrypted", clientHello{sni: "api.test", hasSNI: true, ech: true}, name, false},
		{"address, none", clientHello{}, ip, true},
		{"address, a name", clientHello{sni: "evil.test", hasSNI: true}, ip, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sniProblem(tc.ch, tc.t); (got == "") != tc.ok {
				t.Errorf("sniProblem = %q, want ok %v", got, tc.ok)
			}
		})
	}
}
