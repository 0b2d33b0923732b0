package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/sandgate/sandgate/gateway"
)

// The shape most routes share. A lifecycle route reads its input (a JSON body, a path
// value, query parameters), calls the core once and answers with the result or the
// error. Such a route is an endpoint in the route table, built by one of the helpers
// below, so that the table states only what differs: which core call, which path value,
// which success status. A route with more to do has a handler method of its own
// (renewSandbox, getEndpoint, putPlugin…).

// endpoint is the work of a route of the common shape: it returns the answer, a status
// and a JSON body (nil: the status alone), or the error; Handler.serve writes it.
type endpoint func(w http.ResponseWriter, r *http.Request, c gateway.Caller) (status int, body any, err error)

// serve turns an endpoint into the route's handler.
func (h *Handler) serve(ep endpoint) func(http.ResponseWriter, *http.Request, gateway.Caller) {
	return func(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
		status, body, err := ep(w, r, c)
		if err == nil && body == nil {
			w.WriteHeader(status)
			return
		}
		h.answer(w, r, status)(body, err)
	}
}

// answer returns what answers a core call: its result as JSON with status, or its error.
// It takes the call's two results at once: h.answer(w, r, http.StatusOK)(h.svc.Usage().Fleet(c)).
func (h *Handler) answer(w http.ResponseWriter, r *http.Request, status int) func(v any, err error) {
	return func(v any, err error) {
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		writeJSON(w, status, v)
	}
}

// decodeAndCall hands a JSON body to the core as it is (POST /pools); the result is
// answered with status.
func decodeAndCall[Req, Resp any](status int, call func(context.Context, gateway.Caller, Req) (Resp, error)) endpoint {
	return decodeAndCallOn("", status, func(ctx context.Context, c gateway.Caller, _ string, req Req) (Resp, error) {
		return call(ctx, c, req)
	})
}

// decodeAndCallOn is decodeAndCall for the resource the path value param names
// (PUT /pools/{name}).
func decodeAndCallOn[Req, Resp any](param string, status int, call func(context.Context, gateway.Caller, string, Req) (Resp, error)) endpoint {
	return func(w http.ResponseWriter, r *http.Request, c gateway.Caller) (int, any, error) {
		var req Req
		if err := decodeJSON(w, r, &req); err != nil {
			return 0, nil, err
		}
		resp, err := call(r.Context(), c, r.PathValue(param), req)
		return status, resp, err
	}
}

// getOn answers 200 with what the core returns for the resource the path value param
// names (GET /pools/{name}).
func getOn[Resp any](param string, call func(context.Context, gateway.Caller, string) (Resp, error)) endpoint {
	return func(_ http.ResponseWriter, r *http.Request, c gateway.Caller) (int, any, error) {
		resp, err := call(r.Context(), c, r.PathValue(param))
		return http.StatusOK, resp, err
	}
}

// diagnosticsOn serves a diagnostics read of the sandbox the path names, for the scope
// its query names (OpenSandbox's diagnostic-api.yml).
func diagnosticsOn(call func(context.Context, gateway.Caller, string, string) (*gateway.DiagnosticContent, error)) endpoint {
	return func(_ http.ResponseWriter, r *http.Request, c gateway.Caller) (int, any, error) {
		resp, err := call(r.Context(), c, r.PathValue("id"), r.URL.Query().Get("scope"))
		return http.StatusOK, resp, err
	}
}

// doOn is an action on the resource the path value param names that answers no body,
// only status: 204 for a delete, 202 for a pause.
func doOn(param string, status int, call func(context.Context, gateway.Caller, string) error) endpoint {
	return func(_ http.ResponseWriter, r *http.Request, c gateway.Caller) (int, any, error) {
		return status, nil, call(r.Context(), c, r.PathValue(param))
	}
}

// listAll answers 200 {"items": […]} with a list the core returns whole (GET /pools).
func listAll[T any](call func(context.Context, gateway.Caller) ([]T, error)) endpoint {
	return func(_ http.ResponseWriter, r *http.Request, c gateway.Caller) (int, any, error) {
		items, err := call(r.Context(), c)
		return http.StatusOK, map[string]any{"items": items}, err
	}
}

// queryAndCall serves a list read from query parameters (filters, a page or a cursor):
// parse turns them into the core's query, the page the core returns is answered 200.
func queryAndCall[Q, Resp any](parse func(*http.Request) (Q, error), call func(context.Context, gateway.Caller, Q) (Resp, error)) endpoint {
	return func(_ http.ResponseWriter, r *http.Request, c gateway.Caller) (int, any, error) {
		q, err := parse(r)
		if err != nil {
			return 0, nil, err
		}
		resp, err := call(r.Context(), c, q)
		return http.StatusOK, resp, err
	}
}

// pageNumbers reads the paging of the page-numbered lists (sandboxes, snapshots): page
// (from 1, default 1) and pageSize (1–200, default 20).
func pageNumbers(q url.Values) (page, pageSize int, err error) {
	if page, err = intParam(q, "page", 1, 1, 1<<30); err != nil {
		return 0, 0, err
	}
	if pageSize, err = intParam(q, "pageSize", gateway.DefaultPageSize, 1, 200); err != nil {
		return 0, 0, err
	}
	return page, pageSize, nil
}

// stateParam reads a list's state filter (repeated or comma-separated, any case): each
// must be one of known, or the request is refused naming them, rather than matching
// nothing.
func stateParam(q url.Values, known []string) ([]string, error) {
	states := listParam(q["state"])
	for _, st := range states {
		if !slices.ContainsFunc(known, func(k string) bool { return strings.EqualFold(k, st) }) {
			return nil, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "state %q: want one of %s", st, strings.Join(known, ", "))
		}
	}
	return states, nil
}

// listParam splits the values of a repeated, comma-separated query parameter
// (state=Running,Paused&state=Pending).
func listParam(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, part := range strings.Split(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}

// startEventStream answers 200 with a text/event-stream that proxies in front must not
// buffer, and returns the controller that flushes it.
func startEventStream(w http.ResponseWriter) *http.ResponseController {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return rc
}

// writeEvent writes one event of an event stream, v as its JSON data, without flushing;
// it reports whether the write went through.
func writeEvent(w io.Writer, event string, v any) bool {
	data, _ := json.Marshal(v)
	_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data)
	return err == nil
}

// The pool routes below reach the pool feature (Service.Pools) when a request comes, not
// when the routes are built.

func (h *Handler) createPool(ctx context.Context, c gateway.Caller, req gateway.PoolRequest) (*gateway.PoolView, error) {
	return h.svc.Pools().Create(ctx, c, req)
}

func (h *Handler) updatePool(ctx context.Context, c gateway.Caller, name string, req gateway.PoolRequest) (*gateway.PoolView, error) {
	return h.svc.Pools().Update(ctx, c, name, req)
}

func (h *Handler) listPools(ctx context.Context, c gateway.Caller) ([]gateway.PoolView, error) {
	return h.svc.Pools().List(ctx, c)
}

func (h *Handler) getPool(ctx context.Context, c gateway.Caller, name string) (*gateway.PoolView, error) {
	return h.svc.Pools().Get(ctx, c, name)
}

func (h *Handler) deletePool(ctx context.Context, c gateway.Caller, name string) error {
	return h.svc.Pools().Delete(ctx, c, name)
}

func (h *Handler) deleteBatch(ctx context.Context, c gateway.Caller, id string) error {
	return h.svc.Batches().Delete(ctx, c, id)
}
