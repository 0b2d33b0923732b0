// Package policyadmin is the gateway's feature of Rego policy management, for policy
// authors in the console: read the Rego in force, validate a change, put it in force on
// every replica or take it back, evaluate a decision with an explanation, run the Rego
// tests (editor.go, playground.go), and tell the console which actions a caller may
// take (console.go). Changes are override modules stored in Redis
// (store.SetPolicyOverrides); a Manager applies them at Start and whenever another
// gateway announces a change, after each reconnection to Redis, and when the store
// comes back empty. It reaches the core only through Host (host.go): the event pipeline
// its changes are recorded in; the store, the policy engine and the logger it is given
// directly. It imports neither package gateway nor gateway/api.
package policyadmin

import (
	"context"
	"log/slog"
	"maps"
	"time"

	"github.com/sandgate/sandgate/gateway/internal/spawn"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
)

// Manager owns the policy API's operations and the loop that keeps this replica's
// policy engine in line with the overrides stored in Redis. It is safe for concurrent
// use.
type Manager struct {
	store  *store.Store
	engine *policy.Engine
	host   Host
	log    *slog.Logger

	// group runs the override subscription and the reloads; its Context is theirs.
	group spawn.Group
}

// New builds a Manager over the engine the gateway decides with; Start applies the
// stored overrides and follows their changes.
func New(st *store.Store, engine *policy.Engine, host Host, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{store: st, engine: engine, host: host, log: log}
}

// Start applies the stored overrides now and whenever a gateway announces a change
// (and after every reconnection to Redis, in case an announcement was missed).
func (m *Manager) Start(ctx context.Context) {
	m.loadOverrides(ctx)
	m.group.Go(func() {
		ctx := m.group.Context()
		reload := func() { m.loadOverrides(ctx) }
		for ctx.Err() == nil {
			// It returns when the subscription breaks (Redis went away) or Stop; the
			// loop resubscribes, and the reload on (re)subscription catches up.
			_ = m.store.SubscribePolicy(ctx, reload, reload)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	})
}

// Stop ends the subscription and waits for it.
func (m *Manager) Stop() { m.group.Stop() }

// StoreLost reloads the overrides in the background after the store came back empty:
// they went with it, so every gateway falls back to the policy a restarted one would
// load, not only those whose subscription broke.
func (m *Manager) StoreLost() {
	m.group.Go(func() { m.loadOverrides(m.group.Context()) })
}

// loadOverrides puts the stored overrides in force when they differ from the engine's;
// a store it cannot read or overrides that do not compile leave the policy in force.
func (m *Manager) loadOverrides(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stored, err := m.store.PolicyOverrides(ctx)
	if err != nil {
		m.log.Warn("policy overrides unreadable; keeping the policy in force", "err", err)
		return
	}
	if maps.Equal(stored, m.engine.Overrides()) {
		return
	}
	if err := m.engine.SetOverrides(ctx, stored); err != nil {
		m.log.Error("stored policy overrides refused; keeping the policy in force", "err", err)
		return
	}
	m.log.Info("policy overrides applied", "modules", len(stored), "version", m.engine.Version())
}
