package api

import (
	"net/http"

	"github.com/sandgate/sandgate/gateway"
)

func (h *Handler) createPool(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var req gateway.PoolRequest
	if err := decodeJSON(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	p, err := h.svc.CreatePool(r.Context(), c, req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, p)
}

func (h *Handler) listPools(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	items, err := h.svc.ListPools(r.Context(), c)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

func (h *Handler) getPool(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	p, err := h.svc.GetPool(r.Context(), c, r.PathValue("name"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (h *Handler) updatePool(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var req gateway.PoolRequest
	if err := decodeJSON(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	p, err := h.svc.UpdatePool(r.Context(), c, r.PathValue("name"), req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (h *Handler) deletePool(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	if err := h.svc.DeletePool(r.Context(), c, r.PathValue("name")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) createBatch(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var req gateway.BatchRequest
	if err := decodeJSON(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	b, err := h.svc.CreateBatch(r.Context(), c, req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, b)
}

func (h *Handler) getBatch(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	b, err := h.svc.GetBatch(r.Context(), c, r.PathValue("id"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

func (h *Handler) deleteBatch(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	if err := h.svc.DeleteBatch(r.Context(), c, r.PathValue("id")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
