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

// HostAllowedNow decides, without asking anyone, whether uid may reach host now: for a
// connection that cannot wait for an answer (a page's images and scripts while it is
// rendered). When external actions are allowed it may; when they are denied it may not;
// when they ask, only a host the user approved before may be reached. message says why
// not, in words for the agent.
func (s *Service) HostAllowedNow(ctx context.Context, uid, host string) (ok bool, message string, err error) {
	pols, err := s.Effective(ctx, uid)
	if err != nil {
		return false, "", err
	}
	switch pols.For(TierExternal) {
	case Allow:
		return true, "", nil
	case Ask:
		known, err := s.KnownHost(ctx, uid, host)
		if err != nil {
			return false, "", err
		}
		if known {
			return true, "", nil
		}
		return false, "the user has not approved reaching " + NormalizeHost(host) + " before, and a page being rendered cannot wait for the question", nil
	}
	return false, "external actions are set to deny for this user", nil
}
