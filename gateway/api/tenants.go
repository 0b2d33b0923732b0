package api

import (
	"net/http"

	"github.com/sandgate/sandgate/gateway"
)

func (h *Handler) createTenant(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var req gateway.TenantRequest
	if err := decodeJSON(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	t, err := h.svc.Tenancy().CreateTenant(r.Context(), req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, t)
}

func (h *Handler) listTenants(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	items, err := h.svc.Tenancy().ListTenants(r.Context())
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

func (h *Handler) getTenant(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	t, err := h.svc.Tenancy().GetTenant(r.Context(), r.PathValue("id"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (h *Handler) updateTenant(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var req gateway.TenantRequest
	if err := decodeJSON(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	t, err := h.svc.Tenancy().UpdateTenant(r.Context(), r.PathValue("id"), req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (h *Handler) createKey(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var req struct {
		Role string `json:"role"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	// Decided with the body: nobody but an admin issues an admin key.
	if err := h.svc.Authorize(r.Context(), c, "key.create", resourceFor("key.create", r, c), r.Method, r.URL.Path, map[string]any{"role": req.Role}); err != nil {
		h.writeError(w, r, err)
		return
	}
	k, err := h.svc.Tenancy().CreateKey(r.Context(), r.PathValue("id"), req.Role)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, k)
}

func (h *Handler) listKeys(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	items, err := h.svc.Tenancy().ListKeys(r.Context(), r.PathValue("id"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

func (h *Handler) revokeKey(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	if err := h.svc.Tenancy().RevokeKey(r.Context(), r.PathValue("id"), r.PathValue("keyId")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) whoami(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	// can: what the key may do, for a console that shows only that.
	writeJSON(w, http.StatusOK, map[string]any{"tenant": c.Tenant, "role": c.Role(), "keyId": c.KeyID, "admin": c.Admin,
		"can": h.svc.PolicyAdmin().Can(r.Context(), c, gateway.ConsoleActions)})
}

func (h *Handler) rotateLinkKeys(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	kid, err := h.svc.Access().RotateLinkKeys(r.Context(), c)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"current": kid})
}
