package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/test/testenv"
)

// scrape reads a Prometheus text exposition from url with key ("" sends none).
func scrape(t testing.TB, url, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// seriesValue finds the sample of name whose labels include every pair of labels
// ("k=v") and returns its value; ok is false when there is none.
func seriesValue(text, name string, labels ...string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		head, val, _ := strings.Cut(line, " ")
		if i := strings.LastIndex(line, "} "); i >= 0 {
			head, val = line[:i+1], line[i+2:]
		}
		all := true
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			if !strings.Contains(head, k+`="`+v+`"`) {
				all = false
				break
			}
		}
		if !all {
			continue
		}
		val, _, _ = strings.Cut(val, " ")
		f, err := strconv.ParseFloat(val, 64)
		if err == nil {
			return f, true
		}
	}
	return 0, false
}

// TestMetricsScrape drives a create, a claim, a plugin call, an agent call and a denied
// API call, then finds each series with its labels in one scrape that also holds
// Caddy's own series; /metrics answers the platform admin key (and the separate
// listener) only, never a tenant's key.
func TestMetricsScrape(t *testing.T) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	e := newEnv(t, nil)
	g := e.startGateway("SANDGATE_METRICS_LISTEN="+listen, "SANDGATE_SANDBOX_METRICS_INTERVAL=1s")
	g.mustPutPlugin("audit", examplePlugin(t, "audit-jsonl"), `{"hooks":["on_event"]}`)

	id := g.createSandbox(map[string]any{"networkPolicy": map[string]any{"defaultAction": "deny", "egress": []any{}}})
	if out := stdoutOf(g.agent(id).run("echo hi")); out != "hi" {
		t.Fatalf("command output %q", out)
	}
	// A denied egress: the enforcer's DNS proxy answers NXDOMAIN (the name never leaves
	// the sandbox's network namespace).
	if out := stdoutOf(g.agent(id).run("getent hosts denied.test || echo none")); out != "none" {
		t.Fatalf("getent hosts denied.test = %q, want none", out)
	}
	g.createPool("warm", 1, 1, 0, 2, nil)
	g.waitAvailable("warm", 1, 90*time.Second)
	if r := g.do("POST", "/v1/sandboxes", map[string]any{"extensions": map[string]string{"poolRef": "warm"}}); r.Status != 202 {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	tenant := g.newPluginTenant("obs-other")
	viewer := g.withTenantKey(tenant, "viewer")
	expectError(t, viewer.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"true"}}), 403, "POLICY::DENIED")

	apiURL := "http://" + g.Addr + "/metrics"
	t.Run("a tenant key cannot read /metrics", func(t *testing.T) {
		admin := g.withTenantKey(tenant, "tenant-admin")
		for _, key := range []string{viewer.APIKey, admin.APIKey} {
			if st, body := scrape(t, apiURL, key); st != 403 || !strings.Contains(body, `"FORBIDDEN"`) {
				t.Fatalf("tenant key: %d %s", st, body)
			}
		}
		if st, body := scrape(t, apiURL, ""); st != 401 {
			t.Fatalf("no key: %d %s", st, body)
		}
		expectError(t, admin.do("GET", "/v1/fleet/metrics", nil), 403, "FORBIDDEN")
		if r := g.do("GET", "/v1/fleet/metrics", nil); r.Status != 200 {
			t.Fatalf("fleet history with the admin key: %d %s", r.Status, r.Body)
		}
	})

	want := []struct {
		name   string
		labels []string
	}{
		{"sandgate_create_stage_seconds_count", []string{"stage=admission"}},
		{"sandgate_create_stage_seconds_count", []string{"stage=store"}},
		{"sandgate_create_stage_seconds_count", []string{"stage=runtime_create"}},
		{"sandgate_create_stage_seconds_count", []string{"stage=agent_ready"}},
		{"sandgate_claim_seconds_count", nil},
		{"sandgate_sandboxes", []string{"state=Running", "tenant=default"}},
		{"sandgate_pool_target", []string{"pool=default/warm"}},
		{"sandgate_policy_decision_seconds_count", []string{"kind=access", "decision=allow"}},
		{"sandgate_policy_decision_seconds_count", []string{"kind=access", "decision=deny"}},
		{"sandgate_policy_decision_seconds_count", []string{"kind=admission", "decision=allow"}},
		{"sandgate_policy_decision_seconds_count", []string{"kind=egress", "decision=allow"}},
		{"sandgate_proxied_requests_total", []string{"kind=agent", "class=2xx"}},
		{"sandgate_proxied_response_bytes_total", []string{"kind=agent"}},
		{"sandgate_plugin_calls_total", []string{"plugin=default/audit"}},
		{"sandgate_egress_denials_total", nil},
		// Caddy's own series, from the same registry.
		{"caddy_config_last_reload_successful", nil},
		{"go_goroutines", nil},
	}
	for _, src := range []struct{ name, url, key string }{
		{"admin key on the API address", apiURL, g.APIKey},
		{"SANDGATE_METRICS_LISTEN", "http://" + listen + "/metrics", ""},
	} {
		t.Run(src.name, func(t *testing.T) {
			var body string
			waitFor(t, 30*time.Second, func() bool {
				var st int
				st, body = scrape(t, src.url, src.key)
				if st != 200 {
					t.Fatalf("scrape: %d %s", st, body)
				}
				for _, w := range want {
					if v, ok := seriesValue(body, w.name, w.labels...); !ok || v <= 0 {
						return false
					}
				}
				return true
			}, "every series in the scrape")
			if v, _ := seriesValue(body, "sandgate_sandboxes", "state=Running", "tenant=default"); v != 2 {
				t.Errorf("Running sandboxes of default = %v, want 2 (the cold one and the claimed one)", v)
			}
			if _, ok := seriesValue(body, "sandgate_reaper_lag_seconds"); !ok {
				t.Errorf("no sandgate_reaper_lag_seconds")
			}
			if strings.Contains(body, id) {
				t.Errorf("the scrape names sandbox %s", id)
			}
		})
	}
	t.Run("the tenant label can be turned off", func(t *testing.T) {
		g2 := newEnv(t, nil).startGateway("SANDGATE_METRICS_TENANT_LABEL=off")
		g2.createSandbox(map[string]any{})
		_, body := scrape(t, "http://"+g2.Addr+"/metrics", g2.APIKey)
		if v, ok := seriesValue(body, "sandgate_sandboxes", "state=Running"); !ok || v != 1 {
			t.Fatalf("sandgate_sandboxes{state=Running} = %v %v, want 1\n%s", v, ok, body)
		}
		if strings.Contains(body, `sandgate_sandboxes{state="Running",tenant=`) {
			t.Fatalf("tenant label present with SANDGATE_METRICS_TENANT_LABEL=off")
		}
	})
}

// usageOf reads a sandbox's resource history.
func (g *gateway) usageOf(id string) (usage struct {
	Source  string
	Current *usagePoint
	History []usagePoint
}) {
	g.t.Helper()
	r := g.do("GET", "/v1/sandboxes/"+id+"/metrics", nil)
	if r.Status != 200 {
		g.t.Fatalf("metrics of %s: %d %s", id, r.Status, r.Body)
	}
	if err := json.Unmarshal(r.Body, &usage); err != nil {
		g.t.Fatal(err)
	}
	return usage
}

type usagePoint struct {
	Time             time.Time
	CPUCores         float64
	CPULimitCores    *float64
	CPUPercent       float64
	MemoryBytes      float64
	MemoryPeakBytes  float64
	MemoryLimitBytes float64
	Pids             *float64
	NetRxBytes       *float64
	DiskBytes        *float64
}

// TestSandboxMetrics: a busy loop limited to half a CPU shows CPU near its limit, a
// process holding 200 MiB shows memory near 200 MiB, the history grows at the sampling
// interval, the live stream sends points, and another tenant's key sees nothing.
func TestSandboxMetrics(t *testing.T) {
	e := newEnv(t, nil)
	g := e.startGateway("SANDGATE_SANDBOX_METRICS_INTERVAL=2s")
	// A quarter CPU: a limit the busy loop reaches even on a loaded machine.
	busy := g.createSandbox(map[string]any{"entrypoint": []string{"sh", "-c", "while :; do :; done"},
		"resourceLimits": map[string]string{"cpu": "250m", "memory": "256Mi"}})
	alloc := g.createSandbox(map[string]any{"entrypoint": []string{"python3", "-c", "import time\nb = b'x' * (200 << 20)\ntime.sleep(3600)"},
		"resourceLimits": map[string]string{"cpu": "1", "memory": "512Mi"}})

	t.Run("busy loop: CPU near its limit", func(t *testing.T) {
		var last usagePoint
		waitFor(t, 3*time.Minute, func() bool {
			u := g.usageOf(busy)
			if u.Current == nil {
				return false
			}
			last = *u.Current
			return len(u.History) >= 3 && last.CPUPercent >= 70
		}, "the busy sandbox's CPU to near its limit")
		t.Logf("busy sandbox: %.3f cores of 0.25 (%.1f%%), %d points", last.CPUCores, last.CPUPercent, len(g.usageOf(busy).History))
		if last.CPULimitCores == nil || *last.CPULimitCores != 0.25 {
			t.Fatalf("cpuLimitCores = %v, want 0.25", last.CPULimitCores)
		}
		for _, p := range g.usageOf(busy).History {
			if p.CPUPercent > 130 {
				t.Fatalf("a sandbox limited to 0.25 CPU used %.3f cores (%.1f%%) at %s", p.CPUCores, p.CPUPercent, p.Time)
			}
		}
		if last.Pids == nil || *last.Pids < 1 || last.NetRxBytes == nil || last.MemoryLimitBytes != 256<<20 {
			t.Fatalf("point lacks pids, network or the memory limit: %+v", last)
		}
		if u := g.usageOf(busy); u.Source != "engine" || u.History[0].DiskBytes == nil {
			t.Fatalf("source %q, first point's disk %v: want engine and a disk reading", u.Source, u.History[0].DiskBytes)
		}
	})
	t.Run("200 MiB allocation: memory near 200 MiB", func(t *testing.T) {
		var last usagePoint
		waitFor(t, 90*time.Second, func() bool {
			u := g.usageOf(alloc)
			if u.Current == nil {
				return false
			}
			last = *u.Current
			return last.MemoryBytes >= 190<<20
		}, "the allocating sandbox's memory to reach 200 MiB")
		t.Logf("allocating sandbox: %.1f MiB in use, peak %.1f MiB", last.MemoryBytes/(1<<20), last.MemoryPeakBytes/(1<<20))
		if last.MemoryBytes > 260<<20 || last.MemoryPeakBytes < last.MemoryBytes || last.MemoryLimitBytes != 512<<20 {
			t.Fatalf("memory %.0f MiB, peak %.0f MiB, limit %.0f MiB: want about 200, at least that, 512",
				last.MemoryBytes/(1<<20), last.MemoryPeakBytes/(1<<20), last.MemoryLimitBytes/(1<<20))
		}
	})
	t.Run("live stream sends points", func(t *testing.T) {
		req, _ := http.NewRequest("GET", "http://"+g.Addr+"/v1/sandboxes/"+busy+"/metrics/watch", nil)
		req.Header.Set("X-API-Key", g.APIKey)
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
			t.Fatalf("watch: %d %s", resp.StatusCode, ct)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		events := map[string]int{}
		for sc.Scan() && events["point"] < 2 {
			if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				events[ev]++
			}
		}
		if events["usage"] != 1 || events["point"] < 2 {
			t.Fatalf("events %v, want one usage then points", events)
		}
	})
	t.Run("another tenant cannot read the sandbox's metrics", func(t *testing.T) {
		other := g.withTenantKey(g.newPluginTenant("obs-usage"), "tenant-admin")
		expectError(t, other.do("GET", "/v1/sandboxes/"+busy+"/metrics", nil), 404, "SANDBOX::NOT_FOUND")
		expectError(t, other.do("GET", "/v1/sandboxes/"+busy+"/metrics/watch", nil), 404, "SANDBOX::NOT_FOUND")
	})
}

// TestConsoleUsageGraphs: the sandbox detail page draws the CPU and memory of a busy
// sandbox over time with points from the gateway's history (screenshot kept in
// artifacts/console/usage-graphs.png).
func TestConsoleUsageGraphs(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (make deps installs it): %v", err)
	}
	e := newEnv(t, nil)
	g := e.startGateway("SANDGATE_SANDBOX_METRICS_INTERVAL=1s")
	requireConsoleAssets(t, g)
	id := g.createSandbox(map[string]any{"entrypoint": []string{"sh", "-c", "while :; do :; done"},
		"resourceLimits": map[string]string{"cpu": "500m", "memory": "256Mi"}})
	g.createPool("warm", 1, 1, 0, 1, nil)
	waitFor(t, time.Minute, func() bool { return len(g.usageOf(id).History) >= 5 }, "five samples of the sandbox")

	b := newConsoleBrowser(t, chromium, "http://"+g.Addr)
	b.signIn(t, g.APIKey, "admin")
	b.open(t, "#/sandboxes/"+id)
	b.waitFor(t, 30*time.Second, "the CPU chart drawn with points",
		`(() => { const f = document.querySelector("[data-testid=cpu-chart]"); return !!f && Number(f.dataset.points) >= 5 && !!f.querySelector("canvas") })()`)
	b.waitFor(t, 10*time.Second, "the memory chart", `!!document.querySelector("[data-testid=memory-chart] canvas")`)
	// The canvas has ink: uPlot drew the series, not only the frame.
	drawn := b.eval(t, `(() => {
		const c = document.querySelector("[data-testid=cpu-chart] canvas");
		const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
		let blue = 0;
		for (let i = 0; i < d.length; i += 4) if (d[i+2] > 180 && d[i] < 90 && d[i+3] > 0) blue++;
		return String(blue);
	})()`)
	if consoleAtoi(t, drawn) < 20 {
		t.Fatalf("the CPU chart's canvas has %s pixels of the series colour; the line is not drawn", drawn)
	}
	b.shot(t, "usage-graphs")

	b.open(t, "#/fleet")
	b.waitFor(t, 30*time.Second, "the fleet's charts drawn with points",
		`["fleet-states-chart", "fleet-latency-chart", "fleet-pools-chart"].every((id) => { const f = document.querySelector("[data-testid=" + id + "]"); return !!f && Number(f.dataset.points) >= 3 && !!f.querySelector("canvas") })`)
	b.shot(t, "fleet-graphs")
}
