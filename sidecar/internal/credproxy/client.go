package credproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"

	"github.com/istota/istota/sidecar/internal/skills"
)

// Exit codes of the client besides the skill's own.
const (
	// ExitUsage: no skill name, or standard input too large.
	ExitUsage = 2
	// ExitUnavailable: the proxy could not be reached or answered nonsense.
	ExitUnavailable = 125
	// ExitRefused: the proxy refused the call (unknown skill, not authorized,
	// credential not present, bad request).
	ExitRefused = 126
)

// maxResponseBytes bounds what the client reads: two base64 streams of the largest
// output the server sends, plus room for the JSON around them.
const maxResponseBytes = 2*(DefaultMaxOutputBytes+64<<10)*4/3 + 64<<10

// RunClient is "istota skill <name> [args…]" inside the sandbox. args starts with the
// skill name. It sends the call to the skills socket (SocketPath, or $ISTOTA_SKILLS_SOCKET),
// copies the skill's output to stdout and stderr and returns the skill's exit code, or
// ExitRefused / ExitUnavailable / ExitUsage with a message on stderr. Standard input is
// read to its end and sent along unless it is a terminal; it needs no credentials and
// never sees one.
func RunClient(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "" || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stderr, "usage: istota skill <name> [args…]\n\"istota skill skills\" lists the skills you can use.")
		return ExitUsage
	}
	name := args[0]
	prefix := "istota skill " + name + ": "

	in, err := readStdin(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "%s%v\n", prefix, err)
		return ExitUsage
	}
	body, err := json.Marshal(request{Args: nonNil(args[1:]), Stdin: in})
	if err != nil {
		fmt.Fprintf(stderr, "%sencode request: %v\n", prefix, err)
		return ExitUsage
	}

	sock := os.Getenv(SocketEnv)
	if sock == "" {
		sock = SocketPath
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}}
	// The host part is never resolved: every connection goes to the socket.
	req, err := http.NewRequest(http.MethodPost, "http://istota/v1/skills/"+url.PathEscape(name), bytes.NewReader(body))
	if err != nil {
		fmt.Fprintf(stderr, "%s%v\n", prefix, err)
		return ExitUsage
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "%sthe skills proxy at %s is not reachable (%v); skills only work inside an Istota task\n", prefix, sock, errors.Unwrap(err))
		return ExitUnavailable
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		fmt.Fprintf(stderr, "%sreading the answer failed: %v\n", prefix, err)
		return ExitUnavailable
	}

	if resp.StatusCode != http.StatusOK {
		var eb errorBody
		if err := json.Unmarshal(raw, &eb); err != nil || eb.Error.Code == "" {
			fmt.Fprintf(stderr, "%sthe skills proxy answered %s\n", prefix, resp.Status)
			return ExitUnavailable
		}
		if eb.Error.Code == codeInternal {
			fmt.Fprintf(stderr, "%serror: %s\n", prefix, eb.Error.Message)
			return ExitUnavailable
		}
		fmt.Fprintf(stderr, "%srefused (%s): %s\n", prefix, eb.Error.Code, eb.Error.Message)
		return ExitRefused
	}
	var out response
	if err := json.Unmarshal(raw, &out); err != nil {
		fmt.Fprintf(stderr, "%sthe skills proxy answered nonsense: %v\n", prefix, err)
		return ExitUnavailable
	}
	stdout.Write(out.Stdout)
	stderr.Write(out.Stderr)
	switch {
	case out.ExitCode < 0:
		return 1
	case out.ExitCode > 255:
		return 255
	}
	return out.ExitCode
}

// readStdin reads at most skills.MaxStdin bytes. A terminal (or /dev/null, also a
// character device) gives no input, so that a skill run by hand does not wait for one.
func readStdin(r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, nil
	}
	if f, ok := r.(*os.File); ok {
		fi, err := f.Stat()
		if err != nil || fi.Mode()&os.ModeCharDevice != 0 {
			return nil, nil
		}
	}
	b, err := io.ReadAll(io.LimitReader(r, skills.MaxStdin+1))
	if err != nil {
		return nil, fmt.Errorf("read standard input: %w", err)
	}
	if len(b) > skills.MaxStdin {
		return nil, fmt.Errorf("standard input is larger than %d bytes", skills.MaxStdin)
	}
	return b, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// HookCommand is the subcommand of the istota binary that Claude Code runs as its
// PreToolUse hook (RunHook): "<istota> hook pre-tool-use".
const HookCommand = "hook pre-tool-use"

// RunHook is "istota hook pre-tool-use" inside the sandbox: Claude Code's PreToolUse hook.
// It hands the tool call Claude Code describes on stdin to the approvals check behind
// the skills socket, which may wait for the user's answer, and prints Claude Code's
// "deny" decision when the call may not run. The decision is made outside the sandbox;
// when the check cannot be reached the call is denied.
func RunHook(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] != "pre-tool-use" {
		fmt.Fprintln(stderr, "usage: istota hook pre-tool-use   (Claude Code's PreToolUse hook; reads the tool call on stdin)")
		return ExitUsage
	}
	deny := func(reason string) int {
		out, _ := json.Marshal(map[string]any{"hookSpecificOutput": map[string]any{
			"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason,
		}})
		fmt.Fprintln(stdout, string(out))
		return 0
	}
	body, err := io.ReadAll(io.LimitReader(stdin, DefaultMaxRequestBytes+1))
	if err != nil || len(body) > DefaultMaxRequestBytes {
		return deny("the tool call could not be checked (its description is unreadable or too large)")
	}
	resp, err := socketClient().Post("http://istota/v1/approvals/tool", "application/json", bytes.NewReader(body))
	if err != nil {
		return deny("the approvals check is not reachable, so the tool was not run")
	}
	defer resp.Body.Close()
	var d ToolDecision
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&d); err != nil || resp.StatusCode != http.StatusOK {
		return deny("the approvals check failed, so the tool was not run")
	}
	if d.Decision != "allow" {
		return deny(d.Reason)
	}
	return 0
}

// socketClient talks HTTP to the skills socket (SocketPath, or $ISTOTA_SKILLS_SOCKET).
func socketClient() *http.Client {
	sock := os.Getenv(SocketEnv)
	if sock == "" {
		sock = SocketPath
	}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}}
}
