package gateway

import (
	"context"

	"github.com/sandgate/sandgate/runtimes"
)

// ActionPublish is the access-policy action of creating a sandbox with
// extensions["access.public"] = "true": its workload ports then answer anyone. The
// default policy grants it to tenant-admins and admins, not to members.
const ActionPublish = "sandbox.publish"

// authorizePublic asks the access policy whether caller may create a public sandbox,
// when the request asks for one.
func (s *Service) authorizePublic(ctx context.Context, caller Caller, extensions map[string]string) error {
	if extensions[ExtensionPublic] != "true" {
		return nil
	}
	return s.Authorize(ctx, caller, ActionPublish, Resource{Kind: "sandbox", Tenant: caller.Tenant},
		"POST", "/v1/sandboxes", map[string]any{"extensions": map[string]string{ExtensionPublic: "true"}})
}

// platformPort reports whether port is one of sandgate's own inside the sandbox (the
// agent, the egress enforcer): public access never covers them, whatever the policy.
func platformPort(port int) bool {
	return port == runtimes.AgentPort || port == runtimes.EgressPort
}
