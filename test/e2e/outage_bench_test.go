package e2e

import (
	"os/exec"
	"sort"
	"sync"
	"testing"
	"time"
)

// reportDelays reports p50 and max of delays in milliseconds.
func reportDelays(b *testing.B, delays []time.Duration) {
	if len(delays) == 0 {
		return
	}
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	b.ReportMetric(float64(delays[len(delays)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(delays[len(delays)-1].Microseconds())/1000, "max-ms")
}

// BenchmarkExpiryBurst20: 20 sandboxes expiring at the same moment; the delay from
// expiresAt to each one's sandbox.expired event (written once its containers are gone),
// p50 and max. The raw baseline asks the engine for the same removals directly, timed
// from their start.
func BenchmarkExpiryBurst20(b *testing.B) {
	const n = 20
	b.Run("sandgate", func(b *testing.B) {
		e := newEnv(b, startRedis(b))
		g := e.startGateway()
		var all []time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			ids := g.createSandboxes(n, map[string]any{"timeout": 600})
			expiresAt := time.Now().Add(5 * time.Second).Truncate(time.Second)
			for _, id := range ids {
				if r := g.do("POST", "/v1/sandboxes/"+id+"/renew-expiration", map[string]any{"expiresAt": expiresAt.UTC().Format(time.RFC3339)}); r.Status != 200 {
					b.Fatalf("renew: %d %s", r.Status, r.Body)
				}
			}
			want := map[string]bool{}
			for _, id := range ids {
				want[id] = true
			}
			b.StartTimer()
			got := map[string]time.Time{}
			waitFor(b, 2*time.Minute, func() bool {
				time.Sleep(200 * time.Millisecond)
				for id, at := range g.eventSandboxes("sandbox.expired") {
					if want[id] {
						got[id] = at
					}
				}
				return len(got) == n
			}, "the burst to expire")
			for _, at := range got {
				all = append(all, at.Sub(expiresAt))
			}
		}
		reportDelays(b, all)
	})
	// The same engine work without the gateway: 20 workloads on a bridge network, each
	// with a sidecar in its network namespace (as an enforced sandbox has), removed at
	// once, each pair's sidecar and workload side by side, as the Docker runtime does.
	b.Run("raw-docker-rm-20-pairs", func(b *testing.B) {
		network := "sg-bench-rm-" + randomHex(4)
		if out, err := exec.Command("docker", "network", "create", network).CombinedOutput(); err != nil {
			b.Fatalf("docker network create: %v: %s", err, out)
		}
		var names []string
		b.Cleanup(func() {
			if len(names) > 0 {
				_ = exec.Command("docker", append([]string{"rm", "-f"}, names...)...).Run()
			}
			_ = exec.Command("docker", "network", "rm", network).Run()
		})
		var all []time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			pairs := make([][2]string, n)
			for j := range pairs {
				w := "sg-bench-rm-" + randomHex(4)
				if out, err := exec.Command("docker", "run", "-d", "--name", w, "--network", network, baseImage, "tail", "-f", "/dev/null").CombinedOutput(); err != nil {
					b.Fatalf("docker run: %v: %s", err, out)
				}
				if out, err := exec.Command("docker", "run", "-d", "--name", w+"-side", "--network", "container:"+w, baseImage, "tail", "-f", "/dev/null").CombinedOutput(); err != nil {
					b.Fatalf("docker run sidecar: %v: %s", err, out)
				}
				pairs[j] = [2]string{w + "-side", w}
				names = append(names, w+"-side", w)
			}
			b.StartTimer()
			start := time.Now()
			var mu sync.Mutex
			var wg sync.WaitGroup
			for _, pair := range pairs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					side := make(chan struct{})
					go func() { _ = exec.Command("docker", "rm", "-f", pair[0]).Run(); close(side) }()
					_ = exec.Command("docker", "rm", "-f", pair[1]).Run()
					<-side
					mu.Lock()
					all = append(all, time.Since(start))
					mu.Unlock()
				}()
			}
			wg.Wait()
		}
		reportDelays(b, all)
	})
}

// BenchmarkRedisOutage15s: the share of proxied agent calls (GET /ping through the
// gateway with the sandbox's access header, one after another) served during 15 s in
// which Redis is down (SIGKILL, restarted after), beside the same 15 s with Redis up.
func BenchmarkRedisOutage15s(b *testing.B) {
	for _, c := range []struct {
		name string
		down bool
	}{{"sandgate-redis-down", true}, {"raw-redis-up", false}} {
		b.Run(c.name, func(b *testing.B) {
			redis := startDurableRedis(b)
			e := newEnv(b, &redisServer{Port: redis.Port, URL: redis.URL})
			g := e.startGateway()
			id := g.createSandbox(map[string]any{"timeout": 3600})
			p := g.proxyClient(id)
			served, calls := 0, 0
			for i := 0; i < b.N; i++ {
				if st, _, err := p.get(44772, "/ping"); err != nil || st != 200 {
					b.Fatalf("ping before: %d %v", st, err)
				}
				if c.down {
					redis.kill()
				}
				for end := time.Now().Add(15 * time.Second); time.Now().Before(end); {
					calls++
					if st, _, err := p.get(44772, "/ping"); err == nil && st == 200 {
						served++
					}
				}
				if c.down {
					redis.start()
				}
			}
			b.ReportMetric(100*float64(served)/float64(max(calls, 1)), "served-%")
			b.ReportMetric(float64(calls)/15/float64(b.N), "req/s")
			if served != calls {
				b.Logf("%d of %d calls served", served, calls)
			}
		})
	}
}
