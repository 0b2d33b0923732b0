package gateway

// Per-sandbox resource use. A sampler reads every Running sandbox's use every
// UsageInterval (5 s) — from the engine when the runtime can (Docker's stats), else from
// the sandbox's agent, which reads its own cgroup (Kubernetes) — and keeps the last
// usageHistory points (15 minutes) of each in memory. Every gateway samples on its own,
// so that any replica answers GET /sandboxes/{id}/metrics from its memory.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate/apiproto"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// DefaultUsageInterval is the resolution of the per-sandbox history.
const DefaultUsageInterval = 5 * time.Second

// usageWindow is how much history is kept per sandbox.
const usageWindow = 15 * time.Minute

// usageDiskEvery is how many samples pass between two reads of the disk used (costly:
// the engine walks the writable layer).
const usageDiskEvery = 12

// usageEgressEvery is how many samples pass between two reads of the enforcer's
// denial counter.
const usageEgressEvery = 3

// gatewayStart is when this process began: denials a sandbox's enforcer counted before
// it are not this gateway's to add to its counter.
var gatewayStart = time.Now()

// usageConcurrency bounds the readings under way at once.
const usageConcurrency = 4

// UsagePoint is one point of a sandbox's resource history (fields the source cannot
// tell are null) and SandboxUsage the body of GET /sandboxes/{id}/metrics, declared
// once for the gateway and the Go SDK in apiproto. DiskBytes is read every
// usageDiskEvery samples, EgressDeniedQueries every usageEgressEvery.
type (
	UsagePoint   = apiproto.UsagePoint
	SandboxUsage = apiproto.SandboxUsage
)

// usageState holds every sandbox's history.
type usageState struct {
	mu     sync.Mutex
	series map[string]*usageSeries
}

// usageSeries is one sandbox's history: a ring of points and the last raw reading.
type usageSeries struct {
	points []UsagePoint // oldest first, at most usageWindow/interval
	last   runtimes.Usage
	peak   uint64
	disk   *int64
	n      int
	source string
	// denied is the enforcer's last denial count; deniedSeen says there was one.
	denied     uint64
	deniedSeen bool
}

func (s *Service) usageInterval() time.Duration {
	if s.cfg.UsageInterval == 0 {
		return DefaultUsageInterval
	}
	return s.cfg.UsageInterval
}

// runUsageSampler starts the sampler, unless UsageInterval is negative (off).
func (s *Service) runUsageSampler() {
	if s.usageInterval() < 0 {
		return
	}
	s.loop(s.usageInterval(), s.sampleUsage)
}

// sampleUsage takes one reading of every Running sandbox and forgets the others.
func (s *Service) sampleUsage(ctx context.Context) {
	recs, err := s.store.ListSandboxes(ctx, "")
	if err != nil {
		return
	}
	s.sampleFleet(ctx, recs)
	// Warm pool members wait unclaimed: nobody's workload runs there yet.
	warm, err := s.store.WarmIDs(ctx)
	if err != nil {
		return
	}
	running := make(map[string]*store.Sandbox, len(recs))
	for _, sb := range recs {
		if sb.State == StateRunning && sb.Address != "" && !warm[sb.ID] {
			running[sb.ID] = sb
		}
	}
	s.resourceUse.mu.Lock()
	if s.resourceUse.series == nil {
		s.resourceUse.series = map[string]*usageSeries{}
	}
	for id := range s.resourceUse.series {
		if running[id] == nil {
			delete(s.resourceUse.series, id)
		}
	}
	s.resourceUse.mu.Unlock()
	sem := make(chan struct{}, usageConcurrency)
	var wg sync.WaitGroup
	for _, sb := range running {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			s.sampleOne(rctx, sb)
		}()
	}
	wg.Wait()
}

// sampleOne reads one sandbox and appends a point to its history.
func (s *Service) sampleOne(ctx context.Context, sb *store.Sandbox) {
	s.resourceUse.mu.Lock()
	ser := s.resourceUse.series[sb.ID]
	if ser == nil {
		ser = &usageSeries{}
		s.resourceUse.series[sb.ID] = ser
	}
	withDisk := ser.n%usageDiskEvery == 0
	withEgress := ser.n%usageEgressEvery == 0 && s.egress.Enforces()
	ser.n++
	s.resourceUse.mu.Unlock()
	if withEgress {
		if n, err := s.enforcerDenials(ctx, sb); err == nil {
			s.noteDenials(sb, ser, n)
		}
	}

	var p UsagePoint
	var u runtimes.Usage
	source := "agent"
	eng, fromEngine := s.runtime.(runtimes.UsageReader)
	if fromEngine {
		var err error
		if u, err = eng.Usage(ctx, sb.ID, withDisk); err != nil {
			return
		}
		source = "engine"
	} else {
		var err error
		if p, err = s.agentUsage(ctx, sb); err != nil {
			return
		}
	}

	s.resourceUse.mu.Lock()
	defer s.resourceUse.mu.Unlock()
	if s.resourceUse.series[sb.ID] != ser {
		return // forgotten meanwhile
	}
	ser.source = source
	if fromEngine {
		prev := ser.last
		ser.last = u
		if u.DiskKnown {
			d := u.DiskBytes
			ser.disk = &d
		}
		if prev.Time.IsZero() || !u.Time.After(prev.Time) || u.CPUNanos < prev.CPUNanos {
			return // the first reading is the baseline of CPU rates
		}
		p = pointFrom(prev, u)
	}
	p.DiskBytes = ser.disk
	if ser.deniedSeen {
		d := ser.denied
		p.EgressDeniedQueries = &d
	}
	ser.peak = max(ser.peak, p.MemoryBytes, p.MemoryPeakBytes)
	p.MemoryPeakBytes = ser.peak
	ser.points = append(ser.points, p)
	if keep := int(usageWindow / s.usageInterval()); len(ser.points) > keep {
		ser.points = append(ser.points[:0], ser.points[len(ser.points)-keep:]...)
	}
}

// pointFrom turns two engine readings into a point.
func pointFrom(prev, u runtimes.Usage) UsagePoint {
	wall := u.Time.Sub(prev.Time).Nanoseconds()
	cores := float64(u.CPUNanos-prev.CPUNanos) / float64(wall)
	p := UsagePoint{Time: u.Time.UTC(), CPUCores: round3(cores), MemoryBytes: u.MemoryBytes,
		MemoryPeakBytes: u.MemoryPeakBytes, MemoryLimitBytes: u.MemoryLimitBytes}
	of := 1.0
	if u.CPULimit > 0 {
		limit := u.CPULimit
		p.CPULimitCores, of = &limit, limit
	}
	p.CPUPercent = round3(cores / of * 100)
	if u.PidsKnown {
		n := u.Pids
		p.Pids = &n
	}
	if u.NetKnown {
		rx, tx := u.NetRxBytes, u.NetTxBytes
		p.NetRxBytes, p.NetTxBytes = &rx, &tx
	}
	return p
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

// enforcerDenials reads the denial counter of the sandbox's egress enforcer (/healthz).
func (s *Service) enforcerDenials(ctx context.Context, sb *store.Sandbox) (uint64, error) {
	data, err := s.agents.EnforcerHealth(ctx, sb.Address, agentCallTimeout)
	if err != nil {
		return 0, err
	}
	var h struct {
		DeniedQueries *uint64 `json:"deniedQueries"`
	}
	if err := json.Unmarshal(data, &h); err != nil || h.DeniedQueries == nil {
		return 0, fmt.Errorf("enforcer healthz: no deniedQueries")
	}
	return *h.DeniedQueries, nil
}

// maxDenialStep bounds what one reading adds to the gateway's counter: the number
// comes from inside the sandbox, where a workload could answer in the enforcer's place
// while it restarts.
const maxDenialStep = 100000

// noteDenials adds what the enforcer denied since the previous reading to the
// gateway's counter. The first reading of a sandbox older than this gateway is a
// baseline; a count that went down is a restarted enforcer counting from zero.
func (s *Service) noteDenials(sb *store.Sandbox, ser *usageSeries, n uint64) {
	s.resourceUse.mu.Lock()
	defer s.resourceUse.mu.Unlock()
	var step uint64
	switch {
	case !ser.deniedSeen && sb.CreatedAt.Before(gatewayStart):
	case !ser.deniedSeen || n < ser.denied:
		step = n
	default:
		step = n - ser.denied
	}
	ser.denied, ser.deniedSeen = n, true
	s.metrics.EgressDenied(min(step, maxDenialStep))
}

// agentUsage reads the agent's own cgroup reading (GET /metrics on the agent).
func (s *Service) agentUsage(ctx context.Context, sb *store.Sandbox) (UsagePoint, error) {
	data, err := s.agents.Metrics(ctx, sb.Address, sb.AgentCredential(), agentCallTimeout)
	if err != nil {
		return UsagePoint{}, fmt.Errorf("agent metrics: %w", err)
	}
	var m struct {
		CPUCount    float64 `json:"cpu_count"`
		CPUUsedPct  float64 `json:"cpu_used_pct"`
		MemTotalMiB float64 `json:"mem_total_mib"`
		MemUsedMiB  float64 `json:"mem_used_mib"`
		Timestamp   int64   `json:"timestamp"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return UsagePoint{}, fmt.Errorf("agent metrics: %w", err)
	}
	limit := m.CPUCount
	return UsagePoint{
		Time: time.UnixMilli(m.Timestamp).UTC(), CPUCores: round3(m.CPUUsedPct / 100 * m.CPUCount), CPULimitCores: &limit,
		CPUPercent:  m.CPUUsedPct,
		MemoryBytes: uint64(m.MemUsedMiB * (1 << 20)), MemoryLimitBytes: uint64(m.MemTotalMiB * (1 << 20)),
	}, nil
}

// SandboxUsage returns a sandbox's resource history; another tenant's sandbox is not
// found. A sandbox not sampled yet has no current point and an empty history.
func (s *Service) SandboxUsage(ctx context.Context, caller Caller, id string) (*SandboxUsage, error) {
	if _, err := s.Lookup(ctx, caller, id); err != nil {
		return nil, err
	}
	out := &SandboxUsage{ID: id, IntervalSeconds: s.usageInterval().Seconds(), History: []UsagePoint{}}
	s.resourceUse.mu.Lock()
	defer s.resourceUse.mu.Unlock()
	if ser := s.resourceUse.series[id]; ser != nil {
		out.Source = ser.source
		out.History = append(out.History, ser.points...)
		if n := len(ser.points); n > 0 {
			cur := ser.points[n-1]
			out.Current = &cur
		}
	}
	return out, nil
}

// LatestUsage returns a sandbox's newest point (nil when none), for the live stream; it
// does not check the caller (SandboxUsage did, when the stream began).
func (s *Service) LatestUsage(id string) *UsagePoint {
	s.resourceUse.mu.Lock()
	defer s.resourceUse.mu.Unlock()
	if ser := s.resourceUse.series[id]; ser != nil && len(ser.points) > 0 {
		p := ser.points[len(ser.points)-1]
		return &p
	}
	return nil
}

// UsageInterval is the resolution of the per-sandbox history (negative: not sampled).
func (s *Service) UsageInterval() time.Duration { return s.usageInterval() }
