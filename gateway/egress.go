package gateway

import (
	"context"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// egressSpec decides, through the Rego egress policy, the rules a new sandbox starts with.
// TODO(egress integration): not wired yet; sandboxes start without an enforcer.
func (s *Service) egressSpec(ctx context.Context, caller Caller, id string, req CreateRequest) (*runtimes.EgressSpec, error) {
	return nil, nil
}

// bindClaimEgress pushes a claim's networkPolicy to a warm sandbox's enforcer.
// TODO(egress integration): not wired yet.
func (s *Service) bindClaimEgress(ctx context.Context, caller Caller, sb *store.Sandbox, req CreateRequest) error {
	return nil
}
