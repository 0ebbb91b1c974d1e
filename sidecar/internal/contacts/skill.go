package contacts

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/davshare"
	"github.com/istota/istota/sidecar/internal/skills"
)

const skillUsage = `contacts books [--json]
contacts search QUERY [--book BOOK] [--json]
contacts show UID [--book BOOK] [--json]
Read-only: the skill looks contacts up and never changes them.
BOOK is an address book id or name from "contacts books"; only the address books you shared with the bot account
are searched. QUERY matches part of a name, nickname, e-mail address or organisation, or the digits of a phone number.`

// maxResults bounds one search's output, so a one-letter query cannot flood a prompt.
const maxResults = 50

// RegisterSkill registers the contacts skill, which reads the address books the invoking
// user shared with the bot account and no others. The bot's credentials stay in the
// client: the skill declares no environment.
func RegisterSkill(reg *skills.Registry, client *Client) error {
	if client == nil {
		return fmt.Errorf("contacts: register skill: no client")
	}
	return reg.Register(skills.Skill{
		Manifest: skills.Manifest{
			Name:    "contacts",
			Summary: "look up people (name, e-mail, phone, organisation) in the address books you shared with the bot; read-only",
			Usage:   skillUsage,
			// Every subcommand only reads.
			Classify: func(context.Context, skills.Invocation) approval.Action {
				return approval.Action{Tier: approval.TierRead}
			},
			Load: skills.Load{Keywords: []string{
				"contact", "address", "phone", "number", "e mail", "email", "mail", "call", "who is", "kontakt", "telefon", "adresse",
			}},
		},
		Run: func(ctx context.Context, inv skills.Invocation) skills.Result {
			return runSkill(ctx, client, inv)
		},
	})
}

type skillFlags struct {
	book string
	json bool
}

func newFlagSet(name string, f *skillFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("contacts "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.book, "book", "", "address book id or name")
	fs.BoolVar(&f.json, "json", false, "print JSON")
	return fs
}

// operand parses args with fs and returns the one operand, before or after the flags.
func operand(fs *flag.FlagSet, args []string) (string, bool) {
	var op string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		op, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return "", false
	}
	rest := fs.Args()
	if op == "" && len(rest) > 0 {
		op, rest = rest[0], rest[1:]
	}
	return op, strings.TrimSpace(op) != "" && len(rest) == 0
}

func runSkill(ctx context.Context, c *Client, inv skills.Invocation) skills.Result {
	if len(inv.Args) == 0 {
		return skills.Usagef("usage:\n%s", skillUsage)
	}
	if inv.UserID == "" {
		return skills.Failf("contacts: no user for this task")
	}
	var f skillFlags
	args := inv.Args[1:]
	switch inv.Args[0] {
	case "books":
		fs := newFlagSet("books", &f)
		if err := fs.Parse(args); err != nil || fs.NArg() > 0 || f.book != "" {
			return skills.Usagef("usage: istota skill contacts books [--json]")
		}
		books, res := mine(ctx, c, inv.UserID, "")
		if res != nil {
			return *res
		}
		return printBooks(c, books, f.json)
	case "search":
		fs := newFlagSet("search", &f)
		q, ok := operand(fs, args)
		if !ok {
			return skills.Usagef("usage: istota skill contacts search QUERY [--book BOOK] [--json] (quote a QUERY of several words)")
		}
		if len([]rune(q)) > 200 {
			return skills.Usagef("contacts search: the query is longer than 200 characters")
		}
		books, res := mine(ctx, c, inv.UserID, f.book)
		if res != nil {
			return *res
		}
		found, err := c.Search(ctx, books, q)
		if err != nil {
			return skills.Internal("the contacts server", err)
		}
		return printContacts(found, f.json, fmt.Sprintf("no contact matches %q in your address books\n", q))
	case "show":
		fs := newFlagSet("show", &f)
		uid, ok := operand(fs, args)
		if !ok {
			return skills.Usagef("usage: istota skill contacts show UID [--book BOOK] [--json]")
		}
		books, res := mine(ctx, c, inv.UserID, f.book)
		if res != nil {
			return *res
		}
		ct, err := c.Find(ctx, books, uid)
		if errors.Is(err, ErrNotFound) {
			return skills.Failf("contacts: no contact %q in your address books", uid)
		}
		if err != nil {
			return skills.Internal("the contacts server", err)
		}
		if f.json {
			return skills.JSON(ct)
		}
		var b strings.Builder
		writeContact(&b, ct, true)
		return skills.Result{Stdout: []byte(b.String())}
	}
	return skills.Usagef("contacts: unknown subcommand %q (the skill is read-only)\nusage:\n%s", inv.Args[0], skillUsage)
}

// mine lists the user's address books, or the one named, refusing every other book.
func mine(ctx context.Context, c *Client, user, name string) ([]AddressBook, *skills.Result) {
	all, err := c.AddressBooks(ctx)
	if err != nil {
		res := skills.Internal("the contacts server", err)
		return nil, &res
	}
	books, err := davshare.Pick(davshare.ForUser(all, user), name, "address books", "contacts books", c.user)
	if err != nil {
		res := skills.Failf("contacts: %v", err)
		return nil, &res
	}
	return books, nil
}

type bookJSON struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

func printBooks(c *Client, books []AddressBook, asJSON bool) skills.Result {
	if asJSON {
		out := make([]bookJSON, 0, len(books))
		for _, b := range books {
			out = append(out, bookJSON{ID: b.ID, Name: b.Name})
		}
		return skills.JSON(out)
	}
	if len(books) == 0 {
		return skills.Result{Stdout: fmt.Appendf(nil, "no address books: share an address book with the user %q in Nextcloud Contacts to use it here\n", c.user)}
	}
	var b strings.Builder
	for _, bk := range books {
		fmt.Fprintf(&b, "%s\t%s\n", bk.ID, bk.Name)
	}
	return skills.Result{Stdout: []byte(b.String())}
}

func printContacts(found []Contact, asJSON bool, none string) skills.Result {
	more := 0
	if len(found) > maxResults {
		more, found = len(found)-maxResults, found[:maxResults]
	}
	if asJSON {
		if found == nil {
			found = []Contact{}
		}
		return skills.JSON(found)
	}
	if len(found) == 0 {
		return skills.Result{Stdout: []byte(none)}
	}
	var b strings.Builder
	for _, ct := range found {
		writeContact(&b, ct, false)
	}
	if more > 0 {
		fmt.Fprintf(&b, "… and %d more: narrow the query\n", more)
	}
	return skills.Result{Stdout: []byte(b.String())}
}

func writeContact(b *strings.Builder, ct Contact, full bool) {
	fmt.Fprintf(b, "%s\n  book: %s  uid: %s\n", ct.Name, ct.Book, ct.UID)
	line := func(label, v string) {
		if v != "" {
			fmt.Fprintf(b, "  %s: %s\n", label, strings.ReplaceAll(v, "\n", "\n    "))
		}
	}
	line("nickname", ct.Nickname)
	line("organisation", ct.Org)
	line("title", ct.Title)
	for _, e := range ct.Emails {
		line("e-mail", e)
	}
	for _, p := range ct.Phones {
		line("phone", p)
	}
	if !full {
		return
	}
	for _, a := range ct.Addresses {
		line("address", a)
	}
	line("birthday", ct.Birthday)
	for _, u := range ct.URLs {
		line("web", u)
	}
	line("note", ct.Note)
}
