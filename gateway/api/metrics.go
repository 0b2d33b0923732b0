package api

import (
	"net/http"

	"github.com/sandgate/sandgate/gateway"
)

// serveMetrics serves the Prometheus scrape (Caddy's series and the gateway's) to the
// platform admin only: it names every tenant and pool of the deployment. The check is
// here and not only in the Rego access policy, so that an operator's policy that lets
// viewers read everything does not open it. A scraper without the admin key uses
// SANDGATE_METRICS_LISTEN instead.
func (h *Handler) serveMetrics(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	if !c.Admin {
		writeError(w, r, gateway.Errorf(http.StatusForbidden, gateway.CodeForbidden, "metrics are for the platform admin key (or the SANDGATE_METRICS_LISTEN listener)"))
		return
	}
	if h.opts.Metrics == nil {
		writeError(w, r, gateway.Errorf(http.StatusNotFound, gateway.CodeRouteNotFound, "metrics are not served by this gateway"))
		return
	}
	h.opts.Metrics.ServeHTTP(w, r)
}
