package api

import (
	"context"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/imagebuild"
)

// listImageBuilds answers GET /v1/images: the images this gateway builds in the
// background (image_builds) and each build's state. Every role may read which images are
// coming and when they are ready; a build's output (its latest step, a failure's last
// lines) may name the host's paths and mirrors, so only the platform admin reads it.
func (h *Handler) listImageBuilds(_ context.Context, c gateway.Caller) ([]imagebuild.Status, error) {
	if h.opts.ImageBuilds == nil {
		return []imagebuild.Status{}, nil
	}
	builds := h.opts.ImageBuilds.List()
	if !c.Admin {
		for i := range builds {
			builds[i].Step, builds[i].Message = "", ""
		}
	}
	return builds, nil
}
