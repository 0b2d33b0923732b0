package usage

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/test/coredeps"
)

// TestSamplesRunningSandboxesFromTheirAgents: without an engine that reads use, each
// Running sandbox's agent is asked; a paused sandbox, one without an address and a
// record in its pool's warm set (here listed too) are not sampled, and a sandbox that
// stops running is forgotten. The
// history is its tenant's: another tenant's caller is answered not found.
func TestSamplesRunningSandboxesFromTheirAgents(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, time.Second, nil)
	owner := principal.Caller{Tenant: "acme"}
	running := s.runningSandbox(t, "acme", stateRunning, time.Now().UTC())
	paused := s.runningSandbox(t, "acme", "Paused", time.Now().UTC())
	addressless := s.runningSandbox(t, "acme", stateRunning, time.Now().UTC())
	addressless.Address = ""
	if err := s.d.Store.UpdateSandbox(ctx, addressless); err != nil {
		t.Fatal(err)
	}
	if err := s.d.Store.PutPool(ctx, &store.Pool{Tenant: "acme", Name: "warm", Capacity: store.Capacity{BufferMin: 1, BufferMax: 1, PoolMax: 2}}, true); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	warm := &store.Sandbox{ID: uuid.NewString(), Tenant: "acme", Pool: "warm", Image: "base:1", State: stateRunning,
		CreatedAt: now, LastTransitionAt: now, Address: running.Address, AgentToken: running.AgentToken}
	if err := s.d.Store.CreateSandbox(ctx, warm, 0); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.d.Store.AddWarm(ctx, warm); err != nil || !ok {
		t.Fatalf("AddWarm = %v, %v", ok, err)
	}

	s.m.sample(ctx)

	got, err := s.m.SandboxUsage(ctx, owner, running.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Source != "agent" || len(got.History) != 1 || got.Current == nil || got.IntervalSeconds != 1 {
		t.Fatalf("usage = %+v, want one point read from the agent at 1 s", got)
	}
	if got.Current.CPULimitCores == nil || got.Current.Time.IsZero() {
		t.Errorf("point = %+v, want the agent's CPU count and timestamp", got.Current)
	}
	if p := s.m.Latest(running.ID); p == nil || !p.Time.Equal(got.Current.Time) {
		t.Errorf("Latest = %+v, want the current point %+v", p, got.Current)
	}
	for name, id := range map[string]string{"paused": paused.ID, "without an address": addressless.ID, "warm": warm.ID} {
		if p := s.m.Latest(id); p != nil {
			t.Errorf("the %s sandbox was sampled: %+v", name, p)
		}
	}
	empty, err := s.m.SandboxUsage(ctx, owner, paused.ID)
	if err != nil || empty.Current != nil || empty.History == nil || len(empty.History) != 0 {
		t.Errorf("usage of a sandbox not sampled = %+v, %v; want an empty history", empty, err)
	}
	_, err = s.m.SandboxUsage(ctx, principal.Caller{Tenant: "other"}, running.ID)
	wantCode(t, err, fault.KindNotFound, fault.CodeNotFound)

	running.State = "Paused"
	if err := s.d.Store.UpdateSandbox(ctx, running); err != nil {
		t.Fatal(err)
	}
	s.m.sample(ctx)
	if p := s.m.Latest(running.ID); p != nil {
		t.Errorf("a sandbox no longer Running keeps its history: %+v", p)
	}
}

// TestEngineReadingsBecomePoints: with an engine that reads use, the first reading is
// the baseline of CPU rates and makes no point; each next one makes a point of the CPU
// used over the wall time between them, against the CPU limit. The disk is read on
// every diskEvery-th sample and kept between; memory's peak never goes down; a counter
// that went back (a restarted sandbox) is a new baseline; a failed reading adds nothing;
// the history keeps the window's points only.
func TestEngineReadingsBecomePoints(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	eng := &engineReadingRuntime{readings: []runtimes.Usage{
		{Time: at(0), CPUNanos: 0, MemoryBytes: 100, DiskBytes: 4096, DiskKnown: true},
		{Time: at(1), CPUNanos: 500_000_000, CPULimit: 2, MemoryBytes: 300, MemoryLimitBytes: 1000, Pids: 7, PidsKnown: true, NetRxBytes: 10, NetTxBytes: 20, NetKnown: true},
		{Time: at(2), CPUNanos: 1_500_000_000, MemoryBytes: 200},
		{Time: at(3), CPUNanos: 100, MemoryBytes: 50}, // went back: a new baseline
		{Time: at(4), CPUNanos: 250_000_100, MemoryBytes: 50},
	}}
	// At 5 minutes a sample, the 15-minute window keeps 3 points.
	s := startManager(t, 5*time.Minute, func(d coredeps.Deps) runtimes.Runtime { eng.Runtime = d.Runtime; return eng })
	sb := s.runningSandbox(t, "acme", stateRunning, time.Now().UTC())
	owner := principal.Caller{Tenant: "acme"}

	s.m.sample(ctx)
	if got, _ := s.m.SandboxUsage(ctx, owner, sb.ID); got.Source != "engine" || len(got.History) != 0 {
		t.Fatalf("after the baseline: %+v, want no point yet, source engine", got)
	}
	s.m.sample(ctx)
	p := s.m.Latest(sb.ID)
	if p == nil {
		t.Fatal("no point after the second reading")
	}
	if p.CPUCores != 0.5 || p.CPULimitCores == nil || *p.CPULimitCores != 2 || p.CPUPercent != 25 {
		t.Errorf("CPU = %v cores of %v, %v%%; want 0.5 of 2, 25%%", p.CPUCores, p.CPULimitCores, p.CPUPercent)
	}
	if p.DiskBytes == nil || *p.DiskBytes != 4096 {
		t.Errorf("disk = %v, want the baseline's 4096 kept", p.DiskBytes)
	}
	if p.Pids == nil || *p.Pids != 7 || p.NetRxBytes == nil || *p.NetRxBytes != 10 || *p.NetTxBytes != 20 {
		t.Errorf("pids %v, net %v/%v; want 7, 10/20", p.Pids, p.NetRxBytes, p.NetTxBytes)
	}
	if p.MemoryBytes != 300 || p.MemoryPeakBytes != 300 || p.MemoryLimitBytes != 1000 {
		t.Errorf("memory = %d (peak %d, limit %d), want 300 (300, 1000)", p.MemoryBytes, p.MemoryPeakBytes, p.MemoryLimitBytes)
	}
	s.m.sample(ctx)
	if p := s.m.Latest(sb.ID); p.CPUCores != 1 || p.CPUPercent != 100 || p.MemoryPeakBytes != 300 {
		t.Errorf("third point: %v cores, %v%%, peak %d; want 1 core, 100%% of one CPU, the peak kept at 300", p.CPUCores, p.CPUPercent, p.MemoryPeakBytes)
	}
	s.m.sample(ctx) // the counter went back
	if got, _ := s.m.SandboxUsage(ctx, owner, sb.ID); len(got.History) != 2 {
		t.Fatalf("a reading whose counter went back made a point: %d points", len(got.History))
	}
	s.m.sample(ctx)
	s.m.sample(ctx) // the same reading again: no wall time passed, no point
	got, _ := s.m.SandboxUsage(ctx, owner, sb.ID)
	if len(got.History) != 3 || got.Current.CPUCores != 0.25 {
		t.Fatalf("history = %d points, current %v cores; want 3, 0.25", len(got.History), got.Current.CPUCores)
	}
	eng.mu.Lock()
	eng.readings = append(eng.readings, runtimes.Usage{Time: at(9), CPUNanos: 300_000_100})
	eng.next = len(eng.readings) - 1
	eng.err = errors.New("engine unavailable")
	eng.mu.Unlock()
	s.m.sample(ctx)
	if got, _ := s.m.SandboxUsage(ctx, owner, sb.ID); len(got.History) != 3 {
		t.Fatalf("a failed reading changed the history: %d points", len(got.History))
	}
	eng.mu.Lock()
	eng.err = nil
	eng.mu.Unlock()
	s.m.sample(ctx)
	got, _ = s.m.SandboxUsage(ctx, owner, sb.ID)
	if len(got.History) != 3 || !got.History[0].Time.Equal(at(2)) || !got.Current.Time.Equal(at(9)) {
		t.Errorf("history from %v to %v (%d points), want the window's 3 from %v to %v", got.History[0].Time, got.Current.Time, len(got.History), at(2), at(9))
	}
	eng.mu.Lock()
	withDisk := eng.withDisk
	eng.mu.Unlock()
	for i, w := range withDisk {
		if w != (i%diskEvery == 0) {
			t.Errorf("reading %d asked for the disk: %v, want %v", i, w, i%diskEvery == 0)
		}
	}
}

// TestEnforcerDenialsAreCounted: when egress is enforced, every egressEvery-th sample
// reads the enforcer's denial counter and adds what it denied since the previous
// reading to the gateway's counter. The first count of a sandbox created before this
// process is a baseline (an earlier gateway's to count); a count that went down is a
// restarted enforcer counting from zero; one reading adds at most maxDenialStep; an
// answer without a count is skipped.
func TestEnforcerDenialsAreCounted(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, time.Second, nil)
	s.host.set(func(h *testHost) { h.enforces = true })
	fresh := s.runningSandbox(t, "acme", stateRunning, time.Now().UTC())
	old := s.runningSandbox(t, "acme", stateRunning, processStart.Add(-time.Hour))
	freshEnf := startStandInEnforcer(t, fresh.Address)
	oldEnf := startStandInEnforcer(t, old.Address)

	// readAll runs egressEvery samples, so that each sandbox's enforcer is read once.
	readAll := func() {
		for range egressEvery {
			s.m.sample(ctx)
		}
	}
	denied := func(id string) uint64 {
		p := s.m.Latest(id)
		if p == nil || p.EgressDeniedQueries == nil {
			t.Fatalf("sandbox %s has no denial count: %+v", id, p)
		}
		return *p.EgressDeniedQueries
	}
	steps := []struct {
		name        string
		fresh, old  int64
		wantCounter float64
	}{
		{"first reading: the fresh sandbox's counts, the old one's is a baseline", 5, 1000, 5},
		{"both deny more", 8, 1010, 5 + 3 + 10},
		{"the fresh enforcer restarted", 2, 1010, 18 + 2},
		{"an answer without a count changes nothing", -1, 1010, 20},
		{"one reading adds at most maxDenialStep", 2 + 3*maxDenialStep, 1010, 20 + maxDenialStep},
	}
	for _, step := range steps {
		freshEnf.setDenied(step.fresh)
		oldEnf.setDenied(step.old)
		readAll()
		if got := egressDenials(t, s.metrics); got != step.wantCounter {
			t.Fatalf("%s: counter = %v, want %v", step.name, got, step.wantCounter)
		}
		if step.fresh >= 0 && denied(fresh.ID) != uint64(step.fresh) {
			t.Errorf("%s: the fresh sandbox's point says %d denials, want %d", step.name, denied(fresh.ID), step.fresh)
		}
		if denied(old.ID) != uint64(step.old) {
			t.Errorf("%s: the old sandbox's point says %d denials, want %d", step.name, denied(old.ID), step.old)
		}
	}

	// Without enforcement nothing is read.
	s.host.set(func(h *testHost) { h.enforces = false })
	freshEnf.setDenied(10 * maxDenialStep)
	readAll()
	if got := egressDenials(t, s.metrics); got != 20+maxDenialStep {
		t.Errorf("denials read without enforcement: counter = %v", got)
	}
}

// egressDenials is the value of sandgate_egress_denials_total in set.
func egressDenials(t *testing.T, set interface{ Collectors() []prometheus.Collector }) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(set.Collectors()...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "sandgate_egress_denials_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// TestSamplerLoop: Start samples every interval until Stop; a negative interval turns
// the sampler off.
func TestSamplerLoop(t *testing.T) {
	s := startManager(t, time.Second, nil)
	sb := s.runningSandbox(t, "acme", stateRunning, time.Now().UTC())
	s.m.Start()
	deadline := time.Now().Add(10 * time.Second)
	for s.m.Latest(sb.ID) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the sampler made no point in 10 s at a 1 s interval")
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.m.Stop()

	off := startManager(t, -1, nil)
	sb = off.runningSandbox(t, "acme", stateRunning, time.Now().UTC())
	off.m.Start()
	time.Sleep(1500 * time.Millisecond)
	if p := off.m.Latest(sb.ID); p != nil || off.m.Interval() >= 0 {
		t.Errorf("the sampler ran while off: %+v", p)
	}
}
