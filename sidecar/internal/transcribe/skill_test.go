package transcribe

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/istota/istota/sidecar/internal/skills"
)

func TestSkill(t *testing.T) {
	var f fakeSTT
	srv := f.server(t, 200, `{"text":"Meeting moved to Friday."}`)
	client, _ := New(Config{BaseURL: srv.URL + "/v1"})
	base := t.TempDir()
	alice := filepath.Join(base, "alice")
	os.MkdirAll(filepath.Join(alice, "inbox"), 0o700)
	os.WriteFile(filepath.Join(alice, "inbox", "memo.m4a"), []byte("m4a-audio"), 0o600)
	os.WriteFile(filepath.Join(alice, "inbox", "notes.txt"), []byte("text"), 0o600)
	os.MkdirAll(filepath.Join(base, "bob"), 0o700)
	os.WriteFile(filepath.Join(base, "bob", "secret.ogg"), []byte("bob-audio"), 0o600)
	os.Symlink(filepath.Join(base, "bob", "secret.ogg"), filepath.Join(alice, "inbox", "link.ogg"))
	root := func(uid string) (string, error) { return filepath.Join(base, uid), nil }

	reg := skills.NewRegistry()
	if err := RegisterSkill(reg, SkillOptions{Client: client, Root: root}); err != nil {
		t.Fatal(err)
	}
	sk, _ := reg.Lookup(SkillName)
	call := func(args ...string) skills.Result {
		return sk.Run(context.Background(), skills.Invocation{Args: args, UserID: "alice", TaskID: 1})
	}
	if r := call("/workspace/inbox/memo.m4a"); r.ExitCode != 0 || string(r.Stdout) != "Meeting moved to Friday.\n" || f.mime != "audio/mp4" || f.file != "m4a-audio" {
		t.Fatalf("transcribe: %d %q %q (service got %+v)", r.ExitCode, r.Stdout, r.Stderr, f)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage"},
		{[]string{"inbox/notes.txt"}, "not an audio or video file"},
		{[]string{"../bob/secret.ogg"}, "not a path in your workspace"},
		{[]string{"/srv/istota/users/bob/secret.ogg"}, "not a path in your workspace"},
		{[]string{"inbox/missing.ogg"}, "does not exist"},
		{[]string{"inbox/link.ogg"}, "cannot be opened"},
	} {
		r := call(tc.args...)
		if r.ExitCode == 0 || !strings.Contains(string(r.Stderr), tc.want) {
			t.Errorf("%v: %d %q, want an error saying %q", tc.args, r.ExitCode, r.Stderr, tc.want)
		}
	}
	if f.file != "m4a-audio" {
		t.Errorf("a refused call reached the service with %q", f.file)
	}

	none := skills.NewRegistry()
	RegisterSkill(none, SkillOptions{Root: root})
	sk, _ = none.Lookup(SkillName)
	r := sk.Run(context.Background(), skills.Invocation{Args: []string{"inbox/memo.m4a"}, UserID: "alice"})
	if r.ExitCode == 0 || !strings.Contains(string(r.Stderr), "no speech-to-text service is set up") {
		t.Errorf("without a service: %d %q", r.ExitCode, r.Stderr)
	}
}
