package api

import (
	"context"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/imagebuild"
)

// listImageBuilds answers GET /v1/images: the images this gateway builds in the
// background (image_builds), each build's state and latest step. Every role may read it:
// it names only images the operator configured.
func (h *Handler) listImageBuilds(context.Context, gateway.Caller) ([]imagebuild.Status, error) {
	if h.opts.ImageBuilds == nil {
		return []imagebuild.Status{}, nil
	}
	return h.opts.ImageBuilds.List(), nil
}
