package api

import (
	"net/http"
	"strings"

	"github.com/sandgate/sandgate/gateway"
)

// createSnapshot serves POST /v1/sandboxes/{id}/snapshots; the body ({name?}) may be empty.
func (h *Handler) createSnapshot(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var req gateway.SnapshotRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &req); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	snap, err := h.svc.CreateSnapshot(r.Context(), c, r.PathValue("id"), req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, snap)
}

// listSnapshots serves GET /v1/snapshots?sandboxId=&state=&page=&pageSize=.
func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	q := r.URL.Query()
	sq := gateway.SnapshotQuery{SandboxID: q.Get("sandboxId")}
	for _, st := range q["state"] {
		for _, part := range strings.Split(st, ",") {
			if part = strings.TrimSpace(part); part != "" {
				sq.States = append(sq.States, part)
			}
		}
	}
	var err error
	if sq.Page, err = intParam(q, "page", 1, 1, 1<<30); err != nil {
		h.writeError(w, r, err)
		return
	}
	if sq.PageSize, err = intParam(q, "pageSize", 20, 1, 200); err != nil {
		h.writeError(w, r, err)
		return
	}
	resp, err := h.svc.ListSnapshots(r.Context(), c, sq)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *Handler) getSnapshot(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	snap, err := h.svc.GetSnapshot(r.Context(), c, r.PathValue("id"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, snap)
}

func (h *Handler) deleteSnapshot(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	if err := h.svc.DeleteSnapshot(r.Context(), c, r.PathValue("id")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
