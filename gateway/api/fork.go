package api

import (
	"net/http"

	"github.com/sandgate/sandgate/gateway"
)

// fork serves POST /v1/sandboxes/{id}/fork {"count": N}: answered like a batch (202).
func (h *Handler) fork(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var req gateway.ForkRequest
	if err := decodeJSON(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	b, err := h.svc.Fork(r.Context(), c, r.PathValue("id"), req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, b)
}
