// Package credproxy runs skills for sandboxed agents. Inside the sandbox "istota skill
// <name> …" is only a client (RunClient) of a Unix socket bound into the sandbox; the
// Server behind that socket runs the skill in the sidecar, outside the sandbox, with
// exactly the credentials the skill's manifest declares and the task's user has. Who is
// asking is bound to the socket when the task starts (Identity) and never read from a
// request, so one task can neither use another user's credentials nor claim to be
// someone else. Every refusal is audited with a stable reason code and reaches the
// agent as a clear error.
//
// The protocol is HTTP/1.1 over the socket:
//
//	POST /v1/skills/{name}
//	{"args": ["get", "ns", "key"], "stdin": "<base64>"}      (or "stdin_text": "…")
//
//	200 {"exit_code": 0, "stdout": "<base64>", "stderr": "<base64>"}
//	4xx/5xx {"error": {"code": "not_authorized", "message": "…"}}
//
// With Options.Gate a call first passes the approvals check (package approval): a tier
// that asks makes the call wait for the user's answer. The agent's own tool calls are
// checked the same way by "istota hook pre-tool-use" (Claude Code's PreToolUse hook):
//
//	POST /v1/approvals/tool
//	{"tool_name": "WebFetch", "tool_input": {…}}
//	200 {"decision": "allow"} or {"decision": "deny", "reason": "…"}
package credproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/sandbox"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/store"
)

const (
	// ServiceName is the name of the per-task sandbox service; its socket appears
	// inside the sandbox at SocketPath.
	ServiceName = "skills"
	// SocketPath is where the client finds the server inside the sandbox
	// (sandbox.SocketMountDir + "/" + ServiceName + ".sock").
	SocketPath = sandbox.SocketMountDir + "/" + ServiceName + ".sock"
	// SocketEnv overrides SocketPath for the client (tests, the unsandboxed mode).
	SocketEnv = "ISTOTA_SKILLS_SOCKET"

	component = "credproxy"
	// codeInternal is the error code of a failure inside the sidecar; it is not an
	// audit reason because nothing was refused.
	codeInternal = "internal"
)

// Defaults for Options.
const (
	DefaultTimeout         = 2 * time.Minute
	DefaultMaxRequestBytes = 2 << 20
	DefaultMaxOutputBytes  = 4 << 20
	// maxArgs bounds the argument count of one call.
	maxArgs = 1024
	// redacted replaces a sensitive value that a skill printed.
	redacted = "[redacted]"
	// minRedactLen is the shortest sensitive value scrubbed from output; shorter ones
	// would mangle ordinary text and are not real secrets anyway.
	minRedactLen = 4
)

// Identity is who a task's socket speaks for. It comes from the task (its user and the
// user's admin flag as the app reported them), never from a request.
type Identity struct {
	UserID  string
	TaskID  int64
	IsAdmin bool
}

// CredentialSource hands out a user's credential values; *skills.Credentials is one.
// A missing credential is an error matching store.ErrNotFound.
type CredentialSource interface {
	Get(ctx context.Context, userID, name string) (string, error)
}

// Options tune a Server. Zero values take the defaults.
type Options struct {
	// Timeout bounds one skill call; default DefaultTimeout. A skill that runs out of
	// time returns exit code 124.
	Timeout time.Duration
	// MaxRequestBytes bounds the request body (arguments and base64 stdin); default
	// DefaultMaxRequestBytes. Stdin is further bounded by skills.MaxStdin.
	MaxRequestBytes int64
	// MaxOutputBytes bounds each of stdout and stderr; longer output is cut and the cut
	// is noted on stderr. Default and maximum DefaultMaxOutputBytes.
	MaxOutputBytes int
	// Settings supplies non-secret variables (EnvVar.Credential empty), e.g. a server
	// URL from the sidecar's config. Nil means there are none.
	Settings func(userID, name string) (string, bool)
	// Gate decides whether a call may run now, asking the user first when the call's
	// tier says so (*approval.Service). Nil lets every call run.
	Gate Gate
}

// Gate is the approvals check; it may wait for the user's answer.
type Gate interface {
	Check(ctx context.Context, who approval.Who, a approval.Action) (approval.Outcome, error)
}

// Server runs skills for sandboxes. One Server serves every task; each task gets its
// own socket and Serve call with that task's Identity. It is safe for concurrent use.
type Server struct {
	reg    *skills.Registry
	creds  CredentialSource
	audit  *audit.Log
	logger *slog.Logger
	opts   Options
}

// New returns a Server. auditLog and logger may be nil.
func New(reg *skills.Registry, creds CredentialSource, auditLog *audit.Log, logger *slog.Logger, opts Options) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if auditLog == nil {
		auditLog = audit.New(nil, logger, nil)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	// The client reads at most what the default allows, so larger is not an option.
	if opts.MaxOutputBytes <= 0 || opts.MaxOutputBytes > DefaultMaxOutputBytes {
		opts.MaxOutputBytes = DefaultMaxOutputBytes
	}
	return &Server{reg: reg, creds: creds, audit: auditLog, logger: logger, opts: opts}
}

// Service returns the per-task sandbox service that serves who's skills; add it to the
// task's sandbox.Spec.Services.
func (s *Server) Service(who Identity) sandbox.Service {
	return sandbox.Service{
		Name: ServiceName,
		Serve: func(ctx context.Context, ln net.Listener) error {
			return s.Serve(ctx, ln, who)
		},
	}
}

// Serve answers skill requests on ln, all on behalf of who, until ctx is cancelled; it
// then waits for calls in progress (their contexts are cancelled too) and returns nil.
// It does not close ln before ctx ends unless accepting fails.
func (s *Server) Serve(ctx context.Context, ln net.Listener, who Identity) error {
	if strings.TrimSpace(who.UserID) == "" {
		return errors.New("credproxy: serve: the identity has no user id")
	}
	srv := &http.Server{
		Handler:           s.Handler(who),
		ReadHeaderTimeout: 30 * time.Second,
		ReadTimeout:       time.Minute,
		// Calls inherit ctx, so the end of the task cancels the skills it started.
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var serveErr error
	served := false
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		served = true
	}
	// Shutdown waits for handlers in flight; their context is already cancelled (or
	// the listener died), so they end within their own timeout at the latest.
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout+10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if !served {
		serveErr = <-errc
	}
	if ctx.Err() != nil || errors.Is(serveErr, http.ErrServerClosed) || errors.Is(serveErr, net.ErrClosed) {
		return nil
	}
	return fmt.Errorf("credproxy: serve task %d: %w", who.TaskID, serveErr)
}

// Handler returns the HTTP handler that serves who. Serve uses it; it is exported for
// callers that run their own server.
func (s *Server) Handler(who Identity) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/skills/{name}", func(w http.ResponseWriter, r *http.Request) {
		s.handleSkill(w, r, who)
	})
	mux.HandleFunc("POST /v1/approvals/tool", func(w http.ResponseWriter, r *http.Request) {
		s.handleTool(w, r, who)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.refuse(r.Context(), w, who, r.Method+" "+truncate(r.URL.Path, 64), &refusal{
			status: http.StatusNotFound, code: audit.ReasonBadRequest,
			message: "unknown endpoint: use POST /v1/skills/{name}",
		})
	})
	return mux
}

// request is the body of POST /v1/skills/{name}.
type request struct {
	Args      []string `json:"args"`
	Stdin     []byte   `json:"stdin,omitempty"`      // base64
	StdinText *string  `json:"stdin_text,omitempty"` // plain text, for hand-written requests
}

// response is the body of a call that ran.
type response struct {
	ExitCode int    `json:"exit_code"`
	Stdout   []byte `json:"stdout"`
	Stderr   []byte `json:"stderr"`
}

// errorBody is the body of a refusal or failure.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// refusal is a request turned down with a reason code.
type refusal struct {
	status  int
	code    string // an audit reason code
	message string // for the agent
	detail  string // for the audit log; never a secret
}

func (s *Server) handleSkill(w http.ResponseWriter, r *http.Request, who Identity) {
	ctx := r.Context()
	name := r.PathValue("name")
	if !skills.ValidName(name) {
		s.refuse(ctx, w, who, strconv.Quote(truncate(name, 64)), &refusal{
			status: http.StatusNotFound, code: audit.ReasonUnknownSkill,
			message: fmt.Sprintf("no skill %q; \"istota skill skills\" lists the skills you can use", truncate(name, 64)),
		})
		return
	}
	sk, ok := s.reg.Lookup(name)
	if !ok {
		s.refuse(ctx, w, who, name, &refusal{
			status: http.StatusNotFound, code: audit.ReasonUnknownSkill,
			message: fmt.Sprintf("no skill %q; \"istota skill skills\" lists the skills you can use", name),
		})
		return
	}
	if sk.AdminOnly && !who.IsAdmin {
		s.refuse(ctx, w, who, name, &refusal{
			status: http.StatusForbidden, code: audit.ReasonNotAuthorized,
			message: fmt.Sprintf("%s is only available to administrators", name),
		})
		return
	}
	req, ref := s.decode(w, r)
	if ref != nil {
		s.refuse(ctx, w, who, name, ref)
		return
	}
	env, secrets, ref, err := s.resolveEnv(ctx, sk, who)
	if err != nil {
		s.logger.Error("credproxy: resolving credentials failed", "skill", name, "user_id", who.UserID, "task_id", who.TaskID, "err", err)
		writeError(w, http.StatusInternalServerError, codeInternal, "the credential store is unavailable; try again later")
		return
	}
	if ref != nil {
		s.refuse(ctx, w, who, name, ref)
		return
	}

	inv := skills.Invocation{
		Args:    req.Args,
		Stdin:   req.Stdin,
		UserID:  who.UserID,
		TaskID:  who.TaskID,
		IsAdmin: who.IsAdmin,
		Env:     env,
	}
	if !s.approved(w, r, who, name, sk.Action(ctx, inv)) {
		return
	}
	res := s.run(ctx, sk, inv)
	if res.Err != nil {
		s.logger.Error("skill failed", "skill", name, "user_id", who.UserID, "task_id", who.TaskID, "err", res.Err)
	}
	out := response{
		ExitCode: res.ExitCode,
		Stdout:   scrub(res.Stdout, secrets),
		Stderr:   scrub(res.Stderr, secrets),
	}
	// The notes go after the cut so they are always seen; the client allows for them.
	var cutOut, cutErr bool
	out.Stdout, cutOut = s.bound(out.Stdout)
	out.Stderr, cutErr = s.bound(out.Stderr)
	for _, c := range []struct {
		cut  bool
		what string
	}{{cutOut, "standard output"}, {cutErr, "standard error"}} {
		if c.cut {
			out.Stderr = append(out.Stderr, fmt.Sprintf("\nistota skill %s: %s cut at %d bytes\n", name, c.what, s.opts.MaxOutputBytes)...)
		}
	}

	names := make([]string, 0, len(env))
	for _, v := range sk.Env {
		if _, ok := env[v.Name]; ok && v.Credential != "" {
			names = append(names, v.Credential)
		}
	}
	detail := "exit_code=" + strconv.Itoa(out.ExitCode)
	if len(names) > 0 {
		detail += " credentials=" + strings.Join(names, ",")
	}
	s.record(ctx, audit.Entry{UserID: who.UserID, TaskID: who.TaskID, Component: component, Action: name, Allowed: true, Detail: detail})
	writeJSON(w, http.StatusOK, out)
}

// approved runs the approvals check for a and, when the call may not run, answers the
// client itself and returns false.
func (s *Server) approved(w http.ResponseWriter, r *http.Request, who Identity, action string, a approval.Action) bool {
	if s.opts.Gate == nil {
		return true
	}
	ctx := r.Context()
	out, err := s.opts.Gate.Check(ctx, approval.Who{UserID: who.UserID, TaskID: who.TaskID}, a)
	switch {
	case err != nil && ctx.Err() != nil:
		writeError(w, http.StatusServiceUnavailable, codeInternal, "the task was stopped while it waited for the user's answer")
		return false
	case err != nil:
		s.logger.Error("credproxy: approvals check failed", "action", action, "user_id", who.UserID, "task_id", who.TaskID, "err", err)
		writeError(w, http.StatusInternalServerError, codeInternal, "the approvals check is unavailable; try again later")
		return false
	case !out.Allowed:
		s.refuse(ctx, w, who, action, &refusal{status: http.StatusForbidden, code: audit.ReasonNotApproved,
			message: out.Message, detail: fmt.Sprintf("tier=%s approval=%d", a.Tier, out.RequestID)})
		return false
	}
	return true
}

// toolRequest is the body of POST /v1/approvals/tool: what Claude Code hands its
// PreToolUse hook, of which only the tool matters.
type toolRequest struct {
	ToolName  string          `json:"tool_name"`
	ToolInput json.RawMessage `json:"tool_input"`
}

// ToolDecision is the answer of POST /v1/approvals/tool.
type ToolDecision struct {
	Decision string `json:"decision"` // allow | deny
	Reason   string `json:"reason,omitempty"`
}

// handleTool checks one of the agent's own tool calls before it runs.
func (s *Server) handleTool(w http.ResponseWriter, r *http.Request, who Identity) {
	var req toolRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.opts.MaxRequestBytes))
	if err := dec.Decode(&req); err != nil || req.ToolName == "" || len(req.ToolName) > 200 {
		s.refuse(r.Context(), w, who, "tool", &refusal{status: http.StatusBadRequest, code: audit.ReasonBadRequest,
			message: `the request is not {"tool_name": "…", "tool_input": {…}}`, detail: "malformed tool check"})
		return
	}
	a := approval.ClassifyTool(req.ToolName, req.ToolInput)
	if s.opts.Gate == nil {
		writeJSON(w, http.StatusOK, ToolDecision{Decision: "allow"})
		return
	}
	out, err := s.opts.Gate.Check(r.Context(), approval.Who{UserID: who.UserID, TaskID: who.TaskID}, a)
	switch {
	case err != nil:
		if r.Context().Err() == nil {
			s.logger.Error("credproxy: approvals check failed", "tool", req.ToolName, "user_id", who.UserID, "task_id", who.TaskID, "err", err)
		}
		writeJSON(w, http.StatusOK, ToolDecision{Decision: "deny", Reason: "the approvals check is unavailable; the tool was not run"})
	case !out.Allowed:
		s.record(r.Context(), audit.Entry{UserID: who.UserID, TaskID: who.TaskID, Component: component, Action: "tool " + req.ToolName,
			Reason: audit.ReasonNotApproved, Detail: fmt.Sprintf("tier=%s approval=%d", a.Tier, out.RequestID)})
		writeJSON(w, http.StatusOK, ToolDecision{Decision: "deny", Reason: out.Message})
	default:
		writeJSON(w, http.StatusOK, ToolDecision{Decision: "allow"})
	}
}

// decode reads and checks the request body.
func (s *Server) decode(w http.ResponseWriter, r *http.Request) (request, *refusal) {
	var req request
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxRequestBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return req, &refusal{
				status: http.StatusRequestEntityTooLarge, code: audit.ReasonBadRequest,
				message: fmt.Sprintf("the request is larger than %d bytes", s.opts.MaxRequestBytes),
				detail:  "request too large",
			}
		}
		return req, &refusal{status: http.StatusBadRequest, code: audit.ReasonBadRequest,
			message: "the request is not valid JSON of the form {\"args\": [...], \"stdin\": \"<base64>\"}", detail: "malformed request"}
	}
	if dec.More() {
		return req, &refusal{status: http.StatusBadRequest, code: audit.ReasonBadRequest,
			message: "the request has data after its JSON object", detail: "trailing data"}
	}
	if req.StdinText != nil {
		if len(req.Stdin) > 0 {
			return req, &refusal{status: http.StatusBadRequest, code: audit.ReasonBadRequest,
				message: "give stdin or stdin_text, not both", detail: "stdin twice"}
		}
		req.Stdin = []byte(*req.StdinText)
	}
	if len(req.Stdin) > skills.MaxStdin {
		return req, &refusal{status: http.StatusRequestEntityTooLarge, code: audit.ReasonBadRequest,
			message: fmt.Sprintf("standard input is larger than %d bytes", skills.MaxStdin), detail: "stdin too large"}
	}
	if len(req.Args) > maxArgs {
		return req, &refusal{status: http.StatusBadRequest, code: audit.ReasonBadRequest,
			message: fmt.Sprintf("more than %d arguments", maxArgs), detail: "too many arguments"}
	}
	return req, nil
}

// resolveEnv collects the declared variables that have a value for who. It refuses the
// call when a sensitive one is missing, and returns the sensitive values for scrubbing.
func (s *Server) resolveEnv(ctx context.Context, sk skills.Skill, who Identity) (map[string]string, []string, *refusal, error) {
	env := map[string]string{}
	var secrets []string
	for _, v := range sk.Env {
		if v.Credential == "" {
			if s.opts.Settings != nil {
				if val, ok := s.opts.Settings(who.UserID, v.Name); ok {
					env[v.Name] = val
				}
			}
			continue
		}
		if s.creds == nil {
			if v.Sensitive {
				return nil, nil, missing(sk.Name, v.Credential), nil
			}
			continue
		}
		// Always who's credentials: the user id is the one bound to this socket.
		val, err := s.creds.Get(ctx, who.UserID, v.Credential)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if v.Sensitive {
				return nil, nil, missing(sk.Name, v.Credential), nil
			}
			continue
		case err != nil:
			return nil, nil, nil, err
		}
		env[v.Name] = val
		if v.Sensitive {
			secrets = append(secrets, val)
		}
	}
	return env, secrets, nil, nil
}

func missing(skill, credential string) *refusal {
	return &refusal{
		status: http.StatusForbidden, code: audit.ReasonCredentialNotPresent,
		message: fmt.Sprintf("%s needs the credential %q, which you have not stored; add it in your Istota personal settings", skill, credential),
		detail:  "missing credential " + credential,
	}
}

// run calls the skill with the call timeout.
func (s *Server) run(ctx context.Context, sk skills.Skill, inv skills.Invocation) (res skills.Result) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	defer func() {
		// A panicking skill must not take the sidecar down with it.
		if p := recover(); p != nil {
			res = skills.Internal("skill "+sk.Name, fmt.Errorf("panic: %v", p))
		}
	}()
	res = sk.Run(ctx, inv)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		res.ExitCode = 124
		res.Stderr = append(res.Stderr, fmt.Sprintf("istota skill %s: timed out after %s\n", sk.Name, s.opts.Timeout)...)
	}
	return res
}

func (s *Server) bound(b []byte) ([]byte, bool) {
	if len(b) <= s.opts.MaxOutputBytes {
		return b, false
	}
	return b[:s.opts.MaxOutputBytes], true
}

// scrub replaces every sensitive value in b, so a skill that echoes its credential
// (an upstream error page quoting the token, say) does not hand it to the agent.
func scrub(b []byte, secrets []string) []byte {
	for _, sec := range secrets {
		if len(sec) >= minRedactLen {
			b = bytes.ReplaceAll(b, []byte(sec), []byte(redacted))
		}
	}
	return b
}

// refuse audits a refusal and sends it to the client.
func (s *Server) refuse(ctx context.Context, w http.ResponseWriter, who Identity, action string, ref *refusal) {
	detail := ref.detail
	if detail == "" {
		detail = ref.message
	}
	s.record(ctx, audit.Entry{UserID: who.UserID, TaskID: who.TaskID, Component: component, Action: action, Reason: ref.code, Detail: detail})
	writeError(w, ref.status, ref.code, ref.message)
}

// record writes an audit entry even when the call's context has ended.
func (s *Server) record(ctx context.Context, e audit.Entry) {
	if err := s.audit.Record(context.WithoutCancel(ctx), e); err != nil {
		s.logger.Error("credproxy: audit failed", "err", err)
	}
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	var b errorBody
	b.Error.Code, b.Error.Message = code, message
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client went away; nothing to do
}

// truncate shortens s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
