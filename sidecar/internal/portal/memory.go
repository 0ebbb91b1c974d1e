package portal

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/istota/istota/sidecar/internal/curation"
	"github.com/istota/istota/sidecar/internal/knowledge"
	"github.com/istota/istota/sidecar/internal/memory"
	"github.com/istota/istota/sidecar/internal/store"
)

// MaxUserMD is the largest USER.md the page may save.
const MaxUserMD = 64 << 10

// maxReadBytes caps every memory file the pages read.
const maxReadBytes = 256 << 10

// syncTimeout bounds a pull or push made for a page request.
const syncTimeout = 20 * time.Second

// ETag is the quoted SHA-256 of a document, the version token of USER.md edits.
func ETag(content []byte) string {
	sum := sha256.Sum256(content)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

// Document is a file's content with its ETag.
type Document struct {
	Content string `json:"content"`
	ETag    string `json:"etag"`
}

func (s *Service) userMDName() string { return s.o.BotDir + "/config/USER.md" }

// pull brings the user's mirror up to date so an edit made in Files is seen; when
// Nextcloud cannot be reached the mirror is used as it is.
func (s *Service) pull(ctx context.Context, uid string) {
	if s.o.Files == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if _, err := s.o.Files.Pull(ctx, uid); err != nil {
		s.o.Logger.Warn("settings page: pull failed; showing the local mirror", "user_id", uid, "err", err)
	}
}

// UserMD returns uid's USER.md and its ETag ("" and the ETag of "" when missing).
func (s *Service) UserMD(ctx context.Context, uid string) (Document, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return Document{}, err
	}
	s.pull(ctx, uid)
	root, err := s.o.UserRoot(uid)
	if err != nil {
		return Document{}, err
	}
	b, err := readRootFile(root, s.userMDName(), maxReadBytes)
	if err != nil {
		return Document{}, err
	}
	return Document{Content: string(b), ETag: ETag(b)}, nil
}

// SaveUserMD writes USER.md if it still has etag: compare and write happen under the
// lock the curation package takes for USER.md, so a nightly curation and a page save
// never interleave. The file goes to Nextcloud at once; when it cannot, the edit stays
// in the mirror (pushed by the retry loop) and the answer is KindUnavailable.
func (s *Service) SaveUserMD(ctx context.Context, uid, content, etag string) (string, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return "", err
	}
	if len(content) > MaxUserMD {
		return "", invalid("USER.md may be at most %d KiB", MaxUserMD>>10)
	}
	if !utf8.ValidString(content) || strings.ContainsRune(content, 0) {
		return "", invalid("USER.md must be UTF-8 text")
	}
	if etag == "" {
		return "", invalid("etag is required: load USER.md first")
	}
	s.pull(ctx, uid)
	root, err := s.o.UserRoot(uid)
	if err != nil {
		return "", err
	}
	newTag, err := s.compareAndWrite(ctx, root, s.userMDName(), []byte(content), etag)
	if err != nil {
		return "", err
	}
	if err := s.push(ctx, uid); err != nil {
		return "", err
	}
	return newTag, nil
}

// push sends the user's mirror to Nextcloud; a failure keeps the edit for the retry loop.
func (s *Service) push(ctx context.Context, uid string) error {
	if s.o.Files == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), syncTimeout)
	defer cancel()
	if _, err := s.o.Files.Push(pctx, uid); err != nil {
		s.o.Logger.Warn("settings page: push failed; the edit is kept and retried", "user_id", uid, "err", err)
		return &Error{Kind: KindUnavailable, Message: "saved, but Nextcloud could not be reached: the change will be synced to your files when it is back"}
	}
	return nil
}

func (s *Service) compareAndWrite(ctx context.Context, root, name string, content []byte, etag string) (string, error) {
	// curation's Replace holds the lock the nightly curation takes, so the two never
	// interleave, and audits the edit in the same log.
	_, err := curation.New(curation.Options{Clock: s.o.Clock}).Replace(ctx, root, name, content, func(cur []byte) error {
		if have := ETag(cur); have != etag {
			return &Error{Kind: KindConflict, CurrentETag: have,
				Message: "USER.md changed since you opened it (perhaps in Files or by the nightly curation); reload it and apply your edit again"}
		}
		return nil
	}, curation.AuditMeta{Source: "settings_page"})
	var pe *Error
	if errors.As(err, &pe) {
		return "", pe
	}
	if err != nil {
		return "", fmt.Errorf("portal: save %s: %w", name, err)
	}
	return ETag(content), nil
}

// readRooted reads a regular file inside r; a missing one is empty (mode 0600).
func readRooted(r *os.Root, name string, limit int64) ([]byte, fs.FileMode, error) {
	f, err := r.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return []byte{}, 0o600, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("portal: read %s: %w", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("portal: read %s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("portal: %s is not a regular file", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		return nil, 0, fmt.Errorf("portal: read %s: %w", name, err)
	}
	return b, fi.Mode().Perm(), nil
}

// readRootFile reads name below root without following links out of it.
func readRootFile(root, name string, limit int64) ([]byte, error) {
	r, err := os.OpenRoot(root)
	if errors.Is(err, fs.ErrNotExist) {
		return []byte{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("portal: open %s: %w", root, err)
	}
	defer r.Close()
	b, _, err := readRooted(r, name, limit)
	return b, err
}

// auditLine is one line of the curation audit log (curation's format, read and
// written here for the page's edits: source "settings_page").
type auditLine struct {
	Time    string `json:"time"`
	Op      string `json:"op"`
	Heading string `json:"heading,omitempty"`
	Text    string `json:"text,omitempty"`
	Old     string `json:"old,omitempty"`
	New     string `json:"new,omitempty"`
	Result  string `json:"result"`
	Reason  string `json:"reason,omitempty"`
	Source  string `json:"source,omitempty"`
	TaskID  int64  `json:"task_id,omitempty"`
}

// AuditEntry is one curation of USER.md.
type AuditEntry struct {
	At     string `json:"at"`
	Source string `json:"source"`
	Op     string `json:"op"`
	Status string `json:"status"` // applied | rejected
	Detail string `json:"detail"`
}

// Audit returns the newest limit lines of uid's USER.md audit log, newest first.
func (s *Service) Audit(ctx context.Context, uid string, limit int) ([]AuditEntry, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > 500 {
		limit = 50
	}
	root, err := s.o.UserRoot(uid)
	if err != nil {
		return nil, err
	}
	r, err := os.OpenRoot(root)
	if errors.Is(err, fs.ErrNotExist) {
		return []AuditEntry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("portal: open %s: %w", root, err)
	}
	defer r.Close()
	f, err := r.Open(s.userMDName() + curation.AuditSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return []AuditEntry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("portal: read the audit log: %w", err)
	}
	defer f.Close()
	var ring []AuditEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l auditLine
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue // a torn or foreign line is skipped, not fatal
		}
		ring = append(ring, AuditEntry{At: l.Time, Source: l.Source, Op: l.Op, Status: l.Result, Detail: auditDetail(l)})
		if len(ring) > limit {
			ring = ring[1:]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("portal: read the audit log: %w", err)
	}
	out := make([]AuditEntry, 0, len(ring))
	for i := len(ring) - 1; i >= 0; i-- {
		out = append(out, ring[i])
	}
	return out, nil
}

func auditDetail(l auditLine) string {
	var parts []string
	if l.Heading != "" {
		parts = append(parts, "under "+strings.TrimSpace(l.Heading))
	}
	switch {
	case l.Old != "" || l.New != "":
		parts = append(parts, fmt.Sprintf("%q → %q", cut(l.Old, 200), cut(l.New, 200)))
	case l.Text != "":
		parts = append(parts, cut(l.Text, 300))
	}
	if l.Reason != "" {
		parts = append(parts, "("+l.Reason+")")
	}
	return strings.Join(parts, " ")
}

// Channel is one conversation's CHANNEL.md.
type Channel struct {
	Token   string `json:"token"`
	Name    string `json:"name"`
	Content string `json:"content"`
}

// Channels returns CHANNEL.md of every conversation uid wrote in while the bot was there.
func (s *Service) Channels(ctx context.Context, uid string) ([]Channel, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return nil, err
	}
	rows, err := s.o.DB.Read.QueryContext(ctx, `
		SELECT c.token, c.name FROM conversations c
		WHERE c.token IN (SELECT DISTINCT token FROM conversation_messages WHERE actor_type = 'users' AND actor_id = ?)
		ORDER BY c.updated_at DESC LIMIT 200`, uid)
	if err != nil {
		return nil, fmt.Errorf("portal: conversations of %s: %w", uid, err)
	}
	var out []Channel
	for rows.Next() {
		var c Channel
		if err := rows.Scan(&c.Token, &c.Name); err != nil {
			rows.Close()
			return nil, fmt.Errorf("portal: conversations of %s: %w", uid, err)
		}
		out = append(out, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("portal: conversations of %s: %w", uid, err)
	}
	res := []Channel{}
	for _, c := range out {
		root, err := s.o.ChannelRoot(c.Token)
		if err != nil {
			continue // a token the workspace refuses has no folder
		}
		b, err := readRootFile(root, "CHANNEL.md", maxReadBytes)
		if err != nil {
			return nil, err
		}
		c.Content = string(b)
		res = append(res, c)
	}
	return res, nil
}

// Day is one dated memory file.
type Day struct {
	Date    string `json:"date"`
	Content string `json:"content"`
}

var datedName = regexp.MustCompile(`^(\d{4}-\d{2}-\d{2})\.md$`)

// Dated returns uid's memories/YYYY-MM-DD.md of the last days days, newest first.
func (s *Service) Dated(ctx context.Context, uid string, days int) ([]Day, error) {
	u, err := s.Authorize(ctx, uid)
	if err != nil {
		return nil, err
	}
	if days <= 0 || days > 366 {
		days = 30
	}
	root, err := s.o.UserRoot(uid)
	if err != nil {
		return nil, err
	}
	loc, err := time.LoadLocation(u.Timezone)
	if err != nil {
		loc = time.UTC
	}
	oldest := s.o.Clock().In(loc).AddDate(0, 0, -days).Format("2006-01-02")
	r, err := os.OpenRoot(root)
	if errors.Is(err, fs.ErrNotExist) {
		return []Day{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("portal: open %s: %w", root, err)
	}
	defer r.Close()
	dir, err := r.Open("memories")
	if errors.Is(err, fs.ErrNotExist) {
		return []Day{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("portal: read memories: %w", err)
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return nil, fmt.Errorf("portal: read memories: %w", err)
	}
	var dates []string
	for _, n := range names {
		if m := datedName.FindStringSubmatch(n); m != nil && m[1] > oldest {
			dates = append(dates, m[1])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(dates)))
	out := []Day{}
	for _, d := range dates {
		b, _, err := readRooted(r, "memories/"+d+".md", maxReadBytes)
		if err != nil {
			continue // a folder or special file under a date's name is skipped
		}
		out = append(out, Day{Date: d, Content: string(b)})
	}
	return out, nil
}

// Fact is one current knowledge fact about the user.
type Fact struct {
	ID         int64  `json:"id"`
	Subject    string `json:"subject"`
	Predicate  string `json:"predicate"`
	Object     string `json:"object"`
	ValidFrom  string `json:"valid_from"`
	ValidUntil string `json:"valid_until"`
	Ephemeral  bool   `json:"ephemeral"`
	Source     string `json:"source"`
	CreatedAt  string `json:"created_at"`
}

func factView(f knowledge.Fact) Fact {
	return Fact{ID: f.ID, Subject: f.Subject, Predicate: f.Predicate, Object: f.Object, ValidFrom: rfc3339(f.ValidFrom),
		ValidUntil: rfc3339(f.ValidUntil), Ephemeral: f.Ephemeral, Source: f.Source, CreatedAt: rfc3339(f.CreatedAt)}
}

// Facts returns the current facts of user:{uid}.
func (s *Service) Facts(ctx context.Context, uid string) ([]Fact, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return nil, err
	}
	out := []Fact{}
	if s.o.Graph == nil {
		return out, nil
	}
	fs, err := s.o.Graph.Current(ctx, memory.UserNamespace(uid), "")
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	for _, f := range fs {
		out = append(out, factView(f))
	}
	return out, nil
}

// InvalidateFact ends one of uid's facts now.
func (s *Service) InvalidateFact(ctx context.Context, uid string, id int64) error {
	return s.factOp(ctx, uid, id, func(ns string) error { return s.o.Graph.Invalidate(ctx, ns, id, s.o.Clock()) })
}

// DeleteFact removes one of uid's facts and its history.
func (s *Service) DeleteFact(ctx context.Context, uid string, id int64) error {
	return s.factOp(ctx, uid, id, func(ns string) error { return s.o.Graph.Delete(ctx, ns, id) })
}

func (s *Service) factOp(ctx context.Context, uid string, id int64, op func(ns string) error) error {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return err
	}
	if s.o.Graph == nil {
		return notFound("fact")
	}
	err := op(memory.UserNamespace(uid))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound("fact")
	case errors.Is(err, knowledge.ErrInvalid):
		return invalid("the fact cannot be ended now: it starts in the future")
	}
	return err
}

// SearchHit is one memory search result.
type SearchHit struct {
	Namespace string  `json:"namespace"`
	Text      string  `json:"text"`
	At        string  `json:"at"`
	Score     float64 `json:"score"`
}

// Search searches uid's personal memory.
func (s *Service) Search(ctx context.Context, uid, q string, limit int) ([]SearchHit, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return nil, err
	}
	q = strings.TrimSpace(q)
	if q == "" {
		return nil, invalid("q is required")
	}
	if utf8.RuneCountInString(q) > 500 {
		return nil, invalid("q is longer than 500 characters")
	}
	if limit <= 0 || limit > 50 {
		limit = 20
	}
	out := []SearchHit{}
	if s.o.Memory == nil {
		return out, nil
	}
	hits, err := s.o.Memory.Search(ctx, memory.Query{Namespaces: []string{memory.UserNamespace(uid)}, Text: q, Limit: limit})
	if err != nil {
		return nil, err
	}
	for _, h := range hits {
		out = append(out, SearchHit{Namespace: h.Namespace, Text: cut(h.Text, 2000), At: rfc3339(h.CreatedAt), Score: h.Score})
	}
	return out, nil
}
