package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/test/coredeps"
	"github.com/sandgate/sandgate/test/testenv"
)

// BenchmarkAdmission: the admission of one create (quotas, usage, Rego) for a tenant that
// already holds N sandboxes, N = 0 and 10 000, against a real redis-server. Usage comes
// from the tenant's counters (one read whatever N is); raw-listing-* measures, in the same
// run, the way it was read before: listing and summing the tenant's records.
func BenchmarkAdmission(b *testing.B) {
	ctx := context.Background()
	// The store and the policy engine on a private redis-server; no runtime: admission
	// and claims make no runtime call.
	d := coredeps.Start(b)
	st := d.Store
	s := New(Config{}, st, nil, d.Policy, d.Log)
	p50s := map[int]float64{}
	for _, n := range []int{0, 10000} {
		tenant := fmt.Sprintf("tenant-%d", n)
		now := time.Now().UTC()
		for i := 0; i < n; i++ {
			sb := &store.Sandbox{ID: fmt.Sprintf("%s-%05d", tenant, i), Tenant: tenant, State: StateRunning, CreatedAt: now,
				ResourceLimits: map[string]string{"cpu": "500m", "memory": "512Mi"}}
			if err := st.CreateSandbox(ctx, sb, 0); err != nil {
				b.Fatal(err)
			}
		}
		caller := Caller{Tenant: tenant}
		req := admissionRequest{Image: "sandgate/base:bench", CPUMillis: 500, MemoryBytes: 512 << 20, Count: 1}
		var listing float64
		b.Run(fmt.Sprintf("raw-listing-n%d", n), func(b *testing.B) {
			var lat []time.Duration
			// A listing of 10 000 records takes ~0.1 s: a few suffice.
			for i := 0; i < min(b.N, 20); i++ {
				t0 := time.Now()
				recs, err := st.ListSandboxes(ctx, tenant)
				if err != nil {
					b.Fatal(err)
				}
				var u policy.Usage
				for _, rec := range recs {
					c, m := measureRecord(rec)
					u.Sandboxes, u.CPUMillis, u.MemoryBytes = u.Sandboxes+1, u.CPUMillis+c, u.MemoryBytes+m
				}
				if _, err := s.admit(ctx, caller, req); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			listing, _ = testenv.Quantiles(lat, time.Microsecond)
		})
		var last []time.Duration
		b.Run(fmt.Sprintf("sandgate-n%d", n), func(b *testing.B) {
			var lat []time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := s.admit(ctx, caller, req); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			u, err := st.TenantUsage(ctx, tenant)
			if err != nil || u.Sandboxes != int64(n) {
				b.Fatalf("usage %+v, %v; want %d sandboxes", u, err, n)
			}
			last = lat
		})
		// Recorded once, from the last (largest) run.
		p50, p99 := testenv.Quantiles(last, time.Microsecond)
		p50s[n] = p50
		f := testenv.Figure{Name: fmt.Sprintf("admission_n%d", n), Unit: "µs", P50: p50, P99: p99, BaselineP50: listing,
			Target: "flat: same p50 at N = 0 and N = 10 000"}
		if n > 0 {
			// Flat is the target: beside the N = 0 figure of the same run.
			f.BaselineP50 = p50s[0]
			b.Logf("admission n=%d: listing the tenant's records took p50 %.0f µs", n, listing)
		}
		testenv.RecordFigure(b, f)
	}
}
