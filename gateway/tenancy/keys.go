package tenancy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

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
func (m *Manager) CreateKey(ctx context.Context, tenant, role string) (*IssuedKey, error) {
	switch role {
	case principal.RoleAdmin, principal.RoleTenantAdmin, principal.RoleMember, principal.RoleViewer:
	default:
		return nil, invalid("role %q: want admin, tenant-admin, member or viewer", role)
	}
	if tenant != principal.DefaultTenant {
		if _, err := m.GetTenant(ctx, tenant); err != nil {
			return nil, err
		}
	}
	secret := "sg_" + randomHex(24)
	k := &store.APIKey{ID: uuid.NewString(), Tenant: tenant, Role: role, Prefix: secret[:9], CreatedAt: time.Now().UTC()}
	if err := m.store.PutKey(ctx, secret, k); err != nil {
		return nil, err
	}
	return &IssuedKey{ID: k.ID, Key: secret, Role: role, Tenant: tenant, Prefix: k.Prefix, CreatedAt: k.CreatedAt}, nil
}

// ListKeys returns a tenant's keys without their secrets.
func (m *Manager) ListKeys(ctx context.Context, tenant string) ([]IssuedKey, error) {
	keys, err := m.store.ListKeys(ctx, tenant)
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
func (m *Manager) RevokeKey(ctx context.Context, tenant, id string) error {
	err := m.store.RevokeKey(ctx, tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return fault.Errorf(fault.KindNotFound, CodeKeyNotFound, "key %s not found", id)
	}
	if err != nil {
		return err
	}
	m.host.KeyRevoked(ctx, id)
	return nil
}

// randomHex returns n random bytes, hex-encoded.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
