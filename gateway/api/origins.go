package api

import (
	"bufio"
	"net"
	"net/http"
	"strings"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
)

// Origins. Content a sandbox serves is hostile to every other origin. Path-mode answers
// come from the API's own origin, so each one is confined to an opaque origin by CSP
// (sandboxCSP) and may not touch the cookies of the gateway's origin; the console
// reaches its sandboxes' agent and enforcer through serveConsoleProxy, the one proxy
// route that honours the console session.

// sandboxCSP makes a browser render a path-mode answer as an opaque origin: its scripts
// run, but it reads no cookie or storage of the gateway's origin, and the gateway
// refuses the session to its requests (their Origin is "null"). allow-same-origin is
// deliberately absent; an upstream's own Content-Security-Policy can only narrow this.
const sandboxCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// confineToOpaqueOrigin wraps w for an answer served on the gateway's origin from a
// sandbox: it adds sandboxCSP and, from the upstream's headers, drops what would reach
// beyond the preview's own path: cookies named like the gateway's, cookies for another
// domain, Clear-Site-Data (which would sign the console out); the preview's own cookies
// are scoped to its path prefix.
func confineToOpaqueOrigin(w http.ResponseWriter, prefix string) http.ResponseWriter {
	w.Header().Set("Content-Security-Policy", sandboxCSP)
	return &confinedWriter{ResponseWriter: w, prefix: prefix}
}

type confinedWriter struct {
	http.ResponseWriter
	prefix      string
	wroteHeader bool
}

func (c *confinedWriter) WriteHeader(code int) {
	if !c.wroteHeader && (code >= 200 || code == http.StatusSwitchingProtocols) {
		c.wroteHeader = true
		c.filter()
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *confinedWriter) Write(b []byte) (int, error) {
	if !c.wroteHeader {
		c.wroteHeader = true
		c.filter()
	}
	return c.ResponseWriter.Write(b)
}

func (c *confinedWriter) filter() {
	h := c.Header()
	h.Del("Clear-Site-Data")
	if !strings.Contains(strings.Join(h.Values("Content-Security-Policy"), ","), sandboxCSP) {
		// An upstream header replaced ours: put it back beside the upstream's.
		h.Add("Content-Security-Policy", sandboxCSP)
	}
	raw := h.Values("Set-Cookie")
	if len(raw) == 0 {
		return
	}
	h.Del("Set-Cookie")
	for _, line := range raw {
		ck, err := http.ParseSetCookie(line)
		if err != nil || strings.HasPrefix(strings.ToLower(ck.Name), "sandgate") || ck.Domain != "" ||
			strings.HasPrefix(ck.Name, "__Host-") {
			continue
		}
		if !strings.HasPrefix(ck.Path, c.prefix) {
			ck.Path = c.prefix
		}
		if v := ck.String(); v != "" {
			h.Add("Set-Cookie", v)
		}
	}
}

func (c *confinedWriter) Flush() { _ = http.NewResponseController(c.ResponseWriter).Flush() }

func (c *confinedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(c.ResponseWriter).Hijack()
}

func (c *confinedWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// previewCookieOrigin admits a request that the preview cookie authenticates only when
// a page of the preview's own origin could have sent it, unless it is a GET or a HEAD.
// A browser attaches the cookie to requests other pages start: in host mode every
// preview is under one registrable domain, so a page of another tenant's preview is
// same-site and its POST (a no-cors fetch, a form, a beacon) carries this preview's
// SameSite=Lax cookie; a WebSocket is opened cross-site with cookies and without CORS.
// So a WebSocket, and every method but GET and HEAD (OPTIONS included: a browser's own
// CORS preflight carries no cookie, so one that does was sent by a script), must say
// where it comes from: Sec-Fetch-Site "same-origin", or, from a browser without Fetch
// Metadata, an Origin naming the preview (host mode: its own host; path mode: the
// gateway's, as a sandboxed path-mode page carries no cookie at all). A request without
// either is refused too: a client that is no browser authenticates by API key or access
// header, which this check does not concern.
func (h *Handler) previewCookieOrigin(r *http.Request) error {
	ws := isWebSocket(r)
	if !ws && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		return nil
	}
	site := r.Header.Get("Sec-Fetch-Site")
	if site == "same-origin" && !ws {
		return nil
	}
	if (site == "" || site == "same-origin") && h.previewOrigin(r) {
		return nil
	}
	what := r.Method + " request"
	if ws {
		what = "WebSocket"
	}
	return gateway.Errorf(gateway.KindForbidden, gateway.CodeOriginRefused,
		"a %s with a preview cookie must come from a page of the preview itself (Origin %q, Sec-Fetch-Site %q, Host %q)",
		what, r.Header.Get("Origin"), site, r.Host)
}

// previewOrigin reports whether r's Origin is the origin of the preview it was sent to:
// in host mode the preview's own host, never the console's; in path mode the gateway's
// (sameOrigin: this host or the public URL's).
func (h *Handler) previewOrigin(r *http.Request) bool {
	if _, _, hostMode := h.previewHost(r.Host); hostMode {
		return sameOrigin(r, "")
	}
	return h.sameOrigin(r)
}

// consoleProxyPrefix is the console's route into a sandbox's agent and enforcer:
// /v1/console/sandboxes/{id}/ports/{port}/… .
const consoleProxyPrefix = "/v1/console/sandboxes/"

// serveConsoleProxy forwards a console request to the agent (44772) or the enforcer
// (18080) of a sandbox, authenticated by the console session: the request must come from
// the console's origin and carry the CSRF token for a change (consoleSession), and the
// access policy decides as for the session's key. Other ports are not reachable here:
// a preview is opened by its link, never with the session. Answers are confined to an
// opaque origin like path-mode previews, since a file the agent returns is the
// sandbox's content.
func (h *Handler) serveConsoleProxy(w http.ResponseWriter, r *http.Request) {
	id, portStr := r.PathValue("id"), r.PathValue("port")
	if portStr != "44772" && portStr != "18080" {
		h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter,
			"port %q: the console reaches only the agent (%d) and the egress enforcer (%d) of a sandbox", portStr, agentproto.AgentPort, agentproto.EgressPort))
		return
	}
	token := sessionToken(r)
	if token == "" {
		h.writeError(w, r, gateway.Errorf(gateway.KindUnauthenticated, gateway.CodeSessionInvalid, "not signed in: this route takes the console session cookie"))
		return
	}
	c, _, r, err := h.consoleSession(r, token)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	marker := consoleProxyPrefix + id + "/ports/" + portStr
	esc := r.URL.EscapedPath()
	if !strings.HasPrefix(esc, marker) {
		h.writeError(w, r, gateway.Errorf(gateway.KindNotFound, gateway.CodeNotFound, "sandbox %s not found", id))
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	proxyAccess := &access.ProxyAccess{Kind: principal.CredSession, Caller: &c}
	h.proxyAs(confineToOpaqueOrigin(w, marker+"/"), r, id, portStr, marker+"/", esc[len(marker):], proxyAccess)
}
