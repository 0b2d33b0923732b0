// Package pool is the warm pool feature of the gateway: a Manager keeps every pool
// between its bounds (refill.go: the refill loop under the "pools" lease, warm members
// started and replaced when dead or built from an older template), keeps the proxy's
// connections to warm members open (warmconns.go), tracks the one image pull a pool's
// creation starts (pulls.go), hands members out (claim.go: the claim script, then the
// claim's env, entrypoint and egress policy bound late, off the claim's path, with a
// member's first call waiting for its own) and learns of members' deaths from the
// runtime's event stream (deaths.go); pools.go has a pool as its caller sees it (found,
// read with its numbers, listed, deleted) and the decision to pull its image; define.go
// a pool's definition (create and update: the request and its checks, the pull they
// start); handout.go a claim as a caller asks for it (its checks and admission, the
// claim's patch and events, the wait for a refill and the cold fallback). It reaches the core only through Host (host.go): starting a member of a
// pool's template, applying a claim's binding through the agent and the enforcer, the
// record cache, a non-member's death, the user-safe image error, a template resolved
// and checked as a create, a claim's fields checked, admission, a cold create, events; the store and the runtime it uses directly. It
// never imports package gateway; the template's type is the leaf gateway/createreq's.
package pool

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/gateway/internal/spawn"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// Record states and metadata the feature reads and writes; they are the core's own
// (package gateway defines the same values).
const (
	stateRunning = "Running"
	stateFailed  = "Failed"
	// MetadataPool is the metadata key naming a claimed member's pool.
	MetadataPool = "sandgate.io/pool"
)

// ReasonMemberDied is the Failed reason of a claimed member that died or refused its
// binding after its claim.
const ReasonMemberDied = "MEMBER_DIED"

// Config is what the Manager needs of the gateway's configuration.
type Config struct {
	// Owner names this gateway in the "pools" lease.
	Owner string
	// Interval is how often the manager looks at its pools.
	Interval time.Duration
	// HealthInterval is how often warm members are compared with the runtime's list.
	HealthInterval time.Duration
	// Concurrency bounds the warm members starting at once.
	Concurrency int
	// ReadyTimeout bounds a member's start (plus 30 s for the rest of it).
	ReadyTimeout time.Duration
	// AgentIdleTimeout is how long the proxy keeps an idle connection to an agent.
	AgentIdleTimeout time.Duration
	// PullImages: this gateway pulls a new pool's missing image (PrepareImage);
	// PullAlways: it pulls it even when the engine has it.
	PullImages, PullAlways bool
	// MaxPoolSize caps a pool's poolMax.
	MaxPoolSize int
	// Wait is how long a claim from an empty pool waits for a refill; Fallback says what
	// it does when the wait ends empty: "cold" creates the sandbox cold from the pool's
	// template, "fail" answers POOL::EMPTY.
	Wait     time.Duration
	Fallback string
	// Metrics times each claim (nil: none).
	Metrics *metrics.Set
}

// Manager owns this gateway's part of the warm pools: the members it is starting, the
// pulls it runs, the proxy connections it keeps open, the late bindings it applies.
// It is safe for concurrent use.
type Manager struct {
	cfg     Config
	store   *store.Store
	runtime runtimes.Runtime
	host    Host
	log     *slog.Logger

	mu       sync.Mutex
	starting map[string]int // pool key → warm creates in flight
	// published holds the pool keys whose nonzero starting count is in the store.
	published map[string]bool
	pulls     map[string]*ImagePull // pool key → the pull its creation started here
	kick      chan struct{}
	sem       chan struct{}
	// lastHealth is when warm members were last compared with the runtime; guarded by mu.
	lastHealth time.Time
	// lastClaim is when this gateway last handed out warm members (UnixNano).
	lastClaim atomic.Int64
	// connWarmer opens the proxy's connection to a new warm member (SetConnWarmer).
	connWarmer atomic.Pointer[ConnWarmer]
	// warmConns is, per warm member (id), when the proxy's connection to it was last
	// opened or used by the manager (refreshWarmConns); guarded by mu.
	warmConns map[string]warmConn
	// current holds, per pool key, the warm members already found built from the
	// pool's version (outdatedMembers); only the pass's goroutine uses it.
	current map[string]currentMembers
	// binds tracks claimed members' late bindings under way (claim.go).
	binds lateBinds

	// group runs every goroutine of the Manager; its Context is that of work that
	// outlives any request (pulls, the death watch).
	group spawn.Group
}

// New builds a Manager; Start runs its loops.
func New(cfg Config, st *store.Store, rt runtimes.Runtime, host Host, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{
		cfg: cfg, store: st, runtime: rt, host: host, log: log,
		starting:  map[string]int{},
		published: map[string]bool{},
		kick:      make(chan struct{}, 1),
		sem:       make(chan struct{}, max(cfg.Concurrency, 1)),
		binds:     lateBinds{sem: make(chan struct{}, lateBindConcurrency)},
	}
}

// Start runs the refill and publishing loops and, when the runtime reports deaths, the death watch.
func (m *Manager) Start() {
	m.runRefill()
	m.runPublishStarting()
	m.watchDeaths()
}

// Stop ends the loops and waits for every goroutine the Manager started. The "pools"
// lease is the caller's to release.
func (m *Manager) Stop() { m.group.Stop() }

// Kick asks for a refill pass now instead of at the next tick.
func (m *Manager) Kick() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// refillSettle is how long the manager holds its next pass after a claim on this
// gateway. The claimed members' first commands (a batch's hundred at once) are the hot
// path; the refill's container starts and the pass's engine listing would take the
// host's CPU from them (on the 2-core bench machine a batch of 100 answered in about
// 500 ms with the refill deferred against 800-900 ms with it at once). A member's start
// takes seconds, so a refill later by this much costs little; it is bounded: a pass
// waits at most this long, however often claims come.
const refillSettle = time.Second

// SettleWait is how much longer work that would compete with a claim's first calls
// should wait: refillSettle after this gateway's last claim, or nothing.
func (m *Manager) SettleWait() time.Duration {
	return refillSettle - time.Since(time.Unix(0, m.lastClaim.Load()))
}
