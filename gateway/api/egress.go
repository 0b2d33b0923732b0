package api

import (
	"io"
	"net/http"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/egress"
	"github.com/sandgate/sandgate/policy"
)

// policyOps are the egress API's changes of /policy by the methods that carry them
// (a GET reads it).
var policyOps = map[string]egress.PolicyOp{
	http.MethodPost: egress.PolicySet, http.MethodPut: egress.PolicyReplace,
	http.MethodPatch: egress.PolicyMerge, http.MethodDelete: egress.PolicyRemove,
}

// vaultOps are the vault API's operations by the methods that carry them.
var vaultOps = map[string]egress.VaultOp{
	http.MethodGet: egress.VaultRead, http.MethodPost: egress.VaultCreate, http.MethodPut: egress.VaultReplace,
	http.MethodPatch: egress.VaultChange, http.MethodDelete: egress.VaultDelete,
}

// answerEgress answers a request to a sandbox's egress API (port 18080) that the core
// found is for /policy or the credential vault (gateway.Upstream.Egress): changes of
// /policy pass through the Rego egress policy before the enforcer sees them
// (egress.Manager.Change), reads show the sandbox's own rules apart from the platform's
// (egress.Manager.Policy). Both are signed requests of the gateway's own; the caller's
// credential never reaches the enforcer. Other paths (/healthz) are forwarded without
// any credential.
func (h *Handler) answerEgress(w http.ResponseWriter, r *http.Request, up *gateway.Upstream) {
	sb := up.Sandbox
	if up.Egress == gateway.EgressVault {
		h.relayVault(w, r, sb, up.EgressPath, up.Access)
		return
	}
	if r.Method == http.MethodGet {
		answer, err := h.svc.Egress().Policy(r.Context(), sb)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		writeAnswer(w, answer)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		h.writeError(w, r, gateway.Errorf(gateway.KindTooLarge, policy.CodeInvalidEgress, "request body exceeds %d bytes", maxBodyBytes))
		return
	}
	change := egress.PolicyChange{Op: policyOps[r.Method], Body: body, Targets: r.URL.Query()["target"], KeyID: changedBy(up.Access)}
	answer, err := h.svc.Egress().Change(r.Context(), sb, change)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeAnswer(w, answer)
}

// changedBy is the key a change through a sandbox's egress or vault API is made with
// (the console session's key, when a session made it), "" when none: the change is the
// sandbox's tenant's, and its event names that key.
func changedBy(proxyAccess access.ProxyAccess) string {
	if proxyAccess.Caller == nil {
		return ""
	}
	return proxyAccess.Caller.KeyID
}

// relayVault answers the credential vault API (/credential-vault...) through
// egress.Manager.Vault: Rego checks the bindings, the gateway signs.
func (h *Handler) relayVault(w http.ResponseWriter, r *http.Request, sb *gateway.SandboxRecord, path string, proxyAccess access.ProxyAccess) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		h.writeError(w, r, gateway.Errorf(gateway.KindTooLarge, gateway.CodeVaultInvalidRequest, "request body exceeds %d bytes", maxBodyBytes))
		return
	}
	req := egress.VaultRequest{Op: vaultOps[r.Method], Path: path, Body: body, KeyID: changedBy(proxyAccess)}
	answer, err := h.svc.Egress().Vault(r.Context(), sb, req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeAnswer(w, answer)
}

// writeAnswer relays an enforcer's answer as it gave it: its status, and its JSON
// document when it has one.
func writeAnswer(w http.ResponseWriter, answer *egress.Answer) {
	if answer.Status != http.StatusNoContent {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(answer.Status)
	_, _ = w.Write(answer.Body)
}
