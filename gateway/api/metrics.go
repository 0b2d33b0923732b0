package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sandgate/sandgate/gateway"
)

// serveMetrics serves the Prometheus scrape (Caddy's series and the gateway's) to the
// platform admin only: it names every tenant and pool of the deployment. The check is
// here and not only in the Rego access policy, so that an operator's policy that lets
// viewers read everything does not open it. A scraper without the admin key uses
// SANDGATE_METRICS_LISTEN instead.
func (h *Handler) serveMetrics(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	if !c.Admin {
		h.writeError(w, r, gateway.Errorf(gateway.KindForbidden, gateway.CodeForbidden, "metrics are for the platform admin key (or the SANDGATE_METRICS_LISTEN listener)"))
		return
	}
	if h.opts.Metrics == nil {
		h.writeError(w, r, gateway.Errorf(gateway.KindNotFound, gateway.CodeRouteNotFound, "metrics are not served by this gateway"))
		return
	}
	h.opts.Metrics.ServeHTTP(w, r)
}

// fleetMetrics is GET /v1/fleet/metrics: the fleet's history for the console (admin only).
func (h *Handler) fleetMetrics(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	h.answer(w, r, http.StatusOK)(h.svc.Usage().Fleet(c))
}

// sandboxUsage is GET /v1/sandboxes/{id}/metrics: the sandbox's resource history, from
// the usage feature (Service.Usage) reached when a request comes, not when the routes
// are built.
func (h *Handler) sandboxUsage(ctx context.Context, c gateway.Caller, id string) (*gateway.SandboxUsage, error) {
	return h.svc.Usage().SandboxUsage(ctx, c, id)
}

// watchSandboxMetrics is GET /v1/sandboxes/{id}/metrics/watch, a text/event-stream: one
// "usage" event (the body of GET …/metrics), then a "point" event for each new point,
// and "gone" when the sandbox is deleted or not found any more.
func (h *Handler) watchSandboxMetrics(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	id := r.PathValue("id")
	ctx := r.Context()
	u, err := h.svc.Usage().SandboxUsage(ctx, c, id)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	rc := startEventStream(w)
	send := func(event string, v any) bool { return writeEvent(w, event, v) && rc.Flush() == nil }
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil || !send("usage", u) {
		return
	}
	var last time.Time
	if u.Current != nil {
		last = u.Current.Time
	}
	every := h.svc.Usage().Interval()
	if every <= 0 {
		every = gateway.DefaultUsageInterval
	}
	tick := time.NewTicker(every / 2)
	defer tick.Stop()
	idle := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p := h.svc.Usage().Latest(id)
		if p != nil && p.Time.After(last) {
			last, idle = p.Time, 0
			if !send("point", p) {
				return
			}
			continue
		}
		// No new point: make sure the sandbox (still) exists for this caller, and keep
		// the connection alive for proxies in front.
		if idle++; idle%6 == 0 {
			if _, err := h.svc.Lookup(ctx, c, id); err != nil {
				send("gone", map[string]string{"id": id})
				return
			}
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}
