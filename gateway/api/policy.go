package api

import (
	"encoding/json"
	"net/http"

	"github.com/sandgate/sandgate/gateway"
)

// The policy API for policy authors (admins): see gateway/policyadmin.

// policyChanges is the body of validate, PUT, eval and test: module name → source.
type policyChanges struct {
	Modules map[string]string `json:"modules"`
}

func (h *Handler) getPolicy(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	st, err := h.svc.PolicyAdmin().State(r.Context())
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *Handler) validatePolicy(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var req policyChanges
	if err := decodeJSON(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	errs, err := h.svc.PolicyAdmin().Validate(r.Context(), req.Modules)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if len(errs) > 0 {
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "errors": errs})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "errors": []gateway.PolicyError{}})
}

func (h *Handler) putPolicy(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var req policyChanges
	if err := decodeJSON(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	st, err := h.svc.PolicyAdmin().Put(r.Context(), c, req.Modules)
	if err != nil {
		h.writePolicyError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// resetPolicy is DELETE /v1/policy/overrides[?module=name].
func (h *Handler) resetPolicy(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	st, err := h.svc.PolicyAdmin().Reset(r.Context(), c, r.URL.Query().Get("module"))
	if err != nil {
		h.writePolicyError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *Handler) evalPolicy(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var req struct {
		Decision string            `json:"decision"`
		Input    json.RawMessage   `json:"input"`
		Modules  map[string]string `json:"modules"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	if req.Decision == "" {
		h.writeError(w, r, gateway.Errorf(gateway.KindInvalid, gateway.CodeInvalidParameter, "decision is required: access, admission, egress or a query such as data.sandgate.admission.deny"))
		return
	}
	res, err := h.svc.PolicyAdmin().Eval(r.Context(), req.Decision, req.Input, req.Modules)
	if err != nil {
		h.writePolicyError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (h *Handler) testPolicy(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var req policyChanges
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &req); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	rep, err := h.svc.PolicyAdmin().Test(r.Context(), req.Modules)
	if err != nil {
		h.writePolicyError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// writePolicyError answers a policy that does not compile with its located errors beside
// the usual {code, message}.
func (h *Handler) writePolicyError(w http.ResponseWriter, r *http.Request, err error) {
	e, ok := gateway.AsError(err)
	if ok && e.Code == gateway.CodePolicyInvalid {
		errs, _ := gateway.PolicyErrors(e.Cause)
		writeJSON(w, statusOf(e.Kind), map[string]any{"code": e.Code, "message": e.Message, "errors": errs})
		return
	}
	h.writeError(w, r, err)
}
