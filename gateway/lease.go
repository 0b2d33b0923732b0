package gateway

import (
	"context"
)

// leaseName guards the reaper and the reconciler: with several gateways, one does the work.
const leaseName = "reaper"

// holdLease takes or renews the lease. It lapses after three missed renewals (at
// least 3 s), so that a dead gateway's reconciling moves to a peer within seconds.
func (s *Service) holdLease(ctx context.Context) bool {
	ttl := max(3*min(s.cfg.ReapInterval, s.cfg.SyncInterval), heartbeatTTL)
	ok, err := s.store.AcquireLease(ctx, leaseName, s.owner, ttl)
	return err == nil && ok
}
