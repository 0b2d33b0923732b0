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
// With 2 cores, req/s follows the sum of CPU per request over every process on the hop
// (gateway, upstream, load generator, Redis), so gw-cpu-µs/req (from /proc) is the
// figure the gateway moves; gateway/api's BenchmarkPreviewInProcess measures the same
// request without Docker. The upstream's /headers echo also returns the headers the
// gateway adds, which costs it a little per request: the price of documented
// forwarding. Where the gateway's time goes, and the figures, are in
// docs/PERFORMANCE.md ("Small preview responses").
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
// The endpoint call routes from memory (the claim put the record in the route cache) and
// the command goes out on the keep-alive connection the pool manager opened to the
// member before it was warm (ConnWarmer), so the first command pays no connect. Where
// the time goes, and the figures, are in docs/PERFORMANCE.md ("Claim from a warm pool").
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
// sandgate-warm reaches the members as an SDK does, through the agent endpoints the
// batch's answer carries (MemberAgent); sandgate-warm-endpoint-calls asks the endpoint
// route for each member instead (figure batch100_answered_endpoint_calls), and against a
// gateway whose answer has no endpoints sandgate-warm falls back to those calls
// (endpoints-from-answer/batch 0). last-endpoint-ms says when the last member had its
// endpoint, gw-cpu-ms/batch the gateway's CPU from the claim to the last answer. The
// client keeps its connections (the pooled transport), as an SDK does. Where the time
// goes, and the figures, are in docs/PERFORMANCE.md ("A batch of 100 from a warm pool").
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
