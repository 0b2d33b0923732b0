package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandgate/sandgate/test/testenv"
)

// sandboxAddr reads a sandbox's address from the engine (the raw baseline's target).
func sandboxAddr(b testing.TB, id string) string { return sandboxIP(b, id) }

// newBenchClient is the load generator's client: keep-alive, up to 64 idle connections
// per host (more than the 8 goroutines of parallelGet ever hold).
func newBenchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
}

// parallelGet runs b.N GETs from 8 goroutines on a fresh client and reports req/s and
// p50/p99; it also returns them.
func parallelGet(b *testing.B, url string, hdr map[string]string) (float64, latencies) {
	client := newBenchClient()
	defer client.CloseIdleConnections()
	n, elapsed, lat := parallelGetWith(b, client, url, hdr)
	return float64(n) / elapsed.Seconds(), lat
}

// parallelGetWith runs b.N GETs with client from 8 goroutines, reports req/s and
// p50/p99, and returns the count, the time they took and their latencies.
func parallelGetWith(b *testing.B, client *http.Client, url string, hdr map[string]string) (int, time.Duration, latencies) {
	var mu sync.Mutex
	var lat latencies
	b.SetParallelism(4)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var mine latencies
		for pb.Next() {
			req, _ := http.NewRequest("GET", url, nil)
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			t0 := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	lat.report(b)
	return b.N, elapsed, lat
}

// processCPU reads the user and system CPU time pid has used (all its threads), at the
// kernel's 10 ms resolution.
func processCPU(b *testing.B, pid int) time.Duration {
	d, err := readProcessCPU(pid)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func readProcessCPU(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (in parentheses, which may hold spaces): utime and
	// stime are the 12th and 13th, in clock ticks (USER_HZ, 100 on Linux).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// cpuOf sums the CPU time the processes pids have used (processCPU); a process that has
// gone counts nothing.
func cpuOf(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		d, _ := readProcessCPU(pid)
		sum += d
	}
	return sum
}

// sandboxPids lists the host process ids of every process in sandbox id's containers
// (the workload's and, behind egress, its sidecar's).
func sandboxPids(b testing.TB, id string) []int {
	out, err := exec.Command("sh", "-c", "docker ps -q --filter label=sandgate.io/id="+id+" | xargs -r -n1 docker top").Output()
	if err != nil {
		b.Fatal(err)
	}
	var pids []int
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if pid, err := strconv.Atoi(f[1]); err == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		b.Fatalf("no processes found for sandbox %s", id)
	}
	return pids
}

// previewRounds is how many times BenchmarkPreviewSmallResponse alternates between the
// gateway and the direct baseline.
const previewRounds = 3

// BenchmarkPreviewSmallResponse: a small response (the preview server's /headers echo)
// through the gateway's proxy beside the same request straight to the container, with
// the same load generator: one keep-alive client per target, 8 goroutines, b.N GETs
// each. The two alternate (gateway, direct, gateway, … previewRounds times each) and
// preview_rps is all requests over all time of each: on this shared 2-core machine the
// load of other processes drifts within seconds, and measuring one target after the
// other put a drift on one side only (the same build gave 13% to 79% of direct).
//
// Where the gateway's time goes (SANDGATE_ADMIN's /debug/pprof/profile, 8 s during this
// benchmark; gw-cpu-µs/req from /proc). Neither the gateway nor the Python upstream is
// CPU-bound alone: the machine is, and with 2 cores req/s follows the SUM of CPU per
// request over every process on the hop (gateway, upstream, load generator, Redis), so
// only a cut of the gateway's CPU per request moves it. gateway/api's
// BenchmarkPreviewInProcess measures the same request without Docker (the upstream a
// process of its own, the load generator's goroutines labelled apart in -cpuprofile).
//
//   - earlier sessions: Caddy's reverse_proxy replaced by api.NewForward for plain
//     requests (229 → 177 µs: no placeholders, per-request loggers, upstream pool),
//     plugin events encoded only for tenants with on_event plugins, the access event
//     queued without a goroutine wake-up and encoded without reflection, no regexp in
//     ParsePort. GOGC=400 (GC was 4%) and GOMAXPROCS=1 (-10% CPU, but one core for
//     everything) were tried and not kept.
//   - then (main before this session's change): httputil and http.Transport were a
//     third of the gateway's CPU: the request cloned twice (proxyAs, then httputil),
//     its headers copied, and three goroutines per request (the handler, the
//     connection's writeLoop and readLoop) handing the request, the answer and the
//     body's end to each other over channels, each hand-off a wake-up on another
//     thread (readLoop + writeLoop: 28% of the profile, futex 4%).
//   - this session: GET and HEAD without a body (nearly all of a preview's traffic)
//     go through api's leanForward: the request head written straight from the
//     incoming request onto a keep-alive connection of its own pool and the answer
//     read with http.ReadResponse, in the handler's goroutine; no clone, no header
//     copy (the answer's header slices are moved, not copied), no hand-off. The upstream
//     gets the head httputil sends (TestLeanForwardSendsWhatHTTPUtilSends:
//     hop-by-hop headers dropped both ways, X-Forwarded-* replaced, TE: trailers,
//     trailers and 1xx passed on, streams flushed at every write), retries once on a
//     new connection when a reused one was closed by the upstream, breaks the
//     upstream request off when the client goes away. Everything else (bodies,
//     upgrades, agent calls) stays on httputil or Caddy's reverse_proxy. Also: the
//     path-mode routes matched without the mux (its wildcard matching allocated a
//     dozen times per request; TestProxyPathRouteAgreesWithMux), the access header's
//     MAC memoized on everything it is derived from (an HMAC and 10 allocations per
//     request), the platform key's hash kept, credential headers looked up by their
//     canonical names, the incoming request's headers stripped in place rather than
//     deep-cloned. Every check stays: MAC, key binding, Rego decision, cross-tenant,
//     headers stripped (the preview e2e tests pass).
//   - figures, A/B: main's binary and this branch's in alternated runs of this
//     benchmark (each run alternating gateway and direct 3 times), two series, load
//     15-35 (other sessions' builds and tests on the same 2 cores). Gateway CPU per
//     request 279 → 221 µs (9 slices each) and 318 → 237 µs (12 each): -21% and -25%;
//     preview_rps per run, median, 48% → 68% of direct (new runs 54-80%), p50 over
//     direct +2.1 → +1.4 ms (new runs +1.1 to +2.0). The upstream's (190-200 µs), the
//     load generator's and Redis's CPU per request did not move. Without Docker
//     (BenchmarkPreviewInProcess, 4 alternated runs, load 18-23): 119 → 81 µs (-32%).
//     Both target figures (>= 70%, <= +1 ms) were reached only in the quieter runs:
//     at this load every wake-up on the hop waits behind other processes.
//   - then (issue 15, second pass): the per-request work that could be done once or
//     not at all. The access check's cached allow comes without its decision id and
//     input hash (a uuid, json.Marshal of the input and a SHA-256 per request, 7% of
//     the gateway's CPU; the proxy only ever logged denials, which keep both:
//     policy.Engine.CheckAccess). The access event's data is typed (store.AccessData,
//     written byte for byte as the map was) and the batched writer builds the
//     batch's XADDs at once, bodies in one buffer (AppendEvents and its encoding were
//     7.6%, now under 1%; every event still written, TestAccessEventsWritten). The
//     proxied metric's series are looked up once, X-Request-ID is canonical, no query,
//     media type or idle-pause value is parsed where there is nothing to find, the
//     request's copy, URL and recorder are one allocation. Gateway allocations per
//     request without Docker 91.6 → 57.6 (BenchmarkPreviewInProcess).
//   - figures, A/B: main's binary and this branch's in 6 alternated pairs of runs of
//     this benchmark, load 26-65 (other sessions' builds and tests): gateway CPU per
//     request 111 → 100 µs (medians; every pair lower, by 7-29 µs); preview_rps per
//     run 47% → 55% of direct (medians; old 35-67%, new 42-63%); p50 over direct
//     +0.90 → +0.80 ms (new runs +0.70 to +0.87: the latency target is met; the req/s
//     target is not at this load, where every wake-up on the hop waits behind other
//     processes). Without Docker: 51.9 → 43.7 µs (5 pairs, load 21-77).
//   - left (profile of the new binary, load ~26): syscalls 28% (the write of the
//     request into the Docker bridge 14%, which carries the container's side of the
//     network stack; the reads, each answer's first one finding nothing yet; the
//     answer's write to the client 6%), net/http's server (request parse 6%, the
//     per-request background read goroutine, the header snapshot at WriteHeader) and
//     ReadResponse (13% with its reads), the scheduler's wake-ups and spinning 8%, GC
//     about 9%, Caddy's Server.ServeHTTP around our handler 11% (prepareRequest's
//     context values and vars 5%, a replacer, a deep clone of the request for its
//     error logger: none of it can be turned off from a handler). sandgate's own
//     checks (route, MAC, Rego, access event, metrics) are now about 5%, the
//     gateway's background loops with this harness's 500 ms sync interval 5%. What is
//     left is the floor of a net/http proxy behind Caddy: going lower means a server
//     loop of our own in front of Caddy's for the data plane.
//   - the upstream is a Python server: its /headers echo also parses and returns the
//     headers the gateway adds (X-Request-Id, X-Forwarded-For, -Host, -Proto), which
//     cost it about +40-60 µs per request: the price of documented forwarding.
//   - fairness: one keep-alive client per target, same settings; the gateway held 8-9
//     connections to the upstream, the direct client 9-11 (ss): the same Python
//     thread count either way.
func BenchmarkPreviewSmallResponse(b *testing.B) {
	e := newEnv(b, startRedis(b))
	g := e.startGateway()
	id := g.createSandbox(map[string]any{})
	defer g.do("DELETE", "/v1/sandboxes/"+id, nil)
	startPreviewServer(b, g, id)
	_, hdr, _ := g.endpoint(id, previewPort, "")
	// The machine's CPU per request, process by process: with 2 cores and every process
	// on them, req/s follows the sum (the load generator, the gateway, Redis, and the
	// sandbox's processes: the Python upstream and its agent).
	procs := []struct {
		name string
		pids []int
	}{
		{"gw", []int{g.proc.Pid()}},
		{"redis", []int{e.Redis.Pid()}},
		{"upstream", sandboxPids(b, id)},
		{"client", []int{os.Getpid()}},
	}
	type total struct {
		n   int
		d   time.Duration
		lat latencies
		cpu [4]time.Duration // per procs entry
	}
	targets := []struct {
		name, url string
		hdr       map[string]string
		client    *http.Client
		sum       *total
	}{
		{"sandgate", fmt.Sprintf("http://%s/sandboxes/%s/proxy/%d/headers", g.Addr, id, previewPort), hdr, newBenchClient(), &total{}},
		{"direct-container", fmt.Sprintf("http://%s:%d/headers", sandboxAddr(b, id), previewPort), nil, newBenchClient(), &total{}},
	}
	for round := 0; round < previewRounds; round++ {
		for _, t := range targets {
			var last total // b.Run calls the function with growing b.N: the last call counts
			b.Run(t.name, func(b *testing.B) {
				var cpu0 [4]time.Duration
				for i, p := range procs {
					cpu0[i] = cpuOf(p.pids)
				}
				n, d, lat := parallelGetWith(b, t.client, t.url, t.hdr)
				last = total{n: n, d: d, lat: lat}
				// CPU per request of each process: unlike req/s, hardly moved by the
				// other processes on the machine (the A/B yardstick for changes). The
				// gateway's is the one this benchmark is about.
				for i, p := range procs {
					last.cpu[i] = cpuOf(p.pids) - cpu0[i]
					b.ReportMetric(float64(last.cpu[i].Microseconds())/float64(n), p.name+"-cpu-µs/req")
				}
			})
			t.sum.n += last.n
			t.sum.d += last.d
			t.sum.lat = append(t.sum.lat, last.lat...)
			for i := range procs {
				t.sum.cpu[i] += last.cpu[i]
			}
		}
	}
	for _, t := range targets {
		t.client.CloseIdleConnections()
	}
	for _, t := range targets {
		line := fmt.Sprintf("%s: %d requests, %.0f req/s; CPU µs/request:", t.name, t.sum.n, float64(t.sum.n)/t.sum.d.Seconds())
		var all time.Duration
		for i, p := range procs {
			all += t.sum.cpu[i]
			line += fmt.Sprintf(" %s %.0f", p.name, float64(t.sum.cpu[i].Microseconds())/float64(t.sum.n))
		}
		b.Logf("%s, sum %.0f", line, float64(all.Microseconds())/float64(t.sum.n))
	}
	gw, direct := targets[0].sum, targets[1].sum
	rps, directRPS := float64(gw.n)/gw.d.Seconds(), float64(direct.n)/direct.d.Seconds()
	// req/s is one figure per run; its p99 is not defined (0).
	testenv.RecordFigure(b, testenv.Figure{Name: "preview_rps", Unit: "req/s", P50: rps, BaselineP50: directRPS, Target: ">= 0.7x"})
	p50, p99 := gw.lat.ms()
	d50, _ := direct.lat.ms()
	testenv.RecordFigure(b, testenv.Figure{Name: "preview_latency", Unit: "ms", P50: p50, P99: p99, BaselineP50: d50, Target: "<= +1"})
}

// BenchmarkPreviewWebSocketEcho: one message's round trip through the gateway vs direct.
func BenchmarkPreviewWebSocketEcho(b *testing.B) {
	e := newEnv(b, startRedis(b))
	g := e.startGateway()
	id := g.createSandbox(map[string]any{})
	defer g.do("DELETE", "/v1/sandboxes/"+id, nil)
	startPreviewServer(b, g, id)
	_, hdr, _ := g.endpoint(id, previewPort, "")
	for _, c := range []struct {
		name, url string
		hdr       http.Header
	}{
		{"sandgate", fmt.Sprintf("ws://%s/sandboxes/%s/proxy/%d/ws", g.Addr, id, previewPort), http.Header{"X-Sandgate-Access-Token": {hdr["X-Sandgate-Access-Token"]}}},
		{"direct-container", fmt.Sprintf("ws://%s:%d/ws", sandboxAddr(b, id), previewPort), nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			conn, _, err := websocket.Dial(ctx, c.url, &websocket.DialOptions{HTTPHeader: c.hdr})
			if err != nil {
				b.Fatal(err)
			}
			defer conn.CloseNow()
			var lat latencies
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := conn.Write(ctx, websocket.MessageText, []byte("ping")); err != nil {
					b.Fatal(err)
				}
				if _, _, err := conn.Read(ctx); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			lat.report(b)
		})
	}
}

// memberAgent is a direct client for a sandbox's agent (its address and token from the
// engine), the raw baseline of a command through the gateway.
func memberAgent(b testing.TB, id string) *agent {
	a := directAgent(b, id)
	a.base = fmt.Sprintf("http://%s:44772", sandboxAddr(b, id))
	return a
}

// BenchmarkPoolClaim: claim from a warm pool → first command (`true`) completed, the way
// an SDK does it (create, endpoint, command), beside the raw part: the same command
// straight to a member's agent. claim-ms is the claim's response alone. A claim is one
// Redis script (no agent call: liveness comes from the runtime's event stream, late
// binding runs off the response), so what is left is three gateway round trips; the
// first command waits only for a late binding the claim asked for. raw-cold-create is a
// cold create of the same template → first command, for comparison.
//
// Where the time goes: the claim's response is 1.5-2.5 ms (one script); the endpoint
// call then routes from memory (the claim put the record in the route cache); the
// command goes out on the keep-alive connection the pool manager opened to the member
// before it was warm (ConnWarmer), so the first command pays no connect, and the
// agent's `bash -c true` (the direct-agent baseline, 2.5-3.5 ms) is most of the rest.
// Tails come from the loaded machine: p99 follows the direct baseline's p99. Same
// machine, runs alternated: old 13.7/58 and 10.9/31 ms, new 8.5/46 and 9.7/33 ms (p50/p99).
func BenchmarkPoolClaim(b *testing.B) {
	e := newEnv(b, startRedis(b), "SANDGATE_POOL_CONCURRENCY=6")
	g := e.startGateway()
	g.createPool("bench", 10, 20, 0, 40, nil)
	g.waitAvailable("bench", 20, 5*time.Minute)
	var claimLat, directLat latencies
	var direct *agent
	b.Run("sandgate-claim", func(b *testing.B) {
		var lat, claimOnly latencies
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			waitFor(b, 2*time.Minute, func() bool { _, _, a := g.poolStatus("bench"); return a >= 1 }, "a warm sandbox")
			b.StartTimer()
			t0 := time.Now()
			id := g.createSandbox(map[string]any{"extensions": map[string]string{"poolRef": "bench"}})
			claimOnly = append(claimOnly, time.Since(t0))
			if evs := g.agent(id).run("true"); lastEvent(evs).Type != "execution_complete" {
				b.Fatalf("true: %+v", evs)
			}
			lat = append(lat, time.Since(t0))
			b.StopTimer()
			g.do("DELETE", "/v1/sandboxes/"+id, nil)
			b.StartTimer()
		}
		lat.report(b)
		p50, _ := testenv.Quantiles(claimOnly, time.Millisecond)
		b.ReportMetric(p50, "claim-ms")
		claimLat = lat
	})
	b.Run("direct-agent", func(b *testing.B) {
		if direct == nil {
			id := g.createSandbox(map[string]any{"extensions": map[string]string{"poolRef": "bench"}})
			direct = memberAgent(b, id)
		}
		var lat latencies
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if evs := direct.run("true"); lastEvent(evs).Type != "execution_complete" {
				b.Fatalf("true: %+v", evs)
			}
			lat = append(lat, time.Since(t0))
		}
		lat.report(b)
		directLat = lat
	})
	p50, p99 := testenv.Quantiles(claimLat, time.Millisecond)
	base, _ := testenv.Quantiles(directLat, time.Millisecond)
	testenv.RecordFigure(b, testenv.Figure{Name: "claim_first_command", Unit: "ms", P50: p50, P99: p99, BaselineP50: base, Target: "p50 <= 15, p99 <= 50"})
	b.Run("raw-cold-create", func(b *testing.B) {
		var lat latencies
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			id := g.createSandbox(map[string]any{})
			if evs := g.agent(id).run("true"); lastEvent(evs).Type != "execution_complete" {
				b.Fatalf("true: %+v", evs)
			}
			lat = append(lat, time.Since(t0))
			b.StopTimer()
			g.do("DELETE", "/v1/sandboxes/"+id, nil)
			b.StartTimer()
		}
		lat.report(b)
	})
}

// BenchmarkBatch100: a batch of 100 from a warm pool: bound (the response, every member
// Running in it: one claim script) and answered (until every member answered `true`
// through the gateway, 100 clients at once). Baselines from the same run: for bound, the
// same batch from a template, cold, until every member runs (raw-cold); for answered,
// the same 100 commands straight to the members' agents (direct-agent).
//
// Where the time goes (profiled with SANDGATE_ADMIN's /debug/pprof/profile and /trace
// over the answered phase, 2-core machine): the gateway is not CPU-bound (about 0.2 s of
// CPU in the 2 s around a batch); its request goroutines wait in reverse_proxy for the
// agents, and the agents wait for the CPU: 100 `bash -c true` starts at once, beside the
// pool's refill. The direct-agent baseline (the same 100 commands straight to the agents)
// is 230-550 ms here depending on the load, so most of answered is the commands
// themselves. What was removed from the gateway's share:
//   - the client: with the default transport (2 idle connections per host) each of the
//     100 endpoint calls and then each command dialled the gateway anew; on the loaded
//     machine the endpoint round alone ended 350-630 ms after the claim, 75-150 ms with
//     a pool (the `pooled` transport, as an SDK keeps one);
//   - the refill: the claim kicked the pool manager, whose engine listing and eight
//     container starts at once took the CPU from the first commands (one run: 514 ms
//     with the refill held, 800-930 ms without); it now waits refillSettle (1 s) after
//     a claim;
//   - per member: the claim puts the records in the route cache, so the endpoint and the
//     first command read nothing from Redis, and each warm member's keep-alive
//     connection from the proxy is open before it can be claimed (no connect, whose
//     syscall took 3 ms each under load in the trace).
//
// A claim that asks for no env, entrypoint or policy of its own (this one) has no late
// binding at all: nothing waits in BeforeAgentCall. Left: the 100 process starts, the extra hop's reads and writes, and the machine's
// other load. Figures: before 362 ms quiet, 570-1175 ms at load 20-38; after 734 ms at
// load 34, 302 and 243 ms at load 15-23, where the old gateway with the pooled client
// gave 352 and 275 ms (runs alternated).
//
// The gap to direct-agent (374 against 277 ms in the last make bench): answered is the
// claim (bound, ~11 ms), then per member two gateway round trips, the endpoint and the
// command, against one for direct-agent; last-endpoint-ms says when the last member had
// its endpoint, gw-cpu-ms/batch the gateway's CPU from the claim to the last answer.
// Counted per first command (gateway/api BenchmarkBatch100FirstCommands: the same flow
// on in-process sandboxes, first round beside a second, -cpuprofile over 3 rounds, old
// and new test binaries alternated; figures are profile seconds over those 3 rounds):
//   - the two access decisions per member (the endpoint's, sandbox.proxy with the API
//     key, and the command's, a sandbox token) missed the decision cache, whose key held
//     the sandbox id and the path: ~0.2 ms of CPU each, 40 ms a batch. Under the
//     built-in policy alone the key now keeps only whether the ids are set and equal
//     (policy/cache.go; TestDefaultAccessReadsIDsOnlyByRelation proves the built-in
//     Rego reads them no other way, any operator module keys by the ids again), so the
//     batch makes two evaluations, not two hundred: cpu-ms/first 200-246 -> 168-201
//     (3 alternated runs, load 22-34);
//   - no late binding, no Redis read (the claim put the records in the route cache,
//     fresh for routeTTL = 1 s: a round past that on a loaded machine reads each record
//     again, 0.13 s of the profile's 3 rounds), the agent's keep-alive connection open;
//   - each first access's activity was a goroutine and a ZADD round trip (100 of them,
//     0.03 s in the profile); the access log writer now sends them in one ZADD per flush;
//   - no refill: poolMax is the batch's 100 and claimed members count as allocated, so
//     while the batch lives the pool has no room and the manager starts nothing (the
//     refill above is gone from this window; refillSettle matters for pools with room,
//     where a refill 1 s after the claim is still prompt; not deferred further). What
//     the manager did do every 250 ms while the pool was full was read its 100 warm
//     records one by one for outdated members (0.17-0.20 s in each profile, more than
//     all access decisions); it now reads them in one pipelined call (0.05-0.06 s).
//   - the reconciler's pass (every SyncInterval, 500 ms here: a full engine listing and
//     every record) overlapped most answered windows; it is now held refillSettle after
//     a claim, as the pool manager is (settleAfterClaim).
//
// The agents' side (sandbox-agent BenchmarkBatchFirstCommand: 100 agents, each PID 1 of
// its own pid namespace in one cpuacct group, idle, then one `true` each at once over
// fresh connections; perf record -a over the rounds): an agent's first command cost
// 3.1 ms of CPU against 1.1 ms for starting `true` alone (raw-spawn), and 100 of them
// at once on 2 cores are CPU-bound. Of the agent's own share: the HTTP request and the
// spawn 40% (fork/exec 9%, the first write 5%, the pipes 2.5%), the runtime's monitor
// (sysmon, polling every 20 µs while a goroutine blocks in waitid) 16%, the scheduler's
// wakeups 13%, and the orphan reaper 12%: every SIGCHLD scanned /proc, on the answer's
// way. Now the reaper asks waitid for a zombie instead (initproc.ReapExited) and a
// command's wait parks on a pidfd in the poller before cmd.Wait (procs.Wait): 3.07 ->
// 2.58 ms per command (medians of 4 alternated runs at load ~30), the rest being the
// process start, net/http, and the runtime's per-process wakeups (GOMAXPROCS=1 saved
// another ~5%, within the noise: not taken).
//
// Figures (this benchmark, old and new builds one after the other, load 14-30):
// answered 574 -> 431 ms, direct-agent 239 -> 186 ms (the agents are the new ones
// there too), gw-cpu-ms/batch 190 -> 90. Left of the gap to direct-agent: the second
// round trip per member (endpoint, then command) and the claim.
//
// Session 9: the batch's answer now carries each Running member's agent endpoint
// (BatchMember.AgentEndpoint, minted for the reader's key after the endpoint route's own
// Rego decision), so sandgate-warm reaches the members as an SDK does (MemberAgent),
// without the 100 endpoint calls; sandgate-warm-endpoint-calls keeps the old flow
// (figure batch100_answered_endpoint_calls). Against an older gateway, whose answer has
// no endpoints, sandgate-warm falls back to the calls (endpoints-from-answer/batch 0).
// What it costs the claim (gateway BenchmarkBatchClaim100 against …WithoutEndpoints,
// same binary, 5 alternated runs of 30 batches, load 25): gateway CPU 1.29-1.93 ->
// 2.28-2.46 ms per batch of 100, about 0.75 ms more (7-8 µs a member: the decision-cache
// hit, its audit event, the key-bound HMAC), bound 2.7 -> 3.5-4.2 ms. What it saves: last-endpoint-ms (when the last member could send
// its command) 57-331 -> 19-58 ms. Old binary (old flow) and new alternated, 4 pairs, at
// load 22-67 (five helpers' builds and benchmarks; the direct-agent baseline of the same
// runs swung 157-1919 ms): answered 354 / 1033 / 667 / 265 -> 444 / 970 / 360 / 1088 ms,
// bound 26 / 15 / 80 / 10 -> 23 / 9 / 6.5 / 19 ms, gw-cpu-ms/batch 100 / 70 / 90 / 50 ->
// 80 / 110 / 70 / 120; at that load the commands themselves (the agents' 100 process
// starts, direct-agent) decide answered, and these runs cannot tell the flows apart. In
// process (gateway/api BenchmarkBatch100FirstCommands, old and new test binaries
// alternated, 4-8 rounds each, load 20-35): cpu-ms/first 89-108 (old, endpoint calls)
// -> 93-104 (from-answer), first-ms 170-287 -> 151-222; the gateway's own share of a
// first command is about 0.2 ms of CPU, the agents' HTTP side and process starts the rest.
//
// Also: the proxy's keep-alive connections to agents close after 2 minutes idle (Caddy's
// reverse_proxy default, now SANDGATE_AGENT_IDLE_TIMEOUT), so a warm member that had
// waited longer paid a connect on its first command after a claim; the pool manager now
// uses each warm member's connection again after half that (refreshWarmConns;
// TestPoolWarmConnOutlivesIdleTimeout).
func BenchmarkBatch100(b *testing.B) {
	e := newEnv(b, startRedis(b), "SANDGATE_POOL_CONCURRENCY=8")
	g := e.startGateway()
	g.client.Timeout = 15 * time.Minute
	// One connection pool for the fan-outs, as an SDK client keeps: with the default
	// transport's two idle connections per host, each of the 100 endpoint calls and then
	// each of the 100 commands dials the gateway anew (on the loaded 2-core machine that
	// alone put 100-500 ms on answered).
	pooled := &http.Transport{MaxIdleConnsPerHost: 128, IdleConnTimeout: time.Minute}
	defer pooled.CloseIdleConnections()
	g.client.Transport = pooled
	tmpl := map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}}
	g.createPool("hundred", 100, 100, 0, 100, nil)
	type member struct {
		ID            string
		Status        struct{ State string }
		AgentEndpoint *struct {
			Endpoint string
			Headers  map[string]string
		}
	}
	fanOut := func(b *testing.B, members []member, run func(m member) []event) {
		var wg sync.WaitGroup
		for _, m := range members {
			wg.Add(1)
			go func(m member) {
				defer wg.Done()
				if evs := run(m); lastEvent(evs).Type != "execution_complete" {
					b.Errorf("member %s: %+v", m.ID, evs)
				}
			}(m)
		}
		wg.Wait()
	}
	var bound, answered, answeredCalls, coldBound, direct latencies
	// warm runs the batch from the full pool and 100 clients at once, each as an SDK
	// user reaches its member: with the agent endpoint the batch's answer carries
	// (skipping the endpoint call; an old gateway gives none, and the client then calls
	// as before), or, with endpointCalls, always through GET …/endpoints/44772 first.
	warm := func(b *testing.B, endpointCalls bool, answered *latencies) {
		var endpoints latencies
		var gwCPU time.Duration // the gateway's CPU from the claim to the last answer
		var fromAnswer int      // members reached with the endpoint of the batch's answer
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			g.waitAvailable("hundred", 100, 10*time.Minute)
			b.StartTimer()
			cpu0 := processCPU(b, g.proc.Pid())
			t0 := time.Now()
			r := g.do("POST", "/v1/batches", map[string]any{"count": 100, "poolRef": "hundred"})
			tBound := time.Since(t0)
			if r.Status != 202 {
				b.Fatalf("batch: %d %s", r.Status, r.Body)
			}
			var bt struct {
				ID      string
				Members []member
			}
			json.Unmarshal(r.Body, &bt)
			for _, m := range bt.Members {
				if m.Status.State != "Running" {
					b.Fatalf("member %s is %s in the response, want Running", m.ID, m.Status.State)
				}
			}
			var epMu sync.Mutex
			var lastEndpoint time.Duration
			fanOut(b, bt.Members, func(m member) []event {
				var a *agent
				if ep := m.AgentEndpoint; ep != nil && !endpointCalls {
					a = &agent{t: b, base: "http://" + ep.Endpoint, headers: ep.Headers, client: &http.Client{Timeout: 5 * time.Minute}}
					epMu.Lock()
					fromAnswer++
					epMu.Unlock()
				} else {
					a = g.agent(m.ID)
				}
				epMu.Lock()
				lastEndpoint = max(lastEndpoint, time.Since(t0))
				epMu.Unlock()
				a.client.Transport = pooled
				return a.run("true")
			})
			*answered = append(*answered, time.Since(t0))
			if !endpointCalls {
				bound = append(bound, tBound)
			}
			endpoints = append(endpoints, lastEndpoint)
			gwCPU += processCPU(b, g.proc.Pid()) - cpu0
			b.StopTimer()
			if !endpointCalls {
				agents := map[string]*agent{}
				for _, m := range bt.Members {
					agents[m.ID] = memberAgent(b, m.ID)
					agents[m.ID].client.Transport = pooled
				}
				t1 := time.Now()
				fanOut(b, bt.Members, func(m member) []event { return agents[m.ID].run("true") })
				direct = append(direct, time.Since(t1))
			}
			g.do("DELETE", "/v1/batches/"+bt.ID, nil)
			b.StartTimer()
		}
		answered.report(b)
		if !endpointCalls {
			p50, _ := testenv.Quantiles(bound, time.Millisecond)
			b.ReportMetric(p50, "bound-ms")
			b.ReportMetric(float64(fromAnswer)/float64(b.N), "endpoints-from-answer/batch")
			p50, _ = testenv.Quantiles(direct, time.Millisecond)
			b.ReportMetric(p50, "direct-agent-ms")
		}
		// When the last member had its endpoint: what of answered is not the commands.
		p50, _ := testenv.Quantiles(endpoints, time.Millisecond)
		b.ReportMetric(p50, "last-endpoint-ms")
		b.ReportMetric(float64(gwCPU.Milliseconds())/float64(b.N), "gw-cpu-ms/batch")
	}
	b.Run("sandgate-warm", func(b *testing.B) { warm(b, false, &answered) })
	b.Run("sandgate-warm-endpoint-calls", func(b *testing.B) { warm(b, true, &answeredCalls) })
	b.Run("raw-cold", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			r := g.do("POST", "/v1/batches", map[string]any{"count": 100, "template": tmpl})
			if r.Status != 202 {
				b.Fatalf("batch: %d %s", r.Status, r.Body)
			}
			bid := r.JSON(b)["id"].(string)
			waitFor(b, 10*time.Minute, func() bool {
				s := g.do("GET", "/v1/batches/"+bid, nil).JSON(b)["summary"].(map[string]any)
				return s["running"].(float64) == 100
			}, "100 members running")
			coldBound = append(coldBound, time.Since(t0))
			b.StopTimer()
			g.do("DELETE", "/v1/batches/"+bid, nil)
			b.StartTimer()
		}
		coldBound.report(b)
	})
	bp50, bp99 := testenv.Quantiles(bound, time.Millisecond)
	cold, _ := testenv.Quantiles(coldBound, time.Millisecond)
	testenv.RecordFigure(b, testenv.Figure{Name: "batch100_bound", Unit: "ms", P50: bp50, P99: bp99, BaselineP50: cold, Target: "<= 20"})
	ap50, ap99 := testenv.Quantiles(answered, time.Millisecond)
	dp50, _ := testenv.Quantiles(direct, time.Millisecond)
	testenv.RecordFigure(b, testenv.Figure{Name: "batch100_answered", Unit: "ms", P50: ap50, P99: ap99, BaselineP50: dp50, Target: "<= 300"})
	// The same with an endpoint call per member first (a client that ignores the
	// batch's agent endpoints, or an SDK that always asks).
	cp50, cp99 := testenv.Quantiles(answeredCalls, time.Millisecond)
	testenv.RecordFigure(b, testenv.Figure{Name: "batch100_answered_endpoint_calls", Unit: "ms", P50: cp50, P99: cp99, BaselineP50: dp50, Target: "<= 300"})
}

// BenchmarkAPIWithPolicy: API requests/s (GET /v1/sandboxes) with the default policy
// beside an operator policy that allows everything.
func BenchmarkAPIWithPolicy(b *testing.B) {
	allowAll := b.TempDir()
	os.WriteFile(filepath.Join(allowAll, "access.rego"), []byte("package sandgate.access\n\ndecision := {\"allow\": true, \"code\": \"OK\", \"message\": \"\"}\n"), 0o644)
	for _, c := range []struct {
		name  string
		extra []string
	}{
		{"sandgate-default-policy", nil},
		{"raw-allow-all-policy", []string{"SANDGATE_POLICY_DIR=" + allowAll}},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := newEnv(b, startRedis(b), c.extra...)
			g := e.startGateway()
			parallelGet(b, "http://"+g.Addr+"/v1/sandboxes", map[string]string{"OPEN-SANDBOX-API-KEY": g.APIKey})
		})
	}
}
