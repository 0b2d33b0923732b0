package e2e

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkPluginAuditOverhead measures preview requests per second through the gateway
// with no plugin, then with the audit-jsonl plugin attached to every event of the tenant
// (each request is a preview.accessed event the plugin turns into an audit record). The
// audit hook runs off the request path, so the two figures should match within noise;
// the plugin's own per-call p50 and the records it produced are reported beside them.
func BenchmarkPluginAuditOverhead(b *testing.B) {
	e := newEnv(b, startRedis(b))
	g := e.startGateway()
	id := g.createSandbox(map[string]any{"timeout": 3600})
	defer g.do("DELETE", "/v1/sandboxes/"+id, nil)
	startPreviewServer(b, g, id)
	url := fmt.Sprintf("http://%s/sandboxes/%s/proxy/%d/headers", g.Addr, id, previewPort)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute}

	run := func(b *testing.B) {
		var failed atomic.Int64
		b.SetParallelism(4) // 4 × GOMAXPROCS clients
		b.ResetTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req, _ := http.NewRequest("GET", url, nil)
				req.Header.Set("OPEN-SANDBOX-API-KEY", g.APIKey)
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
				}
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d of %d requests failed", n, b.N)
		}
	}
	b.Run("raw-no-plugin", run)
	g.mustPutPlugin("audit", examplePlugin(b, "audit-jsonl"), `{"hooks":["on_event"],"settings":{"types":["preview.accessed"]}}`)
	b.Run("sandgate-with-audit-plugin", func(b *testing.B) {
		run(b)
		b.StopTimer()
		// Let the queue drain, then show what the plugin did beside the throughput.
		time.Sleep(time.Second)
		if st := g.plugin("audit"); st.Stats != nil {
			b.ReportMetric(st.Stats.P50Ms*1000, "plugin-p50-µs")
			b.ReportMetric(float64(st.Stats.Drops), "plugin-drops")
		}
	})
}
