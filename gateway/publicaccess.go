package gateway

import (
	"context"

	"github.com/sandgate/sandgate/gateway/access"
)

// ActionPublish is the access-policy action of creating a sandbox with
// extensions["access.public"] = "true": its workload ports then answer anyone. The
// default policy grants it to tenant-admins and admins, not to members.
const ActionPublish = "sandbox.publish"

// authorizePublic asks the access policy whether caller may create a public sandbox,
// when the request asks for one.
func (s *Service) authorizePublic(ctx context.Context, caller Caller, extensions map[string]string) error {
	if extensions[access.ExtensionPublic] != "true" {
		return nil
	}
	return s.Authorize(ctx, caller, ActionPublish, Resource{Kind: "sandbox", Tenant: caller.Tenant},
		"POST", "/v1/sandboxes", map[string]any{"extensions": map[string]string{access.ExtensionPublic: "true"}})
}
