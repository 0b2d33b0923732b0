package gateway

import (
	"context"
	"net"
	"net/url"
	"strconv"
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

// UpstreamRequest is one proxied request as the core judges it.
type UpstreamRequest struct {
	// Sandbox is the id the request names, unchecked.
	Sandbox string
	// Port is the sandbox port it is for (gateway.ParsePort's).
	Port int
	// Method is the request's method; Path is the escaped path to send upstream.
	Method, Path string
	Credential   access.Credential
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
	granted, linkExp, err := s.access.VerifyCredential(ctx, sb, req.Port, req.Credential)
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
		up.DropAuthorization = (granted.Kind == principal.CredAPIKey && req.Credential.Value == req.Bearer) || s.access.IsAPIKey(ctx, req.Bearer)
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
