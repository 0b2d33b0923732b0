// Package recovery is the core's crash-only recovery: what a gateway leaves half-done
// when it dies is finished or removed by another gateway (or by itself restarted),
// never adopted as it is.
//
//   - Identity. Every sandbox carries the id of the store that owns it
//     (runtimes.LabelCluster); reconciliation adopts or removes only its own store's
//     (ClusterID, LabelCluster: this file).
//   - Liveness. Each gateway renews a heartbeat (store.Heartbeat); the work it has in
//     flight names it: a Pending record (Sandbox.Owner), a batch member still queued.
//     Once the heartbeat lapses, the reconciler takes that work over (takeover.go).
//   - Ghosts. A record this gateway meant to delete while the store was unreachable (a
//     failed create's, or a deleted sandbox's whose container is gone) is remembered
//     and deleted as soon as the store answers again (ghosts.go).
//   - Store loss. A store that comes back empty is found within a heartbeat; the
//     cluster id is written back to it (storeloss.go).
//
// The Manager owns that state and the heartbeat loop; it reaches the core only through
// Host (host.go).
package recovery

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/internal/spawn"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// Heartbeats: renewed every HeartbeatEvery, a gateway counts as gone HeartbeatTTL after
// its last renewal. The bound on a takeover is HeartbeatTTL plus one reconcile pass.
const (
	HeartbeatEvery = time.Second
	HeartbeatTTL   = 3 * time.Second
)

// Config holds the recovery's settings.
type Config struct {
	// Owner is this gateway's id: its heartbeat's name and the owner of its work.
	Owner string
	// ClusterID, when set, is the configured cluster id, used instead of the store's.
	ClusterID string
}

// Manager is the crash-only recovery of one gateway. It is safe for concurrent use.
type Manager struct {
	cfg     Config
	store   *store.Store
	runtime runtimes.Runtime
	host    Host
	log     *slog.Logger

	mu      sync.Mutex
	cluster string
	// restoreCluster is set while cluster is still to be written back to a store that
	// lost its contents (storeloss.go).
	restoreCluster bool
	// ghosts are records whose deletion the store did not take; retried every beat.
	// A deleted sandbox's carries what its sandbox.deleted event says; a failed
	// create's is nil (it was never announced).
	ghosts map[string]*deletedSandbox

	// group runs the heartbeat loop.
	group spawn.Group
}

// New builds the recovery of the gateway named cfg.Owner; Start runs its heartbeat.
func New(cfg Config, st *store.Store, rt runtimes.Runtime, host Host, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{cfg: cfg, store: st, runtime: rt, host: host, log: log}
}

// Start renews this gateway's heartbeat once, checks that the store kept its contents,
// and then does both every HeartbeatEvery, retrying its ghosts, until Stop.
func (m *Manager) Start() {
	beat := func() {
		ctx, cancel := context.WithTimeout(context.Background(), HeartbeatEvery)
		defer cancel()
		if err := m.store.Heartbeat(ctx, m.cfg.Owner, HeartbeatTTL); err != nil {
			m.log.Debug("heartbeat", "err", err)
		}
		m.CheckStoreLoss(ctx)
	}
	beat()
	m.group.Every(HeartbeatEvery, func(ctx context.Context) {
		beat()
		m.retryGhosts(ctx)
	})
}

// Stop ends the heartbeat loop and waits for it. The heartbeat itself is left to lapse
// or to be ended by the core (store.EndHeartbeat) once all its work has stopped.
func (m *Manager) Stop() { m.group.Stop() }

// ClusterID returns this gateway's store identity: the configured one, or else the
// store's, fetched once.
func (m *Manager) ClusterID(ctx context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cluster != "" {
		return m.cluster, nil
	}
	if m.cfg.ClusterID != "" {
		m.cluster = m.cfg.ClusterID
		return m.cfg.ClusterID, nil
	}
	id, err := m.store.ClusterID(ctx)
	if err != nil {
		return "", fmt.Errorf("read the store's cluster id: %w", err)
	}
	m.cluster = id
	return id, nil
}

// LabelCluster adds this gateway's cluster label to a spec.
func (m *Manager) LabelCluster(ctx context.Context, spec *runtimes.Spec) error {
	id, err := m.ClusterID(ctx)
	if err != nil {
		return err
	}
	labels := make(map[string]string, len(spec.Labels)+1)
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[runtimes.LabelCluster] = id
	spec.Labels = labels
	return nil
}
