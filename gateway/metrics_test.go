package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/store"
)

// TestMetricsCardinalityIsBounded writes 1000 sandbox records to the (embedded) store,
// records proxied requests of each of them with every kind of status, and checks that
// the scrape grows by states × tenants and status classes, never by sandboxes: no
// series names a sandbox id, and the tenant label can be dropped.
func TestMetricsCardinalityIsBounded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, store.Options{Prefix: "card:", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := New(Config{}, st, nil, nil, nil)
	states := []string{StatePending, StateRunning, StatePaused}
	tenants := []string{"t0", "t1", "t2", "t3"}
	var ids []string
	now := time.Now().UTC()
	for i := range 1000 {
		id := fmt.Sprintf("sb-%04d", i)
		ids = append(ids, id)
		rec := &store.Sandbox{ID: id, Tenant: tenants[i%len(tenants)], State: states[i%len(states)], Image: "img",
			CreatedAt: now, LastTransitionAt: now, ExpiresAt: ptr(now.Add(time.Hour))}
		if err := st.CreateSandbox(ctx, rec, 0); err != nil {
			t.Fatal(err)
		}
		svc.Access().RecordAccess(rec, access.AccessRecord{Port: 44772 + i%2, Status: []int{200, 404, 502, 999, 0}[i%5], Bytes: 10})
	}
	for _, tt := range []struct {
		name        string
		tenantLabel bool
		maxSandbox  int
	}{
		{"tenant label on", true, len(states) * len(tenants)},
		{"tenant label off", false, len(states)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			for _, c := range svc.Usage().Collectors(tt.tenantLabel) {
				reg.MustRegister(c)
			}
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			total, sandboxes := 0, 0
			var sum float64
			for _, f := range families {
				for _, m := range f.GetMetric() {
					total++
					for _, l := range m.GetLabel() {
						if strings.HasPrefix(l.GetValue(), "sb-") {
							t.Errorf("series %s carries a sandbox id: %s=%s", f.GetName(), l.GetName(), l.GetValue())
						}
						if l.GetName() == "tenant" && !tt.tenantLabel {
							t.Errorf("series %s has a tenant label with the label turned off", f.GetName())
						}
					}
					if f.GetName() == "sandgate_sandboxes" {
						sandboxes++
						sum += m.GetGauge().GetValue()
					}
				}
			}
			if sandboxes != tt.maxSandbox {
				t.Errorf("sandgate_sandboxes has %d series, want %d", sandboxes, tt.maxSandbox)
			}
			if sum != float64(len(ids)) {
				t.Errorf("sandgate_sandboxes sums to %v, want %d", sum, len(ids))
			}
			// Proxied: 2 kinds × 4 classes (2xx, 4xx, 5xx, other) + 2 byte series; the
			// rest is fixed. 1000 sandboxes must not come near 1000 series.
			if total > 60 {
				t.Errorf("the scrape has %d series for 1000 sandboxes, want a bounded few", total)
			}
			t.Logf("%d series for %d sandboxes", total, len(ids))
		})
	}
}

func ptr[T any](v T) *T { return &v }
