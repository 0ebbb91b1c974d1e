package davshare

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestNewAndForUser(t *testing.T) {
	cols := []Collection{
		New("/dav/calendars/bot/personal_shared_by_alice", "Personal (Alice)"),
		New("/dav/calendars/bot/work%20list_shared_by_alice/", "Work"),
		New("/dav/calendars/bot/personal_shared_by_bob/", "Personal (Alice)"),
		New("/dav/addressbooks/users/bot/z-server-generated--system/", "System"),
		New("/dav/calendars/bot/_shared_by_mallory/", "no uri"),
	}
	if c := cols[0]; c.Path != "/dav/calendars/bot/personal_shared_by_alice/" || c.ID != "personal_shared_by_alice" || c.Owner != "alice" {
		t.Errorf("first: %+v", c)
	}
	if c := cols[1]; c.ID != "work list_shared_by_alice" || c.Owner != "alice" {
		t.Errorf("escaped: %+v", c)
	}
	if cols[3].Owner != "" || cols[4].Owner != "" {
		t.Errorf("owners of unshared collections: %q %q", cols[3].Owner, cols[4].Owner)
	}
	var ids []string
	for _, c := range ForUser(cols, "alice") {
		ids = append(ids, c.ID)
	}
	if strings.Join(ids, ",") != "personal_shared_by_alice,work list_shared_by_alice" {
		t.Errorf("alice's: %v", ids)
	}
	if got := ForUser(cols, ""); len(got) != 0 {
		t.Errorf("no user: %v", got)
	}

	// Pick: by id or display name, only among the given (the user's) collections.
	mine := ForUser(cols, "alice")
	if got, err := Pick(mine, "personal (alice)", "calendars", "calendar list-calendars", "bot"); err != nil || len(got) != 1 || got[0].Owner != "alice" {
		t.Errorf("by name: %v %v", got, err)
	}
	_, errBob := Pick(mine, "personal_shared_by_bob", "calendars", "calendar list-calendars", "bot")
	_, errNone := Pick(mine, "nothing", "calendars", "calendar list-calendars", "bot")
	if errBob == nil || strings.ReplaceAll(errBob.Error(), "personal_shared_by_bob", "X") != strings.ReplaceAll(errNone.Error(), "nothing", "X") {
		t.Errorf("bob's told apart: %v / %v", errBob, errNone)
	}
	twice := append(mine, New("/dav/calendars/bot/other_shared_by_alice/", "Work"))
	if _, err := Pick(twice, "work", "calendars", "calendar list-calendars", "bot"); err == nil || !strings.Contains(err.Error(), "names several") {
		t.Errorf("ambiguous: %v", err)
	}
	if got, err := Pick(mine, "", "calendars", "x", "bot"); err != nil || len(got) != 2 {
		t.Errorf("all: %v %v", got, err)
	}
}

func TestLoginOpen(t *testing.T) {
	c, err := Login{Endpoint: "https://cloud.example/remote.php/dav", Username: "bot"}.Open("test")
	if err != nil || c.Endpoint.String() != "https://cloud.example/remote.php/dav/" || c.HTTP == nil || c.Auth == nil || c.Log == nil {
		t.Fatalf("%+v %v", c, err)
	}
	for _, l := range []Login{{Endpoint: "ftp://x/", Username: "bot"}, {Endpoint: "https:///dav", Username: "bot"}, {Endpoint: "https://x/"}} {
		if _, err := l.Open("test"); err == nil || !strings.HasPrefix(err.Error(), "test: ") {
			t.Errorf("%+v: %v", l, err)
		}
	}
}

func TestHome(t *testing.T) {
	var h Home
	calls := 0
	find := func(context.Context) (string, error) {
		calls++
		if calls == 1 {
			return "", errors.New("server down")
		}
		return "/dav/calendars/bot", nil
	}
	if _, err := h.Get(context.Background(), find); err == nil {
		t.Fatal("a failed discovery was remembered as a home")
	}
	for range 2 {
		if p, err := h.Get(context.Background(), find); err != nil || p != "/dav/calendars/bot/" {
			t.Fatalf("%q %v", p, err)
		}
	}
	if calls != 2 {
		t.Errorf("discovered %d times, want 2", calls)
	}
	var fixed Home
	fixed.Set("/configured")
	if p, _ := fixed.Get(context.Background(), func(context.Context) (string, error) { t.Fatal("discovered a configured home"); return "", nil }); p != "/configured/" {
		t.Errorf("configured: %q", p)
	}
}
