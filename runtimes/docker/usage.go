package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
)

// usageFacts is what a usage reading needs of a sandbox beyond its stats and what does
// not change in the sandbox's life: its workload container's id, its CPU limit and
// whether it is in a holder's namespace (holders.go). One inspect learns them; every
// later reading is a stats call alone (and one of the holder's, for a sandbox in one
// whose own stats show no network).
type usageFacts struct {
	containerID string
	cpuLimit    float64
	inHolder    bool
}

// usageCache keeps each sandbox's usageFacts from its first reading until the sandbox
// is deleted, or no longer listed (a sandbox removed by another gateway).
type usageCache struct {
	mu    sync.Mutex
	facts map[string]usageFacts
}

func (c *usageCache) get(id string) (usageFacts, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.facts[id]
	return f, ok
}

func (c *usageCache) put(id string, f usageFacts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.facts == nil {
		c.facts = make(map[string]usageFacts)
	}
	c.facts[id] = f
}

func (c *usageCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.facts, id)
}

// keepOnly forgets the sandboxes a List did not return.
func (c *usageCache) keepOnly(listed []runtimes.Instance) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.facts) == 0 {
		return
	}
	ids := make(map[string]bool, len(listed))
	for _, inst := range listed {
		ids[inst.ID] = true
	}
	for id := range c.facts {
		if !ids[id] {
			delete(c.facts, id)
		}
	}
}

// Usage reads a sandbox's resource use from the engine's stats (one shot, no wait for
// a second sample) and, when withDisk, the size of its writable layer (the engine walks
// the layer for it, so callers ask rarely). The first reading of a sandbox, and one with
// withDisk, also inspects its workload (usageFacts); the others make no inspect.
func (r *Runtime) Usage(ctx context.Context, id string, withDisk bool) (runtimes.Usage, error) {
	facts, known := r.usage.get(id)
	var u runtimes.Usage
	if !known || withDisk {
		insp, err := r.cli.ContainerInspect(ctx, containerName(id), client.ContainerInspectOptions{Size: withDisk})
		if err != nil {
			return runtimes.Usage{}, mapErr(id, err)
		}
		facts = usageFacts{containerID: insp.Container.ID}
		if hc := insp.Container.HostConfig; hc != nil && hc.NanoCPUs > 0 {
			facts.cpuLimit = float64(hc.NanoCPUs) / 1e9
		}
		if cfg := insp.Container.Config; cfg != nil && cfg.Labels[labelHolder] != "" {
			facts.inHolder = true
		}
		r.usage.put(id, facts)
		if withDisk && insp.Container.SizeRw != nil {
			u.DiskBytes, u.DiskKnown = *insp.Container.SizeRw, true
		}
	}
	// By the container's id, not its name: the facts are of that container.
	st, err := r.stats(ctx, facts.containerID)
	if cerrdefs.IsNotFound(err) {
		r.usage.drop(id)
	}
	if err != nil {
		return runtimes.Usage{}, mapErr(id, err)
	}
	u.Time = st.Read
	u.CPUNanos = st.CPUStats.CPUUsage.TotalUsage
	u.CPULimit = facts.cpuLimit
	u.MemoryLimitBytes = st.MemoryStats.Limit
	u.MemoryPeakBytes = st.MemoryStats.MaxUsage
	u.Pids, u.PidsKnown = st.PidsStats.Current, true
	if u.Time.IsZero() {
		u.Time = time.Now()
	}
	// What `docker stats` shows: usage less the page cache the kernel may drop
	// (inactive_file on cgroup v2, total_inactive_file on v1).
	u.MemoryBytes = st.MemoryStats.Usage
	for _, k := range []string{"inactive_file", "total_inactive_file"} {
		if c, ok := st.MemoryStats.Stats[k]; ok && c <= u.MemoryBytes {
			u.MemoryBytes -= c
			break
		}
	}
	addNetUsage(st, &u)
	if !u.NetKnown && facts.inHolder {
		// In a holder's namespace an engine may count the traffic on the holder only,
		// whose interface it is.
		if hst, err := r.stats(ctx, holderName(id)); err == nil {
			addNetUsage(hst, &u)
		}
	}
	return u, nil
}

// stats is one container's one-shot stats.
func (r *Runtime) stats(ctx context.Context, ref string) (container.StatsResponse, error) {
	res, err := r.cli.ContainerStats(ctx, ref, client.ContainerStatsOptions{})
	if err != nil {
		return container.StatsResponse{}, err
	}
	defer res.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		return container.StatsResponse{}, fmt.Errorf("decode stats of %s: %w", ref, err)
	}
	return st, nil
}

// addNetUsage adds the network counters of st to u.
func addNetUsage(st container.StatsResponse, u *runtimes.Usage) {
	for _, n := range st.Networks {
		u.NetRxBytes += n.RxBytes
		u.NetTxBytes += n.TxBytes
		u.NetKnown = true
	}
}
