// Package changefeed follows the sandbox records that change on any gateway: every
// write of a record publishes its id on Redis (store.PublishChange), and each gateway
// holds one subscription (this file) that keeps two things in step with it:
//
//   - the record (route) cache that serves the data plane, and serves it through
//     outages of the store (routes.go, cache.go);
//   - the live watches of sandbox lists (watch.go).
//
// Changes that name no sandbox (an API key's binding) go to the core through Host
// (host.go).
package changefeed

import (
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/gateway/internal/spawn"
	"github.com/sandgate/sandgate/gateway/store"
)

// stateRunning is the state of a sandbox the proxy serves, the only one cached.
const stateRunning = "Running"

// Manager is one gateway's change feed: its route cache, its watchers and the
// subscription that keeps both current. It is safe for concurrent use.
type Manager struct {
	store *store.Store
	host  Host
	log   *slog.Logger

	routes *routeCache
	watch  watchHub

	// group runs the subscription and the confirmations; its Context is the
	// subscription's.
	group spawn.Group
}

// New builds the change feed of a gateway; Start subscribes.
func New(st *store.Store, host Host, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{store: st, host: host, log: log, routes: newRouteCache()}
}

// Start subscribes to the changes and confirms the cached records every
// routeConfirmEvery, until Stop.
func (m *Manager) Start() {
	m.subscribe()
	m.group.Every(routeConfirmEvery, m.confirmRoutes)
}

// Stop ends the subscription and the confirmations and waits for them.
func (m *Manager) Stop() { m.group.Stop() }

// subscribe drops cached routes that other gateways report changed and tells this
// gateway's watchers; it resubscribes a second after the subscription breaks.
func (m *Manager) subscribe() {
	m.group.Go(func() {
		ctx := m.group.Context()
		for ctx.Err() == nil {
			// After a (re)subscription, live lists may have missed changes: they list again.
			// It returns when the subscription breaks or Stop; the loop resubscribes.
			ready := func() { m.host.Resubscribed(); m.watch.resyncAll() }
			_ = m.store.SubscribeChangesReady(ctx, ready, func(id string) {
				if m.host.OtherChange(id) {
					return
				}
				m.routes.drop(id)
				m.watch.notify(id)
			})
			select {
			case <-ctx.Done():
			case <-time.After(time.Second): // Redis went away; resubscribe
			}
		}
	})
}
