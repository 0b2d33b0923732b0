package pool

import (
	"context"
	"errors"
	"time"

	"github.com/sandgate/sandgate/runtimes"
)

// watchDeaths learns of sandboxes' deaths from the runtime as they happen: a warm
// member leaves its pool at once (it is never handed out), a claimed one is marked
// Failed, and any other sandbox goes to the host (Host.SandboxDied). Without such a
// runtime the refill pass's sweep (HealthInterval) finds dead warm members.
func (m *Manager) watchDeaths() {
	w, ok := m.runtime.(runtimes.DeathWatcher)
	if !ok {
		return
	}
	ctx := m.group.Context()
	m.group.Go(func() {
		for ctx.Err() == nil {
			err := w.WatchDeaths(ctx, func(id string) {
				m.group.GoAlways(func() { m.sandboxDied(ctx, id) })
			})
			if ctx.Err() != nil {
				return
			}
			m.log.Debug("runtime event stream broke; reopening", "err", err)
			// Deaths missed meanwhile are found by the next pass's sweep.
			m.mu.Lock()
			m.lastHealth = time.Time{}
			m.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	})
}

// sandboxDied handles the runtime's report that sandbox id stopped.
func (m *Manager) sandboxDied(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sb, err := m.store.GetSandbox(ctx, id)
	if err != nil {
		return
	}
	if sb.Pool == "" {
		if sb.State == stateRunning {
			m.host.SandboxDied(ctx, sb)
		}
		return
	}
	if removed, err := m.store.RemoveWarm(ctx, sb.Tenant, sb.Pool, id); err == nil && removed {
		m.log.Info("warm pool member died; replacing it", "id", id, "pool", sb.Pool)
		if err := m.runtime.Delete(ctx, id); err != nil {
			m.log.Warn("remove dead warm member", "id", id, "err", err)
		}
		m.Kick()
		return
	}
	if sb.State != stateRunning || sb.Metadata[MetadataPool] == "" {
		return
	}
	// A claimed member (the runtime does not report the gateway's own removals).
	m.failMember(ctx, sb, errors.New("the runtime reports its container stopped"))
}
