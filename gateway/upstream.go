package gateway

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/egress"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
)

// The data plane's one core call. A request for a port of a sandbox (path mode, host
// mode, the console's route, the E2B door's header and host forms, WebSockets alike)
// is parsed by the HTTP layer into an UpstreamRequest; OpenUpstream decides, in one
// fixed order, whether and where it goes; the HTTP layer then answers or forwards as
// the Upstream says and ends it with Upstream.Release.

// Presented says which credential a proxied request carried, as the HTTP layer found
// it: the first present in the order the constants are declared in wins, whether or not
// it turns out valid (a wrong API key is refused, not passed over for a cookie), but
// for preview cookies, of which every one is tried.
type Presented int

// The forms a proxied request's credential takes, strongest first.
const (
	// PresentedNone: no credential; the request is anonymous.
	PresentedNone Presented = iota
	// PresentedEstablished: the door established it already (the console's session,
	// the E2B door's sandbox tokens): UpstreamCredential.Established.
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
	// PresentedCookies: preview cookies (UpstreamCredential.Cookies).
	PresentedCookies
)

// UpstreamCredential is the credential a proxied request presented.
type UpstreamCredential struct {
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
	Established *access.ProxyAccess
}

// UpstreamRequest is one proxied request as the core judges it.
type UpstreamRequest struct {
	// Sandbox is the id the request names, unchecked.
	Sandbox string
	// Port is the sandbox port it is for (gateway.ParsePort's).
	Port int
	// Method is the request's method; Path is the escaped path to send upstream.
	Method, Path string
	Credential   UpstreamCredential
	// Bearer is the token of the request's Authorization: Bearer header, if any: the
	// header is the sandbox's own unless the token is an API key of this gateway.
	Bearer string
}

// EgressAPI names which of the gateway's own answers a request to the egress
// enforcer's port gets instead of being forwarded.
type EgressAPI int

const (
	// EgressForward: forwarded to the enforcer without any credential (/healthz …).
	EgressForward EgressAPI = iota
	// EgressPolicy: /policy, read or changed through the egress feature.
	EgressPolicy
	// EgressVault: /credential-vault…, through the egress feature's vault.
	EgressVault
)

// Upstream is where an opened request goes, and what it must carry there.
type Upstream struct {
	// Sandbox is the record the request was routed to (after a wake, the woken one).
	Sandbox *store.Sandbox
	// Port is the sandbox port; Address the "ip:port" to forward to.
	Port    int
	Address string
	// Access is the credential as judged: its kind and, for a key or a session, the
	// caller.
	Access access.ProxyAccess
	// LinkCookie, when set, is the preview cookie a signed link's GET or HEAD is
	// traded for (expiring at LinkExpires): the request is answered with it and a
	// redirect, never forwarded.
	LinkCookie  string
	LinkExpires time.Time
	// Egress is what a request to the enforcer's port gets (EgressForward for every
	// other port), and EgressPath the enforcer's path it names.
	Egress     EgressAPI
	EgressPath string
	// AgentToken, for the agent's port, is the token the forwarded request is signed
	// with below the proxy (never in the request itself).
	AgentToken string
	// DropAuthorization says the request's Authorization header holds an API key of
	// this gateway (UpstreamRequest.Bearer), which never reaches a sandbox.
	DropAuthorization bool

	svc     *Service
	opened  time.Time
	release func()
}

// UpstreamAnswer is what came back from a forwarded request, for its access record.
type UpstreamAnswer struct {
	// Path is the decoded path sent upstream.
	Path   string
	Status int
	Bytes  int64
}

// OpenUpstream decides whether and where a proxied request goes, in this order: the
// sandbox's route (unknown ids are not found), the credential (an API key resolved, an
// access value, token, link or cookie verified against the sandbox and port), the Rego
// access decision, a signed link's exchange for a cookie (answered without waking the
// sandbox), the idle wake, a claimed member's late bindings, Failed and not-Running
// sandboxes refused, the egress enforcer's own APIs, and whether the Authorization
// header is the gateway's to drop. A nil error gives an Upstream the
// caller must Release once the request is done.
func (s *Service) OpenUpstream(ctx context.Context, req UpstreamRequest) (*Upstream, error) {
	if _, err := uuid.Parse(req.Sandbox); err != nil {
		return nil, notFound(req.Sandbox)
	}
	sb, err := s.Route(ctx, req.Sandbox)
	if err != nil {
		return nil, err
	}
	granted, linkExp, err := s.proxyCredential(ctx, sb, req.Port, req.Credential)
	if err != nil {
		return nil, err
	}
	granted.Method, granted.Path = req.Method, req.Path
	if err := s.access.AuthorizeProxy(ctx, sb, req.Port, granted); err != nil {
		return nil, err
	}
	up := &Upstream{Sandbox: sb, Port: req.Port, Access: granted, svc: s}
	if granted.Kind == principal.CredSignedLink && (req.Method == "GET" || req.Method == "HEAD") {
		up.LinkCookie, err = s.access.SessionCookie(ctx, sb.ID, req.Port, linkExp)
		if err != nil {
			return nil, err
		}
		up.LinkExpires = linkExp
		return up, nil
	}
	sb, release, err := s.state.WakeForAccess(ctx, sb) // idle pause: resume on use
	if err != nil {
		return nil, err
	}
	// A claimed pool member's late bindings (env, egress policy…) hold from its first
	// call: the call waits for them; a member that died after its claim answers
	// SANDBOX::UNAVAILABLE (latebind.go).
	if err := beforeAgentCall(ctx, s.pool, sb); err != nil {
		release()
		return nil, err
	}
	if err := FailedError(sb); err != nil {
		release()
		return nil, err
	}
	if sb.State != StateRunning || sb.Address == "" {
		release()
		return nil, Errorf(KindUnavailable, CodeNotRunning, "sandbox %s is %s; its ports answer only while it is Running", req.Sandbox, sb.State)
	}
	up.Sandbox, up.release = sb, release
	switch req.Port {
	case agentproto.EgressPort:
		up.Egress, up.EgressPath = egressAPI(req.Method, req.Path)
	case agentproto.AgentPort:
		up.AgentToken = sb.AgentCredential()
	}
	if req.Bearer != "" && up.Egress == EgressForward {
		up.DropAuthorization = (granted.Kind == principal.CredAPIKey && req.Credential.Value == req.Bearer) || s.isAPIKey(ctx, req.Bearer)
	}
	up.Address = net.JoinHostPort(sb.Address, strconv.Itoa(req.Port))
	up.opened = time.Now()
	return up, nil
}

// egressAPI is which of the enforcer's APIs the gateway answers itself for a request
// by method to escaped path: the methods of neither API are forwarded.
func egressAPI(method, escaped string) (EgressAPI, string) {
	switch method {
	case "GET", "POST", "PUT", "PATCH", "DELETE":
	default:
		return EgressForward, ""
	}
	path, err := url.PathUnescape(escaped)
	if err != nil {
		path = escaped
	}
	if path == "" {
		path = "/"
	}
	switch {
	case egress.IsVaultPath(path):
		return EgressVault, path
	case path == "/policy" || path == "/policy/":
		return EgressPolicy, path
	}
	return EgressForward, path
}

// Release ends the request: a forwarded one (answer with a status) is recorded as
// the sandbox's traffic (activity, renew-on-access, the access event), and the
// sandbox may idle again. A zero answer (a request the gateway answered itself)
// records nothing.
func (u *Upstream) Release(answer UpstreamAnswer) {
	if answer.Status != 0 {
		u.svc.access.RecordAccess(u.Sandbox, access.AccessRecord{Port: u.Port, Method: u.Access.Method, Path: answer.Path, Status: answer.Status,
			Bytes: answer.Bytes, Duration: time.Since(u.opened), Credential: u.Access.Kind})
	}
	if u.release != nil {
		u.release()
	}
}

// isAPIKey reports whether key is an API key of this gateway.
func (s *Service) isAPIKey(ctx context.Context, key string) bool {
	_, err := s.Authenticate(ctx, key)
	return err == nil
}

// proxyCredential verifies the credential a request presented against sandbox sb and
// port, and answers it as the access decision sees it (with a signed link's expiry).
func (s *Service) proxyCredential(ctx context.Context, sb *store.Sandbox, port int, c UpstreamCredential) (access.ProxyAccess, time.Time, error) {
	switch c.Form {
	case PresentedEstablished:
		return *c.Established, time.Time{}, nil
	case PresentedAPIKey:
		caller, err := s.Authenticate(ctx, c.Value)
		if err != nil {
			return access.ProxyAccess{}, time.Time{}, err
		}
		return access.ProxyAccess{Kind: principal.CredAPIKey, Caller: &caller}, time.Time{}, nil
	case PresentedToken:
		if strings.HasPrefix(c.Value, access.AccessValuePrefix) {
			if err := s.access.VerifyAccessValue(ctx, sb, c.Value); err != nil {
				return access.ProxyAccess{}, time.Time{}, err
			}
			return access.ProxyAccess{Kind: principal.CredSandboxToken, Sandbox: sb.ID}, time.Time{}, nil
		}
		// The SDKs' server-proxy mode puts the tenant's API key in these headers.
		if caller, err := s.Authenticate(ctx, c.Value); err == nil {
			return access.ProxyAccess{Kind: principal.CredAPIKey, Caller: &caller}, time.Time{}, nil
		}
		return access.ProxyAccess{}, time.Time{}, Errorf(KindForbidden, CodeForbidden, "the access token is not valid for sandbox %s", sb.ID)
	case PresentedPathToken:
		if err := s.access.VerifyCookie(ctx, c.Value, sb.ID, port); err != nil {
			return access.ProxyAccess{}, time.Time{}, err
		}
		return access.ProxyAccess{Kind: principal.CredCookie, Sandbox: sb.ID, Port: port}, time.Time{}, nil
	case PresentedLink:
		exp, err := s.access.VerifyLink(ctx, c.Value, sb.ID, port)
		if err != nil {
			return access.ProxyAccess{}, time.Time{}, err
		}
		return access.ProxyAccess{Kind: principal.CredSignedLink, Sandbox: sb.ID, Port: port}, exp, nil
	case PresentedCookies:
		// Every preview cookie is tried: one that another preview planted under the
		// same name cannot shadow this preview's own.
		for _, v := range c.Cookies {
			if v == "" || s.access.VerifyCookie(ctx, v, sb.ID, port) != nil {
				continue
			}
			if c.CookieOrigin != nil {
				return access.ProxyAccess{}, time.Time{}, c.CookieOrigin
			}
			return access.ProxyAccess{Kind: principal.CredCookie, Sandbox: sb.ID, Port: port}, time.Time{}, nil
		}
	}
	// The console session is never a credential here: a preview page on this origin
	// would otherwise act with it. The console reaches sandboxes through its own route.
	return access.ProxyAccess{Kind: principal.CredAnonymous}, time.Time{}, nil
}
