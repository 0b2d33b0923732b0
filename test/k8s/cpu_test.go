package k8s_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// processCPU is the CPU time process pid's threads have run (each thread's
// /proc/…/schedstat, in ns: finer than the 10 ms ticks of /proc/…/stat, which a batch of
// 100's few milliseconds would not show). Threads that ended are not counted; 0 when the
// process is gone.
func processCPU(pid int) time.Duration {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/schedstat")
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, _ := strconv.ParseInt(f[0], 10, 64)
		sum += time.Duration(ns)
	}
	return sum
}

// cpuOf sums processCPU over pids.
func cpuOf(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		sum += processCPU(pid)
	}
	return sum
}

// agentPids lists the agent processes of namespace's pods: the children of each `unshare`
// the runner started (the agent is PID 1 of its own namespace, the unshare's child).
func (a *agentRunner) agentPids(namespace string) []int {
	a.mu.Lock()
	var parents []int
	for _, p := range a.procs {
		if strings.HasPrefix(p.pod, namespace+"/") {
			parents = append(parents, p.cmd.Process.Pid)
		}
	}
	a.mu.Unlock()
	var out []int
	for _, pid := range parents {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
		if err != nil {
			continue
		}
		for _, c := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(c); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// redisCalls reads the shared redis-server's command counters (INFO commandstats) as
// "command" → calls, over one connection kept for it (a redis-cli between the claim and
// the pings would take the CPU the pings are measured on).
func redisCalls(t testing.TB) map[string]float64 {
	t.Helper()
	statsClientOnce.Do(func() {
		opt, err := redis.ParseURL(redisURL)
		if err != nil {
			panic(err)
		}
		statsClient = redis.NewClient(opt)
	})
	out, err := statsClient.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	calls := map[string]float64{}
	for _, l := range strings.Split(out, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(l, "cmdstat_")), ":calls=")
		if !ok || !strings.HasPrefix(l, "cmdstat_") {
			continue
		}
		n, _ := strconv.ParseFloat(strings.SplitN(v, ",", 2)[0], 64)
		calls[name] = n
	}
	return calls
}

var (
	statsClientOnce sync.Once
	statsClient     *redis.Client
)

// callsBetween formats what grew between two readings of redisCalls, most first.
func callsBetween(before, after map[string]float64) string {
	type c struct {
		name string
		n    float64
	}
	var cs []c
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			cs = append(cs, c{k, d})
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].n > cs[j].n })
	var b strings.Builder
	for _, x := range cs {
		fmt.Fprintf(&b, " %s %.0f", x.name, x.n)
	}
	return b.String()
}

// agentConns counts the gateway process pid's established connections to agents (port
// 44772): the keep-alive connections its proxy holds.
func agentConns(t testing.TB, pid int) int {
	t.Helper()
	out, err := exec.Command("ss", "-tnpH", "state", "established", "( dport = :44772 )").Output()
	if err != nil {
		t.Logf("ss: %v", err)
		return -1
	}
	return strings.Count(string(out), "pid="+strconv.Itoa(pid)+",")
}
