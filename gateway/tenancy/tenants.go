package tenancy

import (
	"context"
	"errors"
	"regexp"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/store"
)

// TenantRequest is the body of POST /v1/tenants and PATCH /v1/tenants/{id}.
type TenantRequest struct {
	Name   string        `json:"name"`
	Quotas *store.Quotas `json:"quotas,omitempty"`
}

var tenantNameRe = regexp.MustCompile(`^[A-Za-z0-9][-A-Za-z0-9_. ]{0,62}$`)

func invalid(format string, args ...any) *fault.Error {
	return fault.Errorf(fault.KindInvalid, CodeTenantInvalid, format, args...)
}

// CreateTenant makes a tenant (platform admins only, by policy).
func (m *Manager) CreateTenant(ctx context.Context, req TenantRequest) (*store.Tenant, error) {
	if !tenantNameRe.MatchString(req.Name) {
		return nil, invalid("name %q: 1-63 letters, digits, spaces and -_. starting with a letter or digit", req.Name)
	}
	t := &store.Tenant{ID: uuid.NewString(), Name: req.Name, CreatedAt: time.Now().UTC()}
	if req.Quotas != nil {
		if err := validateQuotas(*req.Quotas); err != nil {
			return nil, err
		}
		t.Quotas = *req.Quotas
	}
	if err := m.store.PutTenant(ctx, t, true); err != nil {
		return nil, err
	}
	return t, nil
}

func validateQuotas(q store.Quotas) error {
	if q.MaxConcurrent < 0 || q.MaxCPUMillis < 0 || q.MaxMemoryBytes < 0 || q.MaxTimeoutSeconds < 0 || q.MaxBatchSize < 0 || q.CreateRate < 0 || q.CreateBurst < 0 {
		return invalid("quotas must not be negative")
	}
	return nil
}

// GetTenant returns one tenant.
func (m *Manager) GetTenant(ctx context.Context, id string) (*store.Tenant, error) {
	t, err := m.store.GetTenant(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fault.Errorf(fault.KindNotFound, CodeTenantNotFound, "tenant %s not found", id)
	}
	return t, err
}

// ListTenants returns every tenant.
func (m *Manager) ListTenants(ctx context.Context) ([]*store.Tenant, error) {
	return m.store.ListTenants(ctx)
}

// UpdateTenant changes a tenant's name or quotas.
func (m *Manager) UpdateTenant(ctx context.Context, id string, req TenantRequest) (*store.Tenant, error) {
	t, err := m.GetTenant(ctx, id)
	if err != nil {
		return nil, err
	}
	if req.Name != "" {
		if !tenantNameRe.MatchString(req.Name) {
			return nil, invalid("name %q is not valid", req.Name)
		}
		t.Name = req.Name
	}
	if req.Quotas != nil {
		if err := validateQuotas(*req.Quotas); err != nil {
			return nil, err
		}
		t.Quotas = *req.Quotas
	}
	return t, m.store.PutTenant(ctx, t, false)
}
