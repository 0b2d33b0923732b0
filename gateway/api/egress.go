package api

import (
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/egress"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
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

// interceptEgress handles requests to a sandbox's egress API (port 18080) for
// /policy: changes pass through the Rego egress policy before the enforcer sees them
// (egress.Manager.Change), reads show the sandbox's own rules apart from the platform's
// (egress.Manager.Policy). Both are signed requests of the gateway's own; the caller's
// credential never reaches the enforcer. Other paths (/healthz) are proxied without any
// credential. It reports whether it answered the request.
func (h *Handler) interceptEgress(w http.ResponseWriter, r *http.Request, sb *gateway.SandboxRecord, port int, proxyAccess access.ProxyAccess) bool {
	if port != agentproto.EgressPort {
		return false
	}
	if _, ok := vaultOps[r.Method]; !ok {
		return false // a method of neither API (the vault's are the policy's too): proxied
	}
	path := egressPath(r, sb.ID, port)
	if egress.IsVaultPath(path) {
		h.relayVault(w, r, sb, path, proxyAccess)
		return true
	}
	if path != "/policy" && path != "/policy/" {
		return false
	}
	if r.Method == http.MethodGet {
		answer, err := h.svc.Egress().Policy(r.Context(), sb)
		if err != nil {
			h.writeError(w, r, err)
			return true
		}
		writeAnswer(w, answer)
		return true
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		h.writeError(w, r, gateway.Errorf(gateway.KindTooLarge, policy.CodeInvalidEgress, "request body exceeds %d bytes", maxBodyBytes))
		return true
	}
	change := egress.PolicyChange{Op: policyOps[r.Method], Body: body, Targets: r.URL.Query()["target"], KeyID: changedBy(proxyAccess)}
	answer, err := h.svc.Egress().Change(r.Context(), sb, change)
	if err != nil {
		h.writeError(w, r, err)
		return true
	}
	writeAnswer(w, answer)
	return true
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

// egressPath is the path the enforcer would see: what follows /sandboxes/{id}/proxy/{port}
// in path mode (or /v1/console/sandboxes/{id}/ports/{port} on the console's route), the
// whole path in host mode ({id}-{port}.<preview domain>).
func egressPath(r *http.Request, id string, port int) string {
	path := r.URL.Path
	if console := consoleProxyPrefix + id + "/ports/" + strconv.Itoa(port); strings.HasPrefix(path, console) {
		path = path[len(console):]
	} else if i := strings.Index(path, "/sandboxes/"+id+"/proxy/"+strconv.Itoa(port)); i >= 0 {
		path = path[i+len("/sandboxes/"+id+"/proxy/"+strconv.Itoa(port)):]
	}
	if path == "" {
		path = "/"
	}
	return path
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
