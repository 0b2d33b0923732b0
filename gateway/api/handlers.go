package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/sandgate/sandgate/gateway"
)

// The shapes most routes share. A lifecycle route reads its input (a JSON body, a path
// value, query parameters), calls the core once and answers with the result or the
// error; the helpers below hold that shape, so that the route table states only what
// differs: which core call, which path value, which success status. A handler with more
// to do than that is a method of its own (renewSandbox, getEndpoint, putPlugin…).

// handlerFunc is a route's handler: the request and the caller its route authenticated.
type handlerFunc = func(http.ResponseWriter, *http.Request, gateway.Caller)

// decodeAndCall serves a JSON body handed to the core as it is (POST /pools): the
// result is answered with status.
func decodeAndCall[Req, Resp any](status int, call func(context.Context, gateway.Caller, Req) (Resp, error)) handlerFunc {
	return decodeAndCallOn("", status, func(ctx context.Context, c gateway.Caller, _ string, req Req) (Resp, error) {
		return call(ctx, c, req)
	})
}

// decodeAndCallOn is decodeAndCall for the resource the path value param names
// (PUT /pools/{name}).
func decodeAndCallOn[Req, Resp any](param string, status int, call func(context.Context, gateway.Caller, string, Req) (Resp, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
		var req Req
		if err := decodeJSON(w, r, &req); err != nil {
			writeError(w, r, err)
			return
		}
		answer(w, r, status)(call(r.Context(), c, r.PathValue(param), req))
	}
}

// getOn answers 200 with what the core returns for the resource the path value param
// names (GET /pools/{name}).
func getOn[Resp any](param string, call func(context.Context, gateway.Caller, string) (Resp, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
		answer(w, r, http.StatusOK)(call(r.Context(), c, r.PathValue(param)))
	}
}

// doOn serves an action on the resource the path value param names that answers no
// body, only status: 204 for a delete, 202 for a pause.
func doOn(param string, status int, call func(context.Context, gateway.Caller, string) error) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
		if err := call(r.Context(), c, r.PathValue(param)); err != nil {
			writeError(w, r, err)
			return
		}
		w.WriteHeader(status)
	}
}

// listAll answers 200 {"items": […]} with a list the core returns whole (GET /pools).
func listAll[T any](call func(context.Context, gateway.Caller) ([]T, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
		items, err := call(r.Context(), c)
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"items": items})
	}
}

// queryAndCall serves a list read from query parameters (filters, a page or a cursor):
// parse turns them into the core's query, the page the core returns is answered 200.
func queryAndCall[Q, Resp any](parse func(*http.Request) (Q, error), call func(context.Context, gateway.Caller, Q) (Resp, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
		q, err := parse(r)
		if err != nil {
			writeError(w, r, err)
			return
		}
		answer(w, r, http.StatusOK)(call(r.Context(), c, q))
	}
}

// answer returns what answers a core call: its result as JSON with status, or its error.
// It takes the call's two results at once: answer(w, r, http.StatusOK)(h.svc.Get(…)).
func answer(w http.ResponseWriter, r *http.Request, status int) func(v any, err error) {
	return func(v any, err error) {
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, status, v)
	}
}

// pageNumbers reads the paging of the page-numbered lists (sandboxes, snapshots): page
// (from 1, default 1) and pageSize (1–200, default 20).
func pageNumbers(q url.Values) (page, pageSize int, err error) {
	if page, err = intParam(q, "page", 1, 1, 1<<30); err != nil {
		return 0, 0, err
	}
	if pageSize, err = intParam(q, "pageSize", 20, 1, 200); err != nil {
		return 0, 0, err
	}
	return page, pageSize, nil
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
