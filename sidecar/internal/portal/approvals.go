package portal

import (
	"context"
	"errors"
	"time"

	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/store"
)

// Approvals is the personal page's approvals section: questions that wait for the
// user, the latest answered ones (the audit trail), and the policies per risk tier.
type Approvals struct {
	Pending        []approval.Request `json:"pending"`
	Recent         []approval.Request `json:"recent"`
	Policies       ApprovalPolicies   `json:"policies"`
	TimeoutSeconds int                `json:"timeout_seconds"`
}

// ApprovalPolicies are the admin's defaults, the user's own choices ("" follows the
// admin) and what applies.
type ApprovalPolicies struct {
	Admin     approval.Policies `json:"admin"`
	User      approval.Policies `json:"user"`
	Effective approval.Policies `json:"effective"`
}

func (s *Service) approvals() (*approval.Service, error) {
	if s.o.Approvals == nil {
		return nil, &Error{Kind: KindUnavailable, Message: "approvals are not available"}
	}
	return s.o.Approvals, nil
}

// Approvals returns uid's approvals section.
func (s *Service) Approvals(ctx context.Context, uid string) (Approvals, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return Approvals{}, err
	}
	a, err := s.approvals()
	if err != nil {
		return Approvals{}, err
	}
	pending, err := a.Pending(ctx, uid)
	if err != nil {
		return Approvals{}, err
	}
	recent, err := a.Recent(ctx, uid, 20)
	if err != nil {
		return Approvals{}, err
	}
	pols, err := s.approvalPolicies(ctx, a, uid)
	if err != nil {
		return Approvals{}, err
	}
	return Approvals{Pending: pending, Recent: recent, Policies: pols, TimeoutSeconds: int(a.Timeout() / time.Second)}, nil
}

func (s *Service) approvalPolicies(ctx context.Context, a *approval.Service, uid string) (ApprovalPolicies, error) {
	user, err := a.UserPolicies(ctx, uid)
	if err != nil {
		return ApprovalPolicies{}, err
	}
	admin := a.Defaults()
	return ApprovalPolicies{Admin: admin, User: user, Effective: admin.Tighten(user)}, nil
}

// DecideApproval answers question id as uid, who must be the user it asks.
func (s *Service) DecideApproval(ctx context.Context, uid string, id int64, approve bool) (approval.Request, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return approval.Request{}, err
	}
	a, err := s.approvals()
	if err != nil {
		return approval.Request{}, err
	}
	r, err := a.Decide(ctx, id, uid, approve, approval.ViaPage)
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, approval.ErrNotYours):
		// Someone else's question does not exist for this user.
		return approval.Request{}, notFound("approval")
	case errors.Is(err, approval.ErrDecided):
		return approval.Request{}, &Error{Kind: KindConflict, Message: "this question was already answered, has expired or was cancelled"}
	case err != nil:
		return approval.Request{}, err
	}
	s.o.Logger.Info("question answered on the settings page", "approval_id", id, "user_id", uid, "status", r.Status)
	return r, nil
}

// SaveApprovalPolicies stores uid's own policies; they may only be stricter than the
// admin's.
func (s *Service) SaveApprovalPolicies(ctx context.Context, uid string, p approval.Policies) (ApprovalPolicies, error) {
	if _, err := s.Authorize(ctx, uid); err != nil {
		return ApprovalPolicies{}, err
	}
	a, err := s.approvals()
	if err != nil {
		return ApprovalPolicies{}, err
	}
	var pe *approval.PolicyError
	if err := a.SetUserPolicies(ctx, uid, p); errors.As(err, &pe) {
		return ApprovalPolicies{}, &Error{Kind: KindInvalidSettings, Message: "a policy may only be stricter than the administrator's", Fields: pe.Fields}
	} else if err != nil {
		return ApprovalPolicies{}, err
	}
	return s.approvalPolicies(ctx, a, uid)
}
