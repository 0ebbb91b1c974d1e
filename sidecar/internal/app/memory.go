package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/istota/istota/sidecar/internal/executor"
	"github.com/istota/istota/sidecar/internal/knowledge"
	"github.com/istota/istota/sidecar/internal/memory"
	"github.com/istota/istota/sidecar/internal/queue"
	"github.com/istota/istota/sidecar/internal/sleep"
	"github.com/istota/istota/sidecar/internal/store"
)

// openMemory builds the search index, with vectors when an embeddings endpoint is set.
func (s *sidecar) openMemory() (*memory.Memory, error) {
	opts := memory.Options{Logger: s.log.With("component", "memory"), VectorCacheBytes: int64(s.cfg.Memory.VectorCacheMB) << 20}
	if opts.VectorCacheBytes == 0 {
		opts.VectorCacheBytes = -1 // 0 in the config is off; 0 in Options is the default
	}
	if m := s.cfg.Memory; m.EmbeddingsURL != "" {
		emb, err := memory.NewHTTPEmbedder(memory.HTTPEmbedderConfig{URL: m.EmbeddingsURL, Model: m.EmbeddingsModel, APIKey: m.EmbeddingsKey})
		if err != nil {
			return nil, fmt.Errorf("memory.embeddings_url: %w", err)
		}
		opts.Embedder = emb
	}
	m := memory.New(s.db, opts)
	if err := m.PrepareVectorIndex(context.Background()); err != nil {
		// Searches still answer, comparing every vector.
		s.log.Warn("memory: the vector index could not be made", "err", err)
	}
	return m, nil
}

// factStore adapts the knowledge graph to the memory_search skill.
type factStore struct{ g *knowledge.Graph }

func toMemoryFact(f knowledge.Fact) memory.Fact {
	return memory.Fact{ID: f.ID, Subject: f.Subject, Predicate: f.Predicate, Object: f.Object,
		ValidFrom: f.ValidFrom, ValidUntil: f.ValidUntil, Ephemeral: f.Ephemeral, Source: f.Source}
}

func toMemoryFacts(fs []knowledge.Fact, err error) ([]memory.Fact, error) {
	if err != nil {
		return nil, err
	}
	out := make([]memory.Fact, len(fs))
	for i, f := range fs {
		out[i] = toMemoryFact(f)
	}
	return out, nil
}

func (a factStore) Current(ctx context.Context, ns, subject string) ([]memory.Fact, error) {
	return toMemoryFacts(a.g.Current(ctx, ns, subject))
}

func (a factStore) Timeline(ctx context.Context, ns, subject string) ([]memory.Fact, error) {
	return toMemoryFacts(a.g.Timeline(ctx, ns, subject))
}

func (a factStore) Add(ctx context.Context, ns string, f memory.Fact) (memory.Fact, error) {
	got, _, err := a.g.Add(ctx, ns, knowledge.Fact{Subject: f.Subject, Predicate: f.Predicate, Object: f.Object,
		ValidFrom: f.ValidFrom, Ephemeral: f.Ephemeral, Source: "agent"})
	if errors.Is(err, knowledge.ErrInvalid) {
		return memory.Fact{}, fmt.Errorf("%w: %v", memory.ErrInvalid, err)
	}
	return toMemoryFact(got), err
}

func (a factStore) Invalidate(ctx context.Context, ns string, id int64, at time.Time) error {
	return a.g.Invalidate(ctx, ns, id, at)
}

func (a factStore) Delete(ctx context.Context, ns string, id int64) error {
	return a.g.Delete(ctx, ns, id)
}

// taskConversations tells the memory skill which conversation a task belongs to.
type taskConversations struct{ q *queue.Queue }

func (c taskConversations) ConversationToken(ctx context.Context, taskID int64) (string, error) {
	t, err := c.q.Get(ctx, taskID)
	if err != nil {
		return "", err
	}
	return t.ConversationToken, nil
}

// sleepIndexer hands the files the sleep cycle writes to the search index.
type sleepIndexer struct{ m *memory.Memory }

func (x sleepIndexer) IndexDocument(ctx context.Context, d sleep.Doc) error {
	_, _, err := x.m.ReplaceSource(ctx, memory.Doc(d))
	return err
}

// memoryView answers !memory from the user's files, the graph and the index.
type memoryView struct {
	dataDir, botDir string
	graph           *knowledge.Graph
	mem             *memory.Memory
}

func readCapped(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if len(b) > 64<<10 {
		b = b[:64<<10]
	}
	return string(b), err
}

func (v memoryView) UserMD(uid string) (string, error) {
	return readCapped(filepath.Join(executor.UserMirror(v.dataDir, uid), v.botDir, "config", "USER.md"))
}

func (v memoryView) ChannelMD(token string) (string, error) {
	return readCapped(filepath.Join(executor.ChannelMirror(v.dataDir, token), "CHANNEL.md"))
}

func (v memoryView) Facts(ctx context.Context, uid string) ([]string, error) {
	facts, err := v.graph.Current(ctx, memory.UserNamespace(uid), "")
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	out := make([]string, len(facts))
	for i, f := range facts {
		out[i] = f.String()
	}
	return out, nil
}

func (v memoryView) Search(ctx context.Context, uid, query string) ([]string, error) {
	hits, err := v.mem.Search(ctx, memory.Query{Namespaces: []string{memory.UserNamespace(uid)}, Text: query, Limit: 5})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range hits {
		out = append(out, h.CreatedAt.Format("2006-01-02")+": "+strings.Join(strings.Fields(h.Snippet), " "))
	}
	return out, nil
}
