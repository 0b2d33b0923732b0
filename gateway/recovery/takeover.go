package recovery

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandgate/sandgate/gateway/store"
)

// CodeGatewayLost is the cause of a batch member given up because its gateways died.
const CodeGatewayLost = "SANDBOX::GATEWAY_LOST"

// MaxTakeovers is how many times a batch member is taken over from a dead gateway
// before it is given up as Failed (a member whose creation kills its gateway every time
// must not take down every gateway in turn).
const MaxTakeovers = 3

// statePending is the state of a record whose create is in flight.
const statePending = "Pending"

// LiveOwners reports which gateways named by Pending records still beat.
func (m *Manager) LiveOwners(ctx context.Context, records []*store.Sandbox) (map[string]bool, error) {
	var owners []string
	for _, rec := range records {
		if rec.State == statePending && rec.Owner != "" {
			owners = append(owners, rec.Owner)
		}
	}
	return m.store.Alive(ctx, owners)
}

// TakeOverPending handles a Pending record whose creating gateway is gone (alive, from
// LiveOwners, holds those that still beat): its create will never finish, and its
// container (if any) may lack its enforcer or its entrypoint, so both go. A batch
// member's record goes too; TakeOverBatches makes the member again. It reports whether
// it took the record over.
func (m *Manager) TakeOverPending(ctx context.Context, rec *store.Sandbox, alive map[string]bool) bool {
	if rec.State != statePending || rec.Owner == "" || rec.Owner == m.cfg.Owner || alive[rec.Owner] {
		return false
	}
	m.log.Warn("taking over a sandbox whose creating gateway is gone: removing it", "id", rec.ID, "owner", rec.Owner, "batch", rec.Batch)
	m.host.DropRoute(rec.ID)
	if err := m.runtime.Delete(ctx, rec.ID); err != nil {
		m.log.Warn("remove a dead gateway's sandbox", "id", rec.ID, "err", err)
		return true
	}
	if err := m.store.DeleteSandbox(ctx, rec.ID); err != nil {
		m.RememberGhost(rec.ID)
	}
	return true
}

// TakeOverBatches makes again the queued members of open batches whose gateway is gone;
// a member taken over too often ends Failed with the cause.
func (m *Manager) TakeOverBatches(ctx context.Context) {
	ids, err := m.store.OpenBatches(ctx)
	if err != nil {
		m.host.BackgroundError("reconciler", "list open batches", err)
		return
	}
	for _, id := range ids {
		b, _, err := m.store.GetBatch(ctx, id)
		if errors.Is(err, store.ErrNotFound) || (err == nil && len(b.Queued) == 0) {
			if err := m.store.CloseBatch(ctx, id); err != nil {
				m.host.BackgroundError("reconciler", "close a settled batch (the next pass retries)", err, "batch", id)
			}
			continue
		}
		if err != nil {
			m.host.BackgroundError("reconciler", "read an open batch", err, "batch", id)
			return
		}
		owners := make([]string, 0, len(b.Queued))
		for _, o := range b.Queued {
			owners = append(owners, o)
		}
		alive, err := m.store.Alive(ctx, owners)
		if err != nil {
			m.host.BackgroundError("reconciler", "read the heartbeats of batch owners", err, "batch", id)
			return
		}
		var take []string
		for member, owner := range b.Queued {
			if owner == m.cfg.Owner || alive[owner] {
				continue
			}
			if rec, err := m.store.GetSandbox(ctx, member); err == nil {
				if rec.State != statePending {
					// Made, its gateway died before it said so.
					// false or an error: another gateway settled it, or the next pass retries.
					_, _ = m.store.FinishMember(ctx, b.ID, member, owner)
					continue
				}
				m.TakeOverPending(ctx, rec, alive)
			} else if !errors.Is(err, store.ErrNotFound) {
				m.host.BackgroundError("reconciler", "read a batch member", err, "batch", b.ID, "member", member)
				continue
			}
			n, err := m.store.TakeMember(ctx, b.ID, member, owner, m.cfg.Owner)
			if err != nil {
				m.host.BackgroundError("reconciler", "take over a batch member", err, "batch", b.ID, "member", member)
				continue
			}
			if n == 0 {
				continue // another gateway took it first
			}
			if n > MaxTakeovers {
				e := store.MemberError{Code: CodeGatewayLost, Message: fmt.Sprintf("the gateways making this member died %d times; it was given up", n-1)}
				if _, err := m.store.FailMember(ctx, b.ID, member, m.cfg.Owner, e); err != nil {
					m.host.BackgroundError("reconciler", "fail a batch member given up", err, "batch", b.ID, "member", member)
				}
				continue
			}
			take = append(take, member)
		}
		if len(take) == 0 {
			continue
		}
		if err := m.host.ResumeBatch(ctx, b, take); err != nil {
			for _, member := range take {
				e := store.MemberError{Code: CodeGatewayLost, Message: "its gateway died and the batch's template could not be read back"}
				if _, err := m.store.FailMember(ctx, b.ID, member, m.cfg.Owner, e); err != nil {
					m.host.BackgroundError("reconciler", "fail a batch member without work", err, "batch", b.ID, "member", member)
				}
			}
			continue
		}
		m.log.Info("taking over batch members of a gateway that is gone", "batch", b.ID, "count", len(take))
	}
}
