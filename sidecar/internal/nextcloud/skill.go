// Package nextcloud is the nextcloud skill: the agent acts in Nextcloud as the user's
// delegate, on the user's own data only. "istota skill nextcloud share|shares|mkdir"
// share a file or folder of the user's own files with a user, a group or a link, list
// the user's shares and create folders; "conversations" and "post" list the user's Talk
// conversations and have the bot post into one the user is in.
//
// The skill runs in the sidecar (the credential proxy calls it, with the task's user),
// and the work is done inside Nextcloud by the Istota app (appcall: signed requests to
// lib/Service/NextcloudDelegate.php), as the user and under Nextcloud's own sharing
// rules; the app also checks the user owns the file and is a participant of the
// conversation. Posts go out as the bot through the Talk outbox. Every action, done or
// refused, is recorded in the audit log and in the task's events.
package nextcloud

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/appcall"
	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/outbox"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/talk"
)

// Name is the skill's name.
const Name = "nextcloud"

// EventKind is the task event kind of the skill's actions.
const EventKind = "nextcloud"

// auditComponent names the skill's actions in the audit log.
const auditComponent = "nextcloud"

// Bounds of one call.
const (
	maxPathBytes     = 4000
	maxNoteBytes     = 2000
	maxPasswordBytes = 200
)

const usage = `nextcloud share PATH --user UID [--edit] [--expires YYYY-MM-DD] [--note TEXT]
nextcloud share PATH --group GID [--edit] [--expires YYYY-MM-DD] [--note TEXT]
nextcloud share PATH --link [--generate-password | --password TEXT] [--expires YYYY-MM-DD] [--edit]
nextcloud shares [PATH] [--json]
nextcloud mkdir PATH
nextcloud conversations [--json]
nextcloud post TOKEN [MESSAGE]     without MESSAGE the message is read from standard input
PATH is a file or folder in the user's own Nextcloud files, from their home folder as the Files app shows it
(Documents/report.pdf); it is not a path in /workspace. Files other people shared with the user cannot be shared on.
Shares are read-only unless --edit. A link prints its URL. Prefer --generate-password: the sidecar makes a strong
password and prints it once (tell the user); a --password you type is visible in the task's log like any command.
post has the bot write MESSAGE into a conversation the user is in and the bot was added to (see conversations).
Sharing and posting ask the user first when approvals say so. Nextcloud's own sharing rules apply.`

// App is what the skill asks of the Istota app; *appcall.Client implements it.
type App interface {
	Share(ctx context.Context, req appcall.ShareRequest) (appcall.Share, error)
	Shares(ctx context.Context, user, path string) ([]appcall.Share, error)
	Mkdir(ctx context.Context, user, path string) (appcall.Folder, error)
	Conversations(ctx context.Context, user string) ([]appcall.Conversation, error)
	PostTarget(ctx context.Context, user, token string) (appcall.Conversation, error)
}

// Poster queues a bot message for Talk; *outbox.Outbox implements it.
type Poster interface {
	Enqueue(ctx context.Context, m outbox.Message) error
}

// Options configure the skill.
type Options struct {
	App    App    // required
	Poster Poster // required for post
	Events skills.EventLog
	Audit  *audit.Log
	Logger *slog.Logger
}

// Skill returns the nextcloud skill.
func Skill(opts Options) (skills.Skill, error) {
	if opts.App == nil || opts.Poster == nil {
		return skills.Skill{}, errors.New("nextcloud: the skill needs the app client and the Talk outbox")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Audit == nil {
		opts.Audit = audit.New(nil, opts.Logger, nil)
	}
	return skills.Skill{
		Manifest: skills.Manifest{
			Name:    Name,
			Summary: "share the user's files (with people, groups or links), list shares, create folders, post to the user's Talk conversations",
			Usage:   usage,
			Classify: func(ctx context.Context, inv skills.Invocation) approval.Action {
				return classifyWith(ctx, opts.App, inv)
			},
			Load: skills.Load{Keywords: []string{
				"share", "sharing", "link", "folder", "directory", "nextcloud", "files", "talk", "conversation", "post", "chat", "group",
			}},
		},
		Run: func(ctx context.Context, inv skills.Invocation) skills.Result {
			return run(ctx, opts, inv)
		},
	}, nil
}

// Register adds the nextcloud skill to reg.
func Register(reg *skills.Registry, opts Options) error {
	s, err := Skill(opts)
	if err != nil {
		return err
	}
	return reg.Register(s)
}

// call is one parsed invocation.
type call struct {
	verb string
	path string // share, shares, mkdir
	// share
	kind, with, expires, password, note string
	edit, generate                      bool
	// post
	token, message string
	json           bool
}

// tokenRE is Talk's conversation token.
var tokenRE = regexp.MustCompile(`^[a-z0-9]+$`)

// parse reads the arguments (flags anywhere, "--flag=value" or "--flag value") and
// checks what can be checked without Nextcloud.
func parse(args []string, stdin []byte) (call, error) {
	if len(args) == 0 {
		return call{}, errors.New("give a subcommand")
	}
	c := call{verb: args[0]}
	var operands []string
	var user, group string
	var link bool
	flags := map[string]*string{}
	bools := map[string]*bool{"--json": &c.json}
	switch c.verb {
	case "share":
		flags = map[string]*string{"--user": &user, "--group": &group, "--expires": &c.expires, "--password": &c.password, "--note": &c.note}
		bools = map[string]*bool{"--edit": &c.edit, "--link": &link, "--json": &c.json, "--generate-password": &c.generate}
	case "shares", "mkdir", "conversations", "post":
	default:
		return c, fmt.Errorf("unknown subcommand %q", c.verb)
	}
	rest := args[1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			operands = append(operands, rest[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "--") || a == "-" {
			operands = append(operands, a)
			continue
		}
		name, val, hasVal := strings.Cut(a, "=")
		if b, ok := bools[name]; ok && !hasVal {
			*b = true
			continue
		}
		p, ok := flags[name]
		if !ok {
			return c, fmt.Errorf("unknown option %q", name)
		}
		if !hasVal {
			if i+1 >= len(rest) {
				return c, fmt.Errorf("%s needs a value", name)
			}
			i++
			val = rest[i]
		}
		*p = val
	}
	switch c.verb {
	case "share":
		n := 0
		for _, set := range []bool{user != "", group != "", link} {
			if set {
				n++
			}
		}
		if n != 1 {
			return c, errors.New("share with exactly one of --user UID, --group GID or --link")
		}
		switch {
		case user != "":
			c.kind, c.with = "user", user
		case group != "":
			c.kind, c.with = "group", group
		default:
			c.kind = "link"
		}
		if len(operands) != 1 {
			return c, errors.New("give exactly one PATH to share")
		}
		c.path = operands[0]
		if err := checkPath(c.path, false); err != nil {
			return c, err
		}
		if (c.password != "" || c.generate) && (user != "" || group != "") {
			return c, errors.New("--password and --generate-password are for --link shares only")
		}
		if c.password != "" && c.generate {
			return c, errors.New("give --password or --generate-password, not both")
		}
		if len(c.password) > maxPasswordBytes {
			return c, fmt.Errorf("the password is longer than %d bytes", maxPasswordBytes)
		}
		if len(c.note) > maxNoteBytes {
			return c, fmt.Errorf("the note is longer than %d bytes", maxNoteBytes)
		}
		if c.expires != "" {
			d, err := time.Parse(time.DateOnly, c.expires)
			if err != nil || d.Format(time.DateOnly) != c.expires {
				return c, fmt.Errorf("--expires %q must be a date YYYY-MM-DD", c.expires)
			}
		}
	case "shares":
		if len(operands) > 1 {
			return c, errors.New("give at most one PATH")
		}
		if len(operands) == 1 {
			c.path = operands[0]
			if err := checkPath(c.path, true); err != nil {
				return c, err
			}
		}
	case "mkdir":
		if len(operands) != 1 || c.json {
			return c, errors.New("give exactly one PATH to create")
		}
		c.path = operands[0]
		if err := checkPath(c.path, false); err != nil {
			return c, err
		}
	case "conversations":
		if len(operands) != 0 {
			return c, errors.New("conversations takes no arguments")
		}
	case "post":
		if c.json || len(operands) < 1 || len(operands) > 2 {
			return c, errors.New("give the conversation TOKEN and the MESSAGE (or the message on standard input)")
		}
		c.token = operands[0]
		if len(c.token) < 4 || len(c.token) > 30 || !tokenRE.MatchString(c.token) {
			return c, fmt.Errorf("%q is not a conversation token (4 to 30 lowercase letters and digits; see: istota skill nextcloud conversations)", c.token)
		}
		if len(operands) == 2 {
			if len(stdin) > 0 {
				return c, errors.New("give the message as an argument or on standard input, not both")
			}
			c.message = operands[1]
		} else {
			c.message = string(stdin)
		}
		c.message = strings.TrimRight(c.message, "\n")
		switch {
		case strings.TrimSpace(c.message) == "":
			return c, errors.New("the message is empty")
		case !utf8.ValidString(c.message):
			return c, errors.New("the message is not UTF-8 text")
		case utf8.RuneCountInString(c.message) > talk.MaxMessageLength:
			return c, fmt.Errorf("the message is longer than Talk's %d characters", talk.MaxMessageLength)
		}
	}
	return c, nil
}

// checkPath refuses what can never name a file of the user's: "." and ".." parts,
// control characters, backslashes, overlong paths and (unless root is allowed) the home
// folder itself. The app checks again, and also that the file is the user's own.
func checkPath(p string, rootOK bool) error {
	if len(p) > maxPathBytes {
		return fmt.Errorf("the path is longer than %d bytes", maxPathBytes)
	}
	if !utf8.ValidString(p) || strings.ContainsFunc(p, func(r rune) bool { return unicode.IsControl(r) || r == '\\' }) {
		return fmt.Errorf("the path %q has control characters or backslashes", p)
	}
	empty := true
	for _, part := range strings.Split(p, "/") {
		switch {
		case part == "":
		case part == "." || part == "..":
			return fmt.Errorf("the path %q has a %q part: give it from the user's home folder without \".\" or \"..\"", p, part)
		default:
			empty = false
		}
	}
	if empty && !rootOK {
		return errors.New("give a file or folder below the user's home folder, not the home folder itself")
	}
	return nil
}

// classifyWith is classify, except that a post the app will refuse (the user is not in
// the conversation, or the bot is not) is not asked about: it is refused without a
// question. When the app cannot be asked, the post is classified as usual.
func classifyWith(ctx context.Context, app App, inv skills.Invocation) approval.Action {
	a := classify(ctx, inv)
	if a.Tier != approval.TierExternal || len(inv.Args) == 0 || inv.Args[0] != "post" || inv.UserID == "" {
		return a
	}
	c, _ := parse(inv.Args, inv.Stdin)
	var rej *appcall.RejectedError
	if _, err := app.PostTarget(ctx, inv.UserID, c.token); errors.As(err, &rej) {
		return approval.Action{Tier: approval.TierRead, Summary: a.Summary + " (refused: " + rej.Message + ")"}
	}
	return a
}

// classify: sharing and posting reach other people (external); creating a folder
// changes the user's own files (write-own); listing reads. A call that will be refused
// as usage is a read.
func classify(_ context.Context, inv skills.Invocation) approval.Action {
	c, err := parse(inv.Args, inv.Stdin)
	if err != nil {
		return approval.Action{Tier: approval.TierRead}
	}
	switch c.verb {
	case "share":
		return approval.Action{Tier: approval.TierExternal, Summary: describeShare(c)}
	case "post":
		return approval.Action{Tier: approval.TierExternal,
			Summary: fmt.Sprintf("Post as the bot in the Talk conversation %s: %q", c.token, clip(c.message, 300))}
	case "mkdir":
		return approval.Action{Tier: approval.TierWriteOwn, Summary: fmt.Sprintf("Create the folder %q in your files", strings.Trim(c.path, "/"))}
	}
	return approval.Action{Tier: approval.TierRead}
}

// describeShare says what a share will do, without the password.
func describeShare(c call) string {
	var b strings.Builder
	path := strings.Trim(c.path, "/")
	switch c.kind {
	case "link":
		fmt.Fprintf(&b, "Make a public link to %q", path)
	case "user":
		fmt.Fprintf(&b, "Share %q with the user %s", path, c.with)
	default:
		fmt.Fprintf(&b, "Share %q with the group %s", path, c.with)
	}
	var notes []string
	if c.edit {
		notes = append(notes, "they can edit")
	} else {
		notes = append(notes, "read-only")
	}
	if c.password != "" || c.generate {
		notes = append(notes, "password protected")
	}
	if c.expires != "" {
		notes = append(notes, "expires "+c.expires)
	}
	return b.String() + " (" + strings.Join(notes, ", ") + ")"
}

func run(ctx context.Context, opts Options, inv skills.Invocation) skills.Result {
	if inv.UserID == "" {
		return skills.Failf("nextcloud: no user for this task")
	}
	c, err := parse(inv.Args, inv.Stdin)
	if err != nil {
		return skills.Usagef("nextcloud: %v\nusage:\n%s", err, usage)
	}
	r := &runner{opts: opts, inv: inv}
	switch c.verb {
	case "share":
		return r.share(ctx, c)
	case "shares":
		return r.shares(ctx, c)
	case "mkdir":
		return r.mkdir(ctx, c)
	case "conversations":
		return r.conversations(ctx, c)
	}
	return r.post(ctx, c)
}

type runner struct {
	opts Options
	inv  skills.Invocation
}

func (r *runner) share(ctx context.Context, c call) skills.Result {
	perm := "read"
	if c.edit {
		perm = "edit"
	}
	what := describeShare(c)
	password := c.password
	if c.generate {
		var err error
		if password, err = generatePassword(); err != nil {
			return skills.Internal("the password generator", err)
		}
	}
	sh, err := r.opts.App.Share(ctx, appcall.ShareRequest{User: r.inv.UserID, Path: c.path, Type: c.kind, With: c.with,
		Permissions: perm, Expires: c.expires, Password: password, Note: c.note})
	if err != nil {
		return r.failed(ctx, "share", what, err)
	}
	r.done(ctx, "share", fmt.Sprintf("%s: share %s", what, sh.ID))
	if c.json {
		if c.generate {
			return jsonResult(struct {
				appcall.Share
				GeneratedPassword string `json:"generated_password"`
			}{sh, password})
		}
		return jsonResult(sh)
	}
	out := formatShare(sh, true)
	if c.generate {
		out += "password: " + password + "\n(tell the user this password; it is not shown again)\n"
	}
	return skills.Result{Stdout: []byte(out)}
}

// passwordAlphabet leaves out characters that are easily mistaken for each other.
const passwordAlphabet = "abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"

// generatePassword makes a link password of four groups of five characters joined by
// "-" (about 116 bits), with lower and upper case letters and digits, so that the usual
// password policies accept it.
func generatePassword() (string, error) {
	// Bytes at or above the largest multiple of the alphabet's size are skipped, so
	// every character is equally likely.
	limit := 256 - 256%len(passwordAlphabet)
	buf := make([]byte, 64)
	for {
		var b strings.Builder
		n := 0
		for n < 20 {
			if _, err := rand.Read(buf); err != nil {
				return "", err
			}
			for _, x := range buf {
				if int(x) >= limit || n == 20 {
					continue
				}
				if n > 0 && n%5 == 0 {
					b.WriteByte('-')
				}
				b.WriteByte(passwordAlphabet[int(x)%len(passwordAlphabet)])
				n++
			}
		}
		p := b.String()
		if strings.ContainsAny(p, "abcdefghijkmnpqrstuvwxyz") && strings.ContainsAny(p, "ABCDEFGHJKLMNPQRSTUVWXYZ") && strings.ContainsAny(p, "23456789") {
			return p, nil
		}
	}
}

func (r *runner) shares(ctx context.Context, c call) skills.Result {
	list, err := r.opts.App.Shares(ctx, r.inv.UserID, c.path)
	if err != nil {
		return r.failed(ctx, "", "", err)
	}
	if c.json {
		if list == nil {
			list = []appcall.Share{}
		}
		return jsonResult(list)
	}
	if len(list) == 0 {
		return skills.Result{Stdout: []byte("no shares\n")}
	}
	var b strings.Builder
	for _, sh := range list {
		b.WriteString(formatShare(sh, false))
	}
	return skills.Result{Stdout: []byte(b.String())}
}

func (r *runner) mkdir(ctx context.Context, c call) skills.Result {
	what := fmt.Sprintf("create the folder %q", strings.Trim(c.path, "/"))
	f, err := r.opts.App.Mkdir(ctx, r.inv.UserID, c.path)
	if err != nil {
		return r.failed(ctx, "mkdir", what, err)
	}
	if !f.Created {
		return skills.Result{Stdout: fmt.Appendf(nil, "the folder %s already exists\n", f.Path)}
	}
	r.done(ctx, "mkdir", "created the folder "+f.Path)
	return skills.Result{Stdout: fmt.Appendf(nil, "created the folder %s\n", f.Path)}
}

func (r *runner) conversations(ctx context.Context, c call) skills.Result {
	list, err := r.opts.App.Conversations(ctx, r.inv.UserID)
	if err != nil {
		return r.failed(ctx, "", "", err)
	}
	if c.json {
		if list == nil {
			list = []appcall.Conversation{}
		}
		return jsonResult(list)
	}
	if len(list) == 0 {
		return skills.Result{Stdout: []byte("no conversations\n")}
	}
	var b strings.Builder
	for _, cv := range list {
		bot := "bot added"
		if !cv.BotEnabled {
			bot = "bot not added (cannot post)"
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\n", cv.Token, cv.Name, bot)
	}
	return skills.Result{Stdout: []byte(b.String())}
}

func (r *runner) post(ctx context.Context, c call) skills.Result {
	what := fmt.Sprintf("post in the Talk conversation %s", c.token)
	target, err := r.opts.App.PostTarget(ctx, r.inv.UserID, c.token)
	if err != nil {
		return r.failed(ctx, "post", what, err)
	}
	sum := sha256.Sum256([]byte(c.token + "\x00" + c.message))
	key := fmt.Sprintf("skill:nextcloud:post:%d:%s", r.inv.TaskID, hex.EncodeToString(sum[:12]))
	err = r.opts.Poster.Enqueue(ctx, outbox.Message{Token: c.token, Text: c.message, TaskID: r.inv.TaskID, Kind: outbox.KindNotice, Key: key})
	if err != nil {
		return skills.Internal("the Talk outbox", err)
	}
	r.done(ctx, "post", fmt.Sprintf("posted %d characters as the bot in %q (%s)", utf8.RuneCountInString(c.message), target.Name, c.token))
	return skills.Result{Stdout: fmt.Appendf(nil, "posted in %q (%s); the bot delivers it to Talk within seconds\n", target.Name, c.token)}
}

// done records a completed action in the audit log and the task's events.
func (r *runner) done(ctx context.Context, action, text string) {
	r.record(ctx, audit.Entry{UserID: r.inv.UserID, TaskID: r.inv.TaskID, Component: auditComponent, Action: action, Allowed: true, Detail: text})
	r.event(ctx, text)
}

// failed turns an app error into the agent's answer, recording refusals of actions.
func (r *runner) failed(ctx context.Context, action, what string, err error) skills.Result {
	var rej *appcall.RejectedError
	if !errors.As(err, &rej) {
		return skills.Internal("Nextcloud", err)
	}
	if action != "" {
		reason := audit.ReasonNotAuthorized
		if rej.Status == 400 {
			reason = audit.ReasonBadRequest
		}
		r.record(ctx, audit.Entry{UserID: r.inv.UserID, TaskID: r.inv.TaskID, Component: auditComponent, Action: action,
			Reason: reason, Detail: fmt.Sprintf("%s: %s: %s", what, rej.Code, rej.Message)})
		r.event(ctx, fmt.Sprintf("refused to %s: %s", lowerFirst(what), rej.Message))
	}
	if rej.Status == 400 {
		return skills.Usagef("nextcloud: %s", rej.Message)
	}
	return skills.Failf("nextcloud: not done: %s", rej.Message)
}

func (r *runner) record(ctx context.Context, e audit.Entry) {
	if err := r.opts.Audit.Record(context.WithoutCancel(ctx), e); err != nil {
		r.opts.Logger.Error("nextcloud: audit failed", "err", err)
	}
}

func (r *runner) event(ctx context.Context, text string) {
	skills.RecordEvent(ctx, r.opts.Events, r.opts.Logger, r.inv, EventKind, text)
}

func formatShare(sh appcall.Share, created bool) string {
	var b strings.Builder
	if created {
		b.WriteString("shared ")
	}
	switch sh.Type {
	case "link":
		fmt.Fprintf(&b, "%s as a public link %s", sh.Path, sh.URL)
	default:
		fmt.Fprintf(&b, "%s with the %s %s", sh.Path, sh.Type, sh.With)
	}
	fmt.Fprintf(&b, " (%s", sh.Permissions)
	if sh.Password {
		b.WriteString(", password protected")
	}
	if sh.Expires != "" {
		b.WriteString(", expires " + sh.Expires)
	}
	fmt.Fprintf(&b, ", share id %s)\n", sh.ID)
	return b.String()
}

func jsonResult(v any) skills.Result {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return skills.Internal("the nextcloud skill", err)
	}
	return skills.Result{Stdout: append(b, '\n')}
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToLower(r)) + s[n:]
}
