package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
)

// Labels of the named volumes sandgate creates.
const (
	// labelVolumeCreatedBy is the sandbox whose create made the volume.
	labelVolumeCreatedBy = "sandgate.io/created-by"
	// labelVolumeDeleteWith names the sandbox whose removal removes the volume
	// (deleteOnSandboxTermination): only ever set on a volume that sandbox's create made.
	labelVolumeDeleteWith = "sandgate.io/delete-with"
)

// labelStagedVolume, followed by a volume's name, marks a workload that mounts a
// sub-path of that volume staged by the runtime (stageSubPath): the engine does not
// know the volume is in use then, so removeVolumes asks these labels.
const labelStagedVolume = "sandgate.io/staged-volume."

// volumeSubpathAPI is the first engine API that honours a named volume's Subpath; an
// older engine ignores the field and would mount the whole volume.
const volumeSubpathAPI = 1.45

// mountVolumes turns a spec's volumes into engine mounts, creating the named volumes
// that are missing and asked for. It returns the names it created, which the caller
// removes if the create fails after all.
func (r *Runtime) mountVolumes(ctx context.Context, spec runtimes.Spec) ([]mount.Mount, []string, error) {
	var mounts []mount.Mount
	var created []string
	fail := func(err error) ([]mount.Mount, []string, error) {
		r.removeVolumes(context.WithoutCancel(ctx), created)
		unstageHostVolumes(spec.ID)
		return nil, nil, err
	}
	for i, v := range spec.Volumes {
		if v.HostPath != "" {
			// The engine mounts what the runtime opened, not the path (hoststaging.go).
			staged, err := stageHostVolume(spec.ID, i, v.HostPath)
			if err != nil {
				return fail(fmt.Errorf("volume %q: %w", v.Name, err))
			}
			mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: staged, Target: v.MountPath, ReadOnly: v.ReadOnly,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
			continue
		}
		made, err := r.ensureVolume(ctx, spec, v)
		if err != nil {
			return fail(err)
		}
		if made {
			created = append(created, v.Claim)
		}
		if v.SubPath != "" && !r.apiAtLeast(volumeSubpathAPI) {
			// The engine would mount the whole volume: the runtime stages the sub-path.
			staged, err := r.stageSubPath(ctx, spec.ID, i, v)
			if err != nil {
				return fail(err)
			}
			mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: staged, Target: v.MountPath, ReadOnly: v.ReadOnly,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
			continue
		}
		m := mount.Mount{Type: mount.TypeVolume, Source: v.Claim, Target: v.MountPath, ReadOnly: v.ReadOnly,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true}}
		if v.SubPath != "" {
			m.VolumeOptions.Subpath = v.SubPath
		}
		mounts = append(mounts, m)
	}
	return mounts, created, nil
}

// stageSubPath stages the sub-path of named volume v (hoststaging.go) on an engine older
// than volumeSubpathAPI. Only a volume of the local driver has a directory on the
// engine's host the runtime can open, and only when the runtime shares the engine's
// filesystem (as host volumes need too); any other is refused.
func (r *Runtime) stageSubPath(ctx context.Context, id string, index int, v runtimes.Volume) (string, error) {
	got, err := r.cli.VolumeInspect(ctx, v.Claim, client.VolumeInspectOptions{})
	if err != nil {
		return "", fmt.Errorf("inspect volume %q: %w", v.Name, err)
	}
	if got.Volume.Driver != "local" || got.Volume.Mountpoint == "" {
		return "", fmt.Errorf("volume %q: subPath of a volume of driver %q needs Docker Engine API %.2f or newer (this engine speaks %s): %w",
			v.Name, got.Volume.Driver, volumeSubpathAPI, r.cli.ClientVersion(), runtimes.ErrVolumeUnsupported)
	}
	staged, err := stageVolumeSubPath(id, index, got.Volume.Mountpoint, v.SubPath)
	if err != nil {
		if errors.Is(err, runtimes.ErrVolumeSubPathSymlink) || errors.Is(err, runtimes.ErrVolumeUnsupported) {
			return "", fmt.Errorf("volume %q: %w", v.Name, err)
		}
		return "", fmt.Errorf("volume %q: subPath needs Docker Engine API %.2f or newer, or the runtime on the engine's host (%v): %w",
			v.Name, volumeSubpathAPI, err, runtimes.ErrVolumeUnsupported)
	}
	return staged, nil
}

// ensureVolume makes sure the named volume of v exists and is the tenant's, creating it
// when it is missing and v allows; made reports that this call created it.
func (r *Runtime) ensureVolume(ctx context.Context, spec runtimes.Spec, v runtimes.Volume) (made bool, err error) {
	got, err := r.cli.VolumeInspect(ctx, v.Claim, client.VolumeInspectOptions{})
	if err == nil {
		if owner := got.Volume.Labels[runtimes.LabelTenant]; owner != "" && owner != spec.Tenant {
			return false, fmt.Errorf("volume %q: %w", v.Name, runtimes.ErrVolumeForeign)
		}
		return false, nil
	}
	if !cerrdefs.IsNotFound(err) {
		return false, fmt.Errorf("inspect volume %q: %w", v.Name, err)
	}
	if !v.CreateIfNotExists {
		return false, fmt.Errorf("volume %q (claim does not exist and createIfNotExists is false): %w", v.Name, runtimes.ErrVolumeNotFound)
	}
	labels := map[string]string{
		runtimes.LabelTenant: spec.Tenant,
		labelVolumeCreatedBy: spec.ID,
	}
	if c := spec.Labels[runtimes.LabelCluster]; c != "" {
		labels[runtimes.LabelCluster] = c
	}
	if v.DeleteOnTermination {
		labels[labelVolumeDeleteWith] = spec.ID
	}
	if _, err := r.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: v.Claim, Labels: labels}); err != nil {
		return false, fmt.Errorf("create volume %q: %w", v.Name, err)
	}
	return true, nil
}

// sweepVolumeRoots removes the containers of ownVolumeRoot that a gateway process killed
// in the middle left (each would keep its volume from being removed): those of a process
// of this host that is gone, and any other once stale.
func (r *Runtime) sweepVolumeRoots(ctx context.Context) {
	left, err := r.cli.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", labelRole+"="+roleVolumeRoot),
	})
	if err != nil {
		return
	}
	for _, c := range left.Items {
		if ownerGone(c.Labels[labelSpareOwner]) || time.Since(time.Unix(c.Created, 0)) > fillerStale {
			_, _ = r.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
		}
	}
}

// stagedVolumes names the volumes of spec whose sub-path the runtime stages itself.
func (r *Runtime) stagedVolumes(spec runtimes.Spec) []string {
	var claims []string
	for _, v := range spec.Volumes {
		if v.HostPath == "" && v.SubPath != "" && !r.apiAtLeast(volumeSubpathAPI) {
			claims = append(claims, v.Claim)
		}
	}
	return claims
}

// removeVolumes removes named volumes, best effort (a volume another sandbox still
// mounts stays: the engine refuses to remove one a container mounts, and a container
// that mounts a staged sub-path of it is asked by its label).
func (r *Runtime) removeVolumes(ctx context.Context, names []string) {
	for _, name := range names {
		users, err := r.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
			Filters: make(client.Filters).Add("label", labelStagedVolume+name)})
		if err != nil || len(users.Items) > 0 {
			continue
		}
		_, _ = r.cli.VolumeRemove(ctx, name, client.VolumeRemoveOptions{})
	}
}

// removeVolumesOf removes the volumes marked to go with sandbox id (deleteOnSandboxTermination
// on the create that made them). A volume another sandbox still mounts stays.
func (r *Runtime) removeVolumesOf(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := r.cli.VolumeList(ctx, client.VolumeListOptions{Filters: make(client.Filters).Add("label", labelVolumeDeleteWith+"="+id)})
	if err != nil {
		return
	}
	names := make([]string, 0, len(list.Items))
	for _, v := range list.Items {
		names = append(names, v.Name)
	}
	r.removeVolumes(ctx, names)
}

// apiAtLeast reports whether the negotiated engine API is at least v.
func (r *Runtime) apiAtLeast(v float64) bool {
	got, err := strconv.ParseFloat(r.cli.ClientVersion(), 64)
	return err == nil && got >= v
}

// DiscardVolumes removes the named volumes the create of sandbox id made, for a create
// that failed after its container started (the core calls it beside Delete then).
func (r *Runtime) DiscardVolumes(ctx context.Context, id string) {
	list, err := r.cli.VolumeList(ctx, client.VolumeListOptions{Filters: make(client.Filters).Add("label", labelVolumeCreatedBy+"="+id)})
	if err != nil {
		return
	}
	names := make([]string, 0, len(list.Items))
	for _, v := range list.Items {
		names = append(names, v.Name)
	}
	r.removeVolumes(ctx, names)
}

// CreateVolume makes named volume claim with labels, for the API of a tenant's volumes.
// The engine's create of an existing name succeeds and changes nothing, so the name is
// looked up first: an existing one is refused, never relabelled. With root, the new
// volume's root directory is given to root's uid and gid before anything can mount it;
// a volume whose root cannot be given is removed again.
func (r *Runtime) CreateVolume(ctx context.Context, claim string, labels map[string]string, root *runtimes.VolumeOwner) error {
	if _, err := r.cli.VolumeInspect(ctx, claim, client.VolumeInspectOptions{}); err == nil {
		return fmt.Errorf("volume %q: %w", claim, runtimes.ErrVolumeExists)
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect volume %q: %w", claim, err)
	}
	if _, err := r.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: claim, Labels: labels}); err != nil {
		return fmt.Errorf("create volume %q: %w", claim, err)
	}
	if root != nil {
		if err := r.ownVolumeRoot(ctx, claim, *root); err != nil {
			_, _ = r.cli.VolumeRemove(context.WithoutCancel(ctx), claim, client.VolumeRemoveOptions{})
			return fmt.Errorf("volume %q: %w", claim, err)
		}
	}
	return nil
}

// roleVolumeRoot marks the container ownVolumeRoot makes (never started, removed at once;
// one a killed gateway left is removed by sweepVolumeRoots).
const roleVolumeRoot = "volume-root"

// volumeRootTarget is where ownVolumeRoot's container mounts the volume.
const volumeRootTarget = "volume"

// ownVolumeRoot gives the root directory of the new, empty named volume claim to owner.
// The engine extracts an archive into a container that mounts the volume and is never
// started (made from the helpers' empty image, helperimage.go, without network): the
// archive's one entry is the mount point's directory, whose owner and mode the engine
// sets with the archive's ids (mapped like the container's under user namespaces). No
// process runs and nothing of the volume's content is read or changed.
func (r *Runtime) ownVolumeRoot(ctx context.Context, claim string, owner runtimes.VolumeOwner) error {
	image, err := r.helperImage(ctx)
	if err != nil {
		return err
	}
	created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image: image, Entrypoint: []string{"/nonexistent"},
			Labels: map[string]string{labelRole: roleVolumeRoot, labelSpareOwner: r.owner},
		},
		HostConfig: &container.HostConfig{
			LogConfig:   r.logConfig,
			NetworkMode: "none",
			Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: claim, Target: "/" + volumeRootTarget,
				VolumeOptions: &mount.VolumeOptions{NoCopy: true}}},
		},
	})
	if err != nil {
		return fmt.Errorf("create the container that owns its root: %w", err)
	}
	defer func() {
		_, _ = r.cli.ContainerRemove(context.WithoutCancel(ctx), created.ID, client.ContainerRemoveOptions{Force: true})
	}()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: volumeRootTarget + "/", Typeflag: tar.TypeDir, Mode: 0o755,
		Uid: owner.UID, Gid: owner.GID, ModTime: time.Now()})
	if err := tw.Close(); err != nil {
		return fmt.Errorf("pack its root: %w", err)
	}
	if _, err := r.cli.CopyToContainer(ctx, created.ID, client.CopyToContainerOptions{
		DestinationPath: "/", Content: &buf, CopyUIDGID: true,
	}); err != nil {
		return fmt.Errorf("give its root to %d:%d: %w", owner.UID, owner.GID, err)
	}
	return nil
}

// VolumeLabels are the labels of named volume claim.
func (r *Runtime) VolumeLabels(ctx context.Context, claim string) (map[string]string, error) {
	got, err := r.cli.VolumeInspect(ctx, claim, client.VolumeInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil, fmt.Errorf("volume %q: %w", claim, runtimes.ErrVolumeNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("inspect volume %q: %w", claim, err)
	}
	return got.Volume.Labels, nil
}

// ListVolumes names the named volumes that carry every one of labels.
func (r *Runtime) ListVolumes(ctx context.Context, labels map[string]string) ([]string, error) {
	filters := make(client.Filters)
	for k, v := range labels {
		filters = filters.Add("label", k+"="+v)
	}
	list, err := r.cli.VolumeList(ctx, client.VolumeListOptions{Filters: filters})
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	names := make([]string, 0, len(list.Items))
	for _, v := range list.Items {
		names = append(names, v.Name)
	}
	return names, nil
}

// RemoveVolume removes named volume claim unless a sandbox mounts it: the engine refuses
// to remove a volume a container mounts, and a container that mounts a staged sub-path
// of it (which the engine does not count) is found by its label.
func (r *Runtime) RemoveVolume(ctx context.Context, claim string) error {
	users, err := r.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", labelStagedVolume+claim)})
	if err != nil {
		return fmt.Errorf("list the users of volume %q: %w", claim, err)
	}
	if len(users.Items) > 0 {
		return fmt.Errorf("volume %q: %w", claim, runtimes.ErrInUse)
	}
	_, err = r.cli.VolumeRemove(ctx, claim, client.VolumeRemoveOptions{})
	switch {
	case err == nil:
		return nil
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("volume %q: %w", claim, runtimes.ErrVolumeNotFound)
	case cerrdefs.IsConflict(err):
		return fmt.Errorf("volume %q: %w", claim, runtimes.ErrInUse)
	}
	return fmt.Errorf("remove volume %q: %w", claim, err)
}

var _ runtimes.VolumeKeeper = (*Runtime)(nil)
