package usage

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// FleetPoint is one point of the fleet's history, for the console's fleet page.
type FleetPoint struct {
	Time time.Time `json:"time"`
	// Sandboxes counts sandboxes by state.
	Sandboxes map[string]int `json:"sandboxes"`
	// CreateP50Seconds and CreateP99Seconds are over the cold creates this gateway
	// finished in the last five minutes (Creates of them); null when there were none.
	CreateP50Seconds *float64 `json:"createP50Seconds"`
	CreateP99Seconds *float64 `json:"createP99Seconds"`
	Creates          int      `json:"creates"`
	// Pools are every pool's fill.
	Pools []FleetPool `json:"pools"`
}

// FleetPool is one pool's fill at a point.
type FleetPool struct {
	Name      string `json:"name"` // tenant/name
	Available int    `json:"available"`
	Target    int    `json:"target"`
}

// FleetHistory is the body of GET /v1/fleet/metrics.
type FleetHistory struct {
	IntervalSeconds float64      `json:"intervalSeconds"`
	History         []FleetPoint `json:"history"`
}

// createWindow is how far back the fleet's create latencies reach.
const createWindow = 5 * time.Minute

// sampleFleet appends a point made from recs (every record, as the sampler read them).
func (m *Manager) sampleFleet(ctx context.Context, recs []*store.Sandbox) {
	p := FleetPoint{Time: time.Now().UTC(), Sandboxes: map[string]int{}, Pools: []FleetPool{}}
	for _, sb := range recs {
		p.Sandboxes[sb.State]++
	}
	if p50, p99, n := m.metrics.RecentCreateQuantiles(createWindow); n > 0 {
		a, b := p50.Seconds(), p99.Seconds()
		p.CreateP50Seconds, p.CreateP99Seconds, p.Creates = &a, &b, n
	}
	if pools, err := m.store.ListPools(ctx, ""); err == nil {
		for _, pl := range pools {
			if c, err := m.store.CountPool(ctx, pl.Tenant, pl.Name); err == nil {
				p.Pools = append(p.Pools, FleetPool{Name: store.PoolKey(pl.Tenant, pl.Name), Available: int(c.Available), Target: pl.Capacity.BufferMin})
			}
		}
	}
	m.fleetMu.Lock()
	defer m.fleetMu.Unlock()
	m.fleetPoints = append(m.fleetPoints, p)
	if keep := m.keep(); len(m.fleetPoints) > keep {
		m.fleetPoints = append(m.fleetPoints[:0], m.fleetPoints[len(m.fleetPoints)-keep:]...)
	}
}

// Fleet returns the fleet's history; it names every tenant's pools, so it is the
// platform admin's only.
func (m *Manager) Fleet(caller principal.Caller) (*FleetHistory, error) {
	if !caller.Admin {
		return nil, fault.Errorf(fault.KindForbidden, fault.CodeForbidden, "the fleet's history is for the platform admin key")
	}
	m.fleetMu.Lock()
	defer m.fleetMu.Unlock()
	return &FleetHistory{IntervalSeconds: m.cfg.Interval.Seconds(), History: append([]FleetPoint{}, m.fleetPoints...)}, nil
}

// Collectors returns every series of the gateway for registration: the event-driven
// ones and the fleet's, read from the store at each scrape; tenantLabel keeps the
// tenant label on sandgate_sandboxes.
func (m *Manager) Collectors(tenantLabel bool) []prometheus.Collector {
	fleet := metrics.NewFleetCollector(m.readFleet, metrics.FleetOptions{TenantLabel: tenantLabel})
	return append(m.metrics.Collectors(), fleet)
}

// readFleet reads what the fleet series report: one pass over the records, the pools'
// counts, the oldest expiry and this replica's plugin statistics.
func (m *Manager) readFleet(ctx context.Context) (metrics.Fleet, error) {
	f := metrics.Fleet{Sandboxes: map[metrics.StateTenant]int{}}
	recs, err := m.store.ListSandboxes(ctx, "")
	if err != nil {
		return f, err
	}
	for _, sb := range recs {
		f.Sandboxes[metrics.StateTenant{State: sb.State, Tenant: sb.Tenant}]++
	}
	pools, err := m.store.ListPools(ctx, "")
	if err != nil {
		return f, err
	}
	for _, p := range pools {
		c, err := m.store.CountPool(ctx, p.Tenant, p.Name)
		if err != nil {
			return f, err
		}
		f.Pools = append(f.Pools, metrics.Pool{Name: store.PoolKey(p.Tenant, p.Name), Available: int(c.Available), Target: p.Capacity.BufferMin})
	}
	oldest, err := m.store.OldestExpiry(ctx)
	if err != nil {
		return f, err
	}
	if !oldest.IsZero() && oldest.Before(time.Now()) {
		f.OldestOverdue = oldest
	}
	f.Plugins = m.host.PluginStats()
	return f, nil
}
