// Package tenantplugins is the gateway's feature of tenants' WASM plugins, seen from the
// service: the management operations behind /v1/plugins (manage.go), the loop that
// keeps this replica's plugin host in line with the plugins stored in Redis (sync.go),
// and the hooks the core calls on the host (hooks.go): every event handed to its
// tenant's on_event plugins, the decide_ttl hook behind renew-on-access, the call
// statistics of the plugins loaded here. The host itself (wazero) is package plugins;
// the Caddy glue builds it, with the core's audit stream as its Audit callback, and
// attaches it. A Manager needs nothing of the core's own: the store and the logger it is
// given directly, so it declares no Host. It imports neither package gateway nor
// gateway/api.
package tenantplugins

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/internal/spawn"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
)

// Manager owns this replica's plugin wiring: the attached host, the plugin store in
// Redis, why stored plugins did not load here, and the sync loop. Without an attached
// host its hooks do nothing and its management operations answer CodeDisabled. It is
// safe for concurrent use once Attach has returned.
type Manager struct {
	redis *store.Store
	log   *slog.Logger

	// host and store are set by Attach, before the gateway serves.
	host  *plugins.Host
	store *plugins.Store

	// loadErrors holds, per "tenant/name", why this replica could not load a stored plugin.
	mu         sync.Mutex
	loadErrors map[string]string
	// tenants are those whose plugins this replica has loaded, so that a tenant whose last
	// plugin was deleted while the subscription was down is emptied by the periodic sync.
	tenants map[string]bool
	// syncEvery is how often the store's revision is compared with the one applied
	// (syncInterval).
	syncEvery time.Duration

	// group runs the sync loops.
	group spawn.Group
}

// New builds a Manager without a host; Attach gives it one.
func New(st *store.Store, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{redis: st, log: log, loadErrors: map[string]string{}, tenants: map[string]bool{},
		syncEvery: syncInterval}
}

// Attach wires host in: the plugins stored in Redis are loaded now and kept in sync in
// the background until Stop, after which the caller closes host. Call it once, before
// the gateway serves.
func (m *Manager) Attach(ctx context.Context, host *plugins.Host) {
	m.host = host
	m.store = plugins.NewStore(m.redis.Client(), m.redis.Key(""))
	if rev, err := m.store.Sync(ctx, host); err != nil {
		m.log.Warn("some stored plugins did not load", "revision", rev, "err", err)
	}
	m.noteLoaded(ctx)
	m.runSync(ctx)
}

// Attached says whether a plugin host is attached.
func (m *Manager) Attached() bool { return m.host != nil }

// Stop ends the sync loop and waits for it.
func (m *Manager) Stop() { m.group.Stop() }
