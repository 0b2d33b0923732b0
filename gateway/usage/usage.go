// Package usage is the gateway's feature of resource use and metrics. A sampler reads
// every Running sandbox's use every interval (5 s by default) — from the engine when the
// runtime can (Docker's stats), else from the sandbox's agent, which reads its own
// cgroup (Kubernetes) — and keeps the last 15 minutes of each in memory, with the
// denials its egress enforcer counted (sampler.go). Every gateway samples on its own, so
// that any replica answers GET /sandboxes/{id}/metrics from its memory. At each sample
// it also records a point of the fleet's history for the console, and it gives the
// Prometheus scrape the fleet's series read from the store (fleet.go). A Manager owns
// the histories and the sampler's loop. It reaches the core only through Host (host.go):
// a sandbox's record as a caller sees it, whether egress is enforced, and the statistics
// of the plugins loaded on this replica; the store, the runtime, the agent client and
// the event-driven series it is given directly. It imports neither package gateway nor
// gateway/api.
package usage

import (
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/internal/spawn"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
)

// DefaultInterval is the resolution of the per-sandbox history.
const DefaultInterval = 5 * time.Second

// window is how much history is kept per sandbox and for the fleet.
const window = 15 * time.Minute

// stateRunning is the record state of a sandbox the sampler reads; package gateway
// defines the same value.
const stateRunning = "Running"

// Config is what the feature needs of the gateway's configuration.
type Config struct {
	// Interval is how often each sandbox's use is read: zero is DefaultInterval,
	// negative turns the sampler off.
	Interval time.Duration
}

// Manager owns this gateway's resource histories (every Running sandbox's and the
// fleet's) and the sampler that fills them. It is safe for concurrent use.
type Manager struct {
	cfg     Config
	store   *store.Store
	runtime runtimes.Runtime
	agents  *agentclient.Client
	metrics *metrics.Set
	host    Host

	// mu guards series.
	mu     sync.Mutex
	series map[string]*series

	fleetMu     sync.Mutex
	fleetPoints []FleetPoint

	// group runs the sampler.
	group spawn.Group
}

// New builds a Manager; Start runs its sampler. m receives the denials enforcers count
// and gives the fleet's history its create latencies.
func New(cfg Config, st *store.Store, rt runtimes.Runtime, agents *agentclient.Client, m *metrics.Set, host Host) *Manager {
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	return &Manager{cfg: cfg, store: st, runtime: rt, agents: agents, metrics: m, host: host,
		series: map[string]*series{}}
}

// Interval is the resolution of the per-sandbox history (negative: not sampled).
func (m *Manager) Interval() time.Duration { return m.cfg.Interval }

// Start runs the sampler, unless the interval is negative (off).
func (m *Manager) Start() {
	if m.cfg.Interval < 0 {
		return
	}
	m.group.Every(m.cfg.Interval, m.sample)
}

// Stop ends the sampler and waits for it.
func (m *Manager) Stop() { m.group.Stop() }

// keep is how many points of history the window holds at the interval.
func (m *Manager) keep() int { return int(window / m.cfg.Interval) }
