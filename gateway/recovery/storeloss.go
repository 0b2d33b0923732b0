package recovery

// Store loss: Redis comes back empty under running gateways (restarted without
// persistence, failed over to a stale replica, flushed). Every gateway finds out by
// itself within a second (store.CheckLoss, from its heartbeat and each reconcile
// pass); the store forgets its memos of what it had registered, and the gateway:
//
//   - writes its cluster id back, so that the sandboxes it labelled stay its store's
//     for every gateway, a restarted one included;
//   - reads API key bindings again, and the policy overrides (none now: the built-in
//     policy applies, as on a gateway started afresh): Host.StoreLost.
//
// The reconciler then finds every running sandbox without a record and adopts it from
// its labels (tenant, expiry, metadata) and its enforcer (the egress policy in force),
// as it does after a restart; the reaper expires adopted sandboxes from there. What
// exists only in the store is gone and must be made again (docs/ARCHITECTURE.md).

import "context"

// CheckStoreLoss asks the store whether it lost its contents and reacts to a loss; a
// cluster id that could not be written back is retried on the next call.
func (m *Manager) CheckStoreLoss(ctx context.Context) {
	lost, err := m.store.CheckLoss(ctx)
	if err != nil {
		m.log.Debug("check the store's epoch", "err", err)
		return
	}
	m.mu.Lock()
	if lost {
		m.restoreCluster = m.cluster != "" && m.cfg.ClusterID == ""
	}
	restore, id := m.restoreCluster, m.cluster
	m.mu.Unlock()
	if lost {
		// The policy overrides went with the store: every gateway falls back to the
		// policy a restarted one would load, not only those whose subscription broke.
		m.host.StoreLost()
	} else if id == "" {
		// Every gateway learns the id as soon as it can, not at its first create or
		// reconcile pass: one that did not know it when the store lost it could not
		// write it back, and would make a new one.
		if _, err := m.ClusterID(ctx); err != nil {
			m.log.Debug("read the store's cluster id", "err", err)
		}
	}
	if !restore {
		return
	}
	cur, err := m.store.RestoreClusterID(ctx, id)
	if err != nil {
		m.host.BackgroundError("reconciler", "write the cluster id back", err)
		return
	}
	m.mu.Lock()
	m.restoreCluster = false
	m.mu.Unlock()
	if cur != id {
		// Another gateway made a new id before this one wrote its own back: each
		// treats the other's sandboxes as foreign (neither adopts nor removes them).
		m.log.Error("the store's cluster id was made anew after the store lost its contents; this gateway keeps its own, and sandboxes of the other id are foreign to it", "cluster", id, "store_cluster", cur)
		return
	}
	m.log.Info("wrote the cluster id back after the store lost its contents", "cluster", id)
}
