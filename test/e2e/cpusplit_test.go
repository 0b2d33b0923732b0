package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// CPU split of a round of creates, by process group (SANDGATE_E2E_CPU_SPLIT=1 with -v):
// CPU seconds do not depend on how loaded the machine is the way wall time does, and
// on a 2-core machine with many creates in flight the CPU work per sandbox, summed over
// every process that takes part, is what bounds how fast a fleet comes up.
//
// Two looks at /proc and at the Docker containers' cgroups, at the start and at the end
// of a round, with every container of the round still running:
//   - the gateway, dockerd and containerd (and the Redis server the test started): their
//     own CPU and that of their waited-for children (dockerd's iptables, containerd's
//     `shim start`);
//   - the containerd-shim of each container of the round, with the runc calls it waited
//     for (create, start);
//   - each container of the round by its role, from its cgroup (cpuacct.usage): the
//     processes started inside it, from runc's init on;
//   - kernel threads (network namespace setup and teardown runs in some, but they serve
//     the whole machine), and the machine's busy time (/proc/stat), which counts the
//     other work on the machine too.
//
// A process that started and ended inside the round is counted only through the one
// that waited for it, when that one is counted; the shims' parent is init.

// cpuSplitOn reports whether the benchmark is to measure its CPU split.
func cpuSplitOn() bool { return os.Getenv("SANDGATE_E2E_CPU_SPLIT") != "" }

// clockTick is the unit of /proc/<pid>/stat's CPU fields (USER_HZ: 100 on Linux).
const clockTick = 10 * time.Millisecond

// procKey tells a process from a later one with the same pid.
type procKey struct {
	pid   int
	start string
}

// procCPU is one process's CPU at a look, in clock ticks.
type procCPU struct {
	comm     string
	ppid     int
	kthread  bool
	own      int64  // utime + stime
	children int64  // cutime + cstime: its waited-for children's
	shimOf   string // the container a containerd-shim serves
}

// enforcerProcessKey prefixes a sandbox id among cpuLook.containers: the cgroup of its
// enforcer process.
const enforcerProcessKey = "enforcer-process:"

// cpuLook is one look at the machine's CPU accounting.
type cpuLook struct {
	procs map[procKey]procCPU
	// containers is each Docker container's cgroup CPU (ns), by container id, and each
	// enforcer process's (enforcerProcessKey + sandbox id).
	containers map[string]int64
	busy       int64 // the machine's non-idle ticks (/proc/stat)
	load       string
}

func lookAtCPU() cpuLook {
	l := cpuLook{procs: map[procKey]procCPU{}, containers: map[string]int64{}}
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(data)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 20 {
			continue
		}
		num := func(i int) int64 { n, _ := strconv.ParseInt(f[i], 10, 64); return n }
		// After the command: state(0) ppid(1) … flags(6) … utime(11) stime(12)
		// cutime(13) cstime(14) … starttime(19).
		p := procCPU{comm: s[open+1 : end], ppid: int(num(1)), kthread: num(6)&0x00200000 != 0,
			own: num(11) + num(12), children: num(13) + num(14)}
		if p.comm == "containerd-shim" {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			args := strings.Split(string(cmdline), "\x00")
			for i := 0; i+1 < len(args); i++ {
				if args[i] == "-id" {
					p.shimOf = args[i+1]
				}
			}
		}
		l.procs[procKey{pid, f[19]}] = p
	}
	dirs, _ := filepath.Glob("/sys/fs/cgroup/cpuacct/docker/*/cpuacct.usage")
	// Enforcer processes' cgroups (runtimes/docker/enforcercgroup.go), by sandbox id.
	processes, _ := filepath.Glob("/sys/fs/cgroup/cpuacct/sandgate-enforcers/*/cpuacct.usage")
	for _, path := range append(dirs, processes...) {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		ns, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		key := filepath.Base(filepath.Dir(path))
		if strings.Contains(path, "/sandgate-enforcers/") {
			key = enforcerProcessKey + key
		}
		l.containers[key] = ns
	}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(data), "\n")
		for i, v := range strings.Fields(line)[1:] {
			if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is in user already
				continue
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			l.busy += n
		}
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		l.load = strings.Join(strings.Fields(string(data))[:3], " ")
	}
	return l
}

// cpuSplit is the CPU of one round by group, in milliseconds.
type cpuSplit struct {
	groups map[string]float64
	busy   float64
	load   string
}

// splitCPU divides what was used between looks before and after by group. gateway is
// the gateway's pid (0 on the raw side); roles gives the role of each container of the
// round by id.
func splitCPU(before, after cpuLook, gateway int, roles map[string]string) cpuSplit {
	out := cpuSplit{groups: map[string]float64{}, busy: float64((after.busy - before.busy) * int64(clockTick/time.Millisecond)), load: after.load}
	self := os.Getpid()
	for k, p := range after.procs {
		was := before.procs[k] // zero for a process started in the round
		group := ""
		switch {
		case k.pid == gateway:
			group = "gateway"
		case p.comm == "dockerd":
			group = "dockerd"
		case p.comm == "containerd":
			group = "containerd"
		case p.comm == "redis-server" && p.ppid == self:
			group = "redis"
		case p.comm == "containerd-shim" && roles[p.shimOf] != "":
			group = "shim+runc"
		case p.kthread:
			group = "kernel threads (whole machine)"
		default:
			continue
		}
		out.groups[group] += float64((p.own + p.children - was.own - was.children) * int64(clockTick/time.Millisecond))
	}
	for id, ns := range after.containers {
		if role := roles[id]; role != "" {
			out.groups["in "+role] += float64(ns-before.containers[id]) / 1e6
		}
	}
	return out
}

// log writes the split per sandbox of a round of n.
func (c cpuSplit) log(b *testing.B, side string, n int) {
	names := make([]string, 0, len(c.groups))
	attributed := 0.0
	for name, ms := range c.groups {
		names = append(names, name)
		if !strings.HasPrefix(name, "kernel") {
			attributed += ms
		}
	}
	sort.Strings(names)
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: CPU ms per sandbox (round of %d, load %s): attributed %.0f, machine busy %.0f", side, n, c.load, attributed/float64(n), c.busy/float64(n))
	for _, name := range names {
		fmt.Fprintf(&sb, "; %s %.1f", name, c.groups[name]/float64(n))
	}
	b.Log(sb.String())
}

// sandboxRoles names the containers of the sandboxes ids on network by role: each
// sandbox's workload, enforcer and namespace holder, and the spare holders.
func sandboxRoles(b *testing.B, cli *client.Client, network string, ids []string) map[string]string {
	res, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true})
	if err != nil {
		b.Fatal(err)
	}
	role := map[string]string{}
	for _, id := range ids {
		role["/sandgate-"+id] = "workload"
		role["/sandgate-"+id+"-egress"] = "enforcer"
		role["/sandgate-"+id+"-net"] = "holder"
	}
	roles := map[string]string{}
	for _, id := range ids {
		roles[enforcerProcessKey+id] = "enforcer"
	}
	for _, c := range res.Items {
		for _, name := range c.Names {
			if r := role[name]; r != "" {
				roles[c.ID] = r
			} else if _, on := c.NetworkSettings.Networks[network]; on && strings.HasPrefix(name, "/sandgate-spare-") {
				roles[c.ID] = "holder"
			}
		}
	}
	return roles
}
