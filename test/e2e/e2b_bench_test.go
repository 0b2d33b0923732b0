package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/sandgate/sandgate/sandbox-agent/envd/spec/process"
	"github.com/sandgate/sandgate/sandbox-agent/envd/spec/process/processconnect"
	"github.com/sandgate/sandgate/test/testenv"
)

// e2bSandbox is a sandbox made through the E2B door, reached as the E2B SDKs reach it:
// every call to the gateway's one address, the sandbox and port named in headers, the
// envd calls with the sandbox's envdAccessToken.
type e2bSandbox struct {
	id, token string
	process   processconnect.ProcessClient
	http      *http.Client
	base      string
}

// e2bHeaders adds the headers the E2B SDKs send with every envd call.
type e2bHeaders struct {
	id, token string
	next      http.RoundTripper
}

func (h e2bHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if r.Header.Get("Accept-Encoding") == "" {
		// What both SDKs' HTTP clients send on every call.
		r.Header.Set("Accept-Encoding", "gzip, deflate")
	}
	r.Header.Set("E2b-Sandbox-Id", h.id)
	r.Header.Set("E2b-Sandbox-Port", "49983")
	r.Header.Set("X-Access-Token", h.token)
	return h.next.RoundTrip(r)
}

// e2bTransport is shared by the E2B clients of a benchmark: they keep their connections,
// as an SDK's does.
var e2bTransport = &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}

// e2bCreate makes a sandbox of template through the door (POST /e2b/sandboxes).
func (g *gateway) e2bCreate(tb testing.TB, template string) *e2bSandbox {
	tb.Helper()
	r := g.do("POST", "/e2b/sandboxes", map[string]any{"templateID": template, "timeout": 600})
	if r.Status != http.StatusCreated {
		tb.Fatalf("e2b create: %d %s", r.Status, r.Body)
	}
	var created struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if err := json.Unmarshal(r.Body, &created); err != nil || created.SandboxID == "" {
		tb.Fatalf("e2b create: %s (%v)", r.Body, err)
	}
	hc := &http.Client{Transport: e2bHeaders{id: created.SandboxID, token: created.EnvdAccessToken, next: e2bTransport}, Timeout: 5 * time.Minute}
	base := "http://" + g.Addr
	return &e2bSandbox{id: created.SandboxID, token: created.EnvdAccessToken, http: hc, base: base,
		process: processconnect.NewProcessClient(hc, base, connect.WithProtoJSON())}
}

// run runs a command as the SDKs' commands.run does (bash -l -c, process.Start streamed
// to its end) and fails unless it exits 0.
func (s *e2bSandbox) run(tb testing.TB, command string) {
	tb.Helper()
	stream, err := s.process.Start(context.Background(), connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", command}},
	}))
	if err != nil {
		tb.Fatalf("e2b run %q: %v", command, err)
	}
	defer stream.Close()
	for stream.Receive() {
		if end := stream.Msg().GetEvent().GetEnd(); end != nil {
			if end.GetExitCode() != 0 {
				tb.Fatalf("e2b run %q: exit %d %s", command, end.GetExitCode(), end.GetError())
			}
			return
		}
	}
	tb.Fatalf("e2b run %q: the stream ended without an end event: %v", command, stream.Err())
}

// runWire is run without a Connect client: envd's process.Start of `bash -l -c command`
// written as the SDKs put it on the wire (one Connect envelope of the request's JSON),
// the answer's envelopes read to the end event. The OpenSandbox side of the benchmark
// is plain HTTP too, so that the two doors are compared without either client
// library's own cost.
func (s *e2bSandbox) runWire(tb testing.TB, command string) {
	tb.Helper()
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", command}}})
	body := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:5], uint32(len(msg)))
	copy(body[5:], msg)
	req, _ := http.NewRequest("POST", s.base+"/process.Process/Start", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := s.http.Do(req)
	if err != nil {
		tb.Fatalf("e2b run %q: %v", command, err)
	}
	defer resp.Body.Close()
	stream, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("e2b run %q: %d %v %.300s", command, resp.StatusCode, err, stream)
	}
	for len(stream) >= 5 {
		n := int(binary.BigEndian.Uint32(stream[1:5]))
		if 5+n > len(stream) {
			break
		}
		var ev struct {
			Event struct {
				End *struct {
					ExitCode int  `json:"exitCode"`
					Exited   bool `json:"exited"`
				} `json:"end"`
			} `json:"event"`
		}
		if stream[0] == 0 && json.Unmarshal(stream[5:5+n], &ev) == nil && ev.Event.End != nil {
			if ev.Event.End.ExitCode != 0 || !ev.Event.End.Exited {
				tb.Fatalf("e2b run %q: %s", command, stream[5:5+n])
			}
			return
		}
		stream = stream[5+n:]
	}
	tb.Fatalf("e2b run %q: the stream ended without an end event", command)
}

// files sends a /files request of the door's envd (octet-stream upload, or download).
func (s *e2bSandbox) files(tb testing.TB, method, path string, body []byte) []byte {
	tb.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, _ := http.NewRequest(method, s.base+"/files?path="+url.QueryEscape(path), rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := s.http.Do(req)
	if err != nil {
		tb.Fatalf("e2b %s /files: %v", method, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		tb.Fatalf("e2b %s /files: %d %v %.200s", method, resp.StatusCode, err, got)
	}
	return got
}

// download reads a file through the door's envd GET /files and counts its bytes
// without keeping them, as the OpenSandbox side of the benchmark reads its download.
func (s *e2bSandbox) download(tb testing.TB, path string) int64 {
	tb.Helper()
	req, _ := http.NewRequest("GET", s.base+"/files?path="+url.QueryEscape(path), nil)
	resp, err := s.http.Do(req)
	if err != nil {
		tb.Fatalf("e2b GET /files: %v", err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != 200 {
		tb.Fatalf("e2b GET /files: %d %v", resp.StatusCode, err)
	}
	return n
}

func (s *e2bSandbox) kill(g *gateway) { g.do("DELETE", "/e2b/sandboxes/"+s.id, nil) }

// BenchmarkE2BDoor measures the E2B door beside the OpenSandbox door on the same gateway,
// image and machine, each pair alternating in one loop: create → first `true` (cold, and
// claimed from a warm pool), a `true` round trip, and a 10 MiB write and read. The E2B
// side speaks the E2B SDKs' wire (POST /e2b/sandboxes, envd's process.Start over Connect
// with the JSON codec, /files), the OpenSandbox side the OpenSandbox SDKs' (POST
// /v1/sandboxes, the endpoint lookup, the agent's /command and /files routes). Both
// doors' templates are sandgate/base, so the images are the same.
func BenchmarkE2BDoor(b *testing.B) {
	e := newEnv(b, startRedis(b), "SANDGATE_E2B_TEMPLATES=base="+baseImage+",pooled=pool:e2bbench")
	g := e.startGateway()
	// bufferMin = bufferMax: each claim is replaced at once, one create, so that every
	// claim of either door runs beside the same refill (a lower bufferMin would let a few
	// claims run beside none and the next beside a refill of several).
	const warmMembers = 8
	g.createPool("e2bbench", warmMembers, warmMembers, 0, 16, nil)
	g.waitAvailable("e2bbench", warmMembers, 5*time.Minute)

	// Each sub-benchmark runs more than once (b.N grows); its figure is of its last run,
	// recorded when every sub-benchmark is done.
	type pair struct{ door, base latencies }
	last := map[string]pair{}
	var order []string
	figure := func(name string, door, baseline latencies) {
		if _, seen := last[name]; !seen {
			order = append(order, name)
		}
		last[name] = pair{door, baseline}
	}
	defer func() {
		for _, name := range order {
			p50, p99 := last[name].door.ms()
			base, _ := last[name].base.ms()
			testenv.RecordFigure(b, testenv.Figure{Name: name, Unit: "ms", P50: p50, P99: p99, BaselineP50: base, Target: "<= 1.1x"})
		}
	}()
	b.Run("create-first-command", func(b *testing.B) {
		e2bSide := func() time.Duration {
			t0 := time.Now()
			s := g.e2bCreate(b, "base")
			s.run(b, "true")
			took := time.Since(t0)
			s.kill(g)
			waitSpares(b, e.Network, 2)
			return took
		}
		osSide := func() time.Duration {
			t0 := time.Now()
			id := g.createSandbox(map[string]any{})
			if evs := g.agent(id).run("true"); lastEvent(evs).Type != "execution_complete" {
				b.Fatalf("true: %+v", evs)
			}
			took := time.Since(t0)
			g.do("DELETE", "/v1/sandboxes/"+id, nil)
			waitSpares(b, e.Network, 2)
			return took
		}
		e2bSide() // the first create fills the agent volume
		door, base := alternate(b, e2bSide, osSide)
		door.report(b)
		figure("e2b_cold_create_first_command", door, base)
	})
	b.Run("claim-first-command", func(b *testing.B) {
		// Each claim starts from a full pool: the previous claim's refill is done.
		warm := func() { g.waitAvailable("e2bbench", warmMembers, 2*time.Minute) }
		var claimOnly, osClaimOnly latencies
		e2bSide := func() time.Duration {
			warm()
			t0 := time.Now()
			s := g.e2bCreate(b, "pooled")
			claimOnly = append(claimOnly, time.Since(t0))
			s.runWire(b, "true")
			took := time.Since(t0)
			s.kill(g)
			return took
		}
		osSide := func() time.Duration {
			warm()
			t0 := time.Now()
			id := g.createSandbox(map[string]any{"extensions": map[string]string{"poolRef": "e2bbench"}})
			osClaimOnly = append(osClaimOnly, time.Since(t0))
			if evs := g.agent(id).run("true"); lastEvent(evs).Type != "execution_complete" {
				b.Fatalf("true: %+v", evs)
			}
			took := time.Since(t0)
			g.do("DELETE", "/v1/sandboxes/"+id, nil)
			return took
		}
		door, base := alternate(b, e2bSide, osSide)
		door.report(b)
		c50, _ := claimOnly.ms()
		o50, _ := osClaimOnly.ms()
		b.ReportMetric(c50, "claim-ms")
		b.ReportMetric(o50, "opensandbox-claim-ms")
		figure("e2b_claim_first_command", door, base)
	})

	s := g.e2bCreate(b, "base")
	defer s.kill(g)
	id := g.createSandbox(map[string]any{})
	defer g.do("DELETE", "/v1/sandboxes/"+id, nil)
	a := g.agent(id)
	b.Run("command-round-trip", func(b *testing.B) {
		body := []byte(`{"command":"true"}`)
		door, base := alternate(b, func() time.Duration {
			t0 := time.Now()
			if os.Getenv("SANDGATE_E2B_BENCH_CONNECT_CLIENT") != "" {
				s.run(b, "true")
			} else {
				s.runWire(b, "true")
			}
			return time.Since(t0)
		}, func() time.Duration {
			t0 := time.Now()
			resp := a.as(b).request("POST", "/command", bytes.NewReader(body), "application/json")
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(data), "execution_complete") {
				b.Fatalf("true: %s", data)
			}
			return time.Since(t0)
		})
		door.report(b)
		figure("e2b_command_rtt", door, base)
	})

	const size = 10 << 20
	data, form, contentType := uploadForm(b, 7, size, "/tmp/bench10.bin")
	b.Run("write-10mib", func(b *testing.B) {
		b.SetBytes(size)
		door, base := alternate(b, func() time.Duration {
			t0 := time.Now()
			s.files(b, "POST", "/tmp/bench10.bin", data)
			return time.Since(t0)
		}, func() time.Duration {
			t0 := time.Now()
			resp := a.as(b).request("POST", "/files/upload", bytes.NewReader(form.Bytes()), contentType)
			msg, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("upload: %d %s", resp.StatusCode, msg)
			}
			return time.Since(t0)
		})
		door.report(b)
		figure("e2b_write_10mib", door, base)
	})
	// The file each side reads: written here, so that the read runs alone too.
	s.files(b, "POST", "/tmp/bench10.bin", data)
	if resp := a.as(b).request("POST", "/files/upload", bytes.NewReader(form.Bytes()), contentType); resp.StatusCode != 200 {
		b.Fatalf("upload: %d", resp.StatusCode)
	} else {
		resp.Body.Close()
	}
	b.Run("read-10mib", func(b *testing.B) {
		b.SetBytes(size)
		door, base := alternate(b, func() time.Duration {
			t0 := time.Now()
			if n := s.download(b, "/tmp/bench10.bin"); n != size {
				b.Fatalf("read %d bytes", n)
			}
			return time.Since(t0)
		}, func() time.Duration {
			t0 := time.Now()
			resp := a.as(b).request("GET", "/files/download?path="+url.QueryEscape("/tmp/bench10.bin"), nil, "")
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || n != size {
				b.Fatalf("download: %d, %d bytes, %v", resp.StatusCode, n, err)
			}
			return time.Since(t0)
		})
		door.report(b)
		figure("e2b_read_10mib", door, base)
	})
}
