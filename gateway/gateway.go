// Package gateway is sandgate's service core: the sandbox lifecycle on top of a runtime
// and the Redis store. It speaks plain Go; the HTTP layer (gateway/api) and Caddy
// (caddy/) sit on top of it. Where each behaviour lives:
//
//	gateway.go       Config, Service, its background loops (Start/Stop)
//	create.go        the cold create: validation into a runtimes.Spec, start, wait for the agent
//	input.go         bad-input checks shared by create, claim and batch (4xx codes)
//	validate.go      metadata, CPU and memory parsing
//	admission.go     what a record counts for in its tenant's usage; a create described for admission
//	admissionhost.go the core as the admission feature (package gateway/admission: quotas,
//	                 usage, the create-rate bucket, image pull rules) sees it
//	imagebuilds.go   a create naming an image still built in the background (gateway/imagebuild)
//	latebind.go      a claimed member's first call and its death, as the API sees them
//	upstream.go      the data plane's one call: a proxied request's route, credential, access
//	                 decision, link exchange, wake and late bindings, in order (OpenUpstream)
//	pools.go         the pool API's names re-exported; Pools, the pool feature
//	poolhost.go      the core as the pool feature (package gateway/pool) sees it: a member
//	                 started, a binding applied, a pool's template resolved and checked,
//	                 a claim's fields checked and admitted, the cold fallback
//	batchhost.go     the core as the batch feature (package gateway/batch: batches of N
//	                 sandboxes, claimed or cold, their durable member work) sees it
//	sandboxes.go     get, list, delete, metadata, renew, pause/resume, endpoints
//	deleting.go      the delete's Stopping mark, so that a sandbox being deleted is not reported failed
//	deaths.go        sandbox deaths: a workload that stops by itself is marked Failed, learnt
//	                 from the runtime's events, an unanswered proxied call or the reconciler
//	listing.go       the default page size of the list routes (gateway/internal/listing pages them)
//	reaper.go        expiry: removing sandboxes past their expiresAt, or pausing those that ask
//	reconciler.go    making Redis and the runtime agree (adopt, remove, mark Failed)
//	failures.go      counting and logging the errors of background work
//	lease.go         the lease that lets one gateway of several reap and reconcile
//	recoveryhost.go  the core as the recovery feature (package gateway/recovery: heartbeats,
//	                 the cluster id, ghosts, takeovers, store loss) sees it
//	clusterid.go     which sandboxes are this store's, by the cluster id every sandbox carries
//	egresshost.go    the core as the egress and vault feature (package gateway/egress) sees it
//	authenticate.go  API keys to callers
//	authorize.go     the Rego access decision for API actions
//	accesshost.go    the core as the access feature (package gateway/access) sees it
//	publicaccess.go  the create of a public sandbox: its own policy action (sandbox.publish)
//	previewdomain.go refusing a preview domain that shares a site with the console
//	clock.go         the gateway's clock, which only a test setting lets the admin move
//	statehost.go     the core as the state feature (package gateway/state: snapshots, fork,
//	                 volumes, idle pause) sees it; a create's snapshotId made its image
//	usagehost.go     the core as the usage feature (package gateway/usage: per-sandbox
//	                 resource use, the fleet's history, the Prometheus series) sees it
//	diagnostics.go   a sandbox's logs and events for OpenSandbox's Diagnostics API
//	mcp.go           the audit record of each MCP tool call
//	eventhost.go     the core as the event feature (package gateway/eventlog: tenants' event
//	                 and audit streams, queued, written in batches, read, followed) sees it;
//	                 emit, the event of a sandbox written before the caller goes on
//	pluginhost.go    the core as the plugin feature (package gateway/tenantplugins: tenants'
//	                 WASM plugins) sees it: the host attached, renew-on-access's decide_ttl
//	policyhost.go    the core as the policy feature (package gateway/policyadmin: tenants'
//	                 Rego policy management) sees it
//	tenancyhost.go   the core as the tenancy feature (package gateway/tenancy: tenant and
//	                 key CRUD) sees it
//	changefeedhost.go the core as the change feed (package gateway/changefeed: the record
//	                 (route) cache that serves the data plane through outages, live watches
//	                 of sandbox changes) sees it; Route
//	agentclient.go   the core's calls to agents and enforcers (sandbox-agent/agentclient)
//	errors.go        the core's error type and its kinds (package gateway/fault's), what an error says
//	                 to a caller (gateway/api maps its kind to a status)
//	codes.go         every stable error code, by namespace
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/admission"
	"github.com/sandgate/sandgate/gateway/batch"
	"github.com/sandgate/sandgate/gateway/changefeed"
	"github.com/sandgate/sandgate/gateway/egress"
	"github.com/sandgate/sandgate/gateway/eventlog"
	"github.com/sandgate/sandgate/gateway/internal/spawn"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/policyadmin"
	"github.com/sandgate/sandgate/gateway/pool"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/recovery"
	"github.com/sandgate/sandgate/gateway/state"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/gateway/tenancy"
	"github.com/sandgate/sandgate/gateway/tenantplugins"
	"github.com/sandgate/sandgate/gateway/usage"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
	"github.com/sandgate/sandgate/tracing"
)

// Version is the sandgate release, set at build time.
var Version = "dev"

// DefaultTenant owns everything created with the platform admin key.
const DefaultTenant = principal.DefaultTenant

// Config holds the core's settings; zero values get the defaults of Defaults.
type Config struct {
	// MinTimeout and MaxTimeout bound a sandbox's requested lifetime.
	MinTimeout time.Duration
	MaxTimeout time.Duration
	// RequireTimeout refuses a create without timeout (which never expires) with a 400,
	// unless its tenant's quota allows manual cleanup; a create is never given a
	// lifetime it did not ask for.
	RequireTimeout bool
	// ReadyTimeout bounds the wait for a new sandbox's agent to answer.
	ReadyTimeout time.Duration
	// ReapInterval is how often expired sandboxes are looked for.
	ReapInterval time.Duration
	// SyncInterval is how often records are compared with the runtime.
	SyncInterval time.Duration
	// FailedRetention is how long a Failed record stays visible before cleanup.
	FailedRetention time.Duration
	// PublicAddress is host[:port] under which clients reach the gateway; empty uses
	// the Host of each request.
	PublicAddress string
	// PublicURL is the scheme://host[:port] under which browsers reach the console and
	// API, when a proxy in front changes either (TLS ending there): an https URL makes
	// every cookie Secure, and its host is an Origin the console session accepts.
	PublicURL string
	// PreviewDomain, when set, makes endpoints of non-agent ports host-mode URLs.
	PreviewDomain string
	// ClusterID, when set, is the identity carried by this deployment's sandboxes
	// (runtimes.LabelCluster) instead of the id kept in the store: configuration
	// outlives a lost store, so a gateway on an empty store still adopts its own.
	ClusterID string
	// MaxPoolSize caps a pool's poolMax.
	MaxPoolSize int
	// PoolWait is how long a claim from an empty pool waits for a refill.
	PoolWait time.Duration
	// PoolFallback says what a claim does when the wait ends empty: "cold" creates the
	// sandbox cold from the pool's template, "fail" answers POOL::EMPTY.
	PoolFallback string
	// PoolConcurrency bounds warm sandboxes starting at once.
	PoolConcurrency int
	// PoolInterval is how often the pool manager checks its pools.
	PoolInterval time.Duration
	// AgentIdleTimeout is how long the proxy keeps an idle connection to an agent
	// (default 2m): warm members' connections are refreshed within it (refreshWarmConns).
	AgentIdleTimeout time.Duration
	// BatchConcurrency bounds cold creates of one batch running at once.
	BatchConcurrency int
	// MaxBatchSize caps a batch's count.
	MaxBatchSize int
	// RenewCooldown is the least time between two renewals-on-access of one sandbox.
	RenewCooldown time.Duration
	// CreateConcurrency bounds cold creates running at once on this gateway; more wait
	// their turn instead of thrashing the engine.
	CreateConcurrency int
	// PullImages is true when the runtime pulls images it lacks (SANDGATE_PULL=missing),
	// PullAlways when it pulls on every create (SANDGATE_PULL=always); both false: never.
	// They only decide what admission is told (request.imageLocal) and the pool's pull.
	PullImages bool
	PullAlways bool
	// CheckRegistries makes admission learn whether an image is already on the engine, for
	// the registries rule (SANDGATE_IMAGE_REGISTRIES set): one engine call per create.
	CheckRegistries bool
	// UsageInterval is how often each sandbox's resource use is read (package
	// gateway/usage); zero
	// uses DefaultUsageInterval, negative turns the sampler off.
	UsageInterval time.Duration
	// ImageBuilds reports the images the gateway is still building in the background
	// (package gateway/imagebuild); nil when it builds none.
	ImageBuilds ImageBuilds
	// TestClock lets the platform admin move the gateway's clock forward (clock.go), for
	// end-to-end tests only: never set in production.
	TestClock bool
}

// Defaults fills zero fields of c.
func (c *Config) Defaults() {
	if c.MinTimeout == 0 {
		c.MinTimeout = 60 * time.Second
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = 7 * 24 * time.Hour
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 30 * time.Second
	}
	if c.ReapInterval == 0 {
		c.ReapInterval = 500 * time.Millisecond
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = 2 * time.Second
	}
	if c.FailedRetention == 0 {
		c.FailedRetention = 10 * time.Minute
	}
	if c.MaxPoolSize == 0 {
		c.MaxPoolSize = 1000
	}
	if c.PoolWait == 0 {
		c.PoolWait = 2 * time.Second
	}
	if c.PoolFallback == "" {
		c.PoolFallback = "cold"
	}
	if c.PoolConcurrency == 0 {
		c.PoolConcurrency = 4
	}
	if c.AgentIdleTimeout <= 0 {
		c.AgentIdleTimeout = DefaultAgentIdleTimeout
	}
	if c.PoolInterval == 0 {
		c.PoolInterval = 250 * time.Millisecond
	}
	if c.BatchConcurrency == 0 {
		c.BatchConcurrency = 4
	}
	if c.MaxBatchSize == 0 {
		c.MaxBatchSize = 1000
	}
	if c.RenewCooldown == 0 {
		c.RenewCooldown = time.Minute
	}
	if c.CreateConcurrency == 0 {
		c.CreateConcurrency = 8
	}
}

// Service is the sandbox lifecycle. It is safe for concurrent use.
type Service struct {
	cfg     Config
	store   *store.Store
	runtime runtimes.Runtime
	policy  *policy.Engine
	log     *slog.Logger
	// agents talks to agents and enforcers directly (readiness pings, late binding,
	// the signed policy API): agentclient.go.
	agents *agentclient.Client
	owner  string
	// admission is the feature that admits creates: quotas, the create-rate bucket
	// (package gateway/admission).
	admission *admission.Manager
	// pool is the warm pool feature (package gateway/pool).
	pool *pool.Manager
	// creates bounds concurrent cold creates (CreateConcurrency).
	creates chan struct{}
	// access is the feature of previews and access (package gateway/access).
	access *access.Manager
	// eventLog is the feature of tenants' event and audit streams (package
	// gateway/eventlog).
	eventLog *eventlog.Manager
	// expiries tracks removals for expiry under way (reaper.go).
	expiries expirySet
	// egress is the feature of egress policies and the credential vault (package
	// gateway/egress).
	egress *egress.Manager
	// reconciles counts Reconcile passes; helpers are swept on every sweepEvery-th.
	reconciles atomic.Uint64
	// adminKey holds the platform admin key (a string; see SetAdminKey).
	adminKey atomic.Value
	// feed follows the records changed on any gateway: the route cache and live
	// watches (package gateway/changefeed).
	feed *changefeed.Manager
	// recovery is crash-only recovery: heartbeats, ghosts, takeovers, the cluster id
	// (package gateway/recovery).
	recovery *recovery.Manager
	// failures counts the errors of background work (failures.go).
	failures failureCounts
	// state is the feature of snapshots, forks, volumes and idle pause (package
	// gateway/state).
	state *state.Manager
	// metrics are the event-driven Prometheus series (package gateway/metrics).
	metrics *metrics.Set
	// resourceUse is the feature of resource use and metrics (package gateway/usage).
	resourceUse *usage.Manager
	// policyAdmin is the feature of tenants' Rego policy management (package
	// gateway/policyadmin).
	policyAdmin *policyadmin.Manager
	// tenancy is the feature of tenants and their API keys (package gateway/tenancy).
	tenancy *tenancy.Manager
	// batches is the feature of batches of N sandboxes (package gateway/batch).
	batches *Batches
	// tenantPlugins is the feature of tenants' WASM plugins (package
	// gateway/tenantplugins).
	tenantPlugins *tenantplugins.Manager
	// clock is the time renew-on-access and preview links decide on (clock.go).
	clock clock

	// group runs every goroutine the service starts, so that Stop waits for all of
	// them.
	group spawn.Group
}

// New builds a Service; call Start to run its background loops. pol decides access,
// admission and egress; it must not be nil.
func New(cfg Config, st *store.Store, rt runtimes.Runtime, pol *policy.Engine, log *slog.Logger) *Service {
	cfg.Defaults()
	if log == nil {
		log = slog.Default()
	}
	st.SetMeter(measureRecord)
	s := &Service{
		cfg:      cfg,
		store:    st,
		runtime:  rt,
		policy:   pol,
		log:      log,
		agents:   agentClientOf(rt).Wrapped(tracing.Transport),
		owner:    randomToken(8),
		metrics:  metrics.New(),
		creates:  make(chan struct{}, cfg.CreateConcurrency),
		expiries: expirySet{sem: make(chan struct{}, reapConcurrency)},
	}
	s.eventLog = eventlog.New(st, eventHost{s}, log)
	s.feed = changefeed.New(st, changefeedHost{s}, log)
	s.admission = admission.New(admission.Config{MinTimeout: cfg.MinTimeout, MaxTimeout: cfg.MaxTimeout, RequireTimeout: cfg.RequireTimeout,
		PullImages: cfg.PullImages, PullAlways: cfg.PullAlways, CheckRegistries: cfg.CheckRegistries}, st, rt, pol, s.metrics, admissionHost{s})
	s.recovery = recovery.New(recovery.Config{Owner: s.owner, ClusterID: cfg.ClusterID}, st, rt, recoveryHost{s}, log)
	s.pool = pool.New(pool.Config{
		Owner: s.owner, Interval: cfg.PoolInterval, HealthInterval: cfg.SyncInterval,
		Concurrency: cfg.PoolConcurrency, ReadyTimeout: cfg.ReadyTimeout, AgentIdleTimeout: cfg.AgentIdleTimeout,
		PullImages: cfg.PullImages, PullAlways: cfg.PullAlways, MaxPoolSize: cfg.MaxPoolSize,
		Wait: cfg.PoolWait, Fallback: cfg.PoolFallback, Metrics: s.metrics,
	}, st, rt, poolHost{s}, log)
	s.access = access.New(access.Config{MaxTimeout: cfg.MaxTimeout, RenewCooldown: cfg.RenewCooldown},
		st, pol, s.metrics, accessHost{s}, log)
	s.egress = egress.New(st, rt, pol, s.agents, s.metrics, egressHost{s}, log)
	s.state = state.New(state.Config{MinTimeout: cfg.MinTimeout, MaxTimeout: cfg.MaxTimeout, MaxBatchSize: cfg.MaxBatchSize},
		st, rt, stateHost{s}, log)
	s.resourceUse = usage.New(usage.Config{Interval: cfg.UsageInterval}, st, rt, s.agents, s.metrics, usageHost{s})
	s.policyAdmin = policyadmin.New(st, pol, policyHost{s}, log)
	s.tenancy = tenancy.New(st, tenancyHost{s}, log)
	s.batches = batch.New(batch.Config{MaxSize: cfg.MaxBatchSize, ColdConcurrency: cfg.BatchConcurrency,
		ColdTimeout: cfg.ReadyTimeout + 2*time.Minute, Owner: s.owner}, st, s.metrics, batchHost{s}, log)
	s.tenantPlugins = tenantplugins.New(st, log)
	return s
}

// agentClientOf is the runtime's agent client when it has one (the Docker runtime
// calls agents while sandboxes start), so that the gateway's calls reuse its
// connections; else a new one.
func agentClientOf(rt runtimes.Runtime) *agentclient.Client {
	if p, ok := rt.(runtimes.AgentClientProvider); ok && p.AgentClient() != nil {
		return p.AgentClient()
	}
	return agentclient.New()
}

// Config returns the effective configuration.
func (s *Service) Config() Config { return s.cfg }

// Store exposes the store to the HTTP layer's own needs (health).
func (s *Service) Store() *store.Store { return s.store }

// Policy exposes the policy engine (for the policy API and the CLI).
func (s *Service) Policy() *policy.Engine { return s.policy }

// Runtime exposes the runtime (for benchmarks and health).
func (s *Service) Runtime() runtimes.Runtime { return s.runtime }

// Start reconciles once with the runtime, then runs the reaper and the sync loop.
func (s *Service) Start(ctx context.Context) {
	if s.cfg.TestClock {
		s.log.Warn("test_clock is on: the platform admin can move this gateway's clock (POST /admin/test-clock); never in production")
	}
	s.recovery.Start()
	if err := s.Reconcile(ctx, true); err != nil {
		s.backgroundError("reconciler", "startup reconciliation failed; the sync loop retries", err)
	}
	s.loop(s.cfg.ReapInterval, func(ctx context.Context) { s.reapOnce(ctx) })
	s.loop(s.cfg.SyncInterval, func(ctx context.Context) {
		if err := s.Reconcile(ctx, false); err != nil {
			s.backgroundError("reconciler", "reconcile with the runtime", err)
		}
	})
	s.pool.Start()
	s.feed.Start()
	s.policyAdmin.Start(ctx)
	s.eventLog.Start()
	s.state.Start()
	s.resourceUse.Start()
}

func (s *Service) loop(every time.Duration, fn func(context.Context)) {
	s.group.Every(every, fn)
}

// Stop ends the background loops and waits for every goroutine the service started.
func (s *Service) Stop() {
	s.group.Close()
	s.batches.Stop()
	s.pool.Stop()
	s.access.Stop()
	s.egress.Stop()
	s.state.Stop()
	s.resourceUse.Stop()
	s.policyAdmin.Stop()
	s.tenantPlugins.Stop()
	s.recovery.Stop()
	s.feed.Stop()
	s.group.Wait()
	// The event and audit writers stop last, after a final flush of what everything
	// above queued while it stopped.
	s.eventLog.Stop()
	// Best effort, and nothing is left to act on a failure: a lease or a heartbeat not
	// given back lapses on its own (recovery.HeartbeatTTL), and peers then take over as they
	// would from a gateway that died.
	_ = s.store.ReleaseLease(context.Background(), leaseName, s.owner)
	_ = s.store.ReleaseLease(context.Background(), "pools", s.owner)
	// What this gateway leaves queued is taken over at once, not after recovery.HeartbeatTTL.
	_ = s.store.EndHeartbeat(context.Background(), s.owner)
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
