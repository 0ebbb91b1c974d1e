package approval

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// KindNetwork is the Action.Kind of a connection the network proxy asks about.
const KindNetwork = "network"

// NormalizeHost is the form hosts are stored and compared in: lower case, without a
// trailing dot or IPv6 brackets.
func NormalizeHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}

// KnownHost reports whether uid has approved an action that reaches host before (any
// task, any port): a connection to it is no longer a new host.
func (s *Service) KnownHost(ctx context.Context, uid, host string) (bool, error) {
	var one int
	err := s.db.Read.QueryRowContext(ctx, `SELECT 1 FROM approvals
		WHERE user_id = ? AND host = ? AND status = 'approved' LIMIT 1`, uid, NormalizeHost(host)).Scan(&one)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	default:
		return false, fmt.Errorf("approval: known host %s: %w", host, err)
	}
}

// CheckHost decides whether who may open a connection to host:port, which the admin's
// network allowlist already permits. Reaching a host is an external action: when that
// tier allows, it may; when it denies, it may not; when it asks, a host the user has
// approved before (for any action) may be reached, and a new one is asked about once.
func (s *Service) CheckHost(ctx context.Context, who Who, host string, port uint16) (Outcome, error) {
	host = NormalizeHost(host)
	pols, err := s.Effective(ctx, who.UserID)
	if err != nil {
		return Outcome{}, err
	}
	a := Action{
		Tier:    TierExternal,
		Kind:    KindNetwork,
		Name:    "connect " + host,
		Summary: fmt.Sprintf("Connect to %s (a host not reached for you before)", net.JoinHostPort(host, strconv.Itoa(int(port)))),
		Input:   []byte(host),
		Host:    host,
	}
	if pols.For(TierExternal) == Ask {
		known, err := s.KnownHost(ctx, who.UserID, host)
		if err != nil {
			return Outcome{}, err
		}
		if known {
			return Outcome{Allowed: true}, nil
		}
	}
	return s.Check(ctx, who, a)
}
