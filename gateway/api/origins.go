package api

import (
	"bufio"
	"net"
	"net/http"
	"strings"

	"github.com/sandgate/sandgate/gateway"
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
	access := &gateway.ProxyAccess{Kind: gateway.CredSession, Caller: &c}
	h.proxyAs(confineToOpaqueOrigin(w, marker+"/"), r, id, portStr, marker+"/", esc[len(marker):], access)
}
