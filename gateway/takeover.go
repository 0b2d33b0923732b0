package gateway

// Crash-only recovery: what a gateway leaves half-done when it dies is finished or
// removed by another gateway (or by itself restarted), never adopted as it is.
//
//   - Identity. Every sandbox carries the id of the store that owns it
//     (runtimes.LabelCluster); reconciliation adopts or removes only its own store's.
//   - Liveness. Each gateway renews a heartbeat (store.Heartbeat); the work it has in
//     flight names it: a Pending record (Sandbox.Owner), a batch member still queued.
//     Once the heartbeat lapses, the reconciler takes that work over.
//   - Ghosts. A record this gateway meant to delete while the store was unreachable (a
//     failed create's, or a deleted sandbox's whose container is gone) is remembered
//     and deleted as soon as the store answers again.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
)

// Heartbeats: renewed every heartbeatEvery, a gateway counts as gone heartbeatTTL after
// its last renewal. The bound on a takeover is heartbeatTTL plus one reconcile pass.
const (
	heartbeatEvery = time.Second
	heartbeatTTL   = 3 * time.Second
)

// maxTakeovers is how many times a batch member is taken over from a dead gateway
// before it is given up as Failed (a member whose creation kills its gateway every time
// must not take down every gateway in turn).
const maxTakeovers = 3

// crashState is what the recovery needs to remember between passes.
type crashState struct {
	mu      sync.Mutex
	cluster string
	// restoreCluster is set while cluster is still to be written back to a store that
	// lost its contents (storeloss.go).
	restoreCluster bool
	// ghosts are records whose deletion the store did not take; retried every pass.
	// A deleted sandbox's carries what its sandbox.deleted event says; a failed
	// create's is nil (it was never announced).
	ghosts map[string]*deletedSandbox
}

// deletedSandbox is a sandbox deleted through the API whose record is still to go.
type deletedSandbox struct {
	rec  *store.Sandbox
	data map[string]any
}

// runHeartbeat renews this gateway's heartbeat, checks that the store kept its contents
// (storeloss.go) and retries its ghosts until Stop.
func (s *Service) runHeartbeat() {
	beat := func() {
		ctx, cancel := context.WithTimeout(context.Background(), heartbeatEvery)
		defer cancel()
		if err := s.store.Heartbeat(ctx, s.owner, heartbeatTTL); err != nil {
			s.log.Debug("heartbeat", "err", err)
		}
		s.checkStoreLoss(ctx)
	}
	beat()
	s.loop(heartbeatEvery, func(ctx context.Context) {
		beat()
		s.retryGhosts(ctx)
	})
}

// rememberGhost notes a record whose deletion failed.
func (s *Service) rememberGhost(id string) {
	s.crash.mu.Lock()
	defer s.crash.mu.Unlock()
	if s.crash.ghosts == nil {
		s.crash.ghosts = map[string]*deletedSandbox{}
	}
	if _, ok := s.crash.ghosts[id]; !ok {
		s.crash.ghosts[id] = nil
	}
}

// rememberDeleted notes the record of a deleted sandbox (its container removed) that
// the store did not remove; its sandbox.deleted is emitted once the record is gone.
func (s *Service) rememberDeleted(rec *store.Sandbox, data map[string]any) {
	s.crash.mu.Lock()
	defer s.crash.mu.Unlock()
	if s.crash.ghosts == nil {
		s.crash.ghosts = map[string]*deletedSandbox{}
	}
	s.crash.ghosts[rec.ID] = &deletedSandbox{rec: rec, data: data}
}

// retryGhosts deletes the records a store outage kept this gateway from deleting: a
// create that overlapped the start of an outage is gone within a pass of the store's
// return, not left Pending until someone's patience runs out; a sandbox deleted during
// one leaves the list and its tenant's usage then, and its sandbox.deleted is emitted.
func (s *Service) retryGhosts(ctx context.Context) {
	s.crash.mu.Lock()
	ghosts := make(map[string]*deletedSandbox, len(s.crash.ghosts))
	for id, g := range s.crash.ghosts {
		ghosts[id] = g
	}
	s.crash.mu.Unlock()
	for id, deleted := range ghosts {
		removed, err := s.store.RemoveSandbox(ctx, id)
		if err != nil && !removed {
			continue
		}
		if err := s.runtime.Delete(ctx, id); err != nil {
			// Its container, if any, is an orphan now: the reconciler removes it.
			s.log.Warn("remove the container of a sandbox whose record the store could not remove", "id", id, "err", err)
		}
		if deleted != nil {
			s.log.Info("removed the record of a sandbox deleted while the store was unreachable", "id", id)
			if removed {
				s.emit(ctx, deleted.rec, plugins.EventSandboxDeleted, deleted.data)
			}
		} else {
			s.log.Info("removed the record of a create that failed while the store was unreachable", "id", id)
		}
		s.crash.mu.Lock()
		delete(s.crash.ghosts, id)
		s.crash.mu.Unlock()
	}
}

// liveOwners reports which gateways named by Pending records still beat.
func (s *Service) liveOwners(ctx context.Context, records []*store.Sandbox) (map[string]bool, error) {
	var owners []string
	for _, rec := range records {
		if rec.State == StatePending && rec.Owner != "" {
			owners = append(owners, rec.Owner)
		}
	}
	return s.store.Alive(ctx, owners)
}

// takeOverPending handles a Pending record whose creating gateway is gone: its create
// will never finish, and its container (if any) may lack its enforcer or its
// entrypoint, so both go. A batch member's record goes too; takeOverBatches makes the
// member again. It reports whether it took the record over.
func (s *Service) takeOverPending(ctx context.Context, rec *store.Sandbox, alive map[string]bool) bool {
	if rec.State != StatePending || rec.Owner == "" || rec.Owner == s.owner || alive[rec.Owner] {
		return false
	}
	s.log.Warn("taking over a sandbox whose creating gateway is gone: removing it", "id", rec.ID, "owner", rec.Owner, "batch", rec.Batch)
	s.routes.drop(rec.ID)
	if err := s.runtime.Delete(ctx, rec.ID); err != nil {
		s.log.Warn("remove a dead gateway's sandbox", "id", rec.ID, "err", err)
		return true
	}
	if err := s.store.DeleteSandbox(ctx, rec.ID); err != nil {
		s.rememberGhost(rec.ID)
	}
	return true
}

// takeOverBatches makes again the queued members of open batches whose gateway is gone;
// a member taken over too often ends Failed with the cause.
func (s *Service) takeOverBatches(ctx context.Context) {
	ids, err := s.store.OpenBatches(ctx)
	if err != nil {
		s.backgroundError("reconciler", "list open batches", err)
		return
	}
	for _, id := range ids {
		b, _, err := s.store.GetBatch(ctx, id)
		if errors.Is(err, store.ErrNotFound) || (err == nil && len(b.Queued) == 0) {
			if err := s.store.CloseBatch(ctx, id); err != nil {
				s.backgroundError("reconciler", "close a settled batch (the next pass retries)", err, "batch", id)
			}
			continue
		}
		if err != nil {
			s.backgroundError("reconciler", "read an open batch", err, "batch", id)
			return
		}
		owners := make([]string, 0, len(b.Queued))
		for _, o := range b.Queued {
			owners = append(owners, o)
		}
		alive, err := s.store.Alive(ctx, owners)
		if err != nil {
			s.backgroundError("reconciler", "read the heartbeats of batch owners", err, "batch", id)
			return
		}
		var take []string
		for member, owner := range b.Queued {
			if owner == s.owner || alive[owner] {
				continue
			}
			if rec, err := s.store.GetSandbox(ctx, member); err == nil {
				if rec.State != StatePending {
					// Made, its gateway died before it said so.
					// false or an error: another gateway settled it, or the next pass retries.
					_, _ = s.store.FinishMember(ctx, b.ID, member, owner)
					continue
				}
				s.takeOverPending(ctx, rec, alive)
			} else if !errors.Is(err, store.ErrNotFound) {
				s.backgroundError("reconciler", "read a batch member", err, "batch", b.ID, "member", member)
				continue
			}
			n, err := s.store.TakeMember(ctx, b.ID, member, owner, s.owner)
			if err != nil {
				s.backgroundError("reconciler", "take over a batch member", err, "batch", b.ID, "member", member)
				continue
			}
			if n == 0 {
				continue // another gateway took it first
			}
			if n > maxTakeovers {
				e := store.MemberError{Code: CodeGatewayLost, Message: fmt.Sprintf("the gateways making this member died %d times; it was given up", n-1)}
				if _, err := s.store.FailMember(ctx, b.ID, member, s.owner, e); err != nil {
					s.backgroundError("reconciler", "fail a batch member given up", err, "batch", b.ID, "member", member)
				}
				continue
			}
			take = append(take, member)
		}
		if len(take) == 0 {
			continue
		}
		if err := s.batches.Resume(ctx, b, take); err != nil {
			for _, member := range take {
				e := store.MemberError{Code: CodeGatewayLost, Message: "its gateway died and the batch's template could not be read back"}
				if _, err := s.store.FailMember(ctx, b.ID, member, s.owner, e); err != nil {
					s.backgroundError("reconciler", "fail a batch member without work", err, "batch", b.ID, "member", member)
				}
			}
			continue
		}
		s.log.Info("taking over batch members of a gateway that is gone", "batch", b.ID, "count", len(take))
	}
}
