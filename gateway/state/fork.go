package state

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/apiproto"
	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/policy"
)

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork (a sandgate extension): count
// copies of a Running sandbox, each with the source's files, env and egress policy and
// its own id, token and expiry (timeout, metadata as in a batch).
type ForkRequest struct {
	Count    int               `json:"count"`
	Timeout  *int64            `json:"timeout,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Fork snapshots a sandbox and asks the core for a batch of count sandboxes from the
// snapshot, answered like a batch. The snapshot stays (listed, and counted against the
// tenant's snapshot quota) while its copies use its image; a fork that cannot start its
// batch removes it again, so a refused fork leaves nothing behind.
func (m *Manager) Fork(ctx context.Context, caller principal.Caller, id string, req ForkRequest) (*apiproto.Batch, error) {
	if req.Count < 1 || req.Count > m.cfg.MaxBatchSize {
		return nil, fault.Errorf(fault.KindInvalid, fault.CodeInvalidParameter, "count %d: want 1 to %d", req.Count, m.cfg.MaxBatchSize)
	}
	if err := m.host.CheckClaimInput(req.Timeout, req.Metadata); err != nil {
		return nil, err
	}
	sb, err := m.host.Lookup(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	// The batch quota is checked before anything is made (admission checks it again).
	q, err := m.host.TenantQuotas(ctx, sb.Tenant)
	if err != nil {
		return nil, err
	}
	if q.MaxBatchSize > 0 && int64(req.Count) > q.MaxBatchSize {
		return nil, fault.Errorf(fault.KindQuota, policy.CodeQuotaBatchSize, "tenant %s may create at most %d sandboxes in one batch; %d were requested", sb.Tenant, q.MaxBatchSize, req.Count)
	}
	owner := principal.Caller{Tenant: sb.Tenant, KeyID: caller.KeyID, KeyRole: caller.KeyRole}
	snap, err := m.startSnapshot(ctx, caller, id, SnapshotRequest{Name: "fork of " + id})
	if err != nil {
		return nil, err
	}
	m.commitSnapshot(context.WithoutCancel(ctx), snap)
	drop := func() {
		// The fork's own snapshot, never shown to the caller: a failure leaves a
		// snapshot the tenant can see and delete, so it is logged, not answered.
		if err := m.DeleteSnapshot(context.WithoutCancel(ctx), owner, snap.ID); err != nil {
			m.log.Warn("delete the snapshot of a fork", "snapshot", snap.ID, "err", err)
		}
	}
	if snap.State != SnapshotReady {
		drop()
		if snap.Reason == reasonSandboxGone {
			return nil, fault.Errorf(fault.KindConflict, codeNotRunning, "fork: sandbox %s is no longer running: %s", id, snap.Message)
		}
		return nil, fault.Errorf(fault.KindInternal, codeRuntimeError, "fork: the snapshot of sandbox %s failed: %s", id, snap.Message)
	}
	ready, err := m.ReadySnapshot(ctx, owner, snap.ID, false)
	if err != nil {
		drop()
		return nil, err
	}
	b, err := m.host.StartBatch(ctx, owner, ready, req)
	if err != nil {
		drop()
		return nil, err
	}
	m.log.Info("forked", "sandbox", id, "snapshot", snap.ID, "batch", b.ID, "count", req.Count, "took", time.Since(snap.CreatedAt).Round(time.Millisecond))
	return b, nil
}
