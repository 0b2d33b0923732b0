package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// sandboxProxy forwards /sandboxes/{id}/proxy/{port}/… to that port of the sandbox, at
// the address the runtime reported and nowhere else. It streams both ways (SSE and
// chunked bodies are flushed as they come) and carries WebSocket upgrades.
type sandboxProxy struct {
	h  *Handler
	rp *httputil.ReverseProxy
}

type proxyTarget struct {
	host    string
	path    string
	rawPath string
	port    int
	sandbox *store.Sandbox
}

type targetKey struct{}

// credentialHeaders are ours; none of them reaches a sandbox except as set below.
var credentialHeaders = []string{
	"OPEN-SANDBOX-API-KEY", "X-API-Key", gateway.HeaderAgentToken, gateway.HeaderEgressToken, gateway.HeaderAccessToken,
}

func newSandboxProxy(h *Handler) *sandboxProxy {
	p := &sandboxProxy{h: h}
	transport := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // commands stream for as long as they run
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey{}).(*proxyTarget)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = t.host
			pr.Out.URL.Path = t.path
			pr.Out.URL.RawPath = t.rawPath
			pr.Out.Host = t.host
			pr.SetXForwarded()
			for _, hdr := range credentialHeaders {
				pr.Out.Header.Del(hdr)
			}
			if a := pr.Out.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
				if _, ours := p.h.callerForKey(strings.TrimPrefix(a, "Bearer ")); ours {
					pr.Out.Header.Del("Authorization")
				}
			}
			switch t.port {
			case runtimes.AgentPort:
				pr.Out.Header.Set(gateway.HeaderAgentToken, t.sandbox.AgentToken)
			case runtimes.EgressPort:
				pr.Out.Header.Set(gateway.HeaderEgressToken, t.sandbox.EgressToken)
			}
		},
		Transport:     transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			t := r.Context().Value(targetKey{}).(*proxyTarget)
			writeError(w, r, gateway.Errorf(http.StatusBadGateway, gateway.CodeUpstreamError,
				"port %d of sandbox %s did not answer: nothing is listening there, or it closed the connection", t.port, t.sandbox.ID))
		},
	}
	return p
}

func (p *sandboxProxy) serve(w http.ResponseWriter, r *http.Request, _ gateway.Caller) {
	id := r.PathValue("id")
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, r, gateway.Errorf(400, gateway.CodeInvalidParameter, "port %q: want a number from 1 to 65535", r.PathValue("port")))
		return
	}
	sb, err := p.h.svc.Lookup(r.Context(), gateway.Caller{Admin: true}, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := p.h.authorizeProxy(r, sb); err != nil {
		writeError(w, r, err)
		return
	}
	if sb.State != gateway.StateRunning || sb.Address == "" {
		writeError(w, r, gateway.Errorf(http.StatusServiceUnavailable, gateway.CodeNotRunning, "sandbox %s is %s; its ports answer only while it is Running", id, sb.State))
		return
	}
	if h := p.h; h.interceptEgress(w, r, sb, port) {
		return
	}
	path, raw := upstreamPath(r, id, r.PathValue("port"))
	t := &proxyTarget{host: net.JoinHostPort(sb.Address, strconv.Itoa(port)), path: path, rawPath: raw, port: port, sandbox: sb}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, t)))
}

// upstreamPath keeps the caller's escaping of everything after /proxy/{port}.
func upstreamPath(r *http.Request, id, port string) (path, rawPath string) {
	marker := "/sandboxes/" + id + "/proxy/" + port
	esc := r.URL.EscapedPath()
	rest := "/"
	if i := strings.Index(esc, marker); i >= 0 {
		rest = esc[i+len(marker):]
	}
	if rest == "" {
		rest = "/"
	}
	if dec, err := unescapePath(rest); err == nil {
		if dec == rest {
			return dec, ""
		}
		return dec, rest
	}
	return "/" + r.PathValue("path"), ""
}

// authorizeProxy accepts the owning tenant's API key (in the usual headers, or — as the
// SDKs do in server-proxy mode — in the agent and egress headers) or the sandbox's own
// access token. Another tenant's key sees a 404, as if the sandbox did not exist.
func (h *Handler) authorizeProxy(r *http.Request, sb *store.Sandbox) error {
	if key := apiKeyFrom(r); key != "" {
		c, ok := h.callerForKey(key)
		if !ok {
			return gateway.Errorf(http.StatusUnauthorized, gateway.CodeInvalidAPIKey, "the API key is not valid")
		}
		if !c.Admin && c.Tenant != sb.Tenant {
			return gateway.Errorf(http.StatusNotFound, gateway.CodeNotFound, "sandbox %s not found", sb.ID)
		}
		return nil
	}
	sent := false
	for _, hdr := range []string{gateway.HeaderAgentToken, gateway.HeaderEgressToken, gateway.HeaderAccessToken} {
		v := r.Header.Get(hdr)
		if v == "" {
			continue
		}
		sent = true
		if sb.AccessToken != "" && subtle.ConstantTimeCompare([]byte(v), []byte(sb.AccessToken)) == 1 {
			return nil
		}
		if c, ok := h.callerForKey(v); ok && (c.Admin || c.Tenant == sb.Tenant) {
			return nil
		}
	}
	if sent {
		return gateway.Errorf(http.StatusForbidden, gateway.CodeForbidden, "the access token is not valid for sandbox %s", sb.ID)
	}
	return gateway.Errorf(http.StatusUnauthorized, gateway.CodeMissingAPIKey, "an API key or the sandbox's access token (from its endpoint) is required")
}

func unescapePath(s string) (string, error) {
	return urlPathUnescape(s)
}
