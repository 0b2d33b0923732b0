package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkBatchFirstCommand is the agents' side of a batch's first commands (e2e
// BenchmarkBatch100's answered and its direct-agent baseline): batchAgents agents, each
// its own `sandbox-agent init` process as in its own container, idle for batchIdle, then
// one `true` each, all at once, each over a fresh connection. wall-ms is until the last
// answer, agents-cpu-ms the CPU of all agents and their commands in the round (the
// cpuacct cgroup they run in, or /proc's tick counts without one), idle-cpu-ms theirs
// over the idle time before it. raw-spawn is the floor: the same number of `true`
// processes started at once by one process.
func BenchmarkBatchFirstCommand(b *testing.B) {
	n := envInt("SANDGATE_BENCH_AGENTS", 100)
	idle := time.Duration(envInt("SANDGATE_BENCH_IDLE_MS", 1000)) * time.Millisecond
	bin := buildAgent(b)
	cg := newCPUGroup(b)
	agents := startAgents(b, bin, n, cg)
	b.Run("agents", func(b *testing.B) {
		defer profileMachine(b)()
		var walls, cpus, idles []float64
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			cpuIdle := cg.usage(agents)
			time.Sleep(idle)
			cpu0 := cg.usage(agents)
			idles = append(idles, ms(cpu0-cpuIdle))
			b.StartTimer()
			t0 := time.Now()
			firstCommands(b, agents)
			walls = append(walls, ms(time.Since(t0)))
			b.StopTimer()
			// Let the agents finish what follows an answer (the wait, the reaper) before
			// the CPU is read.
			time.Sleep(200 * time.Millisecond)
			cpus = append(cpus, ms(cg.usage(agents)-cpu0))
			b.StartTimer()
		}
		b.ReportMetric(median(walls), "wall-ms")
		b.ReportMetric(median(cpus), "agents-cpu-ms")
		b.ReportMetric(median(cpus)*1000/float64(n), "cpu-µs/command")
		b.ReportMetric(median(idles), "idle-cpu-ms")
	})
	b.Run("raw-spawn", func(b *testing.B) {
		var walls, cpus []float64
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			time.Sleep(idle)
			cpu0 := selfAndChildrenCPU()
			b.StartTimer()
			t0 := time.Now()
			var wg sync.WaitGroup
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := exec.Command("true").Run(); err != nil {
						b.Error(err)
					}
				}()
			}
			wg.Wait()
			walls = append(walls, ms(time.Since(t0)))
			cpus = append(cpus, ms(selfAndChildrenCPU()-cpu0))
		}
		b.ReportMetric(median(walls), "wall-ms")
		b.ReportMetric(median(cpus), "cpu-ms")
		b.ReportMetric(median(cpus)*1000/float64(n), "cpu-µs/command")
	})
}

// profileMachine records the whole machine with `perf record -a -g` into
// $SANDGATE_BENCH_PERF while the rounds run, when that is set (see where the agents'
// CPU goes: perf report --comm sandbox-agent).
func profileMachine(b *testing.B) func() {
	out := os.Getenv("SANDGATE_BENCH_PERF")
	if out == "" || b.N == 1 {
		return func() {}
	}
	perf := exec.Command("perf", "record", "-a", "-g", "-o", out)
	if err := perf.Start(); err != nil {
		b.Logf("perf: %v", err)
		return func() {}
	}
	time.Sleep(500 * time.Millisecond) // perf's own start
	return func() {
		_ = perf.Process.Signal(os.Interrupt)
		_ = perf.Wait()
	}
}

type benchAgent struct {
	base string
	cmd  *exec.Cmd
}

const benchToken = "bench-token"

// firstCommands sends `true` to every agent at once, each over a new connection.
func firstCommands(b *testing.B, agents []*benchAgent) {
	tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", a.base+"/command", strings.NewReader(`{"command":"true"}`))
			req.Header.Set("X-EXECD-ACCESS-TOKEN", benchToken)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !bytes.Contains(data, []byte(`"type":"execution_complete"`)) {
				b.Errorf("%s: %d %s", a.base, resp.StatusCode, data)
			}
		}()
	}
	wg.Wait()
}

// buildAgent builds the agent as the images ship it (static), with its symbols so that
// a profiler can name its functions, or returns $SANDGATE_BENCH_AGENT_BIN (to compare
// two builds of the agent).
func buildAgent(b *testing.B) string {
	if bin := os.Getenv("SANDGATE_BENCH_AGENT_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(b.TempDir(), "sandbox-agent")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build agent: %v: %s", err, out)
	}
	return bin
}

// startAgents starts n agents on loopback ports and waits until each answers its ping.
func startAgents(b *testing.B, bin string, n int, cg *cpuGroup) []*benchAgent {
	agents := make([]*benchAgent, 0, n)
	b.Cleanup(func() {
		// The whole process group: the agent and its entrypoint, or unshare, whose death
		// kills its namespace's PID 1 (the agent) and with it the namespace.
		for _, a := range agents {
			_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		}
		for _, a := range agents {
			_ = a.cmd.Wait()
		}
	})
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		argv := []string{bin, "init", "--", "tail", "-f", "/dev/null"}
		if cg.pidNamespaces {
			// As in a container: the agent is PID 1 of its own pid namespace, with a /proc
			// of its own (what its orphan reaper scans), inside the cpuacct group from its
			// first instruction (the shell joins it before it execs).
			argv = append([]string{"sh", "-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(cg.dir, "cgroup.procs"),
				"unshare", "--pid", "--fork", "--mount-proc", "--kill-child"}, argv...)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
			"SANDGATE_AGENT_ADDR=" + addr, "SANDGATE_AGENT_TOKEN=" + benchToken}
		cmd.Env = append(cmd.Env, strings.Fields(os.Getenv("SANDGATE_BENCH_AGENT_ENV"))...)
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		if !cg.pidNamespaces {
			cg.add(b, cmd.Process.Pid)
		}
		agents = append(agents, &benchAgent{base: "http://" + addr, cmd: cmd})
	}
	client := &http.Client{Timeout: time.Second}
	for _, a := range agents {
		deadline := time.Now().Add(30 * time.Second)
		for {
			req, _ := http.NewRequest("GET", a.base+"/ping", nil)
			req.Header.Set("X-EXECD-ACCESS-TOKEN", benchToken)
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				b.Fatalf("agent %s does not answer: %v", a.base, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	client.CloseIdleConnections()
	return agents
}

// cpuGroup is a cgroup v1 cpuacct group holding the agents, whose usage counts their
// commands too at nanosecond resolution. Without one (no cgroup v1 cpuacct, not root)
// usage adds up /proc's tick counts of the agents and their reaped children.
type cpuGroup struct {
	dir string
	// pidNamespaces: each agent runs in a pid namespace of its own (unshare, as root).
	pidNamespaces bool
}

func newCPUGroup(b *testing.B) *cpuGroup {
	dir := fmt.Sprintf("/sys/fs/cgroup/cpuacct/sandgate-bench-%d", os.Getpid())
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Logf("no cpuacct group (%v): CPU from /proc in ticks", err)
		return &cpuGroup{}
	}
	b.Cleanup(func() {
		// Once the agents are gone (cleanups run last first, and startAgents' ran).
		for range 50 {
			if os.Remove(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		b.Logf("cgroup %s not removed", dir)
	})
	_, err := exec.LookPath("unshare")
	return &cpuGroup{dir: dir, pidNamespaces: err == nil}
}

func (g *cpuGroup) add(b *testing.B, pid int) {
	if g.dir == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		b.Fatal(err)
	}
}

func (g *cpuGroup) usage(agents []*benchAgent) time.Duration {
	if g.dir != "" {
		data, err := os.ReadFile(filepath.Join(g.dir, "cpuacct.usage"))
		if err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
			return time.Duration(n)
		}
	}
	var ticks int64
	for _, a := range agents {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", a.cmd.Process.Pid))
		if err != nil {
			continue
		}
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
			v, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += v
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

func selfAndChildrenCPU() time.Duration {
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano())
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
