// Command imapd serves a user's mailbox over IMAP with TLS on a loopback port for the
// browser tests, which have no IMAP server of their own: go-imap's real server with an
// in-memory mailbox (package mailboxtest). It writes the certificate to trust to -ca,
// prints "port N" when it is ready and serves until its standard input closes.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/istota/istota/sidecar/internal/mailbox/mailboxtest"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "imapd:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("imapd", flag.ContinueOnError)
	ca := fs.String("ca", "", "write the server's certificate (PEM) here")
	user := fs.String("user", "alice@example.org", "the user name it accepts")
	password := fs.String("password", "", "the password it accepts")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ca == "" || *password == "" {
		return fmt.Errorf("-ca and -password are required")
	}
	srv, err := mailboxtest.New(mailboxtest.TLS, *user, *password)
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := os.WriteFile(*ca, srv.CAPEM, 0o644); err != nil {
		return err
	}
	now := time.Now()
	for i, m := range []struct {
		from, subject string
		seen          bool
	}{
		{"Bob <bob@example.org>", "Offsite agenda", true},
		{"Carol <carol@example.org>", "Invoice 2026-11", false},
		{"Dave <dave@example.org>", "Lunch on Friday?", false},
	} {
		when := now.Add(time.Duration(i-3) * time.Hour)
		if err := srv.Append("INBOX", mailboxtest.Message(m.from, m.subject, "Hello Alice", when), when, m.seen); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "port %d\n", srv.Port)
	// Serve until the test that started us closes our input (or dies).
	_, _ = io.Copy(io.Discard, stdin)
	return nil
}
