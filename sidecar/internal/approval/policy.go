// Package approval decides whether an agent's tool call or skill action may run: every
// action has a risk tier (read, write-own, external, admin), every tier a policy (allow,
// ask, deny) that the admin sets and a user may only make stricter, and an "ask" becomes
// a question to the user (in Talk and on the settings page) that the action waits for.
// Questions, answers and who gave them are kept in SQLite and in the audit log, so a
// restart keeps both the question and its answer.
package approval

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// Tier is how risky an action is.
type Tier string

// The tiers, least risky first.
const (
	// TierRead looks at the user's own data: files, memory, calendars.
	TierRead Tier = "read"
	// TierWriteOwn changes the user's own workspace.
	TierWriteOwn Tier = "write_own"
	// TierExternal reaches outside: sends mail, writes calendars, fetches from the web,
	// connects to a host of the allowlist the user has not approved before.
	TierExternal Tier = "external"
	// TierAdmin is anything beyond the user's own data (admin-only skills and commands).
	TierAdmin Tier = "admin"
)

// Tiers lists every tier, least risky first.
func Tiers() []Tier { return []Tier{TierRead, TierWriteOwn, TierExternal, TierAdmin} }

// Valid reports whether t is a known tier.
func (t Tier) Valid() bool {
	switch t {
	case TierRead, TierWriteOwn, TierExternal, TierAdmin:
		return true
	}
	return false
}

// Label names the tier for people.
func (t Tier) Label() string {
	switch t {
	case TierRead:
		return "read"
	case TierWriteOwn:
		return "change your files"
	case TierExternal:
		return "act outside (mail, calendars, web)"
	case TierAdmin:
		return "administration"
	}
	return string(t)
}

// Policy is what happens to an action of a tier.
type Policy string

// The policies, least strict first.
const (
	Allow Policy = "allow"
	Ask   Policy = "ask"
	Deny  Policy = "deny"
)

// Valid reports whether p is a known policy.
func (p Policy) Valid() bool { return p == Allow || p == Ask || p == Deny }

func (p Policy) strictness() int {
	switch p {
	case Allow:
		return 0
	case Ask:
		return 1
	default: // Deny, and anything unknown is treated as deny
		return 2
	}
}

// Stricter returns the stricter of p and q; an empty policy never wins.
func (p Policy) Stricter(q Policy) Policy {
	switch {
	case q == "":
		return p
	case p == "":
		return q
	case q.strictness() > p.strictness():
		return q
	}
	return p
}

// Policies holds one policy per tier.
type Policies struct {
	Read     Policy `json:"read"`
	WriteOwn Policy `json:"write_own"`
	External Policy `json:"external"`
	Admin    Policy `json:"admin"`
}

// DefaultPolicies are the admin defaults of a new installation: the agent reads and
// changes the user's own files freely and asks before anything leaves them.
func DefaultPolicies() Policies {
	return Policies{Read: Allow, WriteOwn: Allow, External: Ask, Admin: Ask}
}

// For returns the policy of tier t; an unknown tier gets the admin tier's.
func (p Policies) For(t Tier) Policy {
	switch t {
	case TierRead:
		return p.Read
	case TierWriteOwn:
		return p.WriteOwn
	case TierExternal:
		return p.External
	default:
		return p.Admin
	}
}

// Set changes the policy of tier t.
func (p *Policies) Set(t Tier, v Policy) {
	switch t {
	case TierRead:
		p.Read = v
	case TierWriteOwn:
		p.WriteOwn = v
	case TierExternal:
		p.External = v
	case TierAdmin:
		p.Admin = v
	}
}

// Tighten applies a user's choices over the admin's policies p: for each tier the
// stricter of the two. A user can never loosen what the admin set.
func (p Policies) Tighten(user Policies) Policies {
	out := p
	for _, t := range Tiers() {
		out.Set(t, p.For(t).Stricter(user.For(t)))
	}
	return out
}

// Validate checks that every tier has a known policy.
func (p Policies) Validate() error {
	var bad []string
	for _, t := range Tiers() {
		if !p.For(t).Valid() {
			bad = append(bad, fmt.Sprintf("%s: %q is not allow, ask or deny", t, p.For(t)))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("approval policies: %s", strings.Join(bad, "; "))
	}
	return nil
}

// Action is one thing an agent wants to do, as the user is asked about it.
type Action struct {
	Tier Tier
	// Kind is "skill" (istota skill …) or "tool" (a tool of the agent itself).
	Kind string
	// Name is short: "email send", "WebFetch".
	Name string
	// Summary says exactly what will happen, for the question to the user.
	Summary string
	// Input is everything that makes two calls the same action (arguments, stdin); it
	// is only hashed, never shown.
	Input []byte
	// Host is the network host the action reaches, if any (a fetched page's host). Once
	// the user approved it, the network proxy lets their tasks reach that host again
	// without asking (see CheckHost).
	Host string
}

// Claude Code's own tools, by tier. Tools not listed are external: an unknown tool may
// reach anywhere.
var claudeTools = map[string]Tier{
	"Read": TierRead, "Glob": TierRead, "Grep": TierRead, "LS": TierRead, "TodoWrite": TierRead,
	"NotebookRead": TierRead, "Task": TierRead, "Agent": TierRead, "ExitPlanMode": TierRead,
	"BashOutput": TierRead, "KillShell": TierRead, "KillBash": TierRead, "ToolSearch": TierRead,
	"Write": TierWriteOwn, "Edit": TierWriteOwn, "MultiEdit": TierWriteOwn, "NotebookEdit": TierWriteOwn,
	// Bash runs inside the user's sandbox, which holds only their workspace; what it can
	// reach beyond that goes through skills (checked on their own) or the host allowlist.
	"Bash":     TierWriteOwn,
	"WebFetch": TierExternal, "WebSearch": TierExternal,
}

// The OpenAI-compatible brain's tools.
var nativeTools = map[string]Tier{
	"read_file": TierRead, "write_file": TierWriteOwn, "bash": TierWriteOwn,
}

// ClassifyTool gives the tier of an agent's own tool call (Claude Code's or the native
// loop's) and a summary of what it does.
func ClassifyTool(name string, input json.RawMessage) Action {
	tier, ok := claudeTools[name]
	if !ok {
		if tier, ok = nativeTools[name]; !ok {
			tier = TierExternal
		}
	}
	return Action{Tier: tier, Kind: "tool", Name: name, Summary: toolSummary(name, input), Input: input, Host: toolHost(name, input)}
}

// toolHost is the host a web tool reaches: WebFetch's url.
func toolHost(name string, input json.RawMessage) string {
	if name != "WebFetch" {
		return ""
	}
	var args struct {
		URL string `json:"url"`
	}
	if json.Unmarshal(input, &args) != nil {
		return ""
	}
	u, err := url.Parse(args.URL)
	if err != nil {
		return ""
	}
	return NormalizeHost(u.Hostname())
}

// toolSummary describes a tool call from the fields that say what it touches.
func toolSummary(name string, input json.RawMessage) string {
	var args map[string]any
	_ = json.Unmarshal(input, &args)
	for _, k := range []string{"command", "url", "query", "file_path", "path", "notebook_path", "pattern"} {
		if v, ok := args[k].(string); ok && v != "" {
			return fmt.Sprintf("%s: %s", name, clip(oneLine(v), 300))
		}
	}
	return "Use the tool " + name
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
