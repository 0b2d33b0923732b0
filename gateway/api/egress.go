package api

import (
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
)

// interceptEgress handles requests to a sandbox's egress API (port 18080) for
// /policy: changes pass through the Rego egress policy before the enforcer sees them
// (gateway.Service.ChangeEgress), reads show the sandbox's own rules apart from the
// platform's (gateway.Service.EgressPolicy). Both are signed requests of the gateway's
// own; the caller's credential never reaches the enforcer. Other paths (/healthz) are
// proxied without any credential. It reports whether it answered the request.
func (h *Handler) interceptEgress(w http.ResponseWriter, r *http.Request, sb *gateway.SandboxRecord, port int, proxyAccess access.ProxyAccess) bool {
	if port != agentproto.EgressPort {
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return false
	}
	path := egressPath(r, sb.ID, port)
	if gateway.IsVaultPath(path) {
		h.relayVault(w, r, sb, path, proxyAccess)
		return true
	}
	if path != "/policy" && path != "/policy/" {
		return false
	}
	if r.Method == http.MethodGet {
		answer, err := h.svc.EgressPolicy(r.Context(), sb)
		if err != nil {
			h.writeError(w, r, err)
			return true
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(answer.Status)
		_, _ = w.Write(answer.Body)
		return true
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		h.writeError(w, r, gateway.Errorf(gateway.KindTooLarge, policy.CodeInvalidEgress, "request body exceeds %d bytes", maxBodyBytes))
		return true
	}
	// The change is the sandbox's tenant's; its event names the key (or the console
	// session's key) that made it, when a key did.
	who := gateway.Caller{Tenant: sb.Tenant}
	if proxyAccess.Caller != nil {
		who.KeyID = proxyAccess.Caller.KeyID
	}
	change, err := h.svc.ChangeEgress(r.Context(), who, sb, r.Method, r.URL.Query(), body)
	if err != nil {
		h.writeError(w, r, err)
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(change.Status)
	_, _ = w.Write(change.Body)
	return true
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
// gateway.Service.VaultRequest: Rego checks the bindings, the gateway signs.
func (h *Handler) relayVault(w http.ResponseWriter, r *http.Request, sb *gateway.SandboxRecord, path string, proxyAccess access.ProxyAccess) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		h.writeError(w, r, gateway.Errorf(gateway.KindTooLarge, gateway.CodeVaultInvalidRequest, "request body exceeds %d bytes", maxBodyBytes))
		return
	}
	who := gateway.Caller{Tenant: sb.Tenant}
	if proxyAccess.Caller != nil {
		who.KeyID = proxyAccess.Caller.KeyID
	}
	answer, err := h.svc.VaultRequest(r.Context(), who, sb, r.Method, path, body)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if answer.Status != http.StatusNoContent {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(answer.Status)
	_, _ = w.Write(answer.Body)
}
