package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"time"

	"github.com/sandgate/sandgate/gateway/pool"
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
type PoolStatus = pool.Status

// PoolImagePull is the progress of a pool's one pull of its image: state Pulling, Ready
// or Failed (message then has the registry's reason; the pool makes no members).
type PoolImagePull = pool.ImagePull

// Pool image pull states.
const (
	PoolImagePulling = pool.ImagePulling
	PoolImageReady   = pool.ImageReady
	PoolImageFailed  = pool.ImageFailed
)

// PoolView is the API form of a pool.
type PoolView = pool.View

var poolNameRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// validatePool checks a pool request whole, its template's networkPolicy judged by the
// egress policy as a create's would be: the template is stored as sent, so a policy
// refused now is never found refused by the manager at each member's start.
func (s *Service) validatePool(ctx context.Context, caller Caller, req PoolRequest) error {
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
	if err := s.egress.ValidateTemplate(ctx, caller.Tenant, req.Template.NetworkPolicy); err != nil {
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
	if err := s.validatePool(ctx, caller, req); err != nil {
		return nil, err
	}
	if err := imageBuilding(s.cfg.ImageBuilds, req.Template.Image.URI); err != nil {
		return nil, err
	}
	pull, err := s.pool.PrepareImage(ctx, caller.Tenant, req.Template.Image.URI)
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
		// The image is pulled once, in the background; the pool's status shows the
		// progress, and the manager fills the pool once the pull is done.
		s.pool.StartPull(store.PoolKey(p.Tenant, p.Name), req.Template.Image.URI, imageAuth(req.Template), pull)
	} else {
		s.pool.Kick()
	}
	return s.pool.View(ctx, p)
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

// imageAuth is the registry credential of a template's image, for the pool's one pull
// of it (nil when it has none).
func imageAuth(tmpl *CreateRequest) *runtimes.ImageAuth {
	if a := tmpl.Image.Auth; a != nil && a.Username != "" {
		return &runtimes.ImageAuth{Username: a.Username, Password: a.Password}
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
	if err := s.validatePool(ctx, caller, req); err != nil {
		return nil, err
	}
	p, err := s.pool.Lookup(ctx, caller, name)
	if err != nil {
		return nil, err
	}
	tmpl, _ := json.Marshal(templateToStore(req.Template))
	var pull runtimes.ImagePuller
	changed := string(tmpl) != string(p.Template)
	if changed {
		if err := imageBuilding(s.cfg.ImageBuilds, req.Template.Image.URI); err != nil {
			return nil, err
		}
		if pull, err = s.pool.PrepareImage(ctx, caller.Tenant, req.Template.Image.URI); err != nil {
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
		s.pool.StartPull(store.PoolKey(p.Tenant, p.Name), req.Template.Image.URI, imageAuth(req.Template), pull)
	} else {
		if changed {
			// A new template without a pull of its own: an older pull no longer applies.
			s.pool.ClearPull(store.PoolKey(p.Tenant, p.Name))
		}
		s.pool.Kick()
	}
	return s.pool.View(ctx, p)
}

// Pools is the warm pool feature: gateway/api calls it to read and delete pools.
func (s *Service) Pools() *pool.Manager { return s.pool }
