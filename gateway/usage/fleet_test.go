package usage

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// storedSandbox writes a record in state (no runtime instance: the fleet only counts
// records), expiring at expiresAt when not nil.
func storedSandbox(t *testing.T, st *store.Store, tenant, state string, expiresAt *time.Time) {
	t.Helper()
	now := time.Now().UTC()
	sb := &store.Sandbox{ID: uuid.NewString(), Tenant: tenant, Image: "base:1", State: state, CreatedAt: now, LastTransitionAt: now, ExpiresAt: expiresAt}
	if err := st.CreateSandbox(context.Background(), sb, 0); err != nil {
		t.Fatal(err)
	}
}

// TestFleetHistory: each sample adds a point of the fleet — sandboxes by state, the
// recent creates' latency, every pool's fill — that only the platform admin may read,
// and the history keeps the window's points only.
func TestFleetHistory(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, 5*time.Minute, nil) // the window keeps 3 points
	storedSandbox(t, s.d.Store, "acme", stateRunning, nil)
	storedSandbox(t, s.d.Store, "acme", "Paused", nil)
	storedSandbox(t, s.d.Store, "beta", "Paused", nil)
	if err := s.d.Store.PutPool(ctx, &store.Pool{Tenant: "beta", Name: "py", Capacity: store.Capacity{BufferMin: 2, BufferMax: 3, PoolMax: 5}}, true); err != nil {
		t.Fatal(err)
	}

	_, err := s.m.Fleet(principal.Caller{Tenant: "acme"})
	wantCode(t, err, fault.KindForbidden, fault.CodeForbidden)
	admin := principal.Caller{Admin: true}
	if h, err := s.m.Fleet(admin); err != nil || len(h.History) != 0 || h.IntervalSeconds != 300 {
		t.Fatalf("before any sample: %+v, %v; want an empty history at 300 s", h, err)
	}

	s.m.sample(ctx)
	h, _ := s.m.Fleet(admin)
	if len(h.History) != 1 {
		t.Fatalf("history has %d points, want 1", len(h.History))
	}
	p := h.History[0]
	if p.Sandboxes[stateRunning] != 1 || p.Sandboxes["Paused"] != 2 {
		t.Errorf("sandboxes by state = %v, want 1 Running, 2 Paused", p.Sandboxes)
	}
	if p.Creates != 0 || p.CreateP50Seconds != nil || p.CreateP99Seconds != nil {
		t.Errorf("create latency without creates: %d, %v, %v", p.Creates, p.CreateP50Seconds, p.CreateP99Seconds)
	}
	if len(p.Pools) != 1 || p.Pools[0] != (FleetPool{Name: "beta/py", Available: 0, Target: 2}) {
		t.Errorf("pools = %+v, want beta/py empty with a target of 2", p.Pools)
	}

	s.metrics.Stages(ctx).Finish(metrics.StageAgentReady)
	for range 3 {
		s.m.sample(ctx)
	}
	h, _ = s.m.Fleet(admin)
	if len(h.History) != 3 {
		t.Fatalf("history has %d points, want the window's 3", len(h.History))
	}
	if last := h.History[2]; last.Creates != 1 || last.CreateP50Seconds == nil || last.CreateP99Seconds == nil {
		t.Errorf("after a create: %d creates, p50 %v, p99 %v; want 1 with its latency", last.Creates, last.CreateP50Seconds, last.CreateP99Seconds)
	}
}

// sample is one series of a scrape: its labels and its value (a gauge's or a counter's).
type sample struct {
	labels map[string]string
	value  float64
}

// TestCollectors: the scrape has the event-driven series and the fleet's, read from the
// store: sandboxes by state and tenant (the tenant label dropped when asked), every
// pool's fill, the reaper's lag behind an overdue expiry, and the plugins' statistics
// the host reports; a store that does not answer is reported, not a failed scrape.
func TestCollectors(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, time.Second, nil)
	overdue := time.Now().Add(-time.Minute).UTC()
	storedSandbox(t, s.d.Store, "acme", stateRunning, &overdue)
	storedSandbox(t, s.d.Store, "acme", stateRunning, nil)
	storedSandbox(t, s.d.Store, "beta", stateRunning, nil)
	if err := s.d.Store.PutPool(ctx, &store.Pool{Tenant: "beta", Name: "py", Capacity: store.Capacity{BufferMin: 2, BufferMax: 3, PoolMax: 5}}, true); err != nil {
		t.Fatal(err)
	}
	s.host.set(func(h *testHost) {
		h.plugins = []metrics.Plugin{{Name: "acme/ttl", Calls: 7, Errors: 1, P50: time.Millisecond, P99: 3 * time.Millisecond}}
	})

	gather := func(tenantLabel bool) map[string][]sample {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(s.m.Collectors(tenantLabel)...)
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]sample{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				v := sample{labels: map[string]string{}, value: m.GetGauge().GetValue() + m.GetCounter().GetValue()}
				for _, l := range m.GetLabel() {
					v.labels[l.GetName()] = l.GetValue()
				}
				out[f.GetName()] = append(out[f.GetName()], v)
			}
		}
		return out
	}

	got := gather(true)
	byTenant := map[string]float64{}
	for _, m := range got["sandgate_sandboxes"] {
		byTenant[m.labels["state"]+"/"+m.labels["tenant"]] = m.value
	}
	if len(byTenant) != 2 || byTenant["Running/acme"] != 2 || byTenant["Running/beta"] != 1 {
		t.Errorf("sandgate_sandboxes = %v, want Running/acme 2, Running/beta 1", byTenant)
	}
	if m := got["sandgate_pool_target"]; len(m) != 1 || m[0].labels["pool"] != "beta/py" || m[0].value != 2 {
		t.Errorf("sandgate_pool_target = %v, want beta/py at 2", m)
	}
	if m := got["sandgate_reaper_lag_seconds"]; len(m) != 1 || m[0].value < 59 {
		t.Errorf("sandgate_reaper_lag_seconds = %v, want a minute or more", m)
	}
	if m := got["sandgate_plugin_calls_total"]; len(m) != 1 || m[0].labels["plugin"] != "acme/ttl" || m[0].value != 7 {
		t.Errorf("sandgate_plugin_calls_total = %v, want acme/ttl at 7", m)
	}
	if _, ok := got["sandgate_claim_seconds"]; !ok {
		t.Error("the event-driven series are missing from the scrape")
	}

	for _, m := range gather(false)["sandgate_sandboxes"] {
		if _, ok := m.labels["tenant"]; ok || m.labels["state"] != stateRunning || m.value != 3 {
			t.Errorf("without the tenant label: %v, want one Running series at 3", m)
		}
	}

	s.d.Redis.Stop()
	got = gather(true)
	if m := got["sandgate_fleet_read_errors"]; len(m) != 1 || m[0].value != 1 {
		t.Errorf("sandgate_fleet_read_errors with the store down = %v, want 1", m)
	}
	if _, ok := got["sandgate_sandboxes"]; ok {
		t.Error("sandgate_sandboxes reported while the store does not answer")
	}
}
