package pool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"time"

	"github.com/sandgate/sandgate/gateway/createreq"
	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// Codes of a pool's definition (gateway/codes.go lists them with the rest).
const (
	CodeExists  = "POOL::ALREADY_EXISTS"
	CodeInvalid = "POOL::INVALID_PARAMETER"
)

// Request is the body of POST /v1/pools and PUT /v1/pools/{name}.
type Request struct {
	Name         string             `json:"name"`
	Template     *createreq.Request `json:"template"`
	CapacitySpec store.Capacity     `json:"capacitySpec"`
}

var nameRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func invalid(format string, args ...any) error {
	return fault.Errorf(fault.KindInvalid, CodeInvalid, format, args...)
}

// validate checks a pool request whole, its template as the core checks a create's
// (Host.CheckTemplate, its networkPolicy judged by the egress policy as a template's):
// the template is stored as sent, so a template refused now is never found refused at
// each member's start.
func (m *Manager) validate(ctx context.Context, caller principal.Caller, req Request) error {
	if !nameRe.MatchString(req.Name) {
		return invalid("name %q: 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit", req.Name)
	}
	if req.Template == nil {
		return invalid("template is required (the fields of a create request: image, entrypoint, resourceLimits, env, metadata)")
	}
	if req.Template.Extensions["poolRef"] != "" {
		return invalid("template.extensions.poolRef: a pool's template cannot claim from a pool")
	}
	if err := m.host.CheckTemplate(ctx, caller, *req.Template); err != nil {
		return err
	}
	c := req.CapacitySpec
	switch {
	case c.BufferMin < 0 || c.BufferMax < 0 || c.PoolMin < 0 || c.PoolMax < 0:
		return invalid("capacitySpec: numbers must not be negative")
	case c.BufferMin > c.BufferMax:
		return invalid("capacitySpec: bufferMin %d exceeds bufferMax %d", c.BufferMin, c.BufferMax)
	case c.PoolMin > c.PoolMax:
		return invalid("capacitySpec: poolMin %d exceeds poolMax %d", c.PoolMin, c.PoolMax)
	case c.BufferMax > c.PoolMax:
		return invalid("capacitySpec: bufferMax %d exceeds poolMax %d", c.BufferMax, c.PoolMax)
	case c.PoolMax > m.cfg.MaxPoolSize:
		return invalid("capacitySpec: poolMax %d exceeds this gateway's limit of %d", c.PoolMax, m.cfg.MaxPoolSize)
	}
	return nil
}

// resolve makes the request's template the one to check and store (Host.ResolveTemplate:
// a snapshot's image for its snapshotId).
func (m *Manager) resolve(ctx context.Context, caller principal.Caller, req *Request) error {
	if req.Template == nil {
		return nil
	}
	tmpl, err := m.host.ResolveTemplate(ctx, caller, *req.Template)
	if err != nil {
		return err
	}
	req.Template = &tmpl
	return nil
}

// Create defines a pool; the manager fills it in the background.
func (m *Manager) Create(ctx context.Context, caller principal.Caller, req Request) (*View, error) {
	if err := m.resolve(ctx, caller, &req); err != nil {
		return nil, err
	}
	if err := m.validate(ctx, caller, req); err != nil {
		return nil, err
	}
	if err := m.host.ImageBuilding(req.Template.Image.URI); err != nil {
		return nil, err
	}
	pull, err := m.PrepareImage(ctx, caller.Tenant, req.Template.Image.URI)
	if err != nil {
		return nil, err
	}
	tmpl, _ := json.Marshal(templateToStore(req.Template))
	now := time.Now().UTC().Format(time.RFC3339Nano)
	p := &store.Pool{Tenant: caller.Tenant, Name: req.Name, Template: tmpl, Capacity: req.CapacitySpec, Version: 1, CreatedAt: now, UpdatedAt: now}
	if err := m.store.PutPool(ctx, p, true); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, fault.Errorf(fault.KindConflict, CodeExists, "pool %q already exists", req.Name)
		}
		return nil, err
	}
	if pull != nil {
		// The image is pulled once, in the background; the pool's status shows the
		// progress, and the manager fills the pool once the pull is done.
		m.StartPull(store.PoolKey(p.Tenant, p.Name), req.Template.Image.URI, imageAuth(req.Template), pull)
	} else {
		m.Kick()
	}
	return m.View(ctx, p)
}

// Update replaces a pool's template and capacity; warm sandboxes of the old template
// are replaced in the background.
func (m *Manager) Update(ctx context.Context, caller principal.Caller, name string, req Request) (*View, error) {
	if req.Name == "" {
		req.Name = name
	}
	if req.Name != name {
		return nil, invalid("name %q in the body differs from %q in the path", req.Name, name)
	}
	if err := m.resolve(ctx, caller, &req); err != nil {
		return nil, err
	}
	if err := m.validate(ctx, caller, req); err != nil {
		return nil, err
	}
	p, err := m.Lookup(ctx, caller, name)
	if err != nil {
		return nil, err
	}
	tmpl, _ := json.Marshal(templateToStore(req.Template))
	var pull runtimes.ImagePuller
	changed := string(tmpl) != string(p.Template)
	if changed {
		if err := m.host.ImageBuilding(req.Template.Image.URI); err != nil {
			return nil, err
		}
		if pull, err = m.PrepareImage(ctx, caller.Tenant, req.Template.Image.URI); err != nil {
			return nil, err
		}
		p.Version++
		p.Template = tmpl
	}
	p.Capacity = req.CapacitySpec
	p.UpdatedAt = time.Now().UTC().Format(time.RFC3339Nano)
	if err := m.store.PutPool(ctx, p, false); err != nil {
		return nil, err
	}
	if pull != nil {
		m.StartPull(store.PoolKey(p.Tenant, p.Name), req.Template.Image.URI, imageAuth(req.Template), pull)
	} else {
		if changed {
			// A new template without a pull of its own: an older pull no longer applies.
			m.ClearPull(store.PoolKey(p.Tenant, p.Name))
		}
		m.Kick()
	}
	return m.View(ctx, p)
}

// withoutImageAuth is a template as it is stored: registry credentials are used for the
// pool's pull only and never written to the store.
func withoutImageAuth(t *createreq.Request) *createreq.Request {
	if t == nil || t.Image == nil || t.Image.Auth == nil {
		return t
	}
	c := *t
	c.Image = &createreq.ImageSpec{URI: t.Image.URI}
	return &c
}

// templateToStore is a pool's template as stored and answered: without the image's
// credentials, and without the raw fields sent as null, which mean what absent means and
// which the API's document never answers as null.
func templateToStore(t *createreq.Request) *createreq.Request {
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
func imageAuth(tmpl *createreq.Request) *runtimes.ImageAuth {
	if a := tmpl.Image.Auth; a != nil && a.Username != "" {
		return &runtimes.ImageAuth{Username: a.Username, Password: a.Password}
	}
	return nil
}
