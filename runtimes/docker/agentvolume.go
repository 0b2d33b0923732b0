package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
)

// The agent binary reaches every container (workloads and enforcer sidecars) through
// one named volume per agent build, mounted read-only at agentBinDir, instead of a
// copy into each container: a copy is an engine call that unpacks 9 MB through the
// engine's untar helper before the workload can start (100-300 ms on the 2-core test
// machine, on the critical path of every cold create), a mount is part of the create
// call. The volume is filled once per gateway process (agentVolume), under a name that
// is the binary's hash, so a new build never changes what running sandboxes execute.
//
// Read-only is what makes sharing safe: no sandbox can change the binary that every
// other sandbox, and every enforcer, runs (root in a container has no CAP_SYS_ADMIN to
// remount it; TestAgentBinaryReadOnly). Only the short-lived filler container mounts
// it writable.

// agentBinDir is where the agent volume is mounted; agentPath is the binary in it.
const agentBinDir = agentDir + "/bin"

// agentDoneFile is written into the volume after the binary: a volume that has it was
// filled completely (a filler killed half-way leaves none, and the next fill redoes it).
const agentDoneFile = "sandbox-agent.sha256"

// roleAgentVolume marks the filler container (never started, removed at once).
const roleAgentVolume = "agent-volume"

// Roles (labelRole) of the volumes the runtime makes for the agent, beside labelNetwork
// (the runtime's network: the deployment whose sweep may remove them). The sweep
// (sweepAgentVolumes) takes only volumes so labelled; one made without labels is never
// taken for sandgate's.
const (
	// roleAgentDir marks a workload's agent directory (agentDirMount), which also
	// carries the sandbox's id and cluster.
	roleAgentDir = "agent-dir"
	// roleAgentBinary marks a volume holding an agent build (agentVolume).
	roleAgentBinary = "agent-binary"
)

// agentVolumePrefix begins the name of every agent binary volume; the rest is the
// build's hash.
const agentVolumePrefix = "sandgate-agent-"

// agentDirMount is the agent directory of the workload of spec: an anonymous volume of
// its own, created empty (never filled from the image) and removed with the container,
// with the agent volume mounted inside it. It holds what the runtime and the agent write
// into a workload (the start marker, the credential vault's trust files), writable even
// on a read-only root filesystem; and an engine commit leaves mounts out, so none of it
// is in a snapshot's image, and a sandbox made from a snapshot or a fork starts without
// it. Its labels let the sweep remove it when the container went by a removal that kept
// its volumes (an operator's `docker rm -f`).
func (r *Runtime) agentDirMount(spec runtimes.Spec) mount.Mount {
	labels := map[string]string{labelRole: roleAgentDir, labelNetwork: r.opts.Network, runtimes.LabelID: spec.ID}
	if c := spec.Labels[runtimes.LabelCluster]; c != "" {
		labels[runtimes.LabelCluster] = c
	}
	return mount.Mount{Type: mount.TypeVolume, Target: agentDir, VolumeOptions: &mount.VolumeOptions{NoCopy: true, Labels: labels}}
}

// agentBinaryLabels are the labels of an agent binary volume this runtime creates (the
// engine sets a volume's labels only when a mount creates it).
func (r *Runtime) agentBinaryLabels() map[string]string {
	return map[string]string{labelRole: roleAgentBinary, labelNetwork: r.opts.Network}
}

// agentMount is the read-only mount of the agent volume vol.
func (r *Runtime) agentMount(vol string) mount.Mount {
	return mount.Mount{Type: mount.TypeVolume, Source: vol, Target: agentBinDir, ReadOnly: true,
		VolumeOptions: &mount.VolumeOptions{NoCopy: true, Labels: r.agentBinaryLabels()}}
}

// agentVolume returns the name of the volume holding the current agent binary, filling
// it first when this process has not yet (image is any image present on the engine: the
// filler container is made from it and never started).
func (r *Runtime) agentVolume(ctx context.Context, image string) (string, error) {
	r.agentMu.Lock()
	defer r.agentMu.Unlock()
	fi, err := os.Stat(r.opts.AgentBinary)
	if err != nil {
		return "", fmt.Errorf("sandbox-agent binary %q: %w (build it with `make build`)", r.opts.AgentBinary, err)
	}
	if r.agentVol != "" && fi.ModTime().Equal(r.agentMod) {
		return r.agentVol, nil
	}
	bin, err := os.ReadFile(r.opts.AgentBinary)
	if err != nil {
		return "", fmt.Errorf("read sandbox-agent: %w", err)
	}
	sum := sha256.Sum256(bin)
	digest := hex.EncodeToString(sum[:])
	vol := agentVolumePrefix + digest[:16]
	created, err := r.createFiller(ctx, vol, image)
	if err != nil {
		return "", err
	}
	defer func() {
		_, _ = r.cli.ContainerRemove(context.WithoutCancel(ctx), created.ID, client.ContainerRemoveOptions{Force: true})
	}()
	if _, err := r.cli.ContainerStatPath(ctx, created.ID, client.ContainerStatPathOptions{Path: "/agent/" + agentDoneFile}); err != nil {
		// Not filled yet. (A filled one is not written again: sandboxes may be running
		// the binary, which cannot be overwritten while it executes.)
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: "sandbox-agent", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))})
		_, _ = tw.Write(bin)
		_ = tw.WriteHeader(&tar.Header{Name: agentDoneFile, Typeflag: tar.TypeReg, Mode: 0o444, Size: int64(len(digest) + 1)})
		_, _ = tw.Write([]byte(digest + "\n"))
		if err := tw.Close(); err != nil {
			return "", fmt.Errorf("pack sandbox-agent: %w", err)
		}
		if _, err := r.cli.CopyToContainer(ctx, created.ID, client.CopyToContainerOptions{
			DestinationPath: "/agent", Content: &buf,
		}); err != nil {
			return "", fmt.Errorf("fill the agent volume: %w", err)
		}
	}
	r.agentVol, r.agentMod = vol, fi.ModTime()
	return vol, nil
}

// fillerStale is how old another process's filler must be to be taken for the leftover
// of a process killed while filling (a fill takes well under a second).
const fillerStale = 2 * time.Minute

// createFiller creates the one filler container of vol (its fixed name makes fills of
// several gateways on one engine take turns: two at once could interleave their writes),
// waiting while another process's filler exists, and removing one left by a killed
// process or by a create of its own that failed.
func (r *Runtime) createFiller(ctx context.Context, vol, image string) (client.ContainerCreateResult, error) {
	name := vol + "-filler"
	deadline := time.Now().Add(30 * time.Second)
	for {
		created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Name: name,
			Config: &container.Config{
				Image: image, Entrypoint: []string{"/nonexistent"},
				Labels: map[string]string{labelRole: roleAgentVolume, labelSpareOwner: r.owner},
			},
			HostConfig: &container.HostConfig{
				LogConfig:   r.logConfig,
				NetworkMode: "none",
				Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: "/agent",
					VolumeOptions: &mount.VolumeOptions{NoCopy: true, Labels: r.agentBinaryLabels()}}},
			},
		})
		if err == nil {
			return created, nil
		}
		if !cerrdefs.IsConflict(err) {
			// The engine may have made it all the same (the answer lost to a deadline or
			// a broken connection): a filler of this runtime's is never in use once its
			// create returned, so it is removed, not left for other fills to wait on.
			r.removeOwnFiller(name)
			return client.ContainerCreateResult{}, fmt.Errorf("create the agent volume's filler: %w", err)
		}
		if time.Now().After(deadline) {
			return client.ContainerCreateResult{}, fmt.Errorf("create the agent volume's filler: %w", err)
		}
		if other, ierr := r.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); ierr == nil {
			// This runtime's own (a create answered with an error that the engine made
			// nonetheless: it fills one volume at a time, under agentMu) and the filler
			// of a process of this host that is gone (killed while filling: every gateway
			// fills at its start, for its spare holders) are removed at once; one of
			// another process only once it is stale.
			owner := ""
			if other.Container.Config != nil {
				owner = other.Container.Config.Labels[labelSpareOwner]
			}
			gone := owner == r.owner || ownerGone(owner)
			if at, perr := time.Parse(time.RFC3339Nano, other.Container.Created); gone || (perr == nil && time.Since(at) > fillerStale) {
				_, _ = r.cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
				continue
			}
		}
		select {
		case <-ctx.Done():
			return client.ContainerCreateResult{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// removeOwnFiller removes the filler container name if this runtime made it, without
// waiting on the caller's context (whose deadline may be what failed the create).
func (r *Runtime) removeOwnFiller(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := r.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil || res.Container.Config == nil || res.Container.Config.Labels[labelSpareOwner] != r.owner {
		return
	}
	_, _ = r.cli.ContainerRemove(ctx, res.Container.ID, client.ContainerRemoveOptions{Force: true})
}

// agentVolumeGrace is how old an agent binary volume must be before the sweep may remove
// it: a volume another process has just filled is mounted by nothing until that
// process's first container after the fill. (A variable: tests shorten it.)
var agentVolumeGrace = fillerStale

// sweepAgentVolumes removes the agent volumes no container mounts (the engine's
// "dangling") that are labelled for this runtime's network, or for a network that no
// longer exists (its deployment is gone: a runtime makes its network when it starts):
// the agent directories whose sandbox has no container (live: the sandbox ids that have
// one), and the agent binary volumes other than the one this process uses, older than
// agentVolumeGrace. It returns how many it removed. Volumes without the labels (made
// before them, or by anything else) stay, and so do those of another deployment whose
// network exists.
//
// A binary volume is taken only when no container mounts it, and every gateway with
// spare namespace holders keeps its own mounted (holders.go): what a removal can still
// meet is another gateway on the engine running that build with no spares and no
// sandbox; its next create then mounts the volume anew, empty, and fails.
func (r *Runtime) sweepAgentVolumes(ctx context.Context, live func() (map[string]bool, error)) int {
	list, err := r.cli.VolumeList(ctx, client.VolumeListOptions{Filters: make(client.Filters).
		Add("dangling", "true").Add("label", labelRole).Add("label", labelNetwork)})
	if err != nil || len(list.Items) == 0 {
		return 0
	}
	r.agentMu.Lock()
	current := r.agentVol
	r.agentMu.Unlock()
	var alive, networks map[string]bool
	removed := 0
	for _, v := range list.Items {
		if network := v.Labels[labelNetwork]; network != r.opts.Network {
			if networks == nil {
				if networks, err = r.networkNames(ctx); err != nil {
					return removed
				}
			}
			if networks[network] {
				continue
			}
		}
		switch v.Labels[labelRole] {
		case roleAgentDir:
			id := v.Labels[runtimes.LabelID]
			if id == "" {
				continue
			}
			if alive == nil {
				if alive, err = live(); err != nil {
					return removed
				}
			}
			if alive[id] {
				continue
			}
		case roleAgentBinary:
			at, perr := time.Parse(time.RFC3339, v.CreatedAt)
			if current == "" || v.Name == current || !strings.HasPrefix(v.Name, agentVolumePrefix) ||
				perr != nil || time.Since(at) < agentVolumeGrace {
				continue
			}
		default:
			continue
		}
		// The engine refuses to remove a volume a container mounts, so one mounted since
		// the list stays.
		if _, err := r.cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{}); err == nil {
			removed++
		}
	}
	return removed
}

// networkNames holds the names and ids of the engine's networks.
func (r *Runtime) networkNames(ctx context.Context) (map[string]bool, error) {
	all, err := r.cli.NetworkList(ctx, client.NetworkListOptions{})
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, 2*len(all.Items))
	for _, n := range all.Items {
		names[n.Name], names[n.ID] = true, true
	}
	return names, nil
}
