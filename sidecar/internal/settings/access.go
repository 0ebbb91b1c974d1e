package settings

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/istota/istota/sidecar/internal/usage"
)

// Decide says whether a user may use the bot and whether they are an Istota admin, from
// the access settings in effect now. Istota admins are Nextcloud admins and the users
// and groups the panel names; they may always use the bot. Empty users and groups lists
// let every Nextcloud user in.
func (s *Store) Decide(uid string, groups []string, nextcloudAdmin bool) (allowed, admin bool) {
	s.mu.RLock()
	a := s.current.Access
	s.mu.RUnlock()
	inAny := func(list []string) bool {
		for _, g := range groups {
			if slices.Contains(list, g) {
				return true
			}
		}
		return false
	}
	admin = nextcloudAdmin || slices.Contains(a.AdminUsers, uid) || inAny(a.AdminGroups)
	open := len(a.Users) == 0 && len(a.Groups) == 0
	allowed = admin || open || slices.Contains(a.Users, uid) || inAny(a.Groups)
	return allowed, admin
}

// DailyTokenBudget is the per-user budget in effect now (0: none).
func (s *Store) DailyTokenBudget() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.current.Brain.DailyTokenBudget
}

// UsageSince sums a user's model usage; *usage.Store implements it.
type UsageSince interface {
	Since(ctx context.Context, uid string, since time.Time) (usage.Totals, error)
}

// Budget refuses new agent work of a user who used up the daily token budget.
type Budget struct {
	settings *Store
	usage    UsageSince
	clock    func() time.Time
}

// NewBudget returns a Budget over the settings and the usage records.
func NewBudget(s *Store, u UsageSince, clock func() time.Time) *Budget {
	if clock == nil {
		clock = time.Now
	}
	return &Budget{settings: s, usage: u, clock: clock}
}

// Tokens counts what the budget measures: every token sent to and received from the
// model, cached ones included (as !usage shows them).
func Tokens(t usage.Totals) int64 {
	return t.InputTokens + t.CacheRead + t.CacheCreation + t.OutputTokens
}

// Refusal returns the answer for a user over budget today (midnight in their own
// timezone), or "" when they may go on.
func (b *Budget) Refusal(ctx context.Context, uid, timezone string) (string, error) {
	limit := b.settings.DailyTokenBudget()
	if limit <= 0 {
		return "", nil
	}
	loc, err := time.LoadLocation(timezone)
	if err != nil || timezone == "" {
		loc = time.UTC
	}
	now := b.clock().In(loc)
	midnight := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, loc)
	t, err := b.usage.Since(ctx, uid, midnight)
	if err != nil {
		return "", fmt.Errorf("settings: token budget of %s: %w", uid, err)
	}
	used := Tokens(t)
	if used < limit {
		return "", nil
	}
	return fmt.Sprintf("You have used your daily budget of %d model tokens (%d so far today). It starts again at midnight (%s); until then I cannot take new requests. Your administrator can change the budget.",
		limit, used, loc.String()), nil
}
