package modules

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/tracing"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler mounts the gateway API (lifecycle, endpoints, sandbox proxy) in a Caddy route.
// It answers every request it sees; put it last in its route. Requests for a sandbox's
// ports are authorized by the gateway and then forwarded: agent calls and upgrades
// (WebSockets over HTTP/1.1, and over HTTP/2's extended CONNECT, which Caddy turns into
// an HTTP/1.1 upgrade towards the sandbox) by Caddy's own reverse_proxy, whose upstream is the
// `sandgate` source (see Upstreams); every other request by api.NewForward, with the
// same flushing, keep-alive and X-Forwarded-* behaviour at far less CPU per request (no
// placeholders, per-request loggers, upstream pool; GET and HEAD without a body
// forwarded in the handler's own goroutine, without http.Transport's hand-offs).
type Handler struct {
	api   *api.Handler
	proxy *reverseproxy.Handler
	plain api.Forward
}

// reverseProxyConfig keeps many idle connections to sandboxes, each for idle (the
// agent_idle_timeout setting; the pool manager refreshes warm members' within it).
// Flushing is Caddy's default: at once for SSE, bodies of unknown length (chunked
// command output, streams) and upgraded connections; a response of known length goes
// out in full writes, headers and body together, rather than one write per upstream read.
// The client's Forwarded header is dropped, as api.NewForward drops it: Caddy replaces
// the client's X-Forwarded-* with its own but passes Forwarded on, which would let a
// client name any address to the sandbox (the rules of package forwardtest).
func reverseProxyConfig(idle time.Duration) string {
	if idle <= 0 {
		idle = gateway.DefaultAgentIdleTimeout
	}
	return fmt.Sprintf(`{
	"dynamic_upstreams": {"source": "sandgate"},
	"headers": {"request": {"delete": ["Forwarded"]}},
	"transport": {"protocol": "http", "keep_alive": {"max_idle_conns_per_host": 64, "idle_timeout": %d}, "dial_timeout": "5s"}
}`, idle.Nanoseconds())
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.sandgate", New: func() caddy.Module { return new(Handler) }}
}

// Provision implements caddy.Provisioner: it finds the sandgate app and builds the API on it.
func (h *Handler) Provision(ctx caddy.Context) error {
	appIface, err := ctx.App("sandgate")
	if err != nil {
		return fmt.Errorf("load sandgate app: %w", err)
	}
	app := appIface.(*App)
	rp, err := ctx.LoadModuleByID("http.handlers.reverse_proxy", json.RawMessage(reverseProxyConfig(time.Duration(app.AgentIdleTimeout))))
	if err != nil {
		return fmt.Errorf("load reverse_proxy for sandboxes: %w", err)
	}
	h.proxy = rp.(*reverseproxy.Handler)
	// The agent's and the enforcer's tokens are added below reverse_proxy, which logs
	// the request it hands to its transport (headers and all) on every upstream error.
	h.proxy.Transport = api.SecretHeaderTransport{Next: h.proxy.Transport}
	// New warm pool members get their keep-alive connection from this transport before
	// they can be claimed: a claim's first command does not wait for a connect.
	app.core.service.SetConnWarmer(api.AgentConnWarmer(h.proxy.Transport))
	h.api = api.New(app.core.service, api.Options{Logger: ctx.Slogger(), Forward: h.forward, Metrics: app.metricsHandler, E2B: app.e2bOptions(), ImageBuilds: app.core.imageBuildList()})
	h.plain = api.NewForward(h.api.WriteUpstreamError)
	return nil
}

// agentPortSuffix ends the upstream address of a sandbox's agent, whose Server-Timing
// entries become spans of the request's trace.
var agentPortSuffix = ":" + strconv.Itoa(runtimes.AgentPort)

// forward hands an authorized, rewritten request to the plain forward, or an upgrade or
// an agent call to Caddy's reverse_proxy (agent calls are mostly streamed command output,
// where the plain forward measured no better: BenchmarkTrueRoundTrip).
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, upstream string) {
	tracing.Inject(r.Context(), r.Header)
	start := time.Now()
	if isUpgrade(r) || strings.HasSuffix(upstream, agentPortSuffix) {
		if err := h.proxy.ServeHTTP(w, withUpstream(r, upstream), caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })); err != nil {
			h.api.WriteUpstreamError(w, r, err)
		}
	} else {
		h.plain(w, r, upstream) // answers its own errors (Handler.WriteUpstreamError)
	}
	if strings.HasSuffix(upstream, agentPortSuffix) {
		tracing.RecordServerTiming(r.Context(), w.Header(), start)
	}
}

// isUpgrade reports whether r may ask for a protocol switch: an HTTP/1.1 Upgrade
// header, or an HTTP/2 (extended) CONNECT.
func isUpgrade(r *http.Request) bool {
	return r.Method == http.MethodConnect || r.Header.Get("Upgrade") != ""
}

// Cleanup implements caddy.CleanerUpper.
func (h *Handler) Cleanup() error {
	if h.proxy != nil {
		return h.proxy.Cleanup()
	}
	return nil
}

// ServeHTTP implements caddyhttp.MiddlewareHandler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	h.api.ServeHTTP(w, r)
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
