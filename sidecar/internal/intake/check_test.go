package intake

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/heartbeat"
	"github.com/istota/istota/sidecar/internal/outbox"
)

// mapConfig is a heartbeat.ConfigSource over fixed files.
type mapConfig map[string]string // uid → HEARTBEAT.md

func (m mapConfig) Users(context.Context) ([]heartbeat.User, error) {
	var out []heartbeat.User
	for uid := range m {
		out = append(out, heartbeat.User{ID: uid, Timezone: "Europe/Berlin"})
	}
	return out, nil
}

func (m mapConfig) ReadConfig(_ context.Context, uid, name string) ([]byte, error) {
	if src, ok := m[uid]; ok && name == heartbeat.ConfigFile {
		return []byte(src), nil
	}
	return nil, fs.ErrNotExist
}

func TestCheckCommands(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	src := "```toml\n[[checks]]\nname = \"Health\"\nkind = \"self-check\"\n\n[[checks]]\nname = \"Off\"\nkind = \"self-check\"\nenabled = false\n\n[[checks]]\nname = \"Broken\"\nkind = \"nope\"\n```\n"
	r := heartbeat.New(f.db, mapConfig{"alice": src}, outbox.New(f.db, nopSender{}, outbox.Options{}),
		heartbeat.Options{Clock: func() time.Time { return now }})
	f.in.opts.Checks = r
	if err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	conv := private("priv0042")
	cases := []struct{ text, want string }{
		{"!check", "✅ **Health** — self-check, every 15m · last Sun 11:00: all parts are well: · next Sun 11:15"},
		{"!check run health", `Running "Health" now; its outcome follows here.`},
		{"!check Off", `Running "Off" now`},
		{"!check run nothing", `You have no check named "nothing"`},
		{"!check run", "Which check?"},
	}
	for i, c := range cases {
		f.handle(Payload{Event: event("Create", conv.Token, int64(100+i), "alice", c.text, 0), Sender: sender("alice"), Conversation: conv})
	}
	texts := f.outboxTexts()
	if len(texts) != len(cases) {
		t.Fatalf("answers = %q", texts)
	}
	for i, c := range cases {
		if !strings.Contains(texts[i], c.want) {
			t.Errorf("%s: %q, want %q", c.text, texts[i], c.want)
		}
	}
	for _, want := range []string{"⏸ **Off** — self-check, every 15m · off in HEARTBEAT.md", "Problems in HEARTBEAT.md:\n- line 13: kind:", "`!check run NAME`"} {
		if !strings.Contains(texts[0], want) {
			t.Errorf("the list lacks %q:\n%s", want, texts[0])
		}
	}

	// The runner answers each requested run where it was asked, as a reply.
	if err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := f.db.Read.Query(`SELECT token, reply_to, message FROM talk_outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type msg struct {
		token   string
		replyTo int64
		text    string
	}
	var got []msg
	for rows.Next() {
		var m msg
		if err := rows.Scan(&m.token, &m.replyTo, &m.text); err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	// Once alice wrote to the bot in private, the file's problem is told there too.
	var outcomes []msg
	problemNotices := 0
	for _, m := range got[len(cases):] {
		if strings.HasPrefix(m.text, "Your HEARTBEAT.md has problems") {
			problemNotices++
			continue
		}
		outcomes = append(outcomes, m)
	}
	if len(outcomes) != 2 || problemNotices != 1 {
		t.Fatalf("outcomes %+v, problem notices %d", outcomes, problemNotices)
	}
	byReply := map[int64]string{}
	for _, o := range outcomes {
		if o.token != conv.Token {
			t.Errorf("outcome in %q, want %q", o.token, conv.Token)
		}
		byReply[o.replyTo] = o.text
	}
	if !strings.Contains(byReply[101], "**Health** (self-check): ok") || !strings.Contains(byReply[102], "**Off** (self-check): ok") {
		t.Fatalf("outcomes by reply: %v", byReply)
	}

	// Elsewhere, and for another user, nothing is shown or run.
	f.handle(Payload{Event: event("Create", "group0001", 1, "alice", "!check", 0), Sender: sender("alice"), Conversation: group("group0001")})
	f.handle(Payload{Event: event("Create", "priv0043", 1, "bob", "!check run Health", 0), Sender: sender("bob"), Conversation: private("priv0043")})
	texts = f.outboxTexts()
	if !strings.Contains(texts[len(texts)-2], "only show your checks in our private conversation") {
		t.Errorf("group: %q", texts[len(texts)-2])
	}
	if !strings.Contains(texts[len(texts)-1], `no check named "Health"`) {
		t.Errorf("bob: %q", texts[len(texts)-1])
	}
}
