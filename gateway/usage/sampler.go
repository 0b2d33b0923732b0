package usage

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate/apiproto"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// diskEvery is how many samples pass between two reads of the disk used (costly: the
// engine walks the writable layer).
const diskEvery = 12

// egressEvery is how many samples pass between two reads of the enforcer's denial
// counter.
const egressEvery = 3

// concurrency bounds the readings under way at once.
const concurrency = 4

// callTimeout bounds one call to an agent or an enforcer.
const callTimeout = 5 * time.Second

// processStart is when this process began: denials a sandbox's enforcer counted before
// it are not this gateway's to add to its counter.
var processStart = time.Now()

// maxDenialStep bounds what one reading adds to the gateway's counter: the number
// comes from inside the sandbox, where a workload could answer in the enforcer's place
// while it restarts.
const maxDenialStep = 100000

// series is one sandbox's history: a ring of points and the last raw reading.
type series struct {
	points []apiproto.UsagePoint // oldest first, at most window/interval
	last   runtimes.Usage
	peak   uint64
	disk   *int64
	n      int
	source string
	// denied is the enforcer's last denial count; deniedSeen says there was one.
	denied     uint64
	deniedSeen bool
}

// sample takes one reading of every Running sandbox, forgets the others, and records a
// point of the fleet's history.
func (m *Manager) sample(ctx context.Context) {
	recs, err := m.store.ListSandboxes(ctx, "")
	if err != nil {
		return
	}
	m.sampleFleet(ctx, recs)
	// Warm pool members wait unclaimed: nobody's workload runs there yet.
	warm, err := m.store.WarmIDs(ctx)
	if err != nil {
		return
	}
	running := make(map[string]*store.Sandbox, len(recs))
	for _, sb := range recs {
		if sb.State == stateRunning && sb.Address != "" && !warm[sb.ID] {
			running[sb.ID] = sb
		}
	}
	m.mu.Lock()
	for id := range m.series {
		if running[id] == nil {
			delete(m.series, id)
		}
	}
	m.mu.Unlock()
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for _, sb := range running {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			m.sampleOne(rctx, sb)
		}()
	}
	wg.Wait()
}

// sampleOne reads one sandbox and appends a point to its history.
func (m *Manager) sampleOne(ctx context.Context, sb *store.Sandbox) {
	m.mu.Lock()
	ser := m.series[sb.ID]
	if ser == nil {
		ser = &series{}
		m.series[sb.ID] = ser
	}
	withDisk := ser.n%diskEvery == 0
	withEgress := ser.n%egressEvery == 0 && m.host.EnforcesEgress()
	ser.n++
	m.mu.Unlock()
	if withEgress {
		if n, err := m.enforcerDenials(ctx, sb); err == nil {
			m.noteDenials(sb, ser, n)
		}
	}

	var p apiproto.UsagePoint
	var u runtimes.Usage
	source := "agent"
	eng, fromEngine := m.runtime.(runtimes.UsageReader)
	if fromEngine {
		var err error
		if u, err = eng.Usage(ctx, sb.ID, withDisk); err != nil {
			return
		}
		source = "engine"
	} else {
		var err error
		if p, err = m.agentUsage(ctx, sb); err != nil {
			return
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.series[sb.ID] != ser {
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
	if keep := m.keep(); len(ser.points) > keep {
		ser.points = append(ser.points[:0], ser.points[len(ser.points)-keep:]...)
	}
}

// pointFrom turns two engine readings into a point.
func pointFrom(prev, u runtimes.Usage) apiproto.UsagePoint {
	wall := u.Time.Sub(prev.Time).Nanoseconds()
	cores := float64(u.CPUNanos-prev.CPUNanos) / float64(wall)
	p := apiproto.UsagePoint{Time: u.Time.UTC(), CPUCores: round3(cores), MemoryBytes: u.MemoryBytes,
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
func (m *Manager) enforcerDenials(ctx context.Context, sb *store.Sandbox) (uint64, error) {
	data, err := m.agents.EnforcerHealth(ctx, sb.Address, callTimeout)
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

// noteDenials adds what the enforcer denied since the previous reading to the
// gateway's counter. The first reading of a sandbox older than this process is a
// baseline; a count that went down is a restarted enforcer counting from zero.
func (m *Manager) noteDenials(sb *store.Sandbox, ser *series, n uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var step uint64
	switch {
	case !ser.deniedSeen && sb.CreatedAt.Before(processStart):
	case !ser.deniedSeen || n < ser.denied:
		step = n
	default:
		step = n - ser.denied
	}
	ser.denied, ser.deniedSeen = n, true
	m.metrics.EgressDenied(min(step, maxDenialStep))
}

// agentUsage reads the agent's own cgroup reading (GET /metrics on the agent).
func (m *Manager) agentUsage(ctx context.Context, sb *store.Sandbox) (apiproto.UsagePoint, error) {
	data, err := m.agents.Metrics(ctx, sb.Address, sb.AgentCredential(), callTimeout)
	if err != nil {
		return apiproto.UsagePoint{}, fmt.Errorf("agent metrics: %w", err)
	}
	var r struct {
		CPUCount    float64 `json:"cpu_count"`
		CPUUsedPct  float64 `json:"cpu_used_pct"`
		MemTotalMiB float64 `json:"mem_total_mib"`
		MemUsedMiB  float64 `json:"mem_used_mib"`
		Timestamp   int64   `json:"timestamp"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return apiproto.UsagePoint{}, fmt.Errorf("agent metrics: %w", err)
	}
	limit := r.CPUCount
	return apiproto.UsagePoint{
		Time: time.UnixMilli(r.Timestamp).UTC(), CPUCores: round3(r.CPUUsedPct / 100 * r.CPUCount), CPULimitCores: &limit,
		CPUPercent:  r.CPUUsedPct,
		MemoryBytes: uint64(r.MemUsedMiB * (1 << 20)), MemoryLimitBytes: uint64(r.MemTotalMiB * (1 << 20)),
	}, nil
}

// SandboxUsage returns a sandbox's resource history; another tenant's sandbox is not
// found. A sandbox not sampled yet has no current point and an empty history.
func (m *Manager) SandboxUsage(ctx context.Context, caller principal.Caller, id string) (*apiproto.SandboxUsage, error) {
	if _, err := m.host.Lookup(ctx, caller, id); err != nil {
		return nil, err
	}
	out := &apiproto.SandboxUsage{ID: id, IntervalSeconds: m.cfg.Interval.Seconds(), History: []apiproto.UsagePoint{}}
	m.mu.Lock()
	defer m.mu.Unlock()
	if ser := m.series[id]; ser != nil {
		out.Source = ser.source
		out.History = append(out.History, ser.points...)
		if n := len(ser.points); n > 0 {
			cur := ser.points[n-1]
			out.Current = &cur
		}
	}
	return out, nil
}

// Latest returns a sandbox's newest point (nil when none), for the live stream; it
// does not check the caller (SandboxUsage did, when the stream began).
func (m *Manager) Latest(id string) *apiproto.UsagePoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ser := m.series[id]; ser != nil && len(ser.points) > 0 {
		p := ser.points[len(ser.points)-1]
		return &p
	}
	return nil
}
