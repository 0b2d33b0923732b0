package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// sweepEvery is how many reconcile passes go by between two sweeps of helper containers.
const sweepEvery = 10

// Reconcile makes Redis and the runtime agree: it adopts containers that carry sandgate's
// labels but have no record, removes expired orphans, marks records whose container
// vanished or stopped as Failed, and cleans up Failed records after FailedRetention.
func (s *Service) Reconcile(ctx context.Context, startup bool) error {
	if !startup && !s.settleAfterClaim(ctx) {
		return nil
	}
	if !s.holdLease(ctx, "reconciler") {
		return nil
	}
	// A store that lost its contents is known before its records are compared with the
	// runtime, so that the adoptions below register their tenants again, and before the
	// cluster id is read, so that it is written back rather than made anew.
	s.recovery.CheckStoreLoss(ctx)
	cluster, err := s.recovery.ClusterID(ctx)
	if err != nil {
		return err
	}
	// Keys of the layout before Redis Cluster support are moved first, or their
	// sandboxes would look like orphans below.
	if _, err := s.store.MigrateLayout(ctx); err != nil {
		return err
	}
	// A cross-tenant claim whose gateway died halfway is settled (store.RepairClaims).
	if n, err := s.store.RepairClaims(ctx, time.Minute); err != nil {
		s.backgroundError("reconciler", "settle parked cross-tenant claims", err)
	} else if n > 0 {
		s.log.Info("settled cross-tenant claims a gateway left halfway", "members", n)
	}
	// The list is what the containers were at listedAt: a record that changed state
	// after it (a pause, a resume, a create finishing) is newer than the list.
	listedAt := time.Now().UTC()
	instances, err := s.runtime.List(ctx)
	if err != nil {
		return err
	}
	// Warm members before records: a member claimed between the two reads is then in
	// one or the other, never taken for an orphan.
	warm, err := s.store.WarmIDs(ctx)
	if err != nil {
		return err
	}
	records, err := s.store.ListSandboxes(ctx, "")
	if err != nil {
		return err
	}
	alive, err := s.recovery.LiveOwners(ctx, records)
	if err != nil {
		return err
	}
	byID := make(map[string]runtimes.Instance, len(instances))
	for _, inst := range instances {
		if inst.ID != "" {
			byID[inst.ID] = inst
		}
	}
	now := time.Now().UTC()
	for _, rec := range records {
		inst, exists := byID[rec.ID]
		delete(byID, rec.ID)
		if s.recovery.TakeOverPending(ctx, rec, alive) {
			continue
		}
		s.syncRecord(ctx, rec, inst, exists, listedAt, now)
	}
	s.egress.CheckEnforcers(ctx, instances, records, now)
	s.recovery.TakeOverBatches(ctx)
	for id, inst := range byID {
		if warm[id] {
			continue // the pool manager looks after its warm members
		}
		if !ownInstance(inst, cluster) {
			continue // another store's sandbox on the same engine (or one from before cluster labels)
		}
		s.adoptOrRemove(ctx, inst, now, startup)
	}
	// The usage counters admission reads are kept by the store's scripts; a write lost
	// halfway (or a record from before them) is corrected here, off every request's path.
	if fixed, err := s.store.RepairUsage(ctx); err != nil {
		s.log.Debug("repair usage counters", "err", err)
	} else if len(fixed) > 0 {
		s.log.Info("repaired tenants' usage counters", "tenants", fixed)
	}
	// Leaked helpers are rare and listing them costs a few engine calls: not every pass.
	if sw, ok := s.runtime.(runtimes.HelperSweeper); ok && (startup || s.reconciles.Add(1)%sweepEvery == 0) {
		if n, err := sw.SweepHelpers(ctx); err != nil {
			s.backgroundError("reconciler", "sweep helper containers", err)
		} else if n > 0 {
			s.log.Info("removed helper containers and volumes whose sandbox is gone", "count", n)
		}
	}
	return nil
}

// settleAfterClaim holds a pass while the pool manager's is held after this gateway's
// last claim (pool.Manager.SettleWait), and reports false when the service stops
// meanwhile. A pass lists every container of the engine and reads every record: at
// SyncInterval 500 ms it overlapped most of a batch's first commands, whose agents and
// gateway share the host's CPU with it. Nothing it does is urgent to the second: a
// member that dies is known from the runtime's events, not from this pass.
func (s *Service) settleAfterClaim(ctx context.Context) bool {
	wait := s.pool.SettleWait()
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.group.Done():
		return false
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// syncRecord brings rec in line with inst, its container as the runtime listed it at
// listedAt (exists false: the list had none).
func (s *Service) syncRecord(ctx context.Context, rec *store.Sandbox, inst runtimes.Instance, exists bool, listedAt, now time.Time) {
	if rec.State == StateStopping {
		// A delete under way owns its record and its vanishing container (deleting.go).
		if now.Sub(rec.LastTransitionAt) > stoppingTakeover {
			s.finishStopping(ctx, rec)
		}
		return
	}
	if s.expiring(rec, now) {
		return // the reaper removes it; its dying container is not a failure
	}
	switch rec.State {
	case StatePending:
		// A create in flight owns its record (recovery.Manager.TakeOverPending handles one whose gateway
		// is gone); one without an owner, or stuck far past the ready timeout, lost its
		// gateway.
		if now.Sub(rec.CreatedAt) > s.cfg.ReadyTimeout+30*time.Second {
			s.log.Warn("removing a sandbox whose creation never finished", "id", rec.ID)
			s.discard(ctx, rec.ID)
		}
		return
	case StateFailed:
		if now.Sub(rec.LastTransitionAt) > s.cfg.FailedRetention {
			s.discard(ctx, rec.ID)
		}
		return
	}
	if rec.LastTransitionAt.After(listedAt) {
		// The record changed state after the list was taken: the list may show the
		// container as it was before (running before a pause), so it says nothing here.
		// The next pass judges this record against a newer list.
		return
	}
	if exists && inst.State == runtimes.StateExited {
		// The list says little of how a container ended (Docker's: "Exited (137) …");
		// one inspect of the dead sandbox tells an out-of-memory kill from an exit.
		if full, err := s.runtime.Inspect(ctx, rec.ID); err == nil && full.State == runtimes.StateExited {
			inst = full
		}
	}
	if !exists {
		// A list leaves out what is gone, but the runtime may still know why it went
		// (a Kubernetes pod evicted and deleted).
		if full, err := s.runtime.Inspect(ctx, rec.ID); err == nil && full.State == runtimes.StateExited {
			inst, exists = full, true
		}
	}
	if !exists || inst.State == runtimes.StateExited {
		s.markDead(ctx, rec.ID, inst, exists)
		return
	}
	wantState := rec.State
	if inst.State == runtimes.StatePaused && rec.State == StateRunning {
		wantState = StatePaused
	} else if inst.State == runtimes.StateRunning && rec.State == StatePaused {
		wantState = StateRunning
	}
	if wantState != rec.State || (inst.Address != "" && inst.Address != rec.Address) {
		_, err := s.store.ModifySandbox(ctx, rec.ID, func(sb *store.Sandbox) error {
			if sb.State != rec.State || !sb.LastTransitionAt.Equal(rec.LastTransitionAt) {
				return errNotAsJudged
			}
			if sb.State != wantState {
				sb.State, sb.LastTransitionAt = wantState, now
			}
			if inst.Address != "" {
				sb.Address = inst.Address
			}
			return nil
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, errNotAsJudged) { // deleted or changed meanwhile: nothing to sync
			s.backgroundError("reconciler", "sync record with the runtime", err, "id", rec.ID)
		}
	}
	s.egress.DrainVaultAudit(rec, inst)
}

func (s *Service) adoptOrRemove(ctx context.Context, inst runtimes.Instance, now time.Time, startup bool) {
	// A container younger than the ready timeout may belong to a create in flight on a
	// gateway whose record write we have not seen; leave it to the next pass.
	grace := s.cfg.ReadyTimeout
	if inst.Pool != "" {
		// A warm member has no record until it answers; its start is bounded by
		// ReadyTimeout+30s (gateway/pool startWarm), so only an older one is an orphan.
		grace = s.cfg.ReadyTimeout + time.Minute
	}
	if !startup && now.Sub(inst.CreatedAt) < grace {
		return
	}
	expired := inst.ExpiresAt != nil && !inst.ExpiresAt.After(now)
	// A pool member without a record never reached its pool (its gateway died while it
	// started, or an embedded store was lost): nobody owns it.
	unowned := inst.Pool != "" || inst.Tenant == ""
	if expired || unowned || inst.State == runtimes.StateExited {
		s.log.Info("removing orphaned sandbox container", "id", inst.ID, "expired", expired, "pool", inst.Pool, "state", inst.State)
		s.metrics.Reconciled("removed")
		if err := s.runtime.Delete(ctx, inst.ID); err != nil {
			s.backgroundError("reconciler", "remove orphan", err, "id", inst.ID)
		}
		return
	}
	full, err := s.runtime.Inspect(ctx, inst.ID)
	if errors.Is(err, runtimes.ErrNotFound) {
		return // gone since the list: nothing to adopt
	}
	if err != nil {
		s.backgroundError("reconciler", "inspect a sandbox to adopt", err, "id", inst.ID)
		return
	}
	inst = full
	if !inst.Complete {
		s.removeHalfMade(ctx, inst)
		return
	}
	state := StateRunning
	if inst.State == runtimes.StatePaused {
		state = StatePaused
	}
	rec := &store.Sandbox{
		ID: inst.ID, Tenant: inst.Tenant, Image: inst.Image, Entrypoint: inst.Entrypoint,
		State: state, LastTransitionAt: now, CreatedAt: inst.CreatedAt, ExpiresAt: inst.ExpiresAt,
		Address: inst.Address, AgentToken: inst.AgentToken, AgentAuth: inst.Labels[runtimes.LabelAgentAuth], EgressToken: inst.EgressToken,
		AccessToken: randomToken(24), Pool: inst.Pool, SnapshotID: inst.Labels[labelFromSnapshot],
	}
	if md := inst.Labels[labelMetadata]; md != "" {
		if err := json.Unmarshal([]byte(md), &rec.Metadata); err != nil {
			// Adopted without its metadata rather than left unowned.
			s.backgroundError("reconciler", "read the metadata label of an adopted sandbox", err, "id", inst.ID)
		}
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = now
	}
	if rec.EgressToken != "" && s.egress.Enforces() {
		rec.EgressPolicy = s.egress.PolicyInForce(ctx, rec)
	}
	if err := s.store.CreateSandbox(ctx, rec, 0); err != nil {
		s.backgroundError("reconciler", "adopt sandbox", err, "id", inst.ID)
		return
	}
	s.log.Info("adopted running sandbox from runtime labels", "id", inst.ID, "tenant", inst.Tenant)
	s.metrics.Reconciled("adopted")
	s.emit(ctx, rec, "sandbox.adopted", nil)
}

// removeHalfMade removes a record-less sandbox whose create did not go all the way (its
// gateway died during it): its enforcer may not run and its entrypoint may never have
// started, so adopting it would hand out an unenforced sandbox, or list a dead one as
// Running. Nobody is waiting for it: the create that made it failed with its gateway.
func (s *Service) removeHalfMade(ctx context.Context, inst runtimes.Instance) {
	s.log.Warn("removing a sandbox whose creation never finished (no enforcer running or no entrypoint started)", "id", inst.ID, "state", inst.State)
	s.metrics.Reconciled("removed")
	if err := s.runtime.Delete(ctx, inst.ID); err != nil {
		s.backgroundError("reconciler", "remove half-made sandbox", err, "id", inst.ID)
	}
}
