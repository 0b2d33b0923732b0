package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
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

// Expiry. Each reaper tick hands every sandbox whose expiresAt has passed to a removal of
// its own (at most reapConcurrency at once) and returns at once, so that a burst of
// expiries does not hold up the next tick and one slow engine call does not hold up the
// rest: a burst of 20 is gone within about a second of expiresAt on an idle engine
// (measured in `make bench`). A sandbox being removed is in s.expiring until its record
// is gone; the reconciler leaves such records (and any whose expiresAt has passed) to the
// reaper, so that a container dying of its expiry is never reported as failed.

// reapConcurrency bounds expiry removals running at once.
const reapConcurrency = 16

// expirySet holds the sandboxes whose removal for expiry is under way on this gateway;
// sem bounds how many run at once.
type expirySet struct {
	inFlight
	sem chan struct{}
}

// inFlight is a set of sandbox ids with work under way on this gateway (an expiry
// removal, an enforcer restore), so that a slow one is not started twice.
type inFlight struct {
	mu  sync.Mutex
	ids map[string]bool
}

// begin claims id; false when work on it is already under way.
func (f *inFlight) begin(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ids == nil {
		f.ids = map[string]bool{}
	}
	if f.ids[id] {
		return false
	}
	f.ids[id] = true
	return true
}

func (f *inFlight) end(id string) {
	f.mu.Lock()
	delete(f.ids, id)
	f.mu.Unlock()
}

func (f *inFlight) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[id]
}

// expiring reports whether rec is the reaper's to remove: its removal is under way, or
// its expiresAt has passed. The reconciler does not judge such records.
func (s *Service) expiring(rec *store.Sandbox, now time.Time) bool {
	return s.expiries.has(rec.ID) || (rec.ExpiresAt != nil && !rec.ExpiresAt.After(now))
}

// reapOnce starts the removal of every sandbox whose expiry has passed.
func (s *Service) reapOnce(ctx context.Context) {
	if !s.holdLease(ctx) {
		return
	}
	ids, err := s.store.ExpiredSandboxes(ctx, time.Now(), 256)
	if err != nil || len(ids) == 0 {
		return
	}
	for _, id := range ids {
		if !s.expiries.begin(id) {
			continue // still being removed since an earlier tick
		}
		s.wg.Add(1)
		go func(id string) {
			defer s.wg.Done()
			defer s.expiries.end(id)
			s.expiries.sem <- struct{}{}
			defer func() { <-s.expiries.sem }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s.expire(ctx, id)
		}(id)
	}
}

func (s *Service) expire(ctx context.Context, id string) {
	sb, err := s.store.GetSandbox(ctx, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return
	}
	// A sandbox still starting belongs to its create; it is reaped once that finishes (or
	// gives up), never from under it.
	if sb != nil && sb.State == StatePending && time.Since(sb.CreatedAt) < s.cfg.ReadyTimeout+30*time.Second {
		return
	}
	// Renewed since the expiry index was read: not expired after all.
	if sb != nil && (sb.ExpiresAt == nil || sb.ExpiresAt.After(time.Now())) {
		return
	}
	s.routes.drop(id)
	if err := s.runtime.Delete(ctx, id); err != nil {
		s.log.Warn("reaper: remove expired sandbox", "id", id, "err", err)
		return
	}
	if err := s.store.DeleteSandbox(ctx, id); err != nil {
		return
	}
	if sb != nil {
		s.log.Info("sandbox expired", "id", id, "tenant", sb.Tenant)
		s.emit(ctx, sb, "sandbox.expired", nil)
	}
}

// sweepEvery is how many reconcile passes go by between two sweeps of helper containers.
const sweepEvery = 10

// Reconcile makes Redis and the runtime agree: it adopts containers that carry sandgate's
// labels but have no record, removes expired orphans, marks records whose container
// vanished or stopped as Failed, and cleans up Failed records after FailedRetention.
func (s *Service) Reconcile(ctx context.Context, startup bool) error {
	if !s.holdLease(ctx) {
		return nil
	}
	cluster, err := s.clusterID(ctx)
	if err != nil {
		return err
	}
	instances, err := s.runtime.List(ctx)
	if err != nil {
		return err
	}
	records, err := s.store.ListSandboxes(ctx, "")
	if err != nil {
		return err
	}
	alive, err := s.liveOwners(ctx, records)
	if err != nil {
		return err
	}
	warm, err := s.store.WarmIDs(ctx)
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
		if s.takeOverPending(ctx, rec, alive) {
			continue
		}
		s.syncRecord(ctx, rec, inst, exists, now)
	}
	s.checkEnforcers(ctx, instances, records, now)
	s.takeOverBatches(ctx)
	for id, inst := range byID {
		if warm[id] {
			continue // the pool manager looks after its warm members
		}
		if !ownInstance(inst, cluster) {
			continue // another store's sandbox on the same engine (or one from before cluster labels)
		}
		s.adoptOrRemove(ctx, inst, now, startup)
	}
	// Leaked helpers are rare and listing them costs two engine calls: not every pass.
	if sw, ok := s.runtime.(runtimes.HelperSweeper); ok && (startup || s.reconciles.Add(1)%sweepEvery == 0) {
		if n, err := sw.SweepHelpers(ctx); err != nil {
			s.log.Debug("sweep helper containers", "err", err)
		} else if n > 0 {
			s.log.Info("removed helper containers whose sandbox is gone", "count", n)
		}
	}
	return nil
}

func (s *Service) syncRecord(ctx context.Context, rec *store.Sandbox, inst runtimes.Instance, exists bool, now time.Time) {
	if s.expiring(rec, now) {
		return // the reaper removes it; its dying container is not a failure
	}
	switch rec.State {
	case StatePending:
		// A create in flight owns its record (takeOverPending handles one whose gateway
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
	var reason, message string
	switch {
	case !exists:
		reason, message = "CONTAINER_VANISHED", "the sandbox's container no longer exists in the runtime"
	case inst.State == runtimes.StateExited:
		reason, message = "EXITED", inst.Message
	}
	if reason != "" {
		s.log.Warn("sandbox failed", "id", rec.ID, "reason", reason)
		sb, err := s.store.ModifySandbox(ctx, rec.ID, func(sb *store.Sandbox) error {
			sb.State, sb.Reason, sb.Message, sb.LastTransitionAt = StateFailed, reason, message, now
			return nil
		})
		if err == nil {
			s.emit(ctx, sb, "sandbox.failed", map[string]any{"reason": reason, "message": message})
		}
		return
	}
	wantState := rec.State
	if inst.State == runtimes.StatePaused && rec.State == StateRunning {
		wantState = StatePaused
	} else if inst.State == runtimes.StateRunning && rec.State == StatePaused {
		wantState = StateRunning
	}
	if wantState != rec.State || (inst.Address != "" && inst.Address != rec.Address) {
		_, _ = s.store.ModifySandbox(ctx, rec.ID, func(sb *store.Sandbox) error {
			if sb.State != wantState {
				sb.State, sb.LastTransitionAt = wantState, now
			}
			if inst.Address != "" {
				sb.Address = inst.Address
			}
			return nil
		})
	}
}

func (s *Service) adoptOrRemove(ctx context.Context, inst runtimes.Instance, now time.Time, startup bool) {
	// A container younger than the ready timeout may belong to a create in flight on a
	// gateway whose record write we have not seen; leave it to the next pass.
	grace := s.cfg.ReadyTimeout
	if inst.Pool != "" {
		// A warm member has no record until it answers; its start is bounded by
		// ReadyTimeout+30s (startWarm), so only an older one is an orphan.
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
		if err := s.runtime.Delete(ctx, inst.ID); err != nil {
			s.log.Warn("remove orphan", "id", inst.ID, "err", err)
		}
		return
	}
	full, err := s.runtime.Inspect(ctx, inst.ID)
	if err != nil {
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
		Address: inst.Address, AgentToken: inst.AgentToken, EgressToken: inst.EgressToken,
		AccessToken: randomToken(24), Pool: inst.Pool,
	}
	if md := inst.Labels[labelMetadata]; md != "" {
		_ = json.Unmarshal([]byte(md), &rec.Metadata)
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = now
	}
	if err := s.store.CreateSandbox(ctx, rec, 0); err != nil {
		s.log.Warn("adopt sandbox", "id", inst.ID, "err", err)
		return
	}
	s.log.Info("adopted running sandbox from runtime labels", "id", inst.ID, "tenant", inst.Tenant)
	s.emit(ctx, rec, "sandbox.adopted", nil)
}

// removeHalfMade removes a record-less sandbox whose create did not go all the way (its
// gateway died during it): its enforcer may not run and its entrypoint may never have
// started, so adopting it would hand out an unenforced sandbox, or list a dead one as
// Running. Nobody is waiting for it: the create that made it failed with its gateway.
func (s *Service) removeHalfMade(ctx context.Context, inst runtimes.Instance) {
	s.log.Warn("removing a sandbox whose creation never finished (no enforcer running or no entrypoint started)", "id", inst.ID, "state", inst.State)
	if err := s.runtime.Delete(ctx, inst.ID); err != nil {
		s.log.Warn("remove half-made sandbox", "id", inst.ID, "err", err)
	}
}
