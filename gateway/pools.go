package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// PoolRequest is the body of POST /v1/pools and PUT /v1/pools/{name}.
type PoolRequest struct {
	Name         string         `json:"name"`
	Template     *CreateRequest `json:"template"`
	CapacitySpec store.Capacity `json:"capacitySpec"`
}

// PoolStatus are a pool's live numbers.
type PoolStatus struct {
	Total     int64 `json:"total"`
	Allocated int64 `json:"allocated"`
	Available int64 `json:"available"`
	Starting  int64 `json:"starting"`
	// Image is the pull of the template's image that the pool's creation started (on
	// the gateway that took it); absent when the image was already on the engine.
	Image *PoolImagePull `json:"image,omitempty"`
}

// PoolImagePull is the progress of a pool's one pull of its image: state Pulling, Ready
// or Failed (message then has the registry's reason; the pool makes no members).
type PoolImagePull struct {
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
	runtimes.PullProgress
}

// Pool image pull states.
const (
	PoolImagePulling = "Pulling"
	PoolImageReady   = "Ready"
	PoolImageFailed  = "Failed"
)

// PoolView is the API form of a pool.
type PoolView struct {
	Name         string          `json:"name"`
	Template     json.RawMessage `json:"template"`
	CapacitySpec store.Capacity  `json:"capacitySpec"`
	Status       PoolStatus      `json:"status"`
	CreatedAt    string          `json:"createdAt"`
	UpdatedAt    string          `json:"updatedAt,omitempty"`
}

var poolNameRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func (s *Service) validatePool(req PoolRequest) error {
	if !poolNameRe.MatchString(req.Name) {
		return Errorf(KindInvalid, CodePoolInvalid, "name %q: 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit", req.Name)
	}
	if req.Template == nil {
		return Errorf(KindInvalid, CodePoolInvalid, "template is required (the fields of a create request: image, entrypoint, resourceLimits, env, metadata)")
	}
	if req.Template.Extensions["poolRef"] != "" {
		return Errorf(KindInvalid, CodePoolInvalid, "template.extensions.poolRef: a pool's template cannot claim from a pool")
	}
	spec, err := s.validateCreate(*req.Template)
	if err != nil {
		return err
	}
	// The template is stored as sent and answered as stored: a networkPolicy of the wrong
	// shape is refused now, not when the manager starts a member.
	if _, err := parseNetworkPolicy(req.Template.NetworkPolicy); err != nil {
		return err
	}
	if len(spec.Volumes) > 0 {
		// Warm members start before anyone claims them; volumes are bound at create.
		return Errorf(KindInvalid, CodePoolInvalid, "template.volumes: a pool's sandboxes cannot mount volumes; create such sandboxes cold")
	}
	c := req.CapacitySpec
	switch {
	case c.BufferMin < 0 || c.BufferMax < 0 || c.PoolMin < 0 || c.PoolMax < 0:
		return Errorf(KindInvalid, CodePoolInvalid, "capacitySpec: numbers must not be negative")
	case c.BufferMin > c.BufferMax:
		return Errorf(KindInvalid, CodePoolInvalid, "capacitySpec: bufferMin %d exceeds bufferMax %d", c.BufferMin, c.BufferMax)
	case c.PoolMin > c.PoolMax:
		return Errorf(KindInvalid, CodePoolInvalid, "capacitySpec: poolMin %d exceeds poolMax %d", c.PoolMin, c.PoolMax)
	case c.BufferMax > c.PoolMax:
		return Errorf(KindInvalid, CodePoolInvalid, "capacitySpec: bufferMax %d exceeds poolMax %d", c.BufferMax, c.PoolMax)
	case c.PoolMax > s.cfg.MaxPoolSize:
		return Errorf(KindInvalid, CodePoolInvalid, "capacitySpec: poolMax %d exceeds this gateway's limit of %d", c.PoolMax, s.cfg.MaxPoolSize)
	}
	return nil
}

// CreatePool defines a pool; the manager fills it in the background.
func (s *Service) CreatePool(ctx context.Context, caller Caller, req PoolRequest) (*PoolView, error) {
	if err := s.resolvePoolSnapshot(ctx, caller, &req); err != nil {
		return nil, err
	}
	if err := s.validatePool(req); err != nil {
		return nil, err
	}
	pull, err := s.poolImage(ctx, caller.Tenant, req.Template)
	if err != nil {
		return nil, err
	}
	tmpl, _ := json.Marshal(templateToStore(req.Template))
	now := time.Now().UTC().Format(time.RFC3339Nano)
	p := &store.Pool{Tenant: caller.Tenant, Name: req.Name, Template: tmpl, Capacity: req.CapacitySpec, Version: 1, CreatedAt: now, UpdatedAt: now}
	if err := s.store.PutPool(ctx, p, true); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, Errorf(KindConflict, CodePoolExists, "pool %q already exists", req.Name)
		}
		return nil, err
	}
	if pull != nil {
		s.startPoolPull(store.PoolKey(p.Tenant, p.Name), req.Template, pull)
	} else {
		s.kickPools()
	}
	return s.poolView(ctx, p)
}

// withoutImageAuth is a template as it is stored: registry credentials are used for the
// pool's pull only and never written to the store.
func withoutImageAuth(t *CreateRequest) *CreateRequest {
	if t == nil || t.Image == nil || t.Image.Auth == nil {
		return t
	}
	c := *t
	c.Image = &ImageSpec{URI: t.Image.URI}
	return &c
}

// templateToStore is a pool's template as stored and answered: without the image's
// credentials, and without the raw fields sent as null, which mean what absent means and
// which the API's document never answers as null.
func templateToStore(t *CreateRequest) *CreateRequest {
	c := *withoutImageAuth(t)
	for _, raw := range []*json.RawMessage{&c.NetworkPolicy, &c.Volumes, &c.CredentialProxy} {
		if bytes.Equal(bytes.TrimSpace(*raw), []byte("null")) {
			*raw = nil
		}
	}
	return &c
}

// poolImage decides how a new pool gets its image: nil when it is on the engine (or the
// runtime pulls on its own nodes), a puller when this gateway must pull it first, and
// IMAGE_NOT_FOUND when it is missing and pulling is off.
func (s *Service) poolImage(ctx context.Context, tenant string, tmpl *CreateRequest) (runtimes.ImagePuller, error) {
	image := tmpl.Image.URI
	ip, ok := s.runtime.(runtimes.ImagePuller)
	if !ok || !s.cfg.PullImages {
		return nil, s.checkImage(ctx, image, tenant)
	}
	if !s.cfg.PullAlways {
		if has, err := ip.HasImage(ctx, image, tenant); err == nil && has {
			return nil, nil
		}
	}
	if err := ip.CheckRegistry(ctx, image); err != nil {
		return nil, runtimeCreateError(image, err)
	}
	return ip, nil
}

// startPoolPull pulls a new pool's image once, in the background, with the template's
// credentials; the pool's status shows the progress, and the manager fills the pool only
// once the pull is done.
func (s *Service) startPoolPull(key string, tmpl *CreateRequest, ip runtimes.ImagePuller) {
	st := &PoolImagePull{State: PoolImagePulling}
	s.pools.mu.Lock()
	if s.pools.pulls == nil {
		s.pools.pulls = map[string]*PoolImagePull{}
	}
	s.pools.pulls[key] = st
	s.pools.mu.Unlock()
	var auth *runtimes.ImageAuth
	if a := tmpl.Image.Auth; a != nil && a.Username != "" {
		auth = &runtimes.ImageAuth{Username: a.Username, Password: a.Password}
	}
	image := tmpl.Image.URI
	s.spawn(func() {
		ctx, cancel := context.WithTimeout(s.stopCtx, 30*time.Minute)
		defer cancel()
		err := ip.Pull(ctx, image, auth, func(p runtimes.PullProgress) {
			s.pools.mu.Lock()
			st.PullProgress = p
			s.pools.mu.Unlock()
		})
		s.pools.mu.Lock()
		if err != nil {
			st.State = PoolImageFailed
			st.Message = runtimeCreateError(image, err).Error()
		} else {
			st.State = PoolImageReady
		}
		s.pools.mu.Unlock()
		if err != nil {
			s.log.Warn("pool image pull failed", "pool", key, "image", image, "err", err)
		}
		s.kickPools()
	})
}

// poolPull is a copy of a pool's pull status (nil when it made none).
func (s *Service) poolPull(key string) *PoolImagePull {
	s.pools.mu.Lock()
	defer s.pools.mu.Unlock()
	st, ok := s.pools.pulls[key]
	if !ok {
		return nil
	}
	c := *st
	return &c
}

// checkImage fails early when a pool's image is not on the host.
func (s *Service) checkImage(ctx context.Context, image, tenant string) error {
	if ic, ok := s.runtime.(runtimes.ImageChecker); ok {
		has, err := ic.HasImage(ctx, image, tenant)
		if err == nil && !has {
			return runtimeCreateError(image, runtimes.ErrImageNotFound)
		}
	}
	return nil
}

// UpdatePool replaces a pool's template and capacity; warm sandboxes of the old template
// are replaced in the background.
func (s *Service) UpdatePool(ctx context.Context, caller Caller, name string, req PoolRequest) (*PoolView, error) {
	if req.Name == "" {
		req.Name = name
	}
	if req.Name != name {
		return nil, Errorf(KindInvalid, CodePoolInvalid, "name %q in the body differs from %q in the path", req.Name, name)
	}
	if err := s.resolvePoolSnapshot(ctx, caller, &req); err != nil {
		return nil, err
	}
	if err := s.validatePool(req); err != nil {
		return nil, err
	}
	p, err := s.lookupPool(ctx, caller, name)
	if err != nil {
		return nil, err
	}
	tmpl, _ := json.Marshal(templateToStore(req.Template))
	var pull runtimes.ImagePuller
	changed := string(tmpl) != string(p.Template)
	if changed {
		if pull, err = s.poolImage(ctx, caller.Tenant, req.Template); err != nil {
			return nil, err
		}
		p.Version++
		p.Template = tmpl
	}
	p.Capacity = req.CapacitySpec
	p.UpdatedAt = time.Now().UTC().Format(time.RFC3339Nano)
	if err := s.store.PutPool(ctx, p, false); err != nil {
		return nil, err
	}
	if pull != nil {
		s.startPoolPull(store.PoolKey(p.Tenant, p.Name), req.Template, pull)
	} else {
		if changed {
			// A new template without a pull of its own: an older pull no longer applies.
			s.clearPoolPull(store.PoolKey(p.Tenant, p.Name))
		}
		s.kickPools()
	}
	return s.poolView(ctx, p)
}

// clearPoolPull forgets a pool's pull status.
func (s *Service) clearPoolPull(key string) {
	s.pools.mu.Lock()
	delete(s.pools.pulls, key)
	s.pools.mu.Unlock()
}

func (s *Service) lookupPool(ctx context.Context, caller Caller, name string) (*store.Pool, error) {
	p, err := s.store.GetPool(ctx, caller.Tenant, name)
	if errors.Is(err, store.ErrNotFound) && caller.Admin && caller.Tenant != DefaultTenant {
		p, err = s.store.GetPool(ctx, DefaultTenant, name)
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, Errorf(KindNotFound, CodePoolNotFound, "pool %q not found", name)
	}
	return p, err
}

// GetPool returns one pool with its live numbers.
func (s *Service) GetPool(ctx context.Context, caller Caller, name string) (*PoolView, error) {
	p, err := s.lookupPool(ctx, caller, name)
	if err != nil {
		return nil, err
	}
	return s.poolView(ctx, p)
}

// ListPools returns the caller's pools.
func (s *Service) ListPools(ctx context.Context, caller Caller) ([]PoolView, error) {
	pools, err := s.store.ListPools(ctx, caller.Tenant)
	if err != nil {
		return nil, err
	}
	out := make([]PoolView, 0, len(pools))
	for _, p := range pools {
		v, err := s.poolView(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, *v)
	}
	return out, nil
}

// DeletePool removes a pool and its warm (unclaimed) sandboxes; claimed ones live on.
func (s *Service) DeletePool(ctx context.Context, caller Caller, name string) error {
	p, err := s.lookupPool(ctx, caller, name)
	if err != nil {
		return err
	}
	ids, err := s.store.DeletePool(ctx, p.Tenant, p.Name)
	if err != nil {
		return err
	}
	s.clearPoolPull(store.PoolKey(p.Tenant, p.Name))
	s.removeWarm(ctx, p, ids)
	return nil
}

func (s *Service) removeWarm(ctx context.Context, p *store.Pool, ids []string) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer wg.Done()
			defer func() { <-sem }()
			// Best effort: the runtime delete below is what frees the sandbox; a store
			// error here leaves at most a stale record of a deleted pool's member, which
			// holds no runtime resource.
			_, _ = s.store.RemoveWarm(ctx, p.Tenant, p.Name, id)
			_ = s.store.DeleteSandbox(ctx, id)
			if err := s.runtime.Delete(ctx, id); err != nil {
				s.log.Warn("remove warm sandbox", "pool", p.Name, "id", id, "err", err)
			}
		}(id)
	}
	wg.Wait()
}

func (s *Service) poolView(ctx context.Context, p *store.Pool) (*PoolView, error) {
	c, err := s.store.CountPool(ctx, p.Tenant, p.Name)
	if err != nil {
		return nil, err
	}
	// The count the pool manager publishes, so that every replica reports the same.
	starting, err := s.store.StartingCount(ctx, store.PoolKey(p.Tenant, p.Name))
	if err != nil {
		return nil, err
	}
	return &PoolView{
		Name: p.Name, Template: p.Template, CapacitySpec: p.Capacity,
		Status: PoolStatus{Total: c.Available + c.Allocated + starting, Allocated: c.Allocated, Available: c.Available, Starting: starting,
			Image: s.poolPull(store.PoolKey(p.Tenant, p.Name))},
		CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}, nil
}
