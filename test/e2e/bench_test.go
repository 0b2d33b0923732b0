package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/sandgate/sandgate/test/testenv"
)

// latencies collects per-operation durations and reports p50/p99 beside ns/op.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	q := func(p float64) float64 { return float64(l[int(p*float64(len(l)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

// ms returns the p50 and p99 of l in milliseconds.
func (l latencies) ms() (p50, p99 float64) { return testenv.Quantiles(l, time.Millisecond) }

// BenchmarkColdCreate measures create → first command completed through sandgate, beside
// the raw baseline of `docker create` + `start` + `exec true` of the same image, the two
// alternating in one loop (so that their ratio is of the same load). Sandboxes have the
// egress enforcer (the platform default policy), so an enforced create takes a spare
// namespace holder (runtimes/docker/holders.go) and its workload and enforcer start side
// by side in it.
//
// The replacement spare's network setup is real work, done after the answer: the loop
// waits until the spares are back before each pair, so that the raw baseline does not
// run beside it, and counts the engine's CPU (dockerd and containerd with their children:
// iptables, the network setup) of the create, its delete and the refill as the create's
// ("engine-cpu-ms", per op; the raw side's as "raw-engine-cpu-ms"). That figure counts
// whatever else uses the engine meanwhile. With SANDGATE_E2E_DUMP_STEPS=1 and -v it
// prints each create's steps. The figures and where a create's time goes are in
// docs/PERFORMANCE.md ("Cold create").
func BenchmarkColdCreate(b *testing.B) {
	e := newEnv(b, startRedis(b))
	g := e.startGateway()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		b.Fatal(err)
	}
	engine := enginePids(b, g.proc.Pid())
	var gwCPU, rawCPU time.Duration
	viaGateway := func() time.Duration {
		cpu0 := cpuOfPids(engine)
		start := time.Now()
		id := g.createSandbox(map[string]any{})
		if evs := g.agent(id).run("true"); lastEvent(evs).Type != "execution_complete" {
			b.Fatalf("true: %+v", evs)
		}
		took := time.Since(start)
		g.do("DELETE", "/v1/sandboxes/"+id, nil)
		waitSpares(b, e.Network, 2)
		gwCPU += cpuOfPids(engine) - cpu0
		return took
	}
	rawDocker := func() time.Duration {
		cpu0 := cpuOfPids(engine)
		defer func() { rawCPU += cpuOfPids(engine) - cpu0 }()
		start := time.Now()
		c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Config:     &container.Config{Image: baseImage, Cmd: []string{"tail", "-f", "/dev/null"}},
			HostConfig: &container.HostConfig{NetworkMode: container.NetworkMode(e.Network)},
		})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
			b.Fatal(err)
		}
		ex, err := cli.ExecCreate(ctx, c.ID, client.ExecCreateOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
		if err != nil {
			b.Fatal(err)
		}
		att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, att.Reader)
		att.Close()
		took := time.Since(start)
		_, _ = cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
		return took
	}
	// The gateway's first create fills its agent volume (once per process): not measured.
	viaGateway()
	gwCPU = 0
	b.ResetTimer()
	gw, raw := alternate(b, viaGateway, rawDocker)
	b.StopTimer()
	gw.report(b)
	base, rawP99 := raw.ms()
	b.ReportMetric(base, "raw-p50-ms")
	b.ReportMetric(rawP99, "raw-p99-ms")
	b.ReportMetric(float64(gwCPU.Milliseconds())/float64(b.N), "engine-cpu-ms")
	b.ReportMetric(float64(rawCPU.Milliseconds())/float64(b.N), "raw-engine-cpu-ms")
	dumpCreateSteps(b, g)
	p50, p99 := gw.ms()
	testenv.RecordFigure(b, testenv.Figure{Name: "cold_create_first_command", Unit: "ms", P50: p50, P99: p99, BaselineP50: base, Target: "<= 1.2x"})
}

// BenchmarkTrueRoundTrip measures POST /command {"true"} through the gateway's proxy,
// beside the same call straight to the agent at the container's address: the difference
// is what the proxy's hop and the gateway's checks (route, access header, Rego decision,
// audit event) add to the smallest agent call. Where the time of each side goes, and the
// figures, are in docs/PERFORMANCE.md ("Command round trip").
func BenchmarkTrueRoundTrip(b *testing.B) {
	e := newEnv(b, startRedis(b))
	g := e.startGateway()
	id := g.createSandbox(map[string]any{})
	defer g.do("DELETE", "/v1/sandboxes/"+id, nil)
	viaGateway := g.agent(id)
	direct := directAgent(b, id)
	got := map[string]latencies{}
	for _, c := range []struct {
		name string
		a    *agent
	}{{"sandgate", viaGateway}, {"direct-agent", direct}} {
		b.Run(c.name, func(b *testing.B) {
			body := []byte(`{"command":"true"}`)
			var lat latencies
			defer func() { got[c.name] = lat }()
			if c.a == viaGateway {
				cpu0 := processCPU(b, g.proc.Pid())
				defer func() {
					b.ReportMetric(float64((processCPU(b, g.proc.Pid())-cpu0).Microseconds())/float64(b.N), "gw-cpu-µs/op")
				}()
			}
			for i := 0; i < b.N; i++ {
				start := time.Now()
				resp := c.a.request("POST", "/command", bytes.NewReader(body), "application/json")
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if !strings.Contains(string(data), "execution_complete") {
					b.Fatalf("true: %s", data)
				}
				lat = append(lat, time.Since(start))
			}
			lat.report(b)
		})
	}
	p50, p99 := got["sandgate"].ms()
	d50, d99 := got["direct-agent"].ms()
	testenv.RecordFigure(b, testenv.Figure{Name: "true_rtt", Unit: "ms", P50: p50, P99: p99, BaselineP50: d50, Target: "<= 3"})
	testenv.RecordFigure(b, testenv.Figure{Name: "true_rtt_direct", Unit: "ms", P50: d50, P99: d99, Target: "<= 2"})
}

// directAgent reaches a sandbox's agent without the gateway: container address and the
// agent's own token, read from the engine (the raw baseline of the proxy).
func directAgent(b testing.TB, id string) *agent {
	out, err := exec.Command("docker", "inspect", "sandgate-"+id).Output()
	if err != nil {
		b.Fatal(err)
	}
	var info []struct {
		Config          struct{ Env []string }
		NetworkSettings struct {
			Networks map[string]struct{ IPAddress string }
		}
	}
	if err := json.Unmarshal(out, &info); err != nil || len(info) != 1 {
		b.Fatalf("inspect: %v", err)
	}
	var token, ip string
	for _, kv := range info[0].Config.Env {
		if v, ok := strings.CutPrefix(kv, "SANDGATE_AGENT_TOKEN="); ok {
			token = v
		}
	}
	for _, n := range info[0].NetworkSettings.Networks {
		ip = n.IPAddress
	}
	if ip == "" {
		ip = sandboxIP(b, id) // in a namespace holder's namespace
	}
	return &agent{t: b, base: fmt.Sprintf("http://%s:44772", ip), headers: map[string]string{"X-EXECD-ACCESS-TOKEN": token},
		client: &http.Client{Timeout: time.Minute}}
}

// waitSpares waits (at most 30 s) until the gateway on network has n spare network
// namespace holders (runtimes/docker/holders.go) again; against a gateway that keeps
// none it returns at once.
func waitSpares(b *testing.B, network string, n int) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		out, err := exec.Command("docker", "ps", "-a", "--filter", "network="+network, "--filter", "label=sandgate.io/role=netns",
			"--format", "{{.Names}}").Output()
		if err != nil {
			return
		}
		spares, holders := 0, 0
		for _, name := range strings.Fields(string(out)) {
			holders++
			if strings.HasPrefix(name, "sandgate-spare-") {
				spares++
			}
		}
		if spares >= n || holders == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alternate runs gateway and raw b.N times each, in turn first, so that on a machine
// whose load comes and goes both see the same load and their ratio is of one run.
func alternate(b *testing.B, gateway, raw func() time.Duration) (gw, base latencies) {
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			gw = append(gw, gateway())
			base = append(base, raw())
		} else {
			base = append(base, raw())
			gw = append(gw, gateway())
		}
	}
	return gw, base
}

// dumpCreateSteps logs each create's steps, as the Docker runtime logged them, when
// SANDGATE_E2E_DUMP_STEPS is set (with SANDGATE_E2E_GATEWAY_ENV=SANDGATE_LOG_LEVEL=DEBUG
// and -v).
func dumpCreateSteps(b *testing.B, g *gateway) {
	if os.Getenv("SANDGATE_E2E_DUMP_STEPS") == "" {
		return
	}
	for _, l := range strings.Split(g.proc.Logs(), "\n") {
		if strings.Contains(l, "sandbox container created") {
			b.Log(l)
		}
	}
}

// enginePids returns the pids of dockerd and containerd, and of the gateway process.
func enginePids(b *testing.B, gateway int) []int {
	pids := []int{gateway}
	for _, name := range []string{"dockerd", "containerd"} {
		out, err := exec.Command("pgrep", "-x", name).Output()
		if err != nil {
			b.Logf("pgrep %s: %v: its CPU is not counted", name, err)
			continue
		}
		for _, f := range strings.Fields(string(out)) {
			var pid int
			if _, err := fmt.Sscan(f, &pid); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// cpuOfPids sums user and system CPU of pids and of their waited-for children
// (/proc/<pid>/stat fields 14-17, in clock ticks of 10 ms).
func cpuOfPids(pids []int) time.Duration {
	var ticks int64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(data)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			s = s[i+1:]
		}
		f := strings.Fields(s)
		if len(f) < 15 {
			continue
		}
		for _, v := range f[11:15] {
			var n int64
			_, _ = fmt.Sscan(v, &n)
			ticks += n
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
