package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/sandgate/sandgate/gateway"
)

// eventQuery reads the filters of the event routes and authorizes audit.read on the
// tenant they name (the caller's own by default; another one only for an admin, and it
// looks absent to anyone else).
func (h *Handler) eventQuery(r *http.Request, c gateway.Caller) (gateway.EventQuery, error) {
	v := r.URL.Query()
	q := gateway.EventQuery{Tenant: c.Tenant, Sandbox: v.Get("sandbox"), Cursor: v.Get("cursor")}
	if t := v.Get("tenant"); t != "" {
		q.Tenant = t
	}
	q.Types = listParam(v["type"])
	q.Exclude = listParam(v["exclude"])
	if q.Cursor != "" && !gateway.ValidAuditCursor(q.Cursor) {
		return q, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "cursor %q is not a cursor this API returned", q.Cursor)
	}
	var err error
	if q.Limit, q.Newest, err = pageParams(v); err != nil {
		return q, err
	}
	res := gateway.Resource{Kind: "audit", Tenant: q.Tenant}
	if err := h.svc.Authorize(r.Context(), c, "audit.read", res, r.Method, r.URL.Path, nil); err != nil {
		return q, err
	}
	return q, nil
}

// listEvents is GET /v1/events: a page of the tenant's event stream, filtered.
func (h *Handler) listEvents(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	q, err := h.eventQuery(r, c)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	page, err := h.svc.Events().Read(r.Context(), q)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// streamEvents is GET /v1/events/stream: the tenant's events as they are written (on any
// gateway), filtered, as text/event-stream; resumable with Last-Event-ID.
func (h *Handler) streamEvents(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	q, err := h.eventQuery(r, c)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		if !gateway.ValidAuditCursor(id) {
			h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "Last-Event-ID %q is not an event id", id))
			return
		}
		q.Cursor = id
	}
	rc := startEventStream(w)
	if _, err := fmt.Fprint(w, "retry: 2000\n: event stream\n\n"); err != nil || rc.Flush() != nil {
		return
	}
	_ = h.svc.Events().Follow(r.Context(), q,
		func() error {
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return err
			}
			return rc.Flush()
		},
		func(ev gateway.Event) error {
			data, _ := json.Marshal(ev)
			if _, err := fmt.Fprintf(w, "id: %s\nevent: event\ndata: %s\n\n", ev.ID, data); err != nil {
				return err
			}
			return rc.Flush()
		})
}
