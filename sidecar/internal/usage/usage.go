// Package usage records the model tokens each task used, as the per-task gateway saw
// them, and sums them per user for !usage and budgets.
package usage

import (
	"context"
	"fmt"
	"time"

	"github.com/istota/istota/sidecar/internal/store"
)

// Entry is the usage of one model response.
type Entry struct {
	At            time.Time
	UserID        string
	TaskID        int64
	Model         string
	InputTokens   int64
	OutputTokens  int64
	CacheRead     int64
	CacheCreation int64
	Requests      int64
	CostUSD       float64
}

// Totals sums entries.
type Totals struct {
	InputTokens   int64
	OutputTokens  int64
	CacheRead     int64
	CacheCreation int64
	Requests      int64
	CostUSD       float64
}

// Store writes and sums usage rows.
type Store struct{ db *store.DB }

// New returns a Store over db.
func New(db *store.DB) *Store { return &Store{db: db} }

// Record adds one entry.
func (s *Store) Record(ctx context.Context, e Entry) error {
	_, err := s.db.Write.ExecContext(ctx, `INSERT INTO usage
		(at, user_id, task_id, model, input_tokens, output_tokens, cache_read, cache_creation, requests, cost_usd)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		store.FormatTime(e.At), e.UserID, e.TaskID, e.Model, e.InputTokens, e.OutputTokens, e.CacheRead, e.CacheCreation, e.Requests, e.CostUSD)
	if err != nil {
		return fmt.Errorf("usage: record: %w", err)
	}
	return nil
}

// Since sums a user's usage from since (inclusive) until now.
func (s *Store) Since(ctx context.Context, userID string, since time.Time) (Totals, error) {
	var t Totals
	err := s.db.Read.QueryRowContext(ctx, `SELECT COALESCE(SUM(input_tokens),0), COALESCE(SUM(output_tokens),0),
		COALESCE(SUM(cache_read),0), COALESCE(SUM(cache_creation),0), COALESCE(SUM(requests),0), COALESCE(SUM(cost_usd),0)
		FROM usage WHERE user_id = ? AND at >= ?`, userID, store.FormatTime(since)).
		Scan(&t.InputTokens, &t.OutputTokens, &t.CacheRead, &t.CacheCreation, &t.Requests, &t.CostUSD)
	if err != nil {
		return Totals{}, fmt.Errorf("usage: sum for %s: %w", userID, err)
	}
	return t, nil
}

// Task sums one task's usage.
func (s *Store) Task(ctx context.Context, taskID int64) (Totals, error) {
	var t Totals
	err := s.db.Read.QueryRowContext(ctx, `SELECT COALESCE(SUM(input_tokens),0), COALESCE(SUM(output_tokens),0),
		COALESCE(SUM(cache_read),0), COALESCE(SUM(cache_creation),0), COALESCE(SUM(requests),0), COALESCE(SUM(cost_usd),0)
		FROM usage WHERE task_id = ?`, taskID).
		Scan(&t.InputTokens, &t.OutputTokens, &t.CacheRead, &t.CacheCreation, &t.Requests, &t.CostUSD)
	if err != nil {
		return Totals{}, fmt.Errorf("usage: sum for task %d: %w", taskID, err)
	}
	return t, nil
}
