package gateway

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
)

// Metrics returns the gateway's event-driven series, for registration.
func (s *Service) Metrics() *metrics.Set { return s.metrics }

// MetricsCollectors returns every series of the gateway, the fleet ones (read from the
// store at each scrape) included; tenantLabel keeps the tenant label on sandgate_sandboxes.
func (s *Service) MetricsCollectors(tenantLabel bool) []prometheus.Collector {
	fleet := metrics.NewFleetCollector(s.readFleet, metrics.FleetOptions{TenantLabel: tenantLabel})
	return append(s.metrics.Collectors(), fleet)
}

// readFleet reads what the fleet series report: one pass over the records, the pools'
// counts, the oldest expiry and this replica's plugin statistics.
func (s *Service) readFleet(ctx context.Context) (metrics.Fleet, error) {
	f := metrics.Fleet{Sandboxes: map[metrics.StateTenant]int{}}
	recs, err := s.store.ListSandboxes(ctx, "")
	if err != nil {
		return f, err
	}
	for _, sb := range recs {
		f.Sandboxes[metrics.StateTenant{State: sb.State, Tenant: sb.Tenant}]++
	}
	pools, err := s.store.ListPools(ctx, "")
	if err != nil {
		return f, err
	}
	for _, p := range pools {
		c, err := s.store.CountPool(ctx, p.Tenant, p.Name)
		if err != nil {
			return f, err
		}
		f.Pools = append(f.Pools, metrics.Pool{Name: store.PoolKey(p.Tenant, p.Name), Available: int(c.Available), Target: p.Capacity.BufferMin})
	}
	oldest, err := s.store.OldestExpiry(ctx)
	if err != nil {
		return f, err
	}
	if !oldest.IsZero() && oldest.Before(time.Now()) {
		f.OldestOverdue = oldest
	}
	f.Plugins = s.pluginMetrics()
	return f, nil
}

// pluginMetrics reads the call statistics of the plugins loaded on this replica.
func (s *Service) pluginMetrics() []metrics.Plugin {
	ps := s.pluginState()
	if ps == nil || ps.host == nil {
		return nil
	}
	ps.mu.Lock()
	tenants := make([]string, 0, len(ps.tenants))
	for t := range ps.tenants {
		tenants = append(tenants, t)
	}
	ps.mu.Unlock()
	var out []metrics.Plugin
	for _, t := range tenants {
		for _, info := range ps.host.List(t) {
			st, err := ps.host.Stats(t, info.Name)
			if err != nil {
				continue
			}
			out = append(out, metrics.Plugin{Name: t + "/" + info.Name, Calls: st.Invocations, Errors: st.Errors, P50: st.P50, P99: st.P99})
		}
	}
	return out
}
