// Package deferred applies the writes an agent may not do itself. During a run the
// agent describes each write as a small JSON file in the deferred/ folder of its task
// temp dir (/tmp/deferred inside the sandbox); after a successful run the sidecar calls
// Apply, which validates every file on its own, applies the good ones with the identity
// of the task — never one found in a file — and removes them all.
//
// # File format
//
// One operation per file, named anything ending in ".json" (other names are ignored,
// so write "x.json.tmp" and rename it for an atomic write). At most MaxFileBytes each,
// one JSON object, no unknown fields:
//
//	{"op": "kv_set", "namespace": "notes", "key": "todo", "value": "buy milk"}
//	{"op": "kv_delete", "namespace": "notes", "key": "todo"}
//	{"op": "subtask", "prompt": "Summarise the attached report and post it here."}
//
// kv_set stores value in the user's key-value store (kv package rules: namespace up to
// 64 characters of letters, digits, '_', '-', '.', ':'; key up to 256 bytes; value up to
// 64 KiB). A value that is not a JSON string is stored as its compact JSON text.
// kv_delete removes a key; a key that is already gone is not an error.
// subtask queues a new background task for the same user and conversation with prompt
// as its request (up to MaxPromptBytes). A subtask cannot create further subtasks, and
// one run may create at most Options.MaxSubtasks.
//
// Fields naming a user, uid or conversation are ignored (the task decides who and
// where) and flagged in the report and the audit log. A file that is not valid is
// rejected with reason invalid_operation and the others still apply: bad JSON, an
// unknown op or field, a missing or invalid field, a file that is too large, a symbolic
// link or anything but a regular file.
package deferred

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
	"unsafe"

	"github.com/istota/istota/sidecar/internal/audit"
	"github.com/istota/istota/sidecar/internal/kv"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/store"
)

// DirName is the folder of the task temp dir that holds the operation files.
const DirName = "deferred"

// SandboxDir is where the agent sees that folder: the task temp dir is /tmp inside the
// sandbox. The agent's instructions should name this path.
const SandboxDir = "/tmp/" + DirName

// Dir returns the operation folder of the task temp dir tmp, the dir Apply takes.
func Dir(tmp string) string { return filepath.Join(tmp, DirName) }

// Limits.
const (
	MaxFileBytes   = 128 << 10
	MaxPromptBytes = 32 << 10
)

// Operation kinds.
const (
	OpSubtask  = "subtask"
	OpKVSet    = "kv_set"
	OpKVDelete = "kv_delete"
)

// SubtaskDedupePrefix starts the dedupe key of every subtask ("subtask:<task id>:<file>"),
// which makes re-applying a file idempotent and marks a task as a subtask.
const SubtaskDedupePrefix = "subtask:"

// identityFields are keys an agent might use to claim an identity. They are ignored.
var identityFields = []string{"user", "user_id", "userid", "uid", "username", "owner", "conversation", "conversation_token", "token", "room"}

const component = "deferred"

// Enqueuer queues tasks; *queue.Queue is one.
type Enqueuer interface {
	Enqueue(ctx context.Context, nt queue.NewTask) (queue.Task, bool, error)
}

// KV is the key-value store the operations write; *kv.Store is one.
type KV interface {
	Set(ctx context.Context, userID, namespace, key, value string) error
	Delete(ctx context.Context, userID, namespace, key string) error
}

// Options tune an Applier. Zero values take the defaults.
type Options struct {
	// SubtaskSource is the queue source of subtasks; default queue.SourceCron (a
	// background task no person is waiting for) until the queue knows a "subtask"
	// source.
	SubtaskSource string
	// MaxSubtasks caps the subtasks one run may create; default 5.
	MaxSubtasks int
	// MaxFiles caps the operation files one run may leave; the rest are rejected.
	// Default 100.
	MaxFiles int
}

// Applier applies deferred operations. It is safe for concurrent use.
type Applier struct {
	kv     KV
	queue  Enqueuer
	audit  *audit.Log
	logger *slog.Logger
	opts   Options
}

// New returns an Applier. auditLog and logger may be nil.
func New(kvs KV, q Enqueuer, auditLog *audit.Log, logger *slog.Logger, opts Options) *Applier {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if auditLog == nil {
		auditLog = audit.New(nil, logger, nil)
	}
	if opts.SubtaskSource == "" {
		opts.SubtaskSource = queue.SourceCron
	}
	if opts.MaxSubtasks <= 0 {
		opts.MaxSubtasks = 5
	}
	if opts.MaxFiles <= 0 {
		opts.MaxFiles = 100
	}
	return &Applier{kv: kvs, queue: q, audit: auditLog, logger: logger, opts: opts}
}

// Outcome is what happened to one file.
type Outcome struct {
	File   string // the file name inside the deferred folder
	Op     string // the operation kind, when it could be read
	Reason string // for a rejection: audit.ReasonInvalidOperation
	Detail string // what was applied, or why it was rejected
	// Ignored lists identity fields found in the file and ignored.
	Ignored []string
	// TaskID is the subtask's task id.
	TaskID int64
}

// Report lists the applied and rejected operations of one Apply.
type Report struct {
	Applied  []Outcome
	Rejected []Outcome
}

// Apply applies the operation files in dir (the task temp dir's DirName folder) for
// task t, in file name order, and removes them. A missing dir is an empty report. The
// error is only for failures of the sidecar itself (database, filesystem); the files
// concerned are kept so that a later Apply can retry them, and every other file is
// still handled.
func (a *Applier) Apply(ctx context.Context, dir string, t queue.Task) (Report, error) {
	var rep Report
	if strings.TrimSpace(t.UserID) == "" || t.ID <= 0 {
		return rep, errors.New("deferred: the task has no user or no id")
	}
	// The folder is the agent's: it may have replaced it with a symbolic link or a
	// file. Open it without following links and work relative to that descriptor.
	dfd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return rep, nil
	case errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR):
		o := Outcome{File: DirName, Reason: audit.ReasonInvalidOperation, Detail: "the deferred folder is not a directory"}
		a.reject(ctx, t, o)
		rep.Rejected = append(rep.Rejected, o)
		if err := os.Remove(dir); err != nil {
			a.logger.Warn("deferred: removing the bad deferred folder failed", "task_id", t.ID, "err", err)
		}
		return rep, nil
	case err != nil:
		return rep, fmt.Errorf("deferred: open %s: %w", dir, err)
	}
	d := os.NewFile(uintptr(dfd), dir)
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return rep, fmt.Errorf("deferred: read %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)

	var errs []error
	subtasks := 0
	for i, name := range names {
		o := Outcome{File: name}
		var err error
		if i >= a.opts.MaxFiles {
			o.Reason, o.Detail = audit.ReasonInvalidOperation, fmt.Sprintf("more than %d operation files", a.opts.MaxFiles)
		} else {
			err = a.applyFile(ctx, dfd, name, t, &o, &subtasks)
		}
		if err != nil {
			// Not the file's fault: keep it for a retry.
			errs = append(errs, fmt.Errorf("deferred: %s: %w", name, err))
			continue
		}
		if o.Reason != "" {
			a.reject(ctx, t, o)
			rep.Rejected = append(rep.Rejected, o)
		} else {
			detail := o.Detail
			if len(o.Ignored) > 0 {
				detail += "; ignored identity fields " + strings.Join(o.Ignored, ",")
			}
			a.record(ctx, audit.Entry{UserID: t.UserID, TaskID: t.ID, Component: component, Action: o.Op, Allowed: true, Detail: detail})
			rep.Applied = append(rep.Applied, o)
		}
		if err := removeAt(dfd, name); err != nil {
			errs = append(errs, fmt.Errorf("deferred: remove %s: %w", name, err))
		}
	}
	return rep, errors.Join(errs...)
}

// applyFile reads, checks and applies one file. A rejection is written to o (Reason);
// the error is only for failures of the sidecar.
func (a *Applier) applyFile(ctx context.Context, dfd int, name string, t queue.Task, o *Outcome, subtasks *int) error {
	reject := func(format string, args ...any) error {
		o.Reason, o.Detail = audit.ReasonInvalidOperation, fmt.Sprintf(format, args...)
		return nil
	}
	data, why, err := readRegular(dfd, name)
	if err != nil {
		return err
	}
	if why != "" {
		return reject("%s", why)
	}

	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return reject("not a JSON object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return reject("data after the JSON object")
	}
	for _, k := range identityFields {
		if _, ok := fields[k]; ok {
			o.Ignored = append(o.Ignored, k)
			delete(fields, k)
		}
	}
	var op string
	if raw, ok := fields["op"]; !ok || json.Unmarshal(raw, &op) != nil {
		return reject("no \"op\" string")
	}
	delete(fields, "op")
	o.Op = op

	str := func(key string, required bool) (string, bool) {
		raw, ok := fields[key]
		delete(fields, key)
		if !ok {
			return "", !required
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false
		}
		return s, true
	}
	unknown := func() error {
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, strconv.Quote(k))
		}
		slices.Sort(keys)
		return reject("unknown field(s) %s for op %s", strings.Join(keys, ", "), op)
	}

	switch op {
	case OpKVSet, OpKVDelete:
		ns, ok1 := str("namespace", true)
		key, ok2 := str("key", true)
		if !ok1 || !ok2 {
			return reject("%s needs \"namespace\" and \"key\" strings", op)
		}
		var value string
		if op == OpKVSet {
			raw, ok := fields["value"]
			delete(fields, "value")
			if !ok {
				return reject("kv_set needs a \"value\"")
			}
			if err := json.Unmarshal(raw, &value); err != nil {
				var buf bytes.Buffer
				if err := json.Compact(&buf, raw); err != nil {
					return reject("bad value")
				}
				value = buf.String()
			}
		}
		if len(fields) > 0 {
			return unknown()
		}
		if err := errors.Join(kv.ValidateNamespace(ns), kv.ValidateKey(key)); err != nil {
			return reject("%v", err)
		}
		o.Detail = ns + "/" + key
		if op == OpKVDelete {
			err := a.kv.Delete(ctx, t.UserID, ns, key)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			return nil
		}
		if err := a.kv.Set(ctx, t.UserID, ns, key, value); err != nil {
			if errors.Is(err, kv.ErrInvalid) {
				return reject("%v", err)
			}
			return err
		}
		return nil

	case OpSubtask:
		prompt, ok := str("prompt", true)
		if !ok {
			return reject("subtask needs a \"prompt\" string")
		}
		if len(fields) > 0 {
			return unknown()
		}
		switch {
		case strings.TrimSpace(prompt) == "":
			return reject("the prompt is empty")
		case len(prompt) > MaxPromptBytes:
			return reject("the prompt is longer than %d bytes", MaxPromptBytes)
		case !utf8.ValidString(prompt) || strings.ContainsRune(prompt, 0):
			return reject("the prompt is not UTF-8 text")
		case strings.HasPrefix(t.DedupeKey, SubtaskDedupePrefix):
			return reject("a subtask cannot create subtasks")
		case *subtasks >= a.opts.MaxSubtasks:
			return reject("more than %d subtasks in one run", a.opts.MaxSubtasks)
		}
		st, created, err := a.queue.Enqueue(ctx, queue.NewTask{
			UserID:            t.UserID,
			Source:            a.opts.SubtaskSource,
			Interactive:       false,
			Prompt:            prompt,
			ConversationToken: t.ConversationToken,
			ReplyToMessageID:  t.ReplyToMessageID,
			DedupeKey:         SubtaskDedupePrefix + strconv.FormatInt(t.ID, 10) + ":" + name,
		})
		if err != nil {
			return err
		}
		*subtasks++
		o.TaskID = st.ID
		o.Detail = "task " + strconv.FormatInt(st.ID, 10)
		if !created {
			o.Detail += " (already queued)"
		}
		return nil
	}
	o.Op = ""
	return reject("unknown op %q (want subtask, kv_set or kv_delete)", truncate(op, 32))
}

// readRegular reads name in the directory dfd if it is a regular file of at most
// MaxFileBytes, without following a symbolic link or blocking on a FIFO. why says why
// the file is refused; err is for failures of the sidecar.
func readRegular(dfd int, name string) (data []byte, why string, err error) {
	fd, err := syscall.Openat(dfd, name, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, "a symbolic link, not a regular file", nil
	case errors.Is(err, syscall.ENXIO), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return nil, "not a readable regular file", nil
	case errors.Is(err, syscall.ENOENT):
		return nil, "the file disappeared", nil
	case err != nil:
		return nil, "", fmt.Errorf("open: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", fmt.Errorf("stat: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, "not a regular file", nil
	}
	if fi.Size() > MaxFileBytes {
		return nil, fmt.Sprintf("larger than %d bytes", MaxFileBytes), nil
	}
	data, err = io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("read: %w", err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Sprintf("larger than %d bytes", MaxFileBytes), nil
	}
	return data, "", nil
}

// atRemoveDir is AT_REMOVEDIR, which the syscall package does not export.
const atRemoveDir = 0x200

// removeAt removes name from the directory dfd: a file, a link (not its target) or an
// empty directory. Something that is already gone is fine.
func removeAt(dfd int, name string) error {
	err := syscall.Unlinkat(dfd, name)
	if errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.EPERM) {
		p, perr := syscall.BytePtrFromString(name)
		if perr != nil {
			return perr
		}
		_, _, errno := syscall.Syscall(syscall.SYS_UNLINKAT, uintptr(dfd), uintptr(unsafe.Pointer(p)), atRemoveDir)
		if errno != 0 {
			err = errno
		} else {
			err = nil
		}
	}
	if err != nil && !errors.Is(err, syscall.ENOENT) {
		return err
	}
	return nil
}

func (a *Applier) reject(ctx context.Context, t queue.Task, o Outcome) {
	detail := o.File + ": " + o.Detail
	if len(o.Ignored) > 0 {
		detail += "; ignored identity fields " + strings.Join(o.Ignored, ",")
	}
	action := o.Op
	if action == "" {
		action = "unknown"
	}
	a.record(ctx, audit.Entry{UserID: t.UserID, TaskID: t.ID, Component: component, Action: action, Reason: o.Reason, Detail: detail})
}

func (a *Applier) record(ctx context.Context, e audit.Entry) {
	if err := a.audit.Record(context.WithoutCancel(ctx), e); err != nil {
		a.logger.Error("deferred: audit failed", "task_id", e.TaskID, "err", err)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
