package gateway

import (
	"fmt"
	"time"

	"github.com/sandgate/sandgate/gateway/imagebuild"
)

// ImageBuilds is what the core asks of the image builds the gateway runs in the
// background (gateway/imagebuild.Manager): whether an image is still to come.
type ImageBuilds interface {
	Pending(image string) (imagebuild.Status, bool)
}

// imageBuildRetry is the Retry-After of a create refused while its image builds.
const imageBuildRetry = 10 * time.Second

// imageBuilding refuses a sandbox of an image the gateway is still building:
// SANDBOX::IMAGE_BUILDING, retryable, naming the build's latest step.
func imageBuilding(builds ImageBuilds, image string) error {
	if builds == nil {
		return nil
	}
	st, pending := builds.Pending(image)
	if !pending {
		return nil
	}
	msg := fmt.Sprintf("image %q is still being built by this gateway", image)
	switch {
	case st.State == imagebuild.StateWaiting:
		msg += " (waiting for the build before it)"
	case st.Step != "":
		msg += fmt.Sprintf(" (now: %s)", st.Step)
	}
	msg += "; retry when GET /v1/images shows it Ready"
	return &Error{Kind: KindUnavailable, Code: CodeImageBuilding, Message: msg, RetryAfter: imageBuildRetry}
}
