package e2e

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/sandgate/sandgate/test/testenv"
)

// rpsFor runs GETs of url from 8 goroutines for d and returns requests/s and the
// latencies seen.
func rpsFor(tb testing.TB, url, key string, d time.Duration) (float64, []time.Duration) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var n atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(deadline) {
				req, _ := http.NewRequest("GET", url, nil)
				req.Header.Set("OPEN-SANDBOX-API-KEY", key)
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					tb.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					tb.Errorf("status %d", resp.StatusCode)
					return
				}
				mine = append(mine, time.Since(t0))
				n.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds(), lat
}

// BenchmarkAPIObserved: API requests/s (GET /v1/sandboxes) with metrics and tracing on
// — spans exported to an in-process OTLP receiver, /metrics scraped every second, the
// per-sandbox sampler on — beside the same gateway setup with tracing and the sampler
// off and no scraper (the baseline), in the same run. Each side runs 5 s.
func BenchmarkAPIObserved(b *testing.B) {
	rc := startOTLPReceiver(b)
	measure := func(observed bool) (float64, []time.Duration) {
		extra := []string{"SANDGATE_SANDBOX_METRICS_INTERVAL=off"}
		if observed {
			extra = []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rc.srv.URL, "SANDGATE_SANDBOX_METRICS_INTERVAL=5s"}
		}
		g := newEnv(b, startRedis(b)).startGateway(extra...)
		id := g.createSandbox(map[string]any{})
		defer g.do("DELETE", "/v1/sandboxes/"+id, nil)
		stop := make(chan struct{})
		var scrapes sync.WaitGroup
		if observed {
			scrapes.Add(1)
			go func() {
				defer scrapes.Done()
				t := time.NewTicker(time.Second)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
						scrape(b, "http://"+g.Addr+"/metrics", g.APIKey)
					}
				}
			}()
		}
		rpsFor(b, "http://"+g.Addr+"/v1/sandboxes", g.APIKey, time.Second) // warm up
		rps, lat := rpsFor(b, "http://"+g.Addr+"/v1/sandboxes", g.APIKey, 5*time.Second)
		close(stop)
		scrapes.Wait()
		return rps, lat
	}
	for range b.N {
		off, _ := measure(false)
		on, lat := measure(true)
		b.ReportMetric(on, "req/s")
		b.ReportMetric(off, "baseline-req/s")
		_, p99 := testenv.Quantiles(lat, time.Millisecond)
		testenv.RecordFigure(b, testenv.Figure{Name: "api_rps_observed", Unit: "req/s", P50: on, P99: on, BaselineP50: off, Target: ">= 0.8 x baseline"})
		b.Logf("observed: %.0f req/s (p99 %.2f ms); baseline (tracing and sampler off): %.0f req/s; spans received: %d", on, p99, off, len(rc.find(func(*tracepb.Span) bool { return true })))
	}
}
