package access

import (
	"context"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
)

// ProxyAccess describes one proxied request for the access decision.
type ProxyAccess struct {
	// Kind is the credential the request carried (principal.CredAPIKey …).
	Kind string
	// Caller is set for an API key or a console session.
	Caller *principal.Caller
	// Sandbox and Port are what a token, link or cookie is bound to.
	Sandbox string
	Port    int
	Method  string
	Path    string
}

// AuthorizeProxy asks the Rego access policy whether the request may reach port of sb.
// Another tenant's key gets the same 404 as a sandbox that does not exist.
func (m *Manager) AuthorizeProxy(ctx context.Context, sb *store.Sandbox, port int, a ProxyAccess) error {
	in := policy.AccessInput{
		Action:   "sandbox.proxy",
		Tenant:   sb.Tenant,
		Resource: policy.Resource{Kind: "sandbox", ID: sb.ID, Tenant: sb.Tenant, Public: sb.Extensions[ExtensionPublic] == "true" && !platformPort(port), Port: port},
		Request:  policy.Request{Method: a.Method, Path: a.Path},
	}
	in.Principal = policy.Principal{Kind: a.Kind, Sandbox: a.Sandbox, Port: a.Port}
	if a.Caller != nil {
		in.Principal.ID = a.Caller.KeyID
		in.Principal.Tenant = a.Caller.Tenant
		in.Principal.Role = a.Caller.Role()
	}
	// Asked on every proxied request, and only a denial is logged: an allow from the
	// cache comes without the decision's id and input hash (policy.Engine.CheckAccess).
	d := m.policy.CheckAccess(ctx, in)
	if d.Allow {
		return nil
	}
	m.log.Info("proxy access denied", "sandbox", sb.ID, "port", port, "credential", a.Kind, "decision", d)
	switch {
	case a.Kind == principal.CredAnonymous:
		return fault.Errorf(fault.KindUnauthenticated, fault.CodeMissingAPIKey, "this sandbox port needs a credential: an API key, the sandbox's access header, or a signed link")
	case d.Outcome() == policy.Hidden:
		return fault.NotFound(sb.ID)
	}
	return fault.Errorf(fault.KindForbidden, CodeAccessDenied, "%s", d.Message)
}

// platformPort reports whether port is one of sandgate's own inside the sandbox (the
// agent, the egress enforcer): public access never covers them, whatever the policy.
func platformPort(port int) bool {
	return port == runtimes.AgentPort || port == runtimes.EgressPort
}
