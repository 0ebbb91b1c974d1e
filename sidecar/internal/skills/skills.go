// Package skills defines what the agent can ask the sidecar to do for it: each skill
// is a subcommand of the istota binary ("istota skill <name> …") whose work runs
// outside the sandbox, in the sidecar, with exactly the credentials its manifest
// declares. Inside the sandbox the subcommand is only a client of the credential proxy
// (package credproxy); this package holds the skills themselves, their registry and the
// per-user credential store they draw from.
package skills

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/istota/istota/sidecar/internal/approval"
)

// EnvVar is one environment variable a skill declares.
type EnvVar struct {
	Name string
	// Sensitive marks a secret (token, password). A skill is refused with
	// credential_not_present when one of its sensitive variables has no value for the
	// user, and the proxy scrubs sensitive values from the skill's output.
	Sensitive bool
	// Credential names the user_credentials entry the value comes from. Empty means
	// non-secret configuration supplied by the sidecar (credproxy.Options.Settings).
	Credential string
}

// Manifest describes a skill: what it is for, how to call it, and what it may see.
type Manifest struct {
	Name    string // [a-z0-9][a-z0-9_-]*, the subcommand name
	Summary string // one line for the skill list
	// Usage is shown by "istota skill skills": lines that start with the name are
	// synopses (shown after "istota skill "), other lines are notes.
	Usage string
	Env   []EnvVar
	// AdminOnly skills are refused with not_authorized for users who are not admins,
	// and never shown to them.
	AdminOnly bool
	// Classify says what one call would do: its risk tier and a sentence naming exactly
	// what will happen, for the question to the user when the tier asks first. Nil means
	// the call changes only the user's own data (approval.TierWriteOwn). A call the skill
	// will refuse anyway (bad arguments) may be classified as approval.TierRead.
	Classify func(ctx context.Context, inv Invocation) approval.Action
	// Load says when the usage goes into the prompt up front (see Load).
	Load Load
}

// MaxStdin bounds the standard input a skill receives.
const MaxStdin = 1 << 20

// Invocation is one call of a skill. Identity fields come from the task the calling
// sandbox belongs to, never from the request.
type Invocation struct {
	Args    []string
	Stdin   []byte // at most MaxStdin bytes
	UserID  string
	TaskID  int64
	IsAdmin bool
	// Env holds only the variables the manifest declares that have a value for this
	// user. Skills read their credentials from here and nowhere else.
	Env map[string]string
}

// Result is what a skill returns to the caller, like a process would.
type Result struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
	// Err is an internal failure (database down, upstream unreachable) for the
	// sidecar's log. It never reaches the agent: say what failed on Stderr instead.
	Err error
}

// Skill is a manifest and its implementation. Run must return when ctx is done (the
// proxy bounds every call with a timeout) and must never write a credential to Stdout
// or Stderr.
type Skill struct {
	Manifest
	Run func(ctx context.Context, inv Invocation) Result
}

// Action classifies one call of s for approvals. An admin-only skill is never below
// the admin tier, whatever its Classify says.
func (s Skill) Action(ctx context.Context, inv Invocation) approval.Action {
	a := approval.Action{Tier: approval.TierWriteOwn}
	if s.Classify != nil {
		a = s.Classify(ctx, inv)
	}
	if s.AdminOnly {
		a.Tier = approval.TierAdmin
	}
	a.Kind, a.Name = "skill", s.Name
	if len(inv.Args) > 0 && ValidName(inv.Args[0]) {
		a.Name += " " + inv.Args[0]
	}
	if a.Summary == "" {
		a.Summary = "Run istota skill " + s.Name + " " + strings.Join(inv.Args, " ")
		if len(inv.Stdin) > 0 {
			a.Summary += fmt.Sprintf(" (with %d bytes of input)", len(inv.Stdin))
		}
	}
	if a.Input == nil {
		a.Input = CallInput(inv)
	}
	return a
}

// CallInput is what makes two calls of a skill the same action: arguments and stdin.
func CallInput(inv Invocation) []byte {
	b := []byte(strings.Join(inv.Args, "\x00"))
	b = append(b, 0, 0)
	return append(b, inv.Stdin...)
}

// Failf is a convenience for skills: a Result with exit code 1 and a message on Stderr.
func Failf(format string, args ...any) Result {
	msg := fmt.Sprintf(format, args...)
	if !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	return Result{ExitCode: 1, Stderr: []byte(msg)}
}

// Internal is a Result for an internal failure: err goes to the sidecar's log, the
// caller only learns that what failed is unavailable.
func Internal(what string, err error) Result {
	r := Failf("%s is unavailable right now; try again later", what)
	r.Err = err
	return r
}

// JSON is a Result whose Stdout is v as indented JSON (HTML characters left as they
// are), for the skills' --json output.
func JSON(v any) Result {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return Internal("the skill's JSON output", fmt.Errorf("encode JSON: %w", err))
	}
	return Result{Stdout: buf.Bytes()}
}

// Usagef is Failf with exit code 2, for wrong arguments.
func Usagef(format string, args ...any) Result {
	r := Failf(format, args...)
	r.ExitCode = 2
	return r
}

// Name patterns, their length bounds checked apart (the characters are ASCII, so bytes
// are characters): a bounded repetition such as {0,63} compiles into a program as long
// as its bound, and package variables are compiled at every start of the binary, which
// is also every sandbox's init and every skill call inside one.
var (
	nameRE       = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)  // at most maxNameLen
	envNameRE    = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)     // at most maxEnvNameLen
	credentialRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`) // at most maxNameLen
)

const (
	maxNameLen    = 64
	maxEnvNameLen = 128
)

// ValidName reports whether name can be a skill name.
func ValidName(name string) bool { return len(name) <= maxNameLen && nameRE.MatchString(name) }

func validEnvName(name string) bool {
	return len(name) <= maxEnvNameLen && envNameRE.MatchString(name)
}

func validCredentialName(name string) bool {
	return len(name) <= maxNameLen && credentialRE.MatchString(name)
}

// Registry holds the skills one sidecar offers. It is safe for concurrent use; skills
// are normally all registered at startup.
type Registry struct {
	mu     sync.RWMutex
	skills map[string]Skill
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{skills: map[string]Skill{}}
}

// Register adds s. It refuses an invalid manifest and a name already taken.
func (r *Registry) Register(s Skill) error {
	if err := validate(s); err != nil {
		return fmt.Errorf("skills: register %q: %w", s.Name, err)
	}
	m := s.Manifest
	m.Env = slices.Clone(m.Env)
	m.Load.Resources = slices.Clone(m.Load.Resources)
	m.Load.Needs = slices.Clone(m.Load.Needs)
	m.Load.Keywords = slices.Clone(m.Load.Keywords)
	s.Manifest = m
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.skills[s.Name]; ok {
		return fmt.Errorf("skills: register %q: name already registered", s.Name)
	}
	r.skills[s.Name] = s
	return nil
}

func validate(s Skill) error {
	if !ValidName(s.Name) {
		return fmt.Errorf("name must match %s and be at most %d characters", nameRE, maxNameLen)
	}
	if s.Run == nil {
		return fmt.Errorf("no Run function")
	}
	if strings.TrimSpace(s.Summary) == "" {
		return fmt.Errorf("no summary")
	}
	if err := s.Load.validate(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, v := range s.Env {
		switch {
		case !validEnvName(v.Name):
			return fmt.Errorf("environment variable %q: name must match %s and be at most %d characters", v.Name, envNameRE, maxEnvNameLen)
		case seen[v.Name]:
			return fmt.Errorf("environment variable %s declared twice", v.Name)
		case v.Sensitive && v.Credential == "":
			// A secret must come from the user's own credentials, so that it is only
			// ever handed out for the user it belongs to.
			return fmt.Errorf("environment variable %s is sensitive but names no credential", v.Name)
		case v.Credential != "" && !validCredentialName(v.Credential):
			return fmt.Errorf("environment variable %s: credential name %q must match %s and be at most %d characters", v.Name, v.Credential, credentialRE, maxNameLen)
		}
		seen[v.Name] = true
	}
	return nil
}

// Lookup returns the skill called name.
func (r *Registry) Lookup(name string) (Skill, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.skills[name]
	return s, ok
}

// List returns every skill, sorted by name.
func (r *Registry) List() []Skill {
	r.mu.RLock()
	out := make([]Skill, 0, len(r.skills))
	for _, s := range r.skills {
		out = append(out, s)
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b Skill) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Available returns the skills a user may call: all of them for an admin, the others
// without the admin-only ones.
func (r *Registry) Available(isAdmin bool) []Skill {
	all := r.List()
	if isAdmin {
		return all
	}
	return slices.DeleteFunc(all, func(s Skill) bool { return s.AdminOnly })
}

// ReadVerbs is a Classify for skills whose first argument is a verb: the verbs given
// only read (approval.TierRead), every other call changes the user's own data
// (approval.TierWriteOwn).
func ReadVerbs(verbs ...string) func(context.Context, Invocation) approval.Action {
	return func(_ context.Context, inv Invocation) approval.Action {
		if len(inv.Args) > 0 && slices.Contains(verbs, inv.Args[0]) {
			return approval.Action{Tier: approval.TierRead}
		}
		return approval.Action{Tier: approval.TierWriteOwn}
	}
}
