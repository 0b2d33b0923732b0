package gateway

import (
	"context"

	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/tenancy"
)

// The tenancy feature's vocabulary, named here for the core and its callers (package
// gateway/tenancy).
type (
	// TenantRequest is the body of POST /v1/tenants and PATCH /v1/tenants/{id}.
	TenantRequest = tenancy.TenantRequest
	// IssuedKey is the answer to a key creation: the secret is shown this once.
	IssuedKey = tenancy.IssuedKey
)

// Tenancy is the feature of tenants and their API keys. gateway/api calls it for
// /v1/tenants and /v1/tenants/{id}/keys.
func (s *Service) Tenancy() *tenancy.Manager { return s.tenancy }

// tenancyHost is the core as the tenancy feature sees it (tenancy.Host).
type tenancyHost struct{ s *Service }

// KeyRevoked drops the access header values fetched with the key: here at once,
// elsewhere when the published change arrives (package gateway/access).
func (h tenancyHost) KeyRevoked(ctx context.Context, keyID string) {
	h.s.access.KeyChanged(keyID)
	if err := h.s.store.PublishChange(ctx, access.KeyChangePrefix+keyID); err != nil {
		h.s.log.Warn("key revocation not published; other gateways notice it within their binding TTL", "key", keyID, "err", err)
	}
}

var _ tenancy.Host = tenancyHost{}
