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
// egress enforcer (the platform default policy).
//
// What each step costs (the Docker runtime logs them per create at SANDGATE_LOG_LEVEL=DEBUG,
// "sandbox container created"; with SANDGATE_E2E_DUMP_STEPS=1 and -v this benchmark prints
// them; p50 of 6 creates on the loaded 2-core machine):
//
//	step                                      session 8     before        now
//	image inspect                             1 ms          1 ms (+ filling the agent volume once per process, ~160 ms)
//	create workload                           20-130 ms     same
//	copy the agent into the workload          126-294 ms    removed: read-only shared agent volume, mounted by the create
//	  (and into the sidecar, in parallel)                   removed likewise
//	stat /bin/sh for the enforcer's loop      per create    once per image id (it ran beside the workload's start)
//	start workload                            350-730 ms    same (raw docker pays it too)
//	inspect workload, then start enforcer     sequential    concurrent: 80-250 ms (105-190 at load 20)
//	enforcer healthy (signed GET /policy)     polls 5→50 ms polls 2→10 ms on a kept-alive connection: 1-70 ms
//	agent ping + POST /sandgate/entrypoint    4 ms          8 ms (5-35): the answer waits until the entrypoint settles
//	                                                        (every thread of its process group asleep on two looks
//	                                                        2 ms apart, at most 100 ms), or reports its exit
//	copy the start marker into the workload   44-440 ms     removed (written by the agent in the call above)
//	final Inspect: 2 inspects + a stat        15-30 ms      removed (the instance is known from the start)
//	gateway: ping, 100 ms settle, ping        ~110 ms       one ping (runtimes.Instance.Settled); an entrypoint that
//	                                                        exits at once still fails the create (TestBadInput). All
//	                                                        the gateway adds beyond runtime.Create (Redis writes,
//	                                                        pings, the answer, the first command): 122 → 11 ms p50
//
// Session 9 (issue 15, point 4): the network setup leaves the critical path. Most of
// "start workload" was the engine making the namespace, veth, bridge port and iptables
// rules (a container that joins a running one's namespace starts in 200-500 ms where one
// on the network takes 1.1-2.5 s, same load). The runtime now keeps two spare namespace
// holders started (runtimes/docker/holders.go); an enforced create takes one, and the
// workload and the enforcer join it and start side by side:
//
//	step (engine calls)                       before (own namespace)      now (spare holder)
//	start workload (ContainerStart)           560-1060 ms, with network   200-400 ms, no network setup
//	inspect workload (ContainerInspect)       beside the enforcer start   removed: the address is the holder's,
//	                                                                      known when the spare was made
//	start enforcer (ContainerStart)           140-330 ms after the        beside the workload's start; what is
//	  + enforcer healthy                      workload's start            left of it after the workload: 0-170 ms
//	rename the holder (ContainerRename)       -                           beside the workload's start
//	making the replacement spare              -                           after the create, off its path
//
// The replacement spare's network setup is real work, done after the answer; this
// benchmark waits until the spares are back before each pair, so that the raw baseline
// does not run beside it, and counts the engine's CPU (dockerd and containerd with
// their children: iptables, the network setup) of the create, its delete and the refill
// as the create's ("engine-cpu-ms", per op; the raw side's as "raw-engine-cpu-ms"). It
// is polluted by whatever else uses the engine at the time: compare A/B runs.
//
// The figure, p50 of 10 (6 in the first) beside the raw p50 of the same loop:
//
//	load      before (session 8 binary)           now
//	8-15      1245 vs 876 raw (1.42×, session 8)  501 vs 882 (0.57×)
//	34-49     -                                   2421 vs 5463 (0.44×)
//	18-28     -                                   2101 vs 3778 (0.56×)
//	20-25     5069 vs 4120 (1.23×, 5 creates)     -
//	24-70     its 10x runs failed (create          -
//	          timeouts); warm-up create 12852 vs 9195
//
// (The machine was shared with four other helpers' builds and e2e runs: raw docker
// itself took 0.9-5.5 s. engine-cpu-ms counts whatever else used dockerd meanwhile.)
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
	// The two alternate, in turn first, so that on a machine whose load comes and goes
	// both see the same load and the ratio is of one run.
	var gw, raw latencies
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			gw = append(gw, viaGateway())
			raw = append(raw, rawDocker())
		} else {
			raw = append(raw, rawDocker())
			gw = append(gw, viaGateway())
		}
	}
	b.StopTimer()
	gw.report(b)
	base, rawP99 := raw.ms()
	b.ReportMetric(base, "raw-p50-ms")
	b.ReportMetric(rawP99, "raw-p99-ms")
	b.ReportMetric(float64(gwCPU.Milliseconds())/float64(b.N), "engine-cpu-ms")
	b.ReportMetric(float64(rawCPU.Milliseconds())/float64(b.N), "raw-engine-cpu-ms")
	if os.Getenv("SANDGATE_E2E_DUMP_STEPS") != "" {
		// With SANDGATE_E2E_GATEWAY_ENV=SANDGATE_LOG_LEVEL=DEBUG and -v: each create's steps.
		for _, l := range strings.Split(g.proc.Logs(), "\n") {
			if strings.Contains(l, "sandbox container created") {
				b.Log(l)
			}
		}
	}
	p50, p99 := gw.ms()
	testenv.RecordFigure(b, testenv.Figure{Name: "cold_create_first_command", Unit: "ms", P50: p50, P99: p99, BaselineP50: base, Target: "<= 1.2x"})
}

// BenchmarkTrueRoundTrip measures POST /command {"true"} through the gateway's proxy,
// beside the same call straight to the agent at the container's address.
//
// Where the time goes (profiled on the 2-core machine: the gateway with SANDGATE_ADMIN's
// /debug/pprof/profile during this benchmark, the agent with BenchmarkCommandTrue
// -cpuprofile, its syscalls with strace -f -c). Neither process is CPU-bound: the
// gateway spends about 0.25 ms of CPU per call, the agent less; the rest is waiting.
//
//   - direct, before: most of it was the shell itself. `bash -c true` started with os/exec
//     costs 1-2 ms here (BenchmarkCommandTrue/raw: fork, exec, bash's dynamic linking and
//     start-up, some 70 sigactions and 30 opens, exit); the agent adds its HTTP exchange,
//     two pipes, pidfd wait and the drain of both pipes. Spawn-path costs removed earlier:
//     three stats per command looking for bash (found once now), an open and close of
//     /dev/null per command (one shared fd), and two of the four writes of each answer
//     (headers now leave with the init event, the last event with the end of the
//     response: one packet each).
//   - direct, now: a plain program invocation (`true`, `python3 main.py`, `ls -la`: plain
//     words, no builtin or keyword, found on PATH) is exec'd by the agent itself with the
//     argv and environment bash would give it (sandbox-agent/agent/directexec.go; anything
//     else still goes through bash, and `\true` is the same command through bash): bash's
//     start-up is gone and what is left is one fork+exec of /usr/bin/true (the raw-exec
//     baseline, ~1 ms CPU here), the PATH lookup (a stat per PATH element up to the
//     program, a getcwd), the HTTP exchange and the two pipes. The stream's 64 KiB writer
//     and the two pumps' 64 KiB readers, allocated and zeroed per command before (with
//     the GC work they caused, most of the agent's own CPU per command), come from pools.
//     BenchmarkCommandTrue, old and new agent alternated, load 14: `true` 3.8-4.5 → 1.8-2.4
//     ms CPU per command (agent, client and child), 4.9-5.7 → 2.3-4.0 ms wall.
//   - through the gateway (+0.3-0.5 ms quiet, +1.1-1.3 ms at load 15): one more
//     keep-alive hop (Caddy's reverse_proxy, its transport keeps 64 idle connections per
//     sandbox) and about half of the gateway's CPU in syscalls (reads and writes on both
//     connections); sandgate's own work is small: route from memory (recordcache.go),
//     access header MAC with the key's hash from memory (no Redis read per call any more:
//     accesstoken.go), the Rego decision from its cache (policy.accessCache), the
//     command's audit event queued and written to Redis in batches (renewonaccess.go).
//   - the figure, old and new agent binaries alternated (same gateway, 300 calls each, four
//     rounds, load 10-16): through the gateway p50 6.2 / 7.1 / 7.0 / 7.1 → 3.6 / 4.1 / 4.7 /
//     3.6 ms, direct 4.8 / 5.0 / 6.2 / 4.5 → 2.2 / 3.0 / 3.0 / 2.6 ms. The agent's own CPU
//     per command (BenchmarkCommandTrue -cpuprofile, agent and client) went from 2.1 to
//     0.9 ms: the GC work of the per-command buffers is gone, and what is left is
//     mostly syscalls (the vfork and exec's parent side, the two pipes, the writes).
//   - left: the fork+exec of the program itself, the extra hop's syscalls and the loaded
//     machine's scheduling (p99 is dominated by other processes' CPU).
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
// namespace holders (runtimes/docker/holders.go) again; an old gateway has none and
// returns at once.
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
