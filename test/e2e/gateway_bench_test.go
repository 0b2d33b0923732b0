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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandgate/sandgate/test/testenv"
)

// sandboxAddr reads a sandbox's address from the engine (the raw baseline's target).
func sandboxAddr(b testing.TB, id string) string {
	out, err := exec.Command("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", "sandgate-"+id).Output()
	if err != nil {
		b.Fatal(err)
	}
	if ip := strings.Fields(string(out)); len(ip) > 0 {
		return ip[0]
	}
	// Behind the egress sidecar the workload shares the sidecar's network.
	out, _ = exec.Command("sh", "-c", "docker ps -q --filter label=sandgate.io/id="+id+" | xargs docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}'").Output()
	for _, f := range strings.Fields(string(out)) {
		return f
	}
	b.Fatalf("no address for %s", id)
	return ""
}

// parallelGet runs b.N GETs from 8 goroutines and reports req/s and p50/p99; it also
// returns them.
func parallelGet(b *testing.B, url string, hdr map[string]string) (float64, latencies) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
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
	rps := float64(b.N) / time.Since(start).Seconds()
	b.ReportMetric(rps, "req/s")
	lat.report(b)
	return rps, lat
}

// BenchmarkPreviewSmallResponse: a small response through the gateway's proxy beside the
// same request straight to the container (same client, same run).
func BenchmarkPreviewSmallResponse(b *testing.B) {
	e := newEnv(b, startRedis(b))
	g := e.startGateway()
	id := g.createSandbox(map[string]any{})
	defer g.do("DELETE", "/v1/sandboxes/"+id, nil)
	startPreviewServer(b, g, id)
	_, hdr, _ := g.endpoint(id, previewPort, "")
	var rps, directRPS float64
	var lat, directLat latencies
	b.Run("sandgate", func(b *testing.B) {
		rps, lat = parallelGet(b, fmt.Sprintf("http://%s/sandboxes/%s/proxy/%d/headers", g.Addr, id, previewPort), hdr)
	})
	b.Run("direct-container", func(b *testing.B) {
		directRPS, directLat = parallelGet(b, fmt.Sprintf("http://%s:%d/headers", sandboxAddr(b, id), previewPort), nil)
	})
	// req/s is one figure per run; its p99 is not defined (0).
	testenv.RecordFigure(b, testenv.Figure{Name: "preview_rps", Unit: "req/s", P50: rps, BaselineP50: directRPS, Target: ">= 0.7x"})
	p50, p99 := lat.ms()
	d50, _ := directLat.ms()
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
	testenv.RecordFigure(b, testenv.Figure{Name: "claim_first_command", Unit: "ms", P50: p50, P99: p99, BaselineP50: base, Target: "<= 15 p50, <= 50 p99"})
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
		ID     string
		Status struct{ State string }
	}
	fanOut := func(b *testing.B, ids []string, run func(id string) []event) {
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Add(1)
			go func(id string) {
				defer wg.Done()
				if evs := run(id); lastEvent(evs).Type != "execution_complete" {
					b.Errorf("member %s: %+v", id, evs)
				}
			}(id)
		}
		wg.Wait()
	}
	var bound, answered, coldBound, direct latencies
	b.Run("sandgate-warm", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			g.waitAvailable("hundred", 100, 10*time.Minute)
			b.StartTimer()
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
			ids := make([]string, 0, len(bt.Members))
			for _, m := range bt.Members {
				if m.Status.State != "Running" {
					b.Fatalf("member %s is %s in the response, want Running", m.ID, m.Status.State)
				}
				ids = append(ids, m.ID)
			}
			fanOut(b, ids, func(id string) []event {
				a := g.agent(id)
				a.client.Transport = pooled
				return a.run("true")
			})
			answered = append(answered, time.Since(t0))
			bound = append(bound, tBound)
			b.StopTimer()
			agents := map[string]*agent{}
			for _, id := range ids {
				agents[id] = memberAgent(b, id)
				agents[id].client.Transport = pooled
			}
			t1 := time.Now()
			fanOut(b, ids, func(id string) []event { return agents[id].run("true") })
			direct = append(direct, time.Since(t1))
			g.do("DELETE", "/v1/batches/"+bt.ID, nil)
			b.StartTimer()
		}
		answered.report(b)
		p50, _ := testenv.Quantiles(bound, time.Millisecond)
		b.ReportMetric(p50, "bound-ms")
	})
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
