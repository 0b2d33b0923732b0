package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/test/coredeps"
)

// BenchmarkBatchClaim1000: POST /v1/batches of 1000 from a warm pool, in process, against
// a real redis-server and no runtime (a claim makes no runtime call): the core of
// test/k8s's k8s_batch1000_bound without HTTP and the control plane, for profiles and
// comparisons of builds. Reported per batch: bound-ms (Batches().Create and the encoding of
// its answer), gw-cpu-µs (this process's CPU meanwhile), redis-cpu-µs (the server's,
// INFO cpu), redis-script-µs (the scripts' time as Redis counts it, waits for a core
// included). How the claim is shaped, where its time goes and the figures are in
// docs/PERFORMANCE.md ("Claiming a batch of 1000").
//
// The answer carries each member's agent endpoint (as POST /v1/batches answers it: a
// Rego decision, through the decision cache, and a key-bound value per member);
// WithoutEndpoints measures the claim without them, in the same binary.
func BenchmarkBatchClaim1000(b *testing.B) { benchBatchClaim(b, 1000, true) }

// BenchmarkBatchClaim100 is BenchmarkBatchClaim1000's claim at test/k8s's
// k8s_batch100_bound size, where what a claim costs once (admission, the pool and
// tenant reads, the batch record) weighs more than what it costs per member.
func BenchmarkBatchClaim100(b *testing.B) { benchBatchClaim(b, 100, true) }

// BenchmarkBatchClaim100WithoutEndpoints is BenchmarkBatchClaim100 whose answer carries
// no agent endpoints: beside BenchmarkBatchClaim100, what the endpoints cost the claim.
func BenchmarkBatchClaim100WithoutEndpoints(b *testing.B) { benchBatchClaim(b, 100, false) }

// BenchmarkBatchClaim1000WithoutEndpoints is the same at 1000.
func BenchmarkBatchClaim1000WithoutEndpoints(b *testing.B) { benchBatchClaim(b, 1000, false) }

func benchBatchClaim(b *testing.B, size int, endpoints bool) {
	ctx := context.Background()
	// The store and the policy engine on a private redis-server; no runtime: admission
	// and claims make no runtime call.
	d := coredeps.Start(b)
	st := d.Store
	s := New(Config{}, st, nil, d.Policy, d.Log)
	s.SetAdminKey("bench-admin-key")
	tmpl := []byte(`{"image":{"uri":"sandgate/base:0.1.0"},"entrypoint":["sleep","infinity"],"resourceLimits":{"cpu":"50m","memory":"64Mi"}}`)
	if err := st.PutPool(ctx, &store.Pool{Tenant: DefaultTenant, Name: "bench", Template: tmpl, Version: 1}, true); err != nil {
		b.Fatal(err)
	}
	caller := Caller{Tenant: DefaultTenant, Admin: true, KeyID: "admin"}
	var bound, gwCPU, redisCPUUsed time.Duration
	stats := map[string]cmdStat{}
	// Each batch needs its warm members added first: a few batches suffice.
	n := min(b.N, 10000/size)
	b.StopTimer()
	for i := 0; i < n; i++ {
		now := time.Now().UTC()
		for j := 0; j < size; j++ {
			// Shaped like a warm pod's record (test/k8s's pool template).
			sb := &store.Sandbox{ID: fmt.Sprintf("m-%d-%05d", i, j), Tenant: DefaultTenant, Image: "sandgate/base:0.1.0", Entrypoint: []string{"sleep", "infinity"},
				Metadata: map[string]string{MetadataPool: "bench"}, ResourceLimits: map[string]string{"cpu": "50m", "memory": "64Mi"},
				State: StateRunning, LastTransitionAt: now, CreatedAt: now, Address: "10.244.3.41",
				AgentToken: strings.Repeat("a", 48), EgressToken: strings.Repeat("e", 48), AccessToken: strings.Repeat("c", 48), Pool: "bench", PoolVersion: 1}
			if ok, err := st.AddWarm(ctx, sb); err != nil || !ok {
				b.Fatalf("add warm member: %v, %v", ok, err)
			}
		}
		if err := st.Client().Do(ctx, "CONFIG", "RESETSTAT").Err(); err != nil {
			b.Fatal(err)
		}
		cpu0, rcpu0 := cpuNow(), redisCPU(b, st)
		t0 := time.Now()
		var at *EndpointQuery
		if endpoints {
			at = &EndpointQuery{RequestHost: "gateway.example:8080", Scheme: "http"}
		}
		v, err := s.Batches().Create(ctx, caller, BatchRequest{Count: size, PoolRef: "bench"}, at)
		if err != nil {
			b.Fatal(err)
		}
		if endpoints && v.Members[0].AgentEndpoint == nil {
			b.Fatal("no agent endpoint in the answer")
		}
		if _, err := json.Marshal(v); err != nil {
			b.Fatal(err)
		}
		bound += time.Since(t0)
		gwCPU += cpuNow() - cpu0
		redisCPUUsed += redisCPU(b, st) - rcpu0
		for name, c := range commandStats(b, st) {
			t := stats[name]
			t.calls += c.calls
			t.usec += c.usec
			stats[name] = t
		}
		if v.Summary.Running != size {
			b.Fatalf("batch %d: %+v, want %d running", i, v.Summary, size)
		}
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(bound.Microseconds())/1000/float64(n), "bound-ms")
	b.ReportMetric(float64(gwCPU.Microseconds())/float64(n), "gw-cpu-µs/op")
	b.ReportMetric(float64(redisCPUUsed.Microseconds())/float64(n), "redis-cpu-µs/op")
	b.ReportMetric(stats["evalsha"].usec/float64(n), "redis-script-µs/op")
	// Where Redis's time went, by command (calls and µs per batch; a script's own
	// commands count under their names as well as under evalsha).
	names := make([]string, 0, len(stats))
	for name := range stats {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return stats[names[i]].usec > stats[names[j]].usec })
	var line strings.Builder
	for _, name := range names {
		fmt.Fprintf(&line, " %s %.0f×/%.0fµs", name, stats[name].calls/float64(n), stats[name].usec/float64(n))
	}
	b.Logf("redis per batch:%s", line.String())
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type cmdStat struct{ calls, usec float64 }

// commandStats is what Redis counted per command since the last CONFIG RESETSTAT.
func commandStats(b *testing.B, st *store.Store) map[string]cmdStat {
	info, err := st.Client().Do(context.Background(), "INFO", "commandstats").Text()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]cmdStat{}
	for _, l := range strings.Split(info, "\r\n") {
		name, v, ok := strings.Cut(strings.TrimPrefix(l, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(l, "cmdstat_") {
			continue
		}
		var c cmdStat
		for _, f := range strings.Split(v, ",") {
			k, x, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseFloat(x, 64)
			switch k {
			case "calls":
				c.calls = n
			case "usec":
				c.usec = n
			}
		}
		out[name] = c
	}
	return out
}

// redisCPU is the CPU time the redis-server process has used (INFO cpu).
func redisCPU(b *testing.B, st *store.Store) time.Duration {
	info, err := st.Client().Do(context.Background(), "INFO", "cpu").Text()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, l := range strings.Split(info, "\r\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(l, f); ok {
				x, _ := strconv.ParseFloat(v, 64)
				total += x
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}
