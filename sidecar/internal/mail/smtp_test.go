package mail

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

var fixedNow = time.Date(2026, 11, 22, 8, 30, 0, 0, time.UTC)

func newTestSender(t *testing.T, addr string, mutate func(*SenderOptions)) *Sender {
	t.Helper()
	opts := SenderOptions{
		Addr: addr, User: testUser, Password: testPassword, From: "Istota <bot@bot.example.org>",
		TLS: TLSNone, Timeout: time.Minute, Now: func() time.Time { return fixedNow },
	}
	if mutate != nil {
		mutate(&opts)
	}
	s, err := NewSender(opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// headerBlock returns the raw header lines of a message, unfolded.
func headerBlock(t *testing.T, raw []byte) string {
	t.Helper()
	s := string(raw)
	end := strings.Index(s, "\r\n\r\n")
	if end < 0 {
		t.Fatalf("no header/body separator in %q", s)
	}
	return strings.ReplaceAll(s[:end+2], "\r\n ", " ")
}

func TestReplyThreading(t *testing.T) {
	srv := startSMTP(t, nil)
	s := newTestSender(t, srv.addr, nil)
	orig := Message{
		MessageID:  "orig@example.org",
		InReplyTo:  "mid@example.org",
		References: []string{"root@example.org", "mid@example.org"},
		From:       Address{Name: "Alice Example", Email: "alice@example.org"},
		Subject:    "Re: RE: Plans for Friday",
	}
	body := "Grüße,\nhere is the plan = lunch at 12.\n"
	id, err := s.Reply(context.Background(), orig, body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(id, "@bot.example.org") || strings.ContainsAny(id, "<> ") {
		t.Errorf("message id = %q", id)
	}

	msgs := srv.messages()
	if len(msgs) != 1 {
		t.Fatalf("server received %d messages, want 1", len(msgs))
	}
	got := msgs[0]
	if got.AuthUser != testUser || got.From != "bot@bot.example.org" || !slices.Equal(got.To, []string{"alice@example.org"}) {
		t.Errorf("envelope = auth %q from %q to %q", got.AuthUser, got.From, got.To)
	}

	hdr := headerBlock(t, got.Data)
	for _, want := range []string{
		"In-Reply-To: <orig@example.org>\r\n",
		"References: <root@example.org> <mid@example.org> <orig@example.org>\r\n",
		"Message-Id: <" + id + ">\r\n",
		"Subject: Re: Plans for Friday\r\n",
		"Date: Sun, 22 Nov 2026 08:30:00 +0000\r\n",
		"From: \"Istota\" <bot@bot.example.org>\r\n",
		"To: \"Alice Example\" <alice@example.org>\r\n",
		"Content-Type: text/plain; charset=utf-8\r\n",
		"Content-Transfer-Encoding: quoted-printable\r\n",
		"Auto-Submitted: auto-replied\r\n",
	} {
		if !strings.Contains(hdr, want) {
			t.Errorf("header lacks %q:\n%s", want, hdr)
		}
	}

	// The received message parses back to the same thread and body.
	m, err := Parse(got.Data, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if m.MessageID != id || m.InReplyTo != "orig@example.org" ||
		!slices.Equal(m.References, []string{"root@example.org", "mid@example.org", "orig@example.org"}) {
		t.Errorf("parsed back: id %q in-reply-to %q references %q", m.MessageID, m.InReplyTo, m.References)
	}
	if m.Text != strings.TrimSpace(body) {
		t.Errorf("body = %q", m.Text)
	}
	if !m.AutoSubmitted {
		t.Error("reply not marked auto-submitted")
	}
}

func TestReplyReferencesFallback(t *testing.T) {
	tests := []struct {
		name     string
		orig     Message
		wantRefs string
		wantIRT  bool
	}{
		// Without References the parent's In-Reply-To stands in (RFC 5322 3.6.4).
		{"in-reply-to only", Message{MessageID: "p@example.org", InReplyTo: "gp@example.org"}, "References: <gp@example.org> <p@example.org>\r\n", true},
		{"first message", Message{MessageID: "p@example.org"}, "References: <p@example.org>\r\n", true},
		{"no message id", Message{References: []string{"gp@example.org"}}, "References: <gp@example.org>\r\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startSMTP(t, nil)
			s := newTestSender(t, srv.addr, nil)
			tt.orig.From = Address{Email: "alice@example.org"}
			if _, err := s.Reply(context.Background(), tt.orig, "ok"); err != nil {
				t.Fatal(err)
			}
			msgs := srv.messages()
			if len(msgs) != 1 {
				t.Fatalf("received %d", len(msgs))
			}
			hdr := headerBlock(t, msgs[0].Data)
			if !strings.Contains(hdr, tt.wantRefs) || strings.Contains(hdr, "In-Reply-To:") != tt.wantIRT {
				t.Errorf("header:\n%s", hdr)
			}
		})
	}
}

func TestReplySubject(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Plans", "Re: Plans"},
		{"Re: Plans", "Re: Plans"},
		{"RE: re: Aw: Plans", "Re: Plans"},
		{"  re:Plans  ", "Re: Plans"},
		{"Reply needed", "Re: Reply needed"},
		{"", "Re: (no subject)"},
		{"Re:", "Re: (no subject)"},
		{"line\r\nBcc: evil@example.net", "Re: line  Bcc: evil@example.net"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := ReplySubject(tt.in); got != tt.want {
				t.Errorf("ReplySubject(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestSendRefusesHeaderInjection(t *testing.T) {
	srv := startSMTP(t, nil)
	s := newTestSender(t, srv.addr, nil)
	base := Outgoing{To: []string{"alice@example.org"}, Subject: "Hello", Body: "body\r\nBcc: is fine in a body"}
	tests := []struct {
		name   string
		mutate func(*Outgoing)
	}{
		{"subject LF", func(o *Outgoing) { o.Subject = "Hi\nBcc: evil@example.net" }},
		{"subject CR", func(o *Outgoing) { o.Subject = "Hi\rBcc: evil@example.net" }},
		{"to CRLF", func(o *Outgoing) { o.To = []string{"alice@example.org\r\nBcc: evil@example.net"} }},
		{"in-reply-to LF", func(o *Outgoing) { o.InReplyTo = "a@b\nBcc: evil@example.net" }},
		{"references CR", func(o *Outgoing) { o.References = []string{"a@b\rX: y"} }},
		{"subject NUL", func(o *Outgoing) { o.Subject = "Hi\x00" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := base
			tt.mutate(&out)
			if _, err := s.Send(context.Background(), out); !errors.Is(err, ErrHeaderInjection) {
				t.Fatalf("err = %v, want ErrHeaderInjection", err)
			}
		})
	}
	if n := len(srv.messages()); n != 0 {
		t.Fatalf("server received %d messages from refused sends", n)
	}

	// The same sender works for a clean message; its body may hold
	// anything, including header-looking lines.
	id, err := s.Send(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	msgs := srv.messages()
	if len(msgs) != 1 {
		t.Fatalf("received %d messages, want 1", len(msgs))
	}
	if hdr := headerBlock(t, msgs[0].Data); strings.Contains(hdr, "Bcc") || strings.Contains(hdr, "In-Reply-To") ||
		!strings.Contains(hdr, "Auto-Submitted: auto-generated\r\n") || !strings.Contains(hdr, id) {
		t.Errorf("header:\n%s", hdr)
	}

	if _, err := NewSender(SenderOptions{Addr: srv.addr, From: "bot@bot.example.org\r\nBcc: x@y", TLS: TLSNone}, nil); !errors.Is(err, ErrHeaderInjection) {
		t.Errorf("NewSender with CRLF in From: err = %v", err)
	}
}

func TestSendValidation(t *testing.T) {
	s := newTestSender(t, "127.0.0.1:25", nil)
	tests := []struct {
		name string
		out  Outgoing
	}{
		{"no recipient", Outgoing{Subject: "x"}},
		{"bad recipient", Outgoing{To: []string{"not an address"}}},
		{"bad in-reply-to", Outgoing{To: []string{"a@example.org"}, InReplyTo: "no-at-sign"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, _, err := s.build(tt.out); err == nil {
				t.Fatal("build succeeded")
			}
		})
	}
}

func TestSendMultipleRecipientsAndAuth(t *testing.T) {
	srv := startSMTP(t, nil)
	s := newTestSender(t, srv.addr, nil)
	if _, err := s.Send(context.Background(), Outgoing{To: []string{"Alice <alice@example.org>", "bob@example.org, carol@example.org"}, Subject: "Hi", Body: "x"}); err != nil {
		t.Fatal(err)
	}
	msgs := srv.messages()
	if len(msgs) != 1 || !slices.Equal(msgs[0].To, []string{"alice@example.org", "bob@example.org", "carol@example.org"}) {
		t.Fatalf("received %+v", msgs)
	}

	bad := newTestSender(t, srv.addr, func(o *SenderOptions) { o.Password = "wrong-password-xyz" })
	_, err := bad.Send(context.Background(), Outgoing{To: []string{"a@example.org"}, Subject: "x"})
	if err == nil {
		t.Fatal("send with a wrong password succeeded")
	}
	if strings.Contains(err.Error(), "wrong-password-xyz") {
		t.Fatalf("error leaks the password: %v", err)
	}
	noAuth := newTestSender(t, srv.addr, func(o *SenderOptions) { o.User = "" })
	if _, err := noAuth.Send(context.Background(), Outgoing{To: []string{"a@example.org"}, Subject: "x"}); err == nil {
		t.Fatal("send without AUTH accepted by a server that requires it")
	}
	if n := len(srv.messages()); n != 1 {
		t.Fatalf("server holds %d messages, want 1", n)
	}
}

func TestSendStartTLS(t *testing.T) {
	serverTLS, clientTLS := testTLS(t)
	srv := startSMTP(t, serverTLS)
	s := newTestSender(t, srv.addr, func(o *SenderOptions) { o.TLS = TLSStartTLS; o.TLSConfig = clientTLS })
	if _, err := s.Send(context.Background(), Outgoing{To: []string{"a@example.org"}, Subject: "tls", Body: "x"}); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.messages()); n != 1 {
		t.Fatalf("received %d, want 1", n)
	}
	// The server refuses AUTH in clear text, so a sender without TLS fails.
	plain := newTestSender(t, srv.addr, nil)
	if _, err := plain.Send(context.Background(), Outgoing{To: []string{"a@example.org"}, Subject: "x"}); err == nil {
		t.Fatal("clear-text AUTH accepted")
	}
}

func TestReplyNeedsSender(t *testing.T) {
	s := newTestSender(t, "127.0.0.1:25", nil)
	if _, err := s.Reply(context.Background(), Message{Subject: "x"}, "body"); err == nil {
		t.Fatal("reply without a sender address succeeded")
	}
}
