package access

import (
	"context"
	"strings"
	"time"

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

// Presented says which credential a proxied request carried, as gateway/api found
// it: the first present in the order the constants are declared in wins, whether or
// not it turns out valid (a wrong API key is refused, not passed over for a cookie),
// but for preview cookies, of which every one is tried.
type Presented int

// The forms a proxied request's credential takes, strongest first.
const (
	// PresentedNone: no credential; the request is anonymous.
	PresentedNone Presented = iota
	// PresentedEstablished: the door established it already (the console's session,
	// the E2B door's sandbox tokens): Credential.Established.
	PresentedEstablished
	// PresentedAPIKey: an API key header (or Authorization: Bearer).
	PresentedAPIKey
	// PresentedToken: a sandbox token header; its value is an access value of the
	// sandbox or, from the SDKs' server-proxy mode, an API key.
	PresentedToken
	// PresentedPathToken: a preview token in a path-mode URL (/_sandgate/{token}/…).
	PresentedPathToken
	// PresentedLink: a signed link's token in the query.
	PresentedLink
	// PresentedCookies: preview cookies (Credential.Cookies).
	PresentedCookies
)

// Credential is the credential a proxied request presented.
type Credential struct {
	Form Presented
	// Value is the API key, token header, path token or link token.
	Value string
	// Cookies are the values of the request's preview cookies.
	Cookies []string
	// CookieOrigin is the answer to a request that a preview cookie authenticates when
	// its origin is not the preview's (the HTTP layer's check of Origin and Fetch
	// Metadata); nil admits it.
	CookieOrigin error
	// Established is the credential a door checked itself (PresentedEstablished).
	Established *ProxyAccess
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

// VerifyCredential checks the credential a proxied request presented against sandbox
// sb and port, and answers it as AuthorizeProxy judges it (with a signed link's
// expiry). An API key is resolved through the host; what a request without any valid
// credential gets is the anonymous one.
func (m *Manager) VerifyCredential(ctx context.Context, sb *store.Sandbox, port int, c Credential) (ProxyAccess, time.Time, error) {
	switch c.Form {
	case PresentedEstablished:
		return *c.Established, time.Time{}, nil
	case PresentedAPIKey:
		caller, err := m.host.Authenticate(ctx, c.Value)
		if err != nil {
			return ProxyAccess{}, time.Time{}, err
		}
		return ProxyAccess{Kind: principal.CredAPIKey, Caller: &caller}, time.Time{}, nil
	case PresentedToken:
		if strings.HasPrefix(c.Value, AccessValuePrefix) {
			if err := m.VerifyAccessValue(ctx, sb, c.Value); err != nil {
				return ProxyAccess{}, time.Time{}, err
			}
			return ProxyAccess{Kind: principal.CredSandboxToken, Sandbox: sb.ID}, time.Time{}, nil
		}
		// The SDKs' server-proxy mode puts the tenant's API key in these headers.
		if caller, err := m.host.Authenticate(ctx, c.Value); err == nil {
			return ProxyAccess{Kind: principal.CredAPIKey, Caller: &caller}, time.Time{}, nil
		}
		return ProxyAccess{}, time.Time{}, fault.Errorf(fault.KindForbidden, fault.CodeForbidden, "the access token is not valid for sandbox %s", sb.ID)
	case PresentedPathToken:
		if err := m.VerifyCookie(ctx, c.Value, sb.ID, port); err != nil {
			return ProxyAccess{}, time.Time{}, err
		}
		return ProxyAccess{Kind: principal.CredCookie, Sandbox: sb.ID, Port: port}, time.Time{}, nil
	case PresentedLink:
		exp, err := m.VerifyLink(ctx, c.Value, sb.ID, port)
		if err != nil {
			return ProxyAccess{}, time.Time{}, err
		}
		return ProxyAccess{Kind: principal.CredSignedLink, Sandbox: sb.ID, Port: port}, exp, nil
	case PresentedCookies:
		// Every preview cookie is tried: one that another preview planted under the
		// same name cannot shadow this preview's own.
		for _, v := range c.Cookies {
			if v == "" || m.VerifyCookie(ctx, v, sb.ID, port) != nil {
				continue
			}
			if c.CookieOrigin != nil {
				return ProxyAccess{}, time.Time{}, c.CookieOrigin
			}
			return ProxyAccess{Kind: principal.CredCookie, Sandbox: sb.ID, Port: port}, time.Time{}, nil
		}
	}
	// The console session is never a credential here: a preview page on this origin
	// would otherwise act with it. The console reaches sandboxes through its own route.
	return ProxyAccess{Kind: principal.CredAnonymous}, time.Time{}, nil
}

// IsAPIKey reports whether key is an API key of this gateway.
func (m *Manager) IsAPIKey(ctx context.Context, key string) bool {
	_, err := m.host.Authenticate(ctx, key)
	return err == nil
}
