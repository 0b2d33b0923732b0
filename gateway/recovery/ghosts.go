package recovery

import (
	"context"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
)

// deletedSandbox is a sandbox deleted through the API whose record is still to go.
type deletedSandbox struct {
	rec  *store.Sandbox
	data map[string]any
}

// RememberGhost notes a record whose deletion failed (a failed create's).
func (m *Manager) RememberGhost(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ghosts == nil {
		m.ghosts = map[string]*deletedSandbox{}
	}
	if _, ok := m.ghosts[id]; !ok {
		m.ghosts[id] = nil
	}
}

// RememberDeleted notes the record of a deleted sandbox (its container removed) that
// the store did not remove; its sandbox.deleted is emitted once the record is gone.
func (m *Manager) RememberDeleted(rec *store.Sandbox, data map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ghosts == nil {
		m.ghosts = map[string]*deletedSandbox{}
	}
	m.ghosts[rec.ID] = &deletedSandbox{rec: rec, data: data}
}

// retryGhosts deletes the records a store outage kept this gateway from deleting: a
// create that overlapped the start of an outage is gone within a beat of the store's
// return, not left Pending until someone's patience runs out; a sandbox deleted during
// one leaves the list and its tenant's usage then, and its sandbox.deleted is emitted.
func (m *Manager) retryGhosts(ctx context.Context) {
	m.mu.Lock()
	ghosts := make(map[string]*deletedSandbox, len(m.ghosts))
	for id, g := range m.ghosts {
		ghosts[id] = g
	}
	m.mu.Unlock()
	for id, deleted := range ghosts {
		removed, err := m.store.RemoveSandbox(ctx, id)
		if err != nil && !removed {
			continue
		}
		if err := m.runtime.Delete(ctx, id); err != nil {
			// Its container, if any, is an orphan now: the reconciler removes it.
			m.log.Warn("remove the container of a sandbox whose record the store could not remove", "id", id, "err", err)
		}
		if deleted != nil {
			m.log.Info("removed the record of a sandbox deleted while the store was unreachable", "id", id)
			if removed {
				m.host.Emit(ctx, deleted.rec, plugins.EventSandboxDeleted, deleted.data)
			}
		} else {
			m.log.Info("removed the record of a create that failed while the store was unreachable", "id", id)
		}
		m.mu.Lock()
		delete(m.ghosts, id)
		m.mu.Unlock()
	}
}
