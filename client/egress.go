package sandgate

import (
	"context"
	"net/http"
)

// EgressState is the enforcer's view of a sandbox's egress policy.
type EgressState struct {
	Status          string         `json:"status"`
	Mode            string         `json:"mode"` // allow_all, deny_all or enforcing
	EnforcementMode string         `json:"enforcementMode,omitempty"`
	Policy          *NetworkPolicy `json:"policy,omitempty"`
}

// Egress returns a client of the sandbox's egress enforcer.
func (c *Client) Egress(ctx context.Context, sandboxID string) (*EgressClient, error) {
	a, err := c.portClient(ctx, sandboxID, EgressPort)
	if err != nil {
		return nil, err
	}
	return &EgressClient{a: a}, nil
}

// EgressClient reads and changes the egress policy in force in one sandbox.
type EgressClient struct{ a *Agent }

// Get returns the policy in force.
func (e *EgressClient) Get(ctx context.Context) (*EgressState, error) {
	return call[EgressState](ctx, e.a, http.MethodGet, "/policy", nil, nil)
}

// Replace replaces the policy.
func (e *EgressClient) Replace(ctx context.Context, p NetworkPolicy) error {
	return e.a.do(ctx, http.MethodPut, "/policy", nil, p, nil)
}

// Patch puts rules ahead of the existing ones (a rule's target replaces its old rules).
func (e *EgressClient) Patch(ctx context.Context, rules []EgressRule) error {
	return e.a.do(ctx, http.MethodPatch, "/policy", nil, rules, nil)
}

// Remove drops the rules of targets.
func (e *EgressClient) Remove(ctx context.Context, targets []string) error {
	return e.a.do(ctx, http.MethodDelete, "/policy", nil, targets, nil)
}
