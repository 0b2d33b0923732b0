package docker

// The helpers' image.
//
// Every container sandgate runs beside a workload — the namespace holders (holders.go)
// and the egress enforcers (egress.go) — is made from one image the runtime imports
// itself: an empty root filesystem, no environment, no entrypoint, no volumes. The
// program they run is the agent binary, from its read-only volume (agentvolume.go). So
// nothing of the workload's image reaches an enforcer: not its /bin/sh, not its ENV
// (LD_PRELOAD and the like), not a state file a tenant wrote into it; and a snapshot or
// fork of a workload, which is a new image of that workload, cannot bring any either.
//
// The image is found by a tag, but a tag proves nothing: whoever can pull or tag images
// on the engine could have put another image under it. So the runtime checks what the
// tag names — its one layer is the empty tar the runtime imports, its config is empty —
// imports it again when it is not, and from then on names it by its content-addressed
// id, never by the tag.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// helperImageTag is where the engine keeps the helpers' image. Its version changes
// whenever what the image holds does.
const helperImageTag = "sandgate/helper-root:1"

// emptyRootLayer is the helpers' image's only layer: an empty tar archive.
func emptyRootLayer() ([]byte, error) {
	var buf bytes.Buffer
	if err := tar.NewWriter(&buf).Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// helperImage returns the id of the helpers' image, importing it when the engine has
// none under helperImageTag or holds something else there.
func (r *Runtime) helperImage(ctx context.Context) (string, error) {
	r.helperImageMu.Lock()
	defer r.helperImageMu.Unlock()
	if r.helperImageID != "" {
		return r.helperImageID, nil
	}
	layer, err := emptyRootLayer()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(layer)
	diffID := "sha256:" + hex.EncodeToString(sum[:])
	if id, err := r.checkedHelperImage(ctx, diffID); err == nil {
		r.helperImageID = id
		return id, nil
	} else if !cerrdefs.IsNotFound(err) && !isNotHelperImage(err) {
		return "", err
	}
	out, err := r.cli.ImageImport(ctx, client.ImageImportSource{Source: bytes.NewReader(layer), SourceName: "-"}, helperImageTag, client.ImageImportOptions{})
	if err != nil {
		return "", fmt.Errorf("import %s: %w", helperImageTag, err)
	}
	_, _ = io.Copy(io.Discard, out)
	_ = out.Close()
	id, err := r.checkedHelperImage(ctx, diffID)
	if err != nil {
		return "", fmt.Errorf("import %s: %w", helperImageTag, err)
	}
	r.helperImageID = id
	return id, nil
}

// errNotHelperImage says the tag names an image that is not the helpers' image.
type errNotHelperImage struct{ why string }

func (e errNotHelperImage) Error() string {
	return helperImageTag + " is not sandgate's helper image: " + e.why
}

func isNotHelperImage(err error) bool {
	_, ok := err.(errNotHelperImage)
	return ok
}

// checkedHelperImage returns the id of the image under helperImageTag if it is the
// helpers' image: exactly the layer diffID and an empty config.
func (r *Runtime) checkedHelperImage(ctx context.Context, diffID string) (string, error) {
	img, err := r.cli.ImageInspect(ctx, helperImageTag)
	if err != nil {
		return "", err
	}
	if !slices.Equal(img.RootFS.Layers, []string{diffID}) {
		return "", errNotHelperImage{fmt.Sprintf("its layers are %v", img.RootFS.Layers)}
	}
	if img.Config != nil {
		cfg, err := json.Marshal(img.Config)
		if err != nil {
			return "", err
		}
		if string(cfg) != "{}" {
			return "", errNotHelperImage{"its config is not empty"}
		}
	}
	return img.ID, nil
}
