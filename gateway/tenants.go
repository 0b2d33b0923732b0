package gateway

import (
	"context"
	"errors"
	"regexp"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/store"
)

// TenantRequest is the body of POST /v1/tenants and PATCH /v1/tenants/{id}.
type TenantRequest struct {
	Name   string        `json:"name"`
	Quotas *store.Quotas `json:"quotas,omitempty"`
}

var tenantNameRe = regexp.MustCompile(`^[A-Za-z0-9][-A-Za-z0-9_. ]{0,62}$`)

// CreateTenant makes a tenant (platform admins only, by policy).
func (s *Service) CreateTenant(ctx context.Context, req TenantRequest) (*store.Tenant, error) {
	if !tenantNameRe.MatchString(req.Name) {
		return nil, Errorf(KindInvalid, CodeTenantInvalid, "name %q: 1-63 letters, digits, spaces and -_. starting with a letter or digit", req.Name)
	}
	t := &store.Tenant{ID: uuid.NewString(), Name: req.Name, CreatedAt: time.Now().UTC()}
	if req.Quotas != nil {
		if err := validateQuotas(*req.Quotas); err != nil {
			return nil, err
		}
		t.Quotas = *req.Quotas
	}
	if err := s.store.PutTenant(ctx, t, true); err != nil {
		return nil, err
	}
	return t, nil
}

func validateQuotas(q store.Quotas) error {
	if q.MaxConcurrent < 0 || q.MaxCPUMillis < 0 || q.MaxMemoryBytes < 0 || q.MaxTimeoutSeconds < 0 || q.MaxBatchSize < 0 || q.CreateRate < 0 || q.CreateBurst < 0 {
		return Errorf(KindInvalid, CodeTenantInvalid, "quotas must not be negative")
	}
	return nil
}

// GetTenant returns one tenant.
func (s *Service) GetTenant(ctx context.Context, id string) (*store.Tenant, error) {
	t, err := s.store.GetTenant(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, Errorf(KindNotFound, CodeTenantNotFound, "tenant %s not found", id)
	}
	return t, err
}

// ListTenants returns every tenant.
func (s *Service) ListTenants(ctx context.Context) ([]*store.Tenant, error) {
	return s.store.ListTenants(ctx)
}

// UpdateTenant changes a tenant's name or quotas.
func (s *Service) UpdateTenant(ctx context.Context, id string, req TenantRequest) (*store.Tenant, error) {
	t, err := s.GetTenant(ctx, id)
	if err != nil {
		return nil, err
	}
	if req.Name != "" {
		if !tenantNameRe.MatchString(req.Name) {
			return nil, Errorf(KindInvalid, CodeTenantInvalid, "name %q is not valid", req.Name)
		}
		t.Name = req.Name
	}
	if req.Quotas != nil {
		if err := validateQuotas(*req.Quotas); err != nil {
			return nil, err
		}
		t.Quotas = *req.Quotas
	}
	return t, s.store.PutTenant(ctx, t, false)
}

// IssuedKey is the answer to a key creation: the secret is shown this once.
type IssuedKey struct {
	ID        string    `json:"id"`
	Key       string    `json:"key,omitempty"`
	Role      string    `json:"role"`
	Tenant    string    `json:"tenant"`
	Prefix    string    `json:"prefix"`
	CreatedAt time.Time `json:"createdAt"`
}

// CreateKey issues a key of role for tenant.
func (s *Service) CreateKey(ctx context.Context, tenant, role string) (*IssuedKey, error) {
	switch role {
	case RoleAdmin, RoleTenantAdmin, RoleMember, RoleViewer:
	default:
		return nil, Errorf(KindInvalid, CodeTenantInvalid, "role %q: want admin, tenant-admin, member or viewer", role)
	}
	if tenant != DefaultTenant {
		if _, err := s.GetTenant(ctx, tenant); err != nil {
			return nil, err
		}
	}
	secret := "sg_" + randomToken(24)
	k := &store.APIKey{ID: uuid.NewString(), Tenant: tenant, Role: role, Prefix: secret[:9], CreatedAt: time.Now().UTC()}
	if err := s.store.PutKey(ctx, secret, k); err != nil {
		return nil, err
	}
	return &IssuedKey{ID: k.ID, Key: secret, Role: role, Tenant: tenant, Prefix: k.Prefix, CreatedAt: k.CreatedAt}, nil
}

// ListKeys returns a tenant's keys without their secrets.
func (s *Service) ListKeys(ctx context.Context, tenant string) ([]IssuedKey, error) {
	keys, err := s.store.ListKeys(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]IssuedKey, 0, len(keys))
	for _, k := range keys {
		out = append(out, IssuedKey{ID: k.ID, Role: k.Role, Tenant: k.Tenant, Prefix: k.Prefix, CreatedAt: k.CreatedAt})
	}
	return out, nil
}

// RevokeKey deletes a key; it stops working at once on every gateway.
func (s *Service) RevokeKey(ctx context.Context, tenant, id string) error {
	err := s.store.RevokeKey(ctx, tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return Errorf(KindNotFound, CodeKeyNotFound, "key %s not found", id)
	}
	if err != nil {
		return err
	}
	// Access header values it fetched die with it: here at once, elsewhere when the
	// change arrives (package gateway/access).
	s.access.KeyChanged(id)
	if err := s.store.PublishChange(ctx, access.KeyChangePrefix+id); err != nil {
		s.log.Warn("key revocation not published; other gateways notice it within their binding TTL", "key", id, "err", err)
	}
	return nil
}
