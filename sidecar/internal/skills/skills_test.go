package skills

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/kv"
	"github.com/istota/istota/sidecar/internal/store"
)

func openDB(t *testing.T) *store.DB {
	t.Helper()
	db, err := testDBs.OpenPath(context.Background(), filepath.Join(t.TempDir(), "skills.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func noop(context.Context, Invocation) Result { return Result{} }

func TestNameLengths(t *testing.T) {
	// The bounds the patterns once held themselves ({0,63}, {0,127}).
	if !ValidName(strings.Repeat("a", 64)) || ValidName(strings.Repeat("a", 65)) {
		t.Error("skill names: want at most 64 characters")
	}
	if !validEnvName(strings.Repeat("A", 128)) || validEnvName(strings.Repeat("A", 129)) {
		t.Error("environment names: want at most 128 characters")
	}
	if ValidateCredentialName(strings.Repeat("a", 64)) != nil || ValidateCredentialName(strings.Repeat("a", 65)) == nil {
		t.Error("credential names: want at most 64 characters")
	}
}

func TestRegister(t *testing.T) {
	ok := Skill{Manifest: Manifest{Name: "email", Summary: "send mail", Env: []EnvVar{
		{Name: "SMTP_PASSWORD", Sensitive: true, Credential: "smtp-password"},
		{Name: "SMTP_HOST"},
	}}, Run: noop}
	for _, tc := range []struct {
		name string
		mod  func(*Skill)
		want string
	}{
		{"bad name", func(s *Skill) { s.Name = "Email!" }, "name must match"},
		{"no run", func(s *Skill) { s.Run = nil }, "no Run"},
		{"no summary", func(s *Skill) { s.Summary = " " }, "no summary"},
		{"bad env name", func(s *Skill) { s.Env = []EnvVar{{Name: "lower"}} }, "name must match"},
		{"env twice", func(s *Skill) { s.Env = append(s.Env, EnvVar{Name: "SMTP_HOST"}) }, "declared twice"},
		{"sensitive without credential", func(s *Skill) { s.Env = []EnvVar{{Name: "TOKEN", Sensitive: true}} }, "names no credential"},
		{"bad credential name", func(s *Skill) { s.Env = []EnvVar{{Name: "TOKEN", Credential: "../x"}} }, "credential name"},
		{"name too long", func(s *Skill) { s.Name = strings.Repeat("a", 65) }, "at most 64"},
		{"env name too long", func(s *Skill) { s.Env = []EnvVar{{Name: strings.Repeat("A", 129)}} }, "at most 128"},
		{"credential name too long", func(s *Skill) { s.Env = []EnvVar{{Name: "TOKEN", Credential: strings.Repeat("a", 65)}} }, "at most 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			s.Env = append([]EnvVar(nil), ok.Env...)
			tc.mod(&s)
			err := NewRegistry().Register(s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Register: %v, want %q", err, tc.want)
			}
		})
	}
	r := NewRegistry()
	if err := r.Register(ok); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(ok); err == nil {
		t.Error("registering a name twice succeeded")
	}
	if err := r.Register(Skill{Manifest: Manifest{Name: "admin-tool", Summary: "x", AdminOnly: true}, Run: noop}); err != nil {
		t.Fatal(err)
	}
	got, found := r.Lookup("email")
	if !found || got.Env[0].Credential != "smtp-password" {
		t.Fatalf("Lookup = %+v, %v", got, found)
	}
	if _, found := r.Lookup("nope"); found {
		t.Error("Lookup of an unknown name succeeded")
	}
	if names := skillNames(r.List()); names != "admin-tool,email" {
		t.Errorf("List = %s", names)
	}
	if names := skillNames(r.Available(false)); names != "email" {
		t.Errorf("Available(non-admin) = %s", names)
	}
	if names := skillNames(r.Available(true)); names != "admin-tool,email" {
		t.Errorf("Available(admin) = %s", names)
	}
}

func skillNames(ss []Skill) string {
	var n []string
	for _, s := range ss {
		n = append(n, s.Name)
	}
	return strings.Join(n, ",")
}

func TestCredentials(t *testing.T) {
	ctx := context.Background()
	c := newTestCredentials(t, openDB(t))
	if err := c.Set(ctx, "alice", "github-token", "ghp_alice"); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "alice", "github-token", "ghp_alice2"); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "alice", "caldav", "pw"); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "bob", "github-token", "ghp_bob"); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "alice", "github-token"); err != nil || v != "ghp_alice2" {
		t.Errorf("Get = %q, %v", v, err)
	}
	if v, _ := c.Get(ctx, "bob", "github-token"); v != "ghp_bob" {
		t.Errorf("bob's token = %q", v)
	}
	infos, err := c.Names(ctx, "alice")
	if err != nil || len(infos) != 2 || infos[0].Name != "caldav" || infos[1].Name != "github-token" || infos[0].UpdatedAt.IsZero() {
		t.Fatalf("Names = %+v, %v", infos, err)
	}
	if err := c.Delete(ctx, "alice", "github-token"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "alice", "github-token"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get after Delete: %v", err)
	}
	if err := c.Delete(ctx, "alice", "github-token"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second Delete: %v", err)
	}
	if _, err := c.Get(ctx, "bob", "github-token"); err != nil {
		t.Errorf("bob lost his token: %v", err)
	}

	const secret = "s3cret-value"
	for _, tc := range []struct{ name, cred, value string }{
		{"bad name", "Bad Name", secret},
		{"empty value", "ok", ""},
		{"too long", "ok", strings.Repeat("x", MaxCredentialBytes+1)},
		{"NUL", "ok", secret + "\x00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Set(ctx, "alice", tc.cred, tc.value)
			if !errors.Is(err, ErrInvalidCredential) {
				t.Fatalf("Set: %v, want ErrInvalidCredential", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows the value: %v", err)
			}
		})
	}
}

func TestBuiltins(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	kvs := kv.New(db, func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) })
	creds := newTestCredentials(t, db)
	r := NewRegistry()
	if err := RegisterBuiltins(r, kvs, creds); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(Skill{Manifest: Manifest{Name: "github", Summary: "use GitHub", Usage: "github issues REPO\nNeeds a token.",
		Env: []EnvVar{{Name: "GITHUB_TOKEN", Sensitive: true, Credential: "github-token"}}}, Run: noop}); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(Skill{Manifest: Manifest{Name: "shell", Summary: "admin shell", AdminOnly: true}, Run: noop}); err != nil {
		t.Fatal(err)
	}
	call := func(name string, inv Invocation) Result {
		t.Helper()
		s, ok := r.Lookup(name)
		if !ok {
			t.Fatalf("no skill %s", name)
		}
		if inv.UserID == "" {
			inv.UserID = "alice"
		}
		return s.Run(ctx, inv)
	}

	if res := call("whoami", Invocation{UserID: "alice", TaskID: 42, IsAdmin: true}); string(res.Stdout) != "user_id=alice\ntask_id=42\nadmin=true\n" || res.ExitCode != 0 {
		t.Errorf("whoami = %+v", res)
	}
	if res := call("whoami", Invocation{Args: []string{"x"}}); res.ExitCode != 2 {
		t.Errorf("whoami with an argument exited %d", res.ExitCode)
	}

	for _, tc := range []struct {
		name     string
		user     string
		args     []string
		stdin    string
		code     int
		stdout   string
		inStderr string
	}{
		{"set", "alice", []string{"set", "notes", "todo", "buy milk"}, "", 0, "", ""},
		{"set from stdin", "alice", []string{"set", "notes", "long"}, "line 1\nline 2\n", 0, "", ""},
		{"set without value", "alice", []string{"set", "notes", "x"}, "", 2, "", "no value"},
		{"get", "alice", []string{"get", "notes", "todo"}, "", 0, "buy milk", ""},
		{"get from stdin", "alice", []string{"get", "notes", "long"}, "", 0, "line 1\nline 2\n", ""},
		{"other user cannot see it", "bob", []string{"get", "notes", "todo"}, "", 1, "", "no such key"},
		{"list namespaces", "alice", []string{"list"}, "", 0, "notes\n", ""},
		{"list namespace", "alice", []string{"list", "notes"}, "", 0, "{\n  \"long\": \"line 1\\nline 2\\n\",\n  \"todo\": \"buy milk\"\n}\n", ""},
		{"invalid namespace", "alice", []string{"get", "a/b", "k"}, "", 2, "", "invalid namespace"},
		{"delete", "alice", []string{"delete", "notes", "todo"}, "", 0, "", ""},
		{"get deleted", "alice", []string{"get", "notes", "todo"}, "", 1, "", "no such key"},
		{"delete missing", "alice", []string{"delete", "notes", "todo"}, "", 1, "", "no such key"},
		{"unknown subcommand", "alice", []string{"frob"}, "", 2, "", "usage"},
		{"no subcommand", "alice", nil, "", 2, "", "usage"},
	} {
		t.Run("kv "+tc.name, func(t *testing.T) {
			res := call("kv", Invocation{UserID: tc.user, Args: tc.args, Stdin: []byte(tc.stdin)})
			if res.ExitCode != tc.code || string(res.Stdout) != tc.stdout || !strings.Contains(string(res.Stderr), tc.inStderr) {
				t.Fatalf("got exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
			}
			if res.Err != nil {
				t.Errorf("internal error: %v", res.Err)
			}
		})
	}

	res := call("skills", Invocation{UserID: "alice"})
	out := string(res.Stdout)
	for _, want := range []string{"github — use GitHub", "not set up: needs the credential(s) github-token", "istota skill github issues REPO", "    Needs a token.",
		"istota skill kv get NAMESPACE KEY", "whoami — ", "skills — "} {
		if !strings.Contains(out, want) {
			t.Errorf("skills output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "shell") {
		t.Errorf("a non-admin sees the admin-only skill:\n%s", out)
	}
	if err := creds.Set(ctx, "alice", "github-token", "ghp_x"); err != nil {
		t.Fatal(err)
	}
	res = call("skills", Invocation{UserID: "alice", IsAdmin: true, Args: []string{"github"}})
	if out := string(res.Stdout); strings.Contains(out, "not set up") || !strings.HasPrefix(out, "github — ") || strings.Contains(out, "ghp_x") {
		t.Errorf("skills github for a user with the token:\n%s", out)
	}
	if res := call("skills", Invocation{UserID: "alice", IsAdmin: true}); !strings.Contains(string(res.Stdout), "shell — admin shell") {
		t.Errorf("an admin does not see the admin-only skill:\n%s", res.Stdout)
	}
	if res := call("skills", Invocation{UserID: "alice", Args: []string{"shell"}}); res.ExitCode != 1 {
		t.Errorf("skills shell for a non-admin exited %d: %s", res.ExitCode, res.Stdout)
	}
}
