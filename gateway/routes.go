package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
)

// routeTTL bounds how stale a cached route may be when an invalidation is missed.
const routeTTL = time.Second

// routeCache keeps recently used sandbox records in memory so that proxied requests do
// not read Redis each time. Writes through this gateway drop the entry at once; writes
// elsewhere are published on Redis and drop it within milliseconds, and routeTTL bounds
// the rest.
type routeCache struct {
	mu      sync.RWMutex
	entries map[string]routeEntry
}

type routeEntry struct {
	sb      *store.Sandbox
	fetched time.Time
}

func newRouteCache() *routeCache { return &routeCache{entries: map[string]routeEntry{}} }

func (c *routeCache) get(id string) (*store.Sandbox, bool) {
	c.mu.RLock()
	e, ok := c.entries[id]
	c.mu.RUnlock()
	if !ok || time.Since(e.fetched) > routeTTL {
		return nil, false
	}
	return e.sb, true
}

func (c *routeCache) put(sb *store.Sandbox) {
	c.mu.Lock()
	if len(c.entries) > 100000 {
		c.entries = map[string]routeEntry{}
	}
	c.entries[sb.ID] = routeEntry{sb: sb, fetched: time.Now()}
	c.mu.Unlock()
}

func (c *routeCache) drop(id string) {
	c.mu.Lock()
	delete(c.entries, id)
	c.mu.Unlock()
}

// Route returns the record a proxied request for sandbox id goes to, from the cache when
// it is fresh. It does not check who asks.
func (s *Service) Route(ctx context.Context, id string) (*store.Sandbox, error) {
	if sb, ok := s.routes.get(id); ok {
		return sb, nil
	}
	sb, err := s.store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, err
	}
	if sb.State == StateRunning {
		s.routes.put(sb)
	}
	return sb, nil
}

// watchChanges drops cached routes that other gateways report changed and tells this
// gateway's live lists (watch.go).
func (s *Service) watchChanges() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-s.stop; cancel() }()
		for ctx.Err() == nil {
			// After a (re)subscription, live lists may have missed changes: they list again.
			_ = s.store.SubscribeChangesReady(ctx, s.watch.resyncAll, func(id string) {
				s.routes.drop(id)
				s.watch.notify(id)
			})
			select {
			case <-ctx.Done():
			case <-time.After(time.Second): // Redis went away; resubscribe
			}
		}
	}()
}
