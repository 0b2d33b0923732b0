package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/test/coredeps"
)

// benchPreviewPort is the port of BenchmarkPreviewInProcess's upstream in the sandbox.
const benchPreviewPort = 8000

// previewFixture is a running gateway API (net/http, no Caddy) with one in-process
// sandbox whose preview port answers /headers with a small JSON echo of the request's
// headers, as test/e2e's preview server does: the gateway's share of a proxied small GET
// without Docker. The upstream is a process of its own (this test binary again, see
// TestPreviewUpstreamProcess), so that this process's CPU and profile are the load
// generator's and the gateway's only.
type previewFixture struct {
	Gateway string            // http://host:port of the API
	Direct  string            // http://host:port of the upstream
	ID      string            // the sandbox
	Header  map[string]string // the access header for the preview port
}

// startPreviewFixture builds a previewFixture.
func startPreviewFixture(b testing.TB) previewFixture {
	d := coredeps.Start(b)
	svc := gateway.New(gateway.Config{}, d.Store, d.Runtime, d.Policy, d.Log)
	svc.SetAdminKey("admin-key")
	svc.Start(context.Background())
	b.Cleanup(svc.Stop)
	srv := httptest.NewServer(New(svc, Options{Logger: d.Log}))
	b.Cleanup(srv.Close)
	f := previewFixture{Gateway: srv.URL}
	admin := map[string]string{"OPEN-SANDBOX-API-KEY": "admin-key"}
	st, body := benchCall(b, "POST", srv.URL+"/v1/sandboxes", map[string]any{
		"image": map[string]string{"uri": "sandgate/base:test"}, "entrypoint": []string{"sleep", "600"}, "timeout": 600,
	}, admin)
	var created struct{ ID string }
	if err := json.Unmarshal(body, &created); err != nil || st >= 300 {
		b.Fatalf("create: %d %s", st, body)
	}
	f.ID = created.ID
	inst, err := d.Runtime.Inspect(context.Background(), f.ID)
	if err != nil {
		b.Fatal(err)
	}
	f.Direct = "http://" + startUpstreamProcess(b, net.JoinHostPort(inst.Address, strconv.Itoa(benchPreviewPort)))
	st, body = benchCall(b, "GET", fmt.Sprintf("%s/v1/sandboxes/%s/endpoints/%d", srv.URL, f.ID, benchPreviewPort), nil, admin)
	var ep struct{ Headers map[string]string }
	if err := json.Unmarshal(body, &ep); err != nil || st != 200 || len(ep.Headers) == 0 {
		b.Fatalf("endpoint: %d %s", st, body)
	}
	f.Header = ep.Headers
	return f
}

func benchCall(b testing.TB, method, url string, body any, hdr map[string]string) (int, []byte) {
	b.Helper()
	var rd io.Reader
	if body != nil {
		js, _ := json.Marshal(body)
		rd = bytes.NewReader(js)
	}
	req, _ := http.NewRequest(method, url, rd)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// BenchmarkPreviewInProcess: the gateway's CPU per proxied small GET, without Docker:
// the same load (8 goroutines, one keep-alive client) alternately through the gateway
// (path mode, the access header) and straight to the upstream, all in this process.
// cpu-µs/req is this process's CPU per request in each mode; gw-cpu-µs/req their
// difference, the gateway's own share (its server side, its checks, its forward). Run
// with -cpuprofile and `go tool pprof -tagignore=side=client` to see where it goes.
// gw-allocs/req and gw-B/req are the same difference for the heap.
// The figures, and where the gateway's time goes, are in docs/PERFORMANCE.md ("Small
// preview responses"), beside test/e2e's BenchmarkPreviewSmallResponse.
func BenchmarkPreviewInProcess(b *testing.B) {
	f := startPreviewFixture(b)
	via := fmt.Sprintf("%s/sandboxes/%s/proxy/%d/headers", f.Gateway, f.ID, benchPreviewPort)
	benchPreviewAB(b, via, f.Header, f.Direct+"/headers")
}

// benchPreviewAB runs the gateway/direct alternation of the preview benchmarks.
func benchPreviewAB(b *testing.B, via string, hdr map[string]string, direct string) {
	const rounds = 3
	var cpu, n, allocs, bytes [2]int64
	for round := 0; round < rounds; round++ {
		for i, url := range []string{via, direct} {
			h := hdr
			if i == 1 {
				h = nil
			}
			c0, m0 := selfCPU(), heapAllocs()
			runPreviewLoad(b, url, h, b.N)
			m1 := heapAllocs()
			cpu[i] += int64(selfCPU() - c0)
			allocs[i] += int64(m1.Mallocs - m0.Mallocs)
			bytes[i] += int64(m1.TotalAlloc - m0.TotalAlloc)
			n[i] += int64(b.N)
		}
	}
	per := func(v [2]int64, i int) float64 { return float64(v[i]) / float64(n[i]) }
	viaUS, directUS := per(cpu, 0)/1e3, per(cpu, 1)/1e3
	b.ReportMetric(viaUS, "via-cpu-µs/req")
	b.ReportMetric(directUS, "direct-cpu-µs/req")
	b.ReportMetric(viaUS-directUS, "gw-cpu-µs/req")
	// The same difference for the heap: the gateway's allocations per request (the
	// client's and the upstream's are the same either way; the upstream is another process).
	b.ReportMetric(per(allocs, 0)-per(allocs, 1), "gw-allocs/req")
	b.ReportMetric(per(bytes, 0)-per(bytes, 1), "gw-B/req")
}

// heapAllocs reads this process's allocation counters (a stop of the world: once per run).
func heapAllocs() runtime.MemStats {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// runPreviewLoad sends n GETs to url from 8 goroutines on one keep-alive client.
func runPreviewLoad(b *testing.B, url string, hdr map[string]string, n int) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	work := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		work <- struct{}{}
	}
	close(work)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		// Labelled: the client's goroutines (and its transport's, which inherit the
		// label) are told apart from the gateway's in a profile (-tagignore=side=client).
		go pprof.Do(context.Background(), pprof.Labels("side", "client"), func(context.Context) {
			defer wg.Done()
			for range work {
				req, _ := http.NewRequest("GET", url, nil)
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
}

// upstreamEnv tells this test binary, run again by startUpstreamProcess, the address
// its preview upstream listens on.
const upstreamEnv = "SANDGATE_BENCH_UPSTREAM"

// startUpstreamProcess runs the preview upstream on addr in a child process (this test
// binary, TestPreviewUpstreamProcess) and returns addr once it answers.
func startUpstreamProcess(b testing.TB, addr string) string {
	cmd := exec.Command(os.Args[0], "-test.run=^TestPreviewUpstreamProcess$")
	cmd.Env = append(os.Environ(), upstreamEnv+"="+addr, "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := http.Get("http://" + addr + "/headers")
		if err == nil {
			resp.Body.Close()
			return addr
		}
		if time.Now().After(deadline) {
			b.Fatalf("upstream on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPreviewUpstreamProcess is the preview benchmarks' upstream when upstreamEnv names
// an address (startUpstreamProcess); else it does nothing. /headers answers a JSON echo
// of the request's path and headers; /duplex answers at once and then echoes the
// request's body as it reads it (duplexEcho).
func TestPreviewUpstreamProcess(t *testing.T) {
	addr := os.Getenv(upstreamEnv)
	if addr == "" {
		t.Skip("only the preview benchmarks' upstream process")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/duplex" {
			duplexEcho(w, r)
			return
		}
		js, _ := json.Marshal(map[string]any{"path": r.URL.RequestURI(), "headers": r.Header})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(js)))
		_, _ = w.Write(js)
	}))
}

// duplexEcho answers 200 before it reads anything, then sends back each part of the
// request's body as it arrives: a server that streams while it reads.
func duplexEcho(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex()
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	buf := make([]byte, 8<<10)
	for {
		n, err := r.Body.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
			_ = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}
