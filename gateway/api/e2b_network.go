package api

import (
	"encoding/json"
	"net/http"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/egress"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
)

// A sandbox's network through the E2B door: E2B's allowOut/denyOut and internet switch
// are the sandbox's egress policy, judged and installed by the egress feature as a
// change made through the OpenSandbox door's egress API is.

// e2bNetworkUpdate is the body of PUT /sandboxes/{id}/network. It replaces the egress
// configuration whole: what it leaves out is cleared. E2B's per-host transform rules,
// egress proxy and DNS servers are read and ignored.
type e2bNetworkUpdate struct {
	AllowOut            []string `json:"allowOut"`
	DenyOut             []string `json:"denyOut"`
	AllowInternetAccess *bool    `json:"allow_internet_access"`
}

// e2bUpdateNetwork is PUT /sandboxes/{id}/network: 204 once the sandbox's enforcer
// has the new policy. Beside the route's own action it is the access policy's
// decision on a change through the egress API (sandbox.proxy on the enforcer's port,
// PUT /policy), so that the two doors give a key the same powers.
func (h *Handler) e2bUpdateNetwork(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var body e2bNetworkUpdate
	if err := decodeJSON(w, r, &body); err != nil {
		h.writeError(w, r, err)
		return
	}
	sb, _, err := h.e2bLookup(r, c)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	grant := access.ProxyAccess{Kind: principal.CredAPIKey, Caller: &c, Method: http.MethodPut, Path: "/policy"}
	if err := h.svc.Access().AuthorizeProxy(r.Context(), sb, agentproto.EgressPort, grant); err != nil {
		h.writeError(w, r, err)
		return
	}
	policy, ok := e2bEgressPolicy(body.AllowInternetAccess, &e2bNetwork{AllowOut: body.AllowOut, DenyOut: body.DenyOut})
	if !ok {
		policy = map[string]any{"defaultAction": "allow", "egress": []map[string]string{}}
	}
	js, _ := json.Marshal(policy)
	change, err := h.svc.Egress().Change(r.Context(), sb, egress.PolicyChange{Op: egress.PolicyReplace, Body: js, KeyID: c.KeyID})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if change.Status >= 300 {
		// The enforcer's refusal, relayed in E2B's shape (its status stands for a
		// mistake of the caller's; anything else is the gateway's 502).
		var refusal struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(change.Body, &refusal)
		if refusal.Message == "" {
			refusal.Message = "the sandbox's egress enforcer refused the change"
		}
		status := change.Status
		if status >= 500 {
			status = http.StatusBadGateway
		}
		writeJSON(w, status, e2bError{status, refusal.Message})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bInternetAllowed reports whether a sandbox's egress policy in force (as its record
// keeps it) lets it reach the internet by default; a sandbox without one does.
func e2bInternetAllowed(sb *gateway.SandboxRecord) bool {
	var p struct {
		DefaultAction string `json:"defaultAction"`
	}
	if len(sb.EgressPolicy) == 0 || json.Unmarshal(sb.EgressPolicy, &p) != nil {
		return true
	}
	return p.DefaultAction != "deny"
}
