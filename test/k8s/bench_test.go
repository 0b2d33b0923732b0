package k8s_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/test/testenv"
)

// BenchmarkK8sBatch: batches of 100 and 1000 on the Kubernetes runtime, from warm pools
// beside cold (pods created on demand). Reported per batch:
//
//   - bound-ms: until the API returned with every member bound (warm: the response;
//     cold: until GET /v1/batches shows every member Running);
//   - ping-ms: until every member answered /ping through the gateway;
//   - api-writes/claim: writes the API server counted during the claim call and the
//     members' first calls (warm; read after the pings: reading the API server's
//     metrics between the claim and the pings took tens of ms of ping-ms);
//   - gw-cpu-ms, redis-cpu-ms /claim and /pings: the CPU the gateway and redis-server
//     used during the claim call and during the pings after it (their threads'
//     schedstat), agents-cpu-ms/pings what the members' agents used; the Redis
//     commands of each phase and the gateway's connections to agents are logged;
//   - api-writes/refilled-pod: every write (all clients: gateway, scheduler, kwok) while
//     the claimed members were deleted and the pool refilled, per member (the breakdown
//     by verb and resource is logged);
//   - pod-creates/refilled-pod: of those, pod creates (the gateway's only write of a
//     refill; a pod delete per claimed member is its other).
//
// The figures (bench/results.json) are k8s_batch<N>_bound and k8s_batch<N>_ping beside
// the cold batch of the same size (the raw baseline: pods created on demand), and
// k8s_batch100_writes (API writes during the warm claim; target 0).
//
// The claim itself is one Redis script for all members, so bound grows with what it does
// per member; ping is CPU-bound on 2 cores. How the claim is shaped, where the time goes
// and the figures are in docs/PERFORMANCE.md ("Claiming a batch of 1000"); the claim's
// own costs are easier to see in process, with gateway's BenchmarkBatchClaim1000.
func BenchmarkK8sBatch(b *testing.B) {
	for _, size := range []int{100, 1000} {
		var warm, cold k8sBatchResult
		b.Run(fmt.Sprintf("warm-%d", size), func(b *testing.B) { warm = benchWarm(b, size) })
		b.Run(fmt.Sprintf("cold-%d", size), func(b *testing.B) { cold = benchCold(b, size) })
		if warm.n == 0 {
			continue
		}
		targets := map[int][2]string{100: {"<= 10", "<= 150"}, 1000: {"<= 50", "<= 1500"}}[size]
		testenv.RecordFigure(b, testenv.Figure{Name: fmt.Sprintf("k8s_batch%d_bound", size), Unit: "ms", P50: warm.boundMs(), P99: warm.boundMs(), BaselineP50: cold.boundMs(), Target: targets[0]})
		testenv.RecordFigure(b, testenv.Figure{Name: fmt.Sprintf("k8s_batch%d_ping", size), Unit: "ms", P50: warm.pingMs(), P99: warm.pingMs(), BaselineP50: cold.pingMs(), Target: targets[1]})
		if size == 100 {
			testenv.RecordFigure(b, testenv.Figure{Name: "k8s_batch100_writes", Unit: "count", P50: warm.writes / float64(warm.n), P99: warm.writes / float64(warm.n), Target: "== 0"})
		}
	}
}

// k8sBatchResult sums a benchmark's batches (n of them).
type k8sBatchResult struct {
	n             int
	bound, pinged time.Duration
	writes        float64
}

func (r k8sBatchResult) boundMs() float64 {
	if r.n == 0 {
		return 0
	}
	return float64(r.bound.Microseconds()) / 1000 / float64(r.n)
}

func (r k8sBatchResult) pingMs() float64 {
	if r.n == 0 {
		return 0
	}
	return float64(r.pinged.Microseconds()) / 1000 / float64(r.n)
}

func benchWarm(b *testing.B, size int) k8sBatchResult {
	ns := newNamespace(b)
	g := startGateway(b, ns)
	g.createPool("bench", size, nil)
	var bound, pinged time.Duration
	var claimW, refillW, createW float64
	var cpu struct{ gwClaim, redisClaim, gwPing, redisPing, agentsPing time.Duration }
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		g.waitAvailable("bench", size, 15*time.Minute)
		settle(b)
		agentPids := agents.agentPids(ns)
		b.Logf("warm-%d: the gateway holds %d connections to agents before the claim", size, agentConns(b, g.proc.Pid()))
		agents0 := cpuOf(agentPids)
		before := apiWrites(b)
		// Read last, right before the claim: reading a thousand agents' counters or the API
		// server's metrics is not the claim's work.
		calls0 := redisCalls(b)
		gw0, redis0 := processCPU(g.proc.Pid()), processCPU(redisPid)
		b.StartTimer()
		t0 := time.Now()
		r := g.do("POST", "/v1/batches", map[string]any{"count": size, "poolRef": "bench"})
		took := time.Since(t0)
		gw1, redis1 := processCPU(g.proc.Pid()), processCPU(redisPid)
		calls1 := redisCalls(b)
		if r.Status != 202 {
			b.Fatalf("batch: %d %s", r.Status, r.Body)
		}
		var bt batch
		if err := json.Unmarshal(r.Body, &bt); err != nil {
			b.Fatal(err)
		}
		for _, m := range bt.Members {
			if m.Source != "pool" || m.Status.State != "Running" {
				b.Fatalf("member %+v is not a bound pool member", m)
			}
		}
		pingAll(b, g, memberIDs(bt))
		pingTook := time.Since(t0)
		b.StopTimer()
		gw2, redis2 := processCPU(g.proc.Pid()), processCPU(redisPid)
		calls2 := redisCalls(b)
		agents2 := cpuOf(agentPids)
		b.Logf("warm-%d: Redis commands during the claim:%s; during the pings:%s", size, callsBetween(calls0, calls1), callsBetween(calls1, calls2))
		// Read after the pings (reading and parsing the API server's metrics took tens of
		// milliseconds of the ping window when it sat between the claim and the pings):
		// the writes of the claim and of the members' first calls.
		writes, _ := writesBetween(before, apiWrites(b))
		bound += took
		pinged += pingTook
		claimW += sum(writes)
		cpu.gwClaim += gw1 - gw0
		cpu.redisClaim += redis1 - redis0
		cpu.gwPing += gw2 - gw1
		cpu.redisPing += redis2 - redis1
		cpu.agentsPing += agents2 - agents0

		// The refill: delete the claimed members, let the pool fill back, count writes.
		before = apiWrites(b)
		if r := g.do("DELETE", "/v1/batches/"+bt.ID, nil); r.Status != 204 {
			b.Fatalf("delete batch: %d %s", r.Status, r.Body)
		}
		g.waitAvailable("bench", size, 15*time.Minute)
		settle(b)
		writes, _ = writesBetween(before, apiWrites(b))
		b.Logf("warm-%d: refill writes %v", size, writes)
		refillW += sum(writes)
		createW += writes["POST pods"]
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(bound.Microseconds())/1000/n, "bound-ms")
	b.ReportMetric(float64(pinged.Microseconds())/1000/n, "ping-ms")
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
	b.ReportMetric(ms(cpu.gwClaim), "gw-cpu-ms/claim")
	b.ReportMetric(ms(cpu.redisClaim), "redis-cpu-ms/claim")
	b.ReportMetric(ms(cpu.gwPing), "gw-cpu-ms/pings")
	b.ReportMetric(ms(cpu.redisPing), "redis-cpu-ms/pings")
	b.ReportMetric(ms(cpu.agentsPing), "agents-cpu-ms/pings")
	b.ReportMetric(claimW/n, "api-writes/claim")
	b.ReportMetric(refillW/n/float64(size), "api-writes/refilled-pod")
	b.ReportMetric(createW/n/float64(size), "pod-creates/refilled-pod")
	return k8sBatchResult{n: b.N, bound: bound, pinged: pinged, writes: claimW}
}

func benchCold(b *testing.B, size int) k8sBatchResult {
	ns := newNamespace(b)
	g := startGateway(b, ns)
	tmpl := map[string]any{"image": map[string]any{"uri": image}, "entrypoint": []string{"sleep", "infinity"},
		"resourceLimits": map[string]string{"cpu": "50m", "memory": "64Mi"}}
	var bound, pinged time.Duration
	var writesPerPod float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		settle(b)
		b.StartTimer()
		before := apiWrites(b)
		t0 := time.Now()
		r := g.do("POST", "/v1/batches", map[string]any{"count": size, "template": tmpl})
		if r.Status != 202 {
			b.Fatalf("batch: %d %s", r.Status, r.Body)
		}
		id := r.JSON(b)["id"].(string)
		var bt batch
		waitFor(b, 30*time.Minute, func() bool {
			resp := g.do("GET", "/v1/batches/"+id, nil)
			m := resp.JSON(b)
			if s := m["summary"].(map[string]any); s["failed"].(float64) > 0 {
				b.Fatalf("cold members failed: %s", resp.Body)
			} else if s["running"].(float64) != float64(size) {
				return false
			}
			return json.Unmarshal(resp.Body, &bt) == nil
		}, fmt.Sprintf("%d cold members running", size))
		took := time.Since(t0)
		pingAll(b, g, memberIDs(bt))
		pingTook := time.Since(t0)
		b.StopTimer()
		writes, _ := writesBetween(before, apiWrites(b))
		bound += took
		pinged += pingTook
		writesPerPod += sum(writes) / float64(size)
		if r := g.do("DELETE", "/v1/batches/"+id, nil); r.Status != 204 {
			b.Fatalf("delete batch: %d %s", r.Status, r.Body)
		}
		waitFor(b, 5*time.Minute, func() bool { return agents.runningIn(ns) == 0 }, "the batch's agents to stop")
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(bound.Microseconds())/1000/n, "bound-ms")
	b.ReportMetric(float64(pinged.Microseconds())/1000/n, "ping-ms")
	b.ReportMetric(writesPerPod/n, "api-writes/pod")
	return k8sBatchResult{n: b.N, bound: bound, pinged: pinged}
}

func memberIDs(bt batch) []string {
	ids := make([]string, len(bt.Members))
	for i, m := range bt.Members {
		ids[i] = m.ID
	}
	return ids
}

// pingAll gets every member's agent endpoint and calls /ping through the gateway, 64 at
// a time, as a client fanning out over a batch would.
func pingAll(b *testing.B, g *gateway, ids []string) {
	b.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	var mu sync.Mutex
	var failures []string
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer wg.Done()
			defer func() { <-sem }()
			base, headers, err := g.endpoint(id)
			if err == nil {
				err = g.ping(id, base, headers)
			}
			if err != nil {
				mu.Lock()
				failures = append(failures, err.Error())
				mu.Unlock()
			}
		}(id)
	}
	wg.Wait()
	if len(failures) > 0 {
		b.Fatalf("%d members did not answer /ping: %s", len(failures), strings.Join(failures[:min(len(failures), 5)], "; "))
	}
}
