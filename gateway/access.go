package gateway

import (
	"context"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
)

// Credential kinds a proxied request can carry (the access policy's principal.kind).
const (
	CredAPIKey       = "api_key"
	CredSandboxToken = "sandbox_token"
	CredSignedLink   = "signed_link"
	CredCookie       = "cookie"
	CredAnonymous    = "anonymous"
)

// Extensions the access and TTL rules understand.
const (
	ExtensionPublic      = "access.public"
	ExtensionRenewExtend = "access.renew.extend.seconds"
)

// ProxyAccess describes one proxied request for the access decision.
type ProxyAccess struct {
	Kind string
	// Caller is set for an API key.
	Caller *Caller
	// Sandbox and Port are what a token, link or cookie is bound to.
	Sandbox string
	Port    int
	Method  string
	Path    string
}

// AuthorizeProxy asks the Rego access policy whether the request may reach port of sb.
// Another tenant's key gets the same 404 as a sandbox that does not exist.
func (s *Service) AuthorizeProxy(ctx context.Context, sb *store.Sandbox, port int, a ProxyAccess) error {
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
	d := s.policy.CheckAccess(ctx, in)
	if d.Allow {
		return nil
	}
	s.log.Info("proxy access denied", "sandbox", sb.ID, "port", port, "credential", a.Kind, "decision", d)
	switch {
	case a.Kind == CredAnonymous:
		return Errorf(KindUnauthenticated, CodeMissingAPIKey, "this sandbox port needs a credential: an API key, the sandbox's access header, or a signed link")
	case d.Outcome() == policy.Hidden:
		return notFound(sb.ID)
	}
	return Errorf(KindForbidden, CodeAccessDenied, "%s", d.Message)
}

// Role is the policy role of a caller's key.
func (c Caller) Role() string {
	if c.Admin {
		return "admin"
	}
	if c.KeyRole != "" {
		return c.KeyRole
	}
	return "member"
}
