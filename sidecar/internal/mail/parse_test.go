package mail

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseMalformed(t *testing.T) {
	tests := []struct {
		name      string
		raw       string
		wantErr   bool
		wantText  string
		wantNotes bool
	}{
		{"empty", "", false, "", false},
		{"header only, no separator", "From: a@example.org", false, "", false},
		{"garbage header", "\x00\x01\x02 not a header\r\n\r\nbody", true, "", false},
		{"no boundary param", crlf("From: a@example.org\nContent-Type: multipart/mixed\n\nbody"), false, "", true},
		{"unterminated multipart", crlf("From: a@example.org\nContent-Type: multipart/mixed; boundary=q\n\n--q\nContent-Type: text/plain\n\nhello\n"), false, "hello", true},
		// Go's quoted-printable reader passes invalid escapes through.
		{"bad quoted-printable", crlf("From: a@example.org\nContent-Transfer-Encoding: quoted-printable\n\nbad =ZZ escape"), false, "bad =ZZ escape", false},
		{"bad base64", crlf("From: a@example.org\nContent-Transfer-Encoding: base64\n\naGVsbG8g!!!!d29ybGQ="), false, "hello", true},
		{"unknown transfer encoding", crlf("From: a@example.org\nContent-Transfer-Encoding: x-weird\n\nplain"), false, "plain", true},
		{"unknown charset", crlf("From: a@example.org\nContent-Type: text/plain; charset=x-klingon\n\nqapla"), false, "qapla", true},
		{"bad from", crlf("From: <<<>>>\nSubject: x\n\nhi"), false, "hi", true},
		{"control chars in body", "From: a@example.org\r\n\r\nhi\x00\x1b[31m there\u202e", false, "hi[31m there", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(tt.raw), Limits{})
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if !strings.HasPrefix(m.Text, tt.wantText) {
				t.Errorf("text = %q, want prefix %q", m.Text, tt.wantText)
			}
			if (len(m.Notes) > 0) != tt.wantNotes {
				t.Errorf("notes = %q, want notes: %v", m.Notes, tt.wantNotes)
			}
			if m.Key == "" {
				t.Error("empty idempotency key")
			}
		})
	}
}

func TestParseKeyWithoutMessageID(t *testing.T) {
	a := crlf("From: a@example.org\nSubject: one\nDate: Sat, 21 Nov 2026 10:00:00 +0000\n\nx")
	b := crlf("From: a@example.org\nSubject: two\nDate: Sat, 21 Nov 2026 10:00:00 +0000\n\nx")
	ma, _ := Parse([]byte(a), Limits{})
	ma2, _ := Parse([]byte(a), Limits{})
	mb, _ := Parse([]byte(b), Limits{})
	if !strings.HasPrefix(ma.Key, "sha256:") || ma.Key != ma2.Key || ma.Key == mb.Key {
		t.Fatalf("keys %q %q %q", ma.Key, ma2.Key, mb.Key)
	}
}

func TestParseLimits(t *testing.T) {
	var b strings.Builder
	b.WriteString(crlf("From: a@example.org\nContent-Type: multipart/mixed; boundary=q\n\n"))
	b.WriteString(crlf("--q\nContent-Type: text/plain\n\n" + strings.Repeat("y", 500) + "\n"))
	for i := 0; i < 5; i++ {
		b.WriteString(crlf("--q\nContent-Type: application/octet-stream\nContent-Disposition: attachment; filename=same.bin\n\n" + strings.Repeat("z", 10*(i+1)) + "\n"))
	}
	b.WriteString(crlf("--q--\n"))
	m, err := Parse([]byte(b.String()), Limits{MaxTextBytes: 100, MaxAttachments: 3, MaxAttachmentBytes: 25})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Text) != 100 {
		t.Errorf("text length %d, want 100", len(m.Text))
	}
	var names []string
	for _, a := range m.Attachments {
		names = append(names, a.Filename)
	}
	// 10 and 20 bytes fit, 30/40/50 exceed 25 bytes and are dropped.
	if got := strings.Join(names, ","); got != "same.bin,same-2.bin" {
		t.Errorf("attachments = %s", got)
	}
	if len(m.Notes) < 4 {
		t.Errorf("notes = %q", m.Notes)
	}
}

func TestSanitizeFilename(t *testing.T) {
	tests := []struct{ in, want string }{
		{"report.pdf", "report.pdf"},
		{"../../etc/passwd", "passwd"},
		{`C:\Users\x\evil.exe`, "evil.exe"},
		{".bashrc", "bashrc"},
		{"..", "attachment-1.pdf"},
		{"", "attachment-1.pdf"},
		{"a\x00b\nc.txt", "abc.txt"},
		{"invoice\u202Efdp.exe", "invoicefdp.exe"},
		{"what?.txt", "what_.txt"},
		{strings.Repeat("n", 300) + ".pdf", strings.Repeat("n", 96) + ".pdf"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := sanitizeFilename(tt.in, 1, "application/pdf"); got != tt.want {
				t.Errorf("sanitizeFilename(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestHTMLToText(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"entities", "a &lt;b&gt; &amp; &quot;c&quot;", `a <b> & "c"`},
		{"escaped tag stays text", "&lt;script&gt;x&lt;/script&gt;", "<script>x</script>"},
		{"script dropped", "a<SCRIPT type=x>evil()</script >b", "ab"},
		{"unterminated script", "a<script>evil()", "a"},
		{"unterminated tag", "a<b", "a"},
		{"unterminated comment", "a<!-- b", "a"},
		{"blocks", "<div>one</div><div>two<br>three</div>", "one\n\ntwo\nthree"},
		{"whitespace", "  many   \n\n\n\n  spaces  ", "many\n\nspaces"},
		{"table", "<table><tr><td>a</td><td>b</td></tr></table>", "a b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := htmlToText(tt.in); got != tt.want {
				t.Errorf("htmlToText(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		msgWithAttachment, msgHTMLOnly, msgMalformed, bigMessage(100),
		"", "From: a@b\r\n\r\n", "Content-Type: multipart/mixed; boundary=a\r\n\r\n--a\r\n--a--",
		"Subject: =?utf-8?b?////?=\r\nFrom: =?x?q?z?= <a@b>\r\n\r\n<p>x",
		"Content-Type: multipart/alternative; boundary=a\r\n\r\n--a\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := Parse(raw, Limits{MaxTextBytes: 4096, MaxAttachments: 4, MaxAttachmentBytes: 4096, MaxParts: 50})
		if err != nil {
			return
		}
		for _, s := range []string{m.Text, m.Subject, m.From.Email, m.From.Name} {
			if !utf8.ValidString(s) {
				t.Fatalf("invalid UTF-8 in %q", s)
			}
		}
		if len(m.Text) > 4096 || len(m.Attachments) > 4 {
			t.Fatalf("limits exceeded: text %d attachments %d", len(m.Text), len(m.Attachments))
		}
		if strings.ContainsAny(m.Subject, "\r\n") || m.Key == "" {
			t.Fatalf("subject %q key %q", m.Subject, m.Key)
		}
		for _, a := range m.Attachments {
			if a.Filename == "" || strings.ContainsAny(a.Filename, "/\\\x00") || strings.HasPrefix(a.Filename, ".") {
				t.Fatalf("unsafe filename %q", a.Filename)
			}
		}
		if m.MessageID != "" && !validMsgID(m.MessageID) {
			t.Fatalf("invalid message id %q", m.MessageID)
		}
		_ = UntrustedBlock(m)
	})
}
