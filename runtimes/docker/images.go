package docker

import (
	"context"
	"fmt"
	"regexp"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
)

// imageIDRe is an image named by its full content id, the only id form a create may use.
var imageIDRe = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// engineRef is the spelling of image handed to the engine: a full id as it is, a name
// normalized to registry/repository[:tag|@digest] ("b2" becomes
// "docker.io/library/b2:latest"). The engine reads a short name that looks like hex as
// a prefix of an image id, which could name any image on the engine (another tenant's
// snapshot among them); the normalized form is always a reference, never an id prefix.
func engineRef(image string) (string, error) {
	if imageIDRe.MatchString(image) {
		return image, nil
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("image %q is not a full reference or a sha256:<64 hex> id: %w", image, err)
	}
	return reference.TagNameOnly(named).String(), nil
}

// foreignSnapshot reports whether labels (an image's) mark another tenant's snapshot.
func foreignSnapshot(labels map[string]string, tenant string) bool {
	return labels[runtimes.LabelSnapshot] != "" && labels[runtimes.LabelTenant] != tenant
}

// findImage inspects image on the engine for tenant: found is false when the engine
// does not hold it, and also when it is another tenant's snapshot, which tenant is
// answered exactly as for an image that does not exist.
func (r *Runtime) findImage(ctx context.Context, image, tenant string) (client.ImageInspectResult, bool, error) {
	ref, err := engineRef(image)
	if err != nil {
		return client.ImageInspectResult{}, false, err
	}
	inspect, err := r.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return client.ImageInspectResult{}, false, nil
	}
	if err != nil {
		return client.ImageInspectResult{}, false, fmt.Errorf("inspect image %q: %w", image, err)
	}
	if inspect.Config != nil && foreignSnapshot(inspect.Config.Labels, tenant) {
		return client.ImageInspectResult{}, false, nil
	}
	return inspect, true, nil
}

// HasImage reports whether the engine holds image for tenant (another tenant's snapshot
// is not held, for this one).
func (r *Runtime) HasImage(ctx context.Context, image, tenant string) (bool, error) {
	_, found, err := r.findImage(ctx, image, tenant)
	return found, err
}
