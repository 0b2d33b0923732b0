package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/sandgate/sandgate/gateway"
)

// The E2B door: the control API of E2B's published SDKs (e2b, e2b-code-interpreter)
// under its own prefix, and the routing of their in-sandbox calls by the
// E2b-Sandbox-Id and E2b-Sandbox-Port headers (e2b_proxy.go). A team points its E2B
// code at the gateway with E2B_API_URL=http://<gateway><prefix> and
// E2B_SANDBOX_URL=http://<gateway>. Every route reaches the same core calls as the
// OpenSandbox routes (create, get, list, delete, renew, pause, resume), under the same
// keys, Rego access and admission, quotas and audit: the door translates shapes, it
// keeps no lifecycle of its own.

// E2BOptions configure the E2B door.
type E2BOptions struct {
	// Prefix is the path under which the control API is served ("/e2b"); empty serves
	// no E2B door at all, neither the control API nor header routing.
	Prefix string
	// Templates maps template aliases to what a create through the door starts: an
	// image, or "pool:<name>" for a claim from that warm pool (E2BTemplates parses the
	// setting).
	Templates map[string]string
	// DefaultTemplates are the templates the door has unless Templates maps their alias
	// otherwise: "base", E2B's default, and "code-interpreter-v1" (E2BDefaultTemplates).
	DefaultTemplates map[string]string
}

// E2BDefaultTemplates are the door's templates of E2B's own names, on the images
// images/e2b.sh builds for this version.
func E2BDefaultTemplates(version string) map[string]string {
	return map[string]string{
		e2bDefaultTemplate:    "sandgate/e2b-base:" + version,
		"code-interpreter-v1": "sandgate/e2b-code-interpreter:" + version,
	}
}

// e2bDoor is the door's configuration as the handler uses it.
type e2bDoor struct {
	prefix    string
	templates map[string]string
}

// E2BTemplates parses the e2b_templates setting: alias=image or alias=pool:<name>, one
// per item. An alias may be given once.
func E2BTemplates(items []string) (map[string]string, error) {
	out := map[string]string{}
	for _, item := range items {
		alias, target, ok := strings.Cut(item, "=")
		alias, target = strings.TrimSpace(alias), strings.TrimSpace(target)
		if !ok || alias == "" || target == "" {
			return nil, fmt.Errorf("e2b template %q: want alias=image or alias=pool:<name>", item)
		}
		if pool, isPool := strings.CutPrefix(target, e2bPoolPrefix); isPool && pool == "" {
			return nil, fmt.Errorf("e2b template %q: the pool has no name", item)
		}
		if _, dup := out[alias]; dup {
			return nil, fmt.Errorf("e2b template %q: alias %q is given twice", item, alias)
		}
		out[alias] = target
	}
	return out, nil
}

// e2bPoolPrefix marks a template that names a warm pool instead of an image.
const e2bPoolPrefix = "pool:"

// e2bDefaultTemplate is the template E2B's SDKs create when none is named.
const e2bDefaultTemplate = "base"

// newE2BDoor returns the door opts configure, or nil when it has no prefix.
func newE2BDoor(opts E2BOptions) *e2bDoor {
	prefix := strings.TrimRight(opts.Prefix, "/")
	if prefix == "" {
		return nil
	}
	if !strings.HasPrefix(prefix, "/") {
		prefix = "/" + prefix
	}
	d := &e2bDoor{prefix: prefix, templates: map[string]string{}}
	for alias, target := range opts.Templates {
		d.templates[alias] = target
	}
	for alias, target := range opts.DefaultTemplates {
		if _, ok := d.templates[alias]; !ok {
			d.templates[alias] = target
		}
	}
	return d
}

// e2bRoutes are the door's control routes, under its prefix. Each names the access
// action the Rego policy decides, as the OpenSandbox route of the same call does.
func (h *Handler) e2bRoutes() []e2bRoute {
	return []e2bRoute{
		{"POST", "/sandboxes", "sandbox.create", h.e2bCreate},
		{"POST", "/v2/sandboxes", "sandbox.create", h.e2bCreate},
		{"GET", "/sandboxes", "sandbox.list", h.e2bListAll},
		{"GET", "/v2/sandboxes", "sandbox.list", h.e2bList},
		{"GET", "/sandboxes/{id}", "sandbox.get", h.e2bGet},
		{"DELETE", "/sandboxes/{id}", "sandbox.delete", h.e2bDelete},
		{"POST", "/sandboxes/{id}/timeout", "sandbox.update", h.e2bSetTimeout},
		{"POST", "/sandboxes/{id}/pause", "sandbox.update", h.e2bPause},
		{"POST", "/sandboxes/{id}/resume", "sandbox.update", h.e2bResume},
		{"GET", "/sandboxes/{id}/metrics", "sandbox.get", h.e2bMetrics},
		{"PUT", "/sandboxes/{id}/network", "sandbox.update", h.e2bUpdateNetwork},
		{"POST", "/sandboxes/{id}/snapshots", "snapshot.create", h.e2bCreateSnapshot},
		{"GET", "/snapshots", "snapshot.list", h.e2bListSnapshots},
		{"DELETE", "/templates/{id}", "snapshot.delete", h.e2bDeleteTemplate},
		{"POST", "/sandboxes/{id}/fork", "batch.create", h.e2bFork},
		{"POST", "/sandboxes/{id}/connect", "sandbox.update", h.e2bConnect},
		{"POST", "/v2/sandboxes/{id}/connect", "sandbox.update", h.e2bConnect},
		{"POST", "/volumes", "volume.create", h.e2bCreateVolume},
		{"GET", "/volumes", "volume.list", h.e2bListVolumes},
		{"GET", "/volumes/{id}", "volume.get", h.e2bGetVolume},
		{"DELETE", "/volumes/{id}", "volume.delete", h.e2bDeleteVolume},
	}
}

// e2bRoute is one control route of the door.
type e2bRoute struct {
	method, path, action string
	handler              func(http.ResponseWriter, *http.Request, gateway.Caller)
}

// registerE2B mounts the door's control routes: each authenticates the API key (E2B
// sends it in X-API-Key, which apiKeyFrom reads) and asks the access policy, then
// answers in E2B's shapes. Any other path under the prefix is an E2B-shaped 404 or 405.
func (h *Handler) registerE2B() {
	if h.e2b == nil {
		return
	}
	methods := map[string][]string{}
	for _, rt := range h.e2bRoutes() {
		h.mux.HandleFunc(rt.method+" "+h.e2b.prefix+rt.path, func(w http.ResponseWriter, r *http.Request) {
			r = withE2BShape(r, e2bControl)
			c, r, err := h.authenticate(r)
			if err != nil {
				h.writeError(w, r, err)
				return
			}
			if err := h.svc.Authorize(r.Context(), c, rt.action, resourceFor(rt.action, r, c), r.Method, r.URL.Path, nil); err != nil {
				h.writeError(w, r, err)
				return
			}
			rt.handler(w, r, c)
		})
		methods[rt.path] = append(methods[rt.path], rt.method)
	}
	for path, ms := range methods {
		refuse := h.methodNotAllowed(ms)
		h.mux.HandleFunc(h.e2b.prefix+path, func(w http.ResponseWriter, r *http.Request) {
			refuse(w, withE2BShape(r, e2bControl))
		})
	}
	h.mux.HandleFunc(h.e2b.prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		h.writeError(w, withE2BShape(r, e2bControl), gateway.Errorf(gateway.KindNotFound, gateway.CodeRouteNotFound, "no route for %s %s", r.Method, r.URL.Path))
	})
}

// e2bShape marks a request answered in E2B's error shape, and says which part of the
// door it reached.
type e2bShape int

const (
	// e2bControl is a control API request: errors are {code, message} with their status.
	e2bControl e2bShape = iota + 1
	// e2bSandboxCall is a header-routed call into a sandbox: besides the shape, a
	// sandbox that is gone or not running answers 502 "… was not found", on which the
	// SDKs decide that the sandbox is no longer there.
	e2bSandboxCall
)

type e2bShapeKey struct{}

// e2bMark is what the context of a door's request carries: its shape, and for a
// sandbox call the sandbox it names (its header is stripped before forwarding).
type e2bMark struct {
	shape   e2bShape
	sandbox string
}

func withE2BShape(r *http.Request, s e2bShape) *http.Request {
	return withE2BMark(r, e2bMark{shape: s})
}

func withE2BMark(r *http.Request, m e2bMark) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), e2bShapeKey{}, m))
}

func e2bMarkOf(r *http.Request) e2bMark {
	m, _ := r.Context().Value(e2bShapeKey{}).(e2bMark)
	return m
}

// e2bError is E2B's error body: the HTTP status again as a number, and a message.
type e2bError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// e2bErrorAnswer is the status and body of e in E2B's shape.
func e2bErrorAnswer(m e2bMark, e *gateway.Error) (int, e2bError) {
	status := statusOf(e.Kind)
	if sandboxID := m.sandbox; m.shape == e2bSandboxCall && sandboxID != "" {
		switch {
		case e.Kind == gateway.KindNotFound:
			return http.StatusBadGateway, e2bError{http.StatusBadGateway, "The sandbox " + sandboxID + " was not found"}
		case e.Code == gateway.CodeNotRunning:
			return http.StatusBadGateway, e2bError{http.StatusBadGateway, "The sandbox " + sandboxID + " was not found running: " + e.Message}
		}
	}
	return status, e2bError{status, e.Message}
}
