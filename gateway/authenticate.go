package gateway

import (
	"context"
	"crypto/subtle"
	"errors"

	"github.com/sandgate/sandgate/gateway/store"
)

// MissingKeyMessage answers a request without an API key. sandgate always needs one
// (unlike an OpenSandbox server run with api_key = ""), so the answer says where it is.
const MissingKeyMessage = "an API key is required in the OPEN-SANDBOX-API-KEY header (or X-API-Key, or Authorization: Bearer). " +
	"sandgate always wants one: `make run` prints the platform key when it starts and keeps it in .sandgate/api-key " +
	"(or set SANDGATE_API_KEY); an admin issues tenant keys with POST /v1/tenants/{id}/keys"

// Authenticate resolves an API key: the configured platform key, or an issued key.
func (s *Service) Authenticate(ctx context.Context, key string) (Caller, error) {
	if key == "" {
		return Caller{}, Errorf(KindUnauthenticated, CodeMissingAPIKey, "%s", MissingKeyMessage)
	}
	if admin, _ := s.adminKey.Load().(string); admin != "" && subtle.ConstantTimeCompare([]byte(key), []byte(admin)) == 1 {
		return Caller{Tenant: DefaultTenant, Admin: true, KeyID: "admin", KeyRole: RoleAdmin}, nil
	}
	k, err := s.store.LookupKey(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return Caller{}, Errorf(KindUnauthenticated, CodeInvalidAPIKey, "the API key is not valid")
	}
	if err != nil {
		return Caller{}, err
	}
	return Caller{Tenant: k.Tenant, Admin: k.Role == RoleAdmin, KeyID: k.ID, KeyRole: k.Role}, nil
}

// SetAdminKey sets the platform admin key (tenant "default", role admin).
func (s *Service) SetAdminKey(key string) { s.adminKey.Store(key) }
