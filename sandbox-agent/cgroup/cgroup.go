// Package cgroup reads the CPU and memory usage of the cgroup the agent runs in, the
// sandbox container's own, so that /metrics reports the sandbox and not the host. It
// understands cgroup v2 (unified) and v1 (including hybrid hosts) and, where neither
// answers, falls back to /proc for the whole machine.
package cgroup

import (
	"bufio"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// Root is where cgroup filesystems are mounted.
var Root = "/sys/fs/cgroup"

// Sample is one reading.
type Sample struct {
	// CPUUsageNanos is the cumulative CPU time used by the cgroup.
	CPUUsageNanos uint64
	// CPULimit is the number of CPUs the cgroup may use (quota/period, else the CPUs
	// visible to the process).
	CPULimit float64
	// MemUsedBytes is the memory in use, without reclaimable page cache.
	MemUsedBytes uint64
	// MemLimitBytes is the memory limit, or the machine's memory when unlimited.
	MemLimitBytes uint64
	// Source names where the numbers came from: "cgroup2", "cgroup1" or "proc".
	Source string
}

// Read samples the calling process's cgroup.
func Read() (Sample, error) {
	groups, err := parseProcCgroup("/proc/self/cgroup")
	if err != nil {
		return readProc()
	}
	if path, ok := groups[""]; ok && fileExists(filepath.Join(Root, "cgroup.controllers")) {
		if s, err := readV2(resolve("", path)); err == nil {
			return s, nil
		}
	}
	if s, err := readV1(groups); err == nil {
		return s, nil
	}
	return readProc()
}

// parseProcCgroup maps controller → path; the v2 entry has controller "".
func parseProcCgroup(p string) (map[string]string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, sc.Err()
}

// resolve finds the directory of a cgroup. Inside a container without a cgroup
// namespace, /proc/self/cgroup names the host path (/docker/<id>) while the container's
// own cgroup is mounted at the hierarchy root, so fall back to the root.
func resolve(hierarchy, path string) string {
	base := filepath.Join(Root, hierarchy)
	if dir := filepath.Join(base, path); path != "" && fileExists(dir) {
		return dir
	}
	return base
}

func readV2(dir string) (Sample, error) {
	s := Sample{Source: "cgroup2", CPULimit: visibleCPUs()}
	stat, err := readKeyed(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return s, err
	}
	s.CPUUsageNanos = stat["usage_usec"] * 1000
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.max")); err == nil {
		f := strings.Fields(string(b))
		if len(f) == 2 && f[0] != "max" {
			q, _ := strconv.ParseFloat(f[0], 64)
			p, _ := strconv.ParseFloat(f[1], 64)
			if q > 0 && p > 0 {
				s.CPULimit = math.Min(q/p, s.CPULimit)
			}
		}
	}
	used, err := readUint(filepath.Join(dir, "memory.current"))
	if err != nil {
		return s, err
	}
	if ms, err := readKeyed(filepath.Join(dir, "memory.stat")); err == nil && ms["inactive_file"] < used {
		used -= ms["inactive_file"]
	}
	s.MemUsedBytes = used
	s.MemLimitBytes = machineMemory()
	if b, err := os.ReadFile(filepath.Join(dir, "memory.max")); err == nil {
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && v < s.MemLimitBytes {
			s.MemLimitBytes = v
		}
	}
	return s, nil
}

func readV1(groups map[string]string) (Sample, error) {
	s := Sample{Source: "cgroup1", CPULimit: visibleCPUs()}
	memPath, ok := groups["memory"]
	if !ok {
		return s, errors.New("cgroup: no v1 memory controller")
	}
	memDir := resolve("memory", memPath)
	used, err := readUint(filepath.Join(memDir, "memory.usage_in_bytes"))
	if err != nil {
		return s, err
	}
	if ms, err := readKeyed(filepath.Join(memDir, "memory.stat")); err == nil && ms["total_inactive_file"] < used {
		used -= ms["total_inactive_file"]
	}
	s.MemUsedBytes = used
	s.MemLimitBytes = machineMemory()
	if v, err := readUint(filepath.Join(memDir, "memory.limit_in_bytes")); err == nil && v < s.MemLimitBytes {
		s.MemLimitBytes = v
	}
	// cpuacct may be mounted alone or together with cpu ("cpu,cpuacct").
	for _, h := range []string{"cpuacct", "cpu,cpuacct", "cpuacct,cpu"} {
		if p, ok := groups["cpuacct"]; ok {
			if v, err := readUint(filepath.Join(resolve(h, p), "cpuacct.usage")); err == nil {
				s.CPUUsageNanos = v
				break
			}
		}
	}
	for _, h := range []string{"cpu", "cpu,cpuacct", "cpuacct,cpu"} {
		if p, ok := groups["cpu"]; ok {
			dir := resolve(h, p)
			q, err1 := readInt(filepath.Join(dir, "cpu.cfs_quota_us"))
			per, err2 := readInt(filepath.Join(dir, "cpu.cfs_period_us"))
			if err1 == nil && err2 == nil {
				if q > 0 && per > 0 {
					s.CPULimit = math.Min(float64(q)/float64(per), s.CPULimit)
				}
				break
			}
		}
	}
	return s, nil
}

// readProc is the fallback without a readable cgroup: whole-machine figures.
func readProc() (Sample, error) {
	s := Sample{Source: "proc", CPULimit: visibleCPUs(), MemLimitBytes: machineMemory()}
	mi, err := readKeyedKB("/proc/meminfo")
	if err != nil {
		return s, err
	}
	if avail, ok := mi["MemAvailable"]; ok && avail < s.MemLimitBytes {
		s.MemUsedBytes = s.MemLimitBytes - avail
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	var ticks uint64
	for i, f := range fields[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		v, _ := strconv.ParseUint(f, 10, 64)
		ticks += v
	}
	s.CPUUsageNanos = ticks * 1e7 // USER_HZ is 100 on Linux
	return s, nil
}

// visibleCPUs is the number of CPUs this process may run on (its affinity mask).
func visibleCPUs() float64 { return float64(runtime.NumCPU()) }

func machineMemory() uint64 {
	mi, err := readKeyedKB("/proc/meminfo")
	if err != nil {
		return 0
	}
	return mi["MemTotal"]
}

func readKeyedKB(p string) (map[string]uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseUint(f[0], 10, 64)
		if len(f) > 1 && f[1] == "kB" {
			n *= 1024
		}
		out[k] = n
	}
	return out, nil
}

func readKeyed(p string) (map[string]uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 {
			n, _ := strconv.ParseUint(f[1], 10, 64)
			out[f[0]] = n
		}
	}
	return out, nil
}

func readUint(p string) (uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
