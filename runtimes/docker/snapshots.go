package docker

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
)

// Snapshot commits the filesystem of sandbox id into the local image ref, labelled with
// labels. The sandbox keeps running: it is not even frozen for the commit (a frozen
// container would show as Paused to the reconciler and to callers meanwhile), so a file
// written during the commit may be caught half-written. Mounted volumes are not part of
// it, the agent's directory among them (agentDirMount): what sandgate wrote into the
// workload (the start marker, the credential vault's CA and bundle) stays with the
// source, and a copy starts without it.
//
// A committed image inherits its container's configuration, which a container made from
// it inherits in turn: so every sandgate.io/* label of the source is blanked (a copy is
// not its source's pool member, nor does it carry its expiry or metadata) and the source's
// agent and enforcer tokens are emptied (the copy gets its own; the image must not keep
// the source's secrets).
func (r *Runtime) Snapshot(ctx context.Context, id, ref string, labels map[string]string) error {
	res, err := r.cli.ContainerInspect(ctx, containerName(id), client.ContainerInspectOptions{})
	if err != nil {
		return mapErr(id, err)
	}
	var changes []string
	if c := res.Container.Config; c != nil {
		keys := make([]string, 0, len(c.Labels))
		for k := range c.Labels {
			if strings.HasPrefix(k, "sandgate.io/") {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			if _, set := labels[k]; !set {
				changes = append(changes, fmt.Sprintf("LABEL %s=\"\"", k))
			}
		}
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		changes = append(changes, fmt.Sprintf("LABEL %s=%s", k, strconv.Quote(labels[k])))
	}
	changes = append(changes, "ENV "+envAgentToken+"=\"\"", "ENV "+envEgressToken+"=\"\"")
	if _, err := r.cli.ContainerCommit(ctx, res.Container.ID, client.ContainerCommitOptions{
		Reference: ref, Changes: changes, Comment: "sandgate snapshot of " + id, NoPause: true,
	}); err != nil {
		return fmt.Errorf("commit sandbox %s: %w", id, err)
	}
	return nil
}

// RemoveSnapshot removes the image of a snapshot; a missing one is not an error. An
// image that running sandboxes still use stays until they are gone (the engine refuses).
func (r *Runtime) RemoveSnapshot(ctx context.Context, ref string) error {
	_, err := r.cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{})
	if cerrdefs.IsConflict(err) {
		return fmt.Errorf("remove snapshot image %s: %w: %v", ref, runtimes.ErrInUse, err)
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove snapshot image %s: %w", ref, err)
	}
	return nil
}
