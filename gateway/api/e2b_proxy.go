package api

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
)

// Header routing of the E2B door. E2B's SDKs, given E2B_SANDBOX_URL, send every call
// into a sandbox to that one URL and name the target in headers: E2b-Sandbox-Id and
// E2b-Sandbox-Port. Port 49983 is envd and port 49999 the code interpreter, which the
// sandbox's agent serves under /envd and /e2b-code on its own port; any other port is
// the sandbox's port itself, as a preview reaches it. The SDKs' credentials are the sandbox's derived tokens (e2b_tokens.go), checked
// here and never forwarded: the agent is then called as every proxied agent call is,
// signed with the agent's own token below the proxy.

// Headers of a header-routed call, canonical.
var (
	headerE2BSandboxID    = http.CanonicalHeaderKey("E2b-Sandbox-Id")
	headerE2BSandboxPort  = http.CanonicalHeaderKey("E2b-Sandbox-Port")
	headerE2BAccessToken  = http.CanonicalHeaderKey("X-Access-Token")
	headerE2BTrafficToken = http.CanonicalHeaderKey("E2B-Traffic-Access-Token")
)

// e2bSandboxCallPattern names header-routed calls where a route pattern would be (logs,
// traces).
const e2bSandboxCallPattern = "E2b-Sandbox-Id"

// Ports of E2B's SDKs that the sandbox's agent serves, each under a path of its own on
// the agent's port: envd (the e2b SDKs) and the code interpreter (the
// e2b-code-interpreter SDKs).
const (
	e2bEnvdPort            = 49983
	e2bCodeInterpreterPort = 49999
)

// e2bAgentPaths maps those ports to where the agent serves them.
var e2bAgentPaths = map[int]string{
	e2bEnvdPort:            "/envd",
	e2bCodeInterpreterPort: "/e2b-code",
}

// serveE2BSandboxCall serves a request that names a sandbox, in E2b-Sandbox-Id and
// E2b-Sandbox-Port or in its host (e2bHost), by id and port: the token the port needs
// (or a signed file URL's signature) is checked, the door's headers and signature
// parameters are removed, and the request goes the proxy's way (proxyAs) with a
// credential bound to that sandbox.
func (h *Handler) serveE2BSandboxCall(w http.ResponseWriter, r *http.Request, id, port string) {
	r.Pattern = e2bSandboxCallPattern
	r = withE2BMark(r, e2bMark{shape: e2bSandboxCall, sandbox: id})
	sb, grant, portStr, rest, err := h.e2bAuthorize(r, id, port)
	for _, hdr := range []string{headerE2BSandboxID, headerE2BSandboxPort, headerE2BAccessToken, headerE2BTrafficToken} {
		delete(r.Header, hdr)
	}
	stripE2BFileSignature(r)
	if err == nil && sb.State == gateway.StatePaused && sb.Extensions[e2bExtAutoResume] == "true" {
		err = h.e2bAutoResume(r, sb)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.proxyAs(w, r, id, portStr, "/", rest, &grant)
}

// e2bExtAutoResume ("true") is the extension in which the door records E2B's
// autoResume: a call into the sandbox while it is paused resumes it.
const e2bExtAutoResume = "e2b.autoResume"

// e2bAutoResume resumes sb, paused, for a call into it that its token opened, gives it
// E2B's default timeout again, and waits (a moment at most) until the proxy routes to
// it as Running. A resume another call made first is as good.
func (h *Handler) e2bAutoResume(r *http.Request, sb *gateway.SandboxRecord) error {
	owner := principal.Caller{Tenant: sb.Tenant, KeyID: e2bAutoResumeKeyID}
	if err := h.svc.Resume(r.Context(), owner, sb.ID); err != nil {
		if e, ok := gateway.ErrorOf(err); !ok || e.Kind != gateway.KindConflict {
			return err
		}
	}
	if timeout, err := h.e2bTimeout(nil); err == nil && sb.ExpiresAt != nil {
		if _, err := h.svc.Renew(r.Context(), owner, sb.ID, time.Now().Add(time.Duration(timeout)*time.Second)); err != nil {
			return err
		}
	}
	for deadline := time.Now().Add(2 * time.Second); ; {
		cur, err := h.svc.Route(r.Context(), sb.ID)
		if err != nil || cur.State == gateway.StateRunning || time.Now().After(deadline) {
			return err
		}
		if err := e2bSleep(r.Context()); err != nil {
			return err
		}
	}
}

// e2bAutoResumeKeyID names, in the sandbox's events, the resume a call made.
const e2bAutoResumeKeyID = "e2b-auto-resume"

// e2bAuthorize checks a request's token against the sandbox it names, on port:
// envd wants X-Access-Token, the envd token, or for /files without it a signed file
// URL made with that token (e2b_signature.go); the sandbox's other ports want
// E2B-Traffic-Access-Token, the traffic token, or the envd token (E2B's code
// interpreter SDK sends whichever it has), and the sandbox's own ports nothing when
// they are public. The code interpreter is served by the agent but, as in E2B, is
// opened by either token (its SDKs send only the traffic token on some calls), never
// by being public. It answers the credential the access policy then judges, the
// upstream port and the escaped path to send there, with the sandbox's record. The agent's and the enforcer's
// own ports are never reached this way.
func (h *Handler) e2bAuthorize(r *http.Request, id, portStr string) (*gateway.SandboxRecord, access.ProxyAccess, string, string, error) {
	var none access.ProxyAccess
	port, err := gateway.ParsePort(portStr)
	if err != nil {
		return nil, none, "", "", err
	}
	if port == agentproto.AgentPort || port == agentproto.EgressPort {
		return nil, none, "", "", gateway.Errorf(gateway.KindForbidden, gateway.CodeForbidden, "port %d of a sandbox is not reachable through the E2B door", port)
	}
	if _, err := uuid.Parse(id); err != nil {
		return nil, none, "", "", gateway.Errorf(gateway.KindNotFound, gateway.CodeNotFound, "sandbox %s not found", id)
	}
	sb, err := h.svc.Route(r.Context(), id)
	if err != nil {
		return nil, none, "", "", err
	}
	grant := access.ProxyAccess{Kind: principal.CredSandboxToken, Sandbox: sb.ID}
	envdToken, trafficToken := r.Header.Get(headerE2BAccessToken), r.Header.Get(headerE2BTrafficToken)
	envdOK := e2bTokenMatches(sb, e2bPurposeEnvd, envdToken)
	trafficOK := e2bTokenMatches(sb, e2bPurposeTraffic, trafficToken)
	upstreamPort, rest := strconv.Itoa(port), r.URL.EscapedPath()
	if prefix, ok := e2bAgentPaths[port]; ok {
		upstreamPort, rest = strconv.Itoa(agentproto.AgentPort), prefix+rest
	}
	switch {
	case port == e2bEnvdPort && envdToken == "" && r.URL.Query().Has(e2bSignatureParam):
		if err := e2bCheckFileSignature(r, sb, time.Now()); err != nil {
			return nil, none, "", "", err
		}
		r.Header.Del("Authorization") // the signature names the user (?username=)
	case port == e2bEnvdPort:
		if !envdOK {
			return nil, none, "", "", e2bTokenRefused(sb.ID, envdToken)
		}
	case envdOK || trafficOK:
	case port != e2bCodeInterpreterPort && sb.Extensions[access.ExtensionPublic] == "true" && envdToken == "" && trafficToken == "":
		grant = access.ProxyAccess{Kind: principal.CredAnonymous}
	default:
		return nil, none, "", "", e2bTokenRefused(sb.ID, envdToken+trafficToken)
	}
	return sb, grant, upstreamPort, rest, nil
}

// e2bTokenRefused is the answer to a missing or wrong token (got is what the request
// carried): 401 without one, 403 with a wrong one, as E2B answers.
func e2bTokenRefused(id, got string) error {
	if got == "" {
		return gateway.Errorf(gateway.KindUnauthenticated, gateway.CodeMissingAPIKey, "sandbox %s needs the token its create answered (X-Access-Token, or E2B-Traffic-Access-Token for its ports)", id)
	}
	return gateway.Errorf(gateway.KindForbidden, gateway.CodeForbidden, "the token is not valid for this port of sandbox %s", id)
}

// e2bHost parses E2B's host form, {port}-{id}.<preview domain>[:port], the host its
// SDKs' get_host() and file URLs name once the create answers the preview domain as
// the sandbox's domain. The port is one to five digits and the id a canonical UUID, so
// a host-mode preview's {id}-{port} label never parses as this form (its first dash
// follows the id's eight hex digits, this form's the port's five digits at most), and the two
// forms share one wildcard name and certificate.
func (h *Handler) e2bHost(host string) (id, port string, ok bool) {
	domain := h.svc.Config().PreviewDomain
	if h.e2b == nil || domain == "" {
		return "", "", false
	}
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	label, rest, found := strings.Cut(strings.ToLower(host), ".")
	if !found || rest != strings.ToLower(strings.TrimSuffix(domain, ".")) {
		return "", "", false
	}
	port, id, found = strings.Cut(label, "-")
	if !found || len(port) == 0 || len(port) > 5 || strings.Trim(port, "0123456789") != "" {
		return "", "", false
	}
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		return "", "", false
	}
	return id, port, true
}
