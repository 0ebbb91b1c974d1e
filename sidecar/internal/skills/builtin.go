package skills

import (
	"context"
	"errors"
	"fmt"
	"github.com/istota/istota/sidecar/internal/approval"
	"strconv"
	"strings"

	"github.com/istota/istota/sidecar/internal/kv"
	"github.com/istota/istota/sidecar/internal/store"
)

// RegisterBuiltins registers the skills every sidecar offers: whoami, kv and skills.
func RegisterBuiltins(r *Registry, kvs *kv.Store, creds *Credentials) error {
	return errors.Join(
		r.Register(Whoami()),
		r.Register(KV(kvs)),
		r.Register(List(r, creds)),
	)
}

// readOnly classifies a skill that only reads.
func readOnly(context.Context, Invocation) approval.Action {
	return approval.Action{Tier: approval.TierRead}
}

// Whoami prints the identity the credential proxy bound to the calling sandbox, so the
// agent (and the tests) can see who the sidecar thinks is asking.
func Whoami() Skill {
	return Skill{
		Manifest: Manifest{
			Name:     "whoami",
			Summary:  "show the user and task this sandbox acts for",
			Usage:    "whoami",
			Classify: readOnly,
		},
		Run: func(_ context.Context, inv Invocation) Result {
			if len(inv.Args) != 0 {
				return Usagef("usage: istota skill whoami")
			}
			out := fmt.Sprintf("user_id=%s\ntask_id=%d\nadmin=%t\n", inv.UserID, inv.TaskID, inv.IsAdmin)
			return Result{Stdout: []byte(out)}
		},
	}
}

const kvUsage = `kv get NAMESPACE KEY           print the value
kv set NAMESPACE KEY [VALUE]   store VALUE, or standard input when VALUE is omitted
kv delete NAMESPACE KEY        remove the key
kv list                        print the namespaces that hold keys, one per line
kv list NAMESPACE              print the namespace as a JSON object {key: value}
Namespaces: letters, digits, '_', '-', '.', ':' (up to 64); keys up to 256 bytes; values up to 64 KiB.`

// KV reads and writes the calling user's own key-value store. Writes go straight to the
// store: they only touch the user's own entries, which the task's identity selects.
func KV(kvs *kv.Store) Skill {
	return Skill{
		Manifest: Manifest{
			Name:     "kv",
			Summary:  "keep small values between tasks in your own key-value store",
			Usage:    kvUsage,
			Classify: ReadVerbs("get", "list"),
			Load:     Load{Keywords: []string{"kv", "key value", "store", "keep", "save", "track"}},
		},
		Run: func(ctx context.Context, inv Invocation) Result {
			return runKV(ctx, kvs, inv)
		},
	}
}

func runKV(ctx context.Context, kvs *kv.Store, inv Invocation) Result {
	usage := func() Result { return Usagef("usage:\n%s", kvUsage) }
	if len(inv.Args) == 0 {
		return usage()
	}
	args := inv.Args[1:]
	fail := func(err error) Result {
		switch {
		case errors.Is(err, store.ErrNotFound):
			return Failf("kv: no such key")
		case errors.Is(err, kv.ErrInvalid):
			// The message names the rule broken and holds nothing but the agent's input.
			return Usagef("%v", err)
		}
		return Internal("the key-value store", err)
	}
	switch inv.Args[0] {
	case "get":
		if len(args) != 2 {
			return usage()
		}
		e, err := kvs.Get(ctx, inv.UserID, args[0], args[1])
		if err != nil {
			return fail(err)
		}
		return Result{Stdout: []byte(e.Value)}
	case "set":
		var value string
		switch len(args) {
		case 3:
			value = args[2]
		case 2:
			if len(inv.Stdin) == 0 {
				return Usagef("kv set: no value: give it as the third argument or on standard input")
			}
			value = string(inv.Stdin)
		default:
			return usage()
		}
		if err := kvs.Set(ctx, inv.UserID, args[0], args[1], value); err != nil {
			return fail(err)
		}
		return Result{}
	case "delete":
		if len(args) != 2 {
			return usage()
		}
		if err := kvs.Delete(ctx, inv.UserID, args[0], args[1]); err != nil {
			return fail(err)
		}
		return Result{}
	case "list":
		switch len(args) {
		case 0:
			names, err := kvs.Namespaces(ctx, inv.UserID)
			if err != nil {
				return fail(err)
			}
			var b strings.Builder
			for _, n := range names {
				b.WriteString(n + "\n")
			}
			return Result{Stdout: []byte(b.String())}
		case 1:
			entries, err := kvs.List(ctx, inv.UserID, args[0])
			if err != nil {
				return fail(err)
			}
			obj := make(map[string]string, len(entries))
			for _, e := range entries {
				obj[e.Key] = e.Value
			}
			return JSON(obj)
		}
		return usage()
	}
	return usage()
}

// List describes the skills the calling user may use, with their usage, and says which
// ones still need a credential the user has not stored.
func List(r *Registry, creds *Credentials) Skill {
	return Skill{
		Manifest: Manifest{
			Name:     "skills",
			Summary:  "list the skills you can use and how to call them",
			Usage:    "skills [NAME]   all skills, or only NAME",
			Classify: readOnly,
		},
		Run: func(ctx context.Context, inv Invocation) Result {
			if len(inv.Args) > 1 {
				return Usagef("usage: istota skill skills [NAME]")
			}
			have := map[string]bool{}
			if creds != nil {
				infos, err := creds.Names(ctx, inv.UserID)
				if err != nil {
					return Internal("the skill list", err)
				}
				for _, ci := range infos {
					have[ci.Name] = true
				}
			}
			var b strings.Builder
			n := 0
			for _, s := range r.Available(inv.IsAdmin) {
				if len(inv.Args) == 1 && s.Name != inv.Args[0] {
					continue
				}
				n++
				writeSkill(&b, s, have)
			}
			if n == 0 {
				if len(inv.Args) == 1 {
					return Failf("skills: no skill %s is available to you", strconv.Quote(inv.Args[0]))
				}
				return Result{Stdout: []byte("no skills are available\n")}
			}
			return Result{Stdout: []byte(b.String())}
		},
	}
}

func writeSkill(b *strings.Builder, s Skill, have map[string]bool) {
	fmt.Fprintf(b, "%s — %s\n", s.Name, s.Summary)
	var missing []string
	for _, v := range s.Env {
		if v.Sensitive && !have[v.Credential] {
			missing = append(missing, v.Credential)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(b, "  not set up: needs the credential(s) %s in your Istota settings\n", strings.Join(missing, ", "))
	}
	for _, line := range strings.Split(strings.TrimRight(s.Usage, "\n"), "\n") {
		switch {
		case line == s.Name || strings.HasPrefix(line, s.Name+" "):
			fmt.Fprintf(b, "  istota skill %s\n", line)
		case line != "":
			fmt.Fprintf(b, "    %s\n", line)
		}
	}
	b.WriteString("\n")
}
