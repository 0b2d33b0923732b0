package pool

import (
	"context"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// Status are a pool's live numbers.
type Status struct {
	Total     int64 `json:"total"`
	Allocated int64 `json:"allocated"`
	Available int64 `json:"available"`
	Starting  int64 `json:"starting"`
	// Image is the pull of the template's image that the pool's creation started (on
	// the gateway that took it); absent when the image was already on the engine.
	Image *ImagePull `json:"image,omitempty"`
}

// Status reads p's live numbers. Starting is what every gateway publishes, so that
// every replica reports the same.
func (m *Manager) Status(ctx context.Context, p *store.Pool) (Status, error) {
	c, err := m.store.CountPool(ctx, p.Tenant, p.Name)
	if err != nil {
		return Status{}, err
	}
	key := store.PoolKey(p.Tenant, p.Name)
	starting, err := m.store.StartingCount(ctx, key, "")
	if err != nil {
		return Status{}, err
	}
	return Status{Total: c.Available + c.Allocated + starting, Allocated: c.Allocated, Available: c.Available,
		Starting: starting, Image: m.Pull(key)}, nil
}

// Delete removes pool p and its warm (unclaimed) members; claimed ones live on.
func (m *Manager) Delete(ctx context.Context, p *store.Pool) error {
	ids, err := m.store.DeletePool(ctx, p.Tenant, p.Name)
	if err != nil {
		return err
	}
	m.ClearPull(store.PoolKey(p.Tenant, p.Name))
	m.RemoveWarm(ctx, p, ids)
	return nil
}

// PrepareImage decides how a new pool of tenant gets image: nil when it is on the
// engine (or the runtime pulls on its own nodes), a puller when this gateway must pull
// it first (StartPull), and the host's image error when it is missing and pulling is
// off or its registry is refused.
func (m *Manager) PrepareImage(ctx context.Context, tenant, image string) (runtimes.ImagePuller, error) {
	ip, ok := m.runtime.(runtimes.ImagePuller)
	if !ok || !m.cfg.PullImages {
		if ic, ok := m.runtime.(runtimes.ImageChecker); ok {
			if has, err := ic.HasImage(ctx, image, tenant); err == nil && !has {
				return nil, m.host.ImageError(image, runtimes.ErrImageNotFound)
			}
		}
		return nil, nil
	}
	if !m.cfg.PullAlways {
		if has, err := ip.HasImage(ctx, image, tenant); err == nil && has {
			return nil, nil
		}
	}
	if err := ip.CheckRegistry(ctx, image); err != nil {
		return nil, m.host.ImageError(image, err)
	}
	return ip, nil
}
