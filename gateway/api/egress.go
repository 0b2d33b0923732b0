package api

import (
	"net/http"

	"github.com/sandgate/sandgate/gateway/store"
)

// interceptEgress handles requests to a sandbox's egress API (port 18080) that change
// its policy: they pass through the Rego egress policy before the enforcer sees them.
// It reports whether it answered the request.
// TODO(egress integration): not wired yet; every request is proxied as is.
func (h *Handler) interceptEgress(w http.ResponseWriter, r *http.Request, sb *store.Sandbox, port int) bool {
	return false
}
