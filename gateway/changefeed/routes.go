package changefeed

import (
	"context"
	"errors"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/store"
)

// Route returns the record a proxied request for sandbox id goes to, from the cache when
// it is fresh, and from the last confirmed record while Redis is unreachable. It does
// not check who asks.
func (m *Manager) Route(ctx context.Context, id string) (*store.Sandbox, error) {
	cached, fresh, ok := m.routes.get(id)
	if ok && fresh {
		return cached, nil
	}
	if ok && m.store.Unreachable() {
		return routeThroughOutage(cached)
	}
	sb, err := m.store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		m.routes.drop(id)
		return nil, fault.NotFound(id)
	}
	if err != nil {
		if ok && errors.Is(err, store.ErrUnavailable) {
			return routeThroughOutage(cached)
		}
		return nil, err
	}
	if sb.State == stateRunning {
		m.routes.put(sb)
	} else {
		m.routes.drop(id)
	}
	return sb, nil
}

// Fresh returns the cached record of id when it was read within routeTTL.
func (m *Manager) Fresh(id string) (*store.Sandbox, bool) {
	sb, fresh, ok := m.routes.get(id)
	return sb, ok && fresh
}

// Put caches a record this gateway just wrote or claimed.
func (m *Manager) Put(sb *store.Sandbox) { m.routes.put(sb) }

// Drop drops a sandbox from the cache (its record changed through this gateway).
func (m *Manager) Drop(id string) { m.routes.drop(id) }

// routeThroughOutage serves the last confirmed record of a sandbox while Redis is
// unreachable, unless its expiry has passed meanwhile.
func routeThroughOutage(sb *store.Sandbox) (*store.Sandbox, error) {
	if sb.ExpiresAt != nil && !sb.ExpiresAt.After(time.Now()) {
		return nil, fault.NotFound(sb.ID)
	}
	return sb, nil
}

// confirmRoutes re-reads every cached record in one pipelined round trip, so that what
// an outage serves is never older than routeConfirmEvery before it began.
func (m *Manager) confirmRoutes(ctx context.Context) {
	if m.store.Unreachable() {
		return
	}
	at := time.Now()
	ids := m.routes.ids(at)
	for len(ids) > 0 {
		n := min(len(ids), 512)
		chunk := ids[:n]
		ids = ids[n:]
		recs, err := m.store.GetSandboxes(ctx, chunk)
		if err != nil {
			return // Redis went away: keep what is cached
		}
		found := make(map[string]bool, len(recs))
		for _, sb := range recs {
			found[sb.ID] = true
			if sb.State == stateRunning {
				m.routes.confirm(sb, at)
			} else {
				m.routes.drop(sb.ID)
			}
		}
		for _, id := range chunk {
			if !found[id] {
				m.routes.drop(id)
			}
		}
	}
}
