// Package state is the gateway's feature of what a sandbox keeps and how it sleeps:
// snapshots of a sandbox's filesystem committed to a tenant-owned image, and creates
// and pool templates from one (snapshots.go); forks, a snapshot and a batch of copies
// from it (fork.go); volumes, host directories and named claims checked, namespaced
// per tenant and judged by admission (volumes.go); a tenant's named volumes made, read,
// listed and removed apart from sandboxes (namedvolumes.go); and idle pause, a sandbox frozen
// after a period without traffic and resumed by the next request (idle.go). A Manager
// owns the snapshot commits under way and the idle pauser's state and loop. It reaches
// the core only through Host (host.go): a sandbox's record as a caller sees it, the
// tenant's quotas, the deployment's id, the checks and the batch create a fork asks
// for, the event pipeline, the route cache and the lease; the store and the runtime it
// is given directly. It imports neither package gateway nor gateway/api.
package state

import (
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/gateway/internal/spawn"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// Record states the feature reads and writes; they are the core's own (package gateway
// defines the same values).
const (
	stateRunning = "Running"
	statePaused  = "Paused"
)

// Codes of sandboxes the feature answers with; gateway/codes.go defines the same values.
const (
	codeNotRunning   = "SANDBOX::NOT_RUNNING"
	codeRuntimeError = "SANDBOX::RUNTIME_ERROR"
)

// Config is what the feature needs of the gateway's configuration.
type Config struct {
	// MinTimeout and MaxTimeout bound a sandbox's idle period as they bound its timeout.
	MinTimeout, MaxTimeout time.Duration
	// MaxBatchSize bounds the copies of one fork as it bounds a batch.
	MaxBatchSize int
}

// Manager owns this gateway's part of snapshots and idle pause: the snapshot commits
// under way, the requests in flight per sandbox, and the idle pauser's loop. It is safe
// for concurrent use.
type Manager struct {
	cfg     Config
	store   *store.Store
	runtime runtimes.Runtime
	host    Host
	log     *slog.Logger

	idle idleState

	// group runs the idle pauser and the snapshot commits.
	group spawn.Group
}

// New builds a Manager; Start runs its loop.
func New(cfg Config, st *store.Store, rt runtimes.Runtime, host Host, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{cfg: cfg, store: st, runtime: rt, host: host, log: log,
		idle: idleState{inflight: map[string]*idleFlight{}, touched: map[string]time.Time{}, waking: map[string]chan struct{}{}}}
}

// Start runs the idle pauser.
func (m *Manager) Start() { m.group.Every(idleCheckEvery, m.idleOnce) }

// Stop ends the loop and waits for it and for the snapshot commits under way.
func (m *Manager) Stop() { m.group.Stop() }
