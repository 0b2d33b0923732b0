package admission

import (
	"context"

	"github.com/distribution/reference"

	"github.com/sandgate/sandgate/runtimes"
)

// imageRegistry is the registry host an image reference names: "docker.io" for a bare
// name (python:3.12, sandgate/base:1), else its first component (127.0.0.1:5000,
// ghcr.io). An unparsable reference gives "" (the runtime refuses it later).
func imageRegistry(image string) string {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return ""
	}
	return reference.Domain(named)
}

// imageWillNotBePulled reports whether a create of image uses what the engine holds:
// always when the gateway never pulls, never when it always pulls, else when the engine
// has the image. The engine is asked only when the registries rule needs the answer.
func (m *Manager) imageWillNotBePulled(ctx context.Context, image, tenant string) bool {
	switch {
	case !m.cfg.PullImages && !m.cfg.PullAlways:
		return true
	case m.cfg.PullAlways:
		return false
	case !m.cfg.CheckRegistries:
		return false
	}
	if ic, ok := m.runtime.(runtimes.ImageChecker); ok {
		has, err := ic.HasImage(ctx, image, tenant)
		return err == nil && has
	}
	return false
}
