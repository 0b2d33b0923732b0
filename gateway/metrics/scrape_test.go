package metrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// exposition is one scrape as an operator's Prometheus reads it: each sample's value
// by its series ("name{label="value",…}", labels in exposition order) and each
// family's type.
type exposition struct {
	samples map[string]float64
	types   map[string]string
	text    string
}

// scrape registers cs in a pedantic registry (it also checks that every collected
// series matches a described one) and reads it through the handler the Caddy glue
// serves, in the OpenMetrics format Prometheus asks for.
func scrape(t *testing.T, cs ...prometheus.Collector) exposition {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cs...)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0")
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true, ErrorHandling: promhttp.HTTPErrorOnError}).ServeHTTP(rec, req)
	body := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: status %d: %s", rec.Code, body)
	}
	if !strings.HasSuffix(body, "# EOF\n") {
		t.Fatalf("scrape: not an OpenMetrics exposition:\n%s", body)
	}
	e := exposition{samples: map[string]float64{}, types: map[string]string{}, text: body}
	for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			e.types[name] = typ
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			t.Fatalf("scrape: line %q: %v", line, err)
		}
		e.samples[line[:sp]] = v
	}
	return e
}

// value is the sample of series; the test fails when the scrape has none.
func (e exposition) value(t *testing.T, series string) float64 {
	t.Helper()
	v, ok := e.samples[series]
	if !ok {
		t.Fatalf("no series %s in the scrape:\n%s", series, e.text)
	}
	return v
}

// expect checks exact sample values.
func (e exposition) expect(t *testing.T, want map[string]float64) {
	t.Helper()
	for series, v := range want {
		if got := e.value(t, series); got != v {
			t.Errorf("%s = %v, want %v", series, got, v)
		}
	}
}

// between checks that series lies in [lo, hi): durations measured by the code carry
// the few microseconds of the call itself.
func (e exposition) between(t *testing.T, series string, lo, hi float64) {
	t.Helper()
	if got := e.value(t, series); got < lo || got >= hi {
		t.Errorf("%s = %v, want in [%v, %v)", series, got, lo, hi)
	}
}

// seriesOf lists the series of the family name (name itself, or with a suffix).
func (e exposition) seriesOf(name string) []string {
	var out []string
	for s := range e.samples {
		if s == name || strings.HasPrefix(s, name+"{") || strings.HasPrefix(s, name+"_") {
			out = append(out, s)
		}
	}
	return out
}

// elapse moves the stages' last mark d back, so that the next Done measures d.
func elapse(st *Stages, d time.Duration) { st.last = time.Now().Add(-d) }

// ago is a start time d before now.
func ago(d time.Duration) time.Time { return time.Now().Add(-d) }

// TestCreateStagesScrape: a finished create observes each stage once, the store's two
// parts summed, in the stage's buckets; a create that fails before Finish records
// nothing; the admission stage comes from CreateStage.
func TestCreateStagesScrape(t *testing.T) {
	s := New()
	ctx := context.Background()
	s.CreateStage(ctx, StageAdmission, ago(300*time.Millisecond))

	st := s.Stages(ctx)
	elapse(st, 3*time.Second)
	st.Done(StageStore)
	elapse(st, 20*time.Second)
	st.Done(StageRuntimeCreate)
	elapse(st, 300*time.Millisecond)
	st.Done(StageAgentReady)
	elapse(st, 3*time.Second)
	st.Finish(StageStore)

	failed := s.Stages(ctx)
	elapse(failed, 3*time.Second)
	failed.Done(StageStore)
	failed.Done(StageRuntimeCreate)

	e := scrape(t, s.Collectors()...)
	const h = "sandgate_create_stage_seconds"
	if e.types[h] != "histogram" {
		t.Errorf("%s is a %q, want a histogram", h, e.types[h])
	}
	e.expect(t, map[string]float64{
		h + `_count{stage="admission"}`:                 1,
		h + `_bucket{stage="admission",le="0.25"}`:      0,
		h + `_bucket{stage="admission",le="0.5"}`:       1,
		h + `_count{stage="store"}`:                     1,
		h + `_bucket{stage="store",le="5.0"}`:           0,
		h + `_bucket{stage="store",le="10.0"}`:          1,
		h + `_bucket{stage="store",le="+Inf"}`:          1,
		h + `_count{stage="runtime_create"}`:            1,
		h + `_bucket{stage="runtime_create",le="10.0"}`: 0,
		h + `_bucket{stage="runtime_create",le="30.0"}`: 1,
		h + `_count{stage="agent_ready"}`:               1,
		h + `_bucket{stage="agent_ready",le="0.25"}`:    0,
		h + `_bucket{stage="agent_ready",le="0.5"}`:     1,
	})
	e.between(t, h+`_sum{stage="store"}`, 6, 7)
	e.between(t, h+`_sum{stage="runtime_create"}`, 20, 21)
	if n := len(e.seriesOf(h + "_count")); n != 4 {
		t.Errorf("%d stages in the scrape, want 4: %v", n, e.seriesOf(h+"_count"))
	}

	p50, p99, n := s.RecentCreateQuantiles(time.Minute)
	if n != 1 || p50 != p99 || p50 < 26300*time.Millisecond || p50 >= 27300*time.Millisecond {
		t.Errorf("RecentCreateQuantiles = %v, %v, %d; want the one finished create's 26.3s", p50, p99, n)
	}
}

// TestClaimBatchPolicyScrape: claims, batches and policy decisions land in their
// buckets, the decisions by kind and allow/deny; a kind never decided has no series.
func TestClaimBatchPolicyScrape(t *testing.T) {
	s := New()
	s.Claim(ago(3 * time.Second))
	s.Claim(ago(20 * time.Second))
	s.Batch(ago(300 * time.Millisecond))
	s.PolicyDecision(PolicyAccess, true, ago(3*time.Second))
	s.PolicyDecision(PolicyAccess, true, ago(300*time.Millisecond))
	s.PolicyDecision(PolicyAccess, false, ago(3*time.Second))
	s.PolicyDecision(PolicyEgress, false, ago(20*time.Second))

	e := scrape(t, s.Collectors()...)
	for _, h := range []string{"sandgate_claim_seconds", "sandgate_batch_seconds", "sandgate_policy_decision_seconds"} {
		if e.types[h] != "histogram" {
			t.Errorf("%s is a %q, want a histogram", h, e.types[h])
		}
	}
	e.expect(t, map[string]float64{
		`sandgate_claim_seconds_count`:             2,
		`sandgate_claim_seconds_bucket{le="2.5"}`:  0,
		`sandgate_claim_seconds_bucket{le="5.0"}`:  1,
		`sandgate_claim_seconds_bucket{le="10.0"}`: 1,
		`sandgate_claim_seconds_bucket{le="30.0"}`: 2,
		`sandgate_claim_seconds_bucket{le="+Inf"}`: 2,
		`sandgate_batch_seconds_count`:             1,
		`sandgate_batch_seconds_bucket{le="0.25"}`: 0,
		`sandgate_batch_seconds_bucket{le="0.5"}`:  1,

		`sandgate_policy_decision_seconds_count{decision="allow",kind="access"}`:           2,
		`sandgate_policy_decision_seconds_bucket{decision="allow",kind="access",le="0.5"}`: 1,
		`sandgate_policy_decision_seconds_bucket{decision="allow",kind="access",le="5.0"}`: 2,
		`sandgate_policy_decision_seconds_count{decision="deny",kind="access"}`:            1,
		`sandgate_policy_decision_seconds_count{decision="deny",kind="egress"}`:            1,
		`sandgate_policy_decision_seconds_bucket{decision="deny",kind="egress",le="10.0"}`: 0,
		`sandgate_policy_decision_seconds_bucket{decision="deny",kind="egress",le="30.0"}`: 1,
	})
	e.between(t, `sandgate_claim_seconds_sum`, 23, 24)
	for _, series := range e.seriesOf("sandgate_policy_decision_seconds") {
		if strings.Contains(series, `kind="admission"`) || strings.Contains(series, `decision="allow",kind="egress"`) {
			t.Errorf("series %s of a decision never taken", series)
		}
	}
}

// TestCountersScrape: the reconciler's, renew-on-access's, egress denials' and the
// proxy's counters as scraped, with the edges: a zero egress step, a status outside
// 100–599 ("other"), a response of no or negative length (no bytes counted, so the
// counter cannot be asked to go down).
func TestCountersScrape(t *testing.T) {
	s := New()
	s.Reconciled("adopted")
	s.Reconciled("adopted")
	s.Reconciled("removed")
	for outcome, n := range map[string]int{RenewRenewed: 3, RenewCooldown: 2, RenewUnchanged: 1, RenewFailed: 4} {
		for range n {
			s.RenewOnAccess(outcome)
		}
	}
	s.EgressDenied(3)
	s.EgressDenied(0)
	s.EgressDenied(4)
	s.Proxied(true, 200, 100)
	s.Proxied(true, 200, -5)
	s.Proxied(true, 600, 0)
	s.Proxied(false, -1, 9)
	s.Proxied(false, 101, 0)
	s.EnforcerRestore(EnforcerRestored)
	s.EnforcerRestore(EnforcerRestored)
	s.EnforcerRestore(EnforcerLost)
	var restarts atomic.Uint64
	restarts.Store(5)

	e := scrape(t, append(s.Collectors(), NewEnforcerRestarts(restarts.Load))...)
	for _, family := range []string{"sandgate_reconcile", "sandgate_renew_on_access", "sandgate_egress_denials", "sandgate_proxied_requests", "sandgate_proxied_response_bytes", "sandgate_enforcer_restores", "sandgate_enforcer_process_restarts"} {
		if e.types[family] != "counter" {
			t.Errorf("%s is a %q, want a counter", family, e.types[family])
		}
	}
	e.expect(t, map[string]float64{
		`sandgate_reconcile_total{action="adopted"}`:                    2,
		`sandgate_reconcile_total{action="removed"}`:                    1,
		`sandgate_renew_on_access_total{outcome="renewed"}`:             3,
		`sandgate_renew_on_access_total{outcome="cooldown"}`:            2,
		`sandgate_renew_on_access_total{outcome="unchanged"}`:           1,
		`sandgate_renew_on_access_total{outcome="failed"}`:              4,
		`sandgate_egress_denials_total`:                                 7,
		`sandgate_proxied_requests_total{class="2xx",kind="agent"}`:     2,
		`sandgate_proxied_requests_total{class="other",kind="agent"}`:   1,
		`sandgate_proxied_requests_total{class="other",kind="preview"}`: 1,
		`sandgate_proxied_requests_total{class="1xx",kind="preview"}`:   1,
		`sandgate_proxied_response_bytes_total{kind="agent"}`:           100,
		`sandgate_proxied_response_bytes_total{kind="preview"}`:         9,
		`sandgate_enforcer_restores_total{outcome="restored"}`:          2,
		`sandgate_enforcer_restores_total{outcome="lost"}`:              1,
		`sandgate_enforcer_process_restarts_total`:                      5,
	})
	if n := len(e.seriesOf("sandgate_proxied_requests_total")); n != 4 {
		t.Errorf("%d proxied series, want 4: %v", n, e.seriesOf("sandgate_proxied_requests_total"))
	}
}

// TestProxiedConcurrentFirstUse: requests racing on a series' first use all count.
func TestProxiedConcurrentFirstUse(t *testing.T) {
	s := New()
	const workers, each = 4, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				s.Proxied(w%2 == 0, 200+100*(i%4), 1)
			}
		}()
	}
	wg.Wait()
	e := scrape(t, s.Collectors()...)
	want := map[string]float64{
		`sandgate_proxied_response_bytes_total{kind="agent"}`:   workers / 2 * each,
		`sandgate_proxied_response_bytes_total{kind="preview"}`: workers / 2 * each,
	}
	for _, class := range []string{"2xx", "3xx", "4xx", "5xx"} {
		for _, kind := range []string{"agent", "preview"} {
			want[`sandgate_proxied_requests_total{class="`+class+`",kind="`+kind+`"}`] = workers / 2 * each / 4
		}
	}
	e.expect(t, want)
}

// TestNilSetRecordsNothing: every recording call of a nil *Set is safe and silent.
func TestNilSetRecordsNothing(t *testing.T) {
	var s *Set
	ctx := context.Background()
	s.CreateStage(ctx, StageAdmission, time.Now())
	st := s.Stages(ctx)
	st.Done(StageStore)
	st.Finish(StageStore)
	s.Claim(time.Now())
	s.Batch(time.Now())
	s.PolicyDecision(PolicyAccess, true, time.Now())
	s.Reconciled("adopted")
	s.Proxied(true, 200, 10)
	s.EgressDenied(1)
	s.RenewOnAccess(RenewRenewed)
	if p50, p99, n := s.RecentCreateQuantiles(time.Hour); p50 != 0 || p99 != 0 || n != 0 {
		t.Errorf("RecentCreateQuantiles of a nil set = %v, %v, %d", p50, p99, n)
	}
}

// TestRecentCreateQuantiles: the quantiles cover only the creates within the window,
// and the memory of creates stays bounded, keeping the newest.
func TestRecentCreateQuantiles(t *testing.T) {
	s := New()
	if _, _, n := s.RecentCreateQuantiles(time.Hour); n != 0 {
		t.Fatalf("%d creates before any", n)
	}
	finish := func(d time.Duration) {
		st := s.Stages(context.Background())
		elapse(st, d)
		st.Finish(StageRuntimeCreate)
	}
	// 1100 creates of 10 ms, 20 ms, … : past 1024 the older half is dropped, which
	// leaves creates 512 … 1099.
	for i := range 1100 {
		finish(time.Duration(i) * 10 * time.Millisecond)
	}
	if len(s.recent) > recentCreates {
		t.Fatalf("%d creates kept, want at most %d", len(s.recent), recentCreates)
	}
	p50, p99, n := s.RecentCreateQuantiles(time.Hour)
	if n != 588 {
		t.Errorf("n = %d, want 588", n)
	}
	near := func(name string, got, want time.Duration) {
		if got < want || got >= want+10*time.Millisecond {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("p50", p50, (512+293)*10*time.Millisecond)
	near("p99", p99, (512+581)*10*time.Millisecond)

	// Creates that finished before the window are left out.
	s.recentMu.Lock()
	for i := range s.recent[:len(s.recent)-3] {
		s.recent[i].at = time.Now().Add(-time.Hour)
	}
	s.recentMu.Unlock()
	p50, p99, n = s.RecentCreateQuantiles(time.Minute)
	if n != 3 {
		t.Errorf("n = %d within the window, want 3", n)
	}
	near("p50 within the window", p50, 1098*10*time.Millisecond)
	near("p99 within the window", p99, 1098*10*time.Millisecond)
	if _, _, n := s.RecentCreateQuantiles(-time.Minute); n != 0 {
		t.Errorf("n = %d for a window in the future, want 0", n)
	}
}

// fleetOf is a read that always returns f.
func fleetOf(f Fleet) func(context.Context) (Fleet, error) {
	return func(context.Context) (Fleet, error) { return f, nil }
}

// TestFleetScrape: the fleet series as scraped, with and without the tenant label.
func TestFleetScrape(t *testing.T) {
	fleet := Fleet{
		Sandboxes:     map[StateTenant]int{{"running", "acme"}: 2, {"running", "zeta"}: 3, {"stopped", "acme"}: 1},
		Pools:         []Pool{{Name: "acme/py", Available: 1, Target: 4}, {Name: "zeta/node", Available: 0, Target: 2}},
		OldestOverdue: ago(30 * time.Second),
		Plugins:       []Plugin{{Name: "acme/ttl", Calls: 10, Errors: 2, P50: 5 * time.Millisecond, P99: 250 * time.Millisecond}},
	}
	common := map[string]float64{
		`sandgate_fleet_read_errors`:                                      0,
		`sandgate_pool_available{pool="acme/py"}`:                         1,
		`sandgate_pool_target{pool="acme/py"}`:                            4,
		`sandgate_pool_available{pool="zeta/node"}`:                       0,
		`sandgate_pool_target{pool="zeta/node"}`:                          2,
		`sandgate_plugin_calls_total{plugin="acme/ttl"}`:                  10,
		`sandgate_plugin_failures_total{plugin="acme/ttl"}`:               2,
		`sandgate_plugin_call_seconds{plugin="acme/ttl",quantile="0.5"}`:  0.005,
		`sandgate_plugin_call_seconds{plugin="acme/ttl",quantile="0.99"}`: 0.25,
	}
	tests := []struct {
		name        string
		tenantLabel bool
		sandboxes   map[string]float64
	}{
		{"by state and tenant", true, map[string]float64{
			`sandgate_sandboxes{state="running",tenant="acme"}`: 2,
			`sandgate_sandboxes{state="running",tenant="zeta"}`: 3,
			`sandgate_sandboxes{state="stopped",tenant="acme"}`: 1,
		}},
		{"by state, summed over tenants", false, map[string]float64{
			`sandgate_sandboxes{state="running"}`: 5,
			`sandgate_sandboxes{state="stopped"}`: 1,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := scrape(t, NewFleetCollector(fleetOf(fleet), FleetOptions{TenantLabel: tt.tenantLabel}))
			e.expect(t, common)
			e.expect(t, tt.sandboxes)
			if got := e.seriesOf("sandgate_sandboxes"); len(got) != len(tt.sandboxes) {
				t.Errorf("sandbox series %v, want those of %v", got, tt.sandboxes)
			}
			e.between(t, "sandgate_reaper_lag_seconds", 30, 40)
			for family, typ := range map[string]string{"sandgate_sandboxes": "gauge", "sandgate_pool_available": "gauge", "sandgate_reaper_lag_seconds": "gauge", "sandgate_plugin_calls": "counter", "sandgate_plugin_failures": "counter", "sandgate_fleet_read_errors": "gauge"} {
				if e.types[family] != typ {
					t.Errorf("%s is a %q, want a %s", family, e.types[family], typ)
				}
			}
		})
	}
}

// TestFleetSeriesFollowTheStore: the fleet series are the store's at each scrape, so a
// deleted pool's, tenant's or plugin's series are gone from the next one, and a lag
// that is over reads 0.
func TestFleetSeriesFollowTheStore(t *testing.T) {
	var mu sync.Mutex
	current := Fleet{
		Sandboxes:     map[StateTenant]int{{"running", "acme"}: 1, {"running", "gone"}: 2},
		Pools:         []Pool{{Name: "gone/py", Available: 1, Target: 1}},
		OldestOverdue: ago(time.Minute),
		Plugins:       []Plugin{{Name: "gone/ttl", Calls: 1}},
	}
	c := NewFleetCollector(func(context.Context) (Fleet, error) {
		mu.Lock()
		defer mu.Unlock()
		return current, nil
	}, FleetOptions{TenantLabel: true})
	e := scrape(t, c)
	e.value(t, `sandgate_sandboxes{state="running",tenant="gone"}`)
	e.value(t, `sandgate_pool_available{pool="gone/py"}`)

	mu.Lock()
	current = Fleet{Sandboxes: map[StateTenant]int{{"running", "acme"}: 1}, OldestOverdue: time.Now().Add(time.Minute)}
	mu.Unlock()
	e = scrape(t, c)
	for _, s := range append(append(e.seriesOf("sandgate_pool"), e.seriesOf("sandgate_plugin")...), e.seriesOf("sandgate_sandboxes")...) {
		if strings.Contains(s, "gone") {
			t.Errorf("series %s outlives its tenant", s)
		}
	}
	e.expect(t, map[string]float64{`sandgate_sandboxes{state="running",tenant="acme"}`: 1, `sandgate_reaper_lag_seconds`: 0})
}

// TestFleetReadFailure: a scrape whose fleet read fails or outlasts the timeout reports
// fleet_read_errors 1 and no fleet series, and the event-driven series still come.
func TestFleetReadFailure(t *testing.T) {
	tests := []struct {
		name string
		read func(context.Context) (Fleet, error)
	}{
		{"store error", func(context.Context) (Fleet, error) {
			return Fleet{Sandboxes: map[StateTenant]int{{"running", "acme"}: 1}}, errors.New("store down")
		}},
		{"timeout", func(ctx context.Context) (Fleet, error) {
			<-ctx.Done()
			return Fleet{Pools: []Pool{{Name: "acme/py"}}}, ctx.Err()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New()
			s.Reconciled("removed")
			e := scrape(t, append(s.Collectors(), NewFleetCollector(tt.read, FleetOptions{TenantLabel: true, Timeout: 50 * time.Millisecond}))...)
			e.expect(t, map[string]float64{`sandgate_fleet_read_errors`: 1, `sandgate_reconcile_total{action="removed"}`: 1})
			for _, family := range []string{"sandgate_sandboxes", "sandgate_pool", "sandgate_reaper_lag_seconds", "sandgate_plugin"} {
				if got := e.seriesOf(family); len(got) > 0 {
					t.Errorf("fleet series %v in a scrape whose read failed", got)
				}
			}
		})
	}
}

// TestFleetReadDeadline: each read gets the configured timeout, 5s by default.
func TestFleetReadDeadline(t *testing.T) {
	for _, tt := range []struct {
		name    string
		timeout time.Duration
		want    time.Duration
	}{{"default", 0, 5 * time.Second}, {"configured", 2 * time.Second, 2 * time.Second}} {
		t.Run(tt.name, func(t *testing.T) {
			var left time.Duration
			c := NewFleetCollector(func(ctx context.Context) (Fleet, error) {
				deadline, ok := ctx.Deadline()
				if !ok {
					t.Error("the fleet read has no deadline")
				}
				left = time.Until(deadline)
				return Fleet{}, nil
			}, FleetOptions{Timeout: tt.timeout})
			scrape(t, c)
			if left > tt.want || left < tt.want-time.Second {
				t.Errorf("the read had %v left, want about %v", left, tt.want)
			}
		})
	}
}
