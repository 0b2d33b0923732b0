package pool

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// CodeNotFound: no pool of that name is the caller's (gateway/codes.go lists it with
// the rest).
const CodeNotFound = "POOL::NOT_FOUND"

// View is the API form of a pool.
type View struct {
	Name         string          `json:"name"`
	Template     json.RawMessage `json:"template"`
	CapacitySpec store.Capacity  `json:"capacitySpec"`
	Status       Status          `json:"status"`
	CreatedAt    string          `json:"createdAt"`
	UpdatedAt    string          `json:"updatedAt,omitempty"`
}

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

// Lookup returns the caller's pool name; the platform admin acting for another tenant
// also finds the default tenant's.
func (m *Manager) Lookup(ctx context.Context, caller principal.Caller, name string) (*store.Pool, error) {
	p, err := m.store.GetPool(ctx, caller.Tenant, name)
	if errors.Is(err, store.ErrNotFound) && caller.Admin && caller.Tenant != principal.DefaultTenant {
		p, err = m.store.GetPool(ctx, principal.DefaultTenant, name)
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, fault.Errorf(fault.KindNotFound, CodeNotFound, "pool %q not found", name)
	}
	return p, err
}

// View is p in its API form, with its live numbers.
func (m *Manager) View(ctx context.Context, p *store.Pool) (*View, error) {
	st, err := m.Status(ctx, p)
	if err != nil {
		return nil, err
	}
	return &View{
		Name: p.Name, Template: p.Template, CapacitySpec: p.Capacity, Status: st,
		CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}, nil
}

// Get returns one of the caller's pools with its live numbers.
func (m *Manager) Get(ctx context.Context, caller principal.Caller, name string) (*View, error) {
	p, err := m.Lookup(ctx, caller, name)
	if err != nil {
		return nil, err
	}
	return m.View(ctx, p)
}

// List returns the caller's pools.
func (m *Manager) List(ctx context.Context, caller principal.Caller) ([]View, error) {
	pools, err := m.store.ListPools(ctx, caller.Tenant)
	if err != nil {
		return nil, err
	}
	out := make([]View, 0, len(pools))
	for _, p := range pools {
		v, err := m.View(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, *v)
	}
	return out, nil
}

// Delete removes the caller's pool name and its warm (unclaimed) members; claimed ones
// live on.
func (m *Manager) Delete(ctx context.Context, caller principal.Caller, name string) error {
	p, err := m.Lookup(ctx, caller, name)
	if err != nil {
		return err
	}
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
