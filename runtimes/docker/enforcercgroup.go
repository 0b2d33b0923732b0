package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// The cgroups of enforcer processes (enforcerprocess.go).
//
// Each enforcer process is put into a cgroup of its own, sandgate-enforcers/<id>, in
// each of the host's version 1 hierarchies that bound or count it: memory (the
// sidecar's 128 MiB, swap included), pids (64: the Go runtime's threads) and cpuacct
// (its CPU, for an operator's and a benchmark's reading). The cgroups are made before
// the process starts and removed once it is gone. A host with the unified (version 2)
// hierarchy gets enforcer sidecars instead (Options.Enforcer "auto").

// cgroupV1Root is where the host's version 1 hierarchies are mounted.
const cgroupV1Root = "/sys/fs/cgroup"

// enforcerCgroupParent is the cgroup, in each hierarchy, under which enforcers' are made.
const enforcerCgroupParent = "sandgate-enforcers"

// Limits of an enforcer process, those its sidecar container had.
const (
	enforcerMemoryBytes = 128 << 20
	enforcerPids        = 64
)

// enforcerCgroups makes and removes the enforcers' cgroups under root.
type enforcerCgroups struct {
	root string
}

// enforcerHierarchies are the version 1 hierarchies an enforcer's cgroup is made in,
// and the limits written there.
var enforcerHierarchies = []struct {
	name   string
	limits map[string]string
}{
	{"memory", map[string]string{
		"memory.limit_in_bytes": strconv.Itoa(enforcerMemoryBytes),
		// Writable only where swap accounting is on: best effort (see make).
		"memory.memsw.limit_in_bytes": strconv.Itoa(enforcerMemoryBytes),
	}},
	{"pids", map[string]string{"pids.max": strconv.Itoa(enforcerPids)}},
	{"cpuacct", nil},
}

// usableCgroupsV1 reports whether root holds writable version 1 memory, pids and
// cpuacct hierarchies (the unified hierarchy has cgroup.controllers at its root).
func usableCgroupsV1(root string) error {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return errors.New("the host's cgroups are version 2")
	}
	for _, h := range enforcerHierarchies {
		dir := filepath.Join(root, h.name, enforcerCgroupParent)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
	}
	return nil
}

func (c enforcerCgroups) path(hierarchy, id string) string {
	return filepath.Join(c.root, hierarchy, enforcerCgroupParent, id)
}

// make creates sandbox id's cgroups with their limits.
func (c enforcerCgroups) make(id string) error {
	for _, h := range enforcerHierarchies {
		dir := c.path(h.name, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("enforcer cgroup: %w", err)
		}
		for file, value := range h.limits {
			err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0)
			if err != nil && file != "memory.memsw.limit_in_bytes" {
				return fmt.Errorf("enforcer cgroup limit %s: %w", file, err)
			}
		}
	}
	return nil
}

// add moves process pid into sandbox id's cgroups.
func (c enforcerCgroups) add(id string, pid int) error {
	for _, h := range enforcerHierarchies {
		if err := os.WriteFile(filepath.Join(c.path(h.name, id), "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("enforcer cgroup: %w", err)
		}
	}
	return nil
}

// cpuNanos is the CPU sandbox id's enforcer processes used, in nanoseconds.
func (c enforcerCgroups) cpuNanos(id string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(c.path("cpuacct", id), "cpuacct.usage"))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(trimNewline(b)), 10, 64)
}

// remove removes sandbox id's cgroups, once the processes in them are gone (a cgroup
// whose last process is exiting cannot be removed for a moment).
func (c enforcerCgroups) remove(id string) {
	for _, h := range enforcerHierarchies {
		dir := c.path(h.name, id)
		for try := 0; try < 50; try++ {
			err := os.Remove(dir)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}
