package gateway

import (
	"context"
	"sync"
	"time"

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

// fleetState keeps the fleet's history (15 minutes, one point per usage interval).
type fleetState struct {
	mu     sync.Mutex
	points []FleetPoint
}

var fleets sync.Map // *Service → *fleetState

func (s *Service) fleet() *fleetState {
	v, _ := fleets.LoadOrStore(s, &fleetState{})
	return v.(*fleetState)
}

// sampleFleet appends a point made from recs (every record, as the usage sampler read them).
func (s *Service) sampleFleet(ctx context.Context, recs []*store.Sandbox) {
	p := FleetPoint{Time: time.Now().UTC(), Sandboxes: map[string]int{}, Pools: []FleetPool{}}
	for _, sb := range recs {
		p.Sandboxes[sb.State]++
	}
	if p50, p99, n := s.metrics.RecentCreateQuantiles(5 * time.Minute); n > 0 {
		a, b := p50.Seconds(), p99.Seconds()
		p.CreateP50Seconds, p.CreateP99Seconds, p.Creates = &a, &b, n
	}
	if pools, err := s.store.ListPools(ctx, ""); err == nil {
		for _, pl := range pools {
			if c, err := s.store.CountPool(ctx, pl.Tenant, pl.Name); err == nil {
				p.Pools = append(p.Pools, FleetPool{Name: store.PoolKey(pl.Tenant, pl.Name), Available: int(c.Available), Target: pl.Capacity.BufferMin})
			}
		}
	}
	f := s.fleet()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.points = append(f.points, p)
	if keep := int(usageWindow / s.usageInterval()); len(f.points) > keep {
		f.points = append(f.points[:0], f.points[len(f.points)-keep:]...)
	}
}

// Fleet returns the fleet's history; it names every tenant's pools, so it is the
// platform admin's only.
func (s *Service) Fleet(caller Caller) (*FleetHistory, error) {
	if !caller.Admin {
		return nil, Errorf(KindForbidden, CodeForbidden, "the fleet's history is for the platform admin key")
	}
	f := s.fleet()
	f.mu.Lock()
	defer f.mu.Unlock()
	return &FleetHistory{IntervalSeconds: s.usageInterval().Seconds(), History: append([]FleetPoint{}, f.points...)}, nil
}
