// Package metrics holds sandgate's own Prometheus series: what each one measures, the
// few label values each may take, and the collector the Caddy glue registers into
// Caddy's metrics registry, so that one scrape of /metrics has Caddy's and ours.
//
// Cardinality is bounded by construction: no series carries a sandbox id. Labels are
// fixed vocabularies (stage, kind, decision, status class, state), the pool and plugin
// names an operator or tenant created (as many as there are pools and plugins), and the
// tenant, which FleetOptions.TenantLabel can drop.
//
// Event-driven series (histograms, counters) are recorded by one call at each hook site
// of the core. Series that describe the fleet (sandboxes by state, pool fill, reaper lag,
// plugin statistics) are read at scrape time through a Fleet func, so that every replica
// of a multi-gateway deployment reports the same shared truth from Redis.
package metrics

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/tracing"
)

// Namespace prefixes every series.
const Namespace = "sandgate"

// Stages of a cold create, the values of the stage label of CreateStageSeconds.
const (
	StageAdmission     = "admission"
	StageStore         = "store"
	StageRuntimeCreate = "runtime_create"
	StageAgentReady    = "agent_ready"
)

// Kinds of policy decision, the values of the kind label of PolicyDecisionSeconds.
const (
	PolicyAccess    = "access"
	PolicyAdmission = "admission"
	PolicyEgress    = "egress"
)

// Kinds of proxied request.
const (
	ProxyAgent   = "agent"
	ProxyPreview = "preview"
)

// Outcomes of a renew-on-access decision, the values of the outcome label of
// RenewOnAccessTotal.
const (
	RenewRenewed   = "renewed"
	RenewCooldown  = "cooldown"
	RenewUnchanged = "unchanged"
	RenewFailed    = "failed"
)

// Set is the event-driven series of one gateway. A nil *Set records nothing, so code
// built without one (unit tests) needs no guard.
type Set struct {
	createStage  *prometheus.HistogramVec
	claim        prometheus.Histogram
	batch        prometheus.Histogram
	policy       *prometheus.HistogramVec
	reconcile    *prometheus.CounterVec
	proxied      *prometheus.CounterVec
	proxiedBytes *prometheus.CounterVec
	// proxiedBy and proxiedBytesBy hold the series of proxied and proxiedBytes once
	// used, by kind (0 preview, 1 agent) and status class (0 other, 1-5 for 1xx-5xx):
	// a lookup by label values hashed them under the vector's lock on every request.
	proxiedBy      [2][6]atomic.Pointer[prometheus.Counter]
	proxiedBytesBy [2]atomic.Pointer[prometheus.Counter]
	egressDenied   prometheus.Counter
	renewAccess    *prometheus.CounterVec
	enforcers      *prometheus.CounterVec

	// recent keeps the last creates' total durations for the console's p50/p99.
	recentMu sync.Mutex
	recent   []timedDuration
}

type timedDuration struct {
	at time.Time
	d  time.Duration
}

// recentCreates is how many create durations RecentCreateQuantiles looks at, at most.
const recentCreates = 1024

// latencyBuckets span a fast policy decision (0.1 ms) to a slow cold create (60 s).
var latencyBuckets = []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// New makes the series of one gateway.
func New() *Set {
	return &Set{
		createStage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "create_stage_seconds",
			Help:    "Duration of each stage of a cold sandbox create (admission, store, runtime_create, agent_ready).",
			Buckets: latencyBuckets,
		}, []string{"stage"}),
		claim: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "claim_seconds",
			Help:    "Duration of a claim of warm pool members, late binding included.",
			Buckets: latencyBuckets,
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "batch_seconds",
			Help:    "Duration of a batch create request (the claim part; cold members start in the background).",
			Buckets: latencyBuckets,
		}),
		policy: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "policy_decision_seconds",
			Help:    "Duration of a Rego policy decision by kind (access, admission, egress) and decision (allow, deny).",
			Buckets: latencyBuckets,
		}, []string{"kind", "decision"}),
		reconcile: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "reconcile_total",
			Help: "Sandboxes the reconciler adopted from the runtime or removed from it (orphans, half-made).",
		}, []string{"action"}),
		proxied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "proxied_requests_total",
			Help: "Requests proxied into sandboxes by kind (agent, preview) and status class (2xx … 5xx).",
		}, []string{"kind", "class"}),
		proxiedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "proxied_response_bytes_total",
			Help: "Response bytes proxied out of sandboxes by kind (agent, preview).",
		}, []string{"kind"}),
		egressDenied: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "egress_denials_total",
			Help: "DNS questions the sandboxes' egress enforcers refused, as this gateway's sampler read them (every gateway reads every sandbox: take the max over gateways, not the sum).",
		}),
		renewAccess: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "renew_on_access_total",
			Help: "Renew-on-access decisions this gateway took, by outcome (renewed; cooldown: another renewal was too recent; unchanged: the rule or the TTL plugin kept the expiry; failed: the store did not answer).",
		}, []string{"outcome"}),
		enforcers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "enforcer_restores_total",
			Help: "Egress enforcers this gateway's reconciler found gone from a running sandbox, by outcome (restored: a new one enforces the sandbox's policy; lost: restoring failed until the sandbox was marked Failed, ENFORCER_LOST).",
		}, []string{"outcome"}),
	}
}

// Collectors lists the series of s for registration.
func (s *Set) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.createStage, s.claim, s.batch, s.policy, s.reconcile, s.proxied, s.proxiedBytes, s.egressDenied, s.renewAccess, s.enforcers}
}

// CreateStage records a create stage that began at start, and its span in ctx's trace.
func (s *Set) CreateStage(ctx context.Context, stage string, start time.Time) {
	end := time.Now()
	tracing.Record(ctx, "sandgate.create."+stage, start, end)
	if s != nil {
		s.createStage.WithLabelValues(stage).Observe(end.Sub(start).Seconds())
	}
}

// Stages times consecutive stages of one create: each Done adds the time since the
// previous mark to its stage (a stage may come twice, the store's does), and Finish
// observes every stage once. A create that fails before Finish records nothing.
type Stages struct {
	ctx   context.Context
	set   *Set
	last  time.Time
	spent map[string]time.Duration
}

// Stages starts timing a sequence of create stages now; each stage is also a span of
// ctx's trace.
func (s *Set) Stages(ctx context.Context) *Stages {
	return &Stages{ctx: ctx, set: s, last: time.Now(), spent: make(map[string]time.Duration, 4)}
}

// Done adds the time since the previous mark to stage.
func (st *Stages) Done(stage string) {
	now := time.Now()
	tracing.Record(st.ctx, "sandgate.create."+stage, st.last, now)
	st.spent[stage] += now.Sub(st.last)
	st.last = now
}

// Finish ends stage now and observes every stage.
func (st *Stages) Finish(stage string) {
	st.Done(stage)
	if st.set == nil {
		return
	}
	var total time.Duration
	for name, d := range st.spent {
		st.set.createStage.WithLabelValues(name).Observe(d.Seconds())
		total += d
	}
	st.set.recentMu.Lock()
	if len(st.set.recent) >= recentCreates {
		st.set.recent = append(st.set.recent[:0], st.set.recent[len(st.set.recent)-recentCreates/2:]...)
	}
	st.set.recent = append(st.set.recent, timedDuration{time.Now(), total})
	st.set.recentMu.Unlock()
}

// RecentCreateQuantiles returns the p50 and p99 of the cold creates that finished
// within window; n is how many there were.
func (s *Set) RecentCreateQuantiles(window time.Duration) (p50, p99 time.Duration, n int) {
	if s == nil {
		return 0, 0, 0
	}
	since := time.Now().Add(-window)
	s.recentMu.Lock()
	var ds []time.Duration
	for _, r := range s.recent {
		if r.at.After(since) {
			ds = append(ds, r.d)
		}
	}
	s.recentMu.Unlock()
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))] }
	return q(0.5), q(0.99), len(ds)
}

// Claim records a claim that began at start.
func (s *Set) Claim(start time.Time) {
	if s != nil {
		s.claim.Observe(time.Since(start).Seconds())
	}
}

// Batch records a batch request that began at start.
func (s *Set) Batch(start time.Time) {
	if s != nil {
		s.batch.Observe(time.Since(start).Seconds())
	}
}

// PolicyDecision records a decision of kind that began at start.
func (s *Set) PolicyDecision(kind string, allow bool, start time.Time) {
	if s == nil {
		return
	}
	decision := "deny"
	if allow {
		decision = "allow"
	}
	s.policy.WithLabelValues(kind, decision).Observe(time.Since(start).Seconds())
}

// Reconciled counts one reconciler action: "adopted" or "removed".
func (s *Set) Reconciled(action string) {
	if s != nil {
		s.reconcile.WithLabelValues(action).Inc()
	}
}

// Proxied counts one proxied request and its response bytes.
func (s *Set) Proxied(agent bool, status int, bytes int64) {
	if s == nil {
		return
	}
	kind, k := ProxyPreview, 0
	if agent {
		kind, k = ProxyAgent, 1
	}
	class := 0
	if status >= 100 && status <= 599 {
		class = status / 100
	}
	seriesOf(&s.proxiedBy[k][class], func() prometheus.Counter { return s.proxied.WithLabelValues(kind, StatusClass(status)) }).Inc()
	if bytes > 0 {
		seriesOf(&s.proxiedBytesBy[k], func() prometheus.Counter { return s.proxiedBytes.WithLabelValues(kind) }).Add(float64(bytes))
	}
}

// seriesOf is the series *p holds, looked up with lookup (and kept in *p) on first use.
func seriesOf(p *atomic.Pointer[prometheus.Counter], lookup func() prometheus.Counter) prometheus.Counter {
	if c := p.Load(); c != nil {
		return *c
	}
	c := lookup()
	p.Store(&c)
	return c
}

// EgressDenied counts n egress denials.
func (s *Set) EgressDenied(n uint64) {
	if s != nil && n > 0 {
		s.egressDenied.Add(float64(n))
	}
}

// RenewOnAccess counts one renew-on-access decision by its outcome (RenewRenewed …).
func (s *Set) RenewOnAccess(outcome string) {
	if s != nil {
		s.renewAccess.WithLabelValues(outcome).Inc()
	}
}

// Outcomes of an enforcer restore (EnforcerRestore).
const (
	EnforcerRestored = "restored"
	EnforcerLost     = "lost"
)

// EnforcerRestore counts one restore of a sandbox's egress enforcer by its outcome.
func (s *Set) EnforcerRestore(outcome string) {
	if s != nil {
		s.enforcers.WithLabelValues(outcome).Inc()
	}
}

// NewEnforcerRestarts reports, as sandgate_enforcer_process_restarts_total, the count
// read returns at each scrape: the enforcer processes the runtime started again after
// they exited (runtimes.EnforcerRestartCounter).
func NewEnforcerRestarts(read func() uint64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: Namespace, Name: "enforcer_process_restarts_total",
		Help: "Egress enforcer processes this gateway started again after they exited (Docker, enforcers as host processes; a restarted enforcer keeps its policy and vault).",
	}, func() float64 { return float64(read()) })
}

// StatusClass turns an HTTP status into its class label ("2xx"); anything outside
// 100–599 is "other", so that no status code a sandbox invents adds a series.
func StatusClass(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	return strconv.Itoa(status/100) + "xx"
}

// Fleet is what the fleet series report, read at scrape time.
type Fleet struct {
	// Sandboxes counts sandboxes by state and tenant.
	Sandboxes map[StateTenant]int
	// Pools are every pool's fill.
	Pools []Pool
	// OldestOverdue is the expiry of the oldest sandbox past it; zero when none is.
	OldestOverdue time.Time
	// Plugins are the loaded plugins' call statistics.
	Plugins []Plugin
}

// StateTenant keys Fleet.Sandboxes.
type StateTenant struct{ State, Tenant string }

// Pool is one pool's fill.
type Pool struct {
	Name              string // tenant/name
	Available, Target int
}

// Plugin is one plugin's call statistics.
type Plugin struct {
	Name          string // tenant/name
	Calls, Errors uint64
	P50, P99      time.Duration
}

// FleetOptions configure the fleet collector.
type FleetOptions struct {
	// TenantLabel keeps the tenant label on sandgate_sandboxes; false sums over tenants.
	TenantLabel bool
	// Timeout bounds one read of the fleet (default 5s).
	Timeout time.Duration
}

// FleetCollector reports the fleet series from read at every scrape.
type FleetCollector struct {
	read  func(context.Context) (Fleet, error)
	opts  FleetOptions
	descs fleetDescs
}

type fleetDescs struct {
	sandboxes, poolAvailable, poolTarget, reaperLag, pluginCalls, pluginErrors, pluginLatency, scrapeErrors *prometheus.Desc
}

// NewFleetCollector builds the collector; read is called once per scrape.
func NewFleetCollector(read func(context.Context) (Fleet, error), opts FleetOptions) *FleetCollector {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	sbLabels := []string{"state"}
	if opts.TenantLabel {
		sbLabels = append(sbLabels, "tenant")
	}
	name := func(n string) string { return prometheus.BuildFQName(Namespace, "", n) }
	return &FleetCollector{read: read, opts: opts, descs: fleetDescs{
		sandboxes:     prometheus.NewDesc(name("sandboxes"), "Sandboxes by state (and tenant, unless SANDGATE_METRICS_TENANT_LABEL=off).", sbLabels, nil),
		poolAvailable: prometheus.NewDesc(name("pool_available"), "Warm sandboxes ready to claim, per pool (tenant/name).", []string{"pool"}, nil),
		poolTarget:    prometheus.NewDesc(name("pool_target"), "Warm sandboxes the pool manager keeps ready (bufferMin), per pool.", []string{"pool"}, nil),
		reaperLag:     prometheus.NewDesc(name("reaper_lag_seconds"), "Now minus the oldest expiry not yet reaped (0 when none is overdue).", nil, nil),
		pluginCalls:   prometheus.NewDesc(name("plugin_calls_total"), "Hook calls of a plugin (tenant/name), failed ones included, since it was first loaded on this gateway.", []string{"plugin"}, nil),
		pluginErrors:  prometheus.NewDesc(name("plugin_failures_total"), "Failed hook calls of a plugin (timeouts included).", []string{"plugin"}, nil),
		pluginLatency: prometheus.NewDesc(name("plugin_call_seconds"), "Hook call duration of a plugin over its last 1024 calls, by quantile (0.5, 0.99).", []string{"plugin", "quantile"}, nil),
		scrapeErrors:  prometheus.NewDesc(name("fleet_read_errors"), "1 when this scrape could not read the fleet from the store (its series are missing then).", nil, nil),
	}}
}

// Describe implements prometheus.Collector.
func (c *FleetCollector) Describe(ch chan<- *prometheus.Desc) {
	d := c.descs
	for _, x := range []*prometheus.Desc{d.sandboxes, d.poolAvailable, d.poolTarget, d.reaperLag, d.pluginCalls, d.pluginErrors, d.pluginLatency, d.scrapeErrors} {
		ch <- x
	}
}

// Collect implements prometheus.Collector.
func (c *FleetCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	f, err := c.read(ctx)
	failed := 0.0
	if err != nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(c.descs.scrapeErrors, prometheus.GaugeValue, failed)
	if err != nil {
		return
	}
	d := c.descs
	if c.opts.TenantLabel {
		for k, n := range f.Sandboxes {
			ch <- prometheus.MustNewConstMetric(d.sandboxes, prometheus.GaugeValue, float64(n), k.State, k.Tenant)
		}
	} else {
		byState := map[string]int{}
		for k, n := range f.Sandboxes {
			byState[k.State] += n
		}
		for st, n := range byState {
			ch <- prometheus.MustNewConstMetric(d.sandboxes, prometheus.GaugeValue, float64(n), st)
		}
	}
	for _, p := range f.Pools {
		ch <- prometheus.MustNewConstMetric(d.poolAvailable, prometheus.GaugeValue, float64(p.Available), p.Name)
		ch <- prometheus.MustNewConstMetric(d.poolTarget, prometheus.GaugeValue, float64(p.Target), p.Name)
	}
	lag := 0.0
	if !f.OldestOverdue.IsZero() {
		lag = max(time.Since(f.OldestOverdue).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(d.reaperLag, prometheus.GaugeValue, lag)
	for _, p := range f.Plugins {
		ch <- prometheus.MustNewConstMetric(d.pluginCalls, prometheus.CounterValue, float64(p.Calls), p.Name)
		ch <- prometheus.MustNewConstMetric(d.pluginErrors, prometheus.CounterValue, float64(p.Errors), p.Name)
		ch <- prometheus.MustNewConstMetric(d.pluginLatency, prometheus.GaugeValue, p.P50.Seconds(), p.Name, "0.5")
		ch <- prometheus.MustNewConstMetric(d.pluginLatency, prometheus.GaugeValue, p.P99.Seconds(), p.Name, "0.99")
	}
}

// Interface guards
var _ prometheus.Collector = (*FleetCollector)(nil)
