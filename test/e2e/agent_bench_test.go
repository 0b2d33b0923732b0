package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/test/testenv"
)

// transferSize is the payload of one upload, download or stdout operation.
const transferSize = 32 << 20

// BenchmarkAgentTransfer measures the agent's bulk paths through the gateway (sandgate),
// straight to the agent at the container's address (direct-agent), and, for files, a
// plain HTTP copy of the same bytes over loopback inside this process (raw-loopback):
//
//   - stdout: a command printing 32 MiB in 1 KiB lines, read as an event stream;
//   - upload: a 32 MiB multipart upload (metadata + file part);
//   - download: GET /files/download of that 32 MiB file.
func BenchmarkAgentTransfer(b *testing.B) {
	e := newEnv(b, startRedis(b))
	g := e.startGateway()
	id := g.createSandbox(map[string]any{})
	defer g.do("DELETE", "/v1/sandboxes/"+id, nil)
	targets := []struct {
		name string
		a    *agent
	}{{"sandgate", g.agent(id)}, {"direct-agent", directAgent(b, id)}}

	b.Run("stdout", func(b *testing.B) {
		const lines = transferSize / 1024
		body, _ := json.Marshal(map[string]any{"command": fmt.Sprintf("yes $(printf '%%01023d' 0) | head -n %d", lines)})
		for _, tg := range targets {
			b.Run(tg.name, func(b *testing.B) {
				a := tg.a.as(b)
				b.SetBytes(transferSize)
				for i := 0; i < b.N; i++ {
					resp := a.request("POST", "/command", bytes.NewReader(body), "application/json")
					got, last := 0, ""
					eachEvent(b, resp.Body, func(ev event, _ time.Time) {
						last = ev.Type
						if ev.Type == "stdout" {
							got += len(ev.Text) + 1
						}
					})
					resp.Body.Close()
					if got != transferSize || last != "execution_complete" {
						b.Fatalf("stdout: %d bytes, last event %q", got, last)
					}
				}
			})
		}
	})

	// One multipart body, built once, is sent by every upload target; its file part is
	// also what every download target fetches.
	const path = "/tmp/bench/blob.bin"
	data, form, contentType := uploadForm(b, 3, transferSize, path)

	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "blob.bin"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	raw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			// Parse the multipart stream as the agent does, without the disk write.
			mr, err := r.MultipartReader()
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			for {
				p, err := mr.NextPart()
				if err != nil {
					break
				}
				_, _ = io.Copy(io.Discard, p)
			}
			return
		}
		f, err := os.Open(filepath.Join(dir, "blob.bin"))
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", time.Time{}, f)
	}))
	defer raw.Close()
	rawAgent := &agent{t: b, base: raw.URL, headers: map[string]string{}, client: &http.Client{Timeout: time.Minute}}
	withRaw := append(targets[:2:2], struct {
		name string
		a    *agent
	}{"raw-loopback", rawAgent})

	b.Run("upload", func(b *testing.B) {
		for _, tg := range withRaw {
			b.Run(tg.name, func(b *testing.B) {
				a := tg.a.as(b)
				b.SetBytes(transferSize)
				for i := 0; i < b.N; i++ {
					resp := a.request("POST", "/files/upload", bytes.NewReader(form.Bytes()), contentType)
					msg, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Fatalf("upload: %d %s", resp.StatusCode, msg)
					}
				}
			})
		}
	})
	if got := filesInfo(b, targets[0].a.as(b), path)[path]; got.Size != transferSize {
		b.Fatalf("uploaded file has %d bytes", got.Size)
	}

	b.Run("download", func(b *testing.B) {
		for _, tg := range withRaw {
			b.Run(tg.name, func(b *testing.B) {
				a := tg.a.as(b)
				b.SetBytes(transferSize)
				for i := 0; i < b.N; i++ {
					resp := a.request("GET", "/files/download?path="+url.QueryEscape(path), nil, "")
					n, err := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != 200 || n != transferSize {
						b.Fatalf("download: %d, %d bytes, %v", resp.StatusCode, n, err)
					}
				}
			})
		}
	})
}

// BenchmarkAgentCodeLatency measures `1 + 1` in a warm Python context of a
// code-interpreter sandbox, through the gateway and straight to the agent.
func BenchmarkAgentCodeLatency(b *testing.B) {
	e := newEnv(b, startRedis(b))
	g := e.startGateway()
	id := g.createSandbox(map[string]any{"image": map[string]any{"uri": "sandgate/code-interpreter:0.1.0"}})
	defer g.do("DELETE", "/v1/sandboxes/"+id, nil)
	viaGateway := g.agent(id).as(b)
	r := viaGateway.mustCall(200, "POST", "/code/context", map[string]any{"language": "python"})
	var ctx struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(r.Body, &ctx); err != nil || ctx.ID == "" {
		b.Fatalf("create context: %v: %s", err, r.Body)
	}
	body, _ := json.Marshal(map[string]any{"context": map[string]any{"id": ctx.ID}, "code": "1 + 1"})
	for _, tg := range []struct {
		name string
		a    *agent
	}{{"sandgate", viaGateway}, {"direct-agent", directAgent(b, id)}} {
		b.Run(tg.name, func(b *testing.B) {
			a := tg.a.as(b)
			run := func() {
				resp := a.request("POST", "/code", bytes.NewReader(body), "application/json")
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if !strings.Contains(string(data), `"text":"2"`) {
					b.Fatalf("1 + 1: %s", data)
				}
			}
			run() // warm: the kernel has compiled and run a cell on this connection
			b.ResetTimer()
			var lat latencies
			for i := 0; i < b.N; i++ {
				start := time.Now()
				run()
				lat = append(lat, time.Since(start))
			}
			lat.report(b)
		})
	}
	// The raw baseline: jupyter_client talking ZMQ to a kernel of its own inside the same
	// sandbox, without the Jupyter Server's WebSocket and without the agent. Kernel start
	// is outside the timed loop, so the mean latency replaces ns/op.
	b.Run("raw-jupyter-client", func(b *testing.B) {
		a := viaGateway.as(b)
		uploadFile(b, a, "/tmp/bench/jupyter_raw.py", []byte(rawJupyterBench))
		evs := a.run(fmt.Sprintf("python3 /tmp/bench/jupyter_raw.py %d 2>/dev/null", b.N))
		var lat latencies
		var total time.Duration
		for _, line := range strings.Split(stdoutOf(evs), "\n") {
			us, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
			if err != nil {
				continue
			}
			d := time.Duration(us) * time.Microsecond
			lat = append(lat, d)
			total += d
		}
		if len(lat) != b.N {
			b.Fatalf("raw jupyter_client printed %d latencies for %d runs: %+v", len(lat), b.N, evs)
		}
		lat.report(b)
		b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/op")
	})
}

// rawJupyterBench runs `1 + 1` argv[1] times in a warm kernel with jupyter_client and
// prints each round trip in microseconds.
const rawJupyterBench = `import sys, time, jupyter_client
km, kc = jupyter_client.manager.start_new_kernel(kernel_name="python3")
run = lambda: kc.execute_interactive("1 + 1", output_hook=lambda m: None)
run()
out = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    run()
    out.append(int((time.perf_counter() - t) * 1e6))
print("\n".join(map(str, out)), flush=True)
kc.stop_channels()
km.shutdown_kernel(now=True)
`

// BenchmarkTransfer100MiB measures a 100 MiB upload (multipart, as the SDKs send it) and
// download of the same file through the gateway, beside the same calls straight to the
// agent, and records upload_100mib and download_100mib (MB/s; p99 is the throughput of
// the slowest 1% of transfers).
func BenchmarkTransfer100MiB(b *testing.B) {
	const size = 100 << 20
	e := newEnv(b, startRedis(b))
	g := e.startGateway()
	id := g.createSandbox(map[string]any{})
	defer g.do("DELETE", "/v1/sandboxes/"+id, nil)
	targets := []struct {
		name string
		a    *agent
	}{{"sandgate", g.agent(id)}, {"direct-agent", directAgent(b, id)}}
	const path = "/tmp/bench/blob100.bin"
	_, form, contentType := uploadForm(b, 5, size, path)

	// throughput turns per-transfer durations into MB/s at p50 and at the p99 duration.
	throughput := func(l latencies) (p50, p99 float64) {
		d50, d99 := testenv.Quantiles(l, time.Second)
		if d50 == 0 || d99 == 0 {
			return 0, 0
		}
		return size / 1e6 / d50, size / 1e6 / d99
	}
	got := map[string]latencies{}
	for _, op := range []string{"upload", "download"} {
		for _, tg := range targets {
			b.Run(op+"/"+tg.name, func(b *testing.B) {
				a := tg.a.as(b)
				b.SetBytes(size)
				var lat latencies
				defer func() { got[op+"/"+tg.name] = lat }()
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					if op == "upload" {
						resp := a.request("POST", "/files/upload", bytes.NewReader(form.Bytes()), contentType)
						msg, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 {
							b.Fatalf("upload: %d %s", resp.StatusCode, msg)
						}
					} else {
						resp := a.request("GET", "/files/download?path="+url.QueryEscape(path), nil, "")
						n, err := io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if err != nil || resp.StatusCode != 200 || n != size {
							b.Fatalf("download: %d, %d bytes, %v", resp.StatusCode, n, err)
						}
					}
					lat = append(lat, time.Since(t0))
				}
			})
		}
	}
	for _, f := range []struct{ name, op, target string }{{"upload_100mib", "upload", ">= 300"}, {"download_100mib", "download", ">= 600"}} {
		p50, p99 := throughput(got[f.op+"/sandgate"])
		base, _ := throughput(got[f.op+"/direct-agent"])
		testenv.RecordFigure(b, testenv.Figure{Name: f.name, Unit: "MB/s", P50: p50, P99: p99, BaselineP50: base, Target: f.target})
	}
}

// uploadForm builds, once, the multipart body of an upload to path of size bytes of
// patternReader(seed), which a benchmark sends again and again; it answers the bytes
// too (what a download should fetch back).
func uploadForm(b *testing.B, seed byte, size int64, path string) (data []byte, form *bytes.Buffer, contentType string) {
	b.Helper()
	data, err := io.ReadAll(io.LimitReader(patternReader(seed), size))
	if err != nil {
		b.Fatal(err)
	}
	form = &bytes.Buffer{}
	mw := multipart.NewWriter(form)
	writeMetadataPart(mw, map[string]any{"path": path, "mode": 644})
	fw, _ := mw.CreateFormFile("file", filepath.Base(path))
	fw.Write(data)
	mw.Close()
	return data, form, mw.FormDataContentType()
}
