package gateway

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
	"github.com/sandgate/sandgate/policy"
)

// Key roles (package principal's).
const (
	RoleAdmin       = principal.RoleAdmin
	RoleTenantAdmin = principal.RoleTenantAdmin
	RoleMember      = principal.RoleMember
	RoleViewer      = principal.RoleViewer
)

// Resource names what an action is about, for the access policy.
type Resource struct {
	Kind   string
	ID     string
	Tenant string
}

// Authorize asks the Rego access policy whether caller may do action on res. A resource
// of another tenant is reported as not found, never as forbidden. Every decision goes
// to the tenant's audit stream with its id and input hash.
func (s *Service) Authorize(ctx context.Context, caller Caller, action string, res Resource, method, path string, body any) error {
	in := policy.AccessInput{
		Principal: policy.Principal{Kind: principal.CredentialOf(ctx), ID: caller.KeyID, Tenant: caller.Tenant, Role: caller.Role()},
		Tenant:    caller.Tenant,
		Action:    action,
		Resource:  policy.Resource{Kind: res.Kind, ID: res.ID, Tenant: res.Tenant},
		Request:   policy.Request{Method: method, Path: path, Body: body},
	}
	start := time.Now()
	d := s.policy.Access(ctx, in)
	s.metrics.PolicyDecision(metrics.PolicyAccess, d.Allow, start)
	s.logDecision(caller.Tenant, action, d)
	if d.Allow {
		return nil
	}
	if d.Outcome() == policy.Hidden {
		return Errorf(KindNotFound, d.Code, "not found")
	}
	if d.Code == policy.CodeEvaluationFailed {
		s.log.Error("access policy failed; denying", "decision", d)
	}
	return decisionError(d)
}

// logDecision queues a policy decision for the audit stream (batched, off the request path).
func (s *Service) logDecision(tenant, action string, d policy.Decision) {
	typ := "policy.decision"
	if !d.Allow {
		typ = plugins.EventPolicyDenied
	}
	ev := store.Event{Type: typ, Tenant: tenant, Time: time.Now().UTC(), Data: map[string]any{
		"action": action, "allow": d.Allow, "code": d.Code, "message": d.Message,
		"decisionId": d.DecisionID, "inputHash": d.InputHash, "policyVersion": d.PolicyVersion,
	}}
	s.eventLog.Queue(ev)
}
