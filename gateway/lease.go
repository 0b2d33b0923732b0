package gateway

import (
	"context"

	"github.com/sandgate/sandgate/gateway/recovery"
)

// leaseName guards the reaper and the reconciler: with several gateways, one does the work.
const leaseName = "reaper"

// holdLease takes or renews the lease for job (the reaper or the reconciler, which share
// it). It lapses after three missed renewals (at least 3 s), so that a dead gateway's
// reconciling moves to a peer within seconds. A store error counts against job.
func (s *Service) holdLease(ctx context.Context, job string) bool {
	ttl := max(3*min(s.cfg.ReapInterval, s.cfg.SyncInterval), recovery.HeartbeatTTL)
	ok, err := s.store.AcquireLease(ctx, leaseName, s.owner, ttl)
	if err != nil {
		s.backgroundError(job, "take the lease", err)
	}
	return err == nil && ok
}
