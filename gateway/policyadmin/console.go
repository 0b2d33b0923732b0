package policyadmin

import (
	"context"
	"strings"

	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/policy"
)

// ConsoleActions are the actions the console asks about to show or hide its controls.
var ConsoleActions = []string{
	"sandbox.create", "sandbox.list", "sandbox.get", "sandbox.update", "sandbox.delete", "sandbox.proxy",
	"pool.create", "pool.list", "pool.update", "pool.delete",
	"batch.create", "batch.get", "batch.delete",
	"plugin.list", "plugin.update", "plugin.delete",
	"audit.read", "tenant.list", "tenant.create", "tenant.update", "key.list", "key.create", "key.delete",
	"policy.read", "policy.write",
}

// Can evaluates the access policy for each action on the caller's own tenant, without
// recording the decisions (they are questions, not requests).
func (m *Manager) Can(ctx context.Context, caller principal.Caller, actions []string) map[string]bool {
	out := make(map[string]bool, len(actions))
	for _, action := range actions {
		area, _, _ := strings.Cut(action, ".")
		res := policy.Resource{Kind: area, Tenant: caller.Tenant}
		if area == "tenant" || area == "key" {
			res.ID = caller.Tenant
		}
		if action == "tenant.list" || action == "tenant.create" {
			res = policy.Resource{Kind: "tenant"}
		}
		d := m.engine.Access(ctx, policy.AccessInput{
			Principal: policy.Principal{Kind: principal.CredentialOf(ctx), ID: caller.KeyID, Tenant: caller.Tenant, Role: caller.Role()},
			Tenant:    caller.Tenant, Action: action, Resource: res,
		})
		out[action] = d.Allow
	}
	return out
}
