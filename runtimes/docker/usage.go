package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
)

// Usage reads a sandbox's resource use from the engine's stats (one shot, no wait for
// a second sample) and, when withDisk, the size of its writable layer (the engine walks
// the layer for it, so callers ask rarely).
func (r *Runtime) Usage(ctx context.Context, id string, withDisk bool) (runtimes.Usage, error) {
	res, err := r.cli.ContainerStats(ctx, containerName(id), client.ContainerStatsOptions{})
	if err != nil {
		return runtimes.Usage{}, mapErr(id, err)
	}
	defer res.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		return runtimes.Usage{}, fmt.Errorf("decode stats of %s: %w", id, err)
	}
	u := runtimes.Usage{
		Time:             st.Read,
		CPUNanos:         st.CPUStats.CPUUsage.TotalUsage,
		MemoryLimitBytes: st.MemoryStats.Limit,
		MemoryPeakBytes:  st.MemoryStats.MaxUsage,
		Pids:             st.PidsStats.Current,
		PidsKnown:        true,
	}
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
	for _, n := range st.Networks {
		u.NetRxBytes += n.RxBytes
		u.NetTxBytes += n.TxBytes
		u.NetKnown = true
	}
	if !u.NetKnown {
		// In a holder's namespace (holders.go) the engine counts the traffic on the
		// holder, whose interface it is.
		r.holderNetUsage(ctx, id, &u)
	}
	insp, err := r.cli.ContainerInspect(ctx, containerName(id), client.ContainerInspectOptions{Size: withDisk})
	if err != nil {
		return runtimes.Usage{}, mapErr(id, err)
	}
	if hc := insp.Container.HostConfig; hc != nil && hc.NanoCPUs > 0 {
		u.CPULimit = float64(hc.NanoCPUs) / 1e9
	}
	if withDisk && insp.Container.SizeRw != nil {
		u.DiskBytes, u.DiskKnown = *insp.Container.SizeRw, true
	}
	return u, nil
}

// holderNetUsage adds the network counters of sandbox id's namespace holder, if it has one.
func (r *Runtime) holderNetUsage(ctx context.Context, id string, u *runtimes.Usage) {
	res, err := r.cli.ContainerStats(ctx, holderName(id), client.ContainerStatsOptions{})
	if err != nil {
		return
	}
	defer res.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		return
	}
	for _, n := range st.Networks {
		u.NetRxBytes += n.RxBytes
		u.NetTxBytes += n.TxBytes
		u.NetKnown = true
	}
}
