package contacts

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/emersion/go-vcard"
	"github.com/emersion/go-webdav"
	"github.com/emersion/go-webdav/carddav"

	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/skills"
)

// The test server is go-webdav's real CardDAV handler over an in-memory, read-only
// backend; address books are named as Nextcloud names those shared with the bot.
const (
	testPrefix    = "/remote.php/dav"
	testPrincipal = testPrefix + "/bot/"
	testHome      = testPrefix + "/bot/addressbooks/"
	testUser      = "bot"
	testPassword  = "app-password-456"
)

type memBooks struct {
	mu    sync.Mutex
	books map[string]carddav.AddressBook
	cards map[string]vcard.Card // by object path
}

var errReadOnly = webdav.NewHTTPError(http.StatusForbidden, errors.New("read-only"))

func (b *memBooks) addBook(t *testing.T, id, name string, cards ...string) string {
	t.Helper()
	p := testHome + id + "/"
	b.mu.Lock()
	defer b.mu.Unlock()
	b.books[p] = carddav.AddressBook{Path: p, Name: name}
	for i, c := range cards {
		card, err := vcard.NewDecoder(strings.NewReader(strings.ReplaceAll(c, "\n", "\r\n"))).Decode()
		if err != nil {
			t.Fatalf("card %d of %s: %v", i, id, err)
		}
		b.cards[p+card.Value(vcard.FieldUID)+".vcf"] = card
	}
	return p
}

func (b *memBooks) CurrentUserPrincipal(context.Context) (string, error)   { return testPrincipal, nil }
func (b *memBooks) AddressBookHomeSetPath(context.Context) (string, error) { return testHome, nil }
func (b *memBooks) CreateAddressBook(context.Context, *carddav.AddressBook) error {
	return errReadOnly
}
func (b *memBooks) DeleteAddressBook(context.Context, string) error   { return errReadOnly }
func (b *memBooks) DeleteAddressObject(context.Context, string) error { return errReadOnly }
func (b *memBooks) PutAddressObject(context.Context, string, vcard.Card, *carddav.PutAddressObjectOptions) (*carddav.AddressObject, error) {
	return nil, errReadOnly
}

func (b *memBooks) ListAddressBooks(context.Context) ([]carddav.AddressBook, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []carddav.AddressBook
	for _, bk := range b.books {
		out = append(out, bk)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func (b *memBooks) GetAddressBook(_ context.Context, p string) (*carddav.AddressBook, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bk, ok := b.books[strings.TrimSuffix(p, "/")+"/"]
	if !ok {
		return nil, webdav.NewHTTPError(http.StatusNotFound, errors.New("no such address book"))
	}
	return &bk, nil
}

func (b *memBooks) GetAddressObject(_ context.Context, p string, _ *carddav.AddressDataRequest) (*carddav.AddressObject, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.cards[p]
	if !ok {
		return nil, webdav.NewHTTPError(http.StatusNotFound, errors.New("no such card"))
	}
	return &carddav.AddressObject{Path: p, ETag: "e-" + path.Base(p), Card: c}, nil
}

func (b *memBooks) ListAddressObjects(_ context.Context, p string, _ *carddav.AddressDataRequest) ([]carddav.AddressObject, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p = strings.TrimSuffix(p, "/") + "/"
	if _, ok := b.books[p]; !ok {
		return nil, webdav.NewHTTPError(http.StatusNotFound, errors.New("no such address book"))
	}
	var out []carddav.AddressObject
	for op, c := range b.cards {
		if path.Dir(op)+"/" == p {
			out = append(out, carddav.AddressObject{Path: op, ETag: "e-" + path.Base(op), Card: c})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func (b *memBooks) QueryAddressObjects(ctx context.Context, p string, q *carddav.AddressBookQuery) ([]carddav.AddressObject, error) {
	all, err := b.ListAddressObjects(ctx, p, &q.DataRequest)
	if err != nil {
		return nil, err
	}
	return carddav.Filter(q, all)
}

func card(uid string, lines ...string) string {
	return "BEGIN:VCARD\nVERSION:3.0\nUID:" + uid + "\n" + strings.Join(lines, "\n") + "\nEND:VCARD\n"
}

type fixture struct {
	endpoint string
	c        *Client
	run      func(user string, args ...string) skills.Result
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	b := &memBooks{books: map[string]carddav.AddressBook{}, cards: map[string]vcard.Card{}}
	b.addBook(t, "contacts_shared_by_alice", "Contacts",
		card("ann", "FN:Ann Archer", "N:Archer;Ann;;;", "EMAIL;TYPE=work:ann@archer.example", "TEL;TYPE=cell:+49 170 123-4567",
			"ORG:Archery Ltd;Bows", "ADR;TYPE=home:;;1 Target Rd;Bullseye;;12345;UK", "NOTE:Met at the fair"),
		card("carl", "FN:Carl Cooper", "EMAIL:carl@cooper.example", "NICKNAME:Coop"),
		card("noname", "N:Doe;Dana;;;", "FN:", "TEL:(030) 555 0100"))
	b.addBook(t, "clients_shared_by_alice", "Clients", card("zed", "FN:Zed Zimmer", "ORG:Zimmer & Co"))
	// Bob's book has the display name of alice's, and someone alice might look for.
	b.addBook(t, "contacts_shared_by_bob", "Contacts",
		card("bob-secret", "FN:Ann Bobsfriend [bob]", "EMAIL:ann@secret.example", "TEL:+49 170 123 9999"))
	// The server's system address book (every account) and the bot's own book belong
	// to no user and must never be searched.
	b.addBook(t, "z-server-generated--system", "System", card("sys-alice", "FN:Ann System [system]", "EMAIL:ann@system.example"))
	b.addBook(t, "contacts", "Bot's contacts", card("bot-own", "FN:Ann Bot [bot]"))

	h := &carddav.Handler{Backend: b, Prefix: testPrefix}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != testUser || p != testPassword {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{Endpoint: srv.URL + testPrefix, Username: testUser, Password: testPassword})
	if err != nil {
		t.Fatal(err)
	}
	reg := skills.NewRegistry()
	if err := RegisterSkill(reg, c); err != nil {
		t.Fatal(err)
	}
	s, ok := reg.Lookup("contacts")
	if !ok {
		t.Fatal("contacts skill not registered")
	}
	return &fixture{endpoint: srv.URL + testPrefix, c: c, run: func(user string, args ...string) skills.Result {
		t.Helper()
		return s.Run(context.Background(), skills.Invocation{Args: args, UserID: user, TaskID: 1})
	}}
}

func TestAddressBooks(t *testing.T) {
	f := newFixture(t)
	books, err := f.c.AddressBooks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range books {
		got = append(got, b.ID+"|"+b.Owner)
	}
	want := "clients_shared_by_alice|alice,contacts|,contacts_shared_by_alice|alice,contacts_shared_by_bob|bob,z-server-generated--system|"
	if strings.Join(got, ",") != want {
		t.Errorf("address books = %v, want %s", got, want)
	}
	if _, err := New(Config{Endpoint: "ftp://x", Username: "bot"}); err == nil {
		t.Error("an ftp endpoint was accepted")
	}
	if _, err := New(Config{Endpoint: "https://x/"}); err == nil {
		t.Error("no username was accepted")
	}
	wrong, err := New(Config{Endpoint: f.endpoint, Username: testUser, Password: "wrong-secret"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.AddressBooks(context.Background()); err == nil || strings.Contains(err.Error(), "wrong-secret") {
		t.Errorf("a wrong password: %v", err)
	}
}

func TestContactsSkill(t *testing.T) {
	f := newFixture(t)
	foreign := []string{"[bob]", "[system]", "[bot]", "secret.example"}
	noForeign := func(t *testing.T, what string, r skills.Result) {
		t.Helper()
		for _, m := range foreign {
			if strings.Contains(string(r.Stdout)+string(r.Stderr), m) {
				t.Errorf("%s shows %s: %q %q", what, m, r.Stdout, r.Stderr)
			}
		}
	}

	t.Run("books", func(t *testing.T) {
		r := f.run("alice", "books")
		if r.ExitCode != 0 || string(r.Stdout) != "clients_shared_by_alice\tClients\ncontacts_shared_by_alice\tContacts\n" {
			t.Errorf("exit %d, out %q, err %q", r.ExitCode, r.Stdout, r.Stderr)
		}
		if r := f.run("carol", "books"); r.ExitCode != 0 || !strings.Contains(string(r.Stdout), "no address books") {
			t.Errorf("carol: exit %d, out %q", r.ExitCode, r.Stdout)
		}
	})

	t.Run("search", func(t *testing.T) {
		for _, tc := range []struct{ q, want string }{
			{"ann", "ann"},            // name, case-insensitive
			{"ARCHER.EXAMPLE", "ann"}, // e-mail
			{"archery", "ann"},        // organisation
			{"1701234567", "ann"},     // phone digits, formatting ignored
			{"+49 170 123-45", "ann"}, // phone as typed
			{"coop", "carl"},          // nickname and e-mail
			{"dana", "noname"},        // no FN: the name from N
			{"030 555", "noname"},     // phone with brackets
			{"zimmer", "zed"},         // the other book
			{"nobody-like-this", ""},  // nothing
			{"170", "ann"},            // three digits are a phone query; bob's and the system's never
		} {
			r := f.run("alice", "search", tc.q, "--json")
			var got []Contact
			if err := json.Unmarshal(r.Stdout, &got); r.ExitCode != 0 || err != nil {
				t.Fatalf("%q: exit %d, %v, err %q", tc.q, r.ExitCode, err, r.Stderr)
			}
			var uids []string
			for _, c := range got {
				uids = append(uids, c.UID)
			}
			if strings.Join(uids, ",") != tc.want {
				t.Errorf("search %q = %v, want %s", tc.q, uids, tc.want)
			}
			noForeign(t, "search "+tc.q, r)
		}
		r := f.run("alice", "search", "ann")
		out := string(r.Stdout)
		if r.ExitCode != 0 || !strings.Contains(out, "Ann Archer\n  book: contacts_shared_by_alice  uid: ann") ||
			!strings.Contains(out, "e-mail: ann@archer.example (work)") || !strings.Contains(out, "phone: +49 170 123-4567 (cell)") ||
			!strings.Contains(out, "organisation: Archery Ltd, Bows") {
			t.Errorf("text output: %q", out)
		}
		noForeign(t, "search ann", r)
		// Bob's book has the same display name: by name alice still searches only hers.
		r = f.run("alice", "search", "ann", "--book", "contacts")
		if !strings.Contains(string(r.Stdout), "Ann Archer") {
			t.Errorf("--book Contacts: %q %q", r.Stdout, r.Stderr)
		}
		noForeign(t, "search --book", r)
		r = f.run("alice", "search", "zzz-none")
		if r.ExitCode != 0 || !strings.Contains(string(r.Stdout), `no contact matches "zzz-none"`) {
			t.Errorf("no match: %q", r.Stdout)
		}
		// Bob finds his own.
		if r := f.run("bob", "search", "ann"); !strings.Contains(string(r.Stdout), "[bob]") || strings.Contains(string(r.Stdout), "Archer") {
			t.Errorf("bob's search: %q", r.Stdout)
		}
	})

	t.Run("show", func(t *testing.T) {
		r := f.run("alice", "show", "ann")
		out := string(r.Stdout)
		if r.ExitCode != 0 || !strings.Contains(out, "address: 1 Target Rd, 12345 Bullseye, UK (home)") || !strings.Contains(out, "note: Met at the fair") {
			t.Errorf("show: exit %d, out %q, err %q", r.ExitCode, out, r.Stderr)
		}
		for _, uid := range []string{"bob-secret", "sys-alice", "bot-own", "nope"} {
			r := f.run("alice", "show", uid)
			if r.ExitCode != 1 || string(r.Stderr) != `contacts: no contact "`+uid+`" in your address books`+"\n" {
				t.Errorf("show %s: exit %d, out %q, err %q", uid, r.ExitCode, r.Stdout, r.Stderr)
			}
		}
	})

	t.Run("refusals and bad input", func(t *testing.T) {
		a := f.run("alice", "search", "ann", "--book", "contacts_shared_by_bob")
		b := f.run("alice", "search", "ann", "--book", "no_such_book")
		if a.ExitCode != 1 || strings.ReplaceAll(string(a.Stderr), "contacts_shared_by_bob", "X") != strings.ReplaceAll(string(b.Stderr), "no_such_book", "X") {
			t.Errorf("bob's book is told apart: %q vs %q", a.Stderr, b.Stderr)
		}
		for _, book := range []string{"z-server-generated--system", "System", "Bot's contacts"} {
			if r := f.run("alice", "search", "ann", "--book", book); r.ExitCode != 1 || !strings.Contains(string(r.Stderr), "is not one of the address books you shared") {
				t.Errorf("--book %s: exit %d, out %q, err %q", book, r.ExitCode, r.Stdout, r.Stderr)
			}
		}
		for _, tc := range []struct {
			args []string
			want string
		}{
			{nil, "usage:"},
			{[]string{"add", "--name", "x"}, `unknown subcommand "add" (the skill is read-only)`},
			{[]string{"search"}, "usage: istota skill contacts search"},
			{[]string{"search", "  "}, "usage: istota skill contacts search"},
			{[]string{"search", "ann", "archer"}, "quote a QUERY of several words"},
			{[]string{"search", strings.Repeat("a", 201)}, "longer than 200 characters"},
			{[]string{"show"}, "usage: istota skill contacts show"},
			{[]string{"books", "extra"}, "usage: istota skill contacts books"},
			{[]string{"search", "ann", "--bogus"}, "usage: istota skill contacts search"},
		} {
			r := f.run("alice", tc.args...)
			if r.ExitCode != 2 || !strings.Contains(string(r.Stderr), tc.want) {
				t.Errorf("%v: exit %d, err %q, want %q", tc.args, r.ExitCode, r.Stderr, tc.want)
			}
		}
		if r := f.run("", "books"); r.ExitCode != 1 || !strings.Contains(string(r.Stderr), "no user") {
			t.Errorf("no user: exit %d, err %q", r.ExitCode, r.Stderr)
		}
	})
}

func TestContactsTier(t *testing.T) {
	reg := skills.NewRegistry()
	c, err := New(Config{Endpoint: "https://cloud.example/remote.php/dav/", Username: "bot"})
	if err != nil {
		t.Fatal(err)
	}
	if err := RegisterSkill(reg, c); err != nil {
		t.Fatal(err)
	}
	s, _ := reg.Lookup("contacts")
	for _, args := range [][]string{{"books"}, {"search", "ann"}, {"show", "x"}, {"add"}} {
		if a := s.Manifest.Classify(context.Background(), skills.Invocation{Args: args}); a.Tier != approval.TierRead {
			t.Errorf("%v: tier %v", args, a.Tier)
		}
	}
	if err := RegisterSkill(reg, nil); err == nil {
		t.Error("registered without a client")
	}
}

func TestMatches(t *testing.T) {
	ct := Contact{Name: "Bo Li", Phones: []string{"+1 (555) 010-2030"}}
	for q, want := range map[string]bool{"bo": true, "LI": true, "5550102030": true, "(555) 010": true, "b0b123": false, "": false, "  ": false, "12": false} {
		if got := Matches(ct, q); got != want {
			t.Errorf("Matches(%q) = %t, want %t", q, got, want)
		}
	}
}
