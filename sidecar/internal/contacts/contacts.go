// Package contacts is the sidecar's CardDAV client for the address books users shared
// with the bot account on Nextcloud, and the read-only contacts skill over it. As with
// calendars, Nextcloud lists a shared address book in the bot's address book home as
// "<uri>_shared_by_<owner>" (package davshare), which is how a user's agent is kept to
// the address books that user shared; the system address book of every account on the
// server ("z-server-generated--system") and the bot's own books belong to no user and
// are never searched.
package contacts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"unicode"

	"github.com/emersion/go-vcard"
	"github.com/emersion/go-webdav/carddav"

	"github.com/istota/istota/sidecar/internal/davshare"
)

// ErrNotFound: no contact with that UID in the address book.
var ErrNotFound = errors.New("contacts: not found")

// AddressBook is one address book in the bot's home; Owner is the user who shared it.
type AddressBook = davshare.Collection

// Contact is the readable part of one vCard.
type Contact struct {
	Book      string   `json:"book"`
	UID       string   `json:"uid"`
	Name      string   `json:"name"`
	Nickname  string   `json:"nickname,omitempty"`
	Org       string   `json:"org,omitempty"`
	Title     string   `json:"title,omitempty"`
	Emails    []string `json:"emails,omitempty"`
	Phones    []string `json:"phones,omitempty"`
	Addresses []string `json:"addresses,omitempty"`
	Birthday  string   `json:"birthday,omitempty"`
	URLs      []string `json:"urls,omitempty"`
	Note      string   `json:"note,omitempty"`
}

// Config configures a Client.
type Config struct {
	// Endpoint is the DAV root, e.g. "https://cloud.example/remote.php/dav/".
	Endpoint string
	// Username and Password are the bot account's credentials (an app password).
	Username string
	Password string
	// HomeSet is the address book home path. Empty means discover it
	// (current-user-principal, then addressbook-home-set); on Nextcloud that finds
	// /remote.php/dav/addressbooks/users/<bot>/.
	HomeSet string
	// HTTPClient defaults to a client with a 30 s timeout.
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// Client talks CardDAV to the server as the bot account. It is safe for concurrent use.
type Client struct {
	user    string
	dav     *carddav.Client
	log     *slog.Logger
	homeSet davshare.Home
}

// New returns a client; it does not contact the server.
func New(cfg Config) (*Client, error) {
	conn, err := davshare.Login{Endpoint: cfg.Endpoint, Username: cfg.Username, Password: cfg.Password,
		HTTPClient: cfg.HTTPClient, Logger: cfg.Logger}.Open("contacts")
	if err != nil {
		return nil, err
	}
	dav, err := carddav.NewClient(conn.Auth, conn.Endpoint.String())
	if err != nil {
		return nil, fmt.Errorf("contacts: new carddav client: %w", err)
	}
	c := &Client{user: cfg.Username, dav: dav, log: conn.Log}
	c.homeSet.Set(cfg.HomeSet)
	return c, nil
}

func (c *Client) home(ctx context.Context) (string, error) {
	return c.homeSet.Discover(ctx, "contacts", c.dav.FindCurrentUserPrincipal, c.dav.FindAddressBookHomeSet)
}

// AddressBooks lists the address books in the bot's home: its own, the server's system
// address book and those shared with it. Callers narrow them with davshare.ForUser.
func (c *Client) AddressBooks(ctx context.Context) ([]AddressBook, error) {
	hs, err := c.home(ctx)
	if err != nil {
		return nil, err
	}
	found, err := c.dav.FindAddressBooks(ctx, hs)
	if err != nil {
		return nil, fmt.Errorf("contacts: list address books in %s: %w", hs, err)
	}
	out := make([]AddressBook, 0, len(found))
	for _, f := range found {
		out = append(out, davshare.New(f.Path, f.Name))
	}
	slices.SortFunc(out, func(a, b AddressBook) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// Contacts returns every contact of book, sorted by name.
func (c *Client) Contacts(ctx context.Context, book AddressBook) ([]Contact, error) {
	// An addressbook-query needs a filter; every vCard has FN (RFC 6350) and every
	// Nextcloud contact a UID, so "FN or UID is defined" is every card.
	q := &carddav.AddressBookQuery{
		DataRequest: carddav.AddressDataRequest{AllProp: true},
		PropFilters: []carddav.PropFilter{{Name: vcard.FieldFormattedName}, {Name: vcard.FieldUID}},
		FilterTest:  carddav.FilterAnyOf,
	}
	objs, err := c.dav.QueryAddressBook(ctx, book.Path, q)
	if err != nil {
		return nil, fmt.Errorf("contacts: query %s: %w", book.Path, err)
	}
	out := make([]Contact, 0, len(objs))
	for _, o := range objs {
		ct := toContact(o.Card)
		if ct.UID == "" {
			c.log.Warn("contacts: skipping a card without UID", "path", o.Path)
			continue
		}
		ct.Book = book.ID
		out = append(out, ct)
	}
	slices.SortFunc(out, func(a, b Contact) int {
		if n := strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)); n != 0 {
			return n
		}
		return strings.Compare(a.UID, b.UID)
	})
	return out, nil
}

// Search returns the contacts of books that match query: a case-insensitive part of the
// name, nickname, e-mail address or organisation, or the digits of a phone number
// (spaces, dashes and brackets ignored).
func (c *Client) Search(ctx context.Context, books []AddressBook, query string) ([]Contact, error) {
	var out []Contact
	for _, b := range books {
		all, err := c.Contacts(ctx, b)
		if err != nil {
			return nil, err
		}
		for _, ct := range all {
			if Matches(ct, query) {
				out = append(out, ct)
			}
		}
	}
	return out, nil
}

// Find returns the contact with uid in one of books.
func (c *Client) Find(ctx context.Context, books []AddressBook, uid string) (Contact, error) {
	for _, b := range books {
		all, err := c.Contacts(ctx, b)
		if err != nil {
			return Contact{}, err
		}
		for _, ct := range all {
			if ct.UID == uid {
				return ct, nil
			}
		}
	}
	return Contact{}, fmt.Errorf("contacts: contact %q: %w", uid, ErrNotFound)
}

// Matches reports whether ct matches query (see Search).
func Matches(ct Contact, query string) bool {
	q := strings.ToLower(strings.TrimSpace(query))
	if q == "" {
		return false
	}
	for _, s := range append([]string{ct.Name, ct.Nickname, ct.Org}, ct.Emails...) {
		if strings.Contains(strings.ToLower(s), q) {
			return true
		}
	}
	if d := digits(q); len(d) >= 3 && len(d)*2 >= len(strings.ReplaceAll(q, " ", "")) {
		for _, p := range ct.Phones {
			if strings.Contains(digits(p), d) {
				return true
			}
		}
	}
	return false
}

func digits(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsDigit(r) {
			return r
		}
		return -1
	}, s)
}

func toContact(card vcard.Card) Contact {
	ct := Contact{
		UID:      card.Value(vcard.FieldUID),
		Name:     card.PreferredValue(vcard.FieldFormattedName),
		Nickname: card.PreferredValue(vcard.FieldNickname),
		Title:    card.PreferredValue(vcard.FieldTitle),
		Birthday: card.Value(vcard.FieldBirthday),
		Note:     card.Value(vcard.FieldNote),
	}
	if ct.Name == "" {
		if n := card.Name(); n != nil {
			ct.Name = strings.TrimSpace(strings.Join([]string{n.HonorificPrefix, n.GivenName, n.AdditionalName, n.FamilyName, n.HonorificSuffix}, " "))
			ct.Name = strings.Join(strings.Fields(ct.Name), " ")
		}
	}
	if org := card.PreferredValue(vcard.FieldOrganization); org != "" {
		// ORG is "company;unit;…": join the parts that are there.
		parts := slices.DeleteFunc(strings.Split(org, ";"), func(s string) bool { return strings.TrimSpace(s) == "" })
		ct.Org = strings.Join(parts, ", ")
	}
	ct.Emails = typed(card[vcard.FieldEmail])
	ct.Phones = typed(card[vcard.FieldTelephone])
	ct.URLs = typed(card[vcard.FieldURL])
	for _, f := range card[vcard.FieldAddress] {
		// ADR is "box;extended;street;locality;region;code;country".
		p := strings.Split(f.Value, ";")
		for len(p) < 7 {
			p = append(p, "")
		}
		var line []string
		for _, s := range []string{p[0], p[1], p[2], p[5] + " " + p[3], p[4], p[6]} {
			if s = strings.TrimSpace(s); s != "" {
				line = append(line, s)
			}
		}
		if len(line) > 0 {
			ct.Addresses = append(ct.Addresses, withType(strings.Join(line, ", "), f))
		}
	}
	return ct
}

// typed lists the values of fields, each with its TYPE in brackets ("a@b (work)").
func typed(fields []*vcard.Field) []string {
	var out []string
	for _, f := range fields {
		v := strings.TrimSpace(strings.TrimPrefix(f.Value, "tel:"))
		if v == "" {
			continue
		}
		out = append(out, withType(v, f))
	}
	return out
}

func withType(v string, f *vcard.Field) string {
	var types []string
	for _, t := range f.Params.Types() {
		if t = strings.ToLower(t); t != "" && t != "internet" && t != "pref" && t != "voice" {
			types = append(types, t)
		}
	}
	if len(types) == 0 {
		return v
	}
	return v + " (" + strings.Join(types, ", ") + ")"
}
