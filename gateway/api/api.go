// Package api is sandgate's HTTP layer: the OpenSandbox-compatible lifecycle API under /v1
// (and the same routes without the prefix), the proxy to each sandbox's ports, and the
// OpenAPI document. It is plain net/http; Caddy mounts it in caddy/.
package api

import (
	"crypto/rand"
	"encoding/hex"
	"github.com/sandgate/sandgate/gateway/imagebuild"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/tracing"
	"github.com/sandgate/sandgate/web"
)

// Options configure the HTTP layer.
type Options struct {
	Logger *slog.Logger
	// Forward proxies requests into sandboxes; nil uses NewForward.
	Forward Forward
	// Metrics serves the Prometheus scrape at /metrics (admin only); nil: 404.
	Metrics http.Handler
	// E2B configures the E2B door (e2b.go); without a prefix there is none.
	E2B E2BOptions
	// ImageBuilds lists the images the gateway builds in the background (GET /v1/images);
	// nil: it builds none, and the list is empty.
	ImageBuilds interface{ List() []imagebuild.Status }
}

// Handler serves the whole gateway API.
type Handler struct {
	svc     *gateway.Service
	opts    Options
	log     *slog.Logger
	mux     *http.ServeMux
	forward Forward
	mcp     *mcpHandler
	e2b     *e2bDoor
	// openAPI is the document this gateway serves (openAPIFor), made on first use.
	openAPI     []byte
	openAPIOnce sync.Once
}

// route is one registered endpoint; the table is also what the OpenAPI test checks.
type route struct {
	method  string // "" = any method
	path    string // without the /v1 prefix
	handler func(http.ResponseWriter, *http.Request, gateway.Caller)
	// endpoint, for a route of the common shape (handlers.go), stands for handler.
	endpoint endpoint
	public   bool // no API key needed
	own      bool // the handler authenticates by itself (the proxy)
	// action is what the access policy decides on; empty derives it from the path and
	// method (see actionFor). selfAuthz routes call Authorize themselves, with the body.
	action    string
	selfAuthz bool
}

// New builds the handler.
func New(svc *gateway.Service, opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h := &Handler{svc: svc, opts: opts, log: opts.Logger, mux: http.NewServeMux()}
	h.mcp = &mcpHandler{h: h}
	h.e2b = newE2BDoor(opts.E2B)
	h.forward = opts.Forward
	if h.forward == nil {
		h.forward = NewForward(h.upstreamError)
	}
	routes := h.routes()
	methods := map[string][]string{} // path → its methods, for the 405 fallbacks
	for _, rt := range routes {
		h.register(rt)
		if rt.method != "" {
			methods[rt.path] = append(methods[rt.path], rt.method)
		}
	}
	for path, ms := range methods {
		h.registerFallback(path, ms, shadowsWildcard(path, routes))
	}
	h.registerTestClock()
	h.registerE2B()
	h.mux.HandleFunc(consoleProxyPrefix+"{id}/ports/{port}", h.serveConsoleProxy)
	h.mux.HandleFunc(consoleProxyPrefix+"{id}/ports/{port}/{path...}", h.serveConsoleProxy)
	h.mux.Handle("GET /console/", web.Handler("/console/"))
	h.mux.Handle("GET /console", http.RedirectHandler("/console/", http.StatusMovedPermanently))
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.writeError(w, r, gateway.Errorf(gateway.KindNotFound, gateway.CodeRouteNotFound, "no route for %s %s", r.Method, r.URL.Path))
	})
	return h
}

func (h *Handler) routes() []route {
	return []route{
		{method: "GET", path: "/health", handler: h.health, public: true},
		{method: "GET", path: "/ready", handler: h.ready, public: true},
		{method: "GET", path: "/openapi.json", handler: h.serveOpenAPI, public: true},
		{method: "GET", path: "/metrics", handler: h.serveMetrics, action: "metrics.read"},
		{method: "GET", path: "/fleet/metrics", handler: h.fleetMetrics, action: "metrics.read"},
		{method: "GET", path: "/images", endpoint: listAll(h.listImageBuilds)},
		{method: "POST", path: "/sandboxes", endpoint: decodeAndCall(http.StatusAccepted, h.svc.Create)},
		{method: "GET", path: "/sandboxes", endpoint: queryAndCall(sandboxListQuery, h.svc.List)},
		// The live list; more specific than /sandboxes/{id}, so the mux prefers it.
		{method: "GET", path: "/sandboxes/watch", handler: h.watchSandboxes, action: "sandbox.list"},
		{method: "GET", path: "/sandboxes/{id}", endpoint: getOn("id", h.svc.Get)},
		{method: "DELETE", path: "/sandboxes/{id}", endpoint: doOn("id", http.StatusNoContent, h.svc.Delete)},
		{method: "PATCH", path: "/sandboxes/{id}/metadata", endpoint: decodeAndCallOn("id", http.StatusOK, h.svc.PatchMetadata)},
		{method: "POST", path: "/sandboxes/{id}/pause", endpoint: doOn("id", http.StatusAccepted, h.svc.Pause)},
		{method: "POST", path: "/sandboxes/{id}/resume", endpoint: doOn("id", http.StatusAccepted, h.svc.Resume)},
		{method: "POST", path: "/sandboxes/{id}/renew-expiration", handler: h.renewSandbox},
		{method: "POST", path: "/sandboxes/{id}/access/rotate", endpoint: doOn("id", http.StatusNoContent, h.rotateAccess), action: "sandbox.access.rotate"},
		{method: "GET", path: "/sandboxes/{id}/endpoints/{port}", handler: h.getEndpoint, action: "sandbox.proxy"},
		{method: "POST", path: "/sandboxes/{id}/snapshots", handler: h.createSnapshot, action: "snapshot.create"},
		{method: "POST", path: "/sandboxes/{id}/fork", endpoint: decodeAndCallOn("id", http.StatusAccepted, h.fork), action: "batch.create"},
		{method: "GET", path: "/snapshots", endpoint: queryAndCall(snapshotListQuery, h.listSnapshots)},
		{method: "GET", path: "/snapshots/{id}", endpoint: getOn("id", h.getSnapshot)},
		{method: "DELETE", path: "/snapshots/{id}", endpoint: doOn("id", http.StatusNoContent, h.deleteSnapshot)},
		{method: "GET", path: "/sandboxes/{id}/metrics", endpoint: getOn("id", h.sandboxUsage), action: "sandbox.get"},
		{method: "GET", path: "/sandboxes/{id}/metrics/watch", handler: h.watchSandboxMetrics, action: "sandbox.get"},
		// The workload's output is read as its commands' output is: sandbox.proxy.
		{method: "GET", path: "/sandboxes/{id}/diagnostics/logs", endpoint: diagnosticsOn(h.svc.DiagnosticLogs), action: "sandbox.proxy"},
		{method: "GET", path: "/sandboxes/{id}/diagnostics/events", endpoint: diagnosticsOn(h.svc.DiagnosticEvents), action: "sandbox.get"},
		{method: "POST", path: "/tenants", handler: h.createTenant},
		{method: "GET", path: "/tenants", handler: h.listTenants},
		{method: "GET", path: "/tenants/{id}", handler: h.getTenant},
		{method: "PATCH", path: "/tenants/{id}", handler: h.updateTenant},
		{method: "POST", path: "/tenants/{id}/keys", handler: h.createKey, action: "key.create", selfAuthz: true},
		{method: "GET", path: "/tenants/{id}/keys", handler: h.listKeys, action: "key.list"},
		{method: "DELETE", path: "/tenants/{id}/keys/{keyId}", handler: h.revokeKey, action: "key.delete"},
		{method: "GET", path: "/whoami", handler: h.whoami, action: "tenant.get"},
		{method: "POST", path: "/admin/link-keys/rotate", handler: h.rotateLinkKeys, action: "policy.write"},
		{method: "POST", path: "/pools", endpoint: decodeAndCall(http.StatusCreated, h.createPool)},
		{method: "GET", path: "/pools", endpoint: listAll(h.listPools)},
		{method: "GET", path: "/pools/{name}", endpoint: getOn("name", h.getPool)},
		{method: "PUT", path: "/pools/{name}", endpoint: decodeAndCallOn("name", http.StatusOK, h.updatePool)},
		{method: "DELETE", path: "/pools/{name}", endpoint: doOn("name", http.StatusNoContent, h.deletePool)},
		{method: "POST", path: "/batches", endpoint: h.createBatch},
		{method: "GET", path: "/batches/{id}", endpoint: h.getBatch},
		{method: "DELETE", path: "/batches/{id}", endpoint: doOn("id", http.StatusNoContent, h.deleteBatch)},
		{method: "GET", path: "/plugins", endpoint: listAll(h.listPlugins)},
		{method: "GET", path: "/plugins/{name}", endpoint: getOn("name", h.getPlugin)},
		{method: "PUT", path: "/plugins/{name}", handler: h.putPlugin},
		{method: "DELETE", path: "/plugins/{name}", endpoint: doOn("name", http.StatusNoContent, h.deletePlugin)},
		{method: "GET", path: "/audit", endpoint: queryAndCall(auditQuery, h.readAudit), action: "audit.read"},
		{method: "GET", path: "/audit/stream", handler: h.streamAudit, action: "audit.read"},
		{method: "GET", path: "/events", handler: h.listEvents, action: "audit.read", selfAuthz: true},
		{method: "GET", path: "/events/stream", handler: h.streamEvents, action: "audit.read", selfAuthz: true},
		{method: "POST", path: "/session", handler: h.signIn, public: true},
		{method: "GET", path: "/session", handler: h.getSession, public: true},
		{method: "DELETE", path: "/session", handler: h.signOut, public: true},
		{method: "GET", path: "/policy", handler: h.getPolicy, action: "policy.read"},
		{method: "PUT", path: "/policy", handler: h.putPolicy, action: "policy.write"},
		{method: "POST", path: "/policy/validate", handler: h.validatePolicy, action: "policy.read"},
		{method: "POST", path: "/policy/eval", handler: h.evalPolicy, action: "policy.read"},
		{method: "POST", path: "/policy/test", handler: h.testPolicy, action: "policy.read"},
		{method: "DELETE", path: "/policy/overrides", handler: h.resetPolicy, action: "policy.write"},
		// MCP over streamable HTTP; each tool call goes through the routes above (mcp.go).
		{method: "POST", path: "/mcp", handler: h.serveMCP, own: true},
		{method: "GET", path: "/mcp", handler: h.serveMCP, own: true},
		{method: "DELETE", path: "/mcp", handler: h.serveMCP, own: true},
		{method: "", path: "/sandboxes/{id}/proxy/{port}", handler: h.serveProxyPath, own: true},
		{method: "", path: "/sandboxes/{id}/proxy/{port}/{path...}", handler: h.serveProxyPath, own: true},
	}
}

func (h *Handler) register(rt route) {
	if rt.endpoint != nil {
		rt.handler = h.serve(rt.endpoint)
	}
	action := rt.action
	if action == "" {
		action = actionFor(rt.method, rt.path)
	}
	wrapped := func(w http.ResponseWriter, r *http.Request) {
		var caller gateway.Caller
		if !rt.public && !rt.own {
			c, authed, err := h.authenticate(r)
			if err != nil {
				h.writeError(w, r, err)
				return
			}
			caller, r = c, authed
			if !rt.selfAuthz {
				if err := h.svc.Authorize(r.Context(), c, action, resourceFor(action, r, c), r.Method, r.URL.Path, nil); err != nil {
					h.writeError(w, r, err)
					return
				}
			}
		}
		rt.handler(w, r, caller)
	}
	for _, prefix := range []string{"/v1", ""} {
		pattern := prefix + rt.path
		if rt.method != "" {
			h.mux.HandleFunc(rt.method+" "+pattern, wrapped)
		} else {
			h.mux.HandleFunc(pattern, wrapped)
		}
	}
}

// registerFallback answers any other method on a known path with a 405 in our error
// shape, not the mux's text. A literal path beside a wildcard one (/sandboxes/watch
// beside /sandboxes/{id}) cannot take an any-method pattern (the mux refuses the
// overlap), so it gets one pattern per method instead.
func (h *Handler) registerFallback(path string, methods []string, shadows bool) {
	refuse := h.methodNotAllowed(methods)
	for _, prefix := range []string{"/v1", ""} {
		pattern := prefix + path
		if !shadows {
			h.mux.HandleFunc(pattern, refuse)
			continue
		}
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
			if !slices.Contains(methods, m) {
				h.mux.HandleFunc(m+" "+pattern, refuse)
			}
		}
	}
}

// shadowsWildcard reports whether another route's pattern with a wildcard segment also
// matches path.
func shadowsWildcard(path string, routes []route) bool {
	segs := strings.Split(path, "/")
	for _, rt := range routes {
		other := strings.Split(rt.path, "/")
		if rt.path == path || len(other) != len(segs) {
			continue
		}
		wild, same := false, true
		for i := range segs {
			switch {
			case strings.HasPrefix(other[i], "{"):
				wild = true
			case other[i] != segs[i]:
				same = false
			}
		}
		if wild && same {
			return true
		}
	}
	return false
}

// methodNotAllowed answers a method a path does not have with a 405 whose Allow header
// lists the methods it has (RFC 9110 §15.5.6); GET brings HEAD.
func (h *Handler) methodNotAllowed(methods []string) http.HandlerFunc {
	allowed := slices.Clone(methods)
	if slices.Contains(allowed, http.MethodGet) && !slices.Contains(allowed, http.MethodHead) {
		allowed = append(allowed, http.MethodHead)
	}
	slices.Sort(allowed)
	allow := strings.Join(slices.Compact(allowed), ", ")
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		h.writeError(w, r, gateway.Errorf(gateway.KindMethodNotAllowed, gateway.CodeMethodNotAllowed, "%s is not allowed on %s; it allows %s", r.Method, r.URL.Path, allow))
	}
}

// ServeHTTP implements http.Handler: request id, panic safety, then the routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get(headerRequestID)
	if id == "" || len(id) > 200 {
		id = newRequestID()
		r.Header.Set(headerRequestID, id)
	}
	w.Header().Set(headerRequestID, id)
	r, endSpan := tracing.StartRequest(r, id)
	defer func() { endSpan(r.Pattern) }()
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			// The route pattern, not the path: a path may hold a signed link's token.
			h.log.Error("panic in handler", "panic", p, "request_id", id, "route", r.Pattern, "stack", string(debug.Stack()))
			h.writeError(w, r, gateway.Errorf(gateway.KindInternal, gateway.CodeInternal, "internal error (request %s)", id))
		}
	}()
	if id := r.Header.Get(headerE2BSandboxID); id != "" && h.e2b != nil {
		h.serveE2BSandboxCall(w, r, id, r.Header.Get(headerE2BSandboxPort))
		return
	}
	if id, port, ok := h.e2bHost(r.Host); ok {
		h.serveE2BSandboxCall(w, r, id, port)
		return
	}
	if id, port, ok := h.previewHost(r.Host); ok {
		h.proxy(w, r, id, port, "/", r.URL.EscapedPath())
		return
	}
	if id, port, pattern, ok := proxyPathRoute(r); ok { // the mux's route, found cheaper
		r.Pattern = pattern
		h.servePathMode(w, r, id, port)
		return
	}
	h.mux.ServeHTTP(w, r)
}

func newRequestID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// The API key headers and X-Request-ID, canonical (as written, each lookup would
// canonicalize them anew: an allocation per request and header).
var (
	headerRequestID = http.CanonicalHeaderKey("X-Request-ID")
	headerAPIKey    = http.CanonicalHeaderKey("OPEN-SANDBOX-API-KEY")
	headerXAPIKey   = http.CanonicalHeaderKey("X-API-Key")
)

// apiKeyFrom returns the API key a request carries in any of the accepted headers.
func apiKeyFrom(r *http.Request) string {
	if k := r.Header.Get(headerAPIKey); k != "" {
		return k
	}
	if k := r.Header.Get(headerXAPIKey); k != "" {
		return k
	}
	if a := r.Header.Get("Authorization"); a != "" {
		if k, ok := strings.CutPrefix(a, "Bearer "); ok {
			return strings.TrimSpace(k)
		}
	}
	return ""
}

// actionFor derives the policy action of a route: the first path segment, singular, and
// a verb from the method ("GET /pools/{name}" → "pool.get").
func actionFor(method, path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	area := strings.TrimSuffix(parts[0], "s")
	switch parts[0] {
	case "sandboxes":
		area = "sandbox"
	case "batches":
		area = "batch"
	}
	item := strings.HasSuffix(path, "}")
	switch method {
	case http.MethodGet:
		if item {
			return area + ".get"
		}
		return area + ".list"
	case http.MethodPost:
		if item || len(parts) > 2 {
			return area + ".update"
		}
		return area + ".create"
	case http.MethodPut, http.MethodPatch:
		return area + ".update"
	case http.MethodDelete:
		return area + ".delete"
	}
	return area + ".use"
}

// resourceFor names the resource of a request for the access policy. Tenant and key
// routes are about the tenant in the path; everything else lives in the caller's tenant
// (the core answers 404 for another tenant's resources).
func resourceFor(action string, r *http.Request, c gateway.Caller) gateway.Resource {
	area, _, _ := strings.Cut(action, ".")
	res := gateway.Resource{Kind: area, Tenant: c.Tenant}
	switch area {
	case "tenant", "key":
		res.Kind, res.ID, res.Tenant = "tenant", r.PathValue("id"), r.PathValue("id")
		if area == "key" {
			res.Kind = "key"
		}
	default:
		res.ID = r.PathValue("id")
		if res.ID == "" {
			res.ID = r.PathValue("name")
		}
	}
	return res
}

// health is liveness: it answers as long as the process serves requests, whatever Redis
// does, so that a probe never restarts a gateway that keeps proxying through an outage.
func (h *Handler) health(w http.ResponseWriter, r *http.Request, _ gateway.Caller) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "healthy"})
}

// ready is readiness: 200 while the state store answers, 503 STORE::UNAVAILABLE while
// it does not (the lifecycle API answers 503 then, the proxy serves from memory).
func (h *Handler) ready(w http.ResponseWriter, r *http.Request, _ gateway.Caller) {
	st := h.svc.Store()
	if err := st.Ready(r.Context()); err != nil {
		msg := "the state store (Redis) does not answer; lifecycle API calls answer 503 until it does, known sandboxes stay reachable"
		if since := st.DownSince(); !since.IsZero() {
			msg += " (unreachable since " + since.UTC().Format(time.RFC3339) + ")"
		}
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Code: gateway.CodeStoreUnavailable, Message: msg})
		return
	}
	kind := "redis"
	if st.Embedded() {
		kind = "embedded"
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "store": kind})
}
